//! Power loss: the engine runs on a [`gfs::CrashStore`], the power is cut
//! after a random number of file operations (in the middle of a log append, an
//! SSTable write, a manifest update, a log roll, a split...), everything not
//! synced is dropped (sometimes leaving a torn tail), and the engine must
//! reopen with every write that a synced commit acknowledged: a write with
//! `WriteOptions { sync: true }`, or any write before a successful
//! `Bigtable::sync` or `Bigtable::flush`. Nothing may come back that was never
//! written.
//!
//! The last test runs the engine on the chunk layer instead, as the mount
//! does, with the chunk layer's real files under a [`gfs::PowerCut`] (whose
//! crashes may also tear and reorder unsynced writeback).
//!
//! `CRASH_POINTS=n` sets how many crash points each test visits (CI default:
//! 100 and 20, and 12 on the chunk layer; the repeated-crash test does at most
//! 300 rounds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use gfs::{Cluster, ClusterOptions, CrashStore, FileStore, OpKind, PowerCut};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

fn crash_points(default: u64) -> u64 {
    std::env::var("CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn options() -> Options {
    Options {
        memtable_bytes: 8 << 10,
        sstable_target_bytes: 8 << 10,
        split_bytes: 48 << 10,
        merge_trigger: 3,
        log_file_bytes: 16 << 10,
        block_cache_bytes: 0,
        scan_cache_bytes: 0,
        background_threads: 1,
        ..Options::default()
    }
}

fn open(store: &CrashStore) -> engine::Result<Bigtable> {
    Bigtable::open(Arc::new(store.clone()) as Arc<dyn FileStore>, options())
}

type Key = (String, String);

/// What the workload did: every value it tried to write, and the cells whose
/// write a synced commit acknowledged.
#[derive(Default)]
struct Model {
    attempted: BTreeMap<Key, String>,
    durable: BTreeSet<Key>,
}

/// Writes until `writes` are done or an operation fails (the power went off).
/// Each write goes to its own cell, so every cell has at most one value.
fn workload(bt: &Bigtable, seed: u64, round: u32, writes: u32, model: &mut Model) {
    let mut rng = StdRng::seed_from_u64(seed ^ u64::from(round) << 32);
    let mut since_sync: Vec<Key> = Vec::new();
    for i in 0..writes {
        let row = format!("r{:03}", rng.gen_range(0..80));
        let q = format!("q{round}-{i}");
        let value = format!("v{seed}-{round}-{i}-").repeat(rng.gen_range(1..24));
        let sync = rng.gen_ratio(1, 6);
        let key = (row.clone(), q.clone());
        model.attempted.insert(key.clone(), value.clone());
        let m = RowMutation::new(row).set("f", q, value);
        if bt.apply("t", &m, WriteOptions { sync }).is_err() {
            return;
        }
        if sync {
            model.durable.insert(key);
        } else {
            since_sync.push(key);
        }
        // A sync or a flush that returned Ok made everything before it durable.
        let durable_point = match rng.gen_range(0..40) {
            0 | 1 => bt.sync().map(|()| true),
            2 => bt.flush().map(|()| true),
            3 => bt.compact("t", rng.gen()).map(|()| false),
            _ => Ok(false),
        };
        match durable_point {
            Ok(true) => model.durable.extend(since_sync.drain(..)),
            Ok(false) => {}
            Err(_) => return,
        }
    }
}

/// Reopens after a crash and checks the model; returns the reopened engine.
fn check(store: &CrashStore, model: &Model, what: &str) -> Bigtable {
    let bt = match open(store) {
        Ok(bt) => bt,
        Err(e) => panic!("{what}: reopen after power loss failed: {e}"),
    };
    verify(&bt, model, what);
    bt
}

/// Checks a reopened engine against the model.
fn verify(bt: &Bigtable, model: &Model, what: &str) {
    assert!(bt.schema("t").is_ok(), "{what}: the table is gone");
    let mut found = BTreeMap::new();
    for c in bt.scan("t", ScanSpec::default()).unwrap() {
        let c = c.unwrap();
        let key = (
            String::from_utf8(c.row).unwrap(),
            String::from_utf8(c.qualifier).unwrap(),
        );
        let value = String::from_utf8(c.value.into_vec()).unwrap();
        assert_eq!(
            model.attempted.get(&key),
            Some(&value),
            "{what}: {key:?} holds a value never written"
        );
        found.insert(key, value);
    }
    for key in &model.durable {
        assert!(
            found.contains_key(key),
            "{what}: acknowledged synced write {key:?} lost ({} of {} durable cells found)",
            model
                .durable
                .iter()
                .filter(|k| found.contains_key(*k))
                .count(),
            model.durable.len()
        );
        let cell = bt.read_cell("t", key.0.as_bytes(), "f", key.1.as_bytes());
        assert!(cell.unwrap().is_some(), "{what}: point read misses {key:?}");
    }
}

fn fresh(seed: u64) -> (CrashStore, Bigtable) {
    let store = CrashStore::with_seed(seed);
    let bt = open(&store).unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    (store, bt)
}

/// Mutating file operations one full round of the workload makes.
fn ops_per_round(writes: u32) -> u64 {
    let (store, bt) = fresh(1);
    let before = store.mutations();
    workload(&bt, 1, 0, writes, &mut Model::default());
    let n = store.mutations() - before;
    bt.close().unwrap();
    n
}

#[test]
fn synced_writes_survive_power_loss_at_random_points() {
    const WRITES: u32 = 160;
    let span = ops_per_round(WRITES);
    assert!(span > 50, "the workload made only {span} file operations");
    let cases = crash_points(100);
    let mut rng = StdRng::seed_from_u64(
        std::env::var("CRASH_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(rand::random),
    );
    let base: u64 = rng.gen();
    let mut lost_something = 0;
    let mut checked = 0;
    for case in 0..cases {
        let seed = base.wrapping_add(case);
        let (store, bt) = fresh(seed);
        store.set_torn_writes(case % 2 == 1);
        let point = rng.gen_range(0..span);
        let what = format!("seed {seed}, crash after {point} of ~{span} operations");
        let mut model = Model::default();
        store.power_off_after(point);
        workload(&bt, seed, 0, WRITES, &mut model);
        drop(bt);
        let report = store.crash();
        if report.bytes_lost > 0 || report.files_lost > 0 {
            lost_something += 1;
        }
        checked += model.durable.len();
        let bt = check(&store, &model, &what);
        // The recovered store keeps working: a synced write after recovery
        // survives the next power loss too.
        bt.apply(
            "t",
            &RowMutation::new("after").set("f", "crash", "ok"),
            WriteOptions { sync: true },
        )
        .unwrap();
        model
            .attempted
            .insert(("after".into(), "crash".into()), "ok".into());
        model.durable.insert(("after".into(), "crash".into()));
        drop(bt);
        store.crash();
        check(&store, &model, &format!("{what}, second crash"))
            .close()
            .unwrap();
    }
    eprintln!(
        "{cases} crash points over {span} file operations; {lost_something} lost unsynced \
         data; {checked} acknowledged cells checked"
    );
    assert!(
        lost_something > 0 || cases < 4,
        "no crash point dropped anything: the test exercises nothing"
    );
}

#[test]
fn repeated_power_loss_during_recovery_and_work() {
    // Several crashes in a row on one store, some of them while the engine
    // is recovering (replaying the log, writing what recovery writes).
    const WRITES: u32 = 60;
    // Every round checks everything written so far, so the rounds are capped.
    let cases = crash_points(20).min(300);
    let seed: u64 = rand::random();
    let (store, mut bt) = fresh(seed);
    store.set_torn_writes(true);
    let mut model = Model::default();
    let mut rng = StdRng::seed_from_u64(seed);
    for round in 0..cases as u32 {
        store.power_off_after(rng.gen_range(0..400));
        workload(&bt, seed, round, WRITES, &mut model);
        drop(bt);
        store.crash();
        // Power off again at once, in the middle of the next recovery.
        store.power_off_after(rng.gen_range(0..6));
        if let Ok(b) = open(&store) {
            drop(b);
        }
        store.crash();
        bt = check(&store, &model, &format!("seed {seed}, round {round}"));
    }
    bt.close().unwrap();
}

#[test]
fn a_failed_sync_is_never_acknowledged() {
    // Every one of the first syncs fails once in turn; a write whose commit
    // failed is an error, and a write reported as synced survives.
    for nth in 1..=8 {
        let (store, bt) = fresh(nth);
        store.fail_nth(OpKind::Sync, nth);
        let mut model = Model::default();
        for i in 0..20 {
            let key = (format!("r{i}"), "q".to_string());
            model.attempted.insert(key.clone(), format!("v{i}"));
            let m = RowMutation::new(key.0.clone()).set("f", "q", format!("v{i}"));
            if bt.apply("t", &m, WriteOptions { sync: true }).is_ok() {
                model.durable.insert(key);
            }
        }
        assert!(
            !model.durable.is_empty(),
            "nth {nth}: nothing was acknowledged"
        );
        drop(bt);
        store.crash();
        check(&store, &model, &format!("failed sync {nth}"))
            .close()
            .unwrap();
    }
}

#[test]
fn a_failed_operation_of_any_kind_loses_nothing_acknowledged() {
    // One file operation fails (EIO) somewhere in the workload: a create, an
    // append, a rename of a manifest, a delete, a read... The engine may fail
    // writes from then on, but what it acknowledged as synced survives a
    // power cut, and it reopens.
    const WRITES: u32 = 80;
    let kinds = [
        OpKind::Create,
        OpKind::OpenAppend,
        OpKind::Append,
        OpKind::Sync,
        OpKind::Rename,
        OpKind::Delete,
        OpKind::Read,
    ];
    let mut failed_writes = 0;
    for (k, kind) in kinds.into_iter().enumerate() {
        for nth in [1, 2, 3, 5, 8] {
            let seed = (k as u64) << 8 | nth;
            let (store, bt) = fresh(seed);
            store.fail_nth(kind, nth);
            let mut model = Model::default();
            workload(&bt, seed, 0, WRITES, &mut model);
            if model.attempted.len() < WRITES as usize {
                failed_writes += 1;
            }
            drop(bt);
            store.crash();
            check(&store, &model, &format!("{kind:?} number {nth} failed"))
                .close()
                .unwrap();
        }
    }
    assert!(failed_writes > 0, "no injected fault reached a write");
}

/// One tablet server, and clients that give up soon once the power is off.
fn chunk_options() -> Options {
    Options {
        tablet_servers: 1,
        retry_deadline: std::time::Duration::from_secs(2),
        ..options()
    }
}

/// The engine on the chunk layer, as the mount runs it: the chunk layer's
/// files (replicas, the master's log and checkpoints) are real files under a
/// [`PowerCut`], whose crashes also reorder and tear unsynced writeback.
/// Returns the model, whether the table was created, and the operations
/// done by then and in all.
fn chunk_round(
    dir: &Path,
    seed: u64,
    cut_after: Option<u64>,
    torn: bool,
) -> (Model, bool, u64, u64) {
    let cut = PowerCut::install(dir, seed).unwrap();
    cut.set_torn_writes(torn);
    if let Some(n) = cut_after {
        cut.power_off_after(n);
    }
    let mut model = Model::default();
    let mut table = false;
    let mut opened = 0;
    if let Ok(cluster) = Cluster::open(ClusterOptions::for_data_dir(dir)) {
        if let Ok(bt) = Bigtable::open(cluster.clone() as Arc<dyn FileStore>, chunk_options()) {
            table = bt
                .create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
                .is_ok();
            opened = cut.mutations();
            if table {
                workload(&bt, seed, 0, 160, &mut model);
            }
            let _ = bt.close();
        }
        // The machine stops: nothing of this run may write after the crash.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while Arc::strong_count(&cluster) > 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the closed engine still holds the chunk layer"
            );
            std::thread::yield_now();
        }
        drop(cluster);
    }
    let ops = cut.mutations();
    cut.crash();
    (model, table, opened, ops)
}

