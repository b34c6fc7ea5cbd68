//! Names of every byte, hashed long names, listings, permissions and schemas.

use super::*;

#[test]
fn every_byte_in_keys_qualifiers_and_values() {
    let t = T::new();
    let all: Vec<u8> = (0..=255u8).collect();
    let enc = crate::names::encode_field;
    for b in 0..=255u8 {
        let line = [
            &b"set "[..],
            &enc(&[b'k', b]),
            b" f:",
            &enc(&[b]),
            b" ",
            &enc(&all),
            b"\n",
        ]
        .concat();
        t.mutate(line).unwrap();
    }
    let rows = t.ls("/t").unwrap();
    assert_eq!(rows.len(), 258);
    for b in 0..=255u8 {
        let mut path = b"/t/".to_vec();
        path.extend(crate::names::display_name(&[b'k', b]));
        path.extend(b"/f/");
        path.extend(crate::names::display_name(&[b]));
        assert_eq!(t.get_b(&path).unwrap(), all, "byte {b}");
        let ino = t.ino_b(&path).unwrap();
        assert_eq!(
            t.fs.getxattr(&t.root, ino, b"user.bigtable.key").unwrap(),
            vec![b]
        );
    }
}

#[test]
fn long_keys_have_hashed_names() {
    let t = T::new();
    let key = "k".repeat(300);
    t.mutate(format!("set {key} f:{key} v\n")).unwrap();
    let rows = t.ls("/t").unwrap();
    let name = rows[2].clone();
    assert!(name.len() <= 255 && name.contains("%#"), "{name}");
    let q = t.ls(&format!("/t/{name}/f")).unwrap()[0].clone();
    assert_eq!(t.get(&format!("/t/{name}/f/{q}")).unwrap(), b"v");
    let ino = t.ino(&format!("/t/{name}")).unwrap();
    assert_eq!(
        t.fs.getxattr(&t.root, ino, b"user.bigtable.key").unwrap(),
        key.as_bytes()
    );
    assert_eq!(t.fs.listxattr(ino).unwrap(), b"user.bigtable.key\0");
    // Writing through the hashed name reaches the long key.
    t.put(&format!("/t/{name}/f/{q}"), b"w", TRUNC).unwrap();
    assert_eq!(
        t.store
            .read_cell("t", key.as_bytes(), "f", key.as_bytes())
            .unwrap()
            .unwrap()
            .value,
        b"w"
    );
}

/// Lists `path` without opening it, `per_call` entries a call, running
/// `between` after each call; returns the names with their offsets' last flag.
fn ls_unopened(
    t: &T,
    path: &str,
    plus: bool,
    per_call: usize,
    mut between: impl FnMut(usize),
) -> Vec<(String, bool)> {
    let ino = t.ino(path).unwrap();
    let mut out = Vec::new();
    let mut offset = 0;
    for call in 0.. {
        let mut got = Vec::new();
        t.fs.readdir_unopened(&t.root, ino, offset, plus, &mut |e: &DirOut<'_>| {
            if got.len() == per_call {
                return true;
            }
            // A readdirplus reply may send rows by name only (listing/plus_hints.rs).
            assert!(plus || e.attr.is_none());
            got.push((e.offset, String::from_utf8_lossy(e.name).into_owned()));
            false
        })
        .unwrap();
        let Some(&(last, _)) = got.last() else {
            break;
        };
        offset = last;
        out.extend(
            got.into_iter()
                .map(|(o, n)| (n, o & crate::listing::LAST != 0)),
        );
        between(call);
    }
    out
}

