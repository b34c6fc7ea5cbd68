//! Snapshots taken while writers write and tablets split and move, cut
//! short at each step as a crash would, and kept from GC only while named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::Step;
use crate::compaction::{sst_name, sst_number};
use crate::schema::{FamilySchema, TableSchema};
use crate::{Bigtable, Error, Options, RowMutation, ScanSpec, WriteOptions};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::wait_until;

pub(crate) fn options() -> Options {
    Options {
        // Not smaller: with four writers on a loaded machine, memtables
        // this small pile up past the stall limit, and a split waiting for
        // a stalled writer's gate while holding the claim the flush needs
        // never ends (a deadlock of the split path, not of snapshots).
        memtable_bytes: 64 << 10,
        sstable_target_bytes: 16 << 10,
        split_bytes: 96 << 10,
        merge_trigger: 3,
        log_file_bytes: 32 << 10,
        tablet_servers: 2,
        ..Options::default()
    }
}

fn open(store: &Arc<dyn gfs::FileStore>) -> Bigtable {
    Bigtable::open(store.clone(), options()).unwrap()
}

fn schema() -> TableSchema {
    TableSchema::with_families([FamilySchema::new("f")])
}

/// Every row of a scan and its newest value.
fn rows(scan: crate::Scanner) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut out = HashMap::new();
    let mut scan = scan;
    while let Some((row, cells)) = scan.next_row().unwrap() {
        out.insert(row, cells[0].value.to_vec());
    }
    out
}

pub(crate) fn gc(bt: &Bigtable) {
    let mut last = None;
    let done = wait_until(Duration::from_secs(60), || match bt.control("gc") {
        Ok(()) => true,
        Err(e) => {
            last = Some(e);
            false
        }
    });
    assert!(done, "no collection ran: {last:?}");
}

/// SSTables in the store that no served tablet, file in flight or pin names.
fn unreferenced(bt: &Bigtable, store: &Arc<dyn gfs::FileStore>) -> Vec<u64> {
    let listed: Vec<u64> = store
        .list("sst/")
        .unwrap()
        .iter()
        .filter_map(|n| sst_number(n))
        .collect();
    let mut live: HashSet<u64> = HashSet::new();
    for s in bt.env().servers() {
        for t in s.served().unwrap() {
            live.extend(t.files);
        }
        live.extend(s.files_in_flight().unwrap());
    }
    listed.into_iter().filter(|n| !live.contains(n)).collect()
}

/// One writer's write: its number, when it was sent and when acknowledged.
struct Logged {
    n: u64,
    sent: Instant,
    acked: Instant,
}

fn row_of(writer: u64, n: u64) -> String {
    // Spread over the key space so every tablet takes writes.
    let h = (n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ writer) % 4096;
    format!("{h:03x}-w{writer}-{n:06}")
}

fn value_of(writer: u64, n: u64) -> Vec<u8> {
    format!("{writer}:{n}:{}", "x".repeat(180)).into_bytes()
}

