//! The commit log of one tablet server: numbered files in a directory,
//! written by two *lanes* (the paper's two log-writing threads, section 6),
//! each with a thread and a current file; one lane is active.
//!
//! An append is handed to the active lane; if it has not completed within
//! `slow_threshold` (a GFS latency spike) or it fails, the same records are
//! handed to the other lane, which becomes the active one, and the append
//! returns as soon as either lane has written them. A record may thus end
//! up in both files: replay merges the files by sequence number and elides
//! the copies.
//!
//! An unsynced append may also be written by its caller, into an idle
//! lane's file taken while the caller still holds what numbers its records
//! (the tablet server's commit lock; see [`CommitLog::reserve_inline`]): the
//! next append can then be numbered, and written into the other lane, while
//! this one is being written. Files are taken in sequence order, so each
//! file stays in it.
//!
//! Unsynced appends are kept in memory until their file is synced (a sync
//! on the other lane must write them again first). So that this memory, and
//! what a machine crash can take, stay bounded without callers ever syncing,
//! a lane's thread syncs its file once `sync_bytes` were appended unsynced.
//!
//! Files are never appended to after a restart (a file from a crashed run may
//! end in a torn write); `open` starts fresh files. A lane rolls to a new file
//! when its file exceeds `roll_size`, or after a failed write.
//!
//! Deletion: every file's highest sequence number is tracked, raised *before*
//! a write is issued, so it covers whatever may be on disk. Files from
//! earlier runs are scanned (or learnt during replay) before they can be
//! deleted. A lane's current file is never deleted; a file stops being current
//! only once its last write has completed.
//!
//! - `shared.rs`: the files and what each lane holds unsynced;
//! - `lanes.rs`: a lane, its thread and channel.

mod lanes;
mod shared;
#[cfg(test)]
mod tests;

