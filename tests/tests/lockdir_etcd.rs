#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The lock directory with the lock service on etcd (`lock=etcd://…`): every
//! test of lockdir.rs on a mount whose cell is in a fresh etcd, then what
//! only etcd brings: a daemon killed while holding a lock, and two cells
//! under two prefixes of one etcd.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::etcd::Etcd;
use tests::{wait_until, LockHolder, Mount};

/// lockdir.rs's tests run on this mount.
pub fn backend_mount() -> Mount {
    Mount::with_etcd(&[])
}

#[path = "lockdir.rs"]
mod lockdir;

/// The `lock_session` line's lease id in `.bigtable/status`.
fn lease_of(m: &Mount) -> String {
    let status = std::fs::read_to_string(m.path(".bigtable/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("lock_session lease="))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no lock_session line in .bigtable/status:\n{status}"))
        .to_string()
}

#[test]
fn status_names_the_etcd_backend() {
    let m = Mount::with_etcd(&[]);
    let status = std::fs::read_to_string(m.path(".bigtable/status")).unwrap();
    assert!(status.contains("lock_backend=etcd"), "{status}");
    assert!(status.contains("keepalive=ok"), "{status}");
    let embedded = Mount::new();
    let status = std::fs::read_to_string(embedded.path(".bigtable/status")).unwrap();
    assert!(status.contains("lock_backend=embedded"), "{status}");
}

#[test]
fn a_daemon_killed_holding_a_lock_frees_it_after_lease_and_lock_delay() {
    let etcd = Arc::new(Etcd::start());
    let mut m = Mount::on_etcd(etcd.clone(), "/k", &[]);
    let p = m.path(".chubby/k");
    std::fs::write(&p, b"").unwrap();
    // Longer than the lease (2 s): a grant at the lease's end alone
    // comes sooner than this after the kill.
    m.ok("setfattr -n user.chubby.lock_delay_ms -v 3000 .chubby/k");
    let lease = lease_of(&m);
    let mut holder = LockHolder::take(&m.mnt, ".chubby/k");
    // Taken before the kill: `kill9` also waits for the exit and the
    // unmount, which on a loaded machine take a good part of a second.
    let killed = Instant::now();
    m.kill9();
    holder.kill();
    m.start();
    let o = m.sh("flock -w 60 -x .chubby/k true");
    let waited = killed.elapsed();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The lease was live at the kill (the holder held the lock), so it
    // ended after it, and the lock-delay counts from its end. (How long
    // after the kill it ended depends on when the daemon last renewed it,
    // which a loaded machine delays: no more is asserted of it.)
    assert!(
        waited >= Duration::from_millis(3000),
        "granted {waited:?} after the kill"
    );
    // Its waiter keys went with its lease; its markers, with the lock's
    // next grant or (for nodes gone with the lease) the daemon's sweep.
    let dead = |k: &String| k.contains(&format!("/{lease}_"));
    assert!(
        wait_until(Duration::from_secs(20), || !etcd
            .keys("/k/")
            .iter()
            .any(dead)),
        "the dead session's keys are left: {:?}",
        etcd.keys("/k/")
    );
}

#[test]
fn two_prefixes_on_one_etcd_are_two_cells() {
    let etcd = Arc::new(Etcd::start());
    let a = Mount::on_etcd(etcd.clone(), "/one", &[]);
    let b = Mount::on_etcd(etcd.clone(), "/two", &[]);
    a.ok("echo hi > .chubby/only-a");
    assert!(!b.path(".chubby/only-a").exists());
    a.ok("touch .chubby/l");
    b.ok("touch .chubby/l");
    let mut holder = Command::new("flock")
        .args(["-x", ".chubby/l", "sleep", "600"])
        .current_dir(&a.mnt)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || a
        .sh("flock -n -E 75 -x .chubby/l true")
        .status
        .code()
        == Some(75)));
    assert_eq!(b.sh("flock -n -x .chubby/l true").status.code(), Some(0));
    // SAFETY: signalling the holder's own process group.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    let _ = holder.wait();
    // Each cell elected its own master.
    for m in [&a, &b] {
        let status = std::fs::read_to_string(m.path(".bigtable/status")).unwrap();
        assert!(!status.contains("master= "), "{status}");
    }
    assert!(etcd.keys("/one/").iter().all(|k| k.starts_with("/one/")));
    assert!(!etcd.keys("/two/").is_empty());
}

/// The `lock_requests sent=N` line of `.bigtable/status`: requests the
/// daemon has sent to etcd.
fn etcd_requests(m: &Mount) -> u64 {
    let status = std::fs::read_to_string(m.path(".bigtable/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("lock_requests sent="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no lock_requests line in .bigtable/status:\n{status}"))
}

/// An idle daemon's tablet servers and masters follow the locks through
/// the cell's watch, not by asking etcd: they used to send it about 480
/// requests a second (each server's check of its own lock every 20 ms,
/// each master's round every 100 ms), now a few (the keep-alive and a
/// master's exact round every 2 s).
#[test]
fn an_idle_daemon_asks_etcd_little() {
    let m = Mount::with_etcd(&[]);
    m.ok("mkdir t");
    let (t0, n0) = (Instant::now(), etcd_requests(&m));
    // A rate over a window, not a wait for a condition.
    std::thread::sleep(Duration::from_secs(4));
    let sent = etcd_requests(&m) - n0;
    let per_sec = sent as f64 / t0.elapsed().as_secs_f64();
    assert!(
        per_sec < 30.0,
        "an idle daemon sent etcd {sent} requests in {:?}",
        t0.elapsed()
    );
}
