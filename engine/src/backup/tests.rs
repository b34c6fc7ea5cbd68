//! Backups to another store: incremental, checked, restorable after the
//! table and every file of its store are gone, and never listed half made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::{JobState, Source};
use crate::schema::{FamilySchema, TableSchema};
use crate::snapshot::tests::{gc, options};
use crate::{Bigtable, Error, RowMutation, ScanSpec, WriteOptions};
use std::sync::Arc;

/// A daemon on a store of its own with the backup store `offsite`, and
/// table `t` of family `f`.
fn setup() -> (Arc<dyn gfs::FileStore>, Arc<dyn gfs::FileStore>, Bigtable) {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let offsite: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    // No background splits, merges, moves or merging compactions: the
    // files a backup shares with the one before are replaced only by the
    // tests' own compactions, whenever the machine gets to them.
    let opts = crate::Options {
        split_bytes: 1 << 40,
        merge_bytes: 0,
        merge_trigger: 1000,
        balance: false,
        load_split_rate: 0,
        ..options()
    };
    let bt = Bigtable::open(store.clone(), opts).unwrap();
    bt.add_backup_store("offsite", offsite.clone()).unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    (store, offsite, bt)
}

/// A cell: row, family, qualifier, timestamp, value.
type Cell = (Vec<u8>, String, Vec<u8>, i64, Vec<u8>);

/// Every cell of every version, in order.
fn cells(bt: &Bigtable, table: &str) -> Vec<Cell> {
    let spec = ScanSpec {
        max_versions: Some(u32::MAX),
        ..ScanSpec::default()
    };
    let mut scan = bt.scan(table, spec).unwrap();
    let mut out = Vec::new();
    while let Some((_, cs)) = scan.next_row().unwrap() {
        for c in cs {
            out.push((
                c.row.clone(),
                c.family.clone(),
                c.qualifier.clone(),
                c.timestamp as i64,
                c.value.to_vec(),
            ));
        }
    }
    out
}

fn write(bt: &Bigtable, from: u64, to: u64, version: u64) {
    for n in from..to {
        let m = RowMutation::new(format!("r{n:05}")).set_at(
            "f",
            "q",
            1 + version,
            format!("{n}:{version}:{}", "v".repeat(200)),
        );
        bt.apply("t", &m, WriteOptions::default()).unwrap();
    }
}

#[test]
fn a_backup_is_incremental_and_restores_every_version_after_its_store_lost_the_table() {
    let _ = env_logger::builder().is_test(true).try_init();
    let (store, offsite, bt) = setup();
    write(&bt, 0, 1500, 1);
    write(&bt, 0, 300, 2);
    // Files the next writes leave alone (a compaction would replace them).
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    bt.take_snapshot("t", "one").unwrap();
    let first = bt
        .copy_backup(Source::Snapshot, "t", "one", "offsite")
        .unwrap();
    assert!(!first.files.is_empty());
    let job = bt.backup_jobs().pop().unwrap();
    assert_eq!(*job.state.lock(), JobState::Done);
    assert_eq!(job.percent(), 100);
    assert_eq!(
        job.bytes_skipped.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    // A second backup copies only the files the first did not.
    write(&bt, 1500, 1600, 1);
    bt.take_snapshot("t", "two").unwrap();
    let second = bt
        .copy_backup(Source::Snapshot, "t", "two", "offsite")
        .unwrap();
    let job = bt.backup_jobs().pop().unwrap();
    let skipped = job.bytes_skipped.load(std::sync::atomic::Ordering::Relaxed);
    let shared: u64 = second
        .files
        .iter()
        .filter(|f| first.files.iter().any(|g| g.key == f.key))
        .map(|f| f.size)
        .sum();
    assert!(shared > 0, "the second backup shares files with the first");
    assert_eq!(skipped, shared, "what both name is copied once");
    assert!(matches!(
        bt.copy_backup(Source::Snapshot, "t", "two", "offsite"),
        Err(Error::SnapshotExists(_))
    ));
    let want = cells(&bt, "t");
    // The table, its snapshots and then every file of it leave its store.
    bt.delete_snapshot("t", "one").unwrap();
    bt.delete_snapshot("t", "two").unwrap();
    bt.delete_table("t").unwrap();
    for (e, _) in bt.trash().unwrap() {
        bt.purge_trash(e.id).unwrap();
    }
    gc(&bt);
    for f in &second.files {
        assert!(
            !store
                .exists(&crate::compaction::sst_name(f.number))
                .unwrap(),
            "file {} is gone from the table's store",
            f.number
        );
    }
    bt.restore_backup("offsite", "t", "two", "t").unwrap();
    assert_eq!(cells(&bt, "t"), want);
    // The restored table takes writes; the backup does not change.
    write(&bt, 0, 10, 3);
    assert_eq!(bt.backup_record("offsite", "t", "two").unwrap(), second);
    // Deleting the first backup keeps what the second names.
    bt.delete_backup("offsite", "t", "one").unwrap();
    for f in &second.files {
        assert!(offsite.exists(&f.key).unwrap(), "{} stays", f.key);
    }
    bt.delete_backup("offsite", "t", "two").unwrap();
    assert!(offsite.list("files/").unwrap().is_empty());
    bt.close().unwrap();
}

#[test]
fn a_damaged_copy_fails_the_restore_and_leaves_no_table() {
    let (_, offsite, bt) = setup();
    write(&bt, 0, 200, 1);
    bt.take_snapshot("t", "s").unwrap();
    let rec = bt
        .copy_backup(Source::Snapshot, "t", "s", "offsite")
        .unwrap();
    // Same size, other bytes.
    let f = &rec.files[0];
    offsite.delete(&f.key).unwrap();
    let mut w = offsite.create(&f.key).unwrap();
    w.append(&vec![7u8; f.size as usize]).unwrap();
    w.sync().unwrap();
    drop(w);
    let e = bt.restore_backup("offsite", "t", "s", "u").unwrap_err();
    assert!(matches!(e, Error::Corruption(_)), "{e}");
    assert!(bt.table("u").is_err(), "no table from a damaged backup");
    assert!(bt.list_snapshots("u").unwrap().is_empty());
    let job = bt.backup_jobs().pop().unwrap();
    assert!(matches!(&*job.state.lock(), JobState::Failed(_)));
    bt.close().unwrap();
}

#[test]
fn a_protected_table_is_not_restored_in_place() {
    let (_, _, bt) = setup();
    write(&bt, 0, 20, 1);
    bt.take_snapshot("t", "s").unwrap();
    write(&bt, 20, 30, 1);
    let mut protected = (*bt.schema("t").unwrap()).clone();
    protected.deletion_protection = true;
    bt.set_schema("t", protected.clone()).unwrap();
    let want = cells(&bt, "t");
    let e = bt.control("restore t s").unwrap_err();
    assert!(matches!(e.root(), Error::DeletionProtected { .. }), "{e}");
    assert_eq!(cells(&bt, "t"), want, "nothing was dropped");
    // Unprotected, it is restored.
    protected.deletion_protection = false;
    bt.set_schema("t", protected).unwrap();
    bt.control("restore t s").unwrap();
    assert_eq!(cells(&bt, "t").len(), 20);
    bt.close().unwrap();
}
