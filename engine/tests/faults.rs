//! Bad input and faults at the engine API: every malformed input is a typed
//! error that changes nothing; corruption on disk is detected, never served.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, GcRule, TableSchema};
use engine::*;
use std::sync::Arc;

fn open(store: &gfs::MemStore) -> Bigtable {
    let opts = Options {
        max_value_size: 1 << 20,
        block_cache_bytes: 0,
        scan_cache_bytes: 0,
        ..Options::default()
    };
    Bigtable::open(Arc::new(store.clone()), opts).unwrap()
}

fn table(bt: &Bigtable) {
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
}

fn all_cells(bt: &Bigtable) -> Vec<Cell> {
    bt.scan("t", ScanSpec::default())
        .unwrap()
        .map(|c| c.unwrap())
        .collect()
}

#[test]
fn malformed_input_is_refused_and_changes_nothing() {
    let store = gfs::MemStore::new();
    let bt = open(&store);
    table(&bt);
    let ok = RowMutation::new("good").set("f", "q", "v");
    let w = WriteOptions::default();

    let long = vec![b'k'; 64 * 1024 + 1];
    assert!(matches!(
        bt.apply("t", &RowMutation::new(long).set("f", "q", "v"), w),
        Err(Error::RowKeyTooLong(_))
    ));
    assert!(matches!(
        bt.apply("t", &RowMutation::new("r").set("nope", "q", "v"), w),
        Err(Error::UnknownFamily { .. })
    ));
    assert!(matches!(
        bt.apply(
            "t",
            &RowMutation::new("r").set("f", "q", vec![0; (1 << 20) + 1]),
            w
        ),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        bt.apply("missing", &ok, w),
        Err(Error::TableNotFound(_))
    ));
    // A batch with one bad entry applies nothing, and names the entry.
    let batch = vec![
        ok.clone(),
        RowMutation::new("r2").set("f", "q", "v"),
        RowMutation::new("r3").set("bad", "q", "v"),
    ];
    match bt.apply_batch("t", &batch, w) {
        Err(Error::BadBatchEntry { index, .. }) => assert_eq!(index, 2),
        other => panic!("expected BadBatchEntry, got {other:?}"),
    }
    assert!(
        all_cells(&bt).is_empty(),
        "a refused batch left data behind"
    );

    let spec = ScanSpec {
        column_regex: Some("f:(".into()),
        ..ScanSpec::default()
    };
    assert!(matches!(bt.scan("t", spec), Err(Error::BadRegex { .. })));

    let mut bad = FamilySchema::new("g");
    bad.gc = GcRule::MaxVersions(0);
    assert!(bt
        .create_table("t2", TableSchema::with_families([bad.clone()]))
        .is_err());
    assert!(bt.schema("t2").is_err(), "a refused table was created");
    assert!(bt
        .set_schema(
            "t",
            TableSchema::with_families([FamilySchema::new("f"), bad])
        )
        .is_err());
    assert_eq!(bt.schema("t").unwrap().families.len(), 1);

    // Counters refuse non-counters.
    bt.apply("t", &RowMutation::new("c").set("f", "n", "abc"), w)
        .unwrap();
    assert!(matches!(
        bt.increment("t", b"c", "f", b"n", 1, w),
        Err(Error::NotACounter(3))
    ));
    bt.apply("t", &ok, w).unwrap();
    assert_eq!(all_cells(&bt).len(), 2);
}

#[test]
fn dropping_a_family_with_data_is_refused() {
    let store = gfs::MemStore::new();
    let bt = open(&store);
    bt.create_table(
        "t",
        TableSchema::with_families([FamilySchema::new("f"), FamilySchema::new("g")]),
    )
    .unwrap();
    bt.apply(
        "t",
        &RowMutation::new("r").set("g", "q", "v"),
        WriteOptions::default(),
    )
    .unwrap();
    let only_f = TableSchema::with_families([FamilySchema::new("f")]);
    assert!(matches!(
        bt.set_schema("t", only_f.clone()),
        Err(Error::FamilyNotEmpty(f)) if f == "g"
    ));
    bt.apply(
        "t",
        &RowMutation::new("r").delete_family("g"),
        WriteOptions::default(),
    )
    .unwrap();
    bt.set_schema("t", only_f).unwrap();
    assert!(!bt.schema("t").unwrap().families.contains_key("g"));
}

#[test]
fn corrupt_sstable_is_detected_not_served() {
    let store = gfs::MemStore::new();
    let bt = open(&store);
    table(&bt);
    let batch: Vec<RowMutation> = (0..500)
        .map(|i| RowMutation::new(format!("row{i:04}")).set("f", "q", format!("value {i}")))
        .collect();
    bt.apply_batch("t", &batch, WriteOptions::default())
        .unwrap();
    bt.flush().unwrap();
    // The table's SSTable is the biggest (METADATA's are small).
    let sst = gfs::FileStore::list(&store, "sst/").unwrap();
    let biggest = sst
        .iter()
        .max_by_key(|n| gfs::FileStore::size(&store, n).unwrap())
        .unwrap();
    // Flip one byte inside the first data block.
    store.corrupt(biggest, 20).unwrap();
    let r = bt
        .scan("t", ScanSpec::default())
        .unwrap()
        .collect::<Result<Vec<_>>>();
    assert!(
        matches!(r, Err(Error::Corruption(_)) | Err(Error::Shared(_))),
        "corruption was not reported: {r:?}"
    );
    let r = bt.read_cell("t", b"row0000", "f", b"q");
    assert!(r.is_err(), "a corrupt block was served: {r:?}");
}

#[test]
fn torn_log_tail_loses_only_the_torn_record() {
    let store = gfs::MemStore::new();
    {
        let bt = open(&store);
        table(&bt);
        for i in 0..50 {
            bt.apply(
                "t",
                &RowMutation::new(format!("r{i:02}")).set("f", "q", "v"),
                WriteOptions::default(),
            )
            .unwrap();
        }
        bt.close().unwrap();
    }
    // Tear the end of the log file that holds the records.
    let logs = gfs::FileStore::list(&store, "logs/").unwrap();
    let (name, size) = logs
        .iter()
        .map(|n| (n.clone(), gfs::FileStore::size(&store, n).unwrap()))
        .max_by_key(|(_, s)| *s)
        .unwrap();
    store.truncate(&name, size as usize - 3).unwrap();
    let bt = open(&store);
    let rows: Vec<Vec<u8>> = all_cells(&bt).into_iter().map(|c| c.row).collect();
    assert_eq!(rows.len(), 49, "expected all but the torn record");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r, format!("r{i:02}").as_bytes());
    }
}
