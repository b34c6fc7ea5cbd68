//! Memtables frozen by an explicit flush while writers are committing: every
//! acknowledged write must be readable at once, after the flushes, and after
//! a reopen (a memtable written out while a commit was still inserting into
//! it would lose that commit's entries).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

const WRITERS: u64 = 4;
const ROWS: u64 = 1500;

fn open(dir: &std::path::Path) -> Bigtable {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::LocalStore::open(dir).unwrap());
    Bigtable::open(store, Options::default()).unwrap()
}

fn row(writer: u64, i: u64) -> String {
    format!("w{writer}-{i:06}")
}

fn value(writer: u64, i: u64) -> Vec<u8> {
    format!("{writer}/{i}/").repeat(20).into_bytes()
}

fn check_all(bt: &Bigtable, when: &str) {
    for w in 0..WRITERS {
        for i in 0..ROWS {
            let got = bt
                .read_cell("t", row(w, i).as_bytes(), "f", b"q")
                .unwrap()
                .map(|c| c.value.into_vec());
            assert_eq!(got, Some(value(w, i)), "{when}: row {}", row(w, i));
        }
    }
}

#[test]
fn writes_committed_while_flushes_freeze_memtables_are_all_kept() {
    let dir = tempfile::tempdir().unwrap();
    let bt = open(dir.path());
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    let done = AtomicBool::new(false);
    let flushes = AtomicU64::new(0);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let bt = &bt;
                s.spawn(move || {
                    for i in 0..ROWS {
                        let m = RowMutation::new(row(w, i)).set("f", b"q".to_vec(), value(w, i));
                        bt.apply("t", &m, WriteOptions::default()).unwrap();
                        // Read-your-writes, whatever a flush is doing.
                        let got = bt.read_cell("t", row(w, i).as_bytes(), "f", b"q").unwrap();
                        assert_eq!(got.map(|c| c.value.into_vec()), Some(value(w, i)));
                    }
                })
            })
            .collect();
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                bt.flush().unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
            }
        });
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    assert!(flushes.load(Ordering::Relaxed) > 0);
    check_all(&bt, "after the writes");
    bt.flush().unwrap();
    check_all(&bt, "after a last flush");
    bt.close().unwrap();
    drop(bt);
    let bt = open(dir.path());
    check_all(&bt, "after a reopen");
    bt.close().unwrap();
}
