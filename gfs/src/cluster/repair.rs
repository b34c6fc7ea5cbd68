//! Keeping every chunk at its replication factor.
//!
//! Readers, writers and the scrubber report bad replicas here; the repair
//! thread drops them (with a new version if the chunk can still change) and
//! copies under-replicated chunks to other chunkservers, the chunks with the
//! fewest live replicas first, while reads and writes go on. A copy is
//! written under a temporary name, read from a verified source replica, and
//! catches up with appends under the chunk's lock before it is installed;
//! a copy interrupted by a crash is deleted when its server starts.

use super::chunk;
use super::replica::{read_verified, Append, ReadPiece, Replica};
use super::throttle::Throttle;
use super::write::{
    create_replicas, drop_replicas_locked, forget_replica, note_write_error, write_set, Placed,
};
use super::{bump, Inner, Signal};
use crate::io::Chain;
use crate::{Error, Result};
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// What re-replication is doing, for status lines.
#[derive(Default)]
pub(crate) struct Copying {
    /// Chunks being copied now: (bytes copied, bytes to copy).
    pub(crate) active: BTreeMap<u64, (u64, u64)>,
    /// Chunks in the current (or last) round, and how many are done.
    pub(crate) round_chunks: u64,
    pub(crate) round_done: u64,
}

/// The repair thread's own state: the bad replicas reported to it, what
/// wakes it, its pace, and what it is copying.
pub(crate) struct Repairs {
    /// Replicas found bad by readers or writers, for the repair thread to drop.
    reports: Mutex<Vec<(u64, usize)>>,
    /// One re-replication pass at a time (two could copy the same chunk).
    one_pass: Mutex<()>,
    signal: Signal,
    throttle: Throttle,
    copying: Mutex<Copying>,
}

impl Repairs {
    /// Copies at most `rate` bytes a second (0: no limit).
    pub(crate) fn new(rate: u64) -> Repairs {
        Repairs {
            reports: Mutex::new(Vec::new()),
            one_pass: Mutex::new(()),
            signal: Signal::default(),
            throttle: Throttle::new(rate),
            copying: Mutex::new(Copying::default()),
        }
    }

    /// Wakes the repair thread: a replica or a server may need it.
    pub(crate) fn wake(&self) {
        self.signal.notify();
    }

    /// Queues replica `server` of chunk `handle`, found bad, for the repair
    /// thread to drop, and wakes it.
    pub(crate) fn report(&self, handle: u64, server: usize) {
        self.reports.lock().push((handle, server));
        self.wake();
    }

    /// Reports waiting for the repair thread.
    pub(crate) fn pending_reports(&self) -> usize {
        self.reports.lock().len()
    }

    /// The copy budget per second (0: none).
    pub(crate) fn rate(&self) -> u64 {
        self.throttle.rate()
    }

    /// The chunks being copied and the round's progress.
    pub(crate) fn copying(&self) -> MutexGuard<'_, Copying> {
        self.copying.lock()
    }
}

/// Bytes copied per read while re-replicating.
const COPY_PIECE: u64 = 16 * chunk::BLOCK;

pub(crate) fn repair_loop(inner: Arc<Inner>) {
    while !inner.stopping() {
        inner.repairs.signal.wait(inner.opts.heartbeat);
        if inner.stopping() {
            break;
        }
        repair_pass(&inner);
    }
}

/// Drops every reported replica from its chunk.
pub(crate) fn process_bad_reports(inner: &Inner) {
    let reports = std::mem::take(&mut *inner.repairs.reports.lock());
    for (handle, server) in reports {
        let ctl = {
            let st = inner.master.state.lock();
            match st.chunks.get(&handle) {
                Some(c) => c.ctl.clone(),
                None => continue,
            }
        };
        let _m = ctl.m.lock();
        let listed = inner
            .master
            .state
            .lock()
            .chunks
            .get(&handle)
            .is_some_and(|c| c.locations.contains(&server));
        if listed {
            if let Err(e) = drop_replicas_locked(inner, &ctl, &[server]) {
                log::warn!("gfs: dropping a bad replica of chunk {handle:016x}: {e}");
            }
        } else {
            forget_replica(inner, handle, server);
        }
    }
}

