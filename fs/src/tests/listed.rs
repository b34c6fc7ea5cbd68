//! A scan through the mount lists each family, then opens each cell: the
//! listing read the values, so the opens take them (one tablet-server call
//! a scanned file, not two); a write to the row in between, by any way in,
//! is read afresh (`listed_values.rs`).

use super::{T, TRUNC};
use engine::{RowMutation, WriteOptions};

/// `t/r/f` holding `a` = one, `b` = two.
fn table() -> T {
    let t = T::new();
    t.mutate("set r f:a one\nset r f:b two\n").unwrap();
    t
}

/// The directory `ino` listed as the kernel lists it without OPENDIR.
fn list(t: &T, ino: u64) -> Vec<(String, u64)> {
    t.list_unopened(ino, usize::MAX)
}

/// The value of the file `ino` (open, read, release) and the
/// tablet-server calls that took.
fn cat(t: &T, ino: u64) -> (Vec<u8>, u64) {
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    let v = t.fs.read(fh, 0, 4096).unwrap();
    t.fs.release(fh).unwrap();
    (v, calls.tablet_calls() - before)
}

fn ino_of(listed: &[(String, u64)], name: &str) -> u64 {
    listed.iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn a_listed_cell_opens_without_a_call() {
    let t = table();
    let fam = t.ino("/t/r/f").unwrap();
    // The walk's lookups read the row whole, which would answer the
    // listing: gone, as 100 ms later.
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    let listed = list(&t, fam);
    assert_eq!(calls.tablet_calls() - before, 1, "one read of the family");
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(cat(&t, ino_of(&listed, "a")), (b"one".to_vec(), 0));
    assert_eq!(cat(&t, ino_of(&listed, "b")), (b"two".to_vec(), 0));
    // Each value is handed out once: a second open reads.
    assert_eq!(cat(&t, ino_of(&listed, "a")), (b"one".to_vec(), 1));
    // A writer's open reads too (its value may be appended to).
    let a = ino_of(&listed, "a");
    list(&t, fam);
    let fh = t.fs.open(&t.root, a, libc::O_RDWR).unwrap().fh;
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), b"one");
    t.fs.release(fh).unwrap();
    assert_eq!(
        cat(&t, a),
        (b"one".to_vec(), 0),
        "the writer took none: the reader that follows does"
    );
}

