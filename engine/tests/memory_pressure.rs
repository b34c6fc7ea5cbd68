//! Memtables written out before they are full: a tablet server's memory
//! budget over all its tablets, its log's length, and a memtable's age
//! each bound what writes spread thin (or a quiet tablet) would otherwise
//! keep only in memory and the log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::Duration;

fn options() -> Options {
    Options {
        tablet_servers: 1,
        merge_bytes: 0,
        memtable_max_age: Duration::ZERO,
        ..Options::default()
    }
}

fn schema() -> TableSchema {
    TableSchema::with_families([FamilySchema::new("f")])
}

fn wait_for(what: &str, limit: Duration, ok: impl FnMut() -> bool) {
    assert!(
        testkit::wait_until(limit, ok),
        "timed out waiting for {what}"
    );
}

/// A `key=value` figure of the (only) server's report line.
fn report(bt: &Bigtable, key: &str) -> u64 {
    figure(&bt.servers_report(), key)
}

/// A `key=value` figure of the (only) server's log status line.
fn log_status(bt: &Bigtable, key: &str) -> u64 {
    let lines: Vec<String> = bt
        .status()
        .into_iter()
        .filter(|l| l.starts_with("server=") && l.contains(" log_files="))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    figure(&lines, key)
}

fn figure(lines: &[String], key: &str) -> u64 {
    lines
        .iter()
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
}

/// `rows` rows of 1000-byte values, in batches of 16.
fn fill(bt: &Bigtable, table: &str, rows: usize) {
    let rows: Vec<RowMutation> = (0..rows)
        .map(|i| RowMutation::new(format!("r{i:06}")).set("f", "q", value(table, i)))
        .collect();
    for batch in rows.chunks(16) {
        bt.apply_batch(table, batch, WriteOptions::default())
            .unwrap();
    }
}

fn value(table: &str, i: usize) -> Vec<u8> {
    let mut v = format!("{table}-{i}-").into_bytes();
    v.resize(1000, b'.');
    v
}

fn check(bt: &Bigtable, table: &str, rows: usize) {
    for i in 0..rows {
        let got = bt
            .read_cell(table, format!("r{i:06}").as_bytes(), "f", b"q")
            .unwrap()
            .map(|c| c.value.into_vec());
        assert_eq!(got, Some(value(table, i)), "{table} row {i}");
    }
}

#[test]
fn writes_spread_over_many_tablets_stay_within_the_memtable_budget() {
    let _ = env_logger::builder().is_test(true).try_init();
    let budget = 1 << 20;
    let bt = Bigtable::open(
        Arc::new(gfs::MemStore::new()),
        Options {
            memtable_bytes: 4 << 20,
            memtable_budget: budget,
            ..options()
        },
    )
    .unwrap();
    // Eight tables of about 450 KiB each: none reaches its own memtable
    // limit, together they are 3.5 times the budget.
    let tables: Vec<String> = (0..8).map(|i| format!("t{i}")).collect();
    for t in &tables {
        bt.create_table(t, schema()).unwrap();
        fill(&bt, t, 400);
    }
    wait_for(
        "the memtables to shrink under the budget",
        Duration::from_secs(60),
        || report(&bt, "memtable_bytes") <= budget,
    );
    assert!(report(&bt, "memory_flushes") >= 1);
    for t in &tables {
        check(&bt, t, 400);
    }
    bt.close().unwrap();
}

#[test]
fn a_log_held_back_by_a_quiet_tablet_is_trimmed_and_nothing_is_lost() {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let opts = Options {
        memtable_bytes: 64 << 10,
        log_file_bytes: 32 << 10,
        log_max_files: 3,
        ..options()
    };
    {
        let bt = Bigtable::open(store.clone(), opts.clone()).unwrap();
        bt.create_table("quiet", schema()).unwrap();
        bt.create_table("busy", schema()).unwrap();
        fill(&bt, "quiet", 1);
        // About 64 log files' worth; "busy" writes its memtable out every
        // 64 KiB by itself, "quiet" never would.
        fill(&bt, "busy", 2000);
        // The lanes' two current files and at most `log_max_files` old ones.
        wait_for("the log to be trimmed", Duration::from_secs(60), || {
            log_status(&bt, "log_files") <= 5
        });
        assert!(report(&bt, "log_flushes") >= 1);
        check(&bt, "quiet", 1);
        // Dropped without close: what was not written out is only in the
        // log that was kept.
        std::mem::forget(bt);
    }
    let bt = Bigtable::open(store, opts).unwrap();
    check(&bt, "quiet", 1);
    check(&bt, "busy", 2000);
    bt.close().unwrap();
}

