//! Splits while writers are stalled on frozen memtables: a writer waiting
//! for a flush must not hold the tablet's gate, or a split (holding the
//! claim the flush needs) waits to close the gate forever.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const WRITERS: u64 = 4;
const ROWS: u64 = 400;

fn row(writer: u64, i: u64) -> String {
    format!("w{writer}-{i:06}")
}

/// A store whose new files (SSTables, not logs) take a while to create,
/// so flushes lag and writers stall on frozen memtables.
struct SlowCreate(Arc<dyn gfs::FileStore>);

impl gfs::FileStore for SlowCreate {
    fn create(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        std::thread::sleep(Duration::from_millis(20));
        self.0.create(name)
    }
    fn create_log(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.0.create_log(name)
    }
    fn open_append(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.0.open_append(name)
    }
    fn open(&self, name: &str) -> gfs::Result<Arc<dyn gfs::ReadableFile>> {
        self.0.open(name)
    }
    fn delete(&self, name: &str) -> gfs::Result<()> {
        self.0.delete(name)
    }
    fn rename(&self, from: &str, to: &str) -> gfs::Result<()> {
        self.0.rename(from, to)
    }
    fn replace(&self, name: &str, bufs: &[&[u8]]) -> gfs::Result<()> {
        self.0.replace(name, bufs)
    }
    fn exists(&self, name: &str) -> gfs::Result<bool> {
        self.0.exists(name)
    }
    fn size(&self, name: &str) -> gfs::Result<u64> {
        self.0.size(name)
    }
    fn list(&self, prefix: &str) -> gfs::Result<Vec<String>> {
        self.0.list(prefix)
    }
    fn durable_appends(&self) -> bool {
        self.0.durable_appends()
    }
    fn shared_by_daemons(&self) -> bool {
        self.0.shared_by_daemons()
    }
    fn seal_logs(&self, dir: &str) -> gfs::Result<usize> {
        self.0.seal_logs(dir)
    }
}

/// Writer `w`'s rows, one write each, with values of 2 KiB that fill a
/// memtable every few writes.
fn write_rows(bt: &Bigtable, w: u64) {
    for i in 0..ROWS {
        let m = RowMutation::new(row(w, i)).set("f", b"q".to_vec(), vec![b'v'; 2048]);
        bt.apply("t", &m, WriteOptions::default()).unwrap();
    }
}

/// Tiny memtables, flushed by one worker, so writers stall often.
fn workload(dir: &std::path::Path) {
    let local: Arc<dyn gfs::FileStore> = Arc::new(gfs::LocalStore::open(dir).unwrap());
    let store: Arc<dyn gfs::FileStore> = Arc::new(SlowCreate(local));
    let opts = Options {
        memtable_bytes: 16 << 10,
        background_threads: 1,
        balance: false,
        ..Options::default()
    };
    let bt = Bigtable::open(store, opts).unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let bt = &bt;
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| s.spawn(move || write_rows(bt, w)))
            .collect();
        // Splits, each inside whichever tablet holds its row, while the
        // writers stall.
        s.spawn(|| {
            let mut i = 0;
            while !done.load(Ordering::Acquire) {
                let at = format!("w{}-{:06}", i % WRITERS, (i * 7) % ROWS);
                bt.split_at_rows("t", &[at.into_bytes()]).unwrap();
                i += 1;
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    // The case this test is about happened: writers stalled, tablets split.
    let reports = bt.server_reports();
    assert!(
        reports.iter().map(|r| r.stalls).sum::<u64>() > 0,
        "no writer stalled"
    );
    assert!(
        reports.iter().map(|r| r.splits).sum::<u64>() > 0,
        "nothing split"
    );
    for w in 0..WRITERS {
        for i in 0..ROWS {
            let got = bt.read_cell("t", row(w, i).as_bytes(), "f", b"q").unwrap();
            assert_eq!(got.map(|c| c.value.len()), Some(2048), "row {}", row(w, i));
        }
    }
    bt.close().unwrap();
}

#[test]
fn splits_while_writers_are_stalled_on_frozen_memtables_finish() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        workload(&path);
        let _ = tx.send(());
    });
    // A deadlock fails the test rather than hanging it; a panic in the
    // workload drops the sender and fails it too.
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the workload did not finish in 120 s: split and stalled writers deadlocked")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the workload panicked"),
    }
}