#[test]
fn a_write_after_the_listing_is_read_afresh() {
    let t = table();
    let fam = t.ino("/t/r/f").unwrap();
    let listed = list(&t, fam);
    let (a, b) = (ino_of(&listed, "a"), ino_of(&listed, "b"));
    // A `.mutate` batch.
    t.mutate("set r f:a three\n").unwrap();
    assert_eq!(cat(&t, a), (b"three".to_vec(), 1));
    // A write through the mount.
    list(&t, fam);
    t.put("/t/r/f/b", b"four", TRUNC).unwrap();
    assert_eq!(cat(&t, b).0, b"four");
    // A writer the mount is told of (the gRPC API, another daemon).
    list(&t, fam);
    let m = RowMutation::new(b"r".to_vec()).set("f", b"a".to_vec(), b"five".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    assert_eq!(cat(&t, a), (b"five".to_vec(), 1));
    // An operator's command (`restore` in `.bigtable/control`) drops them.
    list(&t, fam);
    let _ = t.fs.ctx().data.store().control("restore t snap");
    assert_eq!(cat(&t, b), (b"four".to_vec(), 1));
    // Another row's write leaves the listing's values.
    list(&t, fam);
    t.mutate("set s f:a x\n").unwrap();
    assert_eq!(cat(&t, b), (b"four".to_vec(), 0));
}

/// A walk (`grep -r`, `find`, `tar`) lists the row, then each family,
/// then opens each cell: the row's listing read every family's cells, so
/// the family's listing and the opens make no call of their own; a write
/// in between is read afresh.
#[test]
fn a_rows_listing_answers_its_familys_listing_and_opens() {
    let t = table();
    t.mutate("set r g:c three\n").unwrap();
    let row = t.ino("/t/r").unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    let fams = list(&t, row);
    assert_eq!(calls.tablet_calls() - before, 1, "one read of the row");
    let before = calls.tablet_calls();
    let f = list(&t, ino_of(&fams, "f"));
    let g = list(&t, ino_of(&fams, "g"));
    assert_eq!(calls.tablet_calls() - before, 0, "the row's read answers");
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(cat(&t, ino_of(&f, "b")), (b"two".to_vec(), 0));
    assert_eq!(cat(&t, ino_of(&g, "c")), (b"three".to_vec(), 0));
    // Once a value was taken, the row's listing no longer answers for a
    // family's (it lacks that cell): the family is read.
    let before = calls.tablet_calls();
    assert_eq!(list(&t, ino_of(&fams, "f")).len(), 2);
    assert_eq!(calls.tablet_calls() - before, 1);
    // A write between the row's listing and the family's.
    list(&t, row);
    t.mutate("set r f:d four\n").unwrap();
    let f = list(&t, ino_of(&fams, "f"));
    assert_eq!(f.len(), 3, "the new cell is listed");
    assert_eq!(cat(&t, ino_of(&f, "d")), (b"four".to_vec(), 0));
}

/// A cell whose creator's release commits it while its family is being
/// listed is in the listing: the listing takes the created cells before
/// it reads the store. (Read the other way round, a commit between the
/// store's read and the placeholders' missed the cell: `mv` of a file
/// just closed, then `ls`, under load.)
#[test]
fn a_cell_committed_during_its_familys_listing_is_listed() {
    let t = std::sync::Arc::new(table());
    let fam = t.ino("/t/r/f").unwrap();
    let (_, o) =
        t.fs.create(&t.root, fam, b"new", TRUNC | libc::O_CREAT)
            .unwrap();
    // The listing reads the family from the store (not the lookups' read).
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let t2 = t.clone();
    t.mock()
        .after_next_read(move || t2.fs.release(o.fh).unwrap());
    let names: Vec<String> = list(&t, fam).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["a", "b", "new"]);
    assert_eq!(t.get("/t/r/f/new").unwrap(), b"", "committed meanwhile");
}

/// The same race for an open of a created cell: its creator's release
/// commits it while the open reads the store. The open finds it (it
/// answered ENOENT). (A stat meanwhile is answered by the creator's
/// handle, which is open until its release.)
#[test]
fn a_cell_committed_during_an_open_is_found() {
    let t = std::sync::Arc::new(table());
    let fam = t.ino("/t/r/f").unwrap();
    let (entry, o) =
        t.fs.create(&t.root, fam, b"new", TRUNC | libc::O_CREAT)
            .unwrap();
    let ino = entry.attr.ino.0;
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let t2 = t.clone();
    t.mock()
        .after_next_read(move || t2.fs.release(o.fh).unwrap());
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), b"");
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/r/f/new").unwrap(), b"", "committed meanwhile");
}

/// `tar` and `rsync` list a row, then a family, open its cells, then
/// fstat the family and the row (the kernel asks: a listing dropped the
/// directory's atime): the listings' reads answer those too, after the
/// opens took every listed value; a write in between is read afresh.
#[test]
fn the_getattrs_after_a_walk_need_no_read() {
    let t = table();
    let row = t.ino("/t/r").unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    let fams = list(&t, row);
    let fam = ino_of(&fams, "f");
    let cells = list(&t, fam);
    for (_, ino) in &cells {
        cat(&t, *ino);
    }
    t.fs.getattr(fam, None).unwrap();
    t.fs.getattr(row, None).unwrap();
    assert_eq!(
        calls.tablet_calls() - before,
        1,
        "the row's read answers all"
    );
    // A write to the row, then a getattr: read afresh (the family is gone).
    t.mutate("delete r f:a\ndelete r f:b\n").unwrap();
    assert_eq!(t.fs.getattr(fam, None).err(), Some(fuser::Errno::ENOENT));
}
