//! What the mount saw of a row a moment ago, kept so that the requests
//! that follow need no call of their own: the cell a lookup's read of a
//! row (or of a family in it) brought back answers the path walk's next
//! lookups (`t/row` → `t/row/family` → `t/row/family/cell`: a family holding
//! that cell exists, and that cell's attributes are its own), and a write
//! through the mount leaves behind that its row and family now exist (the
//! kernel asks for the directories' attributes again after a create), and,
//! for a write of one cell, that cell's version and size from the write's
//! reply (the kernel asks for a file's attributes again after writing it).
//! A listing's read of a row (or a family) is kept as a lookup's is: the
//! kernel asks for a directory's attributes after listing it (the listing
//! dropped its atime), after the opens have taken the listed values.
//!
//! Entries last [`MEMO_TTL`], and every write to a row drops the row's
//! entries before it is acknowledged: a write through the mount
//! ([`crate::store_calls::Counted`] calls [`RowMemo::forget_row`]), a
//! `.mutate` batch, a gRPC call and another daemon's invalidation
//! (docs/coherence.md) alike; a table-wide change and a
//! `.bigtable/control` command (`restore`, an undelete) drop everything
//! ([`RowMemo::forget_all`]), and a read that such a write overtook is not
//! kept (the stripe's epoch). So what is kept is never older than the last
//! write acknowledged anywhere, except where a version expired (`max_age`)
//! in between.
//!
//! The values a family's (or a row's) listing read are kept beside it,
//! for the listings and opens that follow ([`crate::listed_values`]), and
//! dropped with the row; so is the value of the cell a lookup's or a
//! getattr's read brought back, for the open that follows the walk.
//!
//! A live row found empty is kept too: the lookup of it that follows
//! (`mkdir`'s, after a failed `open`'s) answers ENOENT without a read;
//! the mkdir of the row, and of a family in it, need not read again to
//! refuse with EEXIST; and the names under a row so made hold nothing yet
//! (`mkdir -p t/row/fam && echo v > t/row/fam/q` reads the row once). The
//! same invalidations drop it, so a row written through another daemon is
//! found here as soon as that write returns.

use crate::listed_values::ListedValues;
use crate::row_gaps::RowGaps;
use engine::Cell;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a row's cell answers lookups: long enough for a path walk's
/// next lookup (microseconds later, milliseconds on a busy machine), short
/// against the kernel's own caching of names and attributes (`dir_timeout`,
/// `entry_timeout`); it bounds what no write's invalidation reaches (a
/// version that expired by `max_age`).
pub const MEMO_TTL: Duration = Duration::from_millis(100);

/// At most this many rows are kept (a walk over many rows drops the oldest).
const MAX_ROWS: usize = 1024;

/// A view of the row: `None` the live one, `Some(t)` as of `t` (`.at/<t>/`).
pub type ViewTs = Option<u64>;

/// A row (by hash) and its stripe's write epoch at some moment
/// ([`RowMemo::stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowStamp {
    row: u64,
    epoch: u64,
}

/// What the memo keeps of a cell read (the newest visible version of its
/// column): its column, version and size, not its value (which may be
/// large, and share a block of the cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellSeen {
    pub family: String,
    pub qualifier: Vec<u8>,
    pub timestamp: u64,
    pub len: u64,
}

impl CellSeen {
    fn of(c: &Cell) -> CellSeen {
        CellSeen {
            family: c.family.clone(),
            qualifier: c.qualifier.clone(),
            timestamp: c.timestamp,
            len: c.value.len() as u64,
        }
    }
}

/// What was seen of a row.
#[derive(Clone)]
enum Seen {
    /// A cell read.
    Cell(CellSeen),
    /// The row had no cell (live).
    Empty,
    /// The mount wrote a cell of this family (live; its version unknown).
    Wrote(String),
    /// The read that kept the cells beside this one returned every column
    /// of the row (None) or of this family: a name it did not return is
    /// not there.
    Whole(Option<String>),
}

