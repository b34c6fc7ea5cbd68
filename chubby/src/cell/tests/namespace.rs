use super::*;
use crate::{Error, NodeSpec, MAX_CONTENTS};

#[test]
fn create_read_replace_list_stat() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let r = root();
    cell.create(&r, "/bigtable", &NodeSpec::dir(0o755)).unwrap();
    let st = cell
        .create(&r, "/bigtable/master", &NodeSpec::file(0o644))
        .unwrap();
    assert_eq!(
        (st.kind, st.size, st.content_generation),
        (NodeKind::File, 0, 0)
    );
    assert_eq!(st.lock_delay, Duration::from_millis(300));
    let st = cell
        .set_contents(&r, "/bigtable/master".into(), b"host:1")
        .unwrap();
    assert_eq!((st.size, st.content_generation), (6, 1));
    let st = cell
        .set_contents(&r, "/bigtable/master".into(), b"host:22")
        .unwrap();
    assert_eq!(st.content_generation, 2);
    let (data, st) = cell.read(&r, "/bigtable/master".into()).unwrap();
    assert_eq!(data, b"host:22");
    assert_eq!(st.size, 7);
    cell.create(&r, "/bigtable/a", &NodeSpec::dir(0o700))
        .unwrap();
    let names: Vec<String> = cell
        .list(&r, "/bigtable")
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, vec!["a", "master"]);
    let dst = cell.stat(&r, "/bigtable".into()).unwrap();
    assert_eq!((dst.size, dst.nlink), (2, 3));
    assert_eq!(cell.stat(&r, "/bigtable/a".into()).unwrap().mode, 0o700);
}

#[test]
fn namespace_errors_map_to_errno() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let r = root();
    cell.create(&r, "/d", &NodeSpec::dir(0o755)).unwrap();
    cell.create(&r, "/d/f", &NodeSpec::file(0o644)).unwrap();
    let errno = |e: Error| e.errno();
    assert_eq!(
        errno(cell.create(&r, "/d/f", &NodeSpec::file(0o644)).unwrap_err()),
        libc::EEXIST
    );
    assert_eq!(
        errno(cell.create(&r, "/", &NodeSpec::dir(0o755)).unwrap_err()),
        libc::EEXIST
    );
    assert_eq!(
        errno(cell.create(&r, "/x/f", &NodeSpec::file(0o644)).unwrap_err()),
        libc::ENOENT
    );
    assert_eq!(
        errno(
            cell.create(&r, "/d/f/g", &NodeSpec::file(0o644))
                .unwrap_err()
        ),
        libc::ENOTDIR
    );
    assert_eq!(errno(cell.read(&r, "/d".into()).unwrap_err()), libc::EISDIR);
    assert_eq!(
        errno(cell.read(&r, "/nope".into()).unwrap_err()),
        libc::ENOENT
    );
    assert_eq!(errno(cell.list(&r, "/d/f").unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(cell.unlink(&r, "/d").unwrap_err()), libc::EISDIR);
    assert_eq!(errno(cell.rmdir(&r, "/d").unwrap_err()), libc::ENOTEMPTY);
    assert_eq!(errno(cell.rmdir(&r, "/d/f").unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(cell.rmdir(&r, "/").unwrap_err()), libc::EINVAL);
    assert_eq!(
        errno(
            cell.create(&r, "relative", &NodeSpec::file(0o644))
                .unwrap_err()
        ),
        libc::EINVAL
    );
    let long = format!("/{}", "n".repeat(300));
    assert_eq!(
        errno(cell.create(&r, &long, &NodeSpec::file(0o644)).unwrap_err()),
        libc::ENAMETOOLONG
    );
    let big = vec![0u8; MAX_CONTENTS + 1];
    assert_eq!(
        errno(cell.set_contents(&r, "/d/f".into(), &big).unwrap_err()),
        libc::EFBIG
    );
    // Exactly the limit is fine.
    cell.set_contents(&r, "/d/f".into(), &big[..MAX_CONTENTS])
        .unwrap();
    assert!(matches!(
        cell.create(&r, "/e", &NodeSpec::file(0o644).ephemeral()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        cell.create(
            &r,
            "/slow",
            &NodeSpec::file(0o644).lock_delay(Duration::from_secs(61))
        ),
        Err(Error::InvalidArgument(_))
    ));
    cell.unlink(&r, "/d/f").unwrap();
    cell.rmdir(&r, "/d").unwrap();
    assert!(cell.list(&r, "/").unwrap().is_empty());
}

#[test]
fn rename_moves_replaces_and_refuses_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let cell = open(dir.path());
    let r = root();
    cell.create(&r, "/a", &NodeSpec::dir(0o755)).unwrap();
    cell.create(&r, "/a/sub", &NodeSpec::dir(0o755)).unwrap();
    cell.create(&r, "/a/f", &NodeSpec::file(0o644)).unwrap();
    cell.set_contents(&r, "/a/f".into(), b"one").unwrap();
    cell.create(&r, "/g", &NodeSpec::file(0o644)).unwrap();
    let id = cell.stat(&r, "/a/f".into()).unwrap().id;
    // File over file replaces it; the moved node keeps its identity.
    cell.rename(&r, "/a/f", "/g").unwrap();
    let st = cell.stat(&r, "/g".into()).unwrap();
    assert_eq!(st.id, id);
    assert_eq!(cell.read(&r, "/g".into()).unwrap().0, b"one");
    assert!(matches!(
        cell.stat(&r, "/a/f".into()),
        Err(Error::NotFound(_))
    ));
    // Directory moves carry their subtree.
    cell.rename(&r, "/a", "/b").unwrap();
    assert!(cell.stat(&r, "/b/sub".into()).is_ok());
    assert!(matches!(
        cell.rename(&r, "/b", "/b/sub/x"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(cell.rename(&r, "/g", "/b"), Err(Error::IsDir(_))));
    assert!(matches!(
        cell.rename(&r, "/b/sub", "/g"),
        Err(Error::NotDir(_))
    ));
    cell.create(&r, "/c", &NodeSpec::dir(0o755)).unwrap();
    cell.create(&r, "/c/x", &NodeSpec::file(0o644)).unwrap();
    assert!(matches!(
        cell.rename(&r, "/b/sub", "/c"),
        Err(Error::NotEmpty(_))
    ));
    cell.unlink(&r, "/c/x").unwrap();
    cell.rename(&r, "/b/sub", "/c").unwrap();
    assert!(cell.list(&r, "/b").unwrap().is_empty());
    // Renaming onto itself is a no-op.
    cell.rename(&r, "/g", "/g").unwrap();
    assert_eq!(cell.stat(&r, "/g".into()).unwrap().id, id);
}
