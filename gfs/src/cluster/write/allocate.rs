//! Chunk allocation: a file's last chunk, new chunks at its end (handles
//! reserved in the master's log a batch at a time), and the placement and
//! creation of their replicas.

use super::{open_all, unavailable, Placed};
use crate::cluster::chunk;
use crate::cluster::lease::Lease;
use crate::cluster::master::ChunkCtl;
use crate::cluster::oplog::Op;
use crate::cluster::Inner;
use crate::{Error, Result};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Chunk handles reserved per log record (see [`Op::ReserveHandles`]).
const HANDLE_RESERVATION: u64 = 1024;

impl Inner {
    /// The file's last chunk and the file offset where it starts; gives the
    /// file its first chunk if it has none.
    pub(super) fn last_chunk(&self, id: u64, name: &str) -> Result<(Arc<ChunkCtl>, u64)> {
        loop {
            {
                let st = self.master.state.lock();
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
            self.extend_file(id, name, None)?;
        }
    }

    /// Chunkservers for `n` new replicas, least loaded first, none in `exclude`.
    pub(crate) fn place(&self, n: usize, exclude: &[usize], salt: u64) -> Vec<usize> {
        let count = self.servers.len().max(1);
        let mut c: Vec<(usize, usize, usize)> = self
            .servers
            .iter()
            .filter(|s| s.placeable() && !exclude.contains(&s.id))
            .map(|s| {
                let spin = (s.id + salt as usize) % count;
                (s.replica_count(), spin, s.id)
            })
            .collect();
        c.sort_unstable();
        c.into_iter().take(n).map(|(.., id)| id).collect()
    }

    /// Creates empty replicas of chunk `handle` on `servers` (headers
    /// written in one submission; made durable by their first sync);
    /// returns the ones that worked.
    pub(crate) fn create_replicas(
        &self,
        handle: u64,
        version: u64,
        servers: &[usize],
        layout: chunk::Layout,
        tmp: bool,
    ) -> Vec<Placed> {
        let mut made = Vec::new();
        for &s in servers {
            match self.servers[s].new_replica(handle, version, layout, tmp) {
                Ok((r, header)) => made.push((s, r, header)),
                Err(e) => self.note_write_error(s, &e),
            }
        }
        let opens = open_all(made.iter().map(|m| &*m.1), false);
        let res = self.run_opened(&opens, |i, o, c| o.init_chain(c, &made[i].2));
        drop(opens);
        let mut ok = Vec::new();
        for ((s, r, ..), res) in made.into_iter().zip(res) {
            match res {
                Ok(()) => ok.push((s, r)),
                Err(e) => {
                    self.note_write_error(s, &e);
                    self.servers[s].discard(&r);
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
        &self,
        id: u64,
        name: &str,
        prev: Option<(&Arc<ChunkCtl>, u64)>,
    ) -> Result<()> {
        let handle = {
            let mut st = self.master.state.lock();
            if st.next_handle >= st.reserved {
                let upto = st.next_handle + HANDLE_RESERVATION;
                self.master
                    .commit(&mut st, Op::ReserveHandles { upto }, true)?;
            }
            let h = st.next_handle;
            st.next_handle += 1;
            st.allocating.insert(h);
            h
        };
        let res = self.extend_with(id, name, prev, handle);
        self.master.state.lock().allocating.remove(&handle);
        res
    }

    fn extend_with(
        &self,
        id: u64,
        name: &str,
        prev: Option<(&Arc<ChunkCtl>, u64)>,
        handle: u64,
    ) -> Result<()> {
        let servers = self.place(self.replication, &[], handle);
        if servers.is_empty() {
            // No chunkserver can take a new chunk: all full or down.
            return Err(Error::io(name, io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        let made = self.create_replicas(handle, 1, &servers, self.layout, false);
        if made.is_empty() {
            return Err(unavailable(
                name,
                "creating a chunk failed on every chunkserver",
            ));
        }
        let discard = |made: &[Placed]| {
            for (s, r) in made {
                self.servers[*s].discard(r);
            }
        };
        let mut st = self.master.state.lock();
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
        if let Err(e) = self.master.commit(&mut st, op, false) {
            drop(st);
            discard(&made);
            return Err(e);
        }
        let lease = Lease::new(made[0].0, Instant::now(), self.opts.lease);
        if let Some(c) = st.chunks.get_mut(&handle) {
            c.locations = made.iter().map(|(s, _)| *s).collect();
            c.ctl
                .capacity
                .store(self.opts.chunk_size, Ordering::Release);
            let mut m = c.ctl.m.lock();
            m.tail = Some(Vec::new());
            m.tail_hash = None;
            m.lease = Some(lease);
        }
        for (s, r) in made {
            self.servers[s].add(r);
        }
        Ok(())
    }
}
