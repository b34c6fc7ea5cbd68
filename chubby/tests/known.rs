//! What a cell knows without asking (`known_valid`, `known_held`,
//! `known_list`): on etcd, what its watch saw, which follows the other
//! daemons' grants and releases; on the embedded cell, nothing (its
//! callers keep making the exact calls).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use chubby::{
    CellOptions, Credentials, EtcdCell, EtcdOptions, LocalCell, LockMode, LockService, NodeSpec,
    OpenOptions,
};
use testkit::etcd::Etcd;
use testkit::wait_until;

const WAIT: Duration = Duration::from_secs(10);

fn cell(etcd: &Etcd) -> std::sync::Arc<EtcdCell> {
    let mut o = EtcdOptions::from_url(&format!("etcd://{}/k", etcd.endpoint)).unwrap();
    o.default_lock_delay = Duration::from_millis(100);
    o.lease_ttl = Duration::from_secs(2);
    EtcdCell::open(o).unwrap()
}

/// An etcd and two daemons' cells on one prefix of it.
fn two_cells() -> (Etcd, std::sync::Arc<EtcdCell>, std::sync::Arc<EtcdCell>) {
    let etcd = Etcd::start();
    let (a, b) = (cell(&etcd), cell(&etcd));
    (etcd, a, b)
}

#[test]
fn the_watch_follows_other_daemons_locks() {
    let (_etcd, a, b) = two_cells();
    let r = Credentials::root();
    a.create(&r, "/servers", &NodeSpec::dir(0o755)).unwrap();
    let s = a.open_session("server");
    let spec = NodeSpec::file(0o644).ephemeral();
    let (h, _) = a
        .open_handle(
            s,
            &r,
            "/servers/ts-0",
            &OpenOptions::read_write().create(spec),
        )
        .unwrap();
    assert!(!b.known_held("/servers/ts-0"), "nobody holds it yet");
    let g = a.try_lock(&r, 1, h.into(), LockMode::Exclusive).unwrap();
    assert!(a.known_valid(&g.sequencer), "the holder knows at once");
    assert!(
        wait_until(WAIT, || b.known_held("/servers/ts-0")
            && b.known_valid(&g.sequencer)),
        "the other daemon's watch never saw the grant"
    );
    assert!(wait_until(WAIT, || b.known_list("/servers")
        == Some(vec!["ts-0".to_string()])));
    assert_eq!(b.known_list("/nowhere"), None);
    // An orderly release: the holder knows at once, the other soon.
    assert!(a.unlock(1, h.into()).unwrap());
    assert!(!a.known_valid(&g.sequencer));
    assert!(
        wait_until(WAIT, || !b.known_held("/servers/ts-0")
            && !b.known_valid(&g.sequencer)),
        "the other daemon's watch never saw the release"
    );
    // A holder that dies: its session ends, its file and lock go.
    let g = a.try_lock(&r, 1, h.into(), LockMode::Exclusive).unwrap();
    assert!(wait_until(WAIT, || b.known_held("/servers/ts-0")));
    a.release_owner_dead(1);
    a.close_session(s).unwrap();
    assert!(!a.known_valid(&g.sequencer));
    assert!(
        wait_until(WAIT, || !b.known_held("/servers/ts-0")
            && b.known_list("/servers") == Some(Vec::new())),
        "the dead holder's lock and file stayed known"
    );
}

#[test]
fn the_embedded_cell_knows_nothing_without_asking() {
    let dir = tempfile::tempdir().unwrap();
    let c = LocalCell::open(dir.path(), CellOptions::default()).unwrap();
    let r = Credentials::root();
    c.create(&r, "/m", &NodeSpec::file(0o644)).unwrap();
    let g = c.try_lock(&r, 1, "/m".into(), LockMode::Exclusive).unwrap();
    assert!(c.check_sequencer(&g.sequencer));
    assert!(!c.known_valid(&g.sequencer));
    assert!(!c.known_held("/m"));
    assert_eq!(c.known_list("/"), None);
}

/// The `lock_requests sent=N` status line: requests a cell sent to etcd.
fn requests(c: &EtcdCell) -> u64 {
    c.status()
        .iter()
        .find_map(|l| l.strip_prefix("lock_requests sent="))
        .and_then(|n| n.parse().ok())
        .expect("a lock_requests line")
}

#[test]
fn a_waiter_reads_its_lock_when_the_watch_sees_a_change_not_every_50_ms() {
    let (_etcd, a, b) = two_cells();
    let r = Credentials::root();
    a.create(&r, "/l", &NodeSpec::file(0o644)).unwrap();
    a.try_lock(&r, 1, "/l".into(), LockMode::Exclusive).unwrap();
    let before = requests(&b);
    let t = std::time::Instant::now();
    let waited = b.lock_wait(
        &r,
        2,
        "/l".into(),
        LockMode::Exclusive,
        Some(t + Duration::from_millis(1500)),
        &|| false,
    );
    assert!(matches!(waited, Err(chubby::Error::TimedOut)), "{waited:?}");
    // Queueing, one read, one read after a second, the dequeue, and the
    // lookups: about 6 (polling every 50 ms read it 30 times).
    let sent = requests(&b) - before;
    assert!(
        sent <= 12,
        "a waiter sent {sent} requests in {:?}",
        t.elapsed()
    );
    // A release wakes a waiter, which then takes the lock.
    let b2 = std::sync::Arc::clone(&b);
    let waiter = std::thread::spawn(move || {
        b2.lock_wait(
            &Credentials::root(),
            2,
            "/l".into(),
            LockMode::Exclusive,
            Some(std::time::Instant::now() + Duration::from_secs(30)),
            &|| false,
        )
    });
    assert!(a.unlock(1, "/l".into()).unwrap());
    let g = waiter.join().unwrap().unwrap();
    assert!(b.check_sequencer(&g.sequencer));
}