#[test]
fn an_unopened_listing_goes_on_from_a_forgotten_offset() {
    // The kernel caches listings of unopened directories and, when it drops
    // a cached page, asks to go on from an offset of any age.
    let t = T::new();
    let mut batch = String::new();
    for i in 0..1000 {
        batch.push_str(&format!("set r{i:04} f:q v\n"));
    }
    t.mutate(&batch).unwrap();
    let ino = t.ino("/t").unwrap();
    let list_from = |offset: u64| {
        let mut got = Vec::new();
        t.fs.readdir_unopened(&t.root, ino, offset, false, &mut |e: &DirOut<'_>| {
            got.push((e.offset, String::from_utf8_lossy(e.name).into_owned()));
            false
        })
        .unwrap();
        got
    };
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let got = list_from(offset);
        let Some(&(last, _)) = got.last() else { break };
        offset = last;
        all.extend(got);
        if last & crate::listing::LAST != 0 {
            break;
        }
    }
    let rows: Vec<&(u64, String)> = all.iter().filter(|(_, n)| n.starts_with('r')).collect();
    assert_eq!(rows.len(), 1000);
    // The offset of row 10 was forgotten long ago (a thousand newer ones).
    let (early, _) = rows[10];
    let rest: Vec<String> = list_from(*early).into_iter().map(|(_, n)| n).collect();
    let want: Vec<String> = (11..1000).map(|i| format!("r{i:04}")).collect();
    assert!(!rest.is_empty());
    assert_eq!(rest, want[..rest.len()], "goes on after row 10, in order");
    // A row deleted since: the listing goes on after the row now in its place.
    t.mutate("deleterow r0000\n").unwrap();
    let rest: Vec<String> = list_from(*early).into_iter().map(|(_, n)| n).collect();
    assert_eq!(rest.first().map(String::as_str), Some("r0012"));
    // Fewer rows now than the offset's number: the listing is over.
    let (late, _) = rows[998];
    let mut del = String::new();
    for i in 1..600 {
        del.push_str(&format!("deleterow r{i:04}\n"));
    }
    t.mutate(&del).unwrap();
    assert!(list_from(*late).is_empty());
}

/// A table `t` of `n` rows `r0000`, `r0002`, ..., each one cell `f:q`.
fn even_rows(n: usize) -> T {
    let t = T::new();
    let batch: String = (0..n)
        .map(|i| format!("set r{:04} f:q v\n", i * 2))
        .collect();
    t.mutate(&batch).unwrap();
    t
}

/// The rows (names from `r`) of `listed` come in order without repeats,
/// and the `n` rows `r0000`, `r0002`, ... there throughout are all among them.
fn rows_in_order_with_even_ones(listed: &[(String, bool)], n: usize) {
    let rows: Vec<&String> = listed
        .iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with('r'))
        .collect();
    let mut sorted = rows.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(rows, sorted, "in order, without repeats");
    for i in 0..n {
        let want = format!("r{:04}", i * 2);
        assert!(rows.contains(&&want), "{want} missing");
    }
}

#[test]
fn a_listing_reads_its_next_reply_ahead() {
    // After each reply the FUSE adapter runs the fill it asked for
    // (listing/readahead.rs); the reply that goes on sends the filled rows
    // and scans nothing itself. Rows made meanwhile may or may not show;
    // every row there throughout shows once, in order.
    let t = even_rows(1000);
    let ino = t.ino("/t").unwrap();
    let cx = t.fs.ctx();
    let scans = || cx.data.store_calls().get(crate::store_calls::Call::Scan);
    let (mut fills, mut replies, mut reply_scans) = (0, 0, 0);
    let mut before = scans();
    let listed = ls_unopened(&t, "/t", false, 70, |call| {
        let after_reply = scans();
        if call > 0 {
            reply_scans += after_reply - before;
            replies += 1;
        }
        t.mutate(format!("set r{:04} f:q v\n", call * 2 + 1))
            .unwrap();
        if let Some(fill) = cx.listing.start_fill(ino) {
            crate::dirs::list::fill_ahead(cx, ino, fill);
            fills += 1;
        }
        before = scans();
    });
    rows_in_order_with_even_ones(&listed, 1000);
    assert!(replies >= 13, "{replies} replies");
    assert!(fills >= replies - 1, "{fills} fills for {replies} replies");
    assert_eq!(reply_scans, 0, "the replies after the first scanned");
}

