//! The two lanes of the commit log (the paper's two log-writing threads,
//! section 6), and the switch away from a slow one.
//!
//! Each lane owns a thread and a current file; one lane is active. An append
//! is handed to the active lane; if it has not completed within
//! `slow_threshold` (a GFS latency spike) or it fails, the same records are
//! handed to the other lane, which becomes the active one, and the append
//! returns as soon as either lane has written them. A record may thus end up in both files: replay merges the
//! files by sequence number and elides the copies.
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

use super::{Batch, CommitLog, Shared};
use crate::key::SeqNo;
use crate::log::writer::LogWriter;
use crate::{Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Records handed to a lane's thread, and where it reports the result.
pub(super) struct Job {
    payloads: Arc<Vec<Vec<u8>>>,
    max_seq: SeqNo,
    sync: bool,
    done: Sender<Result<()>>,
}

/// A lane's current file, shared by its thread and by inline appends.
pub(super) type LaneFile = Arc<Mutex<Option<(u64, LogWriter)>>>;

/// One lane: the channel to its thread, the thread, and its current file.
pub(super) struct Lane {
    pub(super) tx: Option<Sender<Job>>,
    pub(super) thread: Option<JoinHandle<()>>,
    pub(super) file: LaneFile,
    /// Jobs handed to the thread and not yet written: an inline append may
    /// only go ahead of none, so each file stays in sequence order.
    pub(super) queued: Arc<AtomicUsize>,
}

impl Shared {
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
pub(super) fn lane_main(
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
    /// [`CommitLog::append`] of records already encoded (see
    /// [`LogRecord::encode_ahead`]), whose highest sequence number is `max_seq`.
    pub fn append_encoded(&self, payloads: Vec<Vec<u8>>, max_seq: SeqNo, sync: bool) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::super::tests::{opts, rec, replay_all, seqs_of};
    use super::super::CommitLogOptions;
    use super::*;
    use crate::key::{self, Kind};
    use crate::log::record::LogRecord;
    use crate::log::LogReader;
    use gfs::{FileStore, MemStore, ReadableFile, WritableFile};
    use parking_lot::Condvar;
    use std::collections::HashSet;
    use std::time::Duration;

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

    fn read_file(store: &MemStore, name: &str) -> Vec<u64> {
        let mut r = LogReader::new(store.open(name).unwrap(), name).unwrap();
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
