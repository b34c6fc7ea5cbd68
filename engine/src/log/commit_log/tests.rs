//! The commit log's tests: appends, replay, rolling and deletion; the
//! lanes' switching, background syncs and inline appends (over a store
//! whose files can be made to stall or fail).

use super::{scan_max_seq, CommitLog, CommitLogOptions};
use crate::key::{self, Kind};
use crate::log::record::LogRecord;
use crate::log::replay::{replay_dir, ReplayReport};
use crate::log::writer::LogWriter;
use crate::log::LogReader;
use crate::Error;
use gfs::{FileStore, MemStore, ReadableFile, WritableFile};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
            log.append_records(&[rec(&format!("r{s}"), &[s])], s % 2 == 0)
                .unwrap();
        }
        log.append_records(&[rec("multi", &[11, 12]), rec("x", &[13])], true)
            .unwrap();
        assert!(log.append_records(&[], false).is_ok());
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
        log.append_records(&[empty], false),
        Err(Error::InvalidArgument(_))
    ));
    let bad = LogRecord {
        table: "t".into(),
        entries: vec![(b"junk".to_vec(), vec![])],
    };
    assert!(matches!(
        log.append_records(&[bad], true),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn rolls_and_replays_across_files() {
    let store = Arc::new(MemStore::new());
    {
        let log = CommitLog::open(store.clone(), "d", opts(4096)).unwrap();
        for s in 1..=300u64 {
            log.append_records(&[rec(&format!("row{s:05}"), &[s])], false)
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
        log.append_records(&[r], false).unwrap();
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

/// The retention target is what deleting down to `keep` old files needs,
/// whether the files' maxima are recorded live or found by scanning after
/// a restart.
#[test]
fn the_retention_target_frees_all_but_the_newest_old_files() {
    let store = Arc::new(MemStore::new());
    let log = CommitLog::open(store.clone(), "r", opts(2048)).unwrap();
    for s in 1..=2000u64 {
        log.append_records(&[rec(&format!("r{s}"), &[s])], false)
            .unwrap();
    }
    let old = |log: &CommitLog| -> Vec<String> {
        let current = log.current_files();
        log.files()
            .into_iter()
            .filter(|n| !current.contains(n))
            .collect()
    };
    let before = old(&log);
    assert!(before.len() > 4, "{before:?}");
    assert_eq!(log.retention_target(before.len() + 5), None);
    let keep = 3;
    let target = log.retention_target(keep).unwrap();
    log.delete_obsolete(target).unwrap();
    // A roll the lane thread finished meanwhile may have made one more old.
    let left = old(&log);
    assert!(left.len() == keep || left.len() == keep + 1, "{left:?}");
    // Every entry above the target is still there.
    let (live, _) = replay_all(&log, target);
    assert_eq!(seqs_of(&live), (target + 1..=2000).collect::<Vec<_>>());
    drop(log);

    let log = CommitLog::open(store.clone(), "r", opts(2048)).unwrap();
    // The old lanes' files are old files now, their maxima unknown.
    let target = log.retention_target(1).unwrap();
    log.delete_obsolete(target).unwrap();
    assert_eq!(old(&log).len(), 1);
    assert_eq!(log.retention_target(1), None);
}

#[test]
fn a_local_log_copied_while_its_writer_lives_replays_every_synced_append() {
    // What a kill -9 leaves: the files as the OS has them, the writer
    // never dropped, so the zeros written ahead of synced appends stay.
    let live = tempfile::tempdir().unwrap();
    let store = Arc::new(gfs::LocalStore::open(live.path()).unwrap());
    let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
    for s in 1..=300u64 {
        log.append_records(&[rec("r", &[s])], s % 3 == 0).unwrap();
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
            log.append_records(&[rec("r", &[s])], false).unwrap();
        }
    }
    let len = store.size(&first).unwrap() as usize;
    store.truncate(&first, len - 3).unwrap();
    let log = CommitLog::open(store.clone(), "d", opts(1 << 20)).unwrap();
    let (all, rep) = replay_all(&log, 0);
    assert_eq!(seqs_of(&all), vec![1, 2, 3, 4]);
    assert_eq!(rep.torn_tails, 1);
    assert_eq!(rep.corrupt_regions, 0);
    log.append_records(&[rec("r", &[6])], true).unwrap();
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
        log.append_records(&[rec("a", &[1])], false).unwrap();
        // Fill past the first block so later records survive the damage.
        let big = LogRecord {
            table: "t".into(),
            entries: vec![(
                key::encode(b"b", b"f", b"q", 1, 2, Kind::Put),
                vec![9; 40_000],
            )],
        };
        log.append_records(&[big], false).unwrap();
        log.append_records(&[rec("c", &[3])], false).unwrap();
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
    assert!(
        testkit::wait_until(Duration::from_secs(10), cond),
        "condition not reached"
    );
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
        log.append_records(&[big(s)], false).unwrap();
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

/// A log over `store` that switches lanes after the default 200 ms.
fn switching_log(store: &FlakyStore) -> CommitLog {
    let opts = CommitLogOptions {
        roll_size: 1 << 20,
        ..CommitLogOptions::default()
    };
    CommitLog::open(Arc::new(store.clone()), "d", opts).unwrap()
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
    let log = switching_log(&store);
    let [a, b] = log.current_files();
    log.append_records(&[rec("r", &[1])], true).unwrap();
    // Lane 0's file stalls: the append must complete through lane 1
    // while lane 0 is still blocked.
    store.ctl.gated.lock().insert(a.clone());
    log.append_records(&[rec("r", &[2])], true).unwrap();
    // Returned while lane 0's write is still held at the gate.
    assert!(store.ctl.gated.lock().contains(&a));
    wait_until(|| store.ctl.blocked.load(Ordering::SeqCst) == 1);
    let st = log.stats();
    assert_eq!((st.switches, st.active_lane), (1, 1));
    // Later appends go to lane 1 directly.
    log.append_records(&[rec("r", &[3])], false).unwrap();
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
    let log = switching_log(&store);
    let [a, b] = log.current_files();
    log.append_records(&[rec("r", &[1])], false).unwrap();
    log.append_records(&[rec("r", &[2])], false).unwrap();
    // Lane 0 stalls on a synced append: lane 1 takes it, and its sync
    // must also cover 1 and 2, which lane 0 holds unsynced.
    store.ctl.gated.lock().insert(a.clone());
    log.append_records(&[rec("r", &[3])], true).unwrap();
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
    log.append_records(&[rec("r", &[1])], true).unwrap();
    assert_eq!(log.stats().switches, 1);
    assert_eq!(read_file(&store.inner, &b), vec![1]);
    // Both lanes failing: the error reaches the caller.
    store.ctl.failing.lock().insert(b.clone());
    // Lane 0 rolls away from its failed file; fail its new file too.
    wait_until(|| log.current_files()[0] != a);
    let new_a = log.current_files()[0].clone();
    store.ctl.failing.lock().insert(new_a);
    assert!(log.append_records(&[rec("r", &[2])], true).is_err());
    store.ctl.failing.lock().clear();
    log.append_records(&[rec("r", &[3])], true).unwrap();
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
    log.append_records(&[rec("r", &[3])], true).unwrap();
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
