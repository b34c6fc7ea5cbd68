#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cells are read through the kernel's page cache while they are unchanged,
//! and a change by anyone (another process writing the file, a `.mutate`
//! batch, a writer that kept its file open) is seen by the first read after
//! that change's close returns — never the stale cached value.

use std::time::Duration;
use tests::{wait_until, Mount};

/// READ requests the daemon answered so far (reading the counters costs
/// READs of their own, the same number every time).
fn reads(m: &Mount) -> u64 {
    let stats = m.ok("cat .bigtable/stats");
    stats
        .lines()
        .find_map(|l| l.strip_prefix("fuse_read="))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Reads the cell twice and checks that the second read came from the
/// page cache (no READ reached the daemon).
fn read_twice(m: &Mount, want: &str) {
    // A writer's close returns before the kernel's RELEASE of its handle
    // reaches the daemon, and a reader opening while a writer holds the cell
    // reads around the cache: wait until no handle is open (the counters'
    // text is made before their own handle is).
    assert!(
        wait_until(Duration::from_secs(20), || m.stat("open_handles") == 0),
        "handles stayed open: {}",
        m.stat("open_handles")
    );
    assert_eq!(m.ok("cat t/r/f/c"), want, "first read");
    let start = reads(m);
    let before = reads(m);
    let own = before - start;
    assert_eq!(m.ok("cat t/r/f/c"), want, "second read");
    let after = reads(m);
    assert_eq!(
        after - before,
        own,
        "the second read of {want:?} was not cached"
    );
}

#[test]
fn cached_reads_never_outlive_a_change() {
    let m = Mount::new();
    m.table("t", "f max_versions=1\n");
    // Every value has the same length: a change must not be caught by size.
    m.ok("mkdir -p t/r/f && printf value-1 > t/r/f/c");
    read_twice(&m, "value-1");

    // Another process overwrites it.
    m.ok("printf value-2 > t/r/f/c");
    assert_eq!(m.ok("cat t/r/f/c"), "value-2");
    read_twice(&m, "value-2");

    // A batch changes it behind the inode's back.
    m.mutate("t", b"set r f:c value-3\n");
    assert_eq!(m.ok("cat t/r/f/c"), "value-3");
    read_twice(&m, "value-3");

    // A writer that opened before the cached reads and closes after them.
    let seen =
        m.ok("exec 3<>t/r/f/c; cat t/r/f/c >/dev/null; printf value-4 >&3; exec 3>&-; cat t/r/f/c");
    assert_eq!(seen, "value-4", "a read right after the writer's close");
    read_twice(&m, "value-4");

    // An exact version written under .versions/ becomes the newest value.
    m.ok("printf value-5 > t/r/f/.versions/c/9999999999999999");
    assert_eq!(m.ok("cat t/r/f/c"), "value-5");
    read_twice(&m, "value-5");
}

#[test]
fn a_reader_open_across_a_commit_reads_a_whole_value() {
    let m = Mount::new();
    m.table("t", "f max_versions=1\n");
    m.ok("mkdir -p t/r/f && printf aaaaaaaa > t/r/f/c");
    read_twice(&m, "aaaaaaaa");
    // The reader opens, a shorter value is committed, then the reader reads
    // (cat stats its input first, which shows the new size): it gets a whole
    // value, the one it opened or the new one; the next open gets the new one.
    let out = m.ok("exec 4<t/r/f/c; printf bb > t/r/f/c; cat <&4; echo; cat t/r/f/c");
    assert!(
        out == "aaaaaaaa\nbb" || out == "bb\nbb",
        "a reader saw {out:?}"
    );
    read_twice(&m, "bb");
    // And with a longer one.
    let out = m.ok("exec 4<t/r/f/c; printf cccccccccccc > t/r/f/c; cat <&4; echo; cat t/r/f/c");
    assert!(
        out == "bb\ncccccccccccc" || out == "cccccccccccc\ncccccccccccc",
        "a reader saw {out:?}"
    );
}

/// A child killed and reaped when dropped, also when the test fails.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_readers_open_hands_the_kernel_the_pages_so_its_first_read_needs_no_read_request() {
    let m = Mount::new();
    m.table("t", "f max_versions=1\n");
    // Written by a batch: the kernel holds no pages of the cell.
    m.mutate("t", b"set r f:c first-value\n");
    m.ok("ls -l t/r/f >/dev/null");
    let start = reads(&m);
    let before = reads(&m);
    let own = before - start;
    assert_eq!(m.ok("cat t/r/f/c"), "first-value");
    assert_eq!(
        reads(&m) - before,
        own,
        "the first read of a listed cell sent READs"
    );
    assert!(m.stat("page_stores") >= 1);

    // A change behind the inode: never the stored old pages.
    m.mutate("t", b"set r f:c second-value\n");
    assert_eq!(m.ok("cat t/r/f/c"), "second-value");
    read_twice(&m, "second-value");

    // A value larger than an open hands over is read with READs, whole.
    m.ok("head -c 300000 /dev/zero | tr '\\0' x > t/r/f/big");
    assert_eq!(m.ok("wc -c < t/r/f/big").trim(), "300000");
    assert_eq!(m.ok("tr -d x < t/r/f/big | wc -c").trim(), "0");
}

#[test]
fn a_writer_waits_for_a_cached_reader_which_keeps_reading_its_whole_value() {
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    use std::time::Duration;
    // Writers wait for cached readers as long as the test needs.
    let m = Mount::with_options(&["reader_wait=600"]);
    m.table("t", "f max_versions=1\n");
    m.ok("mkdir -p t/r/f && printf old-value > t/r/f/c");
    read_twice(&m, "old-value");
    let mut reader = std::fs::File::open(m.path("t/r/f/c")).unwrap();
    let mut first = String::new();
    reader.read_to_string(&mut first).unwrap();
    assert_eq!(first, "old-value");
    // An O_TRUNC writer: the kernel would set the inode's size to 0 at its
    // open, and cut the reader's cached reads short.
    let mut writer = Reaped(
        std::process::Command::new("sh")
            .args(["-c", "printf new > t/r/f/c"])
            .current_dir(m.path(""))
            .spawn()
            .unwrap(),
    );
    assert!(
        tests::wait_until(Duration::from_secs(60), || m.stat("reader_waits") >= 1),
        "the writer's open did not wait for the cached reader"
    );
    let mut buf = [0u8; 64];
    let n = reader.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf[..n], b"old-value", "the reader's re-read");
    assert!(
        writer.0.try_wait().unwrap().is_none(),
        "the writer finished while the reader held the cell"
    );
    drop(reader);
    let mut status = None;
    assert!(
        tests::wait_until(Duration::from_secs(60), || {
            status = writer.0.try_wait().unwrap();
            status.is_some()
        }),
        "the writer still waits after the reader closed"
    );
    assert!(status.is_some_and(|s| s.success()));
    assert_eq!(m.ok("cat t/r/f/c"), "new");
    assert_eq!(m.stat("reader_waits_expired"), 0);
}
