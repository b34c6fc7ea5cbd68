//! The change log (docs/changes.md): every acknowledged mutation once, in
//! commit order, through deletes, compactions, splits, restarts and
//! concurrent writers; resumable from any position; replayable into
//! another table to make it equal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::changes::{ChangeQuery, ChangeRecord, Position};
use engine::schema::{FamilySchema, GcMode, GcRule, TableSchema};
use engine::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn options() -> Options {
    // Small memtables and split size: the tests flush and split often.
    Options {
        split_bytes: 64 << 10,
        memtable_bytes: 16 << 10,
        ..Options::default()
    }
}

fn logged() -> TableSchema {
    TableSchema {
        change_retention: 3_600_000_000,
        ..TableSchema::with_families([FamilySchema::new("f"), FamilySchema::new("g")])
    }
}

/// Every change from `after` until the watermark passes `until_ts`, read
/// `batch` at a time; checks each batch is in commit order.
fn read_all(bt: &Bigtable, table: &str, after: Position, batch: usize) -> Vec<ChangeRecord> {
    let mut out: Vec<ChangeRecord> = Vec::new();
    let mut q = ChangeQuery {
        after,
        max_records: batch,
        ..Default::default()
    };
    let goal = now_micros();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let b = bt.read_changes(table, &q).unwrap();
        let cut = b.records.len() == batch;
        out.extend(b.records);
        q.after = b.next;
        if !cut && b.watermark >= goal {
            break;
        }
        assert!(Instant::now() < deadline, "the watermark never passed now");
    }
    for w in out.windows(2) {
        assert!(
            (w[0].commit_ts, &w[0].row) <= (w[1].commit_ts, &w[1].row),
            "out of order"
        );
    }
    out
}

/// A cell's coordinates and value.
type Version = (Vec<u8>, String, Vec<u8>, u64, Vec<u8>);

fn all_versions(bt: &Bigtable, table: &str) -> Vec<Version> {
    bt.scan(table, ScanSpec::default())
        .unwrap()
        .map(|c| {
            let c = c.unwrap();
            (
                c.row,
                c.family,
                c.qualifier,
                c.timestamp,
                c.value.into_vec(),
            )
        })
        .collect()
}

