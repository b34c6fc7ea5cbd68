//! The whole filesystem against the in-memory store: every operation a
//! mount would see, without a mount.

use crate::dirs::DirOut;
use crate::files::SetAttr;
use crate::mock::MockStore;
use crate::node::ROOT_INO;
use crate::{Caller, Fs, FsOptions};
use fuser::{Errno, FileType};
use std::sync::Arc;

struct T {
    fs: Fs,
    store: Arc<MockStore>,
    root: Caller,
}

const WR: i32 = libc::O_WRONLY;
const TRUNC: i32 = libc::O_WRONLY | libc::O_TRUNC;

impl T {
    fn new() -> T {
        let store = Arc::new(MockStore::default());
        let fs = Fs::new(
            store.clone(),
            FsOptions {
                max_value_size: 1 << 20,
                ..Default::default()
            },
        );
        let t = T {
            fs,
            store,
            root: Caller::root(),
        };
        t.fs.mkdir(&t.root, ROOT_INO, b"t", 0o755, 0o022).unwrap();
        t.put("/t/.schema", b"f\ng max_versions=5\n", TRUNC)
            .unwrap();
        t
    }

    /// Looks up every component of a path (components are raw names).
    fn ino(&self, path: &str) -> Result<u64, Errno> {
        self.ino_b(path.as_bytes())
    }

    fn ino_b(&self, path: &[u8]) -> Result<u64, Errno> {
        let mut ino = ROOT_INO;
        for c in path.split(|&b| b == b'/').filter(|c| !c.is_empty()) {
            ino = self.fs.lookup(ino, c)?.attr.ino.0;
        }
        Ok(ino)
    }

    fn split(path: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let i = path.iter().rposition(|&b| b == b'/').unwrap();
        (path[..i].to_vec(), path[i + 1..].to_vec())
    }

    /// open(O_CREAT)+write+close, as `printf > path` does.
    fn put(&self, path: &str, data: &[u8], flags: i32) -> Result<(), Errno> {
        self.put_b(path.as_bytes(), data, flags)
    }

    fn put_b(&self, path: &[u8], data: &[u8], flags: i32) -> Result<(), Errno> {
        let fh = match self.ino_b(path) {
            Ok(ino) => self.fs.open(&self.root, ino, flags)?.fh,
            Err(Errno::ENOENT) => {
                let (dir, name) = Self::split(path);
                let parent = self.ino_b(&dir)?;
                self.fs
                    .create(&self.root, parent, &name, flags | libc::O_CREAT)?
                    .1
                    .fh
            }
            Err(e) => return Err(e),
        };
        // A shell closes a duplicate descriptor before writing.
        self.fs.flush(fh)?;
        let r = self.fs.write(fh, 0, data).and_then(|_| self.fs.flush(fh));
        self.fs.release(fh)?;
        r
    }

    fn get(&self, path: &str) -> Result<Vec<u8>, Errno> {
        self.get_b(path.as_bytes())
    }

    fn get_b(&self, path: &[u8]) -> Result<Vec<u8>, Errno> {
        let ino = self.ino_b(path)?;
        let fh = self.fs.open(&self.root, ino, libc::O_RDONLY)?.fh;
        let mut out = Vec::new();
        loop {
            let chunk = self.fs.read(fh, out.len() as u64, 7)?;
            if chunk.is_empty() {
                break;
            }
            out.extend_from_slice(&chunk);
        }
        self.fs.release(fh)?;
        Ok(out)
    }

