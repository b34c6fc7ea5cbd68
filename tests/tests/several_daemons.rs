#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Two daemons, one Bigtable: one serves (its tablet servers and master),
//! the other runs none (`tablet_servers=0`) and reaches them over the
//! internal RPC, both coordinating through one etcd. What either mount
//! writes, the other reads.

use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::etcd::Etcd;
use tests::{wait_until, LockHolder, Mount};

/// `addr=` of every serving line of `.bigtable/servers`.
fn server_addrs(m: &Mount) -> Vec<String> {
    m.servers().into_iter().map(|(_, addr)| addr).collect()
}

/// An etcd and two daemons on it: A serves, B serves nothing
/// (`tablet_servers=0`) and reaches A's servers over the internal RPC.
fn serving_and_client_only() -> (Arc<Etcd>, Mount, Mount) {
    let etcd = Arc::new(Etcd::start());
    // Daemons sharing an etcd share a secret (loopback is no boundary).
    let secret = tests::cluster_secret();
    let a = Mount::on_etcd(
        etcd.clone(),
        "/bt",
        &["cluster_listen=127.0.0.1:0", &secret.option],
    );
    let b = Mount::on_etcd(
        etcd.clone(),
        "/bt",
        &[
            "tablet_servers=0",
            "cluster_listen=127.0.0.1:0",
            &secret.option,
        ],
    );
    (etcd, a, b)
}

#[test]
fn a_client_only_daemon_reads_and_writes_what_another_serves() {
    let (_etcd, a, mut b) = serving_and_client_only();
    // B serves nothing: every server it lists is A's.
    let addrs = server_addrs(&b);
    assert_eq!(addrs.len(), 3, "{}", b.ok("cat .bigtable/servers"));
    assert_eq!(addrs, server_addrs(&a));

    // A table made and written in A is read in B...
    a.table("ta", "cf\n");
    a.ok("mkdir -p ta/r1/cf && echo from-a > ta/r1/cf/q");
    assert_eq!(b.ok("cat ta/r1/cf/q"), "from-a\n");
    // ...one made and written in B is listed and read in A.
    b.table("tb", "cf\n");
    b.ok("mkdir -p tb/r2/cf && echo from-b > tb/r2/cf/q");
    assert!(a.ok("ls").lines().any(|l| l == "tb"), "{}", a.ok("ls"));
    assert_eq!(a.ok("cat tb/r2/cf/q"), "from-b\n");
    // A batch through B is there whole in A.
    b.mutate("ta", b"set r3 cf:x one\nset r4 cf:y two\n");
    assert_eq!(a.ok("cat ta/r3/cf/x ta/r4/cf/y"), "onetwo");
    // Scans in B cross the RPC in streams.
    assert_eq!(b.ok("ls ta"), "r1\nr3\nr4\n");

    // B's daemon dies: A, which holds everything, goes on.
    b.kill9();
    a.ok("echo after > ta/r1/cf/q2");
    assert_eq!(a.ok("cat ta/r1/cf/q ta/r1/cf/q2"), "from-a\nafter\n");
}

