//! Tables, cells, versions, batches, scans and time travel.

use super::*;

#[test]
fn tables_and_schema() {
    let t = T::new();
    assert_eq!(t.ls("/").unwrap(), vec![".bigtable", "t"]);
    let schema = String::from_utf8(t.get("/t/.schema").unwrap()).unwrap();
    assert!(
        schema.contains("f ") && schema.contains("g max_versions=5"),
        "{schema}"
    );
    // Appending adds a family; a bad line changes nothing.
    t.put("/t/.schema", b"h\n", WR | libc::O_APPEND).unwrap();
    assert_eq!(t.store.schema("t").unwrap().families.len(), 3);
    assert_eq!(
        t.put("/t/.schema", b"f\nbad key=1\n", TRUNC),
        Err(Errno::EINVAL)
    );
    assert_eq!(t.store.schema("t").unwrap().families.len(), 3);
    assert_eq!(t.mkdir("/t"), Err(Errno::EEXIST));
    assert_eq!(t.mkdir("/.hidden"), Err(Errno::EINVAL));
    assert_eq!(t.ino("/nope"), Err(Errno::ENOENT));
    let _ = t.store.list_tables();
}

#[test]
fn cells_are_whole_values_committed_on_close() {
    let t = T::new();
    t.mkdir("/t/row").unwrap();
    t.mkdir("/t/row/f").unwrap();
    assert_eq!(t.mkdir("/t/row/nofam"), Err(Errno::ENOENT));
    t.put("/t/row/f/q", b"hello", TRUNC).unwrap();
    assert_eq!(t.get("/t/row/f/q").unwrap(), b"hello");
    // The shell's early close of a duplicate did not commit an empty version.
    t.put("/t/row/f/q", b"world!", TRUNC).unwrap();
    assert_eq!(t.versions("/t/row/f/.versions/q").len(), 2);
    assert_eq!(t.get("/t/row/f/q").unwrap(), b"world!");
    let ino = t.ino("/t/row/f/q").unwrap();
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 6);
    assert_eq!(t.ls("/t").unwrap(), vec![".schema", ".mutate", "row"]);
    assert_eq!(t.ls("/t/row").unwrap(), vec!["f"]);
    assert_eq!(t.ls("/t/row/f").unwrap(), vec!["q"]);
}

