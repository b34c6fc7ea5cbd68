use super::*;
use crate::{Error, Event, LockMode, NodeSpec, OpenOptions};

fn eph_open(cell: &LocalCell, s: crate::SessionId, path: &str) -> crate::HandleId {
    cell.open_handle(
        s,
        &root(),
        path,
        &OpenOptions::read_write().create(NodeSpec::file(0o644).ephemeral()),
    )
    .unwrap()
    .0
}

#[test]
fn ephemeral_file_vanishes_with_last_handle() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    cell.create(&root(), "/servers", &NodeSpec::dir(0o755))
        .unwrap();
    let events = cell.subscribe(&root(), "/servers".into()).unwrap();
    let s1 = cell.open_session("pid 1");
    let s2 = cell.open_session("pid 2");
    let h1 = eph_open(&cell, s1, "/servers/ts1");
    assert!(cell.stat(&root(), "/servers/ts1".into()).unwrap().ephemeral);
    let h2 = cell
        .open_handle(s2, &root(), "/servers/ts1", &OpenOptions::read())
        .unwrap()
        .0;
    cell.set_contents(&root(), h1.into(), b"host:9000").unwrap();
    assert_eq!(cell.read(&root(), h2.into()).unwrap().0, b"host:9000");
    // A read-only handle cannot write.
    assert!(matches!(
        cell.set_contents(&root(), h2.into(), b"x"),
        Err(Error::BadHandle(_))
    ));
    cell.close_handle(h1).unwrap();
    assert!(cell.stat(&root(), "/servers/ts1".into()).is_ok());
    cell.close_handle(h2).unwrap();
    assert!(matches!(
        cell.stat(&root(), "/servers/ts1".into()),
        Err(Error::NotFound(_))
    ));
    assert!(cell.close_handle(h2).is_err());
    let got: Vec<Event> = events.try_iter().collect();
    assert_eq!(
        got,
        vec![
            Event::ChildAdded("ts1".into()),
            Event::ChildRemoved("ts1".into())
        ]
    );
}

#[test]
fn closing_a_session_removes_its_ephemeral_files_and_locks() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let s = cell.open_session("tablet server 1");
    let h = eph_open(&cell, s, "/ts1");
    cell.create(&root(), "/master", &NodeSpec::file(0o644))
        .unwrap();
    let (mh, _) = cell
        .open_handle(s, &root(), "/master", &OpenOptions::read())
        .unwrap();
    cell.try_lock(&root(), 5, mh.into(), LockMode::Exclusive)
        .unwrap();
    cell.close_session(s).unwrap();
    assert!(cell.stat(&root(), "/ts1".into()).is_err());
    assert!(cell.read(&root(), h.into()).is_err());
    // The lock went with the session, as a dead holder: lock-delay applies.
    assert!(cell.holders("/master".into()).unwrap().is_empty());
    assert!(matches!(
        cell.try_lock(&root(), 6, "/master".into(), LockMode::Exclusive),
        Err(Error::WouldBlock)
    ));
    assert!(cell
        .open_handle(s, &root(), "/master", &OpenOptions::read())
        .is_err());
}

#[test]
fn closing_a_handle_releases_its_lock_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    cell.create(&root(), "/l", &NodeSpec::file(0o644)).unwrap();
    let s = cell.open_session("p");
    let (h, _) = cell
        .open_handle(s, &root(), "/l", &OpenOptions::read())
        .unwrap();
    cell.try_lock(&root(), 1, h.into(), LockMode::Exclusive)
        .unwrap();
    cell.close_handle(h).unwrap();
    cell.try_lock(&root(), 2, "/l".into(), LockMode::Exclusive)
        .unwrap();
}

#[test]
fn ephemeral_nodes_do_not_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cell = open(dir.path());
        let s = cell.open_session("p");
        cell.open_handle(
            s,
            &root(),
            "/edir",
            &OpenOptions::read().create(NodeSpec::dir(0o755).ephemeral()),
        )
        .unwrap();
        eph_open(&cell, s, "/edir/f");
        cell.create(&root(), "/keep", &NodeSpec::file(0o644))
            .unwrap();
        // Dropped without closing anything: a crash.
    }
    let cell = open(dir.path());
    let names: Vec<String> = cell
        .list(&root(), "/")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["keep"]);
}

#[test]
fn ephemeral_directory_goes_when_empty_and_unopened() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let s = cell.open_session("p");
    let (dh, _) = cell
        .open_handle(
            s,
            &root(),
            "/e",
            &OpenOptions::read().create(NodeSpec::dir(0o755).ephemeral()),
        )
        .unwrap();
    let fh = eph_open(&cell, s, "/e/f");
    cell.close_handle(dh).unwrap();
    // Still holds a child.
    assert!(cell.stat(&root(), "/e".into()).is_ok());
    cell.close_handle(fh).unwrap();
    assert!(cell.stat(&root(), "/e".into()).is_err());
    // Marking an unopened file ephemeral removes it at once.
    cell.create(&root(), "/p", &NodeSpec::file(0o644)).unwrap();
    cell.set_ephemeral(&root(), "/p".into(), true).unwrap();
    assert!(cell.stat(&root(), "/p".into()).is_err());
}

#[test]
fn open_handle_create_and_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let s = cell.open_session("p");
    let opts = OpenOptions::read_write().create(NodeSpec::file(0o400));
    // Alice may not create in the root-owned 0755 root.
    assert!(matches!(
        cell.open_handle(s, &alice(), "/x", &opts),
        Err(Error::PermissionDenied(_))
    ));
    cell.chmod(&root(), "/".into(), 0o777).unwrap();
    // The creator may write through its handle even though the mode says 0400.
    let (h, st) = cell.open_handle(s, &alice(), "/x", &opts).unwrap();
    assert_eq!((st.mode, st.uid), (0o400, 1000));
    cell.set_contents(&alice(), h.into(), b"v").unwrap();
    assert!(matches!(
        cell.open_handle(s, &alice(), "/x", &opts.clone().exclusive()),
        Err(Error::Exists(_))
    ));
    // Reopening without create is held to the mode.
    assert!(cell
        .open_handle(s, &alice(), "/x", &OpenOptions::read_write())
        .is_err());
    assert_eq!(cell.handle_path(h).unwrap(), "/x");
    cell.rename(&root(), "/x", "/y").unwrap();
    assert_eq!(cell.handle_path(h).unwrap(), "/y");
    assert!(matches!(
        cell.open_handle(s, &root(), "/", &OpenOptions::read_write()),
        Err(Error::IsDir(_))
    ));
}