/// A removal through a daemon that serves nothing takes its removal
/// snapshot as one through the daemon that serves does: that daemon's
/// master takes it on the store only it reaches, so `rm -r` of a table
/// there is undone by `undelete` (docs/trash.md).
#[test]
fn rm_r_in_a_client_only_daemon_is_undone_by_undelete_from_its_removal_snapshot() {
    let (_etcd, a, b) = serving_and_client_only();
    b.table("t", "f\ng\n");
    b.mutate("t", b"set r1 f:a one\nset r2 g:b two\n");
    b.ok("rm -r t");
    assert!(!b.ok("ls").lines().any(|l| l == "t"), "{}", b.ok("ls"));
    // B lists the trash from METADATA and undeletes through A's master.
    let trash = b.ok("cat .bigtable/trash");
    let id = trash
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.get(1) == Some(&"t"))
        .and_then(|w| w.first().map(|id| id.to_string()))
        .unwrap_or_else(|| panic!("no t in the trash: {trash}"));
    b.ok(&format!("echo 'undelete {id}' > .bigtable/control"));
    // It came back empty and was restored from the snapshot the first
    // unlink took: every cell is back, in both daemons.
    assert_eq!(b.ok("cat t/r1/f/a t/r2/g/b"), "onetwo");
    assert_eq!(a.ok("cat t/r1/f/a t/r2/g/b"), "onetwo");
    let snaps: Vec<String> = b
        .ok("ls t/.snapshots/")
        .lines()
        .filter(|l| l.starts_with("removed-"))
        .map(String::from)
        .collect();
    assert_eq!(snaps.len(), 1, "{}", b.ok("ls -a t/.snapshots/"));
    assert_eq!(a.ok("ls t/.snapshots/"), format!("{}\n", snaps[0]));
    let log = b.log_text();
    assert!(!log.contains("not taken"), "{log}");
    assert!(
        log.contains(&format!(
            "undelete of t: it came back empty, restored from its removal snapshot {}",
            snaps[0]
        )),
        "{log}"
    );
    // A snapshot taken, then deleted through B is gone in A too.
    b.ok("mkdir t/.snapshots/by-hand");
    assert!(a.ok("ls t/.snapshots/").lines().any(|l| l == "by-hand"));
    b.ok("rmdir t/.snapshots/by-hand");
    assert!(!a.ok("ls t/.snapshots/").lines().any(|l| l == "by-hand"));
}

#[test]
fn a_lock_held_through_one_daemon_blocks_the_other_until_its_death_and_lock_delay() {
    let etcd = Arc::new(Etcd::start());
    // Daemons sharing an etcd share a secret (loopback is no boundary).
    let secret = tests::cluster_secret();
    let mut a = Mount::on_etcd(
        etcd.clone(),
        "/bt",
        &["cluster_listen=127.0.0.1:0", &secret.option],
    );
    let b = Mount::on_etcd(
        etcd.clone(),
        "/bt",
        &[
            "tablet_servers=0",
            "cluster_listen=127.0.0.1:0",
            &secret.option,
        ],
    );
    a.ok("touch .chubby/leader && setfattr -n user.chubby.lock_delay_ms -v 4000 .chubby/leader");
    let mut holder = LockHolder::take(&a.mnt, ".chubby/leader");
    // Only a conflict exits 75 (-E): flock exits 1 on any error too, which
    // under load proved nothing about the holder and let the test go on
    // before it held the lock.
    assert!(
        wait_until(Duration::from_secs(10), || b
            .sh("flock -n -E 75 -x .chubby/leader true")
            .status
            .code()
            == Some(75)),
        "a lock taken through A never blocked B"
    );
    // Timed from the signal: A stops renewing its lease then, while the
    // wait for its exit (and the unmount after) can take seconds on a
    // loaded machine, long enough for the lease and the lock-delay to run
    // out before it returns.
    let killed = Instant::now();
    a.kill9();
    holder.kill();
    let o = b.sh("flock -w 60 -x .chubby/leader true");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A's lease (2 s) ends after the kill (how long after depends on when
    // its last keep-alive got through, which a loaded machine delays); the
    // lock-delay (4 s) counts from then, so it alone bounds the wait.
    let waited = killed.elapsed();
    assert!(
        waited >= Duration::from_millis(4000),
        "granted {waited:?} after the kill"
    );
}

