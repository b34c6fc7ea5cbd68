//! The cluster inside one process: METADATA, masters, tablet servers,
//! recovery of a dead server's log, location caching, balancing and merges.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
        .map(|c| c.value.into_vec())
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

fn live_servers(bt: &Bigtable) -> Vec<String> {
    bt.servers_report()
        .iter()
        .filter(|l| l.contains(" state=serving "))
        .filter_map(|l| {
            l.split_whitespace()
                .next()?
                .strip_prefix("server=")
                .map(String::from)
        })
        .collect()
}

/// A `key=value` figure of one server's report line.
fn figure(bt: &Bigtable, server: &str, key: &str) -> u64 {
    bt.servers_report()
        .iter()
        .find(|l| l.starts_with(&format!("server={server} ")))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn fill(bt: &Bigtable, table: &str, rows: usize) {
    let batch: Vec<RowMutation> = (0..rows)
        .map(|i| RowMutation::new(format!("r{i:05}")).set("f", "q", format!("{table}-{i}")))
        .collect();
    bt.apply_batch(table, &batch, WriteOptions::default())
        .unwrap();
}

fn check(bt: &Bigtable, table: &str, rows: usize) {
    for i in 0..rows {
        let got = bt
            .read_cell(table, format!("r{i:05}").as_bytes(), "f", b"q")
            .unwrap()
            .map(|c| c.value.into_vec());
        assert_eq!(
            got,
            Some(format!("{table}-{i}").into_bytes()),
            "{table} row {i}"
        );
    }
}

#[test]
fn a_dead_servers_tablets_are_recovered_elsewhere_reading_only_their_part() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let opts = Options {
        tablet_servers: 1,
        balance: false,
        memtable_bytes: 64 << 20,
        ..options()
    };
    let bt = Bigtable::open(store.clone(), opts).unwrap();
    let tables: Vec<String> = (0..6).map(|i| format!("t{i}")).collect();
    for t in &tables {
        bt.create_table(t, schema()).unwrap();
        fill(&bt, t, 300);
    }
    let first = live_servers(&bt);
    assert_eq!(first.len(), 1);
    // Two more servers; then the first dies with everything in its log.
    bt.cluster().add_server().unwrap();
    bt.cluster().add_server().unwrap();
    let log_bytes: u64 = gfs::FileStore::list(&*store, &format!("logs/{}/", first[0]))
        .unwrap()
        .iter()
        .map(|n| gfs::FileStore::size(&*store, n).unwrap())
        .sum();
    let reads_before = bt
        .cluster()
        .client
        .counters
        .metadata_reads
        .load(std::sync::atomic::Ordering::Relaxed);
    bt.control(&format!("kill {}", first[0])).unwrap();
    for t in &tables {
        check(&bt, t, 300);
    }
    let reads_after = bt
        .cluster()
        .client
        .counters
        .metadata_reads
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        reads_after > reads_before,
        "stale locations were looked up again"
    );
    let takers: Vec<String> = live_servers(&bt)
        .into_iter()
        .filter(|s| figure(&bt, s, "recovery_bytes_read") > 0)
        .collect();
    assert_eq!(
        takers.len(),
        2,
        "two servers took over: {:?}",
        bt.servers_report()
    );
    for s in &takers {
        let read = figure(&bt, s, "recovery_bytes_read");
        assert!(
            read < log_bytes * 3 / 4,
            "{s} read {read} bytes; the dead server's log had {log_bytes}"
        );
    }
    bt.close().unwrap();
}

#[test]
fn the_standby_master_takes_over_and_later_splits_are_served() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", schema()).unwrap();
    let before = bt.master_report();
    let active = |r: &[String]| {
        r.iter()
            .find(|l| l.contains(" state=active "))
            .and_then(|l| l.split_whitespace().next().map(String::from))
    };
    let old = active(&before).unwrap();
    bt.control("kill-master").unwrap();
    wait_for("a new active master", Duration::from_secs(30), || {
        active(&bt.master_report()).is_some_and(|m| m != old)
    });
    // Assignments survived; a split made now reaches METADATA and is served.
    fill(&bt, "t", 6000);
    bt.flush().unwrap();
    bt.split_now("t").unwrap();
    wait_for("a split", Duration::from_secs(30), || {
        bt.tablets("t").unwrap().len() > 1
    });
    check(&bt, "t", 6000);
    bt.close().unwrap();
}

