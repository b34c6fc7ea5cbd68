//! The commit log of one tablet server: numbered files in a directory.
//!
//! Appends are written by two *lanes* (see [`lanes`]), each with a thread and
//! a current file; this module keeps the numbered files themselves.
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

use super::reader::LogReader;
use super::record::LogRecord;
#[cfg(test)]
use super::replay::{replay_files, ReplayReport};
use super::writer::LogWriter;
use super::{list_logs, log_file_name};
use crate::key::SeqNo;
use crate::{Error, Result};
use crossbeam_channel::unbounded;
use gfs::FileStore;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod lanes;

use lanes::{lane_main, Lane, LaneFile};

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

    /// Whether each append is durable when it returns (see
    /// [`FileStore::durable_appends`]): a sync then adds nothing.
    pub fn durable_appends(&self) -> bool {
        self.shared.store.durable_appends()
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::key::{self, Kind};
    use crate::log::replay::replay_dir;
    use gfs::MemStore;

    pub(super) fn rec(row: &str, seqs: &[u64]) -> LogRecord {
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

    pub(super) fn opts(roll_size: u64) -> CommitLogOptions {
        CommitLogOptions {
            roll_size,
            // Large: tests not about switching must not switch on a busy machine.
            slow_threshold: Duration::from_secs(30),
            ..CommitLogOptions::default()
        }
    }

    pub(super) fn replay_all(log: &CommitLog, min_seq: u64) -> (Vec<LogRecord>, ReplayReport) {
        let mut out = Vec::new();
        let rep = log
            .replay(min_seq, |r| {
                out.push(r);
                Ok(())
            })
            .unwrap();
        (out, rep)
    }

    pub(super) fn seqs_of(recs: &[LogRecord]) -> Vec<u64> {
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

    #[test]
    fn commit_log_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<CommitLog>();
    }
}
