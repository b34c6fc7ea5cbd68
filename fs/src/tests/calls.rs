//! Store calls per file operation: each FUSE request a `cat`, an
//! `echo x >`, a `stat` and an `ls` send (with nothing in the kernel's
//! caches), and the tablet-server calls (reads, writes, scans) each one
//! makes. docs/mount.md states these counts ("Server calls per file
//! operation"); this test asserts them.

use super::{T, TRUNC};
use crate::node::{Node, ROOT_INO};
use crate::reply::DirOut;
use crate::store_calls::{Call, StoreCalls};
use engine::{RowMutation, WriteOptions};
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

    /// The steps as `request:calls …` and the total after `=`; prints
    /// them with the schema lookups made (answered by the client's cache,
    /// not a server).
    fn done(self, op: &str) -> String {
        let total: u64 = self.steps.iter().map(|(_, n)| n).sum();
        let steps: Vec<String> = self.steps.iter().map(|(r, n)| format!("{r}:{n}")).collect();
        let out = format!("{} = {total}", steps.join(" "));
        let schemas = self.calls.get(Call::Schema) - self.schema_last;
        println!("{op}: {out} (schema lookups: {schemas})");
        out
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

/// `cat` of the cell at `path`, which holds `value`: the calls per request.
fn cat(t: &T, path: &[&[u8]], value: &[u8]) -> String {
    let mut m = Meter::new(t);
    let ino = walk(t, &mut m, path).unwrap();
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    m.step("open");
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), value);
    m.step("read");
    t.fs.release(fh).unwrap();
    m.step("release");
    m.done("cat")
}

/// `x\n` written to `fh`, then its close (FLUSH and RELEASE).
fn write_and_close(t: &T, m: &mut Meter<'_>, fh: u64) {
    t.fs.write(fh, 0, b"x\n", None).unwrap();
    m.step("write");
    t.fs.flush(fh, None).unwrap();
    m.step("flush");
    t.fs.release(fh).unwrap();
    m.step("release");
}

/// An open of `ino`, a read finding `value` (counted with the open), and
/// the release.
fn open_and_read(t: &T, m: &mut Meter<'_>, ino: u64, value: &[u8]) {
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    m.step("open");
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), value);
    t.fs.release(fh).unwrap();
    m.step("release");
}

#[test]
fn cat_of_a_cell() {
    let t = table();
    let steps = cat(&t, &[b"t", b"r", b"f", b"c"], b"hello");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 lookup:0 open:0 read:0 release:0 = 1"
    );
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
    write_and_close(&t, &mut m, fh);
    let steps = m.done("echo into a new cell");
    assert_eq!(t.get("/t/r/f/new").unwrap(), b"x\n");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 lookup:0 create:0 write:0 flush:1 release:0 = 2"
    );
}

/// `echo x > cell` over an existing cell.
#[test]
fn echo_over_a_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let ino = walk(&t, &mut m, &[b"t", b"r", b"f", b"c"]).unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    m.step("open");
    // The kernel asks, before it truncates the file (O_TRUNC), whether
    // it has capabilities to drop: the mount keeps no security.* names.
    let cap = t.fs.getxattr(&t.root, ino, b"security.capability");
    assert_eq!(cap.err(), Some(Errno::from_i32(libc::ENOTSUP)));
    m.step("getxattr");
    write_and_close(&t, &mut m, fh);
    let steps = m.done("echo over a cell");
    assert_eq!(t.get("/t/r/f/c").unwrap(), b"x\n");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 lookup:0 open:0 getxattr:0 write:0 flush:1 release:0 = 2"
    );
}

/// `stat` of a cell: the lookups (whose replies carry the attributes), and
/// a `getattr` once the kernel's copy of them has expired: answered from
/// the row's read a moment ago, or read again once that is old.
#[test]
fn stat_of_a_cell() {
    let t = table();
    let mut m = Meter::new(&t);
    let ino = walk(&t, &mut m, &[b"t", b"r", b"f", b"c"]).unwrap();
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    let steps = m.done("stat");
    assert_eq!(steps, "lookup:0 lookup:1 lookup:0 lookup:0 getattr:0 = 1");
    // What the memo would have dropped 100 ms later.
    t.fs.ctx().data.table_changed_elsewhere("t");
    let mut m = Meter::new(&t);
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    assert_eq!(m.done("stat later"), "getattr:1 = 1");
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
    let steps = m.done("ls");
    assert_eq!(names, [".", "..", "f", "g"]);
    assert_eq!(steps, "lookup:0 lookup:1 readdirplus:0 readdirplus:0 = 1");
}