#[test]
fn unopened_listings_stream_and_survive_inserts() {
    let t = T::new();
    let mut batch = String::new();
    for i in 0..300 {
        batch.push_str(&format!(
            "set r{:04} f:q v\nset r{:04} f:p v\n",
            i * 2,
            i * 2
        ));
    }
    t.mutate(&batch).unwrap();
    for plus in [false, true] {
        let listed = ls_unopened(&t, "/t", plus, 23, |call| {
            // Rows before and after the place reached, between calls.
            t.mutate(format!(
                "set r{:04} f:q v\nset a{plus}{call:04} f:q v\n",
                call * 2 + 1
            ))
            .unwrap();
        });
        rows_in_order_with_even_ones(&listed, 300);
        assert_eq!(
            &listed[..4]
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>(),
            &[".", "..", ".schema", ".mutate"]
        );
        // Only the last entry says it is the last.
        assert!(listed.last().unwrap().1);
        assert_eq!(listed.iter().filter(|(_, last)| *last).count(), 1);
    }
    // A family lists its cells, one call at a time or all at once.
    for per_call in [1, 100] {
        let cells = ls_unopened(&t, "/t/r0000/f", true, per_call, |_| {});
        let names: Vec<&str> = cells.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [".", "..", "p", "q"]);
    }
}

#[test]
fn row_listing_streams_and_survives_inserts() {
    let t = even_rows(600);
    let ino = t.ino("/t").unwrap();
    let fh = t.fs.opendir(&t.root, ino).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let mut offset = 0;
    let mut round = 0;
    loop {
        let mut got = Vec::new();
        t.fs.readdir(fh, offset, false, &mut |e: &DirOut<'_>| {
            if got.len() == 37 {
                return true;
            }
            got.push((
                e.offset,
                String::from_utf8_lossy(e.name).into_owned(),
                e.kind,
            ));
            false
        })
        .unwrap();
        if got.is_empty() {
            break;
        }
        offset = got.last().unwrap().0;
        // Insert rows before and after the cursor between calls.
        round += 1;
        t.mutate(format!(
            "set r{:04} f:q v\nset a{round:04} f:q v\n",
            round * 2 + 1
        ))
        .unwrap();
        seen.extend(
            got.into_iter()
                .filter(|(_, n, _)| n.starts_with('r'))
                .map(|(_, n, k)| {
                    assert_eq!(k, FileType::Directory);
                    n
                }),
        );
    }
    t.fs.releasedir(fh);
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "in order, without repeats");
    for i in 0..600 {
        assert!(
            seen.contains(&format!("r{:04}", i * 2)),
            "r{:04} missing",
            i * 2
        );
    }
    // The handle kept only recent cursors.
}

#[test]
fn readdirplus_registers_entries_with_attributes() {
    let t = T::new();
    t.mutate("set r f:a 12345\n").unwrap();
    let ino = t.ino("/t/r/f").unwrap();
    let fh = t.fs.opendir(&t.root, ino).unwrap();
    let mut sizes = Vec::new();
    t.fs.readdir(fh, 0, true, &mut |e: &DirOut<'_>| {
        sizes.push((
            String::from_utf8_lossy(e.name).into_owned(),
            e.attr.map(|a| a.size),
        ));
        false
    })
    .unwrap();
    // "." and ".." go as names only: the kernel ignores their attributes.
    assert_eq!(
        sizes,
        [
            (".".into(), None),
            ("..".into(), None),
            ("a".into(), Some(5))
        ]
    );
    let cell = crate::node::Node::Cell(crate::node::CellAddr {
        table: "t".into(),
        view: crate::node::View::Now,
        row: b"r".to_vec().into(),
        family: "f".into(),
        qualifier: b"a".to_vec(),
    });
    assert!(t.fs.ctx().kernel.inodes().is_known(&cell));
    // The kernel was told this version's size: the first open of the cell
    // may fill the page cache, with no invalidation to send first.
    let sent = t.fs.ctx().kernel.invalidations_sent();
    let o =
        t.fs.open(&t.root, cell.natural_ino(), libc::O_RDONLY)
            .unwrap();
    assert!(o.keep_cache && !o.direct_io, "{o:?}");
    assert_eq!(t.fs.ctx().kernel.invalidations_sent(), sent);
    t.fs.release(o.fh).unwrap();
}

