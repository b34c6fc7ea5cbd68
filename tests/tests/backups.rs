#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Backups to another S3 prefix (SeaweedFS on loopback) through the mount:
//! `backup`, `restore-backup` lines of `.bigtable/control`, progress in
//! `.bigtable/backups`; a restore after the table and its files left the
//! store, on a daemon with a fresh store; and `kill -9` during a backup and
//! during a restore.

use std::time::Duration;
use testkit::seaweed::Seaweed;
use tests::Mount;

/// A mount on prefix `prefix` of `w`'s bucket, with the backup store
/// `offsite` on prefix `backups`.
fn mount_on(w: &Seaweed, prefix: &str) -> Mount {
    let creds = w.credentials_file();
    let opts = [
        format!("store=s3://{}/{prefix}", w.bucket),
        format!("s3_endpoint={}", w.endpoint),
        format!("s3_credentials={}", creds.display()),
        format!("backup_store=offsite=s3://{}/backups", w.bucket),
    ];
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    Mount::with_options(&opts)
}

/// Writes `rows` rows of two versions each (values of about `size`
/// bytes that do not compress, so that copies take their size).
fn fill(m: &Mount, table: &str, rows: usize, size: usize) {
    fill_rows(m, table, 0..rows, size)
}

/// `fill` of the rows numbered in `rows`.
fn fill_rows(m: &Mount, table: &str, rows: std::ops::Range<usize>, size: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut noise = |n: usize| {
        let mut s = String::with_capacity(n);
        while s.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.push_str(&format!("{x:016x}"));
        }
        s
    };
    for chunk in rows.collect::<Vec<_>>().chunks(1000) {
        let mut batch = String::new();
        for i in chunk {
            for (ts, v) in [(1000, "a"), (2000, "b")] {
                batch.push_str(&format!("set r{i:06} f:q {v}{i}-{} {ts}\n", noise(size)));
            }
        }
        m.mutate(table, batch.as_bytes());
    }
}

/// Every version of every cell of `table`, hashed (with their count).
fn scan(m: &Mount, table: &str) -> String {
    m.ok(&format!(
        "cat '{table}/.scan/versions=all' | wc -l; cat '{table}/.scan/versions=all' | md5sum"
    ))
}

/// The lines of `.bigtable/backups` about backup `name` (copies first).
fn backup_lines(m: &Mount, name: &str) -> Vec<String> {
    m.ok("cat .bigtable/backups")
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == name))
        .map(str::to_string)
        .collect()
}

/// Writes a copy's control line (it returns at once) and waits for the
/// copy to end well: `.bigtable/backups` says it is done.
fn run(m: &Mount, line: &str, kind: &str, name: &str) -> String {
    m.ok(&format!("echo '{line}' > .bigtable/control"));
    let mut last = String::new();
    let done = tests::wait_until(Duration::from_secs(300), || {
        last = job(m, kind, name);
        last.contains(" done ") || last.contains(" failed ")
    });
    assert!(done && last.contains("100% done"), "{line}: {last:?}");
    last
}

/// The last line of `.bigtable/backups` about a copy of that kind and name.
fn job(m: &Mount, kind: &str, name: &str) -> String {
    backup_lines(m, name)
        .into_iter()
        .rfind(|l| l.starts_with(&format!("copy {kind} ")))
        .unwrap_or_default()
}

fn listed_ready(m: &Mount, name: &str) -> bool {
    backup_lines(m, name)
        .iter()
        .any(|l| l.starts_with(&format!("offsite t {name} ")))
}