#[test]
fn changes_are_logged_in_order_hidden_from_reads_and_replay_into_an_equal_table() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", logged()).unwrap();
    bt.create_table(
        "plain",
        TableSchema::with_families([FamilySchema::new("f")]),
    )
    .unwrap();
    let err = bt
        .read_changes("plain", &ChangeQuery::default())
        .unwrap_err();
    assert!(err.to_string().contains("no change log"), "{err}");
    let w = WriteOptions::default();
    let muts = vec![
        RowMutation::new("a")
            .set("f", "q", "1")
            .set_at("g", "x", 5, "five"),
        RowMutation::new("b").set("f", "q", "2"),
        RowMutation::new("a").delete_cells("g", "x", TimeRange::ALL),
        RowMutation::new("b").delete_row(),
        RowMutation::new("c")
            .set("f", "q\0bin", vec![0u8, 255])
            .delete_family("g"),
        RowMutation::new("b").set("f", "q", "again"),
    ];
    for m in &muts {
        bt.apply("t", m, w).unwrap();
    }
    let got = read_all(&bt, "t", Position::default(), 100);
    assert_eq!(got.len(), muts.len());
    for (r, m) in got.iter().zip(&muts) {
        assert_eq!(r.row, m.row);
        assert!(!r.gc);
        assert_eq!(r.mutations.len(), m.mutations.len());
    }
    // Users never see the log.
    let cells = bt.read_row("t", b"b", &ScanSpec::default()).unwrap();
    assert!(cells.iter().all(|c| c.family == "f"), "{cells:?}");
    // It outlives the row delete and a major compaction.
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    let again = read_all(&bt, "t", Position::default(), 2);
    assert_eq!(again, got);
    // Resuming from every position loses and repeats nothing.
    let mut pos = Position::default();
    let mut one_by_one = Vec::new();
    while one_by_one.len() < got.len() {
        let b = bt
            .read_changes(
                "t",
                &ChangeQuery {
                    after: Position::parse(&pos.to_token()).unwrap(),
                    max_records: 1,
                    ..Default::default()
                },
            )
            .unwrap();
        one_by_one.extend(b.records);
        pos = b.next;
    }
    assert_eq!(one_by_one, got);
    // A row range reads its rows only.
    let only_b = bt
        .read_changes(
            "t",
            &ChangeQuery {
                start: b"b".to_vec(),
                end: Some(b"c".to_vec()),
                max_records: 100,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(only_b.records.len(), 3);
    // Replaying the log into another table makes it equal, versions and all.
    bt.create_table(
        "u",
        TableSchema::with_families([FamilySchema::new("f"), FamilySchema::new("g")]),
    )
    .unwrap();
    for r in &got {
        let m = RowMutation {
            row: r.row.clone(),
            mutations: r.mutations.clone(),
        };
        bt.apply("u", &m, w).unwrap();
    }
    assert_eq!(all_versions(&bt, "u"), all_versions(&bt, "t"));
    // A token older than the retention is refused clearly.
    let err = bt
        .read_changes(
            "t",
            &ChangeQuery {
                after: Position { ts: 1, skip: 0 },
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("older than"), "{err}");
    bt.close().unwrap();
}

#[test]
fn the_log_survives_a_restart_through_log_recovery() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    {
        let bt = Bigtable::open(store.clone(), options()).unwrap();
        bt.create_table("t", logged()).unwrap();
        for i in 0..300 {
            bt.apply(
                "t",
                &RowMutation::new(format!("r{i:05}")).set("f", "q", format!("v{i}")),
                WriteOptions::default(),
            )
            .unwrap();
        }
        std::mem::forget(bt);
    }
    let bt = Bigtable::open(store, options()).unwrap();
    // One read fills its batch, however the windows were halved.
    let first = bt
        .read_changes(
            "t",
            &ChangeQuery {
                max_records: 50,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(first.records.len(), 50);
    let got = read_all(&bt, "t", Position::default(), 50);
    let rows: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.row.clone()).unwrap())
        .collect();
    let want: Vec<String> = (0..300).map(|i| format!("r{i:05}")).collect();
    assert_eq!(rows, want);
    bt.close().unwrap();
}

#[test]
fn concurrent_writers_and_splits_lose_and_repeat_nothing() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Arc::new(Bigtable::open(store, options()).unwrap());
    bt.create_table("t", logged()).unwrap();
    let acked: Arc<Mutex<HashSet<Vec<u8>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (bt, acked, stop) = (bt.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && i < 1500 {
                    let row = format!("{:04}-{w}", (i * 7919) % 10_000).into_bytes();
                    let v = format!("w{w}i{i}");
                    bt.apply(
                        "t",
                        &RowMutation::new(row).set("f", "q", v.clone()),
                        WriteOptions::default(),
                    )
                    .unwrap();
                    acked.lock().unwrap().insert(v.into_bytes());
                    i += 1;
                }
            })
        })
        .collect();
    // A reader follows meanwhile, small batches, while tablets split.
    let mut seen: Vec<ChangeRecord> = Vec::new();
    let mut q = ChangeQuery {
        max_records: 37,
        ..Default::default()
    };
    let mut splits = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        let b = bt.read_changes("t", &q).unwrap();
        seen.extend(b.records);
        q.after = b.next;
        if splits < 3 && seen.len() > 1000 * (splits + 1) {
            bt.flush().unwrap();
            bt.split_now("t").unwrap();
            splits += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    seen.extend(read_all(&bt, "t", q.after, 37));
    assert!(bt.tablets("t").unwrap().len() > 1, "the table split");
    let values: Vec<Vec<u8>> = seen
        .iter()
        .map(|r| match &r.mutations[0] {
            Mutation::SetCell { value, .. } => value.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let unique: HashSet<Vec<u8>> = values.iter().cloned().collect();
    assert_eq!(unique.len(), values.len(), "a change was repeated");
    let acked = acked.lock().unwrap();
    let lost = acked.difference(&unique).count();
    let extra = unique.difference(&acked).count();
    assert_eq!((lost, extra), (0, 0), "lost and unacknowledged changes");
    for w in seen.windows(2) {
        assert!(w[0].commit_ts <= w[1].commit_ts, "out of commit order");
    }
    bt.close().unwrap();
}

/// The change log's cost to writes: the same unsynced single-row writes
/// into a table without and with a log, in one run (prints writes/s; run
/// with `--ignored --nocapture`).
#[test]
#[ignore]
fn measure_the_change_logs_cost_to_writes() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    bt.create_table(
        "plain",
        TableSchema::with_families([FamilySchema::new("f")]),
    )
    .unwrap();
    bt.create_table("logged", logged()).unwrap();
    let value = vec![7u8; 100];
    for round in 0..2 {
        for table in ["plain", "logged"] {
            let n = 20_000;
            let start = Instant::now();
            for i in 0..n {
                bt.apply(
                    table,
                    &RowMutation::new(format!("r{round}-{i:06}")).set("f", "q", value.clone()),
                    WriteOptions::default(),
                )
                .unwrap();
            }
            let rate = n as f64 / start.elapsed().as_secs_f64();
            println!("round {round} {table}: {rate:.0} writes/s");
        }
    }
    let start = Instant::now();
    let mut q = ChangeQuery {
        max_records: 10_000,
        ..Default::default()
    };
    let mut read = 0;
    loop {
        let b = bt.read_changes("logged", &q).unwrap();
        read += b.records.len();
        q.after = b.next;
        if b.records.is_empty() {
            break;
        }
    }
    println!(
        "read {read} changes at {:.0}/s",
        read as f64 / start.elapsed().as_secs_f64()
    );
    bt.close().unwrap();
}

/// Every way rows go is in the log: DropRowRange's and the mount's
/// `rm -r` (a `DeleteRow` per row, in batches) and a family's cells
/// (`DeleteFamily`); a snapshot restore, which would bypass it, is refused.
#[test]
fn row_range_deletes_are_logged_and_a_restore_that_would_bypass_the_log_is_refused() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", logged()).unwrap();
    let w = WriteOptions::default();
    let rows: Vec<String> = (0..40).map(|i| format!("r{i:03}")).collect();
    let puts: Vec<RowMutation> = rows
        .iter()
        .map(|r| {
            RowMutation::new(r.as_str())
                .set("f", "q", "v")
                .set("g", "q", "w")
        })
        .collect();
    bt.apply_batch("t", &puts, w).unwrap();
    bt.take_snapshot("t", "s").unwrap();
    // As grpc's drop::delete_rows does for DropRowRange: scan, delete rows.
    let doomed: Vec<RowMutation> = bt
        .scan(
            "t",
            ScanSpec {
                rows: RowRange::prefix(b"r01"),
                max_versions: Some(1),
                ..Default::default()
            },
        )
        .unwrap()
        .map(|c| c.unwrap().row)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|r| RowMutation::new(r).delete_row())
        .collect();
    assert_eq!(doomed.len(), 10);
    bt.apply_batch("t", &doomed, w).unwrap();
    bt.apply("t", &RowMutation::new("r020").delete_family("g"), w)
        .unwrap();
    let got = read_all(&bt, "t", Position::default(), 100);
    let deleted: HashSet<Vec<u8>> = got
        .iter()
        .filter(|r| r.mutations == vec![Mutation::DeleteRow])
        .map(|r| r.row.clone())
        .collect();
    let want: HashSet<Vec<u8>> = doomed.iter().map(|m| m.row.clone()).collect();
    assert_eq!(deleted, want);
    assert!(got
        .iter()
        .any(|r| r.row == b"r020"
            && r.mutations == vec![Mutation::DeleteFamily { family: "g".into() }]));
    let err = bt.restore_snapshot("t", "s").unwrap_err();
    assert!(err.to_string().contains("change log"), "{err}");
    // Nothing was restored: the deleted rows stay deleted.
    assert!(bt
        .read_row("t", b"r010", &ScanSpec::default())
        .unwrap()
        .is_empty());
    bt.close().unwrap();
}