#[test]
fn a_snapshot_holds_exactly_the_writes_acknowledged_before_it_while_tablets_split_and_move() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Arc::new(open(&store));
    bt.create_table("t", schema()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (bt, stop, done) = (bt.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut log = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Acquire) {
                    let row = row_of(w, n);
                    // Every third write names an old timestamp of its own:
                    // the cut must follow commit order, not timestamps.
                    let m = if n % 3 == 0 {
                        RowMutation::new(row).set_at("f", "q", 1 + n, value_of(w, n))
                    } else {
                        RowMutation::new(row).set("f", "q", value_of(w, n))
                    };
                    let sent = Instant::now();
                    bt.apply("t", &m, WriteOptions::default()).unwrap();
                    log.push(Logged {
                        n,
                        sent,
                        acked: Instant::now(),
                    });
                    n += 1;
                    done[w as usize].store(n, Ordering::Release);
                }
                log
            })
        })
        .collect();
    // Splits and moves meanwhile.
    let mover = {
        let (bt, stop, done) = (bt.clone(), stop.clone(), done.clone());
        std::thread::spawn(move || {
            let total = || done.iter().map(|d| d.load(Ordering::Acquire)).sum::<u64>();
            let mut moves = 0u64;
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                // One split or move per round of new writes, not a busy loop.
                let before = total();
                testkit::wait_until(Duration::from_secs(10), || {
                    total() > before || stop.load(Ordering::Acquire)
                });
                let _ = bt.split_now("t");
                let servers: Vec<String> =
                    bt.server_reports().into_iter().map(|r| r.name).collect();
                if i.is_multiple_of(4) && servers.len() > 1 {
                    let row = format!("{:03x}", (i * 997) % 4096);
                    let to = &servers[(i as usize / 4) % servers.len()];
                    if bt.control(&format!("move t {row} {to}")).is_ok() {
                        moves += 1;
                    }
                }
                i += 1;
            }
            moves
        })
    };
    let written = |min: u64| {
        let target: Vec<u64> = done
            .iter()
            .map(|d| d.load(Ordering::Acquire) + min)
            .collect();
        let done = done.clone();
        assert!(
            wait_until(Duration::from_secs(120), || done
                .iter()
                .zip(&target)
                .all(|(d, t)| d.load(Ordering::Acquire) >= *t)),
            "the writers stalled"
        );
    };
    written(300);
    let mut taken = Vec::new();
    for k in 0..4 {
        let name = format!("s{k}");
        let start = Instant::now();
        let info = bt.take_snapshot("t", &name).unwrap();
        let end = Instant::now();
        taken.push((name, start, end, info));
        written(100);
    }
    stop.store(true, Ordering::Release);
    let logs: Vec<Vec<Logged>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    let moves = mover.join().unwrap();
    // The originals' files replaced and collected: the snapshots' must stay.
    bt.compact("t", true).unwrap();
    gc(&bt);
    let tablets = bt.tablets("t").unwrap().len();
    assert!(tablets > 1, "the table never split");
    assert!(
        taken.iter().any(|(_, _, _, info)| info.tablets > 1),
        "no snapshot spans several tablets"
    );
    log::info!("{tablets} tablets, {moves} moves");
    for (name, start, end, info) in &taken {
        let view = bt.snapshot_view("t", name).unwrap();
        assert_eq!(view.manifest().tablets.len(), info.tablets);
        let got = rows(view.scan(ScanSpec::default()).unwrap());
        let (mut before, mut after, mut between) = (0, 0, 0);
        for (w, log) in logs.iter().enumerate() {
            let w = w as u64;
            let mut missing: Option<u64> = None;
            for l in log {
                let row = row_of(w, l.n).into_bytes();
                let present = got.get(&row);
                if l.acked < *start {
                    before += 1;
                    assert_eq!(
                        present,
                        Some(&value_of(w, l.n)),
                        "{name}: writer {w}'s write {} acknowledged before the snapshot is missing",
                        l.n
                    );
                } else if l.sent > *end {
                    after += 1;
                    assert!(
                        present.is_none(),
                        "{name}: writer {w}'s write {} sent after the snapshot is in it",
                        l.n
                    );
                } else {
                    between += 1;
                }
                // One instant: a writer's writes in the snapshot are a
                // prefix of what it wrote, whichever tablets they went to.
                match (present, missing) {
                    (None, None) => missing = Some(l.n),
                    (Some(_), Some(m)) => panic!(
                        "{name}: writer {w}'s write {} is in the snapshot but its earlier write {m} is not",
                        l.n
                    ),
                    _ => {}
                }
            }
        }
        assert!(
            before > 0 && after > 0,
            "{name}: {before} before, {after} after"
        );
        log::info!(
            "{name}: {before} before, {between} during, {after} after, {} tablets, \
             {} files, {} bytes, taken in {:?}",
            info.tablets,
            info.files,
            info.bytes,
            end.duration_since(*start)
        );
    }
    let listed: Vec<String> = bt
        .list_snapshots("t")
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(listed, vec!["s0", "s1", "s2", "s3"]);
    bt.close().unwrap();
}

fn fill(bt: &Bigtable, rows: std::ops::Range<u32>, tag: &str) {
    let batch: Vec<RowMutation> = rows
        .map(|i| RowMutation::new(format!("r{i:05}")).set("f", "q", format!("{tag}{i}")))
        .collect();
    bt.apply_batch("t", &batch, WriteOptions::default())
        .unwrap();
}