#[test]
fn a_split_interrupted_by_a_crash_or_never_reported_is_repaired() {
    let _ = env_logger::builder().is_test(true).try_init();
    for hook in ["stops_after_left", "no_notification"] {
        let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
        let bt = Bigtable::open(store, options()).unwrap();
        bt.create_table("t", schema()).unwrap();
        fill(&bt, "t", 6000);
        bt.flush().unwrap();
        let hooks = &bt.cluster().env.hooks;
        let flag = match hook {
            "stops_after_left" => &hooks.split_stops_after_left,
            _ => &hooks.drop_split_notifications,
        };
        flag.store(true, std::sync::atomic::Ordering::Release);
        let owner = bt.tablets("t").unwrap()[0].server.clone();
        let _ = bt.split_now("t");
        if hook == "no_notification" {
            assert!(bt.tablets("t").unwrap().len() > 1);
            bt.control(&format!("kill {owner}")).unwrap();
        }
        flag.store(false, std::sync::atomic::Ordering::Release);
        // Whichever way the split ended, every row is served again.
        check(&bt, "t", 6000);
        wait_for("both halves served", Duration::from_secs(30), || {
            let t = bt.tablets("t").unwrap();
            t.len() > 1 && t.windows(2).all(|w| w[0].end.as_ref() == Some(&w[1].start))
        });
        bt.close().unwrap();
    }
}

#[test]
fn the_master_balances_load_and_merges_small_neighbours() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let opts = Options {
        tablet_servers: 1,
        merge_bytes: 8 << 10,
        // The operator's split below may merge back once emptied.
        split_cooldown: Duration::from_secs(1),
        ..options()
    };
    let bt = Bigtable::open(store, opts).unwrap();
    for i in 0..7 {
        bt.create_table(&format!("t{i}"), schema()).unwrap();
    }
    bt.cluster().add_server().unwrap();
    bt.cluster().add_server().unwrap();
    // The bound: no server holds more than one tablet above the mean.
    wait_for("balanced servers", Duration::from_secs(60), || {
        let counts: Vec<u64> = live_servers(&bt)
            .iter()
            .map(|s| figure(&bt, s, "tablets"))
            .collect();
        let mean = counts.iter().sum::<u64>() as f64 / counts.len() as f64;
        counts.len() == 3 && counts.iter().all(|&c| c as f64 <= mean + 1.0)
    });
    // A table split in several tablets, then emptied: its tablets merge.
    fill(&bt, "t0", 6000);
    bt.flush().unwrap();
    bt.split_now("t0").unwrap();
    assert!(bt.tablets("t0").unwrap().len() > 1);
    let deletes: Vec<RowMutation> = (0..6000)
        .map(|i| RowMutation::new(format!("r{i:05}")).delete_row())
        .collect();
    bt.apply_batch("t0", &deletes, WriteOptions::default())
        .unwrap();
    bt.compact("t0", true).unwrap();
    wait_for("merged tablets", Duration::from_secs(60), || {
        let _ = bt.compact("t0", true);
        bt.tablets("t0").unwrap().len() == 1
    });
    bt.apply(
        "t0",
        &RowMutation::new("r00001").set("f", "q", "back"),
        WriteOptions::default(),
    )
    .unwrap();
    assert_eq!(value_of(&bt, "t0", "r00001"), Some(b"back".to_vec()));
    bt.close().unwrap();
}

fn value_of(bt: &Bigtable, table: &str, row: &str) -> Option<Vec<u8>> {
    bt.read_cell(table, row.as_bytes(), "f", b"q")
        .unwrap()
        .map(|c| c.value.into_vec())
}

/// A counter (`name=N`) summed over the serving tablet servers.
fn server_counter(bt: &Bigtable, name: &str) -> u64 {
    live_servers(bt).iter().map(|s| figure(bt, s, name)).sum()
}