/// `cat` of a cell that is not its row's first: the row's lookup read
/// the row whole (it is small), which answers the family's lookup, the
/// cell's and the open.
#[test]
fn cat_of_a_cell_after_others() {
    let t = table();
    t.mutate("set r g:d one\nset r g:e two\n").unwrap();
    let steps = cat(&t, &[b"t", b"r", b"g", b"e"], b"two");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 lookup:0 open:0 read:0 release:0 = 1"
    );
}

/// A row too large to be read whole by its lookup (more columns, or more
/// bytes, than that read returns): the family's lookup reads the family
/// (whole, if it is small), the cell's read answers the open; a name the
/// partial read did not return is read, never taken to be missing.
#[test]
fn cat_in_a_row_too_large_to_read_whole() {
    let t = table();
    let many: String = (0..70).map(|i| format!("set r f:q{i:02} v\n")).collect();
    t.mutate(&many).unwrap();
    t.mutate("set r g:d one\nset r g:e two\n").unwrap();
    let steps = cat(&t, &[b"t", b"r", b"g", b"e"], b"two");
    assert_eq!(
        steps, "lookup:0 lookup:1 lookup:1 lookup:0 open:0 read:0 release:0 = 2",
        "the family's read is whole"
    );
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    let steps = cat(&t, &[b"t", b"r", b"f", b"q69"], b"v");
    assert_eq!(
        steps, "lookup:0 lookup:1 lookup:0 lookup:1 open:0 read:0 release:0 = 2",
        "the row's read shows the family, not the cell past its end"
    );
    // Values past the read's bytes.
    let big = "x".repeat(20 << 10);
    t.mutate(format!("set s f:a {big}\nset s f:b two\n"))
        .unwrap();
    let steps = cat(&t, &[b"t", b"s", b"f", b"b"], b"two");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 lookup:1 open:0 read:0 release:0 = 2"
    );
}

/// What a lookup answers from the row memo is the mount's own latest
/// write: a write drops what the memo keeps of its row.
#[test]
fn the_memo_follows_the_mounts_writes() {
    let t = table();
    t.ino("/t/r/f/c").unwrap();
    t.put("/t/r/f/c", b"longer value", TRUNC).unwrap();
    let ino = t.ino("/t/r/f/c").unwrap();
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 12);
    t.ino("/t/r").unwrap();
    t.unlink("/t/r/f/c").unwrap();
    assert_eq!(t.ino("/t/r/f/c"), Err(Errno::ENOENT));
}

