//! Chunk allocation: a file's last chunk, new chunks at its end (handles
//! reserved in the master's log a batch at a time), and the placement and
//! creation of their replicas.

use super::{note_write_error, open_all, run_opened, unavailable, Placed};
use crate::cluster::chunk;
use crate::cluster::lease::{Lease, Tick};
use crate::cluster::master::ChunkCtl;
use crate::cluster::oplog::Op;
use crate::cluster::Inner;
use crate::{Error, Result};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Chunk handles reserved per log record (see [`Op::ReserveHandles`]).
const HANDLE_RESERVATION: u64 = 1024;

/// The file's last chunk and the file offset where it starts; gives the
/// file its first chunk if it has none.
pub(super) fn last_chunk(inner: &Inner, id: u64, name: &str) -> Result<(Arc<ChunkCtl>, u64)> {
    loop {
        {
            let st = inner.master.state.lock();
            let f = st
                .files
                .get(&id)
                .ok_or_else(|| Error::NotFound(name.to_string()))?;
            if let Some((last, before)) = f.chunks.split_last() {
                let start: u64 = before
                    .iter()
                    .filter_map(|h| st.chunks.get(h))
                    .map(|c| c.sealed_len.unwrap_or(0))
                    .sum();
                let c = st
                    .chunks
                    .get(last)
                    .ok_or_else(|| unavailable(name, "chunk missing from the master"))?;
                return Ok((c.ctl.clone(), start));
            }
        }
        extend_file(inner, id, name, None)?;
    }
}

/// Creates empty replicas of chunk `handle` on `servers` (headers
/// written in one submission; made durable by their first sync);
/// returns the ones that worked.
pub(crate) fn create_replicas(
    inner: &Inner,
    handle: u64,
    version: u64,
    servers: &[usize],
    layout: chunk::Layout,
    tmp: bool,
) -> Vec<Placed> {
    let mut made = Vec::new();
    for &s in servers {
        match inner.servers[s].new_replica(handle, version, layout, tmp) {
            Ok((r, header)) => made.push((s, r, header)),
            Err(e) => note_write_error(inner, s, &e),
        }
    }
    let opens = open_all(made.iter().map(|m| &*m.1), false);
    let res = run_opened(inner, &opens, |i, o, c| o.init_chain(c, &made[i].2));
    drop(opens);
    let mut ok = Vec::new();
    for ((s, r, ..), res) in made.into_iter().zip(res) {
        match res {
            Ok(()) => ok.push((s, r)),
            Err(e) => {
                note_write_error(inner, s, &e);
                inner.servers[s].discard(&r);
            }
        }
    }
    ok
}

/// Adds a chunk at the end of file `id`. With `prev` (the current last
/// chunk, whose lock the caller holds, and its length) that chunk is
/// sealed at that length in the same log record. Returns Ok also when
/// another writer extended the file first.
pub(super) fn extend_file(
    inner: &Inner,
    id: u64,
    name: &str,
    prev: Option<(&Arc<ChunkCtl>, u64)>,
) -> Result<()> {
    let handle = {
        let mut st = inner.master.state.lock();
        if st.next_handle >= st.reserved {
            let upto = st.next_handle + HANDLE_RESERVATION;
            inner
                .master
                .commit(&mut st, Op::ReserveHandles { upto }, true)?;
        }
        let h = st.next_handle;
        st.next_handle += 1;
        st.allocating.insert(h);
        h
    };
    let res = extend_with(inner, id, name, prev, handle);
    inner.master.state.lock().allocating.remove(&handle);
    res
}

fn extend_with(
    inner: &Inner,
    id: u64,
    name: &str,
    prev: Option<(&Arc<ChunkCtl>, u64)>,
    handle: u64,
) -> Result<()> {
    let servers = inner.servers.place(inner.replication, &[], handle);
    if servers.is_empty() {
        // No chunkserver can take a new chunk: all full or down.
        return Err(Error::io(name, io::Error::from_raw_os_error(libc::ENOSPC)));
    }
    let made = create_replicas(inner, handle, 1, &servers, inner.layout, false);
    if made.is_empty() {
        return Err(unavailable(
            name,
            "creating a chunk failed on every chunkserver",
        ));
    }
    let discard = |made: &[Placed]| {
        for (s, r) in made {
            inner.servers[*s].discard(r);
        }
    };
    let mut st = inner.master.state.lock();
    let Some(f) = st.files.get(&id) else {
        drop(st);
        discard(&made);
        return Err(Error::NotFound(name.to_string()));
    };
    let still_last = match (prev, f.chunks.last()) {
        (None, None) => true,
        (Some((ctl, _)), Some(&h)) => h == ctl.handle,
        _ => false,
    };
    if !still_last {
        drop(st);
        discard(&made);
        return Ok(());
    }
    let op = Op::AddChunk {
        file: id,
        handle,
        prev_len: prev.map(|p| p.1),
    };
    if let Err(e) = inner.master.commit(&mut st, op, false) {
        drop(st);
        discard(&made);
        return Err(e);
    }
    let lease = Lease::new(made[0].0, Tick::now(), inner.opts.lease);
    if let Some(c) = st.chunks.get_mut(&handle) {
        c.locations = made.iter().map(|(s, _)| *s).collect();
        c.placement_changed();
        c.ctl
            .capacity
            .store(inner.opts.chunk_size, Ordering::Release);
        let mut m = c.ctl.m.lock();
        m.tail = Some(Vec::new());
        m.tail_hash = None;
        m.lease = Some(lease);
    }
    for (s, r) in made {
        inner.servers[s].add(r);
    }
    Ok(())
}
