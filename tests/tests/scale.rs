#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Scale: large batches in bounded memory, and walks that list every cell
//! exactly once while the table grows.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tests::{rss_kib, wait_until, Mount};

/// The test mount's engine sizes (see `Mount::new`): three tablet servers
/// with a 4 MiB memtable each, an 8 MiB block cache and a 2 MiB scan cache.
const CONFIGURED_KIB: u64 = (3 * 4 + 8 + 2) * 1024;
/// The overhead docs/mount.md ("Memory") states beyond caches and memtables.
const OVERHEAD_KIB: u64 = 64 * 1024;

/// RSS once it stops moving (by less than 1 MiB over half a second).
fn settled_rss_kib(pid: u32) -> u64 {
    let mut last = rss_kib(pid);
    let mut at = std::time::Instant::now();
    let mut now = last;
    wait_until(Duration::from_secs(30), || {
        // Compare samples half a second apart (wait_until polls faster).
        if at.elapsed() < Duration::from_millis(500) {
            return false;
        }
        now = rss_kib(pid);
        let still = now.abs_diff(last) < 1024;
        last = now;
        at = std::time::Instant::now();
        still
    });
    now
}

fn batch(rows: std::ops::Range<usize>, tag: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(rows.len() * 40);
    for i in rows {
        writeln!(b, "set row{i:08} f:q {tag}{i}").unwrap();
    }
    b
}

#[test]
fn large_batches_twice_keep_the_daemon_within_its_bound() {
    let m = Mount::new();
    m.table("t", "f\n");
    let start = settled_rss_kib(m.pid());
    const ROWS: usize = 150_000;
    for round in ["a", "b"] {
        m.mutate("t", &batch(0..ROWS, round));
        let rss = settled_rss_kib(m.pid());
        eprintln!("after batch {round}: RSS {start} KiB -> {rss} KiB");
        assert!(
            rss <= start + CONFIGURED_KIB + OVERHEAD_KIB,
            "RSS {rss} KiB after a {ROWS}-line batch; started at {start} KiB, bound +{} KiB",
            CONFIGURED_KIB + OVERHEAD_KIB
        );
    }
    // Both batches applied in full.
    assert_eq!(
        fs::read_to_string(m.path(&format!("t/row{:08}/f/q", ROWS - 1))).unwrap(),
        format!("b{}", ROWS - 1)
    );
    let rows = m.ok("ls t | grep -c ^row");
    assert_eq!(rows.trim(), ROWS.to_string());
}

#[test]
fn a_batch_larger_than_its_memory_spool_applies_nothing_when_its_last_line_is_bad() {
    let m = Mount::new();
    m.table("t", "f\n");
    // Well over the 1 MiB kept in memory; the last row key is empty, which
    // only the engine's check at close refuses.
    let mut b = batch(0..60_000, "v");
    b.extend_from_slice(b"set % f:q v\n");
    // The batch is checked at fsync (or close, whose error fs::write drops).
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.path("t/.mutate"))
        .unwrap();
    f.write_all(&b).unwrap();
    let err = f.sync_all().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    drop(f);
    assert!(!m.path("t/row00000000").exists());
    assert_eq!(m.ok("ls t | grep -c ^row || true").trim(), "0");
    // A good one of the same size applies in full.
    m.mutate("t", &batch(0..60_000, "v"));
    assert_eq!(m.ok("ls t | grep -c ^row").trim(), "60000");
}

#[test]
fn a_plain_ls_makes_no_inodes_and_the_walks_after_it_find_every_cell_once() {
    let m = Mount::new();
    m.table("t", "f\n");
    // Many replies' worth of rows.
    const ROWS: usize = 6_000;
    m.mutate("t", &batch(0..ROWS, "v"));
    let want: HashSet<String> = (0..ROWS).map(|i| format!("t/row{i:08}/f/q")).collect();
    let before = m.stat("inodes");
    assert_eq!(m.ok("ls t | grep -c ^row").trim(), ROWS.to_string());
    // Rows after the first reply come as names only: the kernel made no
    // inode for them (a reader that enters one looks it up).
    let made = m.stat("inodes").saturating_sub(before);
    assert!(
        made < ROWS as u64 / 2,
        "a plain ls registered {made} inodes for {ROWS} rows"
    );
    // find enters every row: those listed by name are looked up; then du
    // and a second find, whose listings carry attributes again, and ls -l.
    for walk in [
        "find t -type f",
        "du -a t | awk '{print $2}'",
        "find t -type f",
    ] {
        let out = m.ok(walk);
        let cells: Vec<&str> = out.lines().filter(|l| l.ends_with("/f/q")).collect();
        let unique: HashSet<String> = cells.iter().map(|c| c.to_string()).collect();
        assert_eq!(cells.len(), ROWS, "`{walk}` listed {} cells", cells.len());
        assert_eq!(unique, want, "`{walk}` listed other cells");
    }
    let long = m.ok("ls -l t");
    assert_eq!(long.lines().filter(|l| l.starts_with('d')).count(), ROWS);
    assert_eq!(
        fs::read_to_string(m.path(&format!("t/row{:08}/f/q", ROWS - 1))).unwrap(),
        format!("v{}", ROWS - 1)
    );
}