#[test]
fn disjoint_files_are_not_merged_and_a_split_rewrites_no_file_until_a_half_must_split() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let opts = |split_bytes| Options {
        memtable_bytes: 1 << 20,
        sstable_target_bytes: 1 << 20,
        split_bytes,
        merge_trigger: 3,
        merge_bytes: 0,
        ..Options::default()
    };
    let value = |i: usize| format!("{i:0>100}");
    {
        let bt = Bigtable::open(store.clone(), opts(1 << 30)).unwrap();
        bt.create_table("t", schema()).unwrap();
        // Four flushes of rows in order: four files with disjoint ranges,
        // one more than the merge trigger but never two on one key.
        for part in 0..4 {
            let batch: Vec<RowMutation> = (part * 200..(part + 1) * 200)
                .map(|i| RowMutation::new(format!("r{i:05}")).set("f", "q", value(i)))
                .collect();
            bt.apply_batch("t", &batch, WriteOptions::default())
                .unwrap();
            bt.flush().unwrap();
        }
        assert_eq!(bt.tablets("t").unwrap()[0].sstables, 4);
        bt.close().unwrap();
    }
    // Reopened with a split size the table is past (its ~15 KiB of
    // compressed files): it splits in the middle of one file. Each half
    // drops the files wholly on its sibling's side (writing nothing) and
    // keeps the cut file, shared: neither half is past the split size
    // again (the split takes the file middle nearest the middle of the
    // data, that of the second or third file), so nothing needs it gone.
    let bt = Bigtable::open(store.clone(), opts(12 << 10)).unwrap();
    let names = || -> std::collections::BTreeSet<String> {
        store.list("sst/").unwrap().into_iter().collect()
    };
    let before = names();
    bt.split_now("t").unwrap();
    wait_for(
        "the split and both halves' dropped files",
        Duration::from_secs(60),
        || bt.tablets("t").unwrap().len() == 2 && server_counter(&bt, "merging_compactions") >= 2,
    );
    let tablets = bt.tablets("t").unwrap();
    assert!(
        [b"r00300", b"r00500"].contains(&&tablets[1].start[..].try_into().unwrap_or([0; 6])),
        "split at {:?}",
        String::from_utf8_lossy(&tablets[1].start)
    );
    let files: usize = tablets.iter().map(|t| t.sstables).sum();
    // A major compaction of each half would have left one file each.
    assert_eq!(
        files, 5,
        "each half holds the cut file and its side's others: {tablets:?}"
    );
    let written: Vec<String> = names().difference(&before).cloned().collect();
    assert!(
        written.is_empty(),
        "no file was written, the cut one is shared: {written:?}"
    );
    let read_all = |n: usize| {
        for i in 0..n {
            let got = bt
                .read_cell("t", format!("r{i:05}").as_bytes(), "f", b"q")
                .unwrap();
            assert_eq!(
                got.map(|c| c.value.into_vec()),
                Some(value(i).into_bytes()),
                "row {i}"
            );
        }
    };
    read_all(800);
    // The right half grown past the split size must split again: first it
    // rewrites its part of the shared file, then it splits.
    let batch: Vec<RowMutation> = (800..1600)
        .map(|i| RowMutation::new(format!("r{i:05}")).set("f", "q", value(i)))
        .collect();
    bt.apply_batch("t", &batch, WriteOptions::default())
        .unwrap();
    bt.flush().unwrap();
    wait_for(
        "the right half's rewrite and split",
        Duration::from_secs(60),
        || bt.tablets("t").unwrap().len() >= 3,
    );
    read_all(1600);
    bt.close().unwrap();
}

/// The SSTables of `dir` this process has mapped: (path, deleted).
fn mapped_tables(dir: &std::path::Path) -> Vec<(String, bool)> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let dir = dir.to_string_lossy().into_owned();
    maps.lines()
        .filter_map(|l| l.find(&dir).map(|at| l[at..].to_string()))
        .filter(|p| p.contains(".sst"))
        .map(|p| match p.strip_suffix(" (deleted)") {
            Some(p) => (p.to_string(), true),
            None => (p, false),
        })
        .collect()
}

