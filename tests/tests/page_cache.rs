#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Cells are read through the kernel's page cache while they are unchanged,
//! and a change by anyone (another process writing the file, a `.mutate`
//! batch, a writer that kept its file open) is seen by the first read after
//! that change's close returns — never the stale cached value.

use tests::Mount;

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
