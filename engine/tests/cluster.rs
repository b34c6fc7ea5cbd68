//! The cluster inside one process: METADATA, masters, tablet servers,
//! recovery of a dead server's log, location caching, balancing and merges.
#![allow(clippy::unwrap_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn options() -> Options {
    Options {
        memtable_bytes: 16 << 10,
        sstable_target_bytes: 16 << 10,
        split_bytes: 64 << 10,
        merge_trigger: 3,
        log_file_bytes: 32 << 10,
        merge_bytes: 0,
        ..Options::default()
    }
}

fn schema() -> TableSchema {
    TableSchema::with_families([FamilySchema::new("f")])
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn value(bt: &Bigtable, row: &str) -> Option<Vec<u8>> {
    bt.read_cell("t", row.as_bytes(), "f", b"q")
        .unwrap()
        .map(|c| c.value)
}

#[test]
fn writes_survive_a_restart_through_log_recovery() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    {
        let bt = Bigtable::open(store.clone(), options()).unwrap();
        bt.create_table("t", schema()).unwrap();
        for i in 0..500 {
            bt.apply(
                "t",
                &RowMutation::new(format!("r{i:05}")).set("f", "q", format!("v{i}")),
                WriteOptions::default(),
            )
            .unwrap();
        }
        // Dropped without close: the memtables are only in the logs.
        std::mem::forget(bt);
    }
    let bt = Bigtable::open(store.clone(), options()).unwrap();
    for i in 0..500 {
        assert_eq!(
            value(&bt, &format!("r{i:05}")),
            Some(format!("v{i}").into_bytes()),
            "row {i}"
        );
    }
    assert_eq!(bt.list_tables(), vec!["t".to_string()]);
    bt.close().unwrap();
}