#[test]
fn a_large_first_reply_carries_attributes_for_its_first_rows_only() {
    let t = T::new();
    let rows = crate::listing::FIRST_REPLY_ATTRS + 100;
    let batch: String = (0..rows).map(|i| format!("set r{i:05} f:q v\n")).collect();
    t.mutate(&batch).unwrap();
    let ino = t.ino("/t").unwrap();
    // A table asks for large listings (glibc sizes its buffer by this).
    let (attr, _) = t.fs.getattr(ino, None).unwrap();
    assert_eq!(attr.blksize, crate::attr::LISTING_BLKSIZE);
    // One reply room for every row: only the first ones carry attributes.
    let (mut with, mut without) = (0, 0);
    t.fs.readdir_unopened(&t.root, ino, 0, true, &mut |e: &DirOut<'_>| {
        if e.name.starts_with(b"r") {
            match e.attr {
                Some(_) => with += 1,
                None => without += 1,
            }
        }
        false
    })
    .unwrap();
    assert_eq!(with, crate::listing::FIRST_REPLY_ATTRS);
    assert_eq!(without, 100);
    // A row and a family list a few entries: small listing buffers; a
    // cell's reads take large ones.
    for (path, want) in [
        ("/t/r00000", crate::attr::DIR_BLKSIZE),
        ("/t/r00000/f", crate::attr::DIR_BLKSIZE),
        ("/t/r00000/f/q", crate::attr::FILE_BLKSIZE),
    ] {
        let (a, _) = t.fs.getattr(t.ino(path).unwrap(), None).unwrap();
        assert_eq!(a.blksize, want, "{path}");
    }
}

