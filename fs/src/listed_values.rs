//! The values of the cells a family's listing just read, kept for the
//! OPEN of each that follows (a scan, `grep -r`, `cat dir/*`): the listing
//! reads the family's cells with their values to report their sizes, so
//! the open that comes microseconds later takes the value from here
//! instead of reading it again (one tablet-server call a scanned file
//! instead of two). A row directory's listing reads the newest cell of
//! every column of the row to learn its families; kept the same way, it
//! answers the listing of each family that follows (a walk: `grep -r`,
//! `find`, `tar`) and the opens after it. The cell a lookup's or a
//! getattr's read brought back is kept the same way
//! ([`ListedValues::keep_one`]): the open after the walk (`cat`) takes it.
//!
//! Coherence is the row memo's ([`crate::row_memo`], which owns this):
//! entries last as long as the row memo's, every write to a row through the mount, a
//! `.mutate` batch, a gRPC call or another daemon of the cluster drops the
//! row's entry before it is acknowledged (`RowMemo::forget_row`), and a
//! listing that such a write overtook is not kept (the stripe's epoch).
//! Each value is handed out once: a second open of the cell reads it.

use engine::Cell;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The largest value kept (larger ones are read by their open, which
/// hands the kernel pages only up to about this size anyway).
pub const MAX_VALUE: usize = 128 << 10;

/// Bytes of values one listing may keep (the rest are read by their opens).
const MAX_LISTING: usize = 256 << 10;

/// Bytes of values kept in all: past it, expired entries go, then all.
const MAX_TOTAL: usize = 4 << 20;

/// A listing of a live row: one family's, or the whole row's (a row
/// directory's listing reads the newest cell of every column).
struct Listing {
    table: String,
    row: Vec<u8>,
    /// The family listed; None: the whole row.
    family: Option<String>,
    /// Every cell the read returned is still here (none was too large,
    /// the listing's bound was not reached, none was taken): only then
    /// does a whole row's listing answer for a family's.
    complete: bool,
    /// The cells not opened yet (their row left out), their values owned
    /// (not a cache block's).
    cells: Vec<Cell>,
    bytes: usize,
    at: Instant,
}

#[derive(Default)]
struct Kept {
    /// By the row memo's hash of table and row: one family a row (the
    /// last listed).
    rows: HashMap<u64, Listing>,
    bytes: usize,
}

impl Kept {
    /// Keeps `listing` for the row of hash `h` in place of what was kept
    /// for it, first dropping expired listings (`ttl`), then all, if it
    /// would not fit in [`MAX_TOTAL`].
    fn insert(&mut self, h: u64, listing: Listing, ttl: Duration) {
        let len = listing.bytes;
        if self.bytes + len > MAX_TOTAL {
            let now = listing.at;
            self.rows.retain(|_, l| now.duration_since(l.at) < ttl);
            self.bytes = self.rows.values().map(|l| l.bytes).sum();
            if self.bytes + len > MAX_TOTAL {
                self.rows.clear();
                self.bytes = 0;
            }
        }
        if let Some(old) = self.rows.insert(h, listing) {
            self.bytes -= old.bytes;
        }
        self.bytes += len;
    }
}

/// The values of recent family listings (see the module doc).
pub struct ListedValues {
    kept: Mutex<Kept>,
    /// How long a listing's values are kept.
    ttl: Duration,
}

impl ListedValues {
    /// Values kept for `ttl`.
    pub(crate) fn new(ttl: Duration) -> ListedValues {
        ListedValues {
            kept: Mutex::default(),
            ttl,
        }
    }

    /// Keeps `cells`, a listing of `family` (None: of the whole row) in
    /// the live `row` (hash `h`), if `still` says no write to the row came
    /// since the read began (checked under the lock that
    /// [`ListedValues::forget`] takes after the write moved the epoch).
    pub(crate) fn keep(
        &self,
        h: u64,
        (table, row, family): (&str, &[u8], Option<&str>),
        cells: &[Cell],
        still: impl FnOnce() -> bool,
    ) {
        let mut bytes = 0;
        let mut complete = true;
        let mut kept = Vec::new();
        for c in cells {
            let len = c.value.len();
            if len > MAX_VALUE {
                complete = false;
                continue;
            }
            if bytes + len > MAX_LISTING {
                complete = false;
                break;
            }
            bytes += len;
            kept.push(Cell {
                row: Vec::new(),
                family: c.family.clone(),
                qualifier: c.qualifier.clone(),
                timestamp: c.timestamp,
                value: c.value.to_vec().into(),
            });
        }
        if kept.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut g = self.kept.lock();
        if !still() {
            return;
        }
        let listing = Listing {
            table: table.to_string(),
            row: row.to_vec(),
            family: family.map(str::to_string),
            complete,
            cells: kept,
            bytes,
            at: now,
        };
        g.insert(h, listing, self.ttl);
    }

    /// Keeps the value of one cell of the live `row` (hash `h`) that a
    /// lookup's or getattr's read brought back, for the open that follows
    /// (`cat`: the walk's read of the row answers the open too), beside
    /// what a listing of the row kept (`still` as for
    /// [`ListedValues::keep`]). Such an entry answers no listing.
    pub(crate) fn keep_one(
        &self,
        h: u64,
        (table, row): (&str, &[u8]),
        cell: &Cell,
        still: impl FnOnce() -> bool,
    ) {
        let len = cell.value.len();
        if len > MAX_VALUE {
            return;
        }
        let owned = || Cell {
            row: Vec::new(),
            family: cell.family.clone(),
            qualifier: cell.qualifier.clone(),
            timestamp: cell.timestamp,
            value: cell.value.to_vec().into(),
        };
        let mut g = self.kept.lock();
        if !still() {
            return;
        }
        if let Some(l) = self.fresh(&mut g, h, table, row) {
            let had = l
                .cells
                .iter()
                .any(|c| c.family == cell.family && c.qualifier == cell.qualifier);
            if had || l.bytes + len > MAX_LISTING {
                return;
            }
            if l.family.as_deref() != Some(cell.family.as_str()) {
                l.family = None;
            }
            l.complete = false;
            l.cells.push(owned());
            l.bytes += len;
            g.bytes += len;
            return;
        }
        let now = Instant::now();
        let listing = Listing {
            table: table.to_string(),
            row: row.to_vec(),
            family: Some(cell.family.clone()),
            complete: false,
            cells: vec![owned()],
            bytes: len,
            at: now,
        };
        g.insert(h, listing, self.ttl);
    }

    /// The listing kept for the row of hash `h`, if it is `table`'s `row`
    /// and recent (an expired one is dropped).
    fn fresh<'a>(
        &self,
        g: &'a mut Kept,
        h: u64,
        table: &str,
        row: &[u8],
    ) -> Option<&'a mut Listing> {
        let (expired, ours, bytes) = {
            let l = g.rows.get(&h)?;
            (
                l.at.elapsed() >= self.ttl,
                l.table == table && l.row == row,
                l.bytes,
            )
        };
        if expired {
            g.rows.remove(&h);
            g.bytes -= bytes;
            return None;
        }
        if !ours {
            return None;
        }
        g.rows.get_mut(&h)
    }

    /// The value of the live cell `family:qualifier` of `row` (hash `h`)
    /// as a listing read it a moment ago, taken out.
    pub(crate) fn take(
        &self,
        h: u64,
        (table, row, family): (&str, &[u8], &str),
        qualifier: &[u8],
    ) -> Option<Cell> {
        let mut g = self.kept.lock();
        let l = self.fresh(&mut g, h, table, row)?;
        if l.family.as_deref().is_some_and(|f| f != family) {
            return None;
        }
        let i = l
            .cells
            .iter()
            .position(|c| c.family == family && c.qualifier == qualifier)?;
        let mut c = l.cells.swap_remove(i);
        let len = c.value.len();
        l.bytes -= len;
        l.complete = false;
        let empty = l.cells.is_empty();
        g.bytes -= len;
        if empty {
            g.rows.remove(&h);
        }
        c.row = row.to_vec();
        Some(c)
    }

    /// The cells of `family` in `row` (hash `h`), in column order, as a
    /// listing of the whole row read them a moment ago, if it kept them
    /// all (they stay for the opens).
    pub(crate) fn family_cells(
        &self,
        h: u64,
        (table, row, family): (&str, &[u8], &str),
    ) -> Option<Vec<Cell>> {
        let mut g = self.kept.lock();
        let l = self.fresh(&mut g, h, table, row)?;
        // A whole row's listing answers for each family, a family's for
        // itself.
        if l.family.as_deref().is_some_and(|f| f != family) || !l.complete {
            return None;
        }
        let mut cells: Vec<Cell> = l
            .cells
            .iter()
            .filter(|c| c.family == family)
            .map(|c| Cell {
                row: row.to_vec(),
                ..c.clone()
            })
            .collect();
        cells.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
        Some(cells)
    }

    /// Drops what is kept of the row of hash `h` (it was written).
    pub(crate) fn forget(&self, h: u64) {
        let mut g = self.kept.lock();
        if let Some(l) = g.rows.remove(&h) {
            g.bytes -= l.bytes;
        }
    }

    /// Drops everything (a table or schema changed).
    pub(crate) fn forget_all(&self) {
        let mut g = self.kept.lock();
        g.rows.clear();
        g.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::{ListedValues, MAX_LISTING, MAX_VALUE};
    use engine::Cell;
    use std::time::Duration;

    fn cell(q: &str, len: usize) -> Cell {
        Cell {
            row: b"r".to_vec(),
            family: "f".into(),
            qualifier: q.as_bytes().to_vec(),
            timestamp: 7,
            value: vec![b'v'; len].into(),
        }
    }

    const AT: (&str, &[u8], &str) = ("t", b"r", "f");
    const FAM: (&str, &[u8], Option<&str>) = ("t", b"r", Some("f"));

    #[test]
    fn each_value_is_taken_once_from_its_own_family() {
        let v = ListedValues::new(Duration::from_secs(60));
        v.keep(1, FAM, &[cell("a", 3), cell("b", 4)], || true);
        assert!(
            v.take(1, ("t", b"r", "g"), b"a").is_none(),
            "another family"
        );
        assert!(v.take(1, ("u", b"r", "f"), b"a").is_none(), "another table");
        let a = v.take(1, AT, b"a").unwrap();
        assert_eq!((a.row.as_slice(), a.family.as_str()), (&b"r"[..], "f"));
        assert_eq!((a.value.len(), a.timestamp), (3, 7));
        assert!(v.take(1, AT, b"a").is_none(), "taken already");
        v.forget(1);
        assert!(v.take(1, AT, b"b").is_none(), "the row was written");
    }

    #[test]
    fn a_listing_a_write_overtook_or_too_old_is_not_kept() {
        let v = ListedValues::new(Duration::from_secs(60));
        v.keep(1, FAM, &[cell("a", 3)], || false);
        assert!(v.take(1, AT, b"a").is_none());
        let old = ListedValues::new(Duration::ZERO);
        old.keep(1, FAM, &[cell("a", 3)], || true);
        assert!(old.take(1, AT, b"a").is_none());
    }

    #[test]
    fn large_values_and_listings_are_bounded() {
        let v = ListedValues::new(Duration::from_secs(60));
        let many: Vec<Cell> = (0..MAX_LISTING / MAX_VALUE + 2)
            .map(|i| cell(&format!("c{i:03}"), MAX_VALUE))
            .collect();
        v.keep(1, FAM, &[cell("big", MAX_VALUE + 1)], || true);
        assert!(v.take(1, AT, b"big").is_none(), "over the largest value");
        v.keep(1, FAM, &many, || true);
        let kept = many
            .iter()
            .filter(|c| v.take(1, AT, &c.qualifier).is_some())
            .count();
        assert_eq!(kept, MAX_LISTING / MAX_VALUE);
        v.keep(2, FAM, &[cell("a", 1)], || true);
        v.forget_all();
        assert!(v.take(2, AT, b"a").is_none());
    }

    #[test]
    fn a_lookups_cell_joins_the_rows_listing_and_answers_no_listing() {
        let v = ListedValues::new(Duration::from_secs(60));
        v.keep_one(1, ("t", b"r"), &cell("a", 3), || false);
        assert!(v.take(1, AT, b"a").is_none(), "a write overtook the read");
        v.keep_one(1, ("t", b"r"), &cell("a", 3), || true);
        assert!(v.family_cells(1, AT).is_none(), "not a listing");
        assert_eq!(v.take(1, AT, b"a").unwrap().value.len(), 3);
        assert!(v.take(1, AT, b"a").is_none(), "taken once");
        // Beside a family's listing: both stay.
        v.keep(1, FAM, &[cell("b", 2)], || true);
        let mut g = cell("z", 1);
        g.family = "g".into();
        v.keep_one(1, ("t", b"r"), &g, || true);
        assert!(v.take(1, AT, b"b").is_some());
        assert!(v.take(1, ("t", b"r", "g"), b"z").is_some());
        v.keep_one(1, ("t", b"r"), &cell("big", MAX_VALUE + 1), || true);
        assert!(v.take(1, AT, b"big").is_none(), "over the largest value");
    }

    #[test]
    fn a_whole_rows_listing_answers_for_its_families_until_one_is_taken() {
        let v = ListedValues::new(Duration::from_secs(60));
        let mut g = cell("z", 1);
        g.family = "g".into();
        v.keep(
            1,
            ("t", b"r", None),
            &[cell("b", 2), cell("a", 1), g],
            || true,
        );
        let f = v.family_cells(1, AT).unwrap();
        let names: Vec<&[u8]> = f.iter().map(|c| c.qualifier.as_slice()).collect();
        assert_eq!(names, [&b"a"[..], b"b"], "f's cells only, in column order");
        assert_eq!(f[0].row, b"r");
        assert!(v.family_cells(1, ("t", b"s", "f")).is_none(), "another row");
        assert_eq!(v.take(1, ("t", b"r", "g"), b"z").unwrap().family, "g");
        assert!(v.family_cells(1, AT).is_none(), "no longer all of the row");
        assert!(v.take(1, AT, b"a").is_some(), "the opens still take theirs");
        // A family's listing answers for itself, not for another family.
        v.keep(2, FAM, &[cell("a", 1)], || true);
        assert_eq!(v.family_cells(2, AT).map(|c| c.len()), Some(1));
        assert!(v.family_cells(2, ("t", b"r", "g")).is_none());
        // Nor does a whole row's that left a value out.
        v.keep(
            3,
            ("t", b"r", None),
            &[cell("a", 1), cell("big", MAX_VALUE + 1)],
            || true,
        );
        assert!(v.family_cells(3, AT).is_none());
    }
}