#[test]
fn a_snapshot_cut_short_at_any_step_leaves_nothing_after_recovery_and_gc() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    {
        let bt = open(&store);
        bt.create_table("t", schema()).unwrap();
        bt.close().unwrap();
    }
    for step in [Step::Held, Step::Released] {
        let bt = open(&store);
        // Some of the table in files, some only in memtables.
        fill(&bt, 0..300, "a");
        bt.flush().unwrap();
        fill(&bt, 300..400, "b");
        let r = bt.take_snapshot_crashing("t", "x", step);
        assert!(matches!(r, Err(Error::ShuttingDown)), "{step:?}: {r:?}");
        // The daemon dies: its pins with it. Stopped rather than leaked: a
        // leaked handle's compactions would go on writing into the store
        // beside the next daemon's (as no dead process does), from the same
        // file numbers. A stop flushes nothing (it syncs the logs, and
        // MemStore keeps every write anyway), so the store is as a crash
        // left it.
        bt.close().unwrap();
        let bt = open(&store);
        gc(&bt);
        assert!(bt.list_snapshots("t").unwrap().is_empty(), "{step:?}");
        assert_eq!(
            store.list("snapshots/").unwrap(),
            Vec::<String>::new(),
            "{step:?}"
        );
        let left = unreferenced(&bt, &store);
        assert!(left.is_empty(), "{step:?}: files nothing names: {left:?}");
        bt.close().unwrap();
    }
    // A manifest cut short while written: GC deletes it once old; a new
    // one being written stays.
    let bt = open(&store);
    let old = "snapshots/t/.tmp.1.y";
    let new = format!("snapshots/t/.tmp.{}.z", crate::now_micros());
    for name in [old, new.as_str()] {
        let mut f = store.create(name).unwrap();
        f.append(b"half a manifest").unwrap();
    }
    gc(&bt);
    assert!(!store.exists(old).unwrap());
    assert!(store.exists(&new).unwrap());
    assert!(bt.list_snapshots("t").unwrap().is_empty());
    // And the name is free: a whole snapshot holds every row.
    let info = bt.take_snapshot("t", "x").unwrap();
    assert!(info.files > 0);
    let got = rows(
        bt.snapshot_view("t", "x")
            .unwrap()
            .scan(ScanSpec::default())
            .unwrap(),
    );
    assert_eq!(got.len(), 400);
    assert!(matches!(
        bt.take_snapshot("t", "x"),
        Err(Error::SnapshotExists(_))
    ));
    bt.close().unwrap();
}

/// A new table `t` with `in_files` rows written out and `in_memtables`
/// more only in memtables, and its snapshot `name`.
fn snapshot_of_new_table(
    name: &str,
    in_files: u32,
    in_memtables: u32,
) -> (Arc<dyn gfs::FileStore>, Bigtable, super::Manifest) {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = open(&store);
    bt.create_table("t", schema()).unwrap();
    fill(&bt, 0..in_files, "a");
    bt.flush().unwrap();
    fill(&bt, in_files..in_files + in_memtables, "b");
    bt.take_snapshot("t", name).unwrap();
    let manifest = bt.snapshot_manifest("t", name).unwrap();
    (store, bt, manifest)
}

#[test]
fn gc_keeps_a_snapshots_files_until_it_is_deleted_then_frees_only_those() {
    let (store, bt, manifest) = snapshot_of_new_table("a", 500, 100);
    // The table moves on: overwritten, partly deleted, compacted.
    fill(&bt, 0..600, "new");
    for i in 0..50 {
        bt.apply(
            "t",
            &RowMutation::new(format!("r{i:05}")).delete_row(),
            WriteOptions::default(),
        )
        .unwrap();
    }
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    gc(&bt);
    for f in manifest.files() {
        assert!(
            store.exists(&sst_name(f)).unwrap(),
            "file {f} of the snapshot was collected"
        );
    }
    let view = bt.snapshot_view("t", "a").unwrap();
    let got = rows(view.scan(ScanSpec::default()).unwrap());
    assert_eq!(got.len(), 600);
    for i in 0..600u32 {
        let tag = if i < 500 { "a" } else { "b" };
        assert_eq!(
            got[format!("r{i:05}").as_bytes()],
            format!("{tag}{i}").into_bytes()
        );
    }
    let one = view.read_row(b"r00007", &ScanSpec::default()).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].value.to_vec(), b"a7".to_vec());
    let live = rows(bt.scan("t", ScanSpec::default()).unwrap());
    assert_eq!(live.len(), 550);
    // Deleted: its files go, the table's stay.
    bt.delete_snapshot("t", "a").unwrap();
    assert!(matches!(
        bt.delete_snapshot("t", "a"),
        Err(Error::SnapshotNotFound(_))
    ));
    gc(&bt);
    assert!(unreferenced(&bt, &store).is_empty());
    let table_files: HashSet<u64> = bt
        .env()
        .servers()
        .iter()
        .flat_map(|s| s.served().unwrap())
        .flat_map(|t| t.files)
        .collect();
    for f in manifest.files() {
        assert_eq!(
            store.exists(&sst_name(f)).unwrap(),
            table_files.contains(&f),
            "file {f}"
        );
    }
    assert_eq!(rows(bt.scan("t", ScanSpec::default()).unwrap()).len(), 550);
    bt.close().unwrap();
}