#[test]
fn tables_on_a_local_store_are_mapped_and_unmapped_once_collected() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::LocalStore::open(dir.path()).unwrap());
    let bt = Bigtable::open(
        store,
        Options {
            split_bytes: 1 << 30,
            ..options()
        },
    )
    .unwrap();
    bt.create_table("t", schema()).unwrap();
    fill(&bt, "t", 3000);
    bt.flush().unwrap();
    // Reads fill the block cache with blocks of the mapped files.
    check(&bt, "t", 3000);
    let before = mapped_tables(dir.path());
    assert!(!before.is_empty(), "no SSTable is mapped");
    // A major compaction replaces them; once the master has collected the
    // old files, none of them may stay mapped (which would keep their disk
    // space) through blocks left in the cache.
    bt.compact("t", true).unwrap();
    let old: Vec<String> = before.into_iter().map(|(p, _)| p).collect();
    // The master collects garbage every 30 s.
    wait_for(
        "the old tables to be deleted",
        Duration::from_secs(120),
        || old.iter().all(|p| !std::path::Path::new(p).exists()),
    );
    wait_for(
        "deleted tables to be unmapped",
        Duration::from_secs(30),
        || {
            mapped_tables(dir.path())
                .iter()
                .all(|(_, deleted)| !deleted)
        },
    );
    check(&bt, "t", 3000);
    bt.close().unwrap();
}

#[test]
fn a_table_splits_at_given_rows_and_keeps_its_data() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    bt.create_table("t", schema()).unwrap();
    bt.apply(
        "t",
        &RowMutation::new("k").set("f", "q", "v"),
        WriteOptions::default(),
    )
    .unwrap();
    // Out of order, one twice, one the table's start: each row inside a
    // tablet splits it once.
    let rows: Vec<Vec<u8>> = ["m", "c", "x", "m", ""]
        .iter()
        .map(|r| r.as_bytes().to_vec())
        .collect();
    bt.split_at_rows("t", &rows).unwrap();
    let starts: Vec<Vec<u8>> = bt
        .tablets("t")
        .unwrap()
        .into_iter()
        .map(|t| t.start)
        .collect();
    assert_eq!(starts, [&b""[..], b"c", b"m", b"x"]);
    assert_eq!(value(&bt, "k").as_deref(), Some(&b"v"[..]));
    bt.close().unwrap();
}

/// A read of a missing row says, in the same call, how far after it no row
/// exists: up to the next row, or the end of the row's tablet; a deleted
/// row counts as missing.
#[test]
fn peek_row_of_a_missing_row_tells_how_far_the_gap_goes() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    bt.create_table("t", schema()).unwrap();
    for r in ["b", "d", "e", "n"] {
        let m = RowMutation::new(r).set("f", "q", "v");
        bt.apply("t", &m, WriteOptions::default()).unwrap();
    }
    bt.apply(
        "t",
        &RowMutation::new("e").delete_row(),
        WriteOptions::default(),
    )
    .unwrap();
    bt.split_at_rows("t", &[b"m".to_vec()]).unwrap();
    let spec = ScanSpec {
        max_versions: Some(1),
        ..Default::default()
    };
    let until = |row: &str| match bt.peek_row("t", row.as_bytes(), &spec).unwrap() {
        RowPeek::Absent { until } => until.map(|u| String::from_utf8(u).unwrap()),
        RowPeek::Cells(c) => panic!("{row} has {} cells", c.len()),
    };
    assert_eq!(until("a").as_deref(), Some("b"));
    assert_eq!(until("c").as_deref(), Some("d"));
    assert_eq!(
        until("d0").as_deref(),
        Some("m"),
        "e was deleted; m ends the tablet"
    );
    assert_eq!(until("o"), None, "the table's end");
    match bt.peek_row("t", b"d", &spec).unwrap() {
        RowPeek::Cells(c) => assert_eq!(c.len(), 1),
        other => panic!("d is there: {other:?}"),
    }
    // One peek is one request to its server, a read, even when it also
    // looked for the next row: load balancing counts requests.
    let counts = |bt: &Bigtable| {
        bt.server_reports().iter().fold((0, 0, 0), |(q, r, s), x| {
            (q + x.requests, r + x.reads, s + x.scans)
        })
    };
    let before = counts(&bt);
    until("c");
    let after = counts(&bt);
    assert_eq!(
        (after.0 - before.0, after.1 - before.1, after.2 - before.2),
        (1, 1, 0),
        "requests, reads and scans of one peek at a missing row"
    );
    bt.close().unwrap();
}

