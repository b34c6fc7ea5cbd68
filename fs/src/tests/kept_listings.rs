//! A table listed a second time with no write in between is kept whole
//! (`listing/kept.rs`): the listings after it make no call, and every way
//! a row comes in or goes shows in the next listing.

use super::T;
use crate::store_calls::Call;
use crate::FsOptions;
use engine::{RowMutation, WriteOptions};
use std::time::{Duration, Instant};

/// A table `t` of `rows` rows (`r000`, ...), kept listings lasting long
/// enough for any machine.
fn table(rows: usize) -> T {
    let t = T::with(FsOptions {
        max_value_size: 1 << 20,
        dir_timeout: Duration::from_secs(600),
        ..Default::default()
    });
    let batch: String = (0..rows).map(|i| format!("set r{i:03} f:q v\n")).collect();
    t.mutate(batch).unwrap();
    t
}

/// The table's rows listed as the kernel lists them without OPENDIR,
/// `per_reply` entries a reply: names and inode numbers.
fn list(t: &T, per_reply: usize) -> Vec<(String, u64)> {
    let ino = t.ino("/t").unwrap();
    let mut rows = t.list_unopened(ino, per_reply);
    rows.retain(|(n, _)| !n.starts_with('.'));
    rows
}

fn names(t: &T) -> Vec<String> {
    list(t, 1000).into_iter().map(|(n, _)| n).collect()
}

fn scans(t: &T) -> u64 {
    t.fs.ctx().data.store_calls().get(Call::Scan)
}

/// Lists the table twice: kept from then on.
fn keep(t: &T) {
    names(t);
    names(t);
}

#[test]
fn a_table_listed_twice_is_listed_again_with_no_call() {
    let t = table(50);
    let first = list(&t, 1000);
    assert_eq!(first.len(), 50);
    let before = scans(&t);
    let second = list(&t, 7);
    assert_eq!(
        scans(&t),
        before + 1,
        "the second listing reads the table whole, once"
    );
    assert!(t.fs.ctx().listing.kept_bytes() > 0);
    // The third, in replies of every size, makes no call and lists the
    // same rows by the same numbers.
    let before = scans(&t);
    for per_reply in [1, 7, 1000] {
        assert_eq!(list(&t, per_reply), first);
    }
    assert_eq!(second, first);
    assert_eq!(scans(&t), before);
}

#[test]
fn every_way_a_row_comes_in_or_goes_shows_in_the_next_listing() {
    let t = table(3);
    keep(&t);
    t.mutate("set n1 f:q v\n").unwrap();
    assert!(names(&t).contains(&"n1".to_string()), "a .mutate batch");
    keep(&t);
    t.put("/t/n2/f/q", b"v", super::TRUNC).ok();
    t.mkdir("/t/n3").unwrap();
    t.mkdir("/t/n3/f").unwrap();
    t.put("/t/n3/f/q", b"v", libc::O_WRONLY | libc::O_CREAT)
        .unwrap();
    assert!(
        names(&t).contains(&"n3".to_string()),
        "a file written through the mount"
    );
    keep(&t);
    let m = RowMutation::new(b"n4".to_vec()).set("f", b"q".to_vec(), b"v".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"n4"]);
    assert!(
        names(&t).contains(&"n4".to_string()),
        "a writer the mount is told of"
    );
    keep(&t);
    t.mutate("deleterow r000\n").unwrap();
    assert!(!names(&t).contains(&"r000".to_string()), "a row deleted");
    keep(&t);
    let m = RowMutation::new(b"n5".to_vec()).set("f", b"q".to_vec(), b"v".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.table_changed_elsewhere("t");
    assert!(names(&t).contains(&"n5".to_string()), "a table-wide change");
}

#[test]
fn a_directory_made_and_still_empty_shows_beside_a_kept_listing() {
    let t = table(3);
    keep(&t);
    t.mkdir("/t/n1").unwrap();
    assert_eq!(names(&t), ["n1", "r000", "r001", "r002"]);
    t.rmdir("/t/n1").unwrap();
    assert_eq!(names(&t), ["r000", "r001", "r002"]);
}

#[test]
fn a_table_collected_by_age_is_never_kept() {
    let t = table(3);
    t.put("/t/.schema", b"f max_age=1h\n", super::TRUNC)
        .unwrap();
    keep(&t);
    let before = scans(&t);
    names(&t);
    assert!(scans(&t) > before);
    assert_eq!(t.fs.ctx().listing.kept_bytes(), 0);
}

#[test]
fn a_kept_listing_waits_while_other_daemons_writes_may_pass_this_one_by() {
    let t = table(3);
    t.fs.writes_reported_until(Instant::now() + Duration::from_secs(600));
    keep(&t);
    // Another daemon's write, whose invalidation never came: while the
    // leases hold that cannot be; once they lapse, the store is read.
    let m = RowMutation::new(b"n1".to_vec()).set("f", b"q".to_vec(), b"v".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.writes_reported_until(Instant::now());
    assert!(names(&t).contains(&"n1".to_string()));
}