/// Every SSTable in the store that neither a served tablet, a file in
/// flight nor a manifest of `extra` names.
fn unnamed(bt: &Bigtable, store: &Arc<dyn gfs::FileStore>, extra: &[&super::Manifest]) -> Vec<u64> {
    let named: HashSet<u64> = extra.iter().flat_map(|m| m.files()).collect();
    unreferenced(bt, store)
        .into_iter()
        .filter(|f| !named.contains(f))
        .collect()
}

fn table_rows(bt: &Bigtable, table: &str) -> HashMap<Vec<u8>, Vec<u8>> {
    rows(bt.scan(table, ScanSpec::default()).unwrap())
}

#[test]
fn a_clone_shares_the_files_diverges_outlives_its_original_and_a_restore_brings_a_table_back() {
    let (store, bt, manifest) = snapshot_of_new_table("s", 400, 100);
    let at_snapshot = table_rows(&bt, "t");
    assert_eq!(at_snapshot.len(), 500);
    let before: Vec<String> = store.list("sst/").unwrap();
    bt.clone_snapshot("t", "s", "c").unwrap();
    // Nothing copied: the clone's tablets name the snapshot's files.
    assert_eq!(store.list("sst/").unwrap(), before);
    let c_id = bt.table("c").unwrap().id;
    let c_files: HashSet<u64> = bt
        .env()
        .servers()
        .iter()
        .flat_map(|s| s.served().unwrap())
        .filter(|t| t.table_id == c_id)
        .flat_map(|t| t.files)
        .collect();
    assert_eq!(c_files, manifest.files().into_iter().collect());
    assert_eq!(table_rows(&bt, "c"), at_snapshot);
    assert!(matches!(
        bt.clone_snapshot("t", "s", "c"),
        Err(Error::TableExists(_))
    ));
    // The two diverge.
    let set = |table: &str, row: &str, v: &str| {
        bt.apply(
            table,
            &RowMutation::new(row).set("f", "q", v),
            WriteOptions::default(),
        )
        .unwrap();
    };
    set("t", "r00001", "t-new");
    set("c", "r00001", "c-new");
    set("t", "t-only", "1");
    set("c", "c-only", "1");
    bt.apply(
        "c",
        &RowMutation::new("r00002").delete_row(),
        WriteOptions::default(),
    )
    .unwrap();
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    bt.compact("c", true).unwrap();
    let t = table_rows(&bt, "t");
    let c = table_rows(&bt, "c");
    assert_eq!(t[b"r00001".as_slice()], b"t-new".to_vec());
    assert_eq!(c[b"r00001".as_slice()], b"c-new".to_vec());
    assert!(t.contains_key(b"t-only".as_slice()) && !c.contains_key(b"t-only".as_slice()));
    assert!(c.contains_key(b"c-only".as_slice()) && !t.contains_key(b"c-only".as_slice()));
    assert!(t.contains_key(b"r00002".as_slice()) && !c.contains_key(b"r00002".as_slice()));
    // The original goes: the clone and the snapshot stay whole, and GC
    // leaves only what one of them names.
    bt.delete_table("t").unwrap();
    // The trash keeps the original's files until it is purged.
    let trashed: Vec<u64> = bt.trash().unwrap().into_iter().map(|(e, _)| e.id).collect();
    assert_eq!(trashed.len(), 1, "the original is in the trash");
    gc(&bt);
    assert!(
        !unnamed(&bt, &store, &[&manifest]).is_empty(),
        "the trash keeps the files only the original names"
    );
    bt.purge_trash(trashed[0]).unwrap();
    gc(&bt);
    assert_eq!(table_rows(&bt, "c"), c);
    let view = bt.snapshot_view("t", "s").unwrap();
    assert_eq!(rows(view.scan(ScanSpec::default()).unwrap()), at_snapshot);
    for f in manifest.files() {
        assert!(
            store.exists(&sst_name(f)).unwrap(),
            "file {f} of the snapshot"
        );
    }
    assert_eq!(unnamed(&bt, &store, &[&manifest]), Vec::<u64>::new());
    bt.delete_snapshot("t", "s").unwrap();
    gc(&bt);
    assert_eq!(unnamed(&bt, &store, &[]), Vec::<u64>::new());
    assert_eq!(table_rows(&bt, "c"), c);
    // Restore in place: the clone becomes its own snapshot again.
    bt.take_snapshot("c", "c1").unwrap();
    set("c", "r00003", "later");
    set("c", "later-row", "1");
    bt.apply(
        "c",
        &RowMutation::new("r00004").delete_row(),
        WriteOptions::default(),
    )
    .unwrap();
    assert_ne!(table_rows(&bt, "c"), c);
    bt.restore_snapshot("c", "c1").unwrap();
    assert_eq!(table_rows(&bt, "c"), c);
    set("c", "after-restore", "1");
    assert_eq!(table_rows(&bt, "c").len(), c.len() + 1);
    assert!(matches!(
        bt.restore_snapshot("c", "nope"),
        Err(Error::SnapshotNotFound(_))
    ));
    bt.close().unwrap();
}