#[test]
fn partial_writes_appends_and_truncation() {
    let t = T::new();
    t.mutate("set r f:q 0123456789\n").unwrap();
    let ino = t.ino("/t/r/f/q").unwrap();
    // Overwrite in the middle.
    let fh = t.fs.open(&t.root, ino, libc::O_RDWR).unwrap().fh;
    t.fs.write(fh, 3, b"abc", None).unwrap();
    assert_eq!(t.fs.read(fh, 0, 100).unwrap(), b"012abc6789");
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012abc6789");
    // Append ignores the offset.
    let fh = t.fs.open(&t.root, ino, WR | libc::O_APPEND).unwrap().fh;
    t.fs.write(fh, 0, b"+", None).unwrap();
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012abc6789+");
    // Truncate through the handle, then through the path.
    let fh = t.fs.open(&t.root, ino, WR).unwrap().fh;
    t.fs.setattr(
        &t.root,
        ino,
        Some(fh),
        SetAttr {
            size: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012a");
    t.fs.setattr(
        &t.root,
        ino,
        None,
        SetAttr {
            size: Some(6),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012a\0\0");
    // Writing past the limit fails the write and the close, and commits nothing.
    let fh = t.fs.open(&t.root, ino, WR).unwrap().fh;
    t.fs.write(fh, 0, b"partial", None).unwrap();
    assert_eq!(t.fs.write(fh, 1 << 20, b"x", None), Err(Errno::EFBIG));
    assert_eq!(t.fs.flush(fh, None), Err(Errno::EFBIG));
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012a\0\0");
}

#[test]
fn touch_creates_an_empty_cell_and_o_trunc_alone_commits_at_release() {
    let t = T::new();
    t.mkdir("/t/r").unwrap();
    t.mkdir("/t/r/f").unwrap();
    let p = t.ino("/t/r/f").unwrap();
    let (_, o) =
        t.fs.create(&t.root, p, b"empty", WR | libc::O_CREAT)
            .unwrap();
    t.fs.flush(o.fh, None).unwrap();
    // Visible while being created.
    assert_eq!(t.ls("/t/r/f").unwrap(), vec!["empty"]);
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.get("/t/r/f/empty").unwrap(), b"");
    assert!(t.mock().row_count("t") == 1);
    assert_eq!(
        t.fs.create(&t.root, p, b"empty", WR | libc::O_CREAT | libc::O_EXCL)
            .err(),
        Some(Errno::EEXIST)
    );
}

#[test]
fn versions_list_read_write_and_delete() {
    let t = T::new();
    t.mutate("set r g:q one 1000\nset r g:q two 2000\n")
        .unwrap();
    let v = t.versions("/t/r/g/.versions/q");
    assert_eq!(v, vec!["0000000000001000", "0000000000002000"]);
    assert_eq!(
        t.get("/t/r/g/.versions/q/0000000000001000").unwrap(),
        b"one"
    );
    t.put("/t/r/g/.versions/q/0000000000001500", b"between", TRUNC)
        .unwrap();
    assert_eq!(t.versions("/t/r/g/.versions/q").len(), 3);
    assert_eq!(t.get("/t/r/g/q").unwrap(), b"two");
    t.unlink("/t/r/g/.versions/q/0000000000002000").unwrap();
    assert_eq!(t.get("/t/r/g/q").unwrap(), b"between");
    assert_eq!(t.ino("/t/r/g/.versions/q/2000"), Err(Errno::ENOENT));
    assert_eq!(t.ls("/t/r/g/.versions").unwrap(), vec!["q"]);
    // .versions is not listed in the family (find/tar/rm -r skip it).
    assert_eq!(t.ls("/t/r/g").unwrap(), vec!["q"]);
}

#[test]
fn rm_of_cells_families_and_rows_like_rm_r() {
    let t = T::new();
    t.mutate("set r f:a 1\nset r f:b 2\nset r g:c 3\nset s f:a 4\n")
        .unwrap();
    assert_eq!(t.rmdir("/t/r"), Err(Errno::ENOTEMPTY));
    assert_eq!(t.rmdir("/"), Err(Errno::ENOENT));
    // rm -r t/r: unlink every file, rmdir every directory, bottom up.
    for f in ["f", "g"] {
        for q in t.ls(&format!("/t/r/{f}")).unwrap() {
            t.unlink(&format!("/t/r/{f}/{q}")).unwrap();
        }
        t.rmdir(&format!("/t/r/{f}")).unwrap();
    }
    t.rmdir("/t/r").unwrap();
    assert_eq!(t.ino("/t/r"), Err(Errno::ENOENT));
    assert_eq!(t.ls("/t").unwrap(), vec![".schema", ".mutate", "s"]);
    // A table with rows cannot be removed; once emptied it can.
    assert_eq!(t.fs.rmdir(&t.root, ROOT_INO, b"t"), Err(Errno::ENOTEMPTY));
    // The special files can be removed (they hide until created again), as rm -r does.
    t.unlink("/t/.schema").unwrap();
    t.unlink("/t/.mutate").unwrap();
    assert_eq!(t.unlink("/t/.mutate"), Err(Errno::ENOENT));
    assert_eq!(t.ls("/t").unwrap(), vec!["s"]);
    t.unlink("/t/s/f/a").unwrap();
    t.rmdir("/t/s/f").unwrap();
    t.rmdir("/t/s").unwrap();
    t.fs.rmdir(&t.root, ROOT_INO, b"t").unwrap();
    assert_eq!(t.ls("/").unwrap(), vec![".bigtable"]);
}

#[test]
fn mutate_batches_apply_per_row_and_report() {
    let t = T::new();
    let out = t
        .mutate("set a f:x 1\nincrement a f:n 5\nappend a f:s hi\nset b f:x 2\n")
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.contains("applied a\nvalue a f:n 5\nvalue a f:s hi\napplied b\n"),
        "{out}"
    );
    assert_eq!(t.get("/t/a/f/n").unwrap(), 5i64.to_be_bytes());
    // Guards.
    let out = t
        .mutate("if a f:x 1\nset a f:y yes\nifnot b f:x\nset b f:y no\n")
        .unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), "applied a\nskipped b\n");
    assert_eq!(t.get("/t/a/f/y").unwrap(), b"yes");
    assert_eq!(t.ino("/t/b/f/y"), Err(Errno::ENOENT));
    // Deletes.
    t.mutate("deletefamily a f\ndeleterow b\n").unwrap();
    assert_eq!(t.ino("/t/a"), Err(Errno::ENOENT));
    assert_eq!(t.ino("/t/b"), Err(Errno::ENOENT));
}

