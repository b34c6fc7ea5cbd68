#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A table of 100,000 rows lists in key order with bounded daemon memory.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;
use tests::{rss_kib, Mount};

#[test]
fn a_hundred_thousand_rows_list_in_order_with_bounded_memory() {
    let m = Mount::new();
    m.table("big", "f\n");
    const ROWS: usize = 100_000;
    let t0 = Instant::now();
    for chunk in 0..10 {
        let mut batch = String::with_capacity(ROWS / 10 * 32);
        for i in chunk * ROWS / 10..(chunk + 1) * ROWS / 10 {
            // Keys whose order is not the order of their numbers.
            batch.push_str(&format!("set k{:x}-{i} f:q {i}\n", i % 4096));
        }
        m.mutate("big", batch.as_bytes());
    }
    let loaded = t0.elapsed();
    let before = rss_kib(m.pid());
    // Stream the listing twice; the daemon must not keep it. The kernel
    // caches the first listing; dropping that cache in the middle of the
    // second makes it go on from an offset the daemon handed out 90,000
    // rows ago (and no longer remembers).
    let t1 = Instant::now();
    for pass in 0..2 {
        let names: Vec<Vec<u8>> = fs::read_dir(m.path("big"))
            .unwrap()
            .enumerate()
            .map(|(i, e)| {
                if pass == 1 && i == 10_000 {
                    let _ = fs::write("/proc/sys/vm/drop_caches", "1\n");
                }
                e.unwrap().file_name().as_bytes().to_vec()
            })
            .collect();
        let rows: Vec<&Vec<u8>> = names.iter().filter(|n| n.first() != Some(&b'.')).collect();
        assert_eq!(rows.len(), ROWS);
        assert!(
            rows.windows(2).all(|w| w[0] < w[1]),
            "rows listed in key order"
        );
    }
    let listed = t1.elapsed();
    let after = rss_kib(m.pid());
    eprintln!("loaded {ROWS} rows in {loaded:?}, listed twice in {listed:?}; RSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} KiB to {after} KiB while listing"
    );
    assert!(after < 1024 * 1024, "RSS {after} KiB");
    // `ls` agrees (it sorts by itself; -f keeps our order).
    let ls = m.ok("ls -f big | grep -v '^\\.' | head -3");
    assert_eq!(ls.lines().count(), 3);
}
