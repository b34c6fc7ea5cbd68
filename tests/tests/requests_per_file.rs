#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The FUSE requests one file costs through a real mount, kind by kind and
//! system call by system call, for the writes `bigtable-bench fs` makes
//! (docs/mount.md, "FUSE requests per new file", lists them and the kernel
//! code that sends each). Counted from the console's `/metrics`, which the
//! daemon answers without a FUSE request, so the counting adds none.
//!
//! These are the counts of Linux 6.18: a kernel that sends one request
//! more or fewer fails this test, and so does a daemon change that makes
//! the kernel ask again (a shorter attribute or entry lifetime, a reply
//! that invalidates a parent).

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::time::Duration;
use tests::{http_get, wait_until, Mount};

type Counts = BTreeMap<String, u64>;

/// One test of this file at a time: a sibling test that starts a process
/// (its daemon, `ls`, `find`) forks this one, and the child's exec closes
/// every descriptor it inherited, so a file this test holds open gets a
/// FLUSH it did not make.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// FUSE requests answered so far, by kind, from `/metrics` (forgets left
/// out: the kernel sends them when it drops a name, at a time of its own),
/// once the daemon holds `held` open files, the test's (the RELEASE of an
/// earlier close has come).
fn counts(addr: &str, held: usize) -> Counts {
    let mut body = String::new();
    let gauge = format!("bigtable_fs_open_handles {held}");
    let settled = wait_until(Duration::from_secs(20), || {
        let (code, text) = http_get(addr, "/metrics");
        assert_eq!(code, 200, "{text}");
        body = text;
        body.lines().any(|l| l.trim() == gauge)
    });
    assert!(settled, "not {held} open files:\n{body}");
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("bigtable_fuse_operations_total{operation=\"")?;
            let (op, value) = rest.split_once("\"}")?;
            Some((op.to_string(), value.trim().parse().ok()?))
        })
        .filter(|(op, _)| op != "forget" && op != "batch_forget")
        .collect()
}

