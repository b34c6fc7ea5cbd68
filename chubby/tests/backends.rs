//! The lock service's behaviour through the trait, run against both
//! backends: the local cell and the cell on a real etcd (started by the
//! test on loopback, stopped by pid).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use chubby::{
    CellOptions, Credentials, Error, EtcdCell, EtcdOptions, Event, LocalCell, LockMode,
    LockService, NodeKind, NodeSpec, OpenOptions, Sequencer,
};
use testkit::etcd::Etcd;
use LockMode::{Exclusive, Shared};

const DELAY: Duration = Duration::from_millis(400);

/// A backend under test, with what keeps it alive.
struct Backend {
    cell: Arc<dyn LockService>,
    _dir: Option<tempfile::TempDir>,
    _etcd: Option<Arc<Etcd>>,
}

fn local() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let opts = CellOptions {
        default_lock_delay: DELAY,
        ..CellOptions::default()
    };
    Backend {
        cell: LocalCell::open(dir.path(), opts).unwrap(),
        _dir: Some(dir),
        _etcd: None,
    }
}

fn etcd_opts(etcd: &Etcd, prefix: &str) -> EtcdOptions {
    let mut o = EtcdOptions::from_url(&format!("etcd://{}{prefix}", etcd.endpoint)).unwrap();
    o.default_lock_delay = DELAY;
    o.lease_ttl = Duration::from_secs(2);
    o
}

fn on_etcd() -> Backend {
    let etcd = Arc::new(Etcd::start());
    Backend {
        cell: EtcdCell::open(etcd_opts(&etcd, "/t")).unwrap(),
        _dir: None,
        _etcd: Some(etcd),
    }
}

fn both(test: impl Fn(&dyn LockService)) {
    test(&*local().cell);
    test(&*on_etcd().cell);
}

fn root() -> Credentials {
    Credentials::root()
}

fn alice() -> Credentials {
    Credentials {
        uid: 1000,
        gid: 1000,
        groups: vec![],
    }
}

#[test]
fn namespace_operations_and_errors() {
    both(|c| {
        let r = root();
        c.create(&r, "/d", &NodeSpec::dir(0o755)).unwrap();
        c.create(&r, "/d/f", &NodeSpec::file(0o644)).unwrap();
        assert!(matches!(
            c.create(&r, "/d/f", &NodeSpec::file(0o644)),
            Err(Error::Exists(_))
        ));
        assert!(matches!(
            c.create(&r, "/x/f", &NodeSpec::file(0o644)),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            c.create(&r, "/d/f/g", &NodeSpec::file(0o644)),
            Err(Error::NotDir(_))
        ));
        let st = c.set_contents(&r, "/d/f".into(), b"hello").unwrap();
        assert_eq!((st.size, st.content_generation), (5, 1));
        assert_eq!(c.read(&r, "/d/f".into()).unwrap().0, b"hello");
        assert!(matches!(c.read(&r, "/d".into()), Err(Error::IsDir(_))));
        let names: Vec<String> = c
            .list(&r, "/d")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, vec!["f"]);
        let id = c.stat(&r, "/d/f".into()).unwrap().id;
        c.rename(&r, "/d", "/e").unwrap();
        assert_eq!(
            c.stat(&r, "/e/f".into()).unwrap().id,
            id,
            "ids survive renames"
        );
        assert_eq!(c.read(&r, "/e/f".into()).unwrap().0, b"hello");
        assert!(matches!(c.stat(&r, "/d".into()), Err(Error::NotFound(_))));
        assert!(matches!(c.rmdir(&r, "/e"), Err(Error::NotEmpty(_))));
        c.unlink(&r, "/e/f").unwrap();
        c.rmdir(&r, "/e").unwrap();
        let st = c.stat(&r, "/".into()).unwrap();
        assert_eq!((st.kind, st.size), (NodeKind::Dir, 0));
    });
}

#[test]
fn permissions_as_posix() {
    both(|c| {
        let (r, a) = (root(), alice());
        c.create(&r, "/priv", &NodeSpec::dir(0o700)).unwrap();
        c.create(&r, "/priv/f", &NodeSpec::file(0o666)).unwrap();
        assert!(matches!(
            c.read(&a, "/priv/f".into()),
            Err(Error::PermissionDenied(_))
        ));
        c.create(&r, "/pub", &NodeSpec::dir(0o777)).unwrap();
        c.create(&a, "/pub/mine", &NodeSpec::file(0o600)).unwrap();
        let st = c.stat(&r, "/pub/mine".into()).unwrap();
        assert_eq!((st.uid, st.gid, st.mode), (1000, 1000, 0o600));
        assert!(matches!(
            c.chmod(&a, "/priv".into(), 0o777),
            Err(Error::NotPermitted(_))
        ));
        c.chmod(&a, "/pub/mine".into(), 0o640).unwrap();
        assert_eq!(c.stat(&r, "/pub/mine".into()).unwrap().mode, 0o640);
        assert!(matches!(
            c.chown(&a, "/pub/mine".into(), Some(0), None),
            Err(Error::NotPermitted(_))
        ));
    });
}