#[test]
fn a_bad_batch_applies_nothing_and_names_the_line() {
    let t = T::new();
    assert_eq!(
        t.mutate("set a f:x 1\nset b nofam:x 2\n"),
        Err(Errno::ENOENT)
    );
    assert_eq!(t.mutate("set a f:x 1\nfrobnicate\n"), Err(Errno::EINVAL));
    assert_eq!(
        t.mutate("set a f:x 1\nincrement a f:x zz\n"),
        Err(Errno::EINVAL)
    );
    assert_eq!(t.mock().row_count("t"), 0);
    // A value over the limit.
    let big = format!("set a f:x {}\n", "v".repeat((1 << 20) + 1));
    assert_eq!(t.mutate(&big), Err(Errno::EFBIG));
    // The engine's own refusal (not a counter) is mapped too.
    t.mutate("set c f:x abc\n").unwrap();
    assert_eq!(
        t.mutate("set d f:x 1\nincrement c f:x 1\n"),
        Err(Errno::EINVAL)
    );
}

#[test]
fn scans_stream_tsv_and_json() {
    let t = T::new();
    t.mutate("set com.a f:x 1\nset com.b f:y 2%0A\nset com.b g:z 3\nset org.c f:x 4\n")
        .unwrap();
    let out = String::from_utf8(t.get("/t/.scan/prefix=com.&family=f").unwrap()).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("com.a\tf:x\t") && lines[0].ends_with("\t1"));
    assert!(lines[1].ends_with("\t2\\n"), "{}", lines[1]);
    let json = String::from_utf8(t.get("/t/.scan/column=g:.*&format=json").unwrap()).unwrap();
    assert_eq!(json.lines().count(), 1);
    assert!(json.contains("\"row\":\"com.b\",\"family\":\"g\",\"qualifier\":\"z\""));
    let all = t.get("/t/.scan/all").unwrap();
    assert_eq!(all.iter().filter(|&&b| b == b'\n').count(), 4);
    assert_eq!(
        t.get("/t/.scan/limit=1")
            .unwrap()
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        1
    );
    assert_eq!(t.ino("/t/.scan/bogus=1"), Err(Errno::EINVAL));
    assert_eq!(t.get("/t/.scan/family=nofam").err(), Some(Errno::ENOENT));
}

#[test]
fn time_travel_is_read_only() {
    let t = T::new();
    t.mutate("set r g:q old 100\nset r g:q new 200\nset r g:only-later x 300\n")
        .unwrap();
    assert_eq!(t.get("/t/.at/150/r/g/q").unwrap(), b"old");
    assert_eq!(t.get("/t/.at/0000000000000250/r/g/q").unwrap(), b"new");
    assert_eq!(t.ls("/t/.at/150/r/g").unwrap(), vec!["q"]);
    assert_eq!(t.ino("/t/.at/50/r"), Err(Errno::ENOENT));
    assert_eq!(
        t.ls("/t/.at/150/r/g/.versions/q").unwrap(),
        vec!["0000000000000100"]
    );
    let ino = t.ino("/t/.at/150/r/g/q").unwrap();
    assert_eq!(t.fs.open(&t.root, ino, WR).err(), Some(Errno::EROFS));
    let dir = t.ino("/t/.at/150/r/g").unwrap();
    assert_eq!(t.fs.unlink(&t.root, dir, b"q"), Err(Errno::EROFS));
    assert_eq!(
        t.fs.create(&t.root, dir, b"n", WR).err(),
        Some(Errno::EROFS)
    );
    let st = t.ino("/.bigtable/stats").unwrap();
    assert_eq!(t.fs.open(&t.root, st, WR).err(), Some(Errno::EROFS));
    assert!(String::from_utf8(t.get("/.bigtable/stats").unwrap())
        .unwrap()
        .contains("lookups"));
}