#[test]
fn family_permissions_apply_to_batches_and_scans() {
    let t = T::new();
    t.put("/t/.schema", b"f mode=0700 owner=0\ng mode=0777\n", TRUNC)
        .unwrap();
    t.mutate("set r f:secret s\nset r g:open o\n").unwrap();
    let nobody = Caller::new(65534, 65534, 0);
    assert_eq!(t.mutate_as(&nobody, "set r f:x 1\n"), Err(Errno::EACCES));
    assert!(t.mutate_as(&nobody, "set r g:x 1\n").is_ok());
    assert_eq!(t.mutate_as(&nobody, "deleterow r\n"), Err(Errno::EACCES));
    // A scan leaves out what the caller may not read, or refuses if asked by name.
    let ino = t.ino("/t/.scan/all").unwrap();
    let fh = t.fs.open(&nobody, ino, libc::O_RDONLY).unwrap().fh;
    let out = String::from_utf8(t.fs.read(fh, 0, 4096).unwrap()).unwrap();
    assert!(out.contains("g:open") && !out.contains("secret"), "{out}");
    t.fs.release(fh).unwrap();
    let ino = t.ino("/t/.scan/family=f").unwrap();
    assert_eq!(
        t.fs.open(&nobody, ino, libc::O_RDONLY).err(),
        Some(Errno::EACCES)
    );
    // chmod of a family directory changes the schema.
    let fam = t.ino("/t/r/f").unwrap();
    let (a, _) =
        t.fs.setattr(
            &t.root,
            fam,
            None,
            SetAttr {
                mode: Some(0o750),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(a.perm, 0o750);
    assert_eq!(t.store.schema("t").unwrap().families["f"].mode, 0o750);
    // chmod of a cell succeeds and changes nothing (cells show their family's bits).
    let cell = t.ino("/t/r/f/secret").unwrap();
    let chmod = |ino, mode| {
        t.fs.setattr(
            &t.root,
            ino,
            None,
            SetAttr {
                mode: Some(mode),
                ..Default::default()
            },
        )
    };
    assert_eq!(chmod(cell, 0o600).unwrap().0.perm, 0o640);
    assert_eq!(chmod(ROOT_INO, 0o700).err(), Some(Errno::EPERM));
}

/// What `who` reads from a `.scan` query of table t.
fn scan_as(t: &T, who: &Caller, query: &str) -> Result<String, Errno> {
    let ino = t.ino(&format!("/t/.scan/{query}"))?;
    let fh = t.fs.open(who, ino, libc::O_RDONLY)?.fh;
    let out = t.fs.read(fh, 0, 1 << 16);
    t.fs.release(fh)?;
    Ok(String::from_utf8(out?).unwrap())
}

#[test]
fn a_scan_cannot_answer_about_a_family_it_may_not_read() {
    let t = T::new();
    t.put(
        "/t/.schema",
        b"f mode=0700 owner=0
g mode=0777
",
        TRUNC,
    )
    .unwrap();
    t.mutate(
        "set a f:secret s
set b g:open o
set c f:other s
",
    )
    .unwrap();
    let nobody = Caller::new(65534, 65534, 0);
    // column= and limit= over the unreadable family say nothing: the rows
    // that hold only its cells do not count, as if they were empty.
    assert_eq!(scan_as(&t, &nobody, "column=f:secret").unwrap(), "");
    assert_eq!(scan_as(&t, &nobody, "column=f:s.*").unwrap(), "");
    assert_eq!(
        scan_as(&t, &root_caller(), "column=f:s.*")
            .unwrap()
            .lines()
            .count(),
        1
    );
    let first = scan_as(&t, &nobody, "limit=1").unwrap();
    assert!(first.starts_with("b	"), "{first}");
    // Nor does a filter.
    let out = scan_as(&t, &nobody, "filter=qualifier(secret)").unwrap();
    assert_eq!(out, "");
}

fn root_caller() -> Caller {
    Caller::root()
}

#[test]
fn changing_a_familys_settings_needs_write_permission_on_it() {
    let t = T::new();
    // Anyone may write the table's .schema, but family f is root's alone.
    t.put(
        "/t/.schema",
        b"f mode=0700 owner=0
g mode=0777
",
        TRUNC,
    )
    .unwrap();
    let table = t.ino("/t").unwrap();
    t.fs.setattr(
        &t.root,
        table,
        None,
        SetAttr {
            mode: Some(0o777),
            ..Default::default()
        },
    )
    .unwrap();
    t.mutate(
        "set r f:secret s
",
    )
    .unwrap();
    let nobody = Caller::new(65534, 65534, 0);
    let write_as = |who: &Caller, text: &[u8], flags: i32| -> Result<(), Errno> {
        let ino = t.ino("/t/.schema")?;
        let fh = t.fs.open(who, ino, flags)?.fh;
        let r =
            t.fs.write(fh, 0, text, None)
                .and_then(|_| t.fs.flush(fh, None));
        t.fs.release(fh)?;
        r
    };
    let append = libc::O_WRONLY | libc::O_APPEND;
    let before = t.store.schema("t").unwrap().families["f"].clone();
    assert_eq!(
        write_as(&nobody, b"f max_age=1ms\n", append),
        Err(Errno::EACCES)
    );
    assert_eq!(
        t.store.schema("t").unwrap().families["f"],
        before,
        "nobody changed f's settings"
    );
    // Its own writable family, and a new one, are fine.
    write_as(&nobody, b"g max_versions=2\nh\n", append).unwrap();
    assert_eq!(t.store.schema("t").unwrap().families.len(), 3);
    // Truncating .schema (dropping f) is refused too.
    let ino = t.ino("/t/.schema").unwrap();
    assert!(t
        .fs
        .setattr(
            &nobody,
            ino,
            None,
            SetAttr {
                size: Some(0),
                ..Default::default()
            },
        )
        .is_err());
    assert!(t.store.schema("t").unwrap().families.contains_key("f"));
}

#[test]
fn dropping_a_family_with_data_is_refused() {
    let t = T::new();
    t.mutate("set r g:q 1\n").unwrap();
    assert_eq!(t.put("/t/.schema", b"f\n", TRUNC), Err(Errno::ENOTEMPTY));
    t.put("/t/.schema", b"g\n", TRUNC).unwrap();
    assert_eq!(t.store.schema("t").unwrap().families.len(), 1);
}

#[test]
fn tar_replaces_special_files_by_unlink_and_exclusive_create() {
    let t = T::new();
    t.mutate("set r f:q 1\n").unwrap();
    let table = t.ino("/t").unwrap();
    let excl = WR | libc::O_CREAT | libc::O_EXCL;
    assert_eq!(
        t.fs.create(&t.root, table, b".schema", excl).err(),
        Some(Errno::EEXIST)
    );
    t.unlink("/t/.schema").unwrap();
    assert_eq!(t.ino("/t/.schema"), Err(Errno::ENOENT));
    let (_, o) = t.fs.create(&t.root, table, b".schema", excl).unwrap();
    t.fs.write(o.fh, 0, b"f\nk\n", None).unwrap();
    t.fs.flush(o.fh, None).unwrap();
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.store.schema("t").unwrap().families.len(), 2);
    assert!(t.ino("/t/.schema").is_ok());
}

#[test]
fn rename_moves_a_cell_within_its_row() {
    let t = T::new();
    t.mutate("set r g:a 1 10\nset r g:a 2 20\nset s g:z 3\n")
        .unwrap();
    let g = t.ino("/t/r/g").unwrap();
    t.fs.rename(&t.root, g, b"a", g, b"b", 0).unwrap();
    assert_eq!(t.ino("/t/r/g/a"), Err(Errno::ENOENT));
    assert_eq!(t.get("/t/r/g/b").unwrap(), b"2");
    assert_eq!(t.versions("/t/r/g/.versions/b").len(), 2);
    let s = t.ino("/t/s/g").unwrap();
    assert_eq!(t.fs.rename(&t.root, g, b"b", s, b"b", 0), Err(Errno::EXDEV));
}

#[test]
fn large_values_in_large_writes() {
    let store = Arc::new(MockStore::with_max_value(64 << 20));
    let opts = FsOptions::default();
    let t = T {
        fs: Fs::new(store.clone(), opts.clone()),
        store: store.clone(),
        mock: Some(store),
        root: Caller::root(),
        opts,
    };
    t.fs.mkdir(&t.root, ROOT_INO, b"t", 0o755, 0o022).unwrap();
    t.put("/t/.schema", b"f\n", TRUNC).unwrap();
    t.mkdir("/t/r").unwrap();
    t.mkdir("/t/r/f").unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let p = t.ino("/t/r/f").unwrap();
    let (_, o) =
        t.fs.create(&t.root, p, b"big", WR | libc::O_CREAT | libc::O_TRUNC)
            .unwrap();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        t.fs.write(o.fh, (i << 20) as u64, chunk, None).unwrap();
    }
    t.fs.flush(o.fh, None).unwrap();
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.get("/t/r/f/big").unwrap(), data);
}