/// The chunks of live files with fewer usable replicas than the
/// replication factor (and at least one), most endangered first; and the
/// number with none at all.
pub(crate) fn endangered(inner: &Inner) -> (Vec<(usize, u64)>, usize) {
    let st = inner.master.state.lock();
    let mut v = Vec::new();
    let mut lost = 0;
    for (h, c) in &st.chunks {
        if st.files.get(&c.file).is_none_or(|f| f.name.is_none()) {
            continue;
        }
        let live = c
            .locations
            .iter()
            .filter(|&&s| {
                let server = &inner.servers[s];
                server.serving() && server.replica(*h).is_some_and(|r| !r.is_bad())
            })
            .count();
        if live == 0 {
            lost += 1;
        } else if live < inner.replication {
            v.push((live, *h));
        }
    }
    v.sort_unstable();
    (v, lost)
}

/// Drops the replicas reported bad, then copies under-replicated chunks.
/// One pass at a time (two could copy the same chunk twice).
pub(crate) fn repair_pass(inner: &Inner) {
    let _one = inner.repairs.one_pass.lock();
    process_bad_reports(inner);
    repair_round(inner);
}

/// One pass over the under-replicated chunks, most endangered first,
/// `repair_parallel` copies at a time.
fn repair_round(inner: &Inner) {
    let (todo, _) = endangered(inner);
    if todo.is_empty() {
        return;
    }
    inner
        .counters
        .repair_queue
        .store(todo.len() as u64, Ordering::Relaxed);
    {
        let mut p = inner.repairs.copying.lock();
        p.round_chunks = todo.len() as u64;
        p.round_done = 0;
    }
    let next = AtomicUsize::new(0);
    let worker = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&(_, h)) = todo.get(i) else { break };
        if inner.stopping() {
            break;
        }
        // A round can take long at its rate: drop newly reported
        // replicas meanwhile (their chunks wait for the next round).
        if !inner.repairs.reports.lock().is_empty() {
            process_bad_reports(inner);
        }
        inner.counters.repair_queue.fetch_sub(1, Ordering::Relaxed);
        inner.repairs.copying.lock().active.insert(h, (0, 0));
        match repair_chunk(inner, h) {
            Ok(true) => {
                bump(&inner.counters.repaired);
                inner.scrub.repaired(h);
            }
            Ok(false) => {}
            Err(e) => {
                bump(&inner.counters.repair_failures);
                log::warn!("gfs: re-replicating chunk {h:016x}: {e}");
            }
        }
        let mut p = inner.repairs.copying.lock();
        p.active.remove(&h);
        p.round_done += 1;
    };
    let n = inner.opts.repair_parallel.clamp(1, todo.len());
    std::thread::scope(|sc| {
        for _ in 1..n {
            let spawned = std::thread::Builder::new()
                .name("gfs-copy".into())
                .spawn_scoped(sc, worker);
            if spawned.is_err() {
                break;
            }
        }
        worker();
    });
    inner.counters.repair_queue.store(0, Ordering::Relaxed);
}

/// Copies chunk `h` to one more chunkserver. Ok(false): nothing to do,
/// or no source or destination available now.
fn repair_chunk(inner: &Inner, h: u64) -> Result<bool> {
    let (ctl, version, locations) = {
        let st = inner.master.state.lock();
        let Some(c) = st.chunks.get(&h) else {
            return Ok(false);
        };
        (c.ctl.clone(), c.version, c.locations.clone())
    };
    let (sources, missing) = write_set(inner, h)?;
    if !missing.is_empty() {
        let _m = ctl.m.lock();
        drop_replicas_locked(inner, &ctl, &missing)?;
        return Ok(false);
    }
    if sources.is_empty() || sources.len() >= inner.replication {
        return Ok(false);
    }
    // A server holding a replica that is not current cannot take the copy
    // until that replica is gone.
    let Some(&dest) = inner.servers.place(1, &locations, h).first() else {
        return Ok(false);
    };
    if inner.servers[dest].replica(h).is_some() {
        forget_replica(inner, h, dest);
    }
    // The copy keeps the chunk size and block hash the chunk was made with.
    let layout = sources[0].1.layout();
    let mut made = create_replicas(inner, h, version, &[dest], layout, true);
    let Some((_, tmp)) = made.pop() else {
        return Ok(false);
    };
    match fill_copy(inner, &ctl, &tmp, dest, &sources) {
        Ok(true) => Ok(true),
        other => {
            inner.servers[dest].discard(&tmp);
            other
        }
    }
}