#[test]
fn locks_exclude_share_and_fence() {
    both(|c| {
        let r = root();
        c.create(&r, "/l", &NodeSpec::file(0o666)).unwrap();
        c.try_lock(&r, 1, "/l".into(), Shared).unwrap();
        c.try_lock(&r, 2, "/l".into(), Shared).unwrap();
        assert!(matches!(
            c.try_lock(&r, 3, "/l".into(), Exclusive),
            Err(Error::WouldBlock)
        ));
        assert!(c.unlock(2, "/l".into()).unwrap());
        assert!(!c.unlock(2, "/l".into()).unwrap());
        // The sole reader upgrades.
        let g = c.try_lock(&r, 1, "/l".into(), Exclusive).unwrap();
        let seq: Sequencer = g.sequencer.to_string().parse().unwrap();
        assert!(c.check_sequencer(&seq));
        assert_eq!(c.holders("/l".into()).unwrap().len(), 1);
        assert!(matches!(
            c.try_lock(&r, 2, "/l".into(), Shared),
            Err(Error::WouldBlock)
        ));
        assert!(c.unlock(1, "/l".into()).unwrap());
        assert!(
            !c.check_sequencer(&seq),
            "a released lock's sequencer is stale"
        );
        let g2 = c.try_lock(&r, 2, "/l".into(), Exclusive).unwrap();
        assert!(g2.generation > g.generation);
        assert!(!c.check_sequencer(&seq));
        assert!(c.check_sequencer(&g2.sequencer));
    });
}

#[test]
fn waiters_time_out_are_interrupted_and_get_the_lock_in_turn() {
    both(|c| {
        let r = root();
        c.create(&r, "/w", &NodeSpec::file(0o666)).unwrap();
        c.try_lock(&r, 1, "/w".into(), Exclusive).unwrap();
        let t = Instant::now();
        let soon = Some(t + Duration::from_millis(200));
        assert!(matches!(
            c.lock_wait(&r, 2, "/w".into(), Exclusive, soon, &|| false),
            Err(Error::TimedOut)
        ));
        assert!(t.elapsed() >= Duration::from_millis(200));
        assert!(matches!(
            c.lock_wait(&r, 2, "/w".into(), Exclusive, None, &|| true),
            Err(Error::Interrupted)
        ));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| c.lock_wait(&r, 2, "/w".into(), Exclusive, None, &|| false));
            // The waiter cannot finish while the lock is held; it gets the
            // lock once it is released.
            assert!(!waiter.is_finished());
            assert!(c.unlock(1, "/w".into()).unwrap());
            waiter.join().unwrap().unwrap();
        });
        assert_eq!(c.holders("/w".into()).unwrap()[0].owner, 2);
    });
}

#[test]
fn dead_holder_leaves_lock_delay() {
    both(|c| {
        let r = root();
        c.create(&r, "/m", &NodeSpec::file(0o666)).unwrap();
        c.try_lock(&r, 1, "/m".into(), Exclusive).unwrap();
        assert_eq!(c.release_owner_dead(1), 1);
        let t = Instant::now();
        assert!(matches!(
            c.try_lock(&r, 2, "/m".into(), Exclusive),
            Err(Error::WouldBlock)
        ));
        c.lock_wait(&r, 2, "/m".into(), Exclusive, None, &|| false)
            .unwrap();
        assert!(
            t.elapsed() >= DELAY - Duration::from_millis(20),
            "granted after {:?}",
            t.elapsed()
        );
        // An orderly unlock leaves no delay.
        c.unlock(2, "/m".into()).unwrap();
        c.try_lock(&r, 3, "/m".into(), Exclusive).unwrap();
    });
}

#[test]
fn ephemeral_nodes_vanish_with_their_last_handle() {
    both(|c| {
        let r = root();
        let s = c.open_session("test");
        let spec = NodeSpec::file(0o644).ephemeral();
        let (h, _) = c
            .open_handle(s, &r, "/eph", &OpenOptions::read_write().create(spec))
            .unwrap();
        c.try_lock(&r, 9, h.into(), Exclusive).unwrap();
        c.set_contents(&r, h.into(), b"x").unwrap();
        assert!(c.stat(&r, "/eph".into()).unwrap().ephemeral);
        assert_eq!(c.handle_path(h).unwrap(), "/eph");
        c.close_session(s).unwrap();
        assert!(matches!(c.stat(&r, "/eph".into()), Err(Error::NotFound(_))));
    });
}

