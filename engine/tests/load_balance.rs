//! Balance that follows load: a skewed workload over three tablet servers
//! in one process is split by load (the table is far below the split size)
//! and ends up served by all three.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use rand::Rng;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The hot range: rows `h000`..`h999`; the rest of the table is cold.
fn hot_row(i: u64) -> String {
    format!("h{:03}", i % 1000)
}

/// The servers holding a part of the hot range.
fn hot_servers(bt: &Bigtable) -> BTreeSet<String> {
    bt.tablets("t")
        .unwrap()
        .into_iter()
        .filter(|t| {
            t.start.as_slice() < b"h999".as_slice()
                && t.end
                    .as_ref()
                    .is_none_or(|e| e.as_slice() > b"h000".as_slice())
        })
        .map(|t| t.server)
        .collect()
}

#[test]
fn a_hot_range_is_split_by_load_and_spread_over_three_servers() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let opts = Options {
        tablet_servers: 3,
        // Only load splits: the table stays far below this.
        split_bytes: 1 << 30,
        merge_bytes: 0,
        load_split_rate: 300,
        load_split_after: Duration::from_secs(2),
        ..Options::default()
    };
    let bt = Arc::new(Bigtable::open(store, opts).unwrap());
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    for cold in ["a", "z"] {
        bt.apply(
            "t",
            &RowMutation::new(cold).set("f", "q", "cold"),
            WriteOptions::default(),
        )
        .unwrap();
    }
    assert_eq!(bt.tablets("t").unwrap().len(), 1);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..3)
        .map(|_| {
            let (bt, stop, written) = (bt.clone(), stop.clone(), written.clone());
            std::thread::spawn(move || {
                let mut rng = rand::thread_rng();
                while !stop.load(Ordering::Relaxed) {
                    let i = rng.gen_range(0..1000);
                    let m = RowMutation::new(hot_row(i)).set("f", "q", format!("v{i}"));
                    // A write racing a split or move is retried by the client.
                    bt.apply("t", &m, WriteOptions::default()).unwrap();
                    let _ = bt.read_cell("t", hot_row(i + 1).as_bytes(), "f", b"q");
                    written.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let spread = testkit::wait_until(Duration::from_secs(120), || hot_servers(&bt).len() == 3);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let tablets = bt.tablets("t").unwrap();
    assert!(
        spread,
        "the hot range is still on {:?} after {} writes; tablets {:?}; master {:#?}",
        hot_servers(&bt),
        written.load(Ordering::Relaxed),
        tablets
            .iter()
            .map(|t| (t.start.escape_ascii().to_string(), t.server.clone()))
            .collect::<Vec<_>>(),
        bt.master_report()
    );
    // Far below the split size: every split was for load.
    assert!(tablets.len() >= 3, "split by load: {tablets:?}");
    // Nothing was lost on the way.
    for cold in ["a", "z"] {
        let c = bt.read_cell("t", cold.as_bytes(), "f", b"q").unwrap();
        assert_eq!(c.map(|c| c.value.into_vec()), Some(b"cold".to_vec()));
    }
    for i in 0..1000 {
        if let Some(c) = bt.read_cell("t", hot_row(i).as_bytes(), "f", b"q").unwrap() {
            assert_eq!(c.value.into_vec(), format!("v{i}").into_bytes());
        }
    }
    Arc::try_unwrap(bt).ok().unwrap().close().unwrap();
}
