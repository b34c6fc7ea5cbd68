//! Store calls per file operation: each FUSE request a `cat`, an
//! `echo x >`, a `stat` and an `ls` send (with nothing in the kernel's
//! caches), and the tablet-server calls (reads, writes, scans) each one
//! makes. docs/mount.md states these counts ("Server calls per file
//! operation"); this test asserts them.

use super::{T, TRUNC};
use crate::node::ROOT_INO;
use crate::reply::DirOut;
use crate::store_calls::{Call, StoreCalls};
use fuser::Errno;

/// A counter of tablet-server calls between steps.
struct Meter<'a> {
    calls: &'a StoreCalls,
    last: u64,
    schema_last: u64,
    steps: Vec<(&'static str, u64)>,
}

impl<'a> Meter<'a> {
    fn new(t: &'a T) -> Meter<'a> {
        let calls = t.fs.ctx().data.store_calls();
        Meter {
            calls,
            last: calls.tablet_calls(),
            schema_last: calls.get(Call::Schema),
            steps: Vec::new(),
        }
    }

    /// Records the calls since the last step as `request`'s.
    fn step(&mut self, request: &'static str) {
        let now = self.calls.tablet_calls();
        self.steps.push((request, now - self.last));
        self.last = now;
    }

    /// The steps and the total, and how many schema lookups (answered by
    /// the client's cache, not a server) were made.
    fn done(self, op: &str) -> (Vec<(&'static str, u64)>, u64) {
        let total = self.steps.iter().map(|(_, n)| n).sum();
        let schemas = self.calls.get(Call::Schema) - self.schema_last;
        println!("{op}: {:?} total={total} schema={schemas}", self.steps);
        (self.steps, total)
    }
}

/// A table `t` (families f, g) with row `r` holding `f:c`.
fn table() -> T {
    let t = T::new();
    t.mutate("set r f:c hello\n").unwrap();
    t
}

/// Looks up `path` component by component, one step per lookup.
fn walk(t: &T, m: &mut Meter<'_>, path: &[&[u8]]) -> Result<u64, Errno> {
    let mut ino = ROOT_INO;
    for name in path {
        let r = t.fs.lookup(ino, name);
        m.step("lookup");
        ino = r?.attr.ino.0;
    }
    Ok(ino)
}

#[test]
fn cat_of_a_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let ino = walk(&t, &mut m, &[b"t", b"r", b"f", b"c"]).unwrap();
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    m.step("open");
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), b"hello");
    m.step("read");
    t.fs.release(fh).unwrap();
    m.step("release");
    let (steps, total) = m.done("cat");
    assert_eq!(
        steps,
        [
            ("lookup", 0),
            ("lookup", 1),
            ("lookup", 1),
            ("lookup", 1),
            ("open", 1),
            ("read", 0),
            ("release", 0)
        ]
    );
    assert_eq!(total, 4);
}

/// `echo x > cell` of a new cell in an existing row.
#[test]
fn echo_into_a_new_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let fam = walk(&t, &mut m, &[b"t", b"r", b"f"]).unwrap();
    assert_eq!(t.fs.lookup(fam, b"new").err(), Some(Errno::ENOENT));
    m.step("lookup");
    let fh =
        t.fs.create(&t.root, fam, b"new", TRUNC | libc::O_CREAT)
            .unwrap();
    m.step("create");
    let fh = fh.1.fh;
    t.fs.write(fh, 0, b"x\n", None).unwrap();
    m.step("write");
    t.fs.flush(fh, None).unwrap();
    m.step("flush");
    t.fs.release(fh).unwrap();
    m.step("release");
    let (steps, total) = m.done("echo into a new cell");
    assert_eq!(t.get("/t/r/f/new").unwrap(), b"x\n");
    assert_eq!(
        steps,
        [
            ("lookup", 0),
            ("lookup", 1),
            ("lookup", 1),
            ("lookup", 1),
            ("create", 1),
            ("write", 0),
            ("flush", 2),
            ("release", 0)
        ]
    );
    assert_eq!(total, 6);
}

/// `echo x > cell` over an existing cell.
#[test]
fn echo_over_a_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let ino = walk(&t, &mut m, &[b"t", b"r", b"f", b"c"]).unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    m.step("open");
    t.fs.write(fh, 0, b"x\n", None).unwrap();
    m.step("write");
    t.fs.flush(fh, None).unwrap();
    m.step("flush");
    t.fs.release(fh).unwrap();
    m.step("release");
    let (steps, total) = m.done("echo over a cell");
    assert_eq!(t.get("/t/r/f/c").unwrap(), b"x\n");
    assert_eq!(
        steps,
        [
            ("lookup", 0),
            ("lookup", 1),
            ("lookup", 1),
            ("lookup", 1),
            ("open", 1),
            ("write", 0),
            ("flush", 2),
            ("release", 0)
        ]
    );
    assert_eq!(total, 6);
}

/// `stat` of a cell: the lookups (whose replies carry the attributes), and
/// a `getattr` once the kernel's copy of them has expired.
#[test]
fn stat_of_a_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let ino = walk(&t, &mut m, &[b"t", b"r", b"f", b"c"]).unwrap();
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    let (steps, total) = m.done("stat");
    assert_eq!(
        steps,
        [
            ("lookup", 0),
            ("lookup", 1),
            ("lookup", 1),
            ("lookup", 1),
            ("getattr", 1)
        ]
    );
    assert_eq!(total, 4);
}

/// `ls` of a row (listed without OPENDIR, as the mount asks the kernel to).
#[test]
fn ls_of_a_row() {
    let t = table();
    t.mutate("set r g:d v\n").unwrap();
    let mut m = Meter::new(&t);
    let row = walk(&t, &mut m, &[b"t", b"r"]).unwrap();
    let mut names = Vec::new();
    let mut offset = 0;
    loop {
        let mut got = Vec::new();
        t.fs.readdir_unopened(&t.root, row, offset, true, &mut |e: &DirOut<'_>| {
            got.push((e.offset, String::from_utf8_lossy(e.name).into_owned()));
            false
        })
        .unwrap();
        m.step("readdirplus");
        let Some(last) = got.last() else { break };
        offset = last.0;
        names.extend(got.into_iter().map(|(_, n)| n));
    }
    let (steps, total) = m.done("ls");
    assert_eq!(names, [".", "..", "f", "g"]);
    assert_eq!(
        steps,
        [
            ("lookup", 0),
            ("lookup", 1),
            ("readdirplus", 1),
            ("readdirplus", 0)
        ]
    );
    assert_eq!(total, 2);
}
