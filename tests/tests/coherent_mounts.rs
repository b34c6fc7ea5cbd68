#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Two daemons of one cluster whose kernels keep names and attributes for
//! 300 s: a write through one is seen through the other as soon as its
//! `close` returns, because the writer invalidates the other's kernel
//! first (docs/coherence.md). And a daemon killed while it watches holds
//! up the other's writes no longer than its lease.

use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::etcd::Etcd;
use tests::{wait_until, Mount};

/// Kernel caches as long as a lone daemon's: only invalidation can make
/// the other mount see a change in time.
const LONG: [&str; 3] = ["attr_timeout=300", "entry_timeout=300", "dir_timeout=300"];

/// An etcd and two daemons on it: A serves, B runs no tablet server and
/// reaches A's over the internal RPC; both with long kernel caches.
fn two_daemons() -> (Arc<Etcd>, Mount, Mount) {
    let etcd = Arc::new(Etcd::start());
    let secret = tests::cluster_secret();
    let mut a_opts = vec!["cluster_listen=127.0.0.1:0", secret.option.as_str()];
    a_opts.extend(LONG);
    let a = Mount::on_etcd(etcd.clone(), "/bt", &a_opts);
    let mut b_opts = a_opts.clone();
    b_opts.push("tablet_servers=0");
    let b = Mount::on_etcd(etcd.clone(), "/bt", &b_opts);
    // Each has a lease at the other once it is registered there: wait for
    // both daemons to be listed and followed before writing.
    for m in [&a, &b] {
        assert!(
            wait_until(Duration::from_secs(30), || followed(m) >= 1),
            "{} follows no other daemon: {}",
            m.mnt.display(),
            m.ok("cat .bigtable/status")
        );
    }
    (etcd, a, b)
}