#[test]
fn find_lists_every_cell_once_while_writers_add_rows() {
    let m = Mount::new();
    m.table("t", "f\n");
    const OLD: usize = 3_000;
    let mut b = Vec::new();
    for i in 0..OLD {
        // Two cells per row, so families list more than one name.
        writeln!(b, "set k{i:06} f:a {i}\nset k{i:06} f:b {i}").unwrap();
    }
    m.mutate("t", &b);

    // Writers add rows that sort between the old ones, in batches and as
    // single files, until the walk is done.
    let stop = Arc::new(AtomicBool::new(false));
    let added = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, added) = (stop.clone(), added.clone());
            let table = m.path("t");
            std::thread::spawn(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let i = (n * 7 + w) % OLD;
                    if w == 0 {
                        let mut b = Vec::new();
                        for j in 0..20 {
                            writeln!(b, "set k{i:06}-{n}-{j} f:a new").unwrap();
                        }
                        fs::write(table.join(".mutate"), &b).unwrap();
                    } else {
                        let dir = table.join(format!("k{i:06}-w{n}")).join("f");
                        fs::create_dir_all(&dir).unwrap();
                        fs::write(dir.join("a"), b"new").unwrap();
                    }
                    added.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    // Let the writers get going before the walk starts.
    assert!(wait_until(Duration::from_secs(30), || added
        .load(Ordering::Relaxed)
        >= 4));
    let out = m.ok("find t -type f");
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }

    let mut seen = HashSet::new();
    for line in out.lines() {
        assert!(seen.insert(line.to_string()), "listed twice: {line}");
    }
    for i in 0..OLD {
        for q in ["a", "b"] {
            let p = format!("t/k{i:06}/f/{q}");
            assert!(seen.contains(&p), "missed {p}");
        }
    }
    assert!(seen.contains("t/.schema") && seen.contains("t/.mutate"));
    assert!(
        added.load(Ordering::Relaxed) > 4,
        "the writers ran during the walk"
    );
}

#[test]
fn inodes_the_kernel_forgets_are_freed_and_their_memory_given_back() {
    let m = Mount::new();
    m.table("t", "f\n");
    const ROWS: usize = 40_000;
    m.mutate("t", &batch(0..ROWS, "v"));
    let before = settled_rss_kib(m.pid());
    let cells = m.ok("find t -type f | grep -c /f/q");
    assert_eq!(cells.trim(), ROWS.to_string());
    let held = m.stat("inodes");
    let walked = settled_rss_kib(m.pid());
    eprintln!("find: {held} inodes held, RSS {before} KiB -> {walked} KiB");
    // The daemon trims every 65,536 forgets (fs's `TRIM_AFTER_FORGETS`) and
    // once more when they stop: counted from before the drop, since that
    // last trim may come before this test sees the inodes gone.
    let trims = m.stat("malloc_trims");
    let during = held.saturating_sub(100) / (1 << 16);
    // Make the kernel forget its inodes (root only; elsewhere the kernel
    // forgets them under memory pressure, which a test cannot arrange).
    if fs::write("/proc/sys/vm/drop_caches", "2\n").is_err() {
        eprintln!("not root: cannot drop the kernel's inodes; skipping the rest");
        return;
    }
    assert!(
        wait_until(Duration::from_secs(60), || m.stat("inodes") < 100),
        "the daemon still holds {} inodes after the kernel dropped its own",
        m.stat("inodes")
    );
    // Once the forgets stop, the daemon hands memory back.
    assert!(
        wait_until(Duration::from_secs(30), || m.stat("malloc_trims")
            > trims + during),
        "no malloc_trim after the forgets stopped ({} trims, {trims} before the drop)",
        m.stat("malloc_trims")
    );
    let after = settled_rss_kib(m.pid());
    eprintln!("after drop_caches: RSS {after} KiB");
    assert!(
        after < walked,
        "RSS {after} KiB after the kernel forgot every inode, {walked} KiB before"
    );
    assert!(
        after <= before + CONFIGURED_KIB + OVERHEAD_KIB,
        "RSS {after} KiB after the kernel forgot every inode; {before} KiB before the walk, bound +{} KiB",
        CONFIGURED_KIB + OVERHEAD_KIB
    );
}

/// CPU time (user + system, in clock ticks) of the daemon's FUSE threads:
/// the `/dev/fuse` threads and the io_uring queue threads.
fn fuse_threads_cpu_ticks(pid: u32) -> u64 {
    let mut ticks = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !(comm.starts_with("fuser") || comm.starts_with("fuse-ring")) {
            continue;
        }
        let stat = fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: utime and stime are the
        // 12th and 13th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    }
    ticks
}

#[test]
fn fuse_threads_stop_polling_when_the_walk_ends() {
    let m = Mount::new();
    m.table("t", "f\n");
    m.mutate("t", &batch(0..2_000, "v"));
    // A walk keeps a FUSE thread polling the device, or the io_uring queue
    // threads looking for requests, between its requests.
    let listed = m.ok("find t -type f -path '*/f/q' | wc -l");
    assert_eq!(listed.trim(), "2000");
    // Then the threads sleep: a second of wall time costs them (nearly) no
    // CPU. Clock ticks are 10 ms; a thread left polling would use ~100.
    let pid = m.pid();
    let mut last = fuse_threads_cpu_ticks(pid);
    let mut at = std::time::Instant::now();
    let idle = wait_until(Duration::from_secs(60), || {
        if at.elapsed() < Duration::from_secs(1) {
            return false;
        }
        let now = fuse_threads_cpu_ticks(pid);
        let used = now - last;
        last = now;
        at = std::time::Instant::now();
        used <= 5
    });
    assert!(idle, "the FUSE threads kept using CPU after the walk ended");
}