#[test]
fn events_follow_changes() {
    both(|c| {
        let r = root();
        c.create(&r, "/ev", &NodeSpec::dir(0o755)).unwrap();
        let dir = c.subscribe(&r, "/ev".into()).unwrap();
        c.create(&r, "/ev/f", &NodeSpec::file(0o644)).unwrap();
        let file = c.subscribe(&r, "/ev/f".into()).unwrap();
        c.set_contents(&r, "/ev/f".into(), b"1").unwrap();
        c.try_lock(&r, 1, "/ev/f".into(), Exclusive).unwrap();
        c.unlock(1, "/ev/f".into()).unwrap();
        c.unlink(&r, "/ev/f").unwrap();
        let want = [
            Event::ContentsChanged,
            Event::LockAcquired(Exclusive),
            Event::LockReleased,
            Event::Deleted,
        ];
        for w in want {
            assert_eq!(file.recv_timeout(Duration::from_secs(5)).unwrap(), w);
        }
        for w in [
            Event::ChildAdded("f".into()),
            Event::ChildRemoved("f".into()),
        ] {
            assert_eq!(dir.recv_timeout(Duration::from_secs(5)).unwrap(), w);
        }
    });
}

/// Two prefixes on one etcd are two cells.
#[test]
fn prefixes_are_separate_cells() {
    let etcd = Etcd::start();
    let a = EtcdCell::open(etcd_opts(&etcd, "/a")).unwrap();
    let b = EtcdCell::open(etcd_opts(&etcd, "/b")).unwrap();
    let r = root();
    a.create(&r, "/master", &NodeSpec::file(0o644)).unwrap();
    assert!(matches!(
        b.stat(&r, "/master".into()),
        Err(Error::NotFound(_))
    ));
    b.create(&r, "/master", &NodeSpec::file(0o644)).unwrap();
    a.try_lock(&r, 1, "/master".into(), Exclusive).unwrap();
    b.try_lock(&r, 1, "/master".into(), Exclusive).unwrap();
    assert!(etcd.keys("/a/").iter().all(|k| k.starts_with("/a/")));
}

/// A daemon that dies holding a lock: another daemon gets it only after the
/// lease and the lock-delay, and the dead session's keys are gone.
#[test]
fn dead_daemon_lock_waits_for_lease_and_delay() {
    let etcd = Etcd::start();
    let a = EtcdCell::open(etcd_opts(&etcd, "/c")).unwrap();
    let r = root();
    a.create(&r, "/lock", &NodeSpec::file(0o666)).unwrap();
    let s = a.open_session("doomed");
    let spec = NodeSpec::file(0o644).ephemeral();
    let (h, _) = a
        .open_handle(s, &r, "/srv", &OpenOptions::read_write().create(spec))
        .unwrap();
    a.try_lock(&r, 1, "/lock".into(), Exclusive).unwrap();
    let b = EtcdCell::open(etcd_opts(&etcd, "/c")).unwrap();
    assert!(matches!(
        b.try_lock(&r, 2, "/lock".into(), Exclusive),
        Err(Error::WouldBlock)
    ));
    // Daemon a stops keeping its lease alive, as a killed process would
    // (forgetting the cell without its orderly revoke).
    let _ = h;
    a.abandon();
    let t = Instant::now();
    b.lock_wait(
        &r,
        2,
        "/lock".into(),
        Exclusive,
        Some(t + Duration::from_secs(30)),
        &|| false,
    )
    .unwrap();
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) + DELAY,
        "granted after {waited:?}"
    );
    assert!(matches!(b.stat(&r, "/srv".into()), Err(Error::NotFound(_))));
    // Of the dead session, neither its waiter key, its marker nor its
    // ephemeral node is left: only b's holder key and marker.
    let gen = b.sequencer(2, "/lock".into()).unwrap().generation;
    let locks: Vec<String> = etcd
        .keys("/c/")
        .into_iter()
        .filter(|k| k.starts_with("/c/l/") || k.starts_with("/c/d/"))
        .collect();
    assert_eq!(locks.len(), 2, "{locks:?}");
    // b's waiter key and its marker, which share its name.
    let names: Vec<&str> = locks.iter().filter_map(|k| k.rsplit('/').next()).collect();
    assert_eq!(names[0], names[1], "{locks:?}");
    assert!(gen > 0);
}

