use super::*;
use crate::{Error, LockMode, NodeSpec, OpenOptions};

fn denied<T>(r: crate::Result<T>) -> bool {
    matches!(r, Err(Error::PermissionDenied(_)))
}

fn setup(cell: &LocalCell) {
    let r = root();
    cell.create(&r, "/pub", &NodeSpec::dir(0o777)).unwrap();
    cell.create(&r, "/priv", &NodeSpec::dir(0o700)).unwrap();
    cell.create(&r, "/priv/f", &NodeSpec::file(0o644)).unwrap();
    cell.create(&r, "/ro", &NodeSpec::file(0o644)).unwrap();
    cell.create(&r, "/sticky", &NodeSpec::dir(0o1777)).unwrap();
}

#[test]
fn non_root_is_held_to_mode_bits() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    setup(&cell);
    let (a, b) = (alice(), bob());
    // No write permission on the root directory.
    assert!(denied(cell.create(&a, "/x", &NodeSpec::file(0o644))));
    // Readable but not writable.
    assert_eq!(cell.read(&a, "/ro".into()).unwrap().0, b"");
    assert!(denied(cell.set_contents(&a, "/ro".into(), b"x")));
    assert!(denied(cell.unlink(&a, "/ro")));
    // No search permission below /priv, no listing either.
    assert!(denied(cell.stat(&a, "/priv/f".into())));
    assert!(denied(cell.list(&a, "/priv")));
    // Owner-only file in a shared directory.
    cell.create(&a, "/pub/mine", &NodeSpec::file(0o600))
        .unwrap();
    assert_eq!(cell.stat(&a, "/pub/mine".into()).unwrap().uid, 1000);
    cell.set_contents(&a, "/pub/mine".into(), b"secret")
        .unwrap();
    assert!(denied(cell.read(&b, "/pub/mine".into())));
    assert!(denied(cell.try_lock(
        &b,
        9,
        "/pub/mine".into(),
        LockMode::Shared
    )));
    assert!(denied(cell.subscribe(&b, "/pub/mine".into())));
    let s = cell.open_session("bob");
    assert!(denied(cell.open_handle(
        s,
        &b,
        "/pub/mine",
        &OpenOptions::read()
    )));
    assert!(denied(cell.set_lock_delay(
        &b,
        "/pub/mine".into(),
        Duration::ZERO
    )));
    // chmod and chown need ownership.
    let e = cell.chmod(&b, "/pub/mine".into(), 0o666).unwrap_err();
    assert_eq!(e.errno(), libc::EPERM);
    assert!(cell
        .chown(&a, "/pub/mine".into(), Some(1001), None)
        .is_err());
    assert!(cell.chown(&a, "/pub/mine".into(), None, Some(5)).is_err());
    cell.chmod(&a, "/pub/mine".into(), 0o644).unwrap();
    assert_eq!(cell.read(&b, "/pub/mine".into()).unwrap().0, b"secret");
    // Root bypasses everything.
    cell.chmod(&root(), "/pub/mine".into(), 0).unwrap();
    assert_eq!(cell.read(&root(), "/pub/mine".into()).unwrap().0, b"secret");
    cell.chown(&root(), "/pub/mine".into(), Some(1001), Some(1001))
        .unwrap();
    assert_eq!(cell.stat(&a, "/pub/mine".into()).unwrap().uid, 1001);
}

#[test]
fn group_members_and_sticky_directories() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    setup(&cell);
    let a = alice();
    let staff_member = Credentials {
        uid: 1002,
        gid: 1002,
        groups: vec![1000],
    };
    cell.create(&a, "/pub/team", &NodeSpec::file(0o660))
        .unwrap();
    cell.set_contents(&staff_member, "/pub/team".into(), b"ok")
        .unwrap();
    assert!(cell.read(&bob(), "/pub/team".into()).is_err());
    // In a sticky directory only the entry's owner may remove it.
    cell.create(&a, "/sticky/a", &NodeSpec::file(0o666))
        .unwrap();
    assert!(matches!(
        cell.unlink(&bob(), "/sticky/a"),
        Err(Error::PermissionDenied(_))
    ));
    assert!(matches!(
        cell.rename(&bob(), "/sticky/a", "/sticky/b"),
        Err(Error::PermissionDenied(_))
    ));
    cell.unlink(&a, "/sticky/a").unwrap();
}

#[test]
fn each_user_is_held_to_a_quota_of_nodes_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let cell = LocalCell::open(
        dir.path(),
        CellOptions {
            quota_nodes: 2,
            quota_bytes: 10,
            ..opts()
        },
    )
    .unwrap();
    setup(&cell);
    let (a, b) = (alice(), bob());
    let quota = |r: crate::Result<crate::Stat>| matches!(r, Err(Error::QuotaExceeded(_)));
    cell.create(&a, "/pub/1", &NodeSpec::file(0o644)).unwrap();
    cell.create(&a, "/pub/2", &NodeSpec::dir(0o755)).unwrap();
    let e = cell
        .create(&a, "/pub/3", &NodeSpec::file(0o644))
        .unwrap_err();
    assert!(matches!(e, Error::QuotaExceeded(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EDQUOT);
    // Others and root are not held by alice's count.
    cell.create(&b, "/pub/b", &NodeSpec::file(0o666)).unwrap();
    cell.create(&root(), "/pub/r", &NodeSpec::file(0o666))
        .unwrap();
    // Bytes: counted against the file's owner, whoever writes.
    cell.set_contents(&a, "/pub/1".into(), b"0123456789")
        .unwrap();
    assert!(quota(cell.set_contents(
        &a,
        "/pub/1".into(),
        b"0123456789a"
    )));
    cell.set_contents(&a, "/pub/1".into(), b"short").unwrap();
    assert!(!quota(cell.set_contents(&a, "/pub/b".into(), b"x")));
    // Removing a node gives its share back, and so does a restart's recount.
    cell.rmdir(&a, "/pub/2").unwrap();
    cell.create(&a, "/pub/3", &NodeSpec::file(0o644)).unwrap();
    drop(cell);
    let cell = LocalCell::open(
        dir.path(),
        CellOptions {
            quota_nodes: 2,
            quota_bytes: 10,
            ..opts()
        },
    )
    .unwrap();
    assert!(quota(cell.create(&a, "/pub/4", &NodeSpec::file(0o644))));
}
