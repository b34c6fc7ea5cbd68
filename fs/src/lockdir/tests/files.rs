//! The directory, contents, names and permissions.

use super::*;

#[test]
fn the_directory_is_in_the_root_and_lists_the_cell() {
    let t = T::new();
    let ino = t.ino(".chubby").unwrap();
    assert_eq!(t.fs.ctx().lock_node(ino), Some(LockNode::root()));
    let (a, _) = t.fs.getattr(ino, None).unwrap();
    assert_eq!(a.kind, FileType::Directory);
    assert_eq!(a.perm, 0o1777);
    t.put(".chubby/a", b"x").unwrap();
    t.fs.mkdir(&t.me, ino, b"d", 0o750, 0o022).unwrap();
    let fh = t.fs.opendir(&t.me, ino).unwrap();
    let mut names = Vec::new();
    t.fs.readdir(fh, 0, true, &mut |e| {
        names.push((
            String::from_utf8(e.name.to_vec()).unwrap(),
            e.kind,
            e.attr.unwrap().perm,
        ));
        false
    })
    .unwrap();
    t.fs.releasedir(fh);
    assert_eq!(
        names,
        vec![
            (".".into(), FileType::Directory, 0o1777),
            ("..".into(), FileType::Directory, 0o755),
            ("a".into(), FileType::RegularFile, 0o644),
            ("d".into(), FileType::Directory, 0o750),
        ]
    );
    // The root listing shows .chubby; the virtual files are there by name only.
    assert!(t.ino(".chubby/.events").is_ok());
    assert!(t.ino(".chubby/.status").is_ok());
    assert_eq!(t.ino(".chubby/d/.status"), Err(Errno::ENOENT));
    let status = t.get(".chubby/.status").unwrap();
    assert!(String::from_utf8(status).unwrap().contains("nodes "));
    // Without a lock service there is no .chubby.
    let plain = Fs::new(Arc::new(MockStore::default()), FsOptions::default());
    assert_eq!(
        plain.lookup(ROOT_INO, b".chubby").err(),
        Some(Errno::ENOENT)
    );
}

#[test]
fn contents_are_replaced_whole_on_close() {
    let t = T::new();
    t.put(".chubby/f", b"first").unwrap();
    let reader = t.open(".chubby/f", RD).unwrap();
    assert_eq!(t.read(reader, 0, 2).unwrap(), b"fi");
    let w = t.open(".chubby/f", WR | libc::O_TRUNC).unwrap();
    t.fs.write(w, 0, b"second", None).unwrap();
    // Not visible before the writer closes.
    assert_eq!(t.get(".chubby/f").unwrap(), b"first");
    let (a, _) = t.fs.getattr(t.ino(".chubby/f").unwrap(), None).unwrap();
    assert_eq!(a.size, 5);
    assert_eq!(t.fs.lock_dir().handle_attr(t.fs.ctx(), w).unwrap().size, 6);
    t.close(w).unwrap();
    // A reader in the middle of the file keeps its snapshot; a read from the
    // start sees the new contents.
    assert_eq!(t.read(reader, 2, 10).unwrap(), b"rst");
    assert_eq!(t.read(reader, 0, 10).unwrap(), b"second");
    t.close(reader).unwrap();
    // Appending and partial writes merge into the current contents.
    let a = t.open(".chubby/f", WR | libc::O_APPEND).unwrap();
    t.fs.write(a, 0, b"!", None).unwrap();
    t.close(a).unwrap();
    let p = t.open(".chubby/f", WR).unwrap();
    t.fs.write(p, 0, b"S", None).unwrap();
    t.close(p).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"Second!");
    // Truncation through setattr, by path and through a handle.
    let ino = t.ino(".chubby/f").unwrap();
    let set = SetAttr {
        size: Some(3),
        ..Default::default()
    };
    t.fs.setattr(&t.me, ino, None, set).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"Sec");
    // Opening with O_TRUNC and closing without writing empties the file.
    let e = t.open(".chubby/f", TRUNC).unwrap();
    t.close(e).unwrap();
    assert_eq!(t.get(".chubby/f").unwrap(), b"");
}

#[test]
fn too_large_contents_fail_with_efbig_and_change_nothing() {
    let t = T::new();
    t.put(".chubby/big", b"small").unwrap();
    let fh = t.open(".chubby/big", TRUNC).unwrap();
    let chunk = vec![b'x'; 128 * 1024];
    t.fs.write(fh, 0, &chunk, None).unwrap();
    t.fs.write(fh, chunk.len() as u64, &chunk, None).unwrap();
    assert_eq!(
        t.fs.write(fh, 2 * chunk.len() as u64, b"y", None),
        Err(Errno::EFBIG)
    );
    assert_eq!(t.fs.write(fh, 0, b"z", None), Err(Errno::EFBIG), "poisoned");
    assert_eq!(t.close(fh), Err(Errno::EFBIG));
    assert_eq!(t.get(".chubby/big").unwrap(), b"small");
    let set = SetAttr {
        size: Some(300 * 1024),
        ..Default::default()
    };
    let ino = t.ino(".chubby/big").unwrap();
    assert_eq!(
        t.fs.setattr(&t.me, ino, None, set).err(),
        Some(Errno::EFBIG)
    );
}

