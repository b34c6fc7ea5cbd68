#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Snapshots through the mount with shell tools: `mkdir`, `ls`, `cat`,
//! `cp -r`, `.scan`, `rmdir` under `.snapshots/`, clone and restore by
//! `.bigtable/control`, and a `kill -9` while snapshots are taken.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tests::Mount;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The names in directory `dir` of the daemon's file store.
fn store_files(m: &Mount, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(m.data.join("files").join(dir))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_snapshot_is_taken_browsed_cloned_restored_and_deleted_with_shell_tools() {
    // A local store: its files are plain files the test can count. No
    // trash, so its `rm` takes no removal snapshot (docs/trash.md) and
    // `.snapshots/` lists only what the test takes.
    let m = Mount::with_options(&["store=local", "trash_days=0"]);
    m.table("t", "f\n");
    m.ok("mkdir -p t/r1/f t/r2/f && echo one > t/r1/f/q && echo two > t/r2/f/q");
    let before = now_secs();
    m.ok("mkdir t/.snapshots/s1");
    let after = now_secs();
    m.ok("echo changed > t/r1/f/q && rm t/r2/f/q && mkdir -p t/r3/f && echo three > t/r3/f/q");
    // Listed, with its time; the table as it was, read-only.
    assert_eq!(m.ok("ls t/.snapshots/"), "s1\n");
    let mtime: u64 = m.ok("stat -c %Y t/.snapshots/s1").trim().parse().unwrap();
    assert!(
        (before..=after).contains(&mtime),
        "{before} <= {mtime} <= {after}"
    );
    assert_eq!(m.ok("ls t/.snapshots/s1"), "r1\nr2\n");
    assert_eq!(m.ok("cat t/.snapshots/s1/r1/f/q"), "one\n");
    assert_eq!(m.ok("cat t/.snapshots/s1/r2/f/q"), "two\n");
    assert_eq!(m.ok("cat t/r1/f/q"), "changed\n");
    assert_eq!(m.ok("ls t/r2/f"), "");
    let scan = m.ok("cat 't/.snapshots/s1/.scan/all'");
    assert!(scan.contains("r1\tf:q") && scan.contains("one"), "{scan}");
    assert!(
        !scan.contains("three") && !scan.contains("changed"),
        "{scan}"
    );
    for write in [
        "echo x > t/.snapshots/s1/r1/f/q",
        "mkdir t/.snapshots/s1/r9",
        "rm t/.snapshots/s1/r1/f/q",
    ] {
        let e = m.fails(write);
        assert!(e.contains("Read-only file system"), "{write}: {e}");
    }
    assert!(m.fails("mkdir t/.snapshots/s1").contains("File exists"));
    // `cp -r` copies the snapshot out whole.
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy");
    m.ok(&format!("cp -r t/.snapshots/s1 {}", copy.display()));
    assert_eq!(
        std::fs::read_to_string(copy.join("r1/f/q")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(copy.join("r2/f/q")).unwrap(),
        "two\n"
    );
    // Only who may write the table may take or delete its snapshots.
    m.ok("chmod 0755 t");
    let o = m.sh_as_nobody("mkdir t/.snapshots/x");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    let o = m.sh_as_nobody("rmdir t/.snapshots/s1");
    assert!(!o.status.success());
    // A clone shares the snapshot's files and goes its own way.
    let files = store_files(&m, "sst");
    assert!(!files.is_empty());
    m.ok("echo 'clone t s1 c' > .bigtable/control");
    assert_eq!(store_files(&m, "sst"), files, "a clone copies no file");
    assert_eq!(m.ok("ls c"), "r1\nr2\n");
    assert_eq!(m.ok("cat c/r1/f/q"), "one\n");
    m.ok("echo cloned > c/r2/f/q && mkdir -p c/r4/f && echo four > c/r4/f/q");
    assert_eq!(m.ok("ls t/r2/f"), "");
    assert_eq!(m.ok("cat t/.snapshots/s1/r2/f/q"), "two\n");
    // Restore in place: the table is the snapshot again.
    m.ok("echo 'restore t s1' > .bigtable/control");
    assert_eq!(m.ok("cat t/r1/f/q"), "one\n");
    assert_eq!(m.ok("cat t/r2/f/q"), "two\n");
    assert!(m.fails("cat t/r3/f/q").contains("No such file"));
    assert_eq!(m.ok("cat c/r2/f/q"), "cloned\n");
    // Deleted: gone from the listing; the clone keeps its cells.
    m.ok("rmdir t/.snapshots/s1");
    assert_eq!(m.ok("ls t/.snapshots/"), "");
    assert!(m.fails("ls t/.snapshots/s1").contains("No such file"));
    m.ok("echo gc > .bigtable/control");
    assert_eq!(m.ok("cat c/r1/f/q"), "one\n");
    assert_eq!(m.ok("ls c"), "r1\nr2\nr4\n");
}

#[test]
fn snapshots_taken_when_the_daemon_is_killed_are_whole_or_absent_after_remount() {
    let mut m = Mount::with_options(&["store=local"]);
    m.table("t", "f\n");
    m.ok("mkdir -p t/a/f");
    // A writer and a snapshot taker, until the daemon dies under them.
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let dir = m.path("t");
    let writer = {
        let (stop, dir) = (stop.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let row = dir.join(format!("r{i:05}"));
                if std::fs::create_dir_all(row.join("f")).is_err()
                    || std::fs::write(row.join("f/q"), i.to_string()).is_err()
                {
                    break;
                }
                i += 1;
            }
        })
    };
    let taker = {
        let (stop, taken, dir) = (stop.clone(), taken.clone(), dir.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::SeqCst) {
                if std::fs::create_dir(dir.join(format!(".snapshots/s{k:04}"))).is_err() {
                    break;
                }
                k += 1;
                taken.store(k, Ordering::SeqCst);
            }
        })
    };
    assert!(tests::wait_until(Duration::from_secs(60), || taken
        .load(Ordering::SeqCst)
        >= 5));
    m.kill9();
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    taker.join().unwrap();
    let acknowledged = taken.load(Ordering::SeqCst);
    m.start();
    let listed: Vec<String> = m
        .ok("ls t/.snapshots/")
        .lines()
        .map(str::to_string)
        .collect();
    // Every acknowledged snapshot is there, at most one more (the one
    // being taken, if its manifest was published before the kill).
    assert!(
        listed.len() as u64 == acknowledged || listed.len() as u64 == acknowledged + 1,
        "{acknowledged} acknowledged, listed {listed:?}"
    );
    // Each is whole: its rows are a prefix of the writer's, every cell read.
    for s in &listed {
        let rows: Vec<String> = m
            .ok(&format!("ls t/.snapshots/{s}"))
            .lines()
            .filter(|r| r.starts_with('r'))
            .map(str::to_string)
            .collect();
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(r, &format!("r{i:05}"), "{s}: rows are not a prefix");
        }
        if let Some(last) = rows.last() {
            let v = m.ok(&format!("cat t/.snapshots/{s}/{last}/f/q"));
            assert_eq!(v, (rows.len() - 1).to_string(), "{s}/{last}");
        }
        let cells = m.ok(&format!("find t/.snapshots/{s} -type f | wc -l"));
        assert_eq!(cells.trim(), rows.len().to_string(), "{s}");
    }
    // Collected: each snapshot stays readable, and no half manifest is left
    // but one being written at the kill (a temporary file GC drops later).
    m.ok("echo gc > .bigtable/control");
    let half: Vec<String> = store_files(&m, "snapshots/t")
        .into_iter()
        .filter(|n| !listed.contains(n))
        .collect();
    assert!(
        half.iter().all(|n| n.starts_with(".tmp.")) && half.len() <= 1,
        "{half:?}"
    );
    for s in &listed {
        m.ok(&format!("cat t/.snapshots/{s}/.scan/all > /dev/null"));
    }
}