/// The daemons `m` holds a lease at (`coherence_leases=` of
/// `.bigtable/status`).
fn followed(m: &Mount) -> usize {
    m.ok("cat .bigtable/status")
        .split_whitespace()
        .find_map(|w| w.strip_prefix("coherence_leases="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn read(p: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(p)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// One round through `w` (the writer) and `r` (the reader): `r` caches the
/// cell, its row and the table's listing first, then every change through
/// `w` must show through `r` the moment the writer's call returns.
fn round(w: &Mount, r: &Mount, i: usize) {
    let (wp, rp) = (|s: &str| w.path(s), |s: &str| r.path(s));
    // An overwritten cell of another size: contents and size.
    let before = read(&rp("t/r/cf/q")).unwrap();
    let len_before = std::fs::metadata(rp("t/r/cf/q")).unwrap().len();
    let value = format!("{i}:{}", "x".repeat(i % 7 + (i * 13) % 50));
    std::fs::write(wp("t/r/cf/q"), &value).unwrap();
    assert_eq!(
        read(&rp("t/r/cf/q")).unwrap(),
        value,
        "round {i}, was {before:?}"
    );
    let len = std::fs::metadata(rp("t/r/cf/q")).unwrap().len();
    assert_eq!(
        len,
        value.len() as u64,
        "round {i}: size (was {len_before})"
    );
    // A new cell in a row the reader has listed.
    let listed = names(&rp("t/r/cf"));
    let q = format!("n{i}");
    std::fs::write(wp(&format!("t/r/cf/{q}")), b"new").unwrap();
    assert!(
        names(&rp("t/r/cf")).contains(&q),
        "round {i}: {q} not listed through the other mount (was {listed:?})"
    );
    assert_eq!(read(&rp(&format!("t/r/cf/{q}"))).unwrap(), "new");
    // That cell removed.
    std::fs::remove_file(wp(&format!("t/r/cf/{q}"))).unwrap();
    let gone = read(&rp(&format!("t/r/cf/{q}")));
    assert_eq!(
        gone.as_ref().map_err(|e| e.kind()),
        Err(ErrorKind::NotFound),
        "round {i}: removed cell still read through the other mount"
    );
    assert!(
        !names(&rp("t/r/cf")).contains(&q),
        "round {i}: {q} still listed"
    );
    // A new row in a table the reader has listed, and has looked up
    // (the reader keeps a moment that the row is missing: the writer's
    // invalidation must drop that).
    let _ = names(&rp("t"));
    let row = format!("row{i}");
    assert_eq!(
        std::fs::metadata(rp(&format!("t/{row}")))
            .map(|_| ())
            .map_err(|e| e.kind()),
        Err(ErrorKind::NotFound),
        "round {i}"
    );
    std::fs::create_dir_all(wp(&format!("t/{row}/cf"))).unwrap();
    std::fs::write(wp(&format!("t/{row}/cf/x")), b"in a new row").unwrap();
    assert!(
        names(&rp("t")).contains(&row),
        "round {i}: {row} not in the other mount's ls"
    );
    assert_eq!(read(&rp(&format!("t/{row}/cf/x"))).unwrap(), "in a new row");
}

/// Table `t` with cell `r/cf/q` made through `a`, once `b` reads it (a
/// table name it does not know is looked up afresh).
fn first_cell(a: &Mount, b: &Mount) {
    a.table("t", "cf\n");
    std::fs::create_dir_all(a.path("t/r/cf")).unwrap();
    std::fs::write(a.path("t/r/cf/q"), b"first").unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || read(&b.path("t/r/cf/q"))
            .is_ok()),
        "B never saw the table"
    );
}

#[test]
fn a_write_through_one_daemon_is_seen_through_the_other_when_close_returns() {
    let (_etcd, a, b) = two_daemons();
    first_cell(&a, &b);
    // Many rounds both ways: a race between the write and the
    // invalidation would show as a stale read in one of them.
    for i in 0..30 {
        round(&a, &b, 2 * i);
        round(&b, &a, 2 * i + 1);
    }
    // The invalidations crossed the internal RPC (not expiry).
    let status = b.ok("cat .bigtable/status");
    let received = status
        .split_whitespace()
        .find_map(|w| w.strip_prefix("coherence_received="))
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(received > 0, "{status}");
}

#[test]
fn a_daemon_killed_while_it_watches_holds_writes_up_no_longer_than_its_lease() {
    let (_etcd, a, mut b) = two_daemons();
    first_cell(&a, &b);
    // B watches A's writes; it dies without a word.
    b.kill9();
    // A's next writes wait for B at most its lease (3 s); the bound here
    // leaves room for a loaded machine, far below any session timeout.
    let started = Instant::now();
    for i in 0..5 {
        std::fs::write(a.path("t/r/cf/q"), format!("after {i}")).unwrap();
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "writes took {took:?}");
    assert_eq!(read(&a.path("t/r/cf/q")).unwrap(), "after 4");
    let status = a.ok("cat .bigtable/status");
    assert!(
        status.contains("coherence_expired="),
        "no coherence figures: {status}"
    );
}

/// `inotifywait -m` on a directory, killed when dropped (also when the
/// test fails); its lines are collected as they come.
struct Watch {
    child: std::process::Child,
    lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Watch {
    fn start(dir: &Path) -> Watch {
        use std::io::BufRead;
        let mut child = std::process::Command::new("inotifywait")
            .args(["-m", "--format", "%e %f"])
            .arg(dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("inotifywait (apt package inotify-tools; tests/setup.sh installs it)");
        let lines: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        for out in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(l);
                }
            });
        }
        let w = Watch { child, lines };
        assert!(
            w.wait_for("Watches established."),
            "inotifywait did not start: {:?}",
            w.lines()
        );
        w
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn wait_for(&self, line: &str) -> bool {
        wait_until(Duration::from_secs(20), || {
            self.lines().iter().any(|l| l == line)
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn inotify_on_one_mount_reports_writes_through_the_other_as_close_write() {
    let (_etcd, a, b) = two_daemons();
    first_cell(&a, &b);
    // B's kernel holds the family directory and the cell; a watcher on it.
    assert_eq!(names(&b.path("t/r/cf")), ["q"]);
    let watch = Watch::start(&b.path("t/r/cf"));
    // An overwrite through A: the watcher on B sees the cell written.
    std::fs::write(a.path("t/r/cf/q"), b"second").unwrap();
    assert!(
        watch.wait_for("CLOSE_WRITE,CLOSE q"),
        "no close-write of q: {:?}",
        watch.lines()
    );
    assert_eq!(read(&b.path("t/r/cf/q")).unwrap(), "second");
    // A new cell through A: the watcher sees it written too (as a
    // close-write; there is no IN_CREATE, see docs/coherence.md).
    std::fs::write(a.path("t/r/cf/new"), b"n").unwrap();
    assert!(
        watch.wait_for("CLOSE_WRITE,CLOSE new"),
        "no close-write of new: {:?}",
        watch.lines()
    );
    // The replays wrote nothing: the values are A's, in both mounts.
    assert_eq!(read(&a.path("t/r/cf/q")).unwrap(), "second");
    assert_eq!(read(&b.path("t/r/cf/new")).unwrap(), "n");
    let stats = b.ok("cat .bigtable/stats");
    assert!(
        stats
            .lines()
            .any(|l| l.strip_prefix("replayed_cells=").is_some_and(|n| n != "0")),
        "{stats}"
    );
}

/// A table listing a daemon keeps whole (listed twice with no write in
/// between, the kernel's own copy gone each time: docs/mount.md,
/// "Caching") answers the listings after it with no call to a tablet
/// server, and shows a row written or removed through the other daemon as
/// soon as that write returns.
#[test]
fn a_listing_kept_by_one_daemon_shows_the_other_daemons_writes() {
    if !tests::drop_kernel_caches() {
        eprintln!("not root: cannot drop the kernel's listings; skipping");
        return;
    }
    let (_etcd, a, b) = two_daemons();
    first_cell(&a, &b);
    a.mutate(
        "t",
        &(0..500)
            .map(|i| format!("set k{i:04} cf:q v\n"))
            .collect::<String>()
            .into_bytes(),
    );
    for i in 0..5 {
        // Kept, then answered with no scan. Either can miss on a loaded
        // machine: a lease renewed late (or afresh) stops keeping until it
        // holds again; so each is waited for, with a deadline.
        let mut listed = Vec::new();
        let answered_kept = wait_until(Duration::from_secs(60), || {
            for _ in 0..2 {
                assert!(tests::drop_kernel_caches());
                names(&b.path("t"));
            }
            if b.stat("kept_listing_bytes") == 0 {
                return false;
            }
            let scans = b.stat("store_scan");
            assert!(tests::drop_kernel_caches());
            listed = names(&b.path("t"));
            b.stat("store_scan") == scans
        });
        assert!(
            answered_kept,
            "round {i}: no listing answered from a kept one\n{}\n{}",
            b.ok("cat .bigtable/stats"),
            b.ok("cat .bigtable/status")
        );
        let row = format!("row{i}");
        let rows = listed.iter().filter(|n| !n.starts_with('.')).count();
        assert_eq!(rows, 501, "round {i}: the kept listing: {listed:?}");
        assert!(!listed.contains(&row));
        std::fs::create_dir_all(a.path(&format!("t/{row}/cf"))).unwrap();
        std::fs::write(a.path(&format!("t/{row}/cf/x")), b"new").unwrap();
        assert!(tests::drop_kernel_caches());
        assert!(
            names(&b.path("t")).contains(&row),
            "round {i}: {row} written through A is not in B's listing"
        );
        // Kept again, then the row removed through A.
        for _ in 0..2 {
            assert!(tests::drop_kernel_caches());
            names(&b.path("t"));
        }
        std::fs::remove_dir_all(a.path(&format!("t/{row}"))).unwrap();
        assert!(tests::drop_kernel_caches());
        assert!(
            !names(&b.path("t")).contains(&row),
            "round {i}: {row} removed through A is still in B's listing"
        );
    }
}

/// Empty directories made with `mkdir` are the daemon's own (docs/mount.md,
/// Rows and families): a family or table another daemon drops, which it
/// sees empty, takes them along, and one made again under the name starts
/// without them.
#[test]
fn a_family_or_table_dropped_through_one_daemon_takes_the_others_empty_directories() {
    let (_etcd, a, b) = two_daemons();
    first_cell(&a, &b);
    let listed = |m: &Mount, dir: &str| -> Vec<String> {
        names(&m.path(dir))
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .collect()
    };
    let none: Vec<String> = Vec::new();
    // A family.
    std::fs::write(a.path("t/.schema"), "cf\ng\n").unwrap();
    std::fs::create_dir_all(b.path("t/r2/g")).unwrap();
    assert_eq!(listed(&b, "t/r2"), ["g"]);
    std::fs::write(a.path("t/.schema"), "cf\n").unwrap();
    assert_eq!(listed(&b, "t/r2"), none, "a dropped family's directory");
    std::fs::write(a.path("t/.schema"), "cf\ng\n").unwrap();
    assert_eq!(listed(&b, "t/r2"), none, "the family added again");
    // A table.
    a.table("u", "cf\n");
    std::fs::create_dir(b.path("u/empty")).unwrap();
    assert_eq!(listed(&b, "u"), ["empty"]);
    std::fs::remove_dir(a.path("u")).unwrap();
    assert!(!listed(&b, "").contains(&"u".to_string()));
    a.table("u", "cf\n");
    assert_eq!(listed(&b, "u"), none, "the table made again");
}