    fn ls(&self, path: &str) -> Result<Vec<String>, Errno> {
        let ino = self.ino(path)?;
        let fh = self.fs.opendir(&self.root, ino)?;
        let mut names = Vec::new();
        let mut offset = 0;
        loop {
            let mut got = Vec::new();
            self.fs.readdir(fh, offset, false, &mut |e: &DirOut<'_>| {
                if got.len() == 5 {
                    return true;
                }
                got.push((e.offset, String::from_utf8_lossy(e.name).into_owned()));
                false
            })?;
            if got.is_empty() {
                break;
            }
            offset = got.last().unwrap().0;
            names.extend(
                got.into_iter()
                    .map(|(_, n)| n)
                    .filter(|n| n != "." && n != ".."),
            );
        }
        self.fs.releasedir(fh);
        Ok(names)
    }

    fn mutate(&self, batch: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        self.mutate_as(&self.root, batch)
    }

    fn mutate_as(&self, who: &Caller, batch: impl AsRef<[u8]>) -> Result<Vec<u8>, Errno> {
        let ino = self.ino("/t/.mutate")?;
        let fh = self.fs.open(who, ino, libc::O_RDWR)?.fh;
        let r = self.fs.write(fh, 0, batch.as_ref());
        if let Err(e) = r {
            let _ = self.fs.flush(fh);
            self.fs.release(fh)?;
            return Err(e);
        }
        let out = self.fs.read(fh, 0, 1 << 20);
        self.fs.flush(fh)?;
        self.fs.release(fh)?;
        out
    }

    fn mkdir(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.mkdir(&self.root, p, &name, 0o755, 0).map(|_| ())
    }

    fn rmdir(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.rmdir(&self.root, p, &name)
    }

    fn unlink(&self, path: &str) -> Result<(), Errno> {
        let (dir, name) = Self::split(path.as_bytes());
        let p = self.ino_b(&dir)?;
        self.fs.unlink(&self.root, p, &name)
    }

    fn versions(&self, path: &str) -> Vec<String> {
        self.ls(path).unwrap()
    }
}

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
    use crate::store::Store;
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
    t.fs.write(fh, 3, b"abc").unwrap();
    assert_eq!(t.fs.read(fh, 0, 100).unwrap(), b"012abc6789");
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/q").unwrap(), b"012abc6789");
    // Append ignores the offset.
    let fh = t.fs.open(&t.root, ino, WR | libc::O_APPEND).unwrap().fh;
    t.fs.write(fh, 0, b"+").unwrap();
    t.fs.flush(fh).unwrap();
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
    t.fs.flush(fh).unwrap();
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
    t.fs.write(fh, 0, b"partial").unwrap();
    assert_eq!(t.fs.write(fh, 1 << 20, b"x"), Err(Errno::EFBIG));
    assert_eq!(t.fs.flush(fh), Err(Errno::EFBIG));
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
    t.fs.flush(o.fh).unwrap();
    // Visible while being created.
    assert_eq!(t.ls("/t/r/f").unwrap(), vec!["empty"]);
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.get("/t/r/f/empty").unwrap(), b"");
    assert!(t.store.row_count("t") == 1);
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
    assert_eq!(t.store.row_count("t"), 0);
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
    use crate::store::Store;
}

#[test]
fn row_listing_streams_and_survives_inserts() {
    let t = T::new();
    let mut batch = String::new();
    for i in 0..600 {
        batch.push_str(&format!("set r{:04} f:q v\n", i * 2));
    }
    t.mutate(&batch).unwrap();
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
            e.attr.unwrap().size,
        ));
        false
    })
    .unwrap();
    assert!(sizes.contains(&("a".to_string(), 5)));
    let cell = crate::node::Node::Cell {
        table: "t".into(),
        view: crate::node::View::Now,
        row: b"r".to_vec(),
        family: "f".into(),
        qualifier: b"a".to_vec(),
    };
    assert!(t.fs.ctx().inodes.is_known(&cell));
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
    use crate::store::Store;
}

#[test]
fn dropping_a_family_with_data_is_refused() {
    let t = T::new();
    t.mutate("set r g:q 1\n").unwrap();
    assert_eq!(t.put("/t/.schema", b"f\n", TRUNC), Err(Errno::ENOTEMPTY));
    t.put("/t/.schema", b"g\n", TRUNC).unwrap();
    use crate::store::Store;
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
    t.fs.write(o.fh, 0, b"f\nk\n").unwrap();
    t.fs.flush(o.fh).unwrap();
    t.fs.release(o.fh).unwrap();
    assert_eq!(t.store.schema("t").unwrap().families.len(), 2);
    assert!(t.ino("/t/.schema").is_ok());
    use crate::store::Store;
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
    let fs = Fs::new(store.clone(), FsOptions::default());
    let t = T {
        fs,
        store,
        root: Caller::root(),
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
        t.fs.write(o.fh, (i << 20) as u64, chunk).unwrap();
    }
    t.fs.flush(o.fh).unwrap();
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
    t.fs.flush(o.fh).unwrap();
    t.fs.release(o.fh).unwrap();
    t.fs.release(fin).unwrap();
    assert_eq!(t.get("/t/b/f/x").unwrap(), b"hello");
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
}