#[test]
fn servers_count_the_bytes_they_write_to_their_log_and_to_sstables() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    // No merging compaction of its own: every file written stays until
    // the major compaction asked for below.
    let opts = Options {
        memtable_bytes: 4 << 20,
        sstable_target_bytes: 4 << 20,
        split_bytes: 1 << 30,
        merge_trigger: 100,
        ..Options::default()
    };
    let bt = Bigtable::open(store.clone(), opts).unwrap();
    bt.create_table("t", schema()).unwrap();
    let sizes = || -> std::collections::BTreeMap<String, u64> {
        store
            .list("sst/")
            .unwrap()
            .into_iter()
            .filter_map(|n| Some((n.clone(), store.size(&n).ok()?)))
            .collect()
    };
    let totals = |bt: &Bigtable| {
        bt.server_reports().iter().fold((0, 0, 0), |(l, f, c), r| {
            (l + r.log_bytes, f + r.flushed_bytes, c + r.compacted_bytes)
        })
    };
    let write = |from: usize| {
        let batch: Vec<RowMutation> = (from..from + 300)
            .map(|i| RowMutation::new(format!("r{i:05}")).set("f", "q", format!("{i:0>200}")))
            .collect();
        bt.apply_batch("t", &batch, WriteOptions::default())
            .unwrap();
    };
    let (log0, flushed0, compacted0) = totals(&bt);
    let files0 = sizes();
    write(0);
    let (log1, _, _) = totals(&bt);
    assert!(
        log1 - log0 >= 300 * 200,
        "the log took 300 values of 200 bytes: {} bytes",
        log1 - log0
    );
    bt.flush().unwrap();
    // The files new since the start are what the flushes wrote (METADATA's
    // own included: its server counts them too).
    let new_bytes = |before: &std::collections::BTreeMap<String, u64>| -> u64 {
        sizes()
            .iter()
            .filter(|(n, _)| !before.contains_key(*n))
            .map(|(_, s)| s)
            .sum()
    };
    wait_for("the flushes counted", Duration::from_secs(30), || {
        let (_, f, c) = totals(&bt);
        f - flushed0 == new_bytes(&files0) && c == compacted0
    });
    assert!(new_bytes(&files0) > 0, "the flush wrote a file");
    write(300);
    bt.flush().unwrap();
    assert!(bt.tablets("t").unwrap()[0].sstables >= 2);
    let (_, _, compacted1) = totals(&bt);
    let files1 = sizes();
    bt.compact("t", true).unwrap();
    wait_for(
        "the major compaction counted",
        Duration::from_secs(30),
        || {
            let (_, _, c) = totals(&bt);
            bt.tablets("t").unwrap()[0].sstables == 1 && c - compacted1 == new_bytes(&files1)
        },
    );
    assert!(totals(&bt).2 > compacted1, "the compaction wrote a file");
    bt.close().unwrap();
}

#[test]
fn files_cut_below_a_block_leave_a_merge_nothing_to_do() {
    // A target under the 64 KiB block: files were cut by their pending
    // block's raw bytes, at a fraction of the target once compressed, so
    // the merge that judged them by stored bytes rewrote them forever.
    let target = 16 << 10;
    let opts = Options {
        memtable_bytes: 256 << 10,
        sstable_target_bytes: target,
        split_bytes: 1 << 30,
        merge_trigger: 2,
        ..Options::default()
    };
    let bt = Bigtable::open(Arc::new(gfs::MemStore::new()), opts).unwrap();
    bt.create_table("t", schema()).unwrap();
    for chunk in 0..8 {
        let batch: Vec<RowMutation> = (chunk * 500..chunk * 500 + 500)
            .map(|i| RowMutation::new(format!("r{i:06}")).set("f", "q", format!("{i:0>400}")))
            .collect();
        bt.apply_batch("t", &batch, WriteOptions::default())
            .unwrap();
    }
    bt.flush().unwrap();
    bt.compact("t", true).unwrap();
    let t = &bt.tablets("t").unwrap()[0];
    // Each file but the last holds at least the target's stored bytes, so
    // a rewrite could not leave fewer than half as many.
    assert!(
        t.sstables as u64 <= t.sstable_bytes.div_ceil(target) + 1,
        "{} files of {} bytes in all, target {target}",
        t.sstables,
        t.sstable_bytes
    );
    bt.close().unwrap();
}

/// A fresh Bigtable on a memory store with table `t` of `rows` rows.
fn table_of_rows(rows: usize) -> Bigtable {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", schema()).unwrap();
    fill(&bt, "t", rows);
    bt
}