use super::list_logs;
use super::reader::LogReader;
use super::record::LogRecord;
#[cfg(test)]
use super::replay::{replay_files, ReplayReport};
use super::writer::LogWriter;
use crate::key::SeqNo;
use crate::{Error, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use gfs::FileStore;
use lanes::Lane;
use parking_lot::{Condvar, Mutex};
use shared::{FileInfo, Files, Shared};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Settings of a [`CommitLog`].
#[derive(Debug, Clone)]
pub struct CommitLogOptions {
    /// A lane starts a new file once its current one is at least this big.
    pub roll_size: u64,
    /// An append slower than this moves logging to the other lane.
    pub slow_threshold: Duration,
    /// A lane syncs its file, off the caller's path, once this many bytes
    /// were appended to it unsynced.
    pub sync_bytes: u64,
}

impl Default for CommitLogOptions {
    fn default() -> Self {
        CommitLogOptions {
            roll_size: 64 * 1024 * 1024,
            slow_threshold: Duration::from_millis(200),
            // While a lane syncs (on the chunk layer, three replicas'
            // fdatasyncs) the other takes every append: syncing every
            // megabyte cost unsynced writes 20–30% of their rate.
            sync_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Counters for status files and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitLogStats {
    /// Calls to `append` that succeeded.
    pub appends: u64,
    /// Records appended.
    pub records: u64,
    /// Payload bytes appended.
    pub bytes: u64,
    /// Appends that asked for a sync.
    pub syncs: u64,
    /// Times logging moved to the other lane (a slow or failed write, or
    /// an unsynced append finding the active lane busy rolling or syncing).
    pub switches: u64,
    /// New files started by rolling.
    pub rolls: u64,
    /// Syncs a lane did by itself after `sync_bytes` unsynced bytes.
    pub background_syncs: u64,
    /// The lane now receiving appends (0 or 1).
    pub active_lane: usize,
    /// Log files known (live and old).
    pub files: usize,
}

/// The commit log of one tablet server.
pub struct CommitLog {
    shared: Arc<Shared>,
    lanes: [Lane; 2],
    active: AtomicUsize,
    /// Appends are issued (and inline ones take their file) one at a time,
    /// so each file stays in sequence order.
    append_lock: Mutex<()>,
    /// Inline appends taken and not yet done (a repeat on the other lane
    /// included); [`CommitLog::wait_inline`] waits for none.
    inflight: AtomicUsize,
    inflight_lock: Mutex<()>,
    inflight_done: Condvar,
    appends: AtomicU64,
    records: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    switches: AtomicU64,
}

impl CommitLog {
    /// Opens the log in `dir`: existing files are kept for replay, and two
    /// new files (one per lane) receive appends.
    pub fn open(store: Arc<dyn FileStore>, dir: &str, opts: CommitLogOptions) -> Result<Self> {
        let dir = dir.trim_end_matches('/').to_string();
        let existing = list_logs(&*store, &dir)?;
        let next_number = existing.last().map_or(1, |(n, _)| n + 1);
        let map = existing
            .into_iter()
            .map(|(n, _)| {
                (
                    n,
                    FileInfo {
                        max_seq: None,
                        lane: None,
                    },
                )
            })
            .collect();
        let shared = Arc::new(Shared {
            store,
            dir,
            opts,
            files: Mutex::new(Files { map, next_number }),
            rolls: AtomicU64::new(0),
            background_syncs: AtomicU64::new(0),
            unsynced: Default::default(),
        });
        let lanes = [Lane::start(&shared, 0)?, Lane::start(&shared, 1)?];
        Ok(CommitLog {
            shared,
            lanes,
            active: AtomicUsize::new(0),
            append_lock: Mutex::new(()),
            inflight: AtomicUsize::new(0),
            inflight_lock: Mutex::new(()),
            inflight_done: Condvar::new(),
            appends: AtomicU64::new(0),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            switches: AtomicU64::new(0),
        })
    }

    /// Whether each append is durable when it returns (see
    /// [`FileStore::durable_appends`]): a sync then adds nothing.
    pub fn durable_appends(&self) -> bool {
        self.shared.store.durable_appends()
    }

    /// Reads every log file in the directory and calls `f`, in sequence
    /// order and once per record, with each record that has an entry with
    /// `seq > min_seq`. Meant for startup, before the first append.
    #[cfg(test)]
    pub fn replay(
        &self,
        min_seq: SeqNo,
        f: impl FnMut(LogRecord) -> Result<()>,
    ) -> Result<ReplayReport> {
        let files: Vec<(u64, String)> = {
            let f = self.shared.files.lock();
            f.map.keys().map(|&n| (n, self.shared.name(n))).collect()
        };
        let (report, maxima) = replay_files(&*self.shared.store, &files, min_seq, f)?;
        let mut f = self.shared.files.lock();
        for (n, max) in maxima {
            if let Some(info) = f.map.get_mut(&n) {
                info.max_seq = Some(info.max_seq.unwrap_or(0).max(max));
            }
        }
        Ok(report)
    }

    /// Deletes the log files all of whose entries have `seq <= min_live_seq`
    /// (the caller guarantees those are safe in SSTables). The lanes' current
    /// files are kept. Returns the names deleted.
    pub fn delete_obsolete(&self, min_live_seq: SeqNo) -> Result<Vec<String>> {
        let candidates = self.old_files();
        let mut deleted = Vec::new();
        for (number, known) in candidates {
            let name = self.shared.name(number);
            let Some(max) = self.max_seq_of(number, known) else {
                continue;
            };
            if max > min_live_seq {
                continue;
            }
            match self.shared.store.delete(&name) {
                Ok(()) | Err(gfs::Error::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
            self.shared.files.lock().map.remove(&number);
            deleted.push(name);
        }
        Ok(deleted)
    }

    /// The files no lane writes, oldest first, with the highest sequence
    /// number each may hold where known.
    fn old_files(&self) -> Vec<(u64, Option<SeqNo>)> {
        let f = self.shared.files.lock();
        f.map
            .iter()
            .filter(|(_, i)| i.lane.is_none())
            .map(|(&n, i)| (n, i.max_seq))
            .collect()
    }

    /// The highest sequence number in old file `number` (`known` if the
    /// file's record says it, else read from the file once and recorded);
    /// None when the file cannot be read.
    fn max_seq_of(&self, number: u64, known: Option<SeqNo>) -> Option<SeqNo> {
        if known.is_some() {
            return known;
        }
        let name = self.shared.name(number);
        match scan_max_seq(&*self.shared.store, &name) {
            Ok(m) => {
                if let Some(i) = self.shared.files.lock().map.get_mut(&number) {
                    i.max_seq = Some(m);
                }
                Some(m)
            }
            Err(e) => {
                log::warn!("{name}: cannot scan, keeping it: {e}");
                None
            }
        }
    }

    /// Where more than `keep` old files (those no lane writes) are kept:
    /// the lowest sequence number such that, once every entry up to it is
    /// in SSTables, [`CommitLog::delete_obsolete`] leaves `keep` of them
    /// (the two lanes' files interleave in sequence numbers, so that is the
    /// files' maxima in order, not their numbers). None when there are no
    /// more than `keep`; a file that cannot be read is kept and counted.
    pub fn retention_target(&self, keep: usize) -> Option<SeqNo> {
        let old = self.old_files();
        if old.len() <= keep {
            return None;
        }
        let files = old.len();
        let mut maxima: Vec<SeqNo> = old
            .into_iter()
            .filter_map(|(n, known)| self.max_seq_of(n, known))
            .collect();
        let unreadable = files - maxima.len();
        let excess = maxima.len().checked_sub(keep.saturating_sub(unreadable))?;
        if excess == 0 {
            return None;
        }
        maxima.sort_unstable();
        Some(maxima[excess - 1])
    }

    /// Names of the two lanes' current files, lane 0 first.
    #[cfg(test)]
    pub fn current_files(&self) -> [String; 2] {
        let f = self.shared.files.lock();
        let mut out = [String::new(), String::new()];
        for (&n, info) in &f.map {
            if let Some(l) = info.lane {
                out[l] = self.shared.name(n);
            }
        }
        out
    }

    /// Names of every log file known, oldest first.
    #[cfg(test)]
    pub fn files(&self) -> Vec<String> {
        let f = self.shared.files.lock();
        f.map.keys().map(|&n| self.shared.name(n)).collect()
    }

    pub fn dir(&self) -> &str {
        &self.shared.dir
    }

    pub fn stats(&self) -> CommitLogStats {
        CommitLogStats {
            appends: self.appends.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            switches: self.switches.load(Ordering::Relaxed),
            rolls: self.shared.rolls.load(Ordering::Relaxed),
            background_syncs: self.shared.background_syncs.load(Ordering::Relaxed),
            active_lane: self.active.load(Ordering::Relaxed),
            files: self.shared.files.lock().map.len(),
        }
    }
    /// [`CommitLog::append`] of records not yet encoded (the tests' way in).
    /// Every record must have entries with well-formed internal keys.
    #[cfg(test)]
    pub fn append_records(&self, records: &[LogRecord], sync: bool) -> Result<()> {
        let mut max_seq = 0;
        let mut payloads = Vec::with_capacity(records.len());
        for r in records {
            let (_, hi) = r.seq_range().ok_or_else(|| {
                Error::invalid(format!(
                    "log record for table {:?} has no entries or a malformed key",
                    r.table
                ))
            })?;
            max_seq = max_seq.max(hi);
            payloads.push(r.encode());
        }
        self.append(payloads, max_seq, sync)
    }

    /// Appends encoded records (see [`LogRecord::encode_ahead`]), whose
    /// highest sequence number is `max_seq`, in one write (and, with `sync`,
    /// one fsync in the same submission). When this returns Ok the records
    /// are in the log of at least one lane.
    pub fn append(&self, payloads: Vec<Vec<u8>>, max_seq: SeqNo, sync: bool) -> Result<()> {
        let _t = telemetry::timer(telemetry::Latency::Commit, "log_write");
        if payloads.is_empty() && !sync {
            return Ok(());
        }
        let records = payloads.len();
        let bytes: usize = payloads.iter().map(Vec::len).sum();
        let payloads = Arc::new(payloads);

        let _serial = self.append_lock.lock();
        let first = self.active.load(Ordering::Acquire);
        // An unsynced append with nothing queued on the active lane is written
        // by the caller itself (a write into the OS's cache): two thread
        // switches cost more than the write. Synced appends go through the
        // lane thread, so that a slow one can be raced by the other lane.
        // A lane busy rolling its file leaves the inline append to the other.
        let idle = |l: usize| self.lanes[l].idle();
        let inline = !sync;
        let first = if inline && !idle(first) && idle(1 - first) {
            self.switch_to(1 - first);
            1 - first
        } else {
            first
        };
        if inline && idle(first) {
            let started = Instant::now();
            match self.append_inline(first, &payloads, max_seq) {
                Ok(()) => {
                    self.count(records, bytes, sync);
                    self.switch_if_slow(first, started);
                    return Ok(());
                }
                Err(e) => {
                    let res = self.repeat_on_other(first, &payloads, max_seq, sync, e);
                    if res.is_ok() {
                        self.count(records, bytes, sync);
                    }
                    return res;
                }
            }
        }

        if sync {
            self.sync_idle_lane(1 - first);
        }
        let rx1 = self.send(first, &payloads, max_seq, sync);
        let first_err = match rx1.recv_timeout(self.shared.opts.slow_threshold) {
            Ok(Ok(())) => {
                self.count(records, bytes, sync);
                return Ok(());
            }
            Ok(Err(e)) => {
                log::warn!("commit log {}: lane {first} failed: {e}", self.shared.dir);
                Some(e)
            }
            Err(RecvTimeoutError::Timeout) => {
                log::warn!(
                    "commit log {}: lane {first} slower than {:?}; switching lanes",
                    self.shared.dir,
                    self.shared.opts.slow_threshold
                );
                None
            }
            Err(RecvTimeoutError::Disconnected) => Some(Error::ShuttingDown),
        };

        let second = 1 - first;
        self.switch_to(second);
        let rx2 = self.send(second, &payloads, max_seq, sync);
        let res = match first_err {
            Some(e1) => rx2.recv().unwrap_or(Err(e1)),
            None => first_success(&rx1, &rx2),
        };
        if res.is_ok() {
            self.count(records, bytes, sync);
        }
        res
    }

    /// Takes an idle lane's file for one unsynced append, to be written
    /// after the caller lets go of whatever orders its sequence numbers:
    /// two such appends can then be written at once, one into each lane's
    /// file. Taking the files in sequence order keeps each file in that
    /// order. `None` when neither lane is idle.
    pub fn reserve_inline(&self) -> Option<InlineSlot<'_>> {
        let _serial = self.append_lock.lock();
        let first = self.active.load(Ordering::Acquire);
        [first, 1 - first].into_iter().find_map(|lane| {
            if !self.lanes[lane].idle() {
                return None;
            }
            let cur = self.lanes[lane].file.try_lock()?;
            self.inflight.fetch_add(1, Ordering::AcqRel);
            Some(InlineSlot {
                lane,
                cur,
                inflight: Inflight(self),
            })
        })
    }

    /// Waits until every append taken by [`CommitLog::reserve_inline`] is
    /// done (a repeat on the other lane included). The caller holds what
    /// orders sequence numbers, so no new one can start: every earlier
    /// record is then in a lane's file and in its lane's unsynced list,
    /// where a sync finds it.
    pub fn wait_inline(&self) {
        if self.inflight.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut g = self.inflight_lock.lock();
        while self.inflight.load(Ordering::Acquire) != 0 {
            self.inflight_done.wait(&mut g);
        }
    }

    /// Before a sync on the other lane: if `lane` is idle and holds
    /// unsynced records in its current file, syncs that file here, which is
    /// cheaper than the other lane writing them again (see
    /// `Shared::cover_unsynced`, which still does for a busy lane).
    fn sync_idle_lane(&self, lane: usize) {
        if self.shared.unsynced[lane].lock().is_empty() || !self.lanes[lane].idle() {
            return;
        }
        let Some(mut cur) = self.lanes[lane].file.try_lock() else {
            return;
        };
        // A failure marks the file failed: the lane's next write rolls.
        let _ = self.shared.sync_current(lane, &mut cur);
    }

    /// After a write to `lane` that began at `started`: a write slower than
    /// `slow_threshold` moves logging to the other lane.
    fn switch_if_slow(&self, lane: usize, started: Instant) {
        if started.elapsed() > self.shared.opts.slow_threshold {
            log::warn!(
                "commit log {}: lane {lane} slower than {:?}; switching lanes",
                self.shared.dir,
                self.shared.opts.slow_threshold
            );
            self.switch_to(1 - lane);
        }
    }

    fn switch_to(&self, lane: usize) {
        self.active.store(lane, Ordering::Release);
        self.switches.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes `payloads` to `lane`'s file from the calling thread.
    fn append_inline(
        &self,
        lane: usize,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
    ) -> Result<()> {
        self.write_held(lane, self.lanes[lane].file.lock(), payloads, max_seq)
    }

    /// Writes unsynced `payloads` into `lane`'s file, which the caller
    /// holds, and lets go of it. A file that failed or is full is replaced
    /// by the lane's thread, off this caller's path.
    fn write_held(
        &self,
        lane: usize,
        mut cur: parking_lot::MutexGuard<'_, Option<(u64, LogWriter)>>,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
    ) -> Result<()> {
        let res = self.shared.write(lane, &mut cur, payloads, max_seq, false);
        let chore = self.shared.chore(&cur);
        drop(cur);
        if chore.is_some() {
            // An empty job: the thread writes nothing, then does the chore.
            drop(self.send(lane, &Arc::new(Vec::new()), 0, false));
        }
        res
    }

    /// After `lane` failed to write `payloads` (error `e`): moves logging to
    /// the other lane and has its thread write them; its result, or `e`
    /// if that thread is gone.
    fn repeat_on_other(
        &self,
        lane: usize,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
        sync: bool,
        e: Error,
    ) -> Result<()> {
        log::warn!("commit log {}: lane {lane} failed: {e}", self.shared.dir);
        self.switch_to(1 - lane);
        self.send(1 - lane, payloads, max_seq, sync)
            .recv()
            .unwrap_or(Err(e))
    }

    fn count(&self, records: usize, bytes: usize, sync: bool) {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.records.fetch_add(records as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        if sync {
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hands a job to a lane; the receiver yields its result.
    fn send(
        &self,
        lane: usize,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
        sync: bool,
    ) -> Receiver<Result<()>> {
        self.lanes[lane].send(payloads, max_seq, sync)
    }
}

/// A lane's file held for one unsynced append (see
/// [`CommitLog::reserve_inline`]).
pub struct InlineSlot<'a> {
    lane: usize,
    cur: parking_lot::MutexGuard<'a, Option<(u64, LogWriter)>>,
    inflight: Inflight<'a>,
}

/// Counts an inline append in flight until dropped.
struct Inflight<'a>(&'a CommitLog);

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        let log = self.0;
        if log.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock: a waiter checks the count under it.
            let _g = log.inflight_lock.lock();
            log.inflight_done.notify_all();
        }
    }
}

impl InlineSlot<'_> {
    /// Writes the records, whose highest sequence number is `max_seq`. If
    /// the lane fails or is slow, logging moves to the other lane; a failed
    /// write is repeated there by that lane's thread, after this lane's
    /// file is let go (holding it, two failing writers could each wait for
    /// the other's lane). The repeat may land after later records in that
    /// file; replay takes records by their sequence numbers.
    pub fn write(self, payloads: Vec<Vec<u8>>, max_seq: SeqNo) -> Result<()> {
        let InlineSlot {
            lane,
            cur,
            inflight,
        } = self;
        let log = inflight.0;
        let records = payloads.len();
        let bytes: usize = payloads.iter().map(Vec::len).sum();
        let payloads = Arc::new(payloads);
        let started = Instant::now();
        let res = match log.write_held(lane, cur, &payloads, max_seq) {
            Ok(()) => {
                log.switch_if_slow(lane, started);
                Ok(())
            }
            Err(e) => log.repeat_on_other(lane, &payloads, max_seq, false, e),
        };
        if res.is_ok() {
            log.count(records, bytes, false);
        }
        drop(inflight);
        res
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        // Closing the channels ends the lane threads once their queued jobs
        // are written; each syncs its file on the way out.
        for lane in &mut self.lanes {
            lane.close();
        }
        for lane in &mut self.lanes {
            lane.join();
        }
    }
}

/// Highest sequence number in one log file (0 if it holds no record).
fn scan_max_seq(store: &dyn FileStore, name: &str) -> Result<SeqNo> {
    let mut reader = LogReader::new(store.open(name)?, name)?;
    let mut max = 0;
    while let Some(p) = reader.read_record()? {
        if let Some((_, hi)) = LogRecord::decode(&p).ok().and_then(|r| r.seq_range()) {
            max = max.max(hi);
        }
    }
    Ok(max)
}

/// Waits for the first of two lanes to succeed; if both fail, the second
/// lane's error (the first one's was a timeout, not a failure, until then).
fn first_success(a: &Receiver<Result<()>>, b: &Receiver<Result<()>>) -> Result<()> {
    let mut a_open = true;
    let mut b_open = true;
    let mut last_err = None;
    while a_open || b_open {
        let mut sel = crossbeam_channel::Select::new();
        let ia = a_open.then(|| sel.recv(a));
        let ib = b_open.then(|| sel.recv(b));
        let op = sel.select();
        let idx = op.index();
        let (r, from_a) = if Some(idx) == ia {
            (op.recv(a), true)
        } else if Some(idx) == ib {
            (op.recv(b), false)
        } else {
            return Err(Error::corruption("commit log: unexpected select result"));
        };
        match r {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => last_err = Some(e),
            Err(_) => {}
        }
        if from_a {
            a_open = false;
        } else {
            b_open = false;
        }
    }
    Err(last_err.unwrap_or(Error::ShuttingDown))
}