/// What a read of a row kept by [`RowMemo::keep`] covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covered<'a> {
    /// Some of the row's or a family's columns (a limit stopped the read).
    Part,
    /// Every column of the row.
    Row,
    /// Every column of this family.
    Family(&'a str),
}

/// What the memo says of a name in a row ([`RowMemo::column`],
/// [`RowMemo::family`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known<T> {
    /// A read (or a write) a moment ago saw it.
    Seen(T),
    /// A read a moment ago returned all of its family, and not it.
    Absent,
    /// Nothing kept says.
    Unknown,
}

/// What was seen of one row in one view, and when.
struct Kept {
    table: String,
    row: Vec<u8>,
    view: ViewTs,
    seen: Seen,
    at: Instant,
}

/// Write counters, one per stripe of rows.
const STRIPES: u64 = 64;

/// What was seen of recently looked-up or written rows, by a hash of the
/// table and row key (no key is copied to look one up).
pub struct RowMemo {
    rows: Mutex<HashMap<u64, Vec<Kept>>>,
    /// Writes so far to the rows of each stripe: a read that a write
    /// overtook (the write's forget came between the read and its keep)
    /// must not be kept.
    epochs: [AtomicU64; STRIPES as usize],
    /// Writes so far to the tables of each stripe (by a hash of the table
    /// name): what a table listing kept is still whole while its table's
    /// epoch stands ([`RowMemo::table_epoch`]).
    table_epochs: [AtomicU64; STRIPES as usize],
    /// The values of the cells of recent family listings.
    values: ListedValues,
    /// Ranges of rows seen absent.
    gaps: RowGaps,
}

impl Default for RowMemo {
    fn default() -> Self {
        RowMemo {
            rows: Mutex::default(),
            epochs: [const { AtomicU64::new(0) }; STRIPES as usize],
            table_epochs: [const { AtomicU64::new(0) }; STRIPES as usize],
            values: ListedValues::new(MEMO_TTL),
            gaps: RowGaps::new(MEMO_TTL),
        }
    }
}

/// What is kept of `row` of `table` in `view` and still fresh.
fn fresh<'a>(
    rows: &'a HashMap<u64, Vec<Kept>>,
    table: &'a str,
    view: ViewTs,
    row: &'a [u8],
) -> impl Iterator<Item = &'a Kept> {
    rows.get(&hash(table, row))
        .into_iter()
        .flatten()
        .filter(move |e| e.view == view && e.at.elapsed() < MEMO_TTL)
        .filter(move |e| e.table == table && e.row == row)
}

fn hash(table: &str, row: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    table.hash(&mut h);
    row.hash(&mut h);
    h.finish()
}

impl RowMemo {
    fn epoch_of(&self, h: u64) -> &AtomicU64 {
        &self.epochs[(h % STRIPES) as usize]
    }

    /// What a read of `row` passes to [`RowMemo::keep`]: taken before it.
    pub fn epoch(&self, table: &str, row: &[u8]) -> u64 {
        self.epoch_of(hash(table, row)).load(Ordering::Acquire)
    }