/// A point read reaches its server through a pointer its thread keeps
/// (no registry lookup); servers that die and come meanwhile must neither
/// be read after they are gone nor fail a read.
#[test]
fn point_readers_keep_reading_while_servers_die_and_come() {
    let bt = table_of_rows(300);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let (bt, stop) = (bt.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let i = (reads as usize * 7 + k * 131) % 300;
                    let got = bt
                        .read_cell("t", format!("r{i:05}").as_bytes(), "f", b"q")
                        .unwrap()
                        .map(|c| c.value.into_vec());
                    assert_eq!(got, Some(format!("t-{i}").into_bytes()), "row {i}");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for _ in 0..3 {
        let new = bt.cluster().add_server().unwrap();
        let victim = live_servers(&bt)
            .into_iter()
            .find(|s| *s != new)
            .expect("another live server");
        bt.control(&format!("kill {victim}")).unwrap();
        wait_for(
            "the dead server's tablets to be served again",
            Duration::from_secs(60),
            || {
                !live_servers(&bt).contains(&victim)
                    && bt
                        .read_cell("t", b"r00000", "f", b"q")
                        .is_ok_and(|c| c.is_some())
            },
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    for r in readers {
        assert!(r.join().unwrap() > 0, "a reader read");
    }
    check(&bt, "t", 300);
}

/// A thread that read through a server keeps no reference to it: once the
/// Bigtable is closed and dropped, the server is gone even while that
/// thread lives on.
#[test]
fn a_thread_that_read_keeps_no_closed_server_alive() {
    let bt = table_of_rows(10);
    let name = live_servers(&bt).pop().expect("a live server");
    let server = Arc::downgrade(&bt.cluster().env.server(&name).expect("registered"));
    let (read_tx, read_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let reader = {
        let bt = bt.clone();
        std::thread::spawn(move || {
            check(&bt, "t", 10);
            drop(bt);
            read_tx.send(()).unwrap();
            // Lives on, idle, until the test is done.
            let _ = done_rx.recv();
        })
    };
    read_rx.recv().unwrap();
    check(&bt, "t", 10); // this thread too
    bt.close().unwrap();
    drop(bt);
    wait_for(
        "the closed server to be dropped",
        Duration::from_secs(30),
        || server.upgrade().is_none(),
    );
    done_tx.send(()).unwrap();
    reader.join().unwrap();
}

/// A moving tablet reads as unassigned in METADATA between its unload and
/// its load. An assignment round that read the rows then, and acts once
/// the move is over, must not load the tablet a second time: two servers
/// serving one tablet split its writes between two logs, and the one
/// METADATA does not name loses its share at the next restart.
#[test]
fn an_assignment_that_read_a_moving_tablet_does_not_serve_it_twice() {
    let raced = race_a_move_and_an_assignment(false);
    raced.moved.unwrap();
    assert_eq!(raced.serving, vec![raced.to], "the tablet's servers");
}

/// A move under way when its master loses its lock does not load the
/// tablet it unloaded: the next master assigns it, once.
#[test]
fn a_move_outlived_by_its_master_leaves_the_tablet_to_the_next_one() {
    let raced = race_a_move_and_an_assignment(true);
    assert!(raced.moved.is_err(), "the deposed master's move went on");
    assert_eq!(raced.serving.len(), 1, "served by {:?}", raced.serving);
}

/// A load its master outlives (paused after redoing the tablet, as a long
/// log redo would be) does not serve the tablet once the next master has
/// assigned it: the server checks the master's lock again before it records.
#[test]
fn a_load_outlived_by_its_master_does_not_serve_beside_the_next_assignment() {
    let (store, bt, tablet, to) = one_tablet_and_another_server();
    let hooks = &bt.cluster().env.hooks;
    let _release = ReleasePauses(hooks);
    let before = hooks.load_before_record.reached();
    hooks.load_before_record.hold_next();
    let moved = std::thread::scope(|s| {
        let mover = s.spawn(|| bt.control(&format!("move t r00000 {to}")));
        wait_for("the move's load to pause", Duration::from_secs(30), || {
            hooks.load_before_record.reached() > before
        });
        bt.control("kill-master").unwrap();
        // The next master finds the tablet unassigned and loads it (the
        // paused load has not recorded or started serving).
        wait_for("the next master to assign", Duration::from_secs(60), || {
            !serving(&bt, tablet).is_empty()
        });
        hooks.load_before_record.hold(false);
        mover.join().unwrap()
    });
    assert!(moved.is_err(), "the deposed master's load went on");
    let servers = serving(&bt, tablet);
    assert_eq!(servers.len(), 1, "served by {servers:?}");
    a_write_outlives_a_restart(&bt, store);
}

/// A fresh store with table `t` of 100 rows in one tablet, and no balancer
/// (only a test's moves move it); the tablet's id and another server.
fn one_tablet_and_another_server() -> (Arc<dyn gfs::FileStore>, Bigtable, u64, String) {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store.clone(), no_balancer()).unwrap();
    bt.create_table("t", schema()).unwrap();
    fill(&bt, "t", 100);
    let tablet = bt.tablets("t").unwrap()[0].clone();
    let to = bt
        .cluster()
        .env
        .servers()
        .iter()
        .map(|s| s.name().to_string())
        .find(|n| *n != tablet.server)
        .expect("a second tablet server");
    (store, bt, tablet.id, to)
}

fn no_balancer() -> Options {
    Options {
        balance: false,
        ..options()
    }
}

/// The servers serving tablet `id`.
fn serving(bt: &Bigtable, id: u64) -> Vec<String> {
    bt.cluster()
        .env
        .servers()
        .iter()
        .filter(|s| s.tablet_ids().unwrap().contains(&id))
        .map(|s| s.name().to_string())
        .collect()
}

/// A write made now reaches the log METADATA names: it outlives a
/// restart, and so does the table.
fn a_write_outlives_a_restart(bt: &Bigtable, store: Arc<dyn gfs::FileStore>) {
    bt.apply(
        "t",
        &RowMutation::new("r99999").set("f", "q", "written last"),
        WriteOptions::default(),
    )
    .unwrap();
    bt.close().unwrap();
    let bt = Bigtable::open(store, no_balancer()).unwrap();
    assert_eq!(value(&bt, "r99999"), Some(b"written last".to_vec()));
    check(&bt, "t", 100);
    bt.close().unwrap();
}

/// What [`race_a_move_and_an_assignment`] saw.
struct Raced {
    /// Where the move was to take the tablet, and how it ended.
    to: String,
    moved: Result<()>,
    /// The servers serving the tablet once the move and the round are over.
    serving: Vec<String>,
}

/// Moves a table's one tablet, paused after its unload while the master's
/// next assignment round reads the rows (the tablet unassigned) and pauses
/// in turn; with `depose`, the move's master is killed first, so the round
/// is the next master's. Then lets the move end, then the round. A write
/// made after both must outlive a restart, and so must the table.
fn race_a_move_and_an_assignment(depose: bool) -> Raced {
    let (store, bt, tablet, to) = one_tablet_and_another_server();
    let hooks = &bt.cluster().env.hooks;
    let _release = ReleasePauses(hooks);
    hooks.move_after_unload.hold(true);
    let (moved, paused) = std::thread::scope(|s| {
        let mover = s.spawn(|| bt.control(&format!("move t r00000 {to}")));
        wait_for("the move to unload", Duration::from_secs(30), || {
            hooks.move_after_unload.reached() > 0
        });
        let before = hooks.assign_after_read.reached();
        hooks.assign_after_read.hold(true);
        if depose {
            bt.control("kill-master").unwrap();
        }
        wait_for("an assignment round", Duration::from_secs(60), || {
            hooks.assign_after_read.reached() > before
        });
        let paused = hooks.assign_after_read.reached();
        hooks.move_after_unload.hold(false);
        let moved = mover.join().unwrap();
        hooks.assign_after_read.hold(false);
        (moved, paused)
    });
    // The paused round is over once the next one has read the rows.
    wait_for("the next assignment round", Duration::from_secs(30), || {
        hooks.assign_after_read.reached() > paused
    });
    let serving = serving(&bt, tablet);
    a_write_outlives_a_restart(&bt, store);
    Raced { to, moved, serving }
}

/// Lets every paused operation go when dropped, so that a failing test
/// does not leave a master or a move waiting (and the close after it).
struct ReleasePauses<'a>(&'a Hooks);

impl Drop for ReleasePauses<'_> {
    fn drop(&mut self) {
        self.0.move_after_unload.hold(false);
        self.0.assign_after_read.hold(false);
        self.0.load_before_record.hold(false);
    }
}