/// Copies the chunk into `tmp` and installs it on `dest`.
fn fill_copy(
    inner: &Inner,
    ctl: &super::master::ChunkCtl,
    tmp: &Arc<Replica>,
    dest: usize,
    sources: &[Placed],
) -> Result<bool> {
    let h = ctl.handle;
    let name = format!("chunk {h:016x}");
    let (copied, tail, src) = (0u64, Vec::new(), 0usize);
    // Most of the copy runs while appends go on; the rest under the lock.
    let mut at = (src, copied, tail);
    copy_range(inner, tmp, dest, sources, &mut at, ctl, true)?;
    // The catch-up holds up appends: it is not paced.
    let _m = ctl.m.lock();
    copy_range(inner, tmp, dest, sources, &mut at, ctl, false)?;
    let (_, copied, _) = at;
    let version = {
        let st = inner.master.state.lock();
        match st.chunks.get(&h) {
            Some(c) => c.version,
            None => return Ok(false),
        }
    };
    let sb = tmp.superblock(version);
    let res = tmp.open(false).and_then(|o| {
        let mut chain = Chain::new();
        if tmp.version() != version {
            o.version_chain(&mut chain, &sb);
        }
        o.sync_chain(&mut chain);
        inner.io.run_chains(&[chain]).pop().unwrap_or(Ok(()))
    });
    if let Err(e) = res {
        note_write_error(inner, dest, &e);
        return Err(Error::io(&name, e));
    }
    let installed = inner.servers[dest].install(&inner.io, tmp).map_err(|e| {
        note_write_error(inner, dest, &e);
        Error::io(&name, e)
    })?;
    if installed.len() != copied || installed.version() != version || installed.is_bad() {
        inner.servers[dest].delete(h);
        return Err(Error::Corruption {
            name,
            detail: "installed copy does not match".into(),
        });
    }
    let mut st = inner.master.state.lock();
    match st.chunks.get_mut(&h) {
        Some(c) if !c.locations.contains(&dest) => {
            c.locations.push(dest);
            c.placement_changed();
            bump(&inner.counters.placements);
        }
        Some(_) => {}
        None => {
            drop(st);
            inner.servers[dest].delete(h);
            return Ok(false);
        }
    }
    inner
        .counters
        .repair_bytes
        .fetch_add(copied, Ordering::Relaxed);
    log::info!(
        "gfs: chunk {h:016x}: copied {copied} bytes to chunkserver {dest} ({})",
        inner.servers[dest].dir.display()
    );
    Ok(true)
}

/// Copies from a source replica into `tmp` up to the chunk's committed
/// length, switching source when one fails its checks. `at` is (source
/// index, bytes copied, partial last block); `paced` keeps to `repair_rate`.
fn copy_range(
    inner: &Inner,
    tmp: &Replica,
    dest: usize,
    sources: &[Placed],
    at: &mut (usize, u64, Vec<u8>),
    ctl: &super::master::ChunkCtl,
    paced: bool,
) -> Result<()> {
    let h = ctl.handle;
    let (src, copied, tail) = (&mut at.0, &mut at.1, &mut at.2);
    let name = format!("chunk {h:016x}");
    loop {
        let target = ctl.len.load(Ordering::Acquire);
        if *copied >= target {
            return Ok(());
        }
        if inner.stopping() {
            return Err(Error::io(&name, io::Error::other("shutting down")));
        }
        let n = COPY_PIECE.min(target - *copied);
        if let Some(p) = inner.repairs.copying.lock().active.get_mut(&h) {
            *p = (*copied, target);
        }
        if paced && !inner.repairs.throttle.take(n, || inner.stopping()) {
            return Err(Error::io(&name, io::Error::other("shutting down")));
        }
        let Some((s, r)) = sources.get(*src) else {
            return Err(Error::io(&name, io::Error::other("no good source replica")));
        };
        let piece = ReadPiece {
            replica: r,
            offset: *copied,
            len: n as usize,
        };
        let data = match read_verified(&inner.io, &[piece]).pop() {
            Some(Ok(d)) => d,
            Some(Err(f)) => {
                inner.report_read_failure(h, *s, &f);
                *src += 1;
                continue;
            }
            None => return Err(Error::io(&name, io::Error::other("read returned nothing"))),
        };
        let sums = chunk::append_sums(tmp.layout().sum, *copied, tail, &[&data]);
        let enc = sums.encoded();
        let res = tmp.open(false).and_then(|o| {
            let mut chain = Chain::new();
            let how = Append {
                sync: false,
                zeros: false,
                mapped_entries: false,
            };
            o.append_chain(&mut chain, *copied, &[&data], &enc, how);
            inner.io.run_chains(&[chain]).pop().unwrap_or(Ok(()))
        });
        if let Err(e) = res {
            note_write_error(inner, dest, &e);
            return Err(Error::io(&name, e));
        }
        tmp.commit_append(*copied + n, &sums);
        tmp.gate.stats.write(n);
        sums.apply_tail(tail, &[&data]);
        *copied += n;
    }
}