/// A name the row's whole read did not return is missing without a call,
/// and found as soon as any writer adds it: through the mount, a `.mutate`
/// batch, or a writer the mount is told of (gRPC, another daemon).
#[test]
fn a_name_the_whole_row_lacked_is_found_once_written() {
    let t = table();
    let calls = t.fs.ctx().data.store_calls();
    let missing = |path: &str| {
        let before = calls.tablet_calls();
        assert_eq!(t.ino(path), Err(Errno::ENOENT), "{path}");
        calls.tablet_calls() - before
    };
    assert_eq!(missing("/t/r/f/a"), 1, "the row's read");
    assert_eq!(missing("/t/r/g"), 0, "the row was read whole");
    assert_eq!(missing("/t/r/f/b"), 0);
    t.mutate("set r f:a one\n").unwrap();
    assert_eq!(t.get("/t/r/f/a").unwrap(), b"one");
    assert_eq!(missing("/t/r/f/b"), 0, "read whole again");
    let m = RowMutation::new(b"r".to_vec()).set("f", b"b".to_vec(), b"two".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    assert_eq!(t.get("/t/r/f/b").unwrap(), b"two");
    assert_eq!(missing("/t/r/g/d"), 0);
    t.mkdir("/t/r/g").unwrap();
    t.put("/t/r/g/d", b"three", TRUNC).unwrap();
    assert_eq!(t.get("/t/r/g/d").unwrap(), b"three");
}

/// A write of a cell in a new row as `bigtable-bench fs` and `mkdir -p
/// t/n/f && echo x > t/n/f/q` make it: the open finds no row, so the row
/// and the family are made, and the open tried again creates the cell.
/// The lookup before the mkdir and the names under the row made are
/// answered without a read: the failed open's lookup read the row empty.
#[test]
fn echo_into_a_new_row() {
    let t = table();
    let mut m = Meter::new(&t);
    let tbl = walk(&t, &mut m, &[b"t"]).unwrap();
    assert_eq!(t.fs.lookup(tbl, b"n").err(), Some(Errno::ENOENT));
    m.step("lookup");
    // mkdir(2) looks the name up again: an exclusive create revalidates
    // even a negative entry (docs/mount.md, "FUSE requests per new file").
    assert_eq!(t.fs.lookup(tbl, b"n").err(), Some(Errno::ENOENT));
    m.step("lookup");
    let row =
        t.fs.mkdir(&t.root, tbl, b"n", 0o755, 0o022)
            .unwrap()
            .attr
            .ino
            .0;
    m.step("mkdir");
    // The mkdir marked the table's attributes stale in the kernel: the
    // next walk's permission check asks for them.
    t.fs.getattr(tbl, None).unwrap();
    m.step("getattr");
    assert_eq!(t.fs.lookup(row, b"f").err(), Some(Errno::ENOENT));
    m.step("lookup");
    let fam =
        t.fs.mkdir(&t.root, row, b"f", 0o755, 0o022)
            .unwrap()
            .attr
            .ino
            .0;
    m.step("mkdir");
    t.fs.getattr(row, None).unwrap();
    m.step("getattr");
    assert_eq!(t.fs.lookup(fam, b"q").err(), Some(Errno::ENOENT));
    m.step("lookup");
    let fh =
        t.fs.create(&t.root, fam, b"q", TRUNC | libc::O_CREAT)
            .unwrap()
            .1
            .fh;
    m.step("create");
    write_and_close(&t, &mut m, fh);
    let steps = m.done("echo into a new row");
    assert_eq!(t.get("/t/n/f/q").unwrap(), b"x\n");
    assert_eq!(
        steps,
        "lookup:0 lookup:1 lookup:0 mkdir:0 getattr:0 lookup:0 mkdir:0 getattr:0 lookup:0 create:0 write:0 flush:1 release:0 = 2"
    );
    assert_eq!(t.mkdir("/t/n"), Err(Errno::EEXIST));
    assert_eq!(t.mkdir("/t/n/f"), Err(Errno::EEXIST));
    // A row read empty a moment ago and made since is no longer new.
    assert_eq!(t.ino("/t/m"), Err(Errno::ENOENT));
    t.mkdir("/t/m").unwrap();
    assert_eq!(t.mkdir("/t/m"), Err(Errno::EEXIST));
    t.mkdir("/t/m/f").unwrap();
    assert_eq!(t.mkdir("/t/m/f"), Err(Errno::EEXIST));
}

/// `cat` of a cell just written: the kernel kept the names, but asks again
/// for the attributes of the family (a create in it) and of the cell (a
/// write), which the write's reply answers.
#[test]
fn cat_after_echo() {
    let t = table();
    let fam = t.ino("/t/r/f").unwrap();
    let fh =
        t.fs.create(&t.root, fam, b"new", TRUNC | libc::O_CREAT)
            .unwrap();
    let ino = fh.0.attr.ino.0;
    let mut m = Meter::new(&t);
    write_and_close(&t, &mut m, fh.1.fh);
    t.fs.getattr(fam, None).unwrap();
    m.step("getattr");
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 2);
    m.step("getattr");
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    m.step("open");
    t.fs.release(fh).unwrap();
    m.step("release");
    let steps = m.done("cat after echo");
    assert_eq!(
        steps,
        "write:0 flush:1 release:0 getattr:0 getattr:0 open:1 release:0 = 2"
    );
}

