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
use super::replica::{read_verified, Append, ReadFail, ReadPiece, Replica};
use super::throttle::Throttle;
use super::write::Placed;
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
        inner.repair_pass();
    }
}

impl Inner {
    /// A replica failed: never serve it again, and have the repair thread
    /// drop it and copy the chunk elsewhere.
    pub(crate) fn report_bad(&self, handle: u64, server: usize, why: &str, corrupt: bool) {
        let newly = self.servers[server]
            .replica(handle)
            .is_some_and(|r| r.mark_bad());
        if newly {
            if corrupt {
                bump(&self.counters.corruptions);
            }
            log::warn!(
                "gfs: chunk {handle:016x} on chunkserver {server} ({}): {why}; re-replicating",
                self.servers[server].dir.display()
            );
        }
        self.repairs.reports.lock().push((handle, server));
        self.repairs.wake();
    }

    /// Reports what a failed read says about a replica.
    pub(crate) fn report_read_failure(&self, handle: u64, server: usize, f: &ReadFail) {
        match f {
            ReadFail::Corrupt(d) => self.report_bad(handle, server, d, true),
            ReadFail::Io(e) => {
                self.servers[server].gate.stats.read_error();
                self.report_bad(handle, server, &format!("read error: {e}"), false);
                self.heartbeat_signal.notify();
            }
            ReadFail::Short { have } => {
                self.report_bad(handle, server, &format!("holds only {have} bytes"), false)
            }
            // Down server or already known bad: the heartbeat or an earlier
            // report deals with it.
            ReadFail::Unavailable(_) => {}
        }
    }

    /// Drops every reported replica from its chunk.
    pub(crate) fn process_bad_reports(&self) {
        let reports = std::mem::take(&mut *self.repairs.reports.lock());
        for (handle, server) in reports {
            let ctl = {
                let st = self.master.state.lock();
                match st.chunks.get(&handle) {
                    Some(c) => c.ctl.clone(),
                    None => continue,
                }
            };
            let _m = ctl.m.lock();
            let listed = self
                .master
                .state
                .lock()
                .chunks
                .get(&handle)
                .is_some_and(|c| c.locations.contains(&server));
            if listed {
                if let Err(e) = self.drop_replicas_locked(&ctl, &[server]) {
                    log::warn!("gfs: dropping a bad replica of chunk {handle:016x}: {e}");
                }
            } else {
                self.forget_replica(handle, server);
            }
        }
    }