#[test]
fn a_table_comes_back_from_another_prefix_after_its_store_lost_it() {
    let w = Seaweed::start("backups");
    let mut m = mount_on(&w, "main");
    m.table("t", "f\n");
    // Past a memtable (4 MiB): files the later writes leave alone.
    fill(&m, "t", 3000, 1000);
    // A snapshot writes what the memtables hold into files of its own, so
    // only files the tablet had before it can be shared with a later one:
    // wait for the frozen memtable's flush to give the tablet one.
    let flushed = tests::wait_until(Duration::from_secs(120), || {
        m.ok("cat .bigtable/tablets").lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first() == Some(&"t") && w.get(6).and_then(|n| n.parse::<u64>().ok()) > Some(0)
        })
    });
    assert!(flushed, "no SSTable: {}", m.ok("cat .bigtable/tablets"));
    m.ok("mkdir t/.snapshots/one");
    run(&m, "backup t one offsite", "backup", "one");
    assert!(listed_ready(&m, "one"));
    // A second backup copies only what the first did not hold (the flushed
    // file). New rows only: overwriting the first rows would leave garbage
    // that a compaction may rewrite the first files for.
    fill_rows(&m, "t", 3000..3100, 100);
    m.ok("mkdir t/.snapshots/two");
    let copy = run(&m, "backup t two offsite", "backup", "two");
    let skipped: u64 = copy.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(skipped > 0, "nothing was skipped: {copy}");
    // A name taken is refused, with EEXIST (bash names the errno).
    let e = m.fails("bash -c \"echo 'backup t two offsite' > .bigtable/control\"");
    assert!(e.contains("File exists"), "{e}");
    // Control lines fail with the errno of what is wrong.
    for (line, errno) in [
        (
            "restore-backup offsite t nosuch u",
            "No such file or directory",
        ),
        ("backup t nosuch offsite", "No such file or directory"),
        ("backup t one nowhere", "Invalid argument"),
        ("restore-backup offsite t one t", "File exists"),
    ] {
        let e = m.fails(&format!("bash -c \"echo '{line}' > .bigtable/control\""));
        assert!(e.contains(errno), "{line}: {e}");
    }
    // A protected table is not restored in place (that drops its writes).
    m.ok("echo '.table deletion_protection=true' >> t/.schema");
    let e = m.fails("bash -c \"echo 'restore t two' > .bigtable/control\"");
    assert!(e.contains("Operation not permitted"), "{e}");
    m.ok("echo '.table deletion_protection=false' >> t/.schema");
    let want = scan(&m, "t");
    // The table goes for good from its store: snapshots, trash, files.
    m.ok("rmdir t/.snapshots/one t/.snapshots/two && rm -r t");
    let id = m.ok("awk '!/^#/ {print $1}' .bigtable/trash");
    m.ok(&format!("echo 'purge {}' > .bigtable/control", id.trim()));
    m.ok("echo gc > .bigtable/control");
    assert_eq!(m.ok("ls"), "");
    // Another daemon on an empty prefix restores it whole.
    m.stop();
    let fresh = mount_on(&w, "fresh");
    run(&fresh, "restore-backup offsite t two t", "restore", "two");
    assert_eq!(scan(&fresh, "t"), want);
    // And the first daemon, too, under another name.
    drop(fresh);
    m.start();
    run(&m, "restore-backup offsite t two back", "restore", "two");
    assert_eq!(scan(&m, "back"), want);
    // Deleting the backups leaves the backup store's files empty.
    m.ok("echo 'delete-backup offsite t one' > .bigtable/control");
    assert!(!listed_ready(&m, "one") && listed_ready(&m, "two"));
    m.ok("echo 'delete-backup offsite t two' > .bigtable/control");
    assert!(!listed_ready(&m, "two"));
}

/// Starts a copy, waits until it runs (or already ended), then kills the
/// daemon; returns the state it saw last.
fn kill_during(m: &mut Mount, line: &str, kind: &str, name: &str) -> String {
    m.ok(&format!("echo '{line}' > .bigtable/control"));
    let mut seen = String::new();
    tests::wait_until(Duration::from_secs(120), || {
        seen = job(m, kind, name);
        !seen.is_empty()
    });
    m.kill9();
    eprintln!("killed during {line:?} at {seen:?}");
    seen
}

#[test]
fn kill_9_during_a_backup_or_a_restore_leaves_it_whole_or_absent() {
    let w = Seaweed::start("backup-kill");
    let mut m = mount_on(&w, "main");
    m.table("t", "f\n");
    fill(&m, "t", 3000, 1500);
    let want = scan(&m, "t");
    m.ok("mkdir t/.snapshots/s");
    let seen = kill_during(&mut m, "backup t s offsite", "backup", "s");
    m.start();
    // The source is intact; the backup is listed only if it is whole.
    assert_eq!(scan(&m, "t"), want, "killed at {seen:?}");
    if !listed_ready(&m, "s") {
        // Run again, it goes on from the files already there.
        run(&m, "backup t s offsite", "backup", "s");
    }
    assert!(listed_ready(&m, "s"));
    let seen = kill_during(&mut m, "restore-backup offsite t s r", "restore", "s");
    m.start();
    assert_eq!(scan(&m, "t"), want);
    // The restored table is not there, or whole.
    if m.sh("test -d r").status.success() {
        assert_eq!(scan(&m, "r"), want, "killed at {seen:?}");
    } else {
        run(&m, "restore-backup offsite t s r", "restore", "s");
    }
    assert_eq!(scan(&m, "r"), want);
    // What the cut-short restore copied is collected.
    m.ok("echo gc > .bigtable/control");
    assert_eq!(scan(&m, "r"), want);
}