/// A cell read again once the row memo dropped what the write left (the
/// sequential read of `bigtable-bench fs`, 100 ms and more after its
/// writes): the family's getattr (the kernel asks after a create in it)
/// reads its first cell, which answers the cell's getattr and the open;
/// and a cell whose attributes alone the kernel dropped (reads from
/// memory): its getattr's read answers the open.
#[test]
fn cat_later() {
    let t = table();
    let fam = t.ino("/t/r/f").unwrap();
    let ino = t.ino("/t/r/f/c").unwrap();
    t.fs.ctx().data.table_changed_elsewhere("t");
    let mut m = Meter::new(&t);
    t.fs.getattr(fam, None).unwrap();
    m.step("getattr");
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    open_and_read(&t, &mut m, ino, b"hello");
    assert_eq!(
        m.done("cat later"),
        "getattr:1 getattr:0 open:0 release:0 = 1"
    );
    t.fs.ctx().data.table_changed_elsewhere("t");
    let mut m = Meter::new(&t);
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    open_and_read(&t, &mut m, ino, b"hello");
    assert_eq!(m.done("cat from memory"), "getattr:1 open:0 release:0 = 1");
    // The value is handed out once: the next open reads.
    let mut m = Meter::new(&t);
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    m.step("open");
    t.fs.release(fh).unwrap();
    assert_eq!(m.done("cat again"), "open:1 = 1");
}

/// New rows written in key order, as `bigtable-bench fs` and a loader
/// write them: the first one's lookup finds no row up to the table's next
/// one (or its tablet's end), so the lookups of those after it need no
/// call, and each new row after the first is its commit alone.
#[test]
fn new_rows_in_key_order_are_one_call_each() {
    let t = table();
    let calls = t.fs.ctx().data.store_calls();
    let rows = ["n1", "n2", "n3", "p"];
    let mut costs = Vec::new();
    for row in rows {
        let before = calls.tablet_calls();
        // The failed open, the mkdirs, the open again.
        assert_eq!(t.ino(&format!("/t/{row}/f/q")), Err(Errno::ENOENT));
        t.mkdir(&format!("/t/{row}")).unwrap();
        t.mkdir(&format!("/t/{row}/f")).unwrap();
        t.put(&format!("/t/{row}/f/q"), row.as_bytes(), TRUNC)
            .unwrap();
        costs.push(calls.tablet_calls() - before);
    }
    assert_eq!(costs, [2, 1, 1, 1]);
    for row in rows {
        assert_eq!(t.get(&format!("/t/{row}/f/q")).unwrap(), row.as_bytes());
    }
    // Past the next row that exists (`r`), a lookup reads again.
    assert_eq!(missing(&t, "/t/s"), 1);
    assert_eq!(missing(&t, "/t/q"), 0, "between p and r");
}

/// The tablet-server calls of a lookup of `path` that finds nothing.
fn missing(t: &T, path: &str) -> u64 {
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    assert_eq!(t.ino(path), Err(Errno::ENOENT), "{path}");
    calls.tablet_calls() - before
}

