//! The commit log of one tablet server: numbered files in a directory.
//!
//! Two *lanes* (the paper's two log-writing threads, section 6) each own a
//! thread and a current file; one lane is active. An append is handed to the
//! active lane; if it has not completed within `slow_threshold` (a GFS latency
//! spike) or it fails, the same records are handed to the other lane, which
//! becomes the active one, and the append returns as soon as either lane has
//! written them. A record may thus end up in both files: replay merges the
//! files by sequence number and elides the copies.
//!
//! An unsynced append may also be written by its caller, into an idle
//! lane's file taken while the caller still holds what numbers its records
//! (the tablet server's commit lock; see [`CommitLog::reserve_inline`]): the
//! next append can then be numbered, and written into the other lane, while
//! this one is being written. Files are taken in sequence order, so each
//! file stays in it.
//!
//! Files are never appended to after a restart (a file from a crashed run may
//! end in a torn write); `open` starts fresh files. A lane rolls to a new file
//! when its file exceeds `roll_size`, or after a failed write.
//!
//! Unsynced appends are kept in memory until their file is synced (a sync
//! on the other lane must write them again first). So that this memory, and
//! what a machine crash can take, stay bounded without callers ever syncing,
//! a lane's thread syncs its file once `sync_bytes` were appended unsynced.
//!
//! Deletion: every file's highest sequence number is tracked, raised *before*
//! a write is issued, so it covers whatever may be on disk. Files from
//! earlier runs are scanned (or learnt during replay) before they can be
//! deleted. A lane's current file is never deleted; a file stops being current
//! only once its last write has completed.

use super::record::LogRecord;
use super::replay::{replay_files, scan_max_seq, ReplayReport};
use super::writer::LogWriter;
use super::{list_logs, log_file_name};
use crate::key::SeqNo;
use crate::{Error, Result};
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use gfs::FileStore;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
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
            sync_bytes: 1024 * 1024,
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

struct FileInfo {
    /// Highest sequence number that may be in the file; `None` for a file of
    /// an earlier run not scanned yet.
    max_seq: Option<SeqNo>,
    /// The lane whose current file this is.
    lane: Option<usize>,
}

struct Shared {
    store: Arc<dyn FileStore>,
    dir: String,
    opts: CommitLogOptions,
    files: Mutex<Files>,
    rolls: AtomicU64,
    background_syncs: AtomicU64,
    /// Per lane: the batches written to it since its last successful sync
    /// (to its current file or, after a roll whose sync failed, an earlier
    /// one). A sync acknowledges every record before it, so before a lane
    /// syncs, what the other lane or an earlier file holds unsynced is
    /// written again into its file, where the sync covers it.
    unsynced: [Mutex<Vec<Batch>>; 2],
}

/// Encoded records written together, their highest sequence number, and
/// the number of the file they went to.
type Batch = (Arc<Vec<Vec<u8>>>, SeqNo, u64);

struct Files {
    map: BTreeMap<u64, FileInfo>,
    next_number: u64,
}

struct Job {
    payloads: Arc<Vec<Vec<u8>>>,
    max_seq: SeqNo,
    sync: bool,
    done: Sender<Result<()>>,
}

/// A lane's current file, shared by its thread and by inline appends.
type LaneFile = Arc<Mutex<Option<(u64, LogWriter)>>>;

struct Lane {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    file: LaneFile,
    /// Jobs handed to the thread and not yet written: an inline append may
    /// only go ahead of none, so each file stays in sequence order.
    queued: Arc<AtomicUsize>,
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

impl Shared {
    fn name(&self, number: u64) -> String {
        log_file_name(&self.dir, number)
    }

    /// Creates the next numbered file.
    fn create_file(&self) -> Result<(u64, LogWriter)> {
        let number = {
            let mut f = self.files.lock();
            let n = f.next_number;
            f.next_number += 1;
            n
        };
        let name = self.name(number);
        let file = self.store.create_log(&name)?;
        Ok((number, LogWriter::new(file, name)))
    }

    /// Makes `number` the current file of `lane`, retiring `old`.
    fn install(&self, lane: usize, number: u64, old: Option<u64>) {
        let mut f = self.files.lock();
        f.map.insert(
            number,
            FileInfo {
                max_seq: Some(0),
                lane: Some(lane),
            },
        );
        if let Some(info) = old.and_then(|o| f.map.get_mut(&o)) {
            info.lane = None;
        }
    }

    fn note_seq(&self, number: u64, seq: SeqNo) {
        if let Some(info) = self.files.lock().map.get_mut(&number) {
            info.max_seq = Some(info.max_seq.unwrap_or(0).max(seq));
        }
    }