#[test]
fn a_hold_that_runs_out_lets_writes_go_on_and_its_release_fails() {
    let (_store, bt, _) = snapshot_of_new_table("a", 10, 10);
    let t = bt.table("t").unwrap().id;
    let holds: Vec<_> = bt
        .env()
        .servers()
        .into_iter()
        .map(|s| {
            let h = s.hold_writes(t, 200).unwrap();
            (s, h)
        })
        .collect();
    assert!(holds.iter().any(|(_, h)| !h.tablets.is_empty()));
    // Waits for the hold, then goes on by itself once it runs out.
    fill(&bt, 10..11, "late");
    // The servers with tablets of the table held the write: their holds ran
    // out before it went on.
    for (s, h) in holds.iter().filter(|(_, h)| !h.tablets.is_empty()) {
        let r = s.release_writes(h.hold);
        assert!(
            matches!(r, Err(Error::Unavailable(_))),
            "{}: {r:?}",
            s.name()
        );
    }
    for (s, h) in &holds {
        s.unpin(h.hold).unwrap();
    }
    bt.take_snapshot("t", "b").unwrap();
    let got = rows(
        bt.snapshot_view("t", "b")
            .unwrap()
            .scan(ScanSpec::default())
            .unwrap(),
    );
    assert_eq!(got[b"r00010".as_slice()], b"late10".to_vec());
    bt.close().unwrap();
}

#[test]
fn the_collection_deletes_a_snapshot_once_its_expiry_has_passed_and_only_then() {
    let (store, bt, old) = snapshot_of_new_table("old", 200, 50);
    let far = crate::env::now_micros() + 3600 * 1_000_000;
    bt.take_snapshot_expiring("t", "later", Some(far), None)
        .unwrap();
    bt.take_snapshot("t", "never").unwrap();
    assert_eq!(
        bt.set_snapshot_expiry("t", "old", Some(far))
            .unwrap()
            .expire_micros,
        Some(far)
    );
    // The table moves on, so the snapshots' files are theirs alone.
    fill(&bt, 0..250, "new");
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    gc(&bt);
    let names = |bt: &Bigtable| -> Vec<String> {
        let mut n: Vec<String> = bt
            .list_snapshots("t")
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&bt), ["later", "never", "old"]);
    // Expired: the next collection deletes it; the others stay whole.
    bt.set_snapshot_expiry("t", "old", Some(1)).unwrap();
    gc(&bt);
    assert_eq!(names(&bt), ["later", "never"]);
    let later = bt.snapshot_manifest("t", "later").unwrap();
    let never = bt.snapshot_manifest("t", "never").unwrap();
    assert!(unnamed(&bt, &store, &[&later, &never]).is_empty());
    for f in later.files() {
        assert!(store.exists(&sst_name(f)).unwrap(), "file {f}");
    }
    assert!(!old.files().is_empty());
    assert!(matches!(
        bt.set_snapshot_expiry("t", "old", None),
        Err(Error::SnapshotNotFound(_))
    ));
    bt.close().unwrap();
}