/// A row a lookup read empty answers the next lookups ENOENT without a
/// read, until a write to it by any way in: through the mount, a
/// `.mutate` batch, a writer the mount is told of (the gRPC API, another
/// daemon's invalidation), an operator's command. A memo of absence kept
/// past any of these fails here.
#[test]
fn a_missing_row_is_found_as_soon_as_it_is_written() {
    let t = table();
    assert_eq!(missing(&t, "/t/a"), 1);
    assert_eq!(missing(&t, "/t/a"), 0, "the row was read empty");
    assert_eq!(missing(&t, "/t/a/f/q"), 0);
    // Through the mount (the kernel's lookup before the mkdir answers
    // from the memo; the mkdir leaves the row pending, then the commit).
    t.mkdir("/t/a").unwrap();
    t.mkdir("/t/a/f").unwrap();
    t.put("/t/a/f/q", b"one", TRUNC).unwrap();
    assert_eq!(t.get("/t/a/f/q").unwrap(), b"one");
    // A `.mutate` batch. (The lookup of `a` found no row up to `r`, the
    // table's only one: the write of `a` left the rest of that range.)
    assert_eq!(missing(&t, "/t/b"), 0, "in the range a's lookup saw absent");
    t.mutate("set b f:q two\n").unwrap();
    assert_eq!(t.get("/t/b/f/q").unwrap(), b"two");
    // A writer the mount is told of.
    assert_eq!(missing(&t, "/t/c"), 0);
    let m = RowMutation::new(b"c".to_vec()).set("f", b"q".to_vec(), b"three".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"c"]);
    assert_eq!(t.get("/t/c/f/q").unwrap(), b"three");
    // A table-wide change another daemon reports, and an operator's
    // command (`restore`, an undelete).
    // (Each drops every range: `e` is read again.)
    for (row, drop, calls) in [("d", 0, 0), ("e", 1, 1)] {
        assert_eq!(missing(&t, &format!("/t/{row}")), calls);
        let m = RowMutation::new(row.as_bytes().to_vec()).set("f", b"q".to_vec(), b"v".to_vec());
        t.store.apply("t", &m, WriteOptions::default()).unwrap();
        if drop == 0 {
            t.fs.table_changed_elsewhere("t");
        } else {
            let _ = t.fs.ctx().data.store().control("restore t snap");
        }
        assert_eq!(t.get(&format!("/t/{row}/f/q")).unwrap(), b"v", "{row}");
    }
    // A write no invalidation reports is found once the memo expires.
    assert_eq!(missing(&t, "/t/g"), 1);
    let m = RowMutation::new(b"g".to_vec()).set("f", b"q".to_vec(), b"w".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    let start = std::time::Instant::now();
    let deadline = start + crate::row_memo::MEMO_TTL * 20;
    while t.ino("/t/g") == Err(Errno::ENOENT) {
        assert!(
            std::time::Instant::now() < deadline,
            "a row written {:?} ago is still missing",
            start.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(t.get("/t/g/f/q").unwrap(), b"w");
}

/// A reader's open of `ino` and a READ whose reply fills the kernel's
/// pages (a cold `cat`, or one whose pages the kernel dropped), then the
/// release: the value, and the calls the open made.
fn open_and_fill(t: &T, ino: u64) -> Result<(Vec<u8>, u64), Errno> {
    let calls = t.fs.ctx().data.store_calls();
    let before = calls.tablet_calls();
    let o = t.fs.open(&t.root, ino, libc::O_RDONLY)?;
    let opened = calls.tablet_calls() - before;
    let got = std::sync::Arc::new(parking_lot::Mutex::new(None));
    let put = got.clone();
    t.fs.read_then(
        &t.root,
        o.fh,
        0,
        4096,
        false,
        !o.direct_io,
        Box::new(move |r| *put.lock() = Some(r)),
    );
    t.fs.release(o.fh)?;
    let value = got.lock().take().expect("the read was answered")?;
    Ok((value, opened))
}

/// A warm re-read as the kernel sends it (OPEN and RELEASE: its pages
/// answer the reads): the calls it made, and whether the open kept them.
fn reread(t: &T, ino: u64) -> (u64, bool) {
    let mut m = Meter::new(t);
    let o = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap();
    m.step("open");
    t.fs.release(o.fh).unwrap();
    m.step("release");
    let calls = m.steps.iter().map(|(_, n)| n).sum();
    m.done("re-read");
    (calls, o.keep_cache && !o.direct_io)
}

fn set_cell(t: &T, row: &[u8], family: &str, value: &[u8]) {
    let m = RowMutation::new(row.to_vec()).set(family, b"c".to_vec(), value.to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
}

/// `cat` of a cell whose pages the kernel holds, from the version an open
/// found newest, with no write to its row since: no call at all. A READ
/// on such an open (the kernel dropped the pages meanwhile) reads the
/// version it opened.
#[test]
fn a_reread_makes_no_call() {
    let t = table();
    let ino = t.ino("/t/r/f/c").unwrap();
    assert_eq!(open_and_fill(&t, ino).unwrap().0, b"hello");
    let mut m = Meter::new(&t);
    let o = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap();
    assert!(o.keep_cache && !o.direct_io, "the pages are kept");
    m.step("open");
    t.fs.release(o.fh).unwrap();
    m.step("release");
    assert_eq!(m.done("re-read"), "open:0 release:0 = 0");
    let fh = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap().fh;
    assert_eq!(
        t.fs.getattr(ino, Some(fh)).unwrap().0.size,
        5,
        "its size before any read"
    );
    assert_eq!(t.fs.read(fh, 0, 4096).unwrap(), b"hello");
    t.fs.release(fh).unwrap();
    assert_eq!(t.fs.ctx().open.pages().reopens(), 2);
}

/// A stat of a cell an open found newest, once the row memo dropped the
/// row's read (`cat` after its pages were dropped: the READ makes the
/// kernel ask for the atime at the next `fstat`): answered from that
/// version while nothing wrote the row, read again once something did.
#[test]
fn a_stat_of_a_cell_opened_earlier_makes_no_call() {
    let t = table();
    let ino = t.ino("/t/r/f/c").unwrap();
    assert_eq!(open_and_fill(&t, ino).unwrap().0, b"hello");
    let Node::Cell(c) = &*t.fs.ctx().kernel.node(ino).unwrap() else {
        panic!("not a cell")
    };
    // What 100 ms later would be: the memo no longer holds the row.
    t.fs.ctx().data.memo_expired();
    assert_eq!(
        t.fs.ctx().data.known_cell(c),
        crate::row_memo::Known::Unknown
    );
    let mut m = Meter::new(&t);
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 5);
    m.step("getattr");
    assert_eq!(m.done("stat later"), "getattr:0 = 0");
    // A write to the row: the stat reads the new value.
    set_cell(&t, b"r", "f", b"hello, world");
    t.fs.ctx().data.rows_changed_elsewhere("t", &[b"r"]);
    let mut m = Meter::new(&t);
    assert_eq!(t.fs.getattr(ino, None).unwrap().0.size, 12);
    m.step("getattr");
    assert_eq!(m.done("stat after a write"), "getattr:1 = 1");
}

/// An open on the kernel's pages whose pages the kernel has since dropped
/// (memory pressure, `drop_caches`): its READ takes the value the family's
/// listing just read, if it is the version opened, instead of a call.
#[test]
fn a_read_of_dropped_pages_takes_the_listed_value() {
    let t = table();
    let ino = t.ino("/t/r/f/c").unwrap();
    assert_eq!(open_and_fill(&t, ino).unwrap().0, b"hello");
    // A listing of the family (a scan) keeps its values.
    let fam = t.ino("/t/r/f").unwrap();
    let mut offset = 0;
    loop {
        let mut got = Vec::new();
        t.fs.readdir_unopened(&t.root, fam, offset, true, &mut |e: &DirOut<'_>| {
            got.push(e.offset);
            false
        })
        .unwrap();
        let Some(last) = got.last() else { break };
        offset = *last;
    }
    let mut m = Meter::new(&t);
    let reopens = t.fs.ctx().open.pages().reopens();
    let o = t.fs.open(&t.root, ino, libc::O_RDONLY).unwrap();
    assert_eq!(
        t.fs.ctx().open.pages().reopens(),
        reopens + 1,
        "opened on the pages"
    );
    m.step("open");
    assert_eq!(t.fs.read(o.fh, 0, 4096).unwrap(), b"hello");
    m.step("read");
    t.fs.release(o.fh).unwrap();
    m.step("release");
    assert_eq!(
        m.done("read of dropped pages"),
        "open:0 read:0 release:0 = 0"
    );
}

/// A value longer than a page is re-read with its call: a READ of pages
/// the kernel dropped must come from the version the others came from.
#[test]
fn a_reread_of_a_value_longer_than_a_page_reads() {
    let t = table();
    let long = vec![b'x'; 4097];
    set_cell(&t, b"r", "f", &long);
    let ino = t.ino("/t/r/f/c").unwrap();
    let (got, _) = open_and_fill(&t, ino).unwrap();
    assert_eq!(got.len(), 4096, "the first page");
    assert_eq!(reread(&t, ino), (1, true));
    // One page exactly still opens on the pages.
    set_cell(&t, b"s", "f", &long[..4096]);
    let ino = t.ino("/t/s/f/c").unwrap();
    open_and_fill(&t, ino).unwrap();
    assert_eq!(reread(&t, ino), (0, true));
}

/// Each way a cell's row is written that reaches this daemon ends the
/// re-reads on pages: the next open reads the new value, and the one after
/// it opens on the pages again. (A re-read that skipped the call after
/// one of these writes would read the version it opened: the old value.)
#[test]
fn a_reread_after_a_write_reads_the_new_value() {
    let t = table();
    let ino = t.ino("/t/r/f/c").unwrap();
    open_and_fill(&t, ino).unwrap();
    assert_eq!(reread(&t, ino), (0, true));
    let expect = |t: &T, value: &[u8], how: &str| {
        let (got, calls) = open_and_fill(t, ino).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(value),
            "after a write {how}"
        );
        assert_eq!(calls, 1, "the open after a write {how} reads");
        // The kernel asks again for the attributes the change dropped,
        // and reads through its cache once more.
        t.fs.getattr(ino, None).unwrap();
        open_and_fill(t, ino).unwrap();
        assert_eq!(reread(t, ino), (0, true), "then re-reads on pages ({how})");
    };
    t.put("/t/r/f/c", b"two", TRUNC).unwrap();
    expect(&t, b"two", "through the mount");
    t.mutate("set r f:c three\n").unwrap();
    expect(&t, b"three", "in a .mutate batch");
    // The gRPC API, another daemon's invalidation.
    set_cell(&t, b"r", "f", b"four");
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    expect(&t, b"four", "the mount is told of");
    // Another cell of the row: invalidations name rows.
    t.mutate("set r g:d other\n").unwrap();
    assert_eq!(reread(&t, ino).0, 1, "a write to the row reads again");
    set_cell(&t, b"r", "f", b"five");
    t.fs.table_changed_elsewhere("t");
    expect(
        &t,
        b"five",
        "to the whole table (a schema change, a lost lease)",
    );
    set_cell(&t, b"r", "f", b"six");
    let _ = t.fs.ctx().data.store().control("restore t snap");
    expect(&t, b"six", "by an operator's command (restore, undelete)");
    // Removed the same ways: the open finds no cell.
    let m = RowMutation::new(b"r".to_vec()).delete_row();
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r"]);
    assert_eq!(
        t.fs.open(&t.root, ino, libc::O_RDONLY).err(),
        Some(Errno::ENOENT)
    );
}