#[test]
fn a_memtable_older_than_its_limit_is_written_out() {
    let _ = env_logger::builder().is_test(true).try_init();
    let bt = Bigtable::open(
        Arc::new(gfs::MemStore::new()),
        Options {
            memtable_max_age: Duration::from_millis(300),
            ..options()
        },
    )
    .unwrap();
    bt.create_table("t", schema()).unwrap();
    fill(&bt, "t", 3);
    assert_eq!(bt.tablets("t").unwrap()[0].sstables, 0);
    wait_for(
        "the memtable to be written out",
        Duration::from_secs(30),
        || bt.tablets("t").unwrap()[0].sstables == 1,
    );
    assert!(report(&bt, "age_flushes") >= 1);
    check(&bt, "t", 3);
    bt.close().unwrap();
}

/// A store whose new files (SSTables; logs are `create_log`) wait while
/// the gate is shut: memtables cannot be written out.
struct Gated {
    inner: Arc<dyn gfs::FileStore>,
    shut: Mutex<bool>,
    opened: Condvar,
}

impl Gated {
    fn set(&self, shut: bool) {
        *self.shut.lock() = shut;
        self.opened.notify_all();
    }
}

/// Opens the gate when dropped: a failing test must not leave the
/// engine's threads waiting in it, or dropping the engine never returns.
struct OpenOnDrop(Arc<Gated>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl gfs::FileStore for Gated {
    fn create(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        let mut shut = self.shut.lock();
        while *shut {
            self.opened.wait(&mut shut);
        }
        drop(shut);
        self.inner.create(name)
    }
    fn create_log(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.inner.create_log(name)
    }
    fn open_append(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.inner.open_append(name)
    }
    fn open(&self, name: &str) -> gfs::Result<Arc<dyn gfs::ReadableFile>> {
        self.inner.open(name)
    }
    fn delete(&self, name: &str) -> gfs::Result<()> {
        self.inner.delete(name)
    }
    fn rename(&self, from: &str, to: &str) -> gfs::Result<()> {
        self.inner.rename(from, to)
    }
    fn replace(&self, name: &str, bufs: &[&[u8]]) -> gfs::Result<()> {
        self.inner.replace(name, bufs)
    }
    fn exists(&self, name: &str) -> gfs::Result<bool> {
        self.inner.exists(name)
    }
    fn size(&self, name: &str) -> gfs::Result<u64> {
        self.inner.size(name)
    }
    fn list(&self, prefix: &str) -> gfs::Result<Vec<String>> {
        self.inner.list(prefix)
    }
    fn durable_appends(&self) -> bool {
        self.inner.durable_appends()
    }
    fn shared_by_daemons(&self) -> bool {
        self.inner.shared_by_daemons()
    }
    fn seal_logs(&self, dir: &str) -> gfs::Result<usize> {
        self.inner.seal_logs(dir)
    }
}

#[test]
fn writers_wait_while_memtables_that_cannot_be_written_out_pass_twice_the_budget() {
    let _ = env_logger::builder().is_test(true).try_init();
    let budget: u64 = 256 << 10;
    let store = Arc::new(Gated {
        inner: Arc::new(gfs::MemStore::new()),
        shut: Mutex::new(false),
        opened: Condvar::new(),
    });
    let bt = Arc::new(
        Bigtable::open(
            store.clone(),
            Options {
                memtable_bytes: 64 << 20,
                memtable_budget: budget,
                ..options()
            },
        )
        .unwrap(),
    );
    // 64 tables of 32 KiB: each is frozen once or twice at most, so no
    // tablet's own limit on frozen memtables holds its writers back.
    let tables: Vec<String> = (0..64).map(|i| format!("t{i:02}")).collect();
    for t in &tables {
        bt.create_table(t, schema()).unwrap();
    }
    store.set(true);
    let _open = OpenOnDrop(store.clone());
    let writer = {
        let bt = bt.clone();
        let tables = tables.clone();
        std::thread::spawn(move || {
            for t in &tables {
                fill(&bt, t, 32);
            }
        })
    };
    wait_for("the writer to wait", Duration::from_secs(60), || {
        report(&bt, "stalls") >= 1 || writer.is_finished()
    });
    assert!(
        !writer.is_finished(),
        "2 MiB written with nothing written out"
    );
    // Twice the budget, and the batch that passed it.
    let held = report(&bt, "memtable_bytes");
    assert!(held <= 2 * budget + (64 << 10), "{held} bytes in memtables");
    store.set(false);
    writer.join().unwrap();
    for t in &tables {
        check(&bt, t, 32);
    }
    bt.close().unwrap();
}