#[test]
fn namespace_operations_and_reserved_names() {
    let t = T::new();
    let root = t.ino(".chubby").unwrap();
    let d = t.fs.mkdir(&t.me, root, b"d", 0o755, 0).unwrap();
    let d = d.attr.ino.0;
    t.fs.mkdir(&t.me, d, b"sub", 0o755, 0).unwrap();
    t.put(".chubby/d/sub/f", b"deep").unwrap();
    let f_ino = t.ino(".chubby/d/sub/f").unwrap();
    assert_eq!(
        t.fs.mkdir(&t.me, d, b".events", 0o755, 0).err(),
        Some(Errno::EEXIST)
    );
    assert_eq!(t.fs.unlink(&t.me, d, b".events"), Err(Errno::EPERM));
    assert_eq!(
        t.fs.mkdir(&t.me, d, b"\xff", 0o755, 0).err(),
        Some(Errno::EINVAL)
    );
    assert_eq!(t.fs.rmdir(&t.me, root, b"d"), Err(Errno::ENOTEMPTY));
    // Renaming a directory moves the inodes the kernel holds below it.
    t.fs.rename(&t.me, root, b"d", root, b"e", 0).unwrap();
    assert_eq!(
        t.fs.ctx().lock_node(f_ino),
        Some(LockNode::Entry("/e/sub/f".into()))
    );
    let fh = t.fs.open(&t.me, f_ino, RD).unwrap().fh;
    assert_eq!(t.read(fh, 0, 100).unwrap(), b"deep");
    t.close(fh).unwrap();
    t.put(".chubby/x", b"1").unwrap();
    assert_eq!(
        t.fs.rename(&t.me, root, b"x", d, b"sub", libc::RENAME_NOREPLACE),
        Err(Errno::EEXIST)
    );
    // Across the boundary of .chubby: EXDEV.
    assert_eq!(
        t.fs.rename(&t.me, root, b"x", ROOT_INO, b"x", 0),
        Err(Errno::EXDEV)
    );
    t.fs.unlink(&t.me, d, b"sub").unwrap_err();
    let sub = t.ino(".chubby/e/sub").unwrap();
    t.fs.unlink(&t.me, sub, b"f").unwrap();
    t.fs.rmdir(&t.me, d, b"sub").unwrap();
    assert_eq!(t.ino(".chubby/e/sub"), Err(Errno::ENOENT));
}

#[test]
fn permissions_are_the_cells() {
    let t = T::new();
    // The engine's nodes: root's, read-only for others.
    t.cell
        .create(&Credentials::root(), "/bigtable", &NodeSpec::dir(0o755))
        .unwrap();
    t.cell
        .create(
            &Credentials::root(),
            "/bigtable/master",
            &NodeSpec::file(0o644),
        )
        .unwrap();
    let alice = Caller::new(1000, 1000, me());
    let ino = t.ino(".chubby/bigtable/master").unwrap();
    assert!(t.fs.open(&alice, ino, RD).is_ok());
    assert_eq!(t.fs.open(&alice, ino, WR).err(), Some(Errno::EACCES));
    // In the sticky root alice makes her own files, chmods and keeps them.
    let root = t.ino(".chubby").unwrap();
    let (e, o) =
        t.fs.create_mode(&alice, root, b"mine", 0o666, 0o022, WR | libc::O_CREAT)
            .unwrap();
    assert_eq!((e.attr.uid, e.attr.perm), (1000, 0o644));
    t.fs.release_locks(0, o.fh, None).unwrap().unwrap();
    let mine = e.attr.ino.0;
    let chmod = SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    let (a, _) = t.fs.setattr(&alice, mine, None, chmod).unwrap();
    assert_eq!(a.perm, 0o600);
    let bob = Caller::new(1001, 1001, me());
    assert_eq!(t.fs.open(&bob, mine, RD).err(), Some(Errno::EACCES));
    assert_eq!(t.fs.unlink(&bob, root, b"mine"), Err(Errno::EACCES));
    assert_eq!(
        t.fs.setattr(&bob, mine, None, chmod).err(),
        Some(Errno::EPERM)
    );
    // chown to bob: root only; alice's no-op chown to herself is fine.
    let to_bob = SetAttr {
        uid: Some(1001),
        ..Default::default()
    };
    assert_eq!(
        t.fs.setattr(&alice, mine, None, to_bob).err(),
        Some(Errno::EPERM)
    );
    let to_alice = SetAttr {
        uid: Some(1000),
        ..Default::default()
    };
    t.fs.setattr(&alice, mine, None, to_alice).unwrap();
    let (a, _) = t.fs.setattr(&t.me, mine, None, to_bob).unwrap();
    assert_eq!(a.uid, 1001);
    assert!(t.fs.open(&bob, mine, RD).is_ok());
}