    /// Starts a new file for `lane`. The old one is synced first (best
    /// effort: only unsynced appends are at stake) so that a machine crash
    /// cannot keep later files while losing the end of an earlier one.
    fn roll(&self, lane: usize, cur: &mut Option<(u64, LogWriter)>) -> Result<()> {
        if let Some((_, w)) = cur.as_mut() {
            let synced = !w.failed()
                && match w.sync() {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("{}: sync before roll failed: {e}", w.name());
                        false
                    }
                };
            if synced {
                self.unsynced[lane].lock().clear();
            }
        }
        let (number, w) = self.create_file()?;
        let old = cur.replace((number, w)).map(|(n, _)| n);
        self.install(lane, number, old);
        self.rolls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write(
        &self,
        lane: usize,
        cur: &mut Option<(u64, LogWriter)>,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
        sync: bool,
    ) -> Result<()> {
        if cur.as_ref().is_none_or(|(_, w)| w.failed()) {
            self.roll(lane, cur)?;
        }
        let (number, w) = cur
            .as_mut()
            .ok_or_else(|| Error::corruption("commit log lane has no file"))?;
        if sync {
            self.cover_unsynced(lane, *number, w)?;
        }
        // Before the write: deletion must account for bytes that may land.
        self.note_seq(*number, max_seq);
        w.add_records(payloads, sync)?;
        let mut unsynced = self.unsynced[lane].lock();
        if sync {
            unsynced.clear();
        } else if !payloads.is_empty() {
            unsynced.push((Arc::clone(payloads), max_seq, *number));
        }
        Ok(())
    }

    /// Before `lane` syncs file `number`: writes into it what the other
    /// lane, or an earlier file of this lane, holds unsynced. Unsynced
    /// appends never pay for this; a sync after a lane switch or a failed
    /// roll does, once.
    fn cover_unsynced(&self, lane: usize, number: u64, w: &mut LogWriter) -> Result<()> {
        let mut todo: Vec<Batch> = self.unsynced[1 - lane].lock().clone();
        todo.extend(
            self.unsynced[lane]
                .lock()
                .iter()
                .filter(|b| b.2 != number)
                .cloned(),
        );
        if todo.is_empty() {
            return Ok(());
        }
        todo.sort_by_key(|b| b.1);
        let high = todo.iter().map(|b| b.1).max().unwrap_or(0);
        self.note_seq(number, high);
        let all: Vec<Vec<u8>> = todo.iter().flat_map(|b| b.0.iter().cloned()).collect();
        w.add_records(&all, false)?;
        // Once this lane's sync succeeds they are durable: the other lane
        // need not copy them again.
        let copied = |b: &Batch| todo.iter().any(|t| Arc::ptr_eq(&t.0, &b.0));
        self.unsynced[1 - lane].lock().retain(|b| !copied(b));
        Ok(())
    }

    /// What the lane's thread must do after a write, off the caller's path:
    /// replace a failed or full file, or sync one with much unsynced.
    fn chore(&self, cur: &Option<(u64, LogWriter)>) -> Option<Chore> {
        let (_, w) = cur.as_ref()?;
        if w.failed() || w.len() >= self.opts.roll_size {
            Some(Chore::Roll)
        } else if w.unsynced_len() >= self.opts.sync_bytes {
            Some(Chore::Sync)
        } else {
            None
        }
    }

    /// Syncs the lane's current file; what it held unsynced is then durable
    /// and no longer kept.
    fn sync_current(&self, lane: usize, cur: &mut Option<(u64, LogWriter)>) -> Result<()> {
        if let Some((number, w)) = cur.as_mut() {
            if !w.failed() {
                w.sync()?;
                let number = *number;
                self.unsynced[lane].lock().retain(|b| b.2 != number);
            }
        }
        Ok(())
    }
}

/// Work a lane's thread does after a write (see [`Shared::chore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chore {
    Roll,
    Sync,
}

