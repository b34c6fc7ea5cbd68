//! A tablet never goes back in time when it changes servers: the server
//! that loads it raises its clock above the tablet's newest cell timestamp
//! (one a server on a machine with a clock ahead may have assigned), but
//! not to timestamps further ahead than any clock skew (users' own).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use std::sync::Arc;

const MINUTE: u64 = 60 * 1_000_000;

fn open(opts: Options) -> Bigtable {
    let _ = env_logger::builder().is_test(true).try_init();
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(
        store,
        Options {
            tablet_servers: 2,
            balance: false,
            ..opts
        },
    )
    .unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    bt
}

fn write(bt: &Bigtable, row: &str, ts: Option<u64>, value: &str) {
    let m = RowMutation::new(row);
    let m = match ts {
        Some(ts) => m.set_at("f", "q", ts, value),
        None => m.set("f", "q", value),
    };
    bt.apply("t", &m, WriteOptions::default()).unwrap();
}

/// The newest version of the cell of `row`: (timestamp, value).
fn newest(bt: &Bigtable, row: &str) -> (u64, String) {
    let c = bt
        .read_cell("t", row.as_bytes(), "f", b"q")
        .unwrap()
        .expect("the cell exists");
    (c.timestamp, String::from_utf8(c.value.into_vec()).unwrap())
}

/// The server of the table's only tablet.
fn server(bt: &Bigtable) -> String {
    let tablets = bt.tablets("t").unwrap();
    assert_eq!(tablets.len(), 1);
    tablets[0].server.clone()
}

/// A serving server other than `not`.
fn other(bt: &Bigtable, not: &str) -> String {
    bt.server_reports()
        .into_iter()
        .find(|r| r.state == "serving" && r.name != not)
        .map(|r| r.name)
        .expect("a second live server")
}

fn report(bt: &Bigtable, name: &str) -> ServerReport {
    bt.server_reports()
        .into_iter()
        .find(|r| r.name == name)
        .expect("the server reports")
}

#[test]
fn a_write_after_a_move_is_newer_than_cells_stamped_ahead_of_this_clock() {
    let bt = open(Options::default());
    let ahead = now_micros() + 10 * MINUTE;
    write(&bt, "r", Some(ahead), "before the move");
    let from = server(&bt);
    let to = other(&bt, &from);
    bt.control(&format!("move t r {to}")).unwrap();
    assert_eq!(server(&bt), to);

    write(&bt, "r", None, "after the move");
    let (ts, value) = newest(&bt, "r");
    assert_eq!(value, "after the move");
    assert!(ts > ahead, "{ts} <= {ahead}");
    let r = report(&bt, &to);
    assert_eq!(r.clock_raised, 1, "{}", r.line());
    assert!(r.clock_raise_max_us > 9 * MINUTE, "{}", r.line());
    assert!(r.line().contains(" clock_raised=1 clock_raise_max_us="));
    bt.close().unwrap();
}

#[test]
fn timestamps_beyond_the_skew_limit_do_not_raise_the_clock_but_others_still_do() {
    let bt = open(Options::default());
    let ahead = now_micros() + 10 * MINUTE;
    let far = now_micros() + 120 * MINUTE;
    // Two files: one ahead by a plausible skew, one by what only a user
    // writes (and a cell at the largest timestamp there is).
    write(&bt, "a", Some(ahead), "ahead");
    bt.flush().unwrap();
    write(&bt, "b", Some(far), "far");
    write(&bt, "c", Some(key::MAX_TIMESTAMP), "the end of time");
    let from = server(&bt);
    let to = other(&bt, &from);
    bt.control(&format!("move t a {to}")).unwrap();
    assert_eq!(server(&bt), to);

    for row in ["a", "b", "c"] {
        write(&bt, row, None, "after the move");
    }
    let (ts, value) = newest(&bt, "a");
    assert_eq!(value, "after the move");
    assert!(ts > ahead && ts < far - 60 * MINUTE, "{ts}");
    // The user's far-future versions stay the newest.
    assert_eq!(newest(&bt, "b"), (far, "far".to_string()));
    assert_eq!(newest(&bt, "c").1, "the end of time");
    let r = report(&bt, &to);
    assert_eq!(r.clock_raised, 1, "{}", r.line());
    assert!(r.clock_raise_max_us < 11 * MINUTE, "{}", r.line());
    bt.close().unwrap();
}