    fn table_epoch_of(&self, table: &str) -> &AtomicU64 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        table.hash(&mut h);
        &self.table_epochs[(h.finish() % STRIPES) as usize]
    }

    /// The write epoch of `table`'s stripe of tables: it moves with every
    /// write to a row of the table acknowledged since (whichever way it came
    /// in: [`RowMemo::forget_row`] runs for each before it is acknowledged)
    /// and with every table-wide change. A listing of the table read after
    /// it was taken holds every row while it stands.
    pub fn table_epoch(&self, table: &str) -> u64 {
        self.table_epoch_of(table).load(Ordering::Acquire)
    }

    /// The row and its stripe's epoch now: what a read begun now saw is
    /// still the newest while [`RowMemo::stamp`] returns the same (no write
    /// to the row was acknowledged since, whichever way it came in).
    pub fn stamp(&self, table: &str, row: &[u8]) -> RowStamp {
        let h = hash(table, row);
        RowStamp {
            row: h,
            epoch: self.epoch_of(h).load(Ordering::Acquire),
        }
    }

    /// Keeps `cells` (the newest version of each column read), read from
    /// `row` of `table` in `view` by a read that started at `epoch` and
    /// covered what `covered` says, unless a write to the row's stripe
    /// came since. A read of the whole row that found no cell keeps that
    /// the row is empty.
    pub fn keep(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        cells: &[Cell],
        covered: Covered<'_>,
        epoch: u64,
    ) {
        let mut seen: Vec<Seen> = cells.iter().map(|c| Seen::Cell(CellSeen::of(c))).collect();
        match covered {
            Covered::Row if cells.is_empty() => seen.push(Seen::Empty),
            Covered::Row => seen.push(Seen::Whole(None)),
            Covered::Family(f) if !cells.is_empty() => seen.push(Seen::Whole(Some(f.into()))),
            Covered::Family(_) | Covered::Part => {}
        }
        if !seen.is_empty() {
            self.keep_seen(table, view, row, seen, epoch);
        }
    }

    /// Keeps that the mount's write of cells of `families` in `row`, which
    /// left the row's stripe at `epoch`, was the last write to it; and, for
    /// a write of one cell, that cell as the write's reply described it
    /// (its version and size), which answers the getattr the kernel makes
    /// after its own write.
    pub fn keep_written(
        &self,
        table: &str,
        row: &[u8],
        families: Vec<String>,
        cell: Option<CellSeen>,
        epoch: u64,
    ) {
        let mut seen: Vec<Seen> = families.into_iter().map(Seen::Wrote).collect();
        seen.extend(cell.map(Seen::Cell));
        self.keep_seen(table, None, row, seen, epoch);
    }

    fn keep_seen(&self, table: &str, view: ViewTs, row: &[u8], seen: Vec<Seen>, epoch: u64) {
        let h = hash(table, row);
        let now = Instant::now();
        let mut g = self.rows.lock();
        if self.epoch_of(h).load(Ordering::Acquire) != epoch {
            return;
        }
        if g.len() >= MAX_ROWS {
            g.retain(|_, k| k.iter().any(|e| now.duration_since(e.at) < MEMO_TTL));
            if g.len() >= MAX_ROWS {
                g.clear();
            }
        }
        let kept = g.entry(h).or_default();
        kept.retain(|e| {
            !(e.view == view && e.table == table && e.row == row)
                && now.duration_since(e.at) < MEMO_TTL
        });
        kept.extend(seen.into_iter().map(|seen| Kept {
            table: table.to_string(),
            row: row.to_vec(),
            view,
            seen,
            at: now,
        }));
    }

    /// The first of what is seen of the row in `view` a moment ago that
    /// `pick` takes.
    fn find<R>(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        pick: impl Fn(&Seen) -> Option<R>,
    ) -> Option<R> {
        let g = self.rows.lock();
        if g.is_empty() {
            return None;
        }
        let found = fresh(&g, table, view, row).find_map(|e| pick(&e.seen));
        found
    }

    /// Whether a cell (of any family) was seen in the row a moment ago,
    /// read or written. (Of one family: [`RowMemo::family`].)
    pub fn has_cell(&self, table: &str, view: ViewTs, row: &[u8]) -> bool {
        self.find(table, view, row, |s| match s {
            Seen::Cell(_) | Seen::Wrote(_) => Some(()),
            _ => None,
        })
        .is_some()
    }

    /// What one read a moment ago said of `family` in the row: a cell of
    /// it seen (or written), or every column of the family returned and
    /// none of it, or nothing. One look: a read kept between two looks
    /// would answer the second for a row the first did not see (the
    /// family absent, when that read returned a cell of it).
    pub fn family(&self, table: &str, view: ViewTs, row: &[u8], family: &str) -> Known<()> {
        self.known(table, view, row, family, |s| match s {
            Seen::Cell(c) if c.family == family => Some(()),
            Seen::Wrote(f) if f == family => Some(()),
            _ => None,
        })
    }

    /// What one read a moment ago said of the column `family:qualifier`
    /// in the row: its newest version and size, or that it is absent (the
    /// read returned every column of its family, and not this one), or
    /// nothing (one look, as [`RowMemo::family`]).
    pub fn column(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Known<CellSeen> {
        self.known(table, view, row, family, |s| match s {
            Seen::Cell(c) if c.family == family && c.qualifier == qualifier => Some(c.clone()),
            _ => None,
        })
    }

    /// What is kept of the row in `view`, looked at once: what `pick`
    /// takes, or absent where the read returned every column of `family`.
    fn known<R>(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        family: &str,
        pick: impl Fn(&Seen) -> Option<R>,
    ) -> Known<R> {
        let g = self.rows.lock();
        let mut whole = false;
        for e in fresh(&g, table, view, row) {
            if let Some(r) = pick(&e.seen) {
                return Known::Seen(r);
            }
            whole |= match &e.seen {
                Seen::Whole(None) => true,
                Seen::Whole(Some(f)) => f == family,
                _ => false,
            };
        }
        if whole {
            Known::Absent
        } else {
            Known::Unknown
        }
    }

    /// The row's families, if a read a moment ago returned every column
    /// of it (and found some).
    pub fn families(&self, table: &str, view: ViewTs, row: &[u8]) -> Option<BTreeSet<String>> {
        let g = self.rows.lock();
        let kept: Vec<&Kept> = fresh(&g, table, view, row).collect();
        if !kept.iter().any(|e| matches!(e.seen, Seen::Whole(None))) {
            return None;
        }
        Some(
            kept.iter()
                .filter_map(|e| match &e.seen {
                    Seen::Cell(c) => Some(c.family.clone()),
                    _ => None,
                })
                .collect(),
        )
    }

    /// Whether the live row was read empty a moment ago, or lies in a
    /// range of rows seen absent (and no write to it came since): it does
    /// not exist.
    pub fn read_empty(&self, table: &str, row: &[u8]) -> bool {
        self.find(table, None, row, |s| matches!(s, Seen::Empty).then_some(()))
            .is_some()
            || self.gaps.holds(table, row)
    }

    /// What a read that may find rows absent passes to
    /// [`RowMemo::keep_absent`]: taken before it.
    pub fn writes(&self) -> u64 {
        self.gaps.writes()
    }

    /// Keeps that no live row of `table` from `from` up to `until`
    /// (excluded; None: the table's end) exists, as a read begun at
    /// `writes` found (less the rows written since).
    pub fn keep_absent(&self, table: &str, from: &[u8], until: Option<Vec<u8>>, writes: u64) {
        self.gaps.keep(table, from, until, writes);
    }

    /// Keeps the cells a listing of the live `row` read (of `family`, or
    /// of the whole row: None), a read that started at `epoch`, values and
    /// all, for the listings and opens that follow
    /// ([`RowMemo::listed_family`], [`RowMemo::take_listed`]).
    pub fn keep_listing(
        &self,
        table: &str,
        row: &[u8],
        family: Option<&str>,
        cells: &[Cell],
        epoch: u64,
    ) {
        let h = hash(table, row);
        let stripe = self.epoch_of(h);
        self.values.keep(h, (table, row, family), cells, || {
            stripe.load(Ordering::Acquire) == epoch
        });
    }

    /// Keeps the value of `cell`, of the live `row`, that a lookup's or a
    /// getattr's read (begun at `epoch`) brought back, for the open that
    /// follows ([`RowMemo::take_listed`]).
    pub fn keep_value(&self, table: &str, row: &[u8], cell: &Cell, epoch: u64) {
        let h = hash(table, row);
        let stripe = self.epoch_of(h);
        self.values.keep_one(h, (table, row), cell, || {
            stripe.load(Ordering::Acquire) == epoch
        });
    }

    /// The cells of `family` in `row` as a listing of the whole row (or of
    /// the family) read them a moment ago, if it kept them all.
    pub fn listed_family(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        family: &str,
    ) -> Option<Vec<Cell>> {
        if view.is_some() {
            return None;
        }
        self.values
            .family_cells(hash(table, row), (table, row, family))
    }

    /// The newest version of `family:qualifier` in `row` as a listing of
    /// the family (or row) read it a moment ago (each is handed out once).
    pub fn take_listed(
        &self,
        table: &str,
        view: ViewTs,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Option<Cell> {
        // Only live rows' listings are kept.
        if view.is_some() {
            return None;
        }
        self.values
            .take(hash(table, row), (table, row, family), qualifier)
    }

    /// Drops what is kept of `row` (every view): it was just written.
    /// Returns the row's stripe's epoch after this write.
    pub fn forget_row(&self, table: &str, row: &[u8]) -> u64 {
        let h = hash(table, row);
        let mut g = self.rows.lock();
        let epoch = self.epoch_of(h).fetch_add(1, Ordering::AcqRel) + 1;
        self.table_epoch_of(table).fetch_add(1, Ordering::AcqRel);
        if !g.is_empty() {
            // Rows of the same hash go too: they are read again.
            g.remove(&h);
        }
        // After the epoch moved: a listing kept before is dropped here,
        // one kept after sees the new epoch.
        self.values.forget(h);
        self.gaps.written(table, row);
        epoch
    }

    /// Drops everything kept as if [`MEMO_TTL`] had passed: no write
    /// happened, so row stamps stay (tests stand it for the wait).
    #[cfg(test)]
    pub fn expire_all(&self) {
        self.rows.lock().clear();
        self.values.forget_all();
        self.gaps.clear();
    }

    /// Drops everything kept (a table or schema changed).
    pub fn forget_all(&self) {
        let mut g = self.rows.lock();
        for e in self.epochs.iter().chain(&self.table_epochs) {
            e.fetch_add(1, Ordering::AcqRel);
        }
        g.clear();
        self.values.forget_all();
        self.gaps.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::{Covered, Known, RowMemo};
    use engine::Cell;

    fn cell(family: &str) -> Cell {
        Cell {
            row: b"r".to_vec(),
            family: family.into(),
            qualifier: b"q".to_vec(),
            timestamp: 7,
            value: b"v".to_vec().into(),
        }
    }

    /// Keeps a read of `t`/`r` that returned a cell of `f`, begun now.
    fn keep_f(m: &RowMemo) {
        let now = m.epoch("t", b"r");
        m.keep("t", None, b"r", &[cell("f")], Covered::Part, now);
    }

    #[test]
    fn a_tables_epoch_moves_with_each_write_to_it_and_each_table_wide_change() {
        let m = RowMemo::default();
        let before = m.table_epoch("t");
        assert_eq!(m.table_epoch("t"), before, "reading it moves nothing");
        m.forget_row("t", b"r");
        let written = m.table_epoch("t");
        assert_ne!(written, before);
        let other = m.table_epoch("u");
        m.forget_all();
        assert_ne!(m.table_epoch("t"), written);
        assert_ne!(m.table_epoch("u"), other);
    }

    #[test]
    fn a_read_a_write_overtook_is_not_kept() {
        let m = RowMemo::default();
        let before = m.epoch("t", b"r");
        m.forget_row("t", b"r");
        m.keep("t", None, b"r", &[cell("f")], Covered::Part, before);
        assert!(!m.has_cell("t", None, b"r"));
        keep_f(&m);
        let Known::Seen(seen) = m.column("t", None, b"r", "f", b"q") else {
            panic!("not kept")
        };
        assert_eq!(
            (seen.len, seen.timestamp),
            (1, 7),
            "size and version, no value"
        );
        assert_eq!(m.family("t", None, b"r", "f"), Known::Seen(()));
        assert_ne!(m.family("t", None, b"r", "g"), Known::Seen(()));
        assert!(!m.has_cell("t", Some(5), b"r"), "another view");
        assert!(!m.has_cell("t", None, b"other"));
        m.forget_row("t", b"r");
        assert_eq!(m.column("t", None, b"r", "f", b"q"), Known::Unknown);
    }

    #[test]
    fn a_whole_read_answers_for_the_names_it_did_not_return() {
        let m = RowMemo::default();
        let e = m.epoch("t", b"r");
        let absent = |m: &RowMemo, view, f| m.family("t", view, b"r", f) == Known::Absent;
        m.keep("t", None, b"r", &[cell("f"), cell("g")], Covered::Part, e);
        assert!(!absent(&m, None, "h"), "a limit stopped it");
        assert_eq!(m.families("t", None, b"r"), None);
        m.keep("t", None, b"r", &[cell("f"), cell("g")], Covered::Row, e);
        assert!(absent(&m, None, "h"));
        assert_eq!(m.column("t", None, b"r", "h", b"q"), Known::Absent);
        assert!(!absent(&m, Some(3), "h"), "another view");
        let fams: Vec<String> = m.families("t", None, b"r").unwrap().into_iter().collect();
        assert_eq!(fams, ["f", "g"]);
        m.keep("t", None, b"r", &[cell("f")], Covered::Family("f"), e);
        assert_eq!(m.family("t", None, b"r", "f"), Known::Seen(()));
        assert_eq!(m.column("t", None, b"r", "f", b"other"), Known::Absent);
        assert_eq!(
            m.family("t", None, b"r", "g"),
            Known::Unknown,
            "only the family"
        );
        assert_eq!(m.families("t", None, b"r"), None);
        m.keep("t", None, b"r", &[cell("f")], Covered::Row, e);
        m.forget_row("t", b"r");
        assert!(!absent(&m, None, "h"), "a write drops it");
    }

    #[test]
    fn a_whole_read_answers_for_the_cells_it_returned_too() {
        // The lookup of a cell once asked "was it seen?" and then "was its
        // family read whole?": a listing kept between the two (another
        // thread's, after another daemon's write) made the cell it
        // returned absent. One look answers both.
        let m = RowMemo::default();
        assert_eq!(m.column("t", None, b"r", "f", b"q"), Known::Unknown);
        m.keep(
            "t",
            None,
            b"r",
            &[cell("f")],
            Covered::Family("f"),
            m.epoch("t", b"r"),
        );
        let Known::Seen(c) = m.column("t", None, b"r", "f", b"q") else {
            panic!("the cell the read returned is not seen")
        };
        assert_eq!((c.timestamp, c.len), (7, 1));
        m.keep(
            "t",
            None,
            b"r",
            &[cell("f")],
            Covered::Row,
            m.epoch("t", b"r"),
        );
        assert_eq!(m.family("t", None, b"r", "f"), Known::Seen(()));
        assert_eq!(m.family("t", None, b"r", "g"), Known::Absent);
    }

    #[test]
    fn a_stamp_moves_with_every_write_to_its_row() {
        let m = RowMemo::default();
        let s = m.stamp("t", b"r");
        keep_f(&m);
        assert_eq!(m.stamp("t", b"r"), s, "reads leave it");
        assert_ne!(m.stamp("t", b"other"), s, "another row");
        m.forget_row("t", b"r");
        let after = m.stamp("t", b"r");
        assert_ne!(after, s);
        m.forget_all();
        assert_ne!(m.stamp("t", b"r"), after);
    }

    #[test]
    fn empty_rows_and_writes() {
        let m = RowMemo::default();
        m.keep("t", None, b"r", &[], Covered::Row, m.epoch("t", b"r"));
        assert!(m.read_empty("t", b"r"));
        assert!(!m.has_cell("t", None, b"r"));
        let after = m.forget_row("t", b"r");
        m.keep_written("t", b"r", vec!["f".into()], None, after);
        assert!(!m.read_empty("t", b"r"));
        assert_eq!(m.family("t", None, b"r", "f"), Known::Seen(()));
        assert_eq!(
            m.column("t", None, b"r", "f", b"q"),
            Known::Unknown,
            "no cell to answer with"
        );
        m.forget_all();
        assert!(!m.has_cell("t", None, b"r"));
        let written = super::CellSeen {
            family: "f".into(),
            qualifier: b"q".to_vec(),
            timestamp: 9,
            len: 3,
        };
        let after = m.forget_row("t", b"r");
        m.keep_written("t", b"r", vec!["f".into()], Some(written.clone()), after);
        assert_eq!(m.column("t", None, b"r", "f", b"q"), Known::Seen(written));
        assert!(!m.read_empty("t", b"r"));
    }
}
