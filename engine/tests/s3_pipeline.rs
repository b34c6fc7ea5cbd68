//! Two commit-log PUTs out at once on S3 (`log_puts_in_flight=2`): a batch
//! written while an earlier one is still out is acknowledged only after the
//! earlier one is done; a failed earlier PUT fails only its own writers; and
//! a daemon that stops with the later object stored and the earlier one
//! missing recovers the later one alone, never anything it acknowledged
//! lost. On SeaweedFS, with a store wrapper that holds (and may fail) the
//! log append carrying one row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use parking_lot::{Condvar, Mutex};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};

const WAIT: Duration = Duration::from_secs(60);

/// What the wrapper does with a log append that carries the marker.
#[derive(Default)]
struct GateState {
    /// The bytes that pick the append to hold.
    marker: Option<Vec<u8>>,
    /// Appends with the marker waiting now.
    held: usize,
    /// Whether held appends may go on.
    released: bool,
    /// How many appends with the marker fail (without reaching the store)
    /// once released.
    fail: u32,
    /// Every log append the store took.
    stored: Vec<Vec<u8>>,
}

#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

impl Gate {
    fn arm(&self, marker: &str, fail: u32) {
        let mut s = self.state.lock();
        s.marker = Some(marker.as_bytes().to_vec());
        s.released = false;
        s.fail = fail;
    }

    fn release(&self) {
        self.state.lock().released = true;
        self.changed.notify_all();
    }

    fn held(&self) -> usize {
        self.state.lock().held
    }

    fn stored_with(&self, marker: &str) -> bool {
        let s = self.state.lock();
        s.stored.iter().any(|d| contains(d, marker.as_bytes()))
    }

    /// Before an append of `data`: holds it while armed and not released;
    /// then whether it must fail.
    fn pass(&self, data: &[u8]) -> bool {
        let mut s = self.state.lock();
        let hit = s.marker.as_ref().is_some_and(|m| contains(data, m));
        if !hit {
            return false;
        }
        s.held += 1;
        self.changed.notify_all();
        while !s.released {
            self.changed.wait(&mut s);
        }
        s.held -= 1;
        if s.fail > 0 {
            s.fail -= 1;
            return true;
        }
        false
    }
}

struct GatedLog {
    inner: Box<dyn gfs::WritableFile>,
    name: String,
    gate: Arc<Gate>,
}

impl GatedLog {
    fn put(
        &mut self,
        data: &[u8],
        f: impl FnOnce(&mut Self) -> gfs::Result<u64>,
    ) -> gfs::Result<u64> {
        if self.gate.pass(data) {
            return Err(gfs::Error::Io {
                name: self.name.clone(),
                source: std::io::Error::other("the test failed this PUT"),
            });
        }
        let r = f(self);
        if r.is_ok() && !data.is_empty() {
            self.gate.state.lock().stored.push(data.to_vec());
        }
        r
    }
}

impl gfs::WritableFile for GatedLog {
    fn append(&mut self, data: &[u8]) -> gfs::Result<u64> {
        self.put(data, |s| s.inner.append(data))
    }
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
        let data = bufs.concat();
        self.put(&data, |s| s.inner.append(&data))
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
        let data = bufs.concat();
        self.put(&data, |s| s.inner.append_sync(&[&data]))
    }
    fn sync(&mut self) -> gfs::Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

/// An S3 store whose log appends pass the gate.
struct Gated(Arc<dyn gfs::FileStore>, Arc<Gate>);

