//! Rows entered in key order. A tree walk (`find`, `du`, `tar`, `grep -r`,
//! `rsync`) enters a table's rows one after another, each with a read of
//! the whole row (its lookup's, or its listing's): a tablet-server call a
//! row, and an RPC each when another daemon serves the table. Once three
//! of a table's rows are read in increasing order (none found missing:
//! a loader's lookups before its new rows' `mkdir`s are no walk), the read
//! of one takes the rows after it too, in one scan, and the row memo keeps them for the
//! lookups and listings that follow (`StoreView::read_ahead`). The batch
//! doubles while the walk goes on, from [`FIRST_AHEAD`] up to
//! [`MAX_AHEAD`] rows (and [`AHEAD_BYTES`] of values).
//!
//! A hint only: a wrong guess reads rows nobody enters (one batch), never
//! a wrong answer.

use ahash::AHashMap as HashMap;
use parking_lot::Mutex;

/// Rows the first read ahead takes (the row itself among them).
const FIRST_AHEAD: u64 = 8;

/// At most this many rows a read; well inside what the row memo keeps.
pub const MAX_AHEAD: u64 = 256;

/// At most this many bytes of values a read ahead takes (rows past it are
/// read by their own lookups).
pub const AHEAD_BYTES: u64 = 1 << 20;

/// Tables followed; past this the map starts again.
const CAPACITY: usize = 1024;

struct Walk {
    /// The row read last (None after a read that found no row).
    last: Option<Vec<u8>>,
    /// Reads in a row, each of a row after the one before.
    run: u32,
    /// Bytes of values a row held in the last read ahead (0: none yet).
    row_bytes: u64,
}

/// See the module comment.
#[derive(Default)]
pub struct RowWalks {
    tables: Mutex<HashMap<String, Walk>>,
}

impl RowWalks {
    /// A read of the whole of `row` of `table` is about to be made: how many
    /// rows, from it on, it should take (1: the row alone).
    pub fn rows_to_read(&self, table: &str, row: &[u8]) -> u64 {
        let mut g = self.tables.lock();
        let Some(w) = g.get_mut(table) else {
            if g.len() >= CAPACITY {
                g.clear();
            }
            let first = Walk {
                last: Some(row.to_vec()),
                run: 0,
                row_bytes: 0,
            };
            g.insert(table.to_string(), first);
            return 1;
        };
        // The same row again (its lookup's read, then its listing's, when
        // the memo let it go) leaves the walk as it was.
        w.run = match &w.last {
            Some(last) if last.as_slice() < row => w.run.saturating_add(1),
            Some(last) if last.as_slice() == row => w.run,
            _ => 0,
        };
        w.last = Some(row.to_vec());
        // Three rows in order, the two before found: a walk.
        let n = match w.run {
            0 | 1 => return 1,
            n => (FIRST_AHEAD << (n - 2).min(8)).min(MAX_AHEAD),
        };
        // Rows too big for a batch are read alone; the estimate fades, so
        // that the walk tries again a few rows on.
        let fit = AHEAD_BYTES.checked_div(w.row_bytes).unwrap_or(u64::MAX);
        if fit < 2 {
            w.row_bytes -= w.row_bytes / 16;
            return 1;
        }
        n.min(fit)
    }

    /// A read of `table` found its row missing: rows written in key order
    /// (a loader's lookups before each `mkdir`) are no walk.
    pub fn missed(&self, table: &str) {
        if let Some(w) = self.tables.lock().get_mut(table) {
            w.run = 0;
            w.last = None;
        }
    }

    /// A read ahead of `table` kept `rows` whole rows holding `bytes` of
    /// values (none: the first row alone came to the byte limit).
    pub fn read(&self, table: &str, rows: u64, bytes: u64) {
        if let Some(w) = self.tables.lock().get_mut(table) {
            w.row_bytes = (bytes / rows.max(1)).max(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_key_order_read_ahead_more_and_more() {
        let w = RowWalks::default();
        assert_eq!(w.rows_to_read("t", b"a"), 1);
        assert_eq!(w.rows_to_read("t", b"a1"), 1);
        assert_eq!(w.rows_to_read("t", b"b"), FIRST_AHEAD);
        assert_eq!(w.rows_to_read("t", b"j"), 2 * FIRST_AHEAD);
        assert_eq!(w.rows_to_read("t", b"z"), 4 * FIRST_AHEAD);
        for i in 0..10 {
            w.rows_to_read("t", format!("z{i}").as_bytes());
        }
        assert_eq!(w.rows_to_read("t", b"zz"), MAX_AHEAD);
        // Another table keeps its own walk.
        assert_eq!(w.rows_to_read("u", b"zzz"), 1);
    }

    #[test]
    fn rows_too_big_for_a_batch_are_read_alone_for_a_while() {
        let w = RowWalks::default();
        w.rows_to_read("t", b"a");
        w.rows_to_read("t", b"a1");
        assert_eq!(w.rows_to_read("t", b"b"), FIRST_AHEAD);
        // A tenth of the budget a row: ten rows fit.
        w.read("t", 4, 4 * AHEAD_BYTES / 10);
        assert_eq!(w.rows_to_read("t", b"c"), 2 * FIRST_AHEAD - 6);
        // The first row alone reached the limit.
        w.read("t", 0, AHEAD_BYTES + 1);
        let alone = (0..40)
            .take_while(|i| w.rows_to_read("t", format!("d{i:02}").as_bytes()) == 1)
            .count();
        assert!((5..40).contains(&alone), "{alone}");
    }

    #[test]
    fn a_row_out_of_order_reads_alone() {
        let w = RowWalks::default();
        w.rows_to_read("t", b"m");
        w.rows_to_read("t", b"m1");
        assert_eq!(w.rows_to_read("t", b"n"), FIRST_AHEAD);
        assert_eq!(w.rows_to_read("t", b"c"), 1);
        assert_eq!(w.rows_to_read("t", b"d"), 1);
        assert_eq!(w.rows_to_read("t", b"d"), 1);
        assert_eq!(w.rows_to_read("t", b"e"), FIRST_AHEAD);
        assert_eq!(w.rows_to_read("t", b"e"), FIRST_AHEAD);
        // A read that found no row: the walk starts again.
        w.missed("t");
        w.missed("u");
        assert_eq!(w.rows_to_read("t", b"f"), 1);
        assert_eq!(w.rows_to_read("t", b"g"), 1);
        assert_eq!(w.rows_to_read("t", b"h"), FIRST_AHEAD);
    }
}