#[test]
fn synced_writes_survive_power_loss_on_the_chunk_layer() {
    let points = crash_points(100) / 8;
    let seed = 11;
    let dry = tempfile::tempdir().unwrap();
    let (_, table, opened, total) =
        chunk_round(&dry.path().canonicalize().unwrap(), seed, None, false);
    assert!(
        table && total > opened + 50,
        "{opened} then {total} operations"
    );
    // Cuts while the cluster opens are the chunk layer's own test; an engine
    // whose disk dies while it opens waits for its tablets to be assigned
    // (up to two minutes) before it gives up.
    let span = total - opened;
    // `CRASH_AT=n` runs only the round that cuts after operation n.
    let only: Option<u64> = std::env::var("CRASH_AT").ok().and_then(|v| v.parse().ok());
    let mut rng = StdRng::seed_from_u64(points);
    for round in 0..points {
        let lo = opened + span * round / points;
        let hi = (opened + span * (round + 1) / points).max(lo + 1);
        let at = rng.gen_range(lo..hi);
        let torn = round % 2 == 1;
        if only.is_some_and(|o| o != at) {
            continue;
        }
        let what = format!("chunk layer, cut after {at} of {total}, torn {torn}");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let (model, table, _, _) = chunk_round(&dir, seed, Some(at), torn);
        let cluster = Cluster::open(ClusterOptions::for_data_dir(&dir))
            .unwrap_or_else(|e| panic!("{what}: the chunk layer does not reopen: {e}"));
        let bt = Bigtable::open(cluster as Arc<dyn FileStore>, chunk_options())
            .unwrap_or_else(|e| panic!("{what}: the engine does not reopen: {e}"));
        if table {
            verify(&bt, &model, &what);
        }
        bt.close().unwrap();
    }
}