/// (family, qualifier, timestamp) of each version the GC records delete;
/// checks every op of a GC record is the delete of one version.
fn collected(records: &[ChangeRecord]) -> Vec<(String, Vec<u8>, u64)> {
    let mut out = Vec::new();
    for r in records.iter().filter(|r| r.gc) {
        for m in &r.mutations {
            match m {
                Mutation::DeleteCells {
                    family,
                    qualifier,
                    range,
                } => {
                    assert_eq!(range.end, range.start + 1, "{r:?}");
                    out.push((family.clone(), qualifier.clone(), range.start));
                }
                other => panic!("a GC record with {other:?}"),
            }
        }
    }
    out.sort();
    out
}

#[test]
fn garbage_collection_is_logged_as_such_once_and_retention_drops_old_changes() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    let mut f = FamilySchema::new("f");
    f.gc = GcRule::flat(Some(2), None, GcMode::Union);
    let mut h = FamilySchema::new("h");
    h.gc = GcRule::flat(None, Some(60_000_000), GcMode::Union);
    let schema = TableSchema {
        change_retention: 3_600_000_000,
        ..TableSchema::with_families([f, FamilySchema::new("g"), h])
    };
    bt.create_table("t", schema.clone()).unwrap();
    let w = WriteOptions::default();
    let old = now_micros() - 600_000_000;
    let mut m = RowMutation::new("a");
    for ts in 1..=4 {
        m = m.set_at("f", "q", ts, format!("v{ts}"));
    }
    m = m
        .set_at("g", "x", 10, "ten")
        .set_at("g", "x", 20, "twenty")
        .set_at("h", "old", old, "expired")
        .set("h", "new", "fresh");
    bt.apply("t", &m, w).unwrap();
    // A flush drops nothing it could not report; a major compaction
    // drops the two oldest versions of f:q and h's expired cell.
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    let first = read_all(&bt, "t", Position::default(), 100);
    assert_eq!(first.iter().filter(|r| !r.gc).count(), 1);
    let want = vec![
        ("f".to_string(), b"q".to_vec(), 1),
        ("f".to_string(), b"q".to_vec(), 2),
        ("h".to_string(), b"old".to_vec(), old),
    ];
    assert_eq!(collected(&first), want);
    // A schema change that keeps one version of g: its older one goes at
    // the next major compaction, logged as GC too; nothing is logged twice.
    let mut shorter = schema.clone();
    if let Some(g) = shorter.families.get_mut("g") {
        g.gc = GcRule::flat(Some(1), None, GcMode::Union);
    }
    bt.set_schema("t", shorter).unwrap();
    bt.compact("t", true).unwrap();
    bt.compact("t", true).unwrap();
    let all = read_all(&bt, "t", Position::default(), 100);
    let mut want2 = want.clone();
    want2.push(("g".to_string(), b"x".to_vec(), 10));
    want2.sort();
    assert_eq!(collected(&all), want2);
    // The data is what the rules keep.
    let cells: Vec<(String, Vec<u8>, u64)> = all_versions(&bt, "t")
        .into_iter()
        .map(|(_, f, q, ts, _)| (f, q, ts))
        .collect();
    assert_eq!(cells.len(), 4, "{cells:?}");

    // Retention: a table keeping changes for 1 s drops them after it, and
    // a token older than it is refused clearly.
    bt.create_table(
        "r",
        TableSchema {
            change_retention: 1_000_000,
            ..TableSchema::with_families([FamilySchema::new("f")])
        },
    )
    .unwrap();
    bt.apply("r", &RowMutation::new("a").set("f", "q", "1"), w)
        .unwrap();
    let written = now_micros();
    let got = bt.read_changes("r", &ChangeQuery::default()).unwrap();
    assert_eq!(got.records.len(), 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while now_micros() < written + 1_500_000 {
        assert!(Instant::now() < deadline);
        std::thread::yield_now();
    }
    bt.flush().unwrap();
    bt.compact("r", true).unwrap();
    let got = bt.read_changes("r", &ChangeQuery::default()).unwrap();
    assert!(got.records.is_empty(), "{:?}", got.records);
    let err = bt
        .read_changes(
            "r",
            &ChangeQuery {
                after: Position {
                    ts: written,
                    skip: 0,
                },
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("older than table r's change retention"),
        "{err}"
    );
    bt.close().unwrap();
}

#[test]
fn a_clone_of_a_logged_table_keeps_its_log_up_to_the_snapshot_and_logs_on() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", logged()).unwrap();
    let w = WriteOptions::default();
    bt.apply("t", &RowMutation::new("a").set("f", "q", "1"), w)
        .unwrap();
    bt.apply("t", &RowMutation::new("b").set("f", "q", "2"), w)
        .unwrap();
    bt.take_snapshot("t", "s").unwrap();
    bt.apply("t", &RowMutation::new("c").set("f", "q", "after"), w)
        .unwrap();
    bt.clone_snapshot("t", "s", "u").unwrap();
    bt.apply("u", &RowMutation::new("d").set("f", "q", "in the clone"), w)
        .unwrap();
    let rows = |table: &str| -> Vec<Vec<u8>> {
        read_all(&bt, table, Position::default(), 100)
            .into_iter()
            .map(|r| r.row)
            .collect()
    };
    // The clone's log is the source's up to the snapshot (it rebuilds the
    // clone's data), then its own writes; the source's later ones are not
    // in it.
    assert_eq!(rows("u"), [b"a".to_vec(), b"b".to_vec(), b"d".to_vec()]);
    assert_eq!(rows("t"), [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    bt.close().unwrap();
}