#[test]
fn a_close_by_a_process_that_did_not_write_commits_nothing() {
    let t = T::new();
    // A batch written in two parts by one process (descriptor table 1);
    // between them a forked child (table 2) closes its inherited copy.
    let ino = t.ino("/t/.mutate").unwrap();
    let fh = t.fs.open(&t.root, ino, WR).unwrap().fh;
    t.fs.write(fh, 0, b"set r1 f:q a\nset r", Some(1)).unwrap();
    t.fs.flush(fh, Some(2)).unwrap();
    assert_eq!(t.get("/t/r1/f/q"), Err(Errno::ENOENT));
    t.fs.write(fh, 18, b"2 f:q b\n", Some(1)).unwrap();
    t.fs.flush(fh, Some(1)).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r1/f/q").unwrap(), b"a");
    assert_eq!(t.get("/t/r2/f/q").unwrap(), b"b");

    // The same for a cell's value.
    let ino = t.ino("/t/r1/f/q").unwrap();
    let fh = t.fs.open(&t.root, ino, WR | libc::O_TRUNC).unwrap().fh;
    t.fs.write(fh, 0, b"hal", Some(1)).unwrap();
    t.fs.flush(fh, Some(2)).unwrap();
    assert_eq!(t.get("/t/r1/f/q").unwrap(), b"a");
    t.fs.write(fh, 3, b"f", Some(1)).unwrap();
    t.fs.flush(fh, Some(1)).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r1/f/q").unwrap(), b"half");
}

#[test]
fn an_unlinked_open_cell_commits_nothing_and_answers_nlink_0() {
    let t = T::new();
    t.mkdir("/t/r").unwrap();
    t.mkdir("/t/r/f").unwrap();
    t.put("/t/r/f/q", b"old", TRUNC).unwrap();
    let ino = t.ino("/t/r/f/q").unwrap();
    let fh = t.fs.open(&t.root, ino, libc::O_RDWR).unwrap().fh;
    t.fs.write(fh, 0, b"newer", None).unwrap();
    t.unlink("/t/r/f/q").unwrap();
    let (a, _) = t.fs.getattr(ino, None).unwrap();
    assert_eq!((a.nlink, a.size), (0, 5));
    assert_eq!(t.fs.read(fh, 0, 10).unwrap(), b"newer");
    t.fs.fsync(fh).unwrap();
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.ino("/t/r/f/q"), Err(Errno::ENOENT));
    // A created cell never closed: its unlink removes it from the listing.
    let p = t.ino("/t/r/f").unwrap();
    let (_, o) = t.fs.create(&t.root, p, b"n", WR).unwrap();
    assert_eq!(t.ls("/t/r/f").unwrap(), vec!["n"]);
    t.unlink("/t/r/f/n").unwrap();
    assert!(t.ls("/t/r/f").unwrap().is_empty());
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.ino("/t/r/f/n"), Err(Errno::ENOENT));
}

#[test]
fn mknod_of_a_regular_file_makes_an_empty_cell() {
    let t = T::new();
    t.mkdir("/t/r").unwrap();
    t.mkdir("/t/r/f").unwrap();
    let p = t.ino("/t/r/f").unwrap();
    t.fs.mknod(&t.root, p, b"e", libc::S_IFREG | 0o644, 0)
        .unwrap();
    assert_eq!(t.get("/t/r/f/e").unwrap(), b"");
    assert_eq!(
        t.fs.mknod(&t.root, p, b"fifo", libc::S_IFIFO | 0o644, 0)
            .map(|_| ()),
        Err(Errno::EPERM)
    );
}

#[test]
fn setting_a_cells_mtime_moves_its_newest_version() {
    let t = T::new();
    t.mkdir("/t/r").unwrap();
    t.mkdir("/t/r/g").unwrap();
    t.put("/t/r/g/q", b"one", TRUNC).unwrap();
    let ino = t.ino("/t/r/g/q").unwrap();
    let at = |us: u64| SetAttr {
        times: true,
        mtime: Some(std::time::UNIX_EPOCH + std::time::Duration::from_micros(us)),
        ..Default::default()
    };
    t.fs.setattr(&t.root, ino, None, at(1_500_000_000_000_001))
        .unwrap();
    assert_eq!(t.versions("/t/r/g/.versions/q"), vec!["1500000000000001"]);
    assert_eq!(t.get("/t/r/g/q").unwrap(), b"one");
    // Behind an older version: refused, nothing moves.
    t.put("/t/r/g/q", b"two", TRUNC).unwrap();
    assert_eq!(
        t.fs.setattr(&t.root, ino, None, at(1_400_000_000_000_000))
            .map(|_| ()),
        Err(Errno::EINVAL)
    );
    assert_eq!(t.get("/t/r/g/q").unwrap(), b"two");
    // An open writer's value is committed at the time set through it.
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    t.fs.write(fh, 0, b"three", None).unwrap();
    t.fs.setattr(&t.root, ino, Some(fh), at(4_000_000_000_000_000))
        .unwrap();
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/g/q").unwrap(), b"three");
    assert!(t
        .versions("/t/r/g/.versions/q")
        .contains(&"4000000000000000".to_string()));
}