    /// The chunks of live files with fewer usable replicas than the
    /// replication factor (and at least one), most endangered first; and the
    /// number with none at all.
    pub(crate) fn endangered(&self) -> (Vec<(usize, u64)>, usize) {
        let st = self.master.state.lock();
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
                    let server = &self.servers[s];
                    server.serving() && server.replica(*h).is_some_and(|r| !r.is_bad())
                })
                .count();
            if live == 0 {
                lost += 1;
            } else if live < self.replication {
                v.push((live, *h));
            }
        }
        v.sort_unstable();
        (v, lost)
    }

    /// Drops the replicas reported bad, then copies under-replicated chunks.
    /// One pass at a time (two could copy the same chunk twice).
    pub(crate) fn repair_pass(&self) {
        let _one = self.repairs.one_pass.lock();
        self.process_bad_reports();
        self.repair_round();
    }

    /// One pass over the under-replicated chunks, most endangered first,
    /// `repair_parallel` copies at a time.
    fn repair_round(&self) {
        let (todo, _) = self.endangered();
        if todo.is_empty() {
            return;
        }
        self.counters
            .repair_queue
            .store(todo.len() as u64, Ordering::Relaxed);
        {
            let mut p = self.repairs.copying.lock();
            p.round_chunks = todo.len() as u64;
            p.round_done = 0;
        }
        let next = AtomicUsize::new(0);
        let worker = || loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(_, h)) = todo.get(i) else { break };
            if self.stopping() {
                break;
            }
            // A round can take long at its rate: drop newly reported
            // replicas meanwhile (their chunks wait for the next round).
            if !self.repairs.reports.lock().is_empty() {
                self.process_bad_reports();
            }
            self.counters.repair_queue.fetch_sub(1, Ordering::Relaxed);
            self.repairs.copying.lock().active.insert(h, (0, 0));
            match self.repair_chunk(h) {
                Ok(true) => {
                    bump(&self.counters.repaired);
                    self.scrub.repaired(h);
                }
                Ok(false) => {}
                Err(e) => {
                    bump(&self.counters.repair_failures);
                    log::warn!("gfs: re-replicating chunk {h:016x}: {e}");
                }
            }
            let mut p = self.repairs.copying.lock();
            p.active.remove(&h);
            p.round_done += 1;
        };
        let n = self.opts.repair_parallel.clamp(1, todo.len());
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
        self.counters.repair_queue.store(0, Ordering::Relaxed);
    }

    /// Copies chunk `h` to one more chunkserver. Ok(false): nothing to do,
    /// or no source or destination available now.
    fn repair_chunk(&self, h: u64) -> Result<bool> {
        let (ctl, version, locations) = {
            let st = self.master.state.lock();
            let Some(c) = st.chunks.get(&h) else {
                return Ok(false);
            };
            (c.ctl.clone(), c.version, c.locations.clone())
        };
        let (sources, missing) = self.write_set(h)?;
        if !missing.is_empty() {
            let _m = ctl.m.lock();
            self.drop_replicas_locked(&ctl, &missing)?;
            return Ok(false);
        }
        if sources.is_empty() || sources.len() >= self.replication {
            return Ok(false);
        }
        // A server holding a replica that is not current cannot take the copy
        // until that replica is gone.
        let Some(&dest) = self.place(1, &locations, h).first() else {
            return Ok(false);
        };
        if self.servers[dest].replica(h).is_some() {
            self.forget_replica(h, dest);
        }
        // The copy keeps the chunk size and block hash the chunk was made with.
        let layout = sources[0].1.layout();
        let mut made = self.create_replicas(h, version, &[dest], layout, true);
        let Some((_, tmp)) = made.pop() else {
            return Ok(false);
        };
        match self.fill_copy(&ctl, &tmp, dest, &sources) {
            Ok(true) => Ok(true),
            other => {
                self.servers[dest].discard(&tmp);
                other
            }
        }
    }

    /// Copies the chunk into `tmp` and installs it on `dest`.
    fn fill_copy(
        &self,
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
        self.copy_range(tmp, dest, sources, &mut at, ctl, true)?;
        // The catch-up holds up appends: it is not paced.
        let _m = ctl.m.lock();
        self.copy_range(tmp, dest, sources, &mut at, ctl, false)?;
        let (_, copied, _) = at;
        let version = {
            let st = self.master.state.lock();
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
            self.io.run_chains(&[chain]).pop().unwrap_or(Ok(()))
        });
        if let Err(e) = res {
            self.note_write_error(dest, &e);
            return Err(Error::io(&name, e));
        }
        let installed = self.servers[dest].install(&self.io, tmp).map_err(|e| {
            self.note_write_error(dest, &e);
            Error::io(&name, e)
        })?;
        if installed.len() != copied || installed.version() != version || installed.is_bad() {
            self.servers[dest].delete(h);
            return Err(Error::Corruption {
                name,
                detail: "installed copy does not match".into(),
            });
        }
        let mut st = self.master.state.lock();
        match st.chunks.get_mut(&h) {
            Some(c) if !c.locations.contains(&dest) => {
                c.locations.push(dest);
                bump(&self.counters.placements);
            }
            Some(_) => {}
            None => {
                drop(st);
                self.servers[dest].delete(h);
                return Ok(false);
            }
        }
        self.counters
            .repair_bytes
            .fetch_add(copied, Ordering::Relaxed);
        log::info!(
            "gfs: chunk {h:016x}: copied {copied} bytes to chunkserver {dest} ({})",
            self.servers[dest].dir.display()
        );
        Ok(true)
    }

    /// Copies from a source replica into `tmp` up to the chunk's committed
    /// length, switching source when one fails its checks. `at` is (source
    /// index, bytes copied, partial last block); `paced` keeps to `repair_rate`.
    fn copy_range(
        &self,
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
            if self.stopping() {
                return Err(Error::io(&name, io::Error::other("shutting down")));
            }
            let n = COPY_PIECE.min(target - *copied);
            if let Some(p) = self.repairs.copying.lock().active.get_mut(&h) {
                *p = (*copied, target);
            }
            if paced && !self.repairs.throttle.take(n, || self.stopping()) {
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
            let data = match read_verified(&self.io, &[piece]).pop() {
                Some(Ok(d)) => d,
                Some(Err(f)) => {
                    self.report_read_failure(h, *s, &f);
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
                self.io.run_chains(&[chain]).pop().unwrap_or(Ok(()))
            });
            if let Err(e) = res {
                self.note_write_error(dest, &e);
                return Err(Error::io(&name, e));
            }
            tmp.commit_append(*copied + n, &sums);
            tmp.gate.stats.write(n);
            sums.apply_tail(tail);
            *copied += n;
        }
    }
}