#[test]
fn a_file_being_written_shows_the_writers_size() {
    // mv across rows: create, copy_file_range, fchmod (no handle), close.
    let t = T::new();
    t.mutate("set a f:x hello\n").unwrap();
    t.mkdir("/t/b").unwrap();
    t.mkdir("/t/b/f").unwrap();
    let src = t.ino("/t/a/f/x").unwrap();
    let fin = t.fs.open(&t.root, src, libc::O_RDONLY).unwrap().fh;
    let dir = t.ino("/t/b/f").unwrap();
    let (e, o) =
        t.fs.create(&t.root, dir, b"x", WR | libc::O_CREAT | libc::O_EXCL)
            .unwrap();
    assert_eq!(t.fs.copy_file_range(fin, 0, o.fh, 0, 1 << 30).unwrap(), 5);
    let ino = e.attr.ino.0;
    let chmod = SetAttr {
        mode: Some(0o644),
        ..Default::default()
    };
    assert_eq!(t.fs.setattr(&t.root, ino, None, chmod).unwrap().0.size, 5);
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    t.fs.flush(o.fh, None).unwrap();
    t.fs.release(o.fh).unwrap();
    t.fs.release(fin).unwrap();
    assert_eq!(t.get("/t/b/f/x").unwrap(), b"hello");
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
}