/// The tablet-server calls one file operation makes (`.bigtable/stats`'
/// `store_tablet_calls`), in the daemon that serves the table and in one
/// that serves nothing (where each call crosses the internal RPC): the
/// counts docs/mount.md states ("Server calls per file operation").
#[test]
fn a_file_operation_makes_the_documented_tablet_server_calls_in_either_daemon() {
    let (_etcd, a, b) = serving_and_client_only();
    a.table("t", "cf\n");
    // Rows of two cells each, a fresh one for every measurement (nothing
    // of it in either kernel's caches).
    let rows = 48;
    let batch: String = (0..rows)
        .map(|i| format!("set r{i} cf:q v\nset r{i} cf:z w\n"))
        .collect();
    a.mutate("t", batch.as_bytes());
    let calls = |m: &Mount| -> u64 {
        m.ok("cat .bigtable/stats")
            .lines()
            .find_map(|l| l.strip_prefix("store_tablet_calls=")?.parse().ok())
            .expect("store_tablet_calls in .bigtable/stats")
    };
    // A re-read opens on the kernel's pages only while a daemon's leases
    // at the other hold (docs/coherence.md): wait until they do.
    let leases = |m: &Mount| -> u64 {
        m.ok("cat .bigtable/status")
            .split_whitespace()
            .find_map(|w| w.strip_prefix("coherence_leases=")?.parse().ok())
            .unwrap_or(0)
    };
    assert!(
        wait_until(Duration::from_secs(30), || leases(&a) >= 1
            && leases(&b) >= 1),
        "the daemons hold no leases at each other"
    );
    let mut next = 0;
    // The fewest calls of two tries on fresh rows (a path walk stalled past
    // the row memo's 100 ms by a loaded machine makes one more).
    let mut cost = |m: &Mount, script: &str| -> u64 {
        (0..2)
            .map(|_| {
                let row = format!("r{next}");
                next += 1;
                let before = calls(m);
                m.ok(&script.replace("ROW", &row));
                calls(m) - before
            })
            .min()
            .unwrap()
    };
    for (m, who) in [(&a, "serving daemon"), (&b, "client-only daemon")] {
        // `cat`: the row's lookup, which read the (small) row whole and
        // answers the family's and the cell's lookups and the open.
        assert_eq!(cost(m, "cat t/ROW/cf/q"), 1, "cat in the {who}");
        assert_eq!(
            cost(m, "cat t/ROW/cf/z"),
            1,
            "cat of another cell in the {who}"
        );
        // `echo >` over a cell: the row's lookup, the commit.
        assert_eq!(
            cost(m, "echo x > t/ROW/cf/q"),
            2,
            "echo over a cell in the {who}"
        );
        // `echo >` of a new cell: the same (the row's whole read shows
        // no such name).
        assert_eq!(cost(m, "echo x > t/ROW/cf/new"), 2, "echo new in the {who}");
        // `cat` again: the kernel holds the cell's pages, nothing wrote
        // the row since, and this daemon's leases at the other hold: the
        // second open makes no call.
        assert_eq!(
            cost(m, "cat t/ROW/cf/q >/dev/null && cat t/ROW/cf/q >/dev/null"),
            1,
            "re-read in the {who}"
        );
        // `stat`: the row's lookup.
        assert_eq!(
            cost(m, "stat t/ROW/cf/q >/dev/null"),
            1,
            "stat in the {who}"
        );
        // `ls` of a row: the row's lookup, whose whole read answers the
        // listing.
        assert_eq!(cost(m, "ls t/ROW >/dev/null"), 1, "ls in the {who}");
        // Two new rows, one after the other: the first one's lookup before
        // its mkdir finds no row from it up to the next (`r0`), which
        // answers the second one's lookup; the names under a row just made
        // need no read; two commits. (The first may also answer from a
        // range an earlier row's lookup saw: 2 then. Without ranges, 4.)
        assert!(
            cost(
                m,
                "mkdir -p t/nROW/cf && echo x > t/nROW/cf/q && mkdir -p t/nROWb/cf && echo x > t/nROWb/cf/q"
            ) <= 3,
            "two new rows in the {who}"
        );
        // The same as `bigtable-bench fs` writes a row: the open fails (the
        // row's lookup reads it empty, or answers from a range), mkdir's
        // lookup answers from that, the mkdirs read nothing; the commit.
        assert!(
            cost(
                m,
                "for r in nROW nROWb; do cat t/$r/cf/q 2>/dev/null; mkdir t/$r t/$r/cf && echo x > t/$r/cf/q; done"
            ) <= 3,
            "two new rows as the bench writes them in the {who}"
        );
        // `cat` after `echo >`: the cell's attributes come from the
        // write's reply, so the open is the only call after the commit.
        assert_eq!(
            cost(m, "echo x > t/ROW/cf/q && cat t/ROW/cf/q >/dev/null"),
            3,
            "cat after echo in the {who}"
        );
    }
}