/// A family whose garbage collection may take a column's newest version
/// by age: it goes with no write, and no daemon is told, so every open
/// of its cells reads. A rule that always keeps the newest version
/// (an age limit only on older ones) re-reads on pages.
#[test]
fn a_reread_of_a_cell_that_may_expire_reads() {
    let t = table();
    let append = libc::O_WRONLY | libc::O_APPEND;
    t.put(
        "/t/.schema",
        b"e max_age=1h\nk max_versions=1 max_age=1h gc=intersection\n",
        append,
    )
    .unwrap();
    t.mutate("set r e:c aging\nset r k:c kept\n").unwrap();
    let e = t.ino("/t/r/e/c").unwrap();
    let k = t.ino("/t/r/k/c").unwrap();
    assert_eq!(open_and_fill(&t, e).unwrap().0, b"aging");
    assert_eq!(open_and_fill(&t, k).unwrap().0, b"kept");
    assert_eq!(reread(&t, e), (1, true), "it may have expired: read");
    assert_eq!(reread(&t, k), (0, true), "the newest stays");
    // The collection, as a tablet server makes it: no one is told.
    let m =
        RowMutation::new(b"r".to_vec()).delete_cells("e", b"c".to_vec(), engine::TimeRange::ALL);
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    assert_eq!(
        t.fs.open(&t.root, e, libc::O_RDONLY).err(),
        Some(Errno::ENOENT),
        "a collected cell is gone at the next open"
    );
}

/// While other daemons' writes are not known to reach this one (a lease
/// at one of them ran out, or was never had), every open reads: a write
/// no invalidation reported is seen at the next open.
#[test]
fn a_reread_without_leases_reads() {
    use std::time::{Duration, Instant};
    let t = table();
    let ino = t.ino("/t/r/f/c").unwrap();
    open_and_fill(&t, ino).unwrap();
    t.fs.writes_reported_until(Instant::now() + Duration::from_secs(600));
    assert_eq!(reread(&t, ino), (0, true), "leases held");
    t.fs.writes_reported_until(Instant::now());
    assert_eq!(reread(&t, ino), (1, true), "leases ended");
    set_cell(&t, b"r", "f", b"unreported");
    assert_eq!(open_and_fill(&t, ino).unwrap().0, b"unreported");
}
