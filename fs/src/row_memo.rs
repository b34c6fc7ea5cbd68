//! The cell a lookup's read of a row (or of a family in it) brought back,
//! kept for a moment so that the lookups that follow it in the same path
//! walk (`t/row` → `t/row/family` → `t/row/family/cell`) are answered
//! without a call of their own: a family holding that cell exists, and
//! that cell's attributes are its own.
//!
//! Only positive answers come from here (a name the memo does not show is
//! read from the store), only lookups use it (an open reads the value
//! afresh), entries last [`MEMO_TTL`], and every write through the mount
//! drops the entries of the rows it touches ([`crate::store_calls::Counted`]
//! calls [`RowMemo::forget_row`]), so the mount reads its own writes.
//!
//! A row found empty is kept too, for `mkdir` alone: the lookup the kernel
//! makes before it just read that the row (and so any family of it) has no
//! cell, so the mkdir of the row, and of a family in it, need not read that
//! again to refuse with EEXIST. (A lookup never answers ENOENT from here.)

use engine::Cell;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a row's cell answers lookups: long enough for a path walk's
/// next lookup (microseconds later, milliseconds on a busy machine), short
/// against the kernel's own caching of names and attributes (`dir_timeout`,
/// `entry_timeout`), which already lets a walk see a change made through
/// another daemon that late.
pub const MEMO_TTL: Duration = Duration::from_millis(100);

/// At most this many rows are kept (a walk over many rows drops the oldest).
const MAX_ROWS: usize = 1024;

/// A view of the row: `None` the live one, `Some(t)` as of `t` (`.at/<t>/`).
pub type ViewTs = Option<u64>;

/// What is kept of one row: per view, a cell (None: the row had none) and
/// when it was read.
type Kept = Vec<(ViewTs, Option<Cell>, Instant)>;

/// Write counters, one per stripe of rows.
const STRIPES: usize = 64;

/// The last cell read of recently looked-up rows, per table and row key.
pub struct RowMemo {
    rows: Mutex<HashMap<(String, Vec<u8>), Kept>>,
    /// Writes so far to the rows of each stripe: a read that a write
    /// overtook (the write's forget came between the read and its keep)
    /// must not be kept.
    epochs: [AtomicU64; STRIPES],
}

impl Default for RowMemo {
    fn default() -> Self {
        RowMemo {
            rows: Mutex::default(),
            epochs: [const { AtomicU64::new(0) }; STRIPES],
        }
    }
}

fn stripe(table: &str, row: &[u8]) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    table.hash(&mut h);
    row.hash(&mut h);
    (h.finish() % STRIPES as u64) as usize
}

impl RowMemo {
    /// What a read of `row` passes to [`RowMemo::keep`]: taken before it.
    pub fn epoch(&self, table: &str, row: &[u8]) -> u64 {
        self.epochs[stripe(table, row)].load(Ordering::Acquire)
    }

    /// Keeps `cell` (None: the row has no cell), read from `row` of `table`
    /// in `view` by a read that started at `epoch`, unless a write to the
    /// row's stripe came since.
    pub fn keep(&self, table: &str, view: ViewTs, row: &[u8], cell: Option<Cell>, epoch: u64) {
        let now = Instant::now();
        let mut g = self.rows.lock();
        if self.epoch(table, row) != epoch {
            return;
        }
        if g.len() >= MAX_ROWS {
            g.retain(|_, k| {
                k.iter()
                    .any(|(_, _, at)| now.duration_since(*at) < MEMO_TTL)
            });
            if g.len() >= MAX_ROWS {
                g.clear();
            }
        }
        let kept = g.entry((table.to_string(), row.to_vec())).or_default();
        kept.retain(|(v, _, at)| *v != view && now.duration_since(*at) < MEMO_TTL);
        kept.push((view, cell, now));
    }

    /// The cell kept for the row, if it is recent and `wanted` accepts it.
    pub fn get(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        wanted: impl Fn(&Cell) -> bool,
    ) -> Option<Cell> {
        let g = self.rows.lock();
        if g.is_empty() {
            return None;
        }
        let kept = g.get(&(table.to_string(), row.to_vec()))?;
        kept.iter()
            .find_map(|(v, c, at)| match c {
                Some(c) if *v == view && at.elapsed() < MEMO_TTL && wanted(c) => Some(c),
                _ => None,
            })
            .cloned()
    }

    /// Whether the live row was read empty a moment ago (for `mkdir`).
    pub fn read_empty(&self, table: &str, row: &[u8]) -> bool {
        let g = self.rows.lock();
        if g.is_empty() {
            return false;
        }
        g.get(&(table.to_string(), row.to_vec())).is_some_and(|k| {
            k.iter()
                .any(|(v, c, at)| v.is_none() && c.is_none() && at.elapsed() < MEMO_TTL)
        })
    }

    /// Drops what is kept of `row` (every view): it was just written.
    pub fn forget_row(&self, table: &str, row: &[u8]) {
        let mut g = self.rows.lock();
        self.epochs[stripe(table, row)].fetch_add(1, Ordering::AcqRel);
        if !g.is_empty() {
            g.remove(&(table.to_string(), row.to_vec()));
        }
    }

    /// Drops everything kept (a table or schema changed).
    pub fn forget_all(&self) {
        let mut g = self.rows.lock();
        for e in &self.epochs {
            e.fetch_add(1, Ordering::AcqRel);
        }
        g.clear();
    }
}