impl gfs::FileStore for Gated {
    fn create(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.0.create(name)
    }
    fn create_log(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        Ok(Box::new(GatedLog {
            inner: self.0.create_log(name)?,
            name: name.to_string(),
            gate: Arc::clone(&self.1),
        }))
    }
    fn open_append(&self, name: &str) -> gfs::Result<Box<dyn gfs::WritableFile>> {
        self.0.open_append(name)
    }
    fn open(&self, name: &str) -> gfs::Result<Arc<dyn gfs::ReadableFile>> {
        self.0.open(name)
    }
    fn delete(&self, name: &str) -> gfs::Result<()> {
        self.0.delete(name)
    }
    fn rename(&self, from: &str, to: &str) -> gfs::Result<()> {
        self.0.rename(from, to)
    }
    fn replace(&self, name: &str, bufs: &[&[u8]]) -> gfs::Result<()> {
        self.0.replace(name, bufs)
    }
    fn exists(&self, name: &str) -> gfs::Result<bool> {
        self.0.exists(name)
    }
    fn size(&self, name: &str) -> gfs::Result<u64> {
        self.0.size(name)
    }
    fn list(&self, prefix: &str) -> gfs::Result<Vec<String>> {
        self.0.list(prefix)
    }
    fn durable_appends(&self) -> bool {
        self.0.durable_appends()
    }
    fn shared_by_daemons(&self) -> bool {
        self.0.shared_by_daemons()
    }
    fn seal_logs(&self, dir: &str) -> gfs::Result<usize> {
        self.0.seal_logs(dir)
    }
}

fn options() -> Options {
    Options {
        tablet_servers: 1,
        log_puts_in_flight: 2,
        ..Options::default()
    }
}

/// A daemon's store on the test server's prefix `prefix` (opening one
/// takes the prefix over).
fn s3(w: &Seaweed, prefix: &str) -> Arc<dyn gfs::FileStore> {
    support::open_s3(
        &w.endpoint,
        &format!("s3://{}/{prefix}", w.bucket),
        ACCESS_KEY,
        SECRET_KEY,
    )
}

fn open_gated(w: &Seaweed, prefix: &str) -> (Bigtable, Arc<Gate>) {
    let gate = Arc::new(Gate::default());
    let store: Arc<dyn gfs::FileStore> = Arc::new(Gated(s3(w, prefix), Arc::clone(&gate)));
    let bt = Bigtable::open(store, options()).unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    (bt, gate)
}

fn put(bt: &Bigtable, row: &str) -> Result<Written> {
    let m = RowMutation::new(row).set("f", b"q".to_vec(), row.as_bytes().to_vec());
    bt.apply("t", &m, WriteOptions::default())
}

fn has(bt: &Bigtable, row: &str) -> bool {
    bt.read_cell("t", row.as_bytes(), "f", b"q")
        .unwrap()
        .is_some_and(|c| c.value[..] == *row.as_bytes())
}

/// Writes `row` on another thread; the receiver gets the result.
fn put_async(bt: &Bigtable, row: &'static str) -> mpsc::Receiver<Result<Written>> {
    let (tx, rx) = mpsc::channel();
    let bt = bt.clone();
    std::thread::spawn(move || {
        let _ = tx.send(put(&bt, row));
    });
    rx
}

/// Rows written and acknowledged before the test's two batches.
fn write_before(bt: &Bigtable) -> Vec<String> {
    let rows: Vec<String> = (0..20).map(|i| format!("before-{i:03}")).collect();
    for r in &rows {
        put(bt, r).unwrap();
    }
    rows
}

/// Holds the PUT carrying `a`, writes `b` meanwhile, and waits until b's
/// PUT is stored: b's writer must still be waiting, and b not readable.
fn a_held_b_stored(
    bt: &Bigtable,
    gate: &Gate,
    fail: u32,
) -> (
    mpsc::Receiver<Result<Written>>,
    mpsc::Receiver<Result<Written>>,
) {
    gate.arm("row-a", fail);
    let a = put_async(bt, "row-a");
    assert!(
        testkit::wait_until(WAIT, || gate.held() == 1),
        "a's PUT never came"
    );
    let b = put_async(bt, "row-b");
    assert!(
        testkit::wait_until(WAIT, || gate.stored_with("row-b")),
        "b's PUT was not written while a's was out"
    );
    assert!(
        b.try_recv().is_err(),
        "b was acknowledged before the earlier batch a was stored"
    );
    assert!(!has(bt, "row-b"), "b is readable before a is done");
    (a, b)
}