#[test]
fn rename_follows_posix() {
    both(|c| {
        let r = root();
        c.create(&r, "/d", &NodeSpec::dir(0o755)).unwrap();
        c.create(&r, "/d/sub", &NodeSpec::dir(0o755)).unwrap();
        c.create(&r, "/f", &NodeSpec::file(0o644)).unwrap();
        c.create(&r, "/g", &NodeSpec::file(0o644)).unwrap();
        c.set_contents(&r, "/g".into(), b"g").unwrap();
        assert!(matches!(
            c.rename(&r, "/d", "/d/sub/x"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(c.rename(&r, "/f", "/d"), Err(Error::IsDir(_))));
        assert!(matches!(c.rename(&r, "/d", "/f"), Err(Error::NotDir(_))));
        // A file replaces a file.
        let id = c.stat(&r, "/g".into()).unwrap().id;
        c.rename(&r, "/g", "/f").unwrap();
        assert_eq!(c.stat(&r, "/f".into()).unwrap().id, id);
        assert_eq!(c.read(&r, "/f".into()).unwrap().0, b"g");
        assert!(matches!(c.stat(&r, "/g".into()), Err(Error::NotFound(_))));
        // A handle follows its node.
        let s = c.open_session("t");
        let (h, _) = c
            .open_handle(s, &r, "/d/sub", &OpenOptions::read())
            .unwrap();
        c.rename(&r, "/d", "/e").unwrap();
        assert_eq!(c.handle_path(h).unwrap(), "/e/sub");
        c.close_session(s).unwrap();
    });
}

#[test]
fn sticky_directories_protect_others_entries() {
    both(|c| {
        let (r, a) = (root(), alice());
        let bob = Credentials {
            uid: 1001,
            gid: 1001,
            groups: vec![],
        };
        c.create(&r, "/tmp", &NodeSpec::dir(0o1777)).unwrap();
        c.create(&a, "/tmp/a", &NodeSpec::file(0o666)).unwrap();
        assert!(matches!(
            c.unlink(&bob, "/tmp/a"),
            Err(Error::PermissionDenied(_))
        ));
        c.unlink(&a, "/tmp/a").unwrap();
    });
}

#[test]
fn waiting_is_in_arrival_order_and_the_sole_reader_upgrades_at_once() {
    both(|c| {
        let r = root();
        c.create(&r, "/q", &NodeSpec::file(0o666)).unwrap();
        c.try_lock(&r, 1, "/q".into(), Shared).unwrap();
        std::thread::scope(|s| {
            let writer = s.spawn(|| c.lock_wait(&r, 2, "/q".into(), Exclusive, None, &|| false));
            assert!(wait_holders_or_waiter(c, || writer.is_finished()));
            // A reader arriving after the waiting writer waits behind it.
            assert!(matches!(
                c.try_lock(&r, 3, "/q".into(), Shared),
                Err(Error::WouldBlock)
            ));
            // The sole reader upgrades at once: the writer waits for it anyway.
            let up = c.try_lock(&r, 1, "/q".into(), Exclusive);
            let upgraded = up.is_ok();
            // Unblock the writer whatever happened, then look.
            let _ = c.unlock(1, "/q".into());
            writer.join().unwrap().unwrap();
            assert!(upgraded, "{up:?}");
        });
        assert_eq!(c.holders("/q".into()).unwrap()[0].owner, 2);
    });
}

/// Waits (with a deadline) until a waiter thread has had time to queue: its
/// try of a conflicting lock then fails; false if the thread finished early.
fn wait_holders_or_waiter(c: &dyn LockService, finished: impl Fn() -> bool) -> bool {
    let mut early = false;
    // The waiter is queued once even a fresh shared request is refused
    // while the only holder is a reader.
    let queued = testkit::wait_until(Duration::from_secs(10), || {
        early = finished();
        if early {
            return true;
        }
        let refused = matches!(
            c.try_lock(&root(), 99, "/q".into(), Shared),
            Err(Error::WouldBlock)
        );
        if !refused {
            let _ = c.unlock(99, "/q".into());
        }
        refused
    });
    queued && !early
}

#[test]
fn closing_a_handle_releases_its_locks_without_delay() {
    both(|c| {
        let r = root();
        c.create(
            &r,
            "/h",
            &NodeSpec::file(0o666).lock_delay(Duration::from_secs(30)),
        )
        .unwrap();
        let s = c.open_session("t");
        let (h, _) = c
            .open_handle(s, &r, "/h", &OpenOptions::read_write())
            .unwrap();
        c.try_lock(&r, 1, h.into(), Exclusive).unwrap();
        c.close_handle(h).unwrap();
        c.try_lock(&r, 2, "/h".into(), Exclusive).unwrap();
        c.close_session(s).unwrap();
    });
}