/// The requests since `before` (kinds that made none left out).
fn since(now: &Counts, before: &Counts) -> Counts {
    now.iter()
        .map(|(op, n)| (op.clone(), n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn want(kinds: &[(&str, u64)]) -> Counts {
    kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

/// Runs `step`, which leaves the test holding `held` files open, before
/// and after, and checks the requests it made against `expected` (a
/// close's RELEASE reaches the daemon after close returns: the kernel does
/// not wait for it, and [`counts`] does).
fn check(addr: &str, what: &str, held: [usize; 2], expected: &[(&str, u64)], step: impl FnOnce()) {
    let before = counts(addr, held[0]);
    step();
    let after = counts(addr, held[1]);
    assert_eq!(since(&after, &before), want(expected), "{what}");
}

fn open_for_write(path: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// A close whose error (the commit's) is reported.
fn close(f: std::fs::File) {
    use std::os::fd::IntoRawFd;
    nix::unistd::close(f.into_raw_fd()).unwrap();
}

/// One new row written as `bigtable-bench fs` writes it: the open fails,
/// then the row and family are made, then the open again, the write, the
/// close; each system call's requests checked.
fn new_row(m: &Mount, addr: &str, row: &str) {
    let (dir, fam, cell) = (
        m.path(&format!("t/{row}")),
        m.path(&format!("t/{row}/f")),
        m.path(&format!("t/{row}/f/q")),
    );
    // The walk finds no row: one LOOKUP answered ENOENT.
    check(addr, "failed open", [0, 0], &[("lookup", 1)], || {
        let e = open_for_write(&cell).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    });
    // mkdir looks the name up again (an exclusive create revalidates
    // even a cached negative entry), then makes it.
    check(
        addr,
        "mkdir row",
        [0, 0],
        &[("lookup", 1), ("mkdir", 1)],
        || std::fs::create_dir(&dir).unwrap(),
    );
    // The table's attributes were dropped by the mkdir in it: the walk's
    // permission check asks for them (GETATTR) before the lookup.
    check(
        addr,
        "mkdir family",
        [0, 0],
        &[("getattr", 1), ("lookup", 1), ("mkdir", 1)],
        || std::fs::create_dir(&fam).unwrap(),
    );
    // The same for the row; then the new name's lookup and the create.
    let mut file = None;
    check(
        addr,
        "create",
        [0, 1],
        &[("getattr", 1), ("lookup", 1), ("create", 1)],
        || file = Some(open_for_write(&cell).unwrap()),
    );
    let mut file = file.unwrap();
    check(addr, "write", [1, 1], &[("write", 1)], || {
        file.write_all(&[b'v'; 1000]).unwrap()
    });
    check(
        addr,
        "close",
        [1, 0],
        &[("flush", 1), ("release", 1)],
        || close(file),
    );
}

/// An overwrite of `t/{row}/f/q` as the random write makes it (open with
/// O_TRUNC, write, close), with the requests `expected`.
fn overwrite(m: &Mount, addr: &str, row: &str, what: &str, expected: &[(&str, u64)]) {
    let cell = m.path(&format!("t/{row}/f/q"));
    check(addr, what, [0, 0], expected, || {
        let mut f = open_for_write(&cell).unwrap();
        f.write_all(&[b'w'; 1000]).unwrap();
        close(f);
    });
}

#[test]
fn a_new_file_costs_the_requests_the_docs_list() {
    let _turn = turn();
    let m = Mount::with_options(&["http=127.0.0.1:0"]);
    m.table("t", "f\n");
    let addr = m.console_addr();
    // A first row, unmeasured: the kernel learns the table's attributes.
    std::fs::create_dir_all(m.path("t/r0/f")).unwrap();
    tests::write_and_close(&m.path("t/r0/f/q"), b"first").unwrap();
    // Sequential write, a new row: 12 requests.
    new_row(&m, &addr, "r1");
    // Random write over a cell: the truncation of an existing file asks
    // for security.capability (the kernel's, before it removes privileges);
    // the family's attributes, dropped by the create in it, are asked for
    // once.
    overwrite(
        &m,
        &addr,
        "r1",
        "first overwrite",
        &[
            ("getattr", 1),
            ("open", 1),
            ("getxattr", 1),
            ("write", 1),
            ("flush", 1),
            ("release", 1),
        ],
    );
    overwrite(
        &m,
        &addr,
        "r1",
        "overwrite",
        &[
            ("open", 1),
            ("getxattr", 1),
            ("write", 1),
            ("flush", 1),
            ("release", 1),
        ],
    );
    assert_eq!(m.ok("cat t/r1/f/q"), "w".repeat(1000));
}

/// The tablet-server calls of each system call of a new row written as
/// `bigtable-bench fs` writes it (failed open, mkdir of the row, of the
/// family, open, write, close): the failed open's lookup reads the row
/// empty (unless a lookup of a row before it saw the range it is in
/// absent), which answers mkdir's lookup and the names under the row
/// made; then the commit (docs/mount.md, "Server calls per file
/// operation").
fn new_row_calls(m: &Mount, row: &str) -> Vec<u64> {
    let (dir, fam, cell) = (
        m.path(&format!("t/{row}")),
        m.path(&format!("t/{row}/f")),
        m.path(&format!("t/{row}/f/q")),
    );
    let mut out = Vec::new();
    let mut last = m.stat("store_tablet_calls");
    let mut step = |out: &mut Vec<u64>| {
        let now = m.stat("store_tablet_calls");
        out.push(now - last);
        last = now;
    };
    let e = open_for_write(&cell).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    step(&mut out);
    std::fs::create_dir(&dir).unwrap();
    step(&mut out);
    std::fs::create_dir(&fam).unwrap();
    step(&mut out);
    let mut file = open_for_write(&cell).unwrap();
    step(&mut out);
    file.write_all(&[b'v'; 1000]).unwrap();
    step(&mut out);
    close(file);
    step(&mut out);
    out
}

#[test]
fn a_new_row_costs_its_commit_once_a_lookup_saw_its_range_absent() {
    let _turn = turn();
    let m = Mount::new();
    m.table("t", "f\n");
    std::fs::create_dir_all(m.path("t/r0/f")).unwrap();
    tests::write_and_close(&m.path("t/r0/f/q"), b"first").unwrap();
    let tries: Vec<Vec<u64>> = (1..=4)
        .map(|i| new_row_calls(&m, &format!("n{i}")))
        .collect();
    // The first new row's failed open reads the row, and learns that no
    // row exists from it up to `r0`.
    assert_eq!(tries[0][0], 1, "the first row's failed open");
    // The next ones are in that range: the commit alone. The fewest calls
    // of three tries (a step that a loaded machine stalled past the row
    // memo's 100 ms reads once more).
    let best = tries[1..]
        .iter()
        .min_by_key(|c| c.iter().sum::<u64>())
        .unwrap();
    assert_eq!(
        best,
        &[0, 0, 0, 0, 0, 1],
        "failed open, mkdirs, open, write, close"
    );
    assert_eq!(m.ok("cat t/n4/f/q"), "v".repeat(1000));
}

/// A counter of `/metrics` (0 when absent).
fn metric(addr: &str, name: &str) -> u64 {
    let (code, text) = http_get(addr, "/metrics");
    assert_eq!(code, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// A mount with its console, holding 20 rows `t/rNN/f/q` of 1000 bytes
/// made with one `.mutate` batch, their names then looked up (as
/// `bigtable-bench fs`'s reads before its scan leave them in the kernel):
/// the mount, the console's address, the rows.
fn twenty_rows() -> (Mount, String, Vec<String>) {
    let m = Mount::with_options(&["http=127.0.0.1:0"]);
    let addr = m.console_addr();
    m.table("t", "f\n");
    let names: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
    let batch: String = names
        .iter()
        .map(|r| format!("set {r} f:q {}\n", "v".repeat(1000)))
        .collect();
    m.mutate("t", batch.as_bytes());
    for r in &names {
        std::fs::metadata(m.path(&format!("t/{r}/f/q"))).unwrap();
    }
    (m, addr, names)
}

/// What `walk` cost: its requests, and the tablet-server calls of the
/// listings and of the opens (the mount's first OPENDIR, declined for
/// good, spent before).
fn walk_cost(m: &Mount, addr: &str, walk: impl FnOnce()) -> (Counts, u64, u64) {
    const LISTINGS: &str = "bigtable_fs_calls_readdirplus_total";
    const OPENS: &str = "bigtable_fs_calls_open_total";
    std::fs::read_dir(m.path("")).unwrap().for_each(drop);
    let before = counts(addr, 0);
    let (listings, opens) = (metric(addr, LISTINGS), metric(addr, OPENS));
    walk();
    let got = since(&counts(addr, 0), &before);
    let listings = metric(addr, LISTINGS) - listings;
    let opens = metric(addr, OPENS) - opens;
    println!("{got:?}; calls: listings {listings}, opens {opens}");
    (got, listings, opens)
}

/// Each open comes microseconds after its listing and takes the value the
/// listing read; one that a loaded machine delayed past the listing's
/// 100 ms reads the cell.
fn opens_took_the_listed_values(opens: u64, n: u64) {
    assert!(opens < n / 2, "{opens} of {n} opens read the cell");
}

/// The scan of `bigtable-bench fs`: the table listed, then each row's
/// family, every cell opened and read. Each file is 4 requests (the
/// family's READDIRPLUS, the empty one that ends its listing, OPEN,
/// RELEASE); the family's listing reads the cells with their values (or
/// takes them from its row's whole read a moment ago), and each open takes
/// its value from it: at most one tablet-server call a file.
#[test]
fn a_scanned_file_costs_four_requests_and_one_call() {
    let _turn = turn();
    let (m, addr, rows) = twenty_rows();
    let n = rows.len() as u64;
    let (got, listings, opens) = walk_cost(&m, &addr, || {
        let mut listed = Vec::new();
        for e in std::fs::read_dir(m.path("t")).unwrap() {
            listed.push(e.unwrap().file_name().into_string().unwrap());
        }
        listed.retain(|n| !n.starts_with('.'));
        listed.sort();
        assert_eq!(listed, rows);
        for r in &rows {
            for e in std::fs::read_dir(m.path(&format!("t/{r}/f"))).unwrap() {
                let v = std::fs::read(e.unwrap().path()).unwrap();
                assert_eq!(v, "v".repeat(1000).as_bytes());
            }
        }
    });
    // The table's listing: one READDIRPLUS with its rows, one empty.
    assert_eq!(
        got,
        want(&[("open", n), ("readdirplus", 2 * n + 2), ("release", n)]),
        "requests of the scan of {n} files"
    );
    // The table's scan, and a read of each family, unless the lookup of
    // its row a moment ago (`twenty_rows`) read the row whole: then that
    // read answers the listing.
    assert!(
        (1..=n + 1).contains(&listings),
        "{listings} listing calls: at most a read of each family and the table's scan"
    );
    opens_took_the_listed_values(opens, n);
}

/// `grep -r` lists each row, then its family, then opens each cell: the
/// row's listing reads the row's cells, which answer the family's listing
/// and the opens (one call a row where it was three).
#[test]
fn a_walk_reads_each_row_once() {
    let _turn = turn();
    let (m, addr, rows) = twenty_rows();
    let n = rows.len() as u64;
    let (got, listings, opens) = walk_cost(&m, &addr, || {
        let o = m.sh("grep -r zzz t");
        assert_eq!(o.status.code(), Some(1), "nothing matches: {o:?}");
    });
    // The rows' cells, and `.schema` and `.mutate`.
    assert_eq!(got.get("open"), Some(&(n + 2)), "{got:?}");
    // The table's scan and each row's read; a family listed more than
    // 100 ms after its row's (a loaded machine) reads.
    assert!(
        listings < n + 1 + n / 2,
        "{listings} listing calls for {n} rows"
    );
    opens_took_the_listed_values(opens, n);
}

/// `ls -l` asks for every entry's security label and access ACL (and a
/// directory's default ACL); the mount keeps no such names and says
/// ENOTSUP, which `ls` remembers for the whole mount: one GETXATTR of
/// each kind a listing instead of two or three an entry. The mount's own
/// `user.` names are still there.
#[test]
fn ls_l_asks_for_acls_and_labels_once() {
    let _turn = turn();
    let (m, addr, rows) = twenty_rows();
    let xattrs = |script: &str| {
        let before = counts(&addr, 0);
        let out = m.ok(script);
        let got = since(&counts(&addr, 0), &before);
        println!("{script}: {got:?}");
        (out, got.get("getxattr").copied().unwrap_or(0))
    };
    let (out, asked) = xattrs("ls -l t");
    assert_eq!(
        out.lines().filter(|l| l.starts_with('d')).count(),
        rows.len()
    );
    assert!(
        asked <= 3,
        "ls -l of {} rows: {asked} GETXATTRs",
        rows.len()
    );
    m.ok("mkdir -p t/r00/f && for i in $(seq 20); do echo $i > t/r00/f/c$i; done");
    let (out, asked) = xattrs("ls -l t/r00/f");
    assert_eq!(out.lines().filter(|l| l.starts_with('-')).count(), 21);
    assert!(asked <= 3, "ls -l of 21 cells: {asked} GETXATTRs");
    let (label, _) = xattrs(
        "python3 -c \"import os
try: os.getxattr('t/r00/f/q', 'security.selinux')
except OSError as e: print(e.errno)\"",
    );
    assert_eq!(label.trim(), libc::ENOTSUP.to_string());
    let (key, _) = xattrs(
        "python3 -c \"import os; print(os.getxattr('t/r00/f/q', 'user.bigtable.key').decode())\"",
    );
    assert_eq!(key.trim(), "q");
}