#[test]
fn a_later_batch_waits_for_the_earlier_one_then_both_are_kept() {
    let w = Seaweed::start("pipeline-order");
    let (bt, gate) = open_gated(&w, "p");
    let before = write_before(&bt);
    let (a, b) = a_held_b_stored(&bt, &gate, 0);
    gate.release();
    a.recv_timeout(WAIT).unwrap().unwrap();
    b.recv_timeout(WAIT).unwrap().unwrap();
    assert!(has(&bt, "row-a") && has(&bt, "row-b"));
    // Many writers at once, each acknowledged write readable at once.
    let hs: Vec<_> = (0..8)
        .map(|t| {
            let bt = bt.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let row = format!("many-{t}-{i:03}");
                    put(&bt, &row).unwrap();
                    assert!(has(&bt, &row), "{row} acknowledged but not readable");
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    bt.close().unwrap();
    // A new daemon recovers every acknowledged write.
    let bt = Bigtable::open(s3(&w, "p"), options()).unwrap();
    for r in before.iter().map(String::as_str).chain(["row-a", "row-b"]) {
        assert!(has(&bt, r), "{r} lost");
    }
    for t in 0..8 {
        for i in 0..40 {
            assert!(has(&bt, &format!("many-{t}-{i:03}")));
        }
    }
    bt.close().unwrap();
}

#[test]
fn a_failed_earlier_put_fails_only_its_own_writers() {
    let w = Seaweed::start("pipeline-fail");
    let (bt, gate) = open_gated(&w, "p");
    let before = write_before(&bt);
    // a's PUT fails, and so does its repeat on the other lane.
    let (a, b) = a_held_b_stored(&bt, &gate, 2);
    gate.release();
    assert!(a.recv_timeout(WAIT).unwrap().is_err(), "a's PUTs failed");
    b.recv_timeout(WAIT).unwrap().unwrap();
    assert!(!has(&bt, "row-a"));
    assert!(has(&bt, "row-b"));
    // The log goes on after the failure.
    put(&bt, "row-c").unwrap();
    assert!(has(&bt, "row-c"));
    bt.close().unwrap();
    let bt = Bigtable::open(s3(&w, "p"), options()).unwrap();
    for r in before.iter().map(String::as_str).chain(["row-b", "row-c"]) {
        assert!(has(&bt, r), "{r} lost");
    }
    assert!(!has(&bt, "row-a"), "a failed, yet was recovered");
    bt.close().unwrap();
}

#[test]
fn a_daemon_stopped_with_a_gap_recovers_the_stored_batch_alone() {
    let w = Seaweed::start("pipeline-gap");
    let (old, gate) = open_gated(&w, "p");
    let before = write_before(&old);
    let (a, b) = a_held_b_stored(&old, &gate, 0);
    // The old daemon stops answering here (a's PUT never lands); a new one
    // takes the prefix over and recovers.
    let new = Bigtable::open(s3(&w, "p"), options()).unwrap();
    for r in &before {
        assert!(has(&new, r), "{r} was acknowledged and is lost");
    }
    assert!(has(&new, "row-b"), "b's object was stored: it is replayed");
    assert!(!has(&new, "row-a"), "a was never stored");
    // The old daemon wakes: a's PUT finds its log sealed and fails, so a is
    // never acknowledged; b, recovered above, may be.
    gate.release();
    assert!(
        a.recv_timeout(WAIT).unwrap().is_err(),
        "a was acknowledged by a fenced daemon"
    );
    let _ = b.recv_timeout(WAIT).unwrap();
    assert!(!has(&new, "row-a"));
    let _ = old.close();
    new.close().unwrap();
}