/// The thread of one lane: writes jobs in order to its current file.
fn lane_main(
    shared: Arc<Shared>,
    lane: usize,
    file: LaneFile,
    queued: Arc<AtomicUsize>,
    rx: Receiver<Job>,
) {
    for job in rx.iter() {
        let mut cur = file.lock();
        let res = shared.write(lane, &mut cur, &job.payloads, job.max_seq, job.sync);
        let chore = shared.chore(&cur);
        if chore.is_none() {
            queued.fetch_sub(1, Ordering::AcqRel);
        }
        // The caller may have stopped waiting (the other lane answered first).
        let _ = job.done.send(res);
        if let Some(chore) = chore {
            // Off the caller's path: the next append finds a fresh or synced
            // file. The lane counts as busy meanwhile (a sync may take a
            // while), so inline appends use the other lane.
            let done = match chore {
                Chore::Roll => shared.roll(lane, &mut cur),
                Chore::Sync => {
                    shared.background_syncs.fetch_add(1, Ordering::Relaxed);
                    shared.sync_current(lane, &mut cur)
                }
            };
            if let Err(e) = done {
                log::warn!(
                    "commit log {}: lane {lane}: {chore:?} failed: {e}",
                    shared.dir
                );
            }
            drop(cur);
            queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let mut cur = file.lock();
    if let Some((_, w)) = cur.as_mut() {
        if !w.failed() {
            if let Err(e) = w.sync() {
                log::warn!("{}: sync at close failed: {e}", w.name());
            }
        }
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
        let mut lanes = Vec::with_capacity(2);
        for lane in 0..2 {
            let (number, w) = shared.create_file()?;
            shared.install(lane, number, None);
            let (tx, rx) = unbounded();
            let s = Arc::clone(&shared);
            let file: LaneFile = Arc::new(Mutex::new(Some((number, w))));
            let queued = Arc::new(AtomicUsize::new(0));
            let (f, q) = (Arc::clone(&file), Arc::clone(&queued));
            let thread = std::thread::Builder::new()
                .name(format!("commit-log-{lane}"))
                .spawn(move || lane_main(s, lane, f, q, rx))
                .map_err(|e| gfs::Error::Io {
                    name: shared.dir.clone(),
                    source: e,
                })?;
            lanes.push(Lane {
                tx: Some(tx),
                thread: Some(thread),
                file,
                queued,
            });
        }
        let lanes: [Lane; 2] = lanes
            .try_into()
            .map_err(|_| Error::corruption("commit log: lane setup"))?;
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

    /// Appends `records` in one write (and, with `sync`, one fsync in the same
    /// submission). Every record must have entries with well-formed internal
    /// keys. When this returns Ok the records are in the log of at least one
    /// lane.
    pub fn append(&self, records: &[LogRecord], sync: bool) -> Result<()> {
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
        self.append_encoded(payloads, max_seq, sync)
    }

    /// [`CommitLog::append`] of records already encoded (see
    /// [`LogRecord::encode_ahead`]), whose highest sequence number is `max_seq`.
    pub fn append_encoded(&self, payloads: Vec<Vec<u8>>, max_seq: SeqNo, sync: bool) -> Result<()> {
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
        let idle = |l: usize| self.lanes[l].queued.load(Ordering::Acquire) == 0;
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
            if self.lanes[lane].queued.load(Ordering::Acquire) != 0 {
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
        if self.shared.unsynced[lane].lock().is_empty()
            || self.lanes[lane].queued.load(Ordering::Acquire) != 0
        {
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
        let (done, rx) = bounded(1);
        let job = Job {
            payloads: Arc::clone(payloads),
            max_seq,
            sync,
            done,
        };
        if let Some(tx) = &self.lanes[lane].tx {
            self.lanes[lane].queued.fetch_add(1, Ordering::AcqRel);
            // On failure the job (and its `done`) is dropped: the receiver
            // then reports a disconnect.
            let _ = tx.send(job);
        }
        rx
    }

    /// Reads every log file in the directory and calls `f`, in sequence
    /// order and once per record, with each record that has an entry with
    /// `seq > min_seq`. Meant for startup, before the first append.
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
        let candidates: Vec<(u64, Option<SeqNo>)> = {
            let f = self.shared.files.lock();
            f.map
                .iter()
                .filter(|(_, i)| i.lane.is_none())
                .map(|(&n, i)| (n, i.max_seq))
                .collect()
        };
        let mut deleted = Vec::new();
        for (number, known) in candidates {
            let name = self.shared.name(number);
            let max = match known {
                Some(m) => m,
                None => match scan_max_seq(&*self.shared.store, &name) {
                    Ok(m) => {
                        if let Some(i) = self.shared.files.lock().map.get_mut(&number) {
                            i.max_seq = Some(m);
                        }
                        m
                    }
                    Err(e) => {
                        log::warn!("{name}: cannot scan, keeping it: {e}");
                        continue;
                    }
                },
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

    /// Names of the two lanes' current files, lane 0 first.
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

impl Drop for CommitLog {
    fn drop(&mut self) {
        // Closing the channels ends the lane threads once their queued jobs
        // are written; each syncs its file on the way out.
        for lane in &mut self.lanes {
            lane.tx = None;
        }
        for lane in &mut self.lanes {
            if let Some(t) = lane.thread.take() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{self, Kind};
    use crate::log::replay_dir;
    use gfs::{MemStore, ReadableFile, WritableFile};
    use std::collections::HashSet;

    fn rec(row: &str, seqs: &[u64]) -> LogRecord {
        LogRecord {
            table: "t".into(),
            entries: seqs
                .iter()
                .map(|&s| {
                    (
                        key::encode(row.as_bytes(), b"f", b"q", 1, s, Kind::Put),
                        format!("v{s}").into_bytes(),
                    )
                })
                .collect(),
        }
    }

    fn opts(roll_size: u64) -> CommitLogOptions {
        CommitLogOptions {
            roll_size,
            // Large: tests not about switching must not switch on a busy machine.
            slow_threshold: Duration::from_secs(30),
            ..CommitLogOptions::default()
        }
    }

    fn replay_all(log: &CommitLog, min_seq: u64) -> (Vec<LogRecord>, ReplayReport) {
        let mut out = Vec::new();
        let rep = log
            .replay(min_seq, |r| {
                out.push(r);
                Ok(())
            })
            .unwrap();
        (out, rep)
    }

    fn seqs_of(recs: &[LogRecord]) -> Vec<u64> {
        recs.iter().map(|r| r.seq_range().unwrap().1).collect()
    }

    #[test]
    fn append_reopen_replay_with_min_seq() {
        let store = Arc::new(MemStore::new());
        {
            let log = CommitLog::open(store.clone(), "srv1/log", opts(1 << 20)).unwrap();
            let (none, rep) = replay_all(&log, 0);
            assert!(none.is_empty());
            assert_eq!(rep.files, 2);
            for s in 1..=10u64 {
                log.append(&[rec(&format!("r{s}"), &[s])], s % 2 == 0)
                    .unwrap();
            }
            log.append(&[rec("multi", &[11, 12]), rec("x", &[13])], true)
                .unwrap();
            assert!(log.append(&[], false).is_ok());
            let st = log.stats();
            assert_eq!((st.appends, st.records, st.syncs), (11, 12, 6));
        }
        let log = CommitLog::open(store.clone(), "srv1/log/", opts(1 << 20)).unwrap();
        assert_eq!(log.files().len(), 4);
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), (1..=10).chain([12, 13]).collect::<Vec<_>>());
        assert_eq!(all[10], rec("multi", &[11, 12]));
        assert_eq!((rep.records, rep.applied, rep.skipped), (12, 12, 0));
        assert_eq!(rep.max_seq, 13);
        assert_eq!(rep.bytes_dropped, 0);
        // A record with any entry above min_seq is replayed whole.
        let (some, rep) = replay_all(&log, 11);
        assert_eq!(some, vec![rec("multi", &[11, 12]), rec("x", &[13])]);
        assert_eq!(rep.skipped, 10);
    }

    #[test]
    fn rejects_records_without_sequence_numbers() {
        let store = Arc::new(MemStore::new());
        let log = CommitLog::open(store, "d", opts(1 << 20)).unwrap();
        let empty = LogRecord {
            table: "t".into(),
            entries: vec![],
        };
        assert!(matches!(
            log.append(&[empty], false),
            Err(Error::InvalidArgument(_))
        ));
        let bad = LogRecord {
            table: "t".into(),
            entries: vec![(b"junk".to_vec(), vec![])],
        };
        assert!(matches!(
            log.append(&[bad], true),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn rolls_and_replays_across_files() {
        let store = Arc::new(MemStore::new());
        {
            let log = CommitLog::open(store.clone(), "d", opts(4096)).unwrap();
            for s in 1..=300u64 {
                log.append(&[rec(&format!("row{s:05}"), &[s])], false)
                    .unwrap();
            }
            // 12.8 KB in 4 KiB files: at least two rolls however the two
            // lanes happened to share the appends.
            assert!(log.stats().rolls >= 2, "{:?}", log.stats());
        }
        let log = CommitLog::open(store.clone(), "d", opts(4096)).unwrap();
        assert!(log.files().len() >= 6);
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), (1..=300).collect::<Vec<_>>());
        assert_eq!(rep.duplicates, 0);
        let (tail, _) = replay_all(&log, 250);
        assert_eq!(seqs_of(&tail), (251..=300).collect::<Vec<_>>());
    }

    /// Deleting obsolete files never loses a record above the watermark,
    /// whether file maxima are tracked live or found by scanning after a restart.
    #[test]
    fn delete_obsolete_keeps_live_entries() {
        let store = Arc::new(MemStore::new());
        let log = CommitLog::open(store.clone(), "d", opts(2048)).unwrap();
        for s in 1..=200u64 {
            // Every tenth record spans two sequence numbers, low and high.
            let r = if s % 10 == 0 {
                rec("span", &[s * 10, s * 10 + 9])
            } else {
                rec(&format!("r{s}"), &[s * 10])
            };
            log.append(&[r], false).unwrap();
        }
        let maxima: BTreeMap<String, u64> = log
            .files()
            .into_iter()
            .map(|n| (n.clone(), scan_max_seq(&*store, &n).unwrap()))
            .collect();
        let deleted = log.delete_obsolete(1005).unwrap();
        assert!(!deleted.is_empty());
        // Every file is either deleted or kept; a roll the lane thread
        // finished meanwhile may have added a new current file.
        let now = log.files();
        for name in maxima.keys() {
            assert!(deleted.contains(name) != now.contains(name), "{name}");
        }
        for name in &deleted {
            assert!(!store.exists(name).unwrap());
            assert!(maxima[name] <= 1005, "{name} held seq {}", maxima[name]);
        }
        for name in now {
            match maxima.get(&name) {
                Some(&max) => assert!(max > 1005 || log.current_files().contains(&name)),
                None => assert!(log.current_files().contains(&name), "{name}"),
            }
        }
        let current = log.current_files();
        assert!(current.iter().all(|c| store.exists(c).unwrap()));
        let (live, _) = replay_all(&log, 1005);
        let want: Vec<u64> = (100..=200u64)
            .map(|s| if s % 10 == 0 { s * 10 + 9 } else { s * 10 })
            .collect();
        assert_eq!(seqs_of(&live), want);
        drop(log);

        // After a restart the maxima are unknown and found by scanning.
        let log = CommitLog::open(store.clone(), "d", opts(2048)).unwrap();
        log.delete_obsolete(1500).unwrap();
        let (live, _) = replay_all(&log, 1500);
        let want: Vec<u64> = want.into_iter().filter(|&s| s > 1500).collect();
        assert_eq!(seqs_of(&live), want);
        // Everything is obsolete: only the current (empty) files remain.
        log.delete_obsolete(u64::MAX).unwrap();
        assert_eq!(log.files().len(), 2);
        let (none, _) = replay_all(&log, 0);
        assert!(none.is_empty());
    }

    #[test]
    fn a_local_log_copied_while_its_writer_lives_replays_every_synced_append() {
        // What a kill -9 leaves: the files as the OS has them, the writer
        // never dropped, so the zeros written ahead of synced appends stay.
        let live = tempfile::tempdir().unwrap();
        let store = Arc::new(gfs::LocalStore::open(live.path()).unwrap());
        let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
        for s in 1..=300u64 {
            log.append(&[rec("r", &[s])], s % 3 == 0).unwrap();
        }
        let copy = tempfile::tempdir().unwrap();
        std::fs::create_dir(copy.path().join("d")).unwrap();
        let mut zero_tailed = 0;
        for name in log.files() {
            let bytes = std::fs::read(live.path().join(&name)).unwrap();
            zero_tailed += usize::from(bytes.last() == Some(&0));
            std::fs::write(copy.path().join(&name), bytes).unwrap();
        }
        assert!(zero_tailed > 0, "no zeros ahead of the synced appends");
        let copied = Arc::new(gfs::LocalStore::open(copy.path()).unwrap());
        let reopened = CommitLog::open(copied, "d", opts(1 << 20)).unwrap();
        let (all, rep) = replay_all(&reopened, 0);
        assert_eq!(seqs_of(&all), (1..=300).collect::<Vec<_>>());
        assert_eq!(rep.corrupt_regions, 0);
        // A clean close cuts the zeros.
        let names = log.files();
        drop(log);
        for name in names {
            let bytes = std::fs::read(live.path().join(&name)).unwrap();
            assert!(bytes.last() != Some(&0), "{name} ends in zeros");
        }
    }

    #[test]
    fn torn_tail_of_a_crashed_run_is_tolerated_and_never_appended_to() {
        let store = Arc::new(MemStore::new());
        let first;
        {
            let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
            first = log.current_files()[0].clone();
            for s in 1..=5u64 {
                log.append(&[rec("r", &[s])], false).unwrap();
            }
        }
        let len = store.size(&first).unwrap() as usize;
        store.truncate(&first, len - 3).unwrap();
        let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 2, 3, 4]);
        assert_eq!(rep.torn_tails, 1);
        assert_eq!(rep.corrupt_regions, 0);
        log.append(&[rec("r", &[6])], true).unwrap();
        assert_eq!(store.size(&first).unwrap() as usize, len - 3);
        assert!(!log.current_files().contains(&first));
    }

    #[test]
    fn corrupt_record_in_the_middle_is_reported_and_later_ones_replayed() {
        let store = Arc::new(MemStore::new());
        let name;
        {
            let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
            name = log.current_files()[0].clone();
            log.append(&[rec("a", &[1])], false).unwrap();
            // Fill past the first block so later records survive the damage.
            let big = LogRecord {
                table: "t".into(),
                entries: vec![(
                    key::encode(b"b", b"f", b"q", 1, 2, Kind::Put),
                    vec![9; 40_000],
                )],
            };
            log.append(&[big], false).unwrap();
            log.append(&[rec("c", &[3])], false).unwrap();
        }
        store.corrupt(&name, 100).unwrap();
        let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 3]);
        assert_eq!(rep.corrupt_regions, 1);
        assert!(rep.bytes_dropped > 30_000);
    }

    #[test]
    fn replay_dir_merges_and_elides_duplicates() {
        let store = MemStore::new();
        let mut a = LogWriter::new(store.create("x/000001.log").unwrap(), "a");
        let mut b = LogWriter::new(store.create("x/000002.log").unwrap(), "b");
        let enc = |s: &[u64]| rec("r", s).encode();
        a.add_records(&[enc(&[1]), enc(&[2]), enc(&[5])], false)
            .unwrap();
        b.add_records(&[enc(&[2]), enc(&[3]), enc(&[4]), enc(&[6])], false)
            .unwrap();
        store.create("x/notes.txt").unwrap();
        let mut seen = Vec::new();
        let rep = replay_dir(&store, "x", 0, |r| {
            seen.push(r.seq_range().unwrap().0);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!((rep.files, rep.records, rep.duplicates), (2, 7, 1));
        // An error from the callback stops the replay.
        let err = replay_dir(&store, "x", 0, |_| Err(Error::ShuttingDown));
        assert!(matches!(err, Err(Error::ShuttingDown)));
    }

    /// A store whose files can be made to block (a latency spike) or fail.
    #[derive(Clone, Default)]
    struct FlakyStore {
        inner: MemStore,
        ctl: Arc<Ctl>,
    }

    #[derive(Default)]
    struct Ctl {
        gated: Mutex<HashSet<String>>,
        opened: Condvar,
        failing: Mutex<HashSet<String>>,
        blocked: AtomicUsize,
    }

    impl Ctl {
        fn before_write(&self, name: &str) -> gfs::Result<()> {
            let mut g = self.gated.lock();
            if g.contains(name) {
                self.blocked.fetch_add(1, Ordering::SeqCst);
                while g.contains(name) {
                    self.opened.wait(&mut g);
                }
            }
            if self.failing.lock().contains(name) {
                return Err(gfs::Error::Io {
                    name: name.into(),
                    source: std::io::Error::other("injected failure"),
                });
            }
            Ok(())
        }
        fn open_gate(&self, name: &str) {
            self.gated.lock().remove(name);
            self.opened.notify_all();
        }
    }

    struct FlakyFile {
        name: String,
        inner: Box<dyn WritableFile>,
        ctl: Arc<Ctl>,
    }

    impl WritableFile for FlakyFile {
        fn append(&mut self, data: &[u8]) -> gfs::Result<u64> {
            self.ctl.before_write(&self.name)?;
            self.inner.append(data)
        }
        fn append_vectored(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
            self.ctl.before_write(&self.name)?;
            self.inner.append_vectored(bufs)
        }
        fn append_sync(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
            self.ctl.before_write(&self.name)?;
            self.inner.append_sync(bufs)
        }
        fn sync(&mut self) -> gfs::Result<()> {
            self.ctl.before_write(&self.name)?;
            self.inner.sync()
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
    }

    impl FileStore for FlakyStore {
        fn create(&self, name: &str) -> gfs::Result<Box<dyn WritableFile>> {
            Ok(Box::new(FlakyFile {
                name: name.into(),
                inner: self.inner.create(name)?,
                ctl: self.ctl.clone(),
            }))
        }
        fn open_append(&self, name: &str) -> gfs::Result<Box<dyn WritableFile>> {
            self.inner.open_append(name)
        }
        fn open(&self, name: &str) -> gfs::Result<Arc<dyn ReadableFile>> {
            self.inner.open(name)
        }
        fn delete(&self, name: &str) -> gfs::Result<()> {
            self.inner.delete(name)
        }
        fn rename(&self, from: &str, to: &str) -> gfs::Result<()> {
            self.inner.rename(from, to)
        }
        fn exists(&self, name: &str) -> gfs::Result<bool> {
            self.inner.exists(name)
        }
        fn size(&self, name: &str) -> gfs::Result<u64> {
            self.inner.size(name)
        }
        fn list(&self, prefix: &str) -> gfs::Result<Vec<String>> {
            self.inner.list(prefix)
        }
    }

    fn wait_until(cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "condition not reached"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn unsynced_appends_are_synced_by_the_lane_once_past_sync_bytes() {
        let store = gfs::CrashStore::new();
        let sync_bytes = 8 * 1024;
        let log = CommitLog::open(
            Arc::new(store.clone()),
            "d",
            CommitLogOptions {
                sync_bytes,
                ..opts(1 << 30)
            },
        )
        .unwrap();
        let kept = || -> usize {
            let lanes = log.shared.unsynced.iter();
            lanes
                .map(|l| {
                    l.lock()
                        .iter()
                        .map(|b| b.0.iter().map(Vec::len).sum::<usize>())
                        .sum::<usize>()
                })
                .sum()
        };
        // 400 unsynced appends of about 1 KiB: nobody asks for a sync.
        let big = |s: u64| LogRecord {
            entries: vec![(
                key::encode(b"r", b"f", b"q", 1, s, Kind::Put),
                vec![b'x'; 1000],
            )],
            ..rec("r", &[s])
        };
        for s in 1..=400u64 {
            log.append(&[big(s)], false).unwrap();
        }
        // The lanes synced in the background: what they keep in memory for
        // a later sync, and what a crash would take, is at most about
        // `sync_bytes` per lane, not the 400 KiB written.
        wait_until(|| kept() < 2 * sync_bytes as usize + 2048);
        let durable: u64 = log
            .current_files()
            .iter()
            .map(|f| store.durable_len(f).unwrap_or(0))
            .sum();
        assert!(durable > 350 * 1000, "only {durable} bytes durable");
        assert!(log.stats().background_syncs >= 20, "{:?}", log.stats());
    }

    #[test]
    fn commit_log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CommitLog>();
    }

    fn read_file(store: &MemStore, name: &str) -> Vec<u64> {
        let mut r = super::super::LogReader::new(store.open(name).unwrap(), name).unwrap();
        let mut out = Vec::new();
        while let Some(p) = r.read_record().unwrap() {
            out.push(LogRecord::decode(&p).unwrap().seq_range().unwrap().0);
        }
        out
    }

    #[test]
    fn slow_lane_switches_to_the_other_and_replay_elides_duplicates() {
        let store = FlakyStore::default();
        let log = CommitLog::open(
            Arc::new(store.clone()),
            "d",
            CommitLogOptions {
                roll_size: 1 << 20,
                ..CommitLogOptions::default()
            },
        )
        .unwrap();
        let [a, b] = log.current_files();
        log.append(&[rec("r", &[1])], true).unwrap();
        // Lane 0's file stalls: the append must complete through lane 1
        // while lane 0 is still blocked.
        store.ctl.gated.lock().insert(a.clone());
        log.append(&[rec("r", &[2])], true).unwrap();
        // Returned while lane 0's write is still held at the gate.
        assert!(store.ctl.gated.lock().contains(&a));
        wait_until(|| store.ctl.blocked.load(Ordering::SeqCst) == 1);
        let st = log.stats();
        assert_eq!((st.switches, st.active_lane), (1, 1));
        // Later appends go to lane 1 directly.
        log.append(&[rec("r", &[3])], false).unwrap();
        assert_eq!(log.stats().switches, 1);
        assert_eq!(read_file(&store.inner, &b), vec![2, 3]);
        // The stalled write completes late: record 2 is in both files.
        store.ctl.open_gate(&a);
        drop(log);
        assert_eq!(read_file(&store.inner, &a), vec![1, 2]);

        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 2, 3]);
        assert_eq!(rep.duplicates, 1);
    }

    #[test]
    fn a_sync_after_a_switch_covers_what_the_old_lane_left_unsynced() {
        let store = FlakyStore::default();
        let log = CommitLog::open(
            Arc::new(store.clone()),
            "d",
            CommitLogOptions {
                roll_size: 1 << 20,
                ..CommitLogOptions::default()
            },
        )
        .unwrap();
        let [a, b] = log.current_files();
        log.append(&[rec("r", &[1])], false).unwrap();
        log.append(&[rec("r", &[2])], false).unwrap();
        // Lane 0 stalls on a synced append: lane 1 takes it, and its sync
        // must also cover 1 and 2, which lane 0 holds unsynced.
        store.ctl.gated.lock().insert(a.clone());
        log.append(&[rec("r", &[3])], true).unwrap();
        assert_eq!(read_file(&store.inner, &b), vec![1, 2, 3]);
        store.ctl.open_gate(&a);
        drop(log);
        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let (all, rep) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 2, 3]);
        assert!(rep.duplicates >= 2, "{rep:?}");
    }

    #[test]
    fn failed_lane_retries_on_the_other_and_rolls() {
        let store = FlakyStore::default();
        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let [a, b] = log.current_files();
        store.ctl.failing.lock().insert(a.clone());
        log.append(&[rec("r", &[1])], true).unwrap();
        assert_eq!(log.stats().switches, 1);
        assert_eq!(read_file(&store.inner, &b), vec![1]);
        // Both lanes failing: the error reaches the caller.
        store.ctl.failing.lock().insert(b.clone());
        // Lane 0 rolls away from its failed file; fail its new file too.
        wait_until(|| log.current_files()[0] != a);
        let new_a = log.current_files()[0].clone();
        store.ctl.failing.lock().insert(new_a);
        assert!(log.append(&[rec("r", &[2])], true).is_err());
        store.ctl.failing.lock().clear();
        log.append(&[rec("r", &[3])], true).unwrap();
        let (all, _) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 3]);
    }

    #[test]
    fn inline_appends_take_one_lane_each_and_may_be_written_in_either_order() {
        let store = MemStore::new();
        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let [a, b] = log.current_files();
        let first = log.reserve_inline().unwrap();
        let second = log.reserve_inline().unwrap();
        assert!(log.reserve_inline().is_none(), "both lanes are taken");
        // The later record lands first; each file still holds its records
        // in sequence order, and replay merges them.
        second.write(vec![rec("r", &[2]).encode()], 2).unwrap();
        first.write(vec![rec("r", &[1]).encode()], 1).unwrap();
        assert_eq!(read_file(&store, &a), vec![1]);
        assert_eq!(read_file(&store, &b), vec![2]);
        log.append(&[rec("r", &[3])], true).unwrap();
        assert_eq!(log.stats().appends, 3);
        drop(log);
        let log = CommitLog::open(Arc::new(store), "d", opts(1 << 20)).unwrap();
        let (all, _) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 2, 3]);
    }

    #[test]
    fn wait_inline_returns_only_after_an_inline_append_is_written() {
        let store = FlakyStore::default();
        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let [a, _] = log.current_files();
        store.ctl.gated.lock().insert(a.clone());
        let waited = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let log = &log;
            let writer = s.spawn(move || {
                let slot = log.reserve_inline().unwrap();
                slot.write(vec![rec("r", &[1]).encode()], 1)
            });
            wait_until(|| store.ctl.blocked.load(Ordering::SeqCst) == 1);
            let waiter = s.spawn(|| {
                log.wait_inline();
                waited.store(1, Ordering::SeqCst);
            });
            // The write is held at the gate, so the waiter cannot be done.
            assert_eq!(waited.load(Ordering::SeqCst), 0);
            store.ctl.open_gate(&a);
            writer.join().unwrap().unwrap();
            waiter.join().unwrap();
        });
        assert_eq!(waited.load(Ordering::SeqCst), 1);
        assert_eq!(read_file(&store.inner, &a), vec![1]);
    }

    #[test]
    fn a_failed_inline_append_is_written_to_the_other_lane() {
        let store = FlakyStore::default();
        let log = CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap();
        let [a, b] = log.current_files();
        store.ctl.failing.lock().insert(a.clone());
        let slot = log.reserve_inline().unwrap();
        slot.write(vec![rec("r", &[1]).encode()], 1).unwrap();
        assert_eq!(log.stats().switches, 1);
        assert_eq!(read_file(&store.inner, &b), vec![1]);
        // Both failing: the caller gets the error.
        wait_until(|| log.current_files()[0] != a);
        store.ctl.failing.lock().insert(b.clone());
        store
            .ctl
            .failing
            .lock()
            .insert(log.current_files()[0].clone());
        let slot = log.reserve_inline().unwrap();
        assert!(slot.write(vec![rec("r", &[2]).encode()], 2).is_err());
    }

    #[test]
    fn two_failing_inline_appends_are_both_repeated_without_waiting_on_each_other() {
        let store = FlakyStore::default();
        let log = Arc::new(CommitLog::open(Arc::new(store.clone()), "d", opts(1 << 20)).unwrap());
        let [a, b] = log.current_files();
        store.ctl.failing.lock().extend([a, b]);
        // Both lanes' files are taken before either write fails: each
        // failed write is repeated on the other lane (whose thread rolls to
        // a fresh file first). Neither may wait for the other's file.
        let taken = Arc::new(std::sync::Barrier::new(2));
        let (done_tx, done_rx) = crossbeam_channel::unbounded();
        for seq in [1u64, 2] {
            let (log, taken, done_tx) = (log.clone(), taken.clone(), done_tx.clone());
            std::thread::spawn(move || {
                let slot = log.reserve_inline().unwrap();
                taken.wait();
                let _ = done_tx.send(slot.write(vec![rec("r", &[seq]).encode()], seq));
            });
        }
        for _ in 0..2 {
            let res = done_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("an inline append never completed");
            res.unwrap();
        }
        log.wait_inline();
        let (all, _) = replay_all(&log, 0);
        assert_eq!(seqs_of(&all), vec![1, 2]);
    }
}
