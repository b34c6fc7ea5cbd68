//! A walk that enters a table's rows in key order reads them in batches
//! (`row_walks.rs`, `StoreView::read_ahead`), and every way a row comes in,
//! changes or goes between the batch's read and the walk's arrival shows
//! when the walk gets there.

use super::{T, TRUNC};
use crate::store::Store;
use crate::store_calls::Call;
use engine::{RowMutation, WriteOptions};
use fuser::Errno;

/// A table `t` of `rows` rows (`r000`, ...), each `f:q` = `v<i>`.
fn table(rows: usize) -> T {
    let t = T::new();
    let batch: String = (0..rows)
        .map(|i| format!("set r{i:03} f:q v{i}\n"))
        .collect();
    t.mutate(batch).unwrap();
    t
}

/// What a walk does in a row: enters it, lists it, lists its family and
/// reads its cell (None: the row is not there).
fn visit(t: &T, row: &str) -> Option<Vec<u8>> {
    let ino = match t.ino(&format!("/t/{row}")) {
        Err(Errno::ENOENT) => return None,
        r => r.unwrap(),
    };
    let families: Vec<String> = t
        .list_unopened(ino, 100)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(families.iter().any(|f| f == "f"), "{row}: {families:?}");
    let fam = t.ino(&format!("/t/{row}/f")).unwrap();
    let cells: Vec<String> = t
        .list_unopened(fam, 100)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(cells.iter().any(|c| c == "q"), "{row}: {cells:?}");
    Some(t.get(&format!("/t/{row}/f/q")).unwrap())
}

fn calls(t: &T, c: Call) -> u64 {
    t.fs.ctx().data.store_calls().get(c)
}

#[test]
fn a_walk_in_key_order_reads_its_rows_in_batches() {
    let rows = 300;
    let t = table(rows);
    let (reads, peeks, scans) = (
        calls(&t, Call::ReadRow),
        calls(&t, Call::PeekRow),
        calls(&t, Call::Scan),
    );
    let before = t.fs.ctx().data.store_calls().tablet_calls();
    for i in 0..rows {
        let row = format!("r{i:03}");
        assert_eq!(visit(&t, &row).unwrap(), format!("v{i}").as_bytes());
    }
    let total = t.fs.ctx().data.store_calls().tablet_calls() - before;
    println!("a walk of {rows} rows: {total} tablet-server calls");
    // Each row read alone would be a call (or two) a row; the first rows
    // are (the walk is not known yet), then the scans take the rest,
    // however long the walk takes (a batch that expires is read again).
    assert!(calls(&t, Call::Scan) > scans);
    let alone = calls(&t, Call::ReadRow) - reads + calls(&t, Call::PeekRow) - peeks;
    assert!(alone <= 4, "{alone} rows read alone");
}

#[test]
fn a_row_changed_after_its_batch_was_read_shows_the_change() {
    let t = table(60);
    // Far enough into the walk that the next batches hold the rows below.
    for i in 0..12 {
        visit(&t, &format!("r{i:03}")).unwrap();
    }
    // Through the mount, a `.mutate` batch, a writer the mount is told of,
    // a row deleted, a new row, and a table-wide change reported by
    // another daemon.
    t.put("/t/r013/f/q", b"mount", TRUNC).unwrap();
    t.mutate("set r014 f:q batch\ndeleterow r016\nset r0165 f:q new\n")
        .unwrap();
    let m = RowMutation::new(b"r015".to_vec()).set("f", b"q".to_vec(), b"grpc".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"r015"]);
    let m = RowMutation::new(b"r017".to_vec()).set("f", b"q".to_vec(), b"other".to_vec());
    t.store.apply("t", &m, WriteOptions::default()).unwrap();
    t.fs.table_changed_elsewhere("t");
    let seen: Vec<Option<Vec<u8>>> = ["r012", "r013", "r014", "r015", "r016", "r0165", "r017"]
        .iter()
        .map(|r| visit(&t, r))
        .collect();
    let want: Vec<Option<&[u8]>> = vec![
        Some(b"v12"),
        Some(b"mount"),
        Some(b"batch"),
        Some(b"grpc"),
        None,
        Some(b"new"),
        Some(b"other"),
    ];
    assert_eq!(
        seen,
        want.into_iter()
            .map(|v| v.map(<[u8]>::to_vec))
            .collect::<Vec<_>>()
    );
}

#[test]
fn new_rows_written_in_key_order_still_cost_one_call_each() {
    // A loader's lookups before each new row's mkdir find nothing, and
    // the reads after its writes come in key order: whatever they read
    // ahead, each new row after the first is its commit alone.
    let t = table(3);
    let calls = t.fs.ctx().data.store_calls();
    let mut costs = Vec::new();
    for i in 0..20 {
        let row = format!("s{i:03}");
        let before = calls.tablet_calls();
        assert_eq!(t.ino(&format!("/t/{row}/f/q")), Err(Errno::ENOENT));
        t.mkdir(&format!("/t/{row}")).unwrap();
        t.mkdir(&format!("/t/{row}/f")).unwrap();
        t.put(&format!("/t/{row}/f/q"), row.as_bytes(), TRUNC)
            .unwrap();
        costs.push(calls.tablet_calls() - before);
        assert_eq!(t.get(&format!("/t/{row}/f/q")).unwrap(), row.as_bytes());
    }
    assert_eq!(costs[1..], [1; 19]);
}