#[test]
fn a_tablet_recovered_from_a_dead_servers_log_counts_its_redone_cells() {
    // Big memtables: the cell is only in the dead server's log.
    let bt = open(Options {
        memtable_bytes: 64 << 20,
        ..Options::default()
    });
    let ahead = now_micros() + 10 * MINUTE;
    write(&bt, "r", Some(ahead), "before the crash");
    let from = server(&bt);
    bt.control(&format!("kill {from}")).unwrap();
    // Served again once recovered (the client retries meanwhile).
    assert_eq!(newest(&bt, "r"), (ahead, "before the crash".to_string()));
    let to = server(&bt);
    assert_ne!(to, from);
    assert!(report(&bt, &to).recovered_entries > 0);

    write(&bt, "r", None, "after the crash");
    let (ts, value) = newest(&bt, "r");
    assert_eq!(value, "after the crash");
    assert!(ts > ahead, "{ts} <= {ahead}");
    assert_eq!(report(&bt, &to).clock_raised, 1);
    bt.close().unwrap();
}

/// A commit reports what it wrote, so that its caller need not read the
/// cell back: the timestamp the server gave the cell and the value's size;
/// for a batch, the newest timestamp and the sizes summed.
#[test]
fn a_commit_reports_the_timestamp_and_size_it_wrote() {
    let bt = open(Options::default());
    let m = RowMutation::new("r").set("f", "q", "twelve bytes");
    let w = bt.apply("t", &m, WriteOptions::default()).unwrap();
    assert_eq!(newest(&bt, "r"), (w.timestamp, "twelve bytes".to_string()));
    assert_eq!(w.bytes, 12);
    let batch = [
        RowMutation::new("a").set("f", "q", "1234"),
        RowMutation::new("b").set("f", "q", "123456"),
    ];
    let w = bt
        .apply_batch("t", &batch, WriteOptions::default())
        .unwrap();
    let (a, _) = newest(&bt, "a");
    let (b, _) = newest(&bt, "b");
    assert_eq!(w.timestamp, a.max(b));
    assert_eq!(w.bytes, 10);
}

#[test]
fn a_read_modify_write_of_a_cell_stamped_ahead_replaces_it_rather_than_hiding_behind_it() {
    let bt = open(Options::default());
    let opts = WriteOptions::default();
    // A user's far-future version (beyond any skew: the clock stays).
    let far = now_micros() + 120 * MINUTE;
    write(&bt, "a", Some(far), "far");
    assert_eq!(
        bt.append("t", b"a", "f", b"q", b"+1", opts).unwrap(),
        b"far+1"
    );
    // What the append returned is what the row reads now: the new value
    // took the newest version's timestamp (as Cloud Bigtable does), where
    // one at the server's time would lie behind the far version.
    assert_eq!(newest(&bt, "a"), (far, "far+1".to_string()));
    let versions = bt.read_column("t", b"a", "f", b"q", None).unwrap();
    assert_eq!(versions.len(), 1, "{versions:?}");
    // A counter likewise (twice: the second adds to the first); a cell in
    // the past gets the server's time.
    bt.apply(
        "t",
        &RowMutation::new("n").set_at("f", "q", key::MAX_TIMESTAMP, 5i64.to_be_bytes()),
        opts,
    )
    .unwrap();
    assert_eq!(bt.increment("t", b"n", "f", b"q", 2, opts).unwrap(), 7);
    assert_eq!(bt.increment("t", b"n", "f", b"q", 2, opts).unwrap(), 9);
    write(&bt, "p", Some(1000), "past");
    let before = now_micros();
    bt.append("t", b"p", "f", b"q", b"+1", opts).unwrap();
    let (ts, value) = newest(&bt, "p");
    assert_eq!(value, "past+1");
    assert!(ts >= before && ts < far, "{ts}");
    bt.close().unwrap();
}
