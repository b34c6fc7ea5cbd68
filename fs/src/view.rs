//! The store as the filesystem reads it: the engine queries behind
//! existence checks, attributes and listings, plus the directories made
//! with `mkdir` that hold no cell yet ([`Pending`]). No inodes, no handles.

use crate::errno::errno;
use crate::names::KeyName;
use crate::node::{CellAddr, FamilyAddr, Node, View};
use crate::options::{FsResult, Stats};
use crate::pending::Pending;
use crate::query::exact_column_regex;
use crate::removal_guard::RemovalGuard;
use crate::row_memo::{CellSeen, Covered, Known, RowStamp};
use crate::store::Store;
use crate::store_calls::{Counted, StoreCalls};
use engine::schema::{FamilySchema, TableSchema};
use engine::{Cell, RowPeek, RowRange, ScanSpec, TimeRange};
use fuser::Errno;
use std::collections::BTreeSet;
use std::sync::Arc;

/// At most this many columns a lookup's read of a row (or family) returns:
/// a row this small is read whole, and its read answers the lookups of
/// every name in it (see [`StoreView::row_exists`]).
const PEEK_CELLS: u64 = 64;

/// At most about this many bytes of values that read returns (the cell
/// that reaches it is the last): reading a row whole costs a lookup little
/// more than reading its first cell, and a row of large values is not read
/// whole.
const PEEK_BYTES: u64 = 16 << 10;

/// The timestamps a view shows.
pub fn view_range(view: View) -> TimeRange {
    match view {
        View::Now => TimeRange::ALL,
        View::At(t) => TimeRange {
            start: 0,
            end: t.saturating_add(1),
        },
    }
}

/// Whether family `f`'s garbage collection never collects a column's
/// newest version, whatever its age: only a write changes it then.
pub(crate) fn family_newest_lasts(f: &FamilySchema) -> bool {
    !f.gc.collects(0, 0, u64::MAX)
}

/// Whether a cell the engine returned is of column `c` (a column regex
/// may match more than the one column).
fn is_of(x: &Cell, c: &CellAddr) -> bool {
    *x.family == *c.family && x.qualifier == c.qualifier
}

/// The engine's tables, the pending directories and the error counter.
pub struct StoreView {
    /// The store, its calls counted.
    store: Counted,
    pending: Pending,
    stats: Stats,
    /// The removal snapshots' streaks (`removal_guard.rs`).
    removals: RemovalGuard,
}

impl StoreView {
    pub fn new(store: Arc<dyn Store>) -> StoreView {
        StoreView {
            store: Counted::new(store),
            pending: Pending::default(),
            stats: Stats::default(),
            removals: RemovalGuard::default(),
        }
    }

    /// The engine (or the tests' store) behind the view.
    pub fn store(&self) -> &dyn Store {
        &self.store
    }

    /// The calls made to the store so far, per method.
    pub fn store_calls(&self) -> &StoreCalls {
        self.store.calls()
    }

    /// Directories made with `mkdir` that hold no cell yet; first, those of
    /// tables changed elsewhere since are checked against the store.
    pub fn pending(&self) -> &Pending {
        self.check_changed_tables();
        &self.pending
    }

    /// Checks the directories of the tables changed elsewhere (see
    /// [`Pending::table_changed_elsewhere`]). Also when the root is listed
    /// or looked in: a table deleted elsewhere is checked before one made
    /// again under its name could be, where this mount saw it gone.
    pub fn check_changed_tables(&self) {
        let tables = self.pending.take_unsure();
        if tables.is_empty() {
            return;
        }
        // A daemon that learns tables from METADATA may not know yet; once
        // for all (a lost lease notes every table).
        if let Err(e) = self.store.refresh_tables() {
            log::debug!("reading the tables again: {e}");
        }
        for t in tables {
            self.check_pending(&t);
        }
    }

    /// Forgets the directories of `table` if it is gone, and those of its
    /// families that are.
    fn check_pending(&self, table: &str) {
        match self.store.schema(table) {
            Ok(s) => self
                .pending
                .keep_families(table, |f| s.families.contains_key(f)),
            Err(engine::Error::TableNotFound(_)) => self.pending.drop_table(table),
            // Left as they are: the directories of a table not reached.
            Err(e) => log::info!("checking the empty directories of {table}: {e}"),
        }
    }

    /// The mount's operation counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// fsync of a directory: make the commit log durable.
    pub fn sync(&self) -> FsResult<()> {
        self.store.sync().map_err(|e| self.fail(&"fsync", &e))
    }

    /// Logs an engine error for `what` and turns it into an errno.
    pub(crate) fn fail(&self, what: &dyn std::fmt::Display, e: &engine::Error) -> Errno {
        self.count_error(what, errno(e), (Errno::EIO, log::Level::Error), e)
    }

    /// Logs a refusal made by the filesystem itself.
    pub(crate) fn refuse(&self, what: &dyn std::fmt::Display, code: Errno, why: &str) -> Errno {
        self.count_error(what, code, (Errno::ENOENT, log::Level::Debug), &why)
    }

    /// Counts an error answered and logs it: at info level, or at `level`
    /// when `code` is `special` (an I/O error is loud, a missing name quiet).
    fn count_error(
        &self,
        what: &dyn std::fmt::Display,
        code: Errno,
        (special, level): (Errno, log::Level),
        why: &dyn std::fmt::Display,
    ) -> Errno {
        Stats::add(&self.stats.errors, 1);
        let level = if code == special {
            level
        } else {
            log::Level::Info
        };
        log::log!(level, "{what}: {why}");
        code
    }

    pub(crate) fn schema(&self, table: &str) -> FsResult<Arc<TableSchema>> {
        self.store.schema(table).map_err(|e| match e {
            engine::Error::TableNotFound(_) => Errno::ENOENT,
            e => self.fail(&format!("schema of {table}"), &e),
        })
    }

    /// EPERM while `table` has deletion protection: the mount removes
    /// nothing by name in it, since `rm -r` empties a table cell by cell
    /// before its `rmdir` could be refused.
    pub(crate) fn check_unprotected(
        &self,
        table: &str,
        what: &dyn std::fmt::Display,
    ) -> FsResult<()> {
        if self.schema(table)?.deletion_protection {
            return Err(self.refuse(
                what,
                Errno::EPERM,
                "the table has deletion protection \
                 (`.table deletion_protection=false` in its .schema turns it off)",
            ));
        }
        Ok(())
    }

    /// Before a removal by name inside `table` (a cell, a version, a row,
    /// family or column directory): EPERM while it is protected, else the
    /// removal snapshot if this removal starts a streak.
    pub(crate) fn check_removal(&self, table: &str, what: &dyn std::fmt::Display) -> FsResult<()> {
        self.check_unprotected(table, what)?;
        self.removals.before_removal(&self.store, table);
        Ok(())
    }

    /// After `rmdir` of `table`: its streak's removal snapshot is kept
    /// as long as the table in the trash.
    pub(crate) fn table_deleted(&self, table: &str) {
        self.removals.table_deleted(&self.store, table);
    }

    pub(crate) fn family_schema(&self, table: &str, family: &str) -> FsResult<FamilySchema> {
        if let Some(f) = self.schema(table)?.families.get(family) {
            return Ok(f.clone());
        }
        // Another machine's daemon may have just added it.
        if let Err(e) = self.store.refresh_tables() {
            log::debug!("reading the tables again: {e}");
        }
        self.schema(table)?
            .families
            .get(family)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    pub(crate) fn read_spec(view: View) -> ScanSpec {
        ScanSpec {
            time_range: view_range(view),
            max_versions: Some(1),
            ..Default::default()
        }
    }

    pub(crate) fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> FsResult<Vec<Cell>> {
        self.store
            .read_row(table, row, spec)
            .map_err(|e| self.row_read_failed(table, e))
    }

    /// A read of a row that failed, as the errno the caller sees (a table
    /// gone: ENOENT; the rest is logged).
    fn row_read_failed(&self, table: &str, e: engine::Error) -> Errno {
        match e {
            engine::Error::TableNotFound(_) => Errno::ENOENT,
            e => self.fail(&format!("read of row in {table}"), &e),
        }
    }

    /// Reads the row's columns `spec` selects (the newest version of
    /// each), up to [`PEEK_CELLS`] of them and [`PEEK_BYTES`] of values,
    /// and keeps them in the row memo for the lookups that follow (see
    /// `row_memo.rs`): a row or family so small that the read returned all
    /// of it answers for every name in it, those it did not return too.
    /// `family` is the one `spec` selects (None: every family). Returns
    /// whether any cell was read.
    fn peek(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        spec: ScanSpec,
        family: Option<&str>,
    ) -> FsResult<bool> {
        let spec = ScanSpec {
            cell_limit: Some(PEEK_CELLS),
            byte_limit: Some(PEEK_BYTES),
            ..spec
        };
        let memo = self.store.memo();
        let epoch = memo.epoch(table, row);
        let cells = if family.is_none() && view.is_now() {
            // A live row found absent: and the rows after it up to the
            // next (a new row's lookup, before the new rows that follow).
            let writes = memo.writes();
            let peeked = self
                .store
                .peek_row(table, row, &spec)
                .map_err(|e| self.row_read_failed(table, e))?;
            match peeked {
                RowPeek::Cells(cells) => cells,
                RowPeek::Absent { until } => {
                    memo.keep_absent(table, row, until, writes);
                    Vec::new()
                }
            }
        } else {
            self.read_row(table, row, &spec)?
        };
        let bytes: u64 = cells.iter().map(|c| c.value.len() as u64).sum();
        let whole = (cells.len() as u64) < PEEK_CELLS && bytes < PEEK_BYTES;
        let covered = match (whole, family) {
            (false, _) => Covered::Part,
            (true, None) => Covered::Row,
            (true, Some(f)) => Covered::Family(f),
        };
        memo.keep(table, view.max_ts(), row, &cells, covered, epoch);
        // Their values too, for the opens after the walk (`cat`), and a
        // whole row's or family's for the listings that follow.
        if view.is_now() {
            if whole {
                memo.keep_listing(table, row, family, &cells, epoch);
            } else {
                for c in &cells {
                    memo.keep_value(table, row, c, epoch);
                }
            }
        }
        Ok(!cells.is_empty())
    }

    /// [`StoreView::newest`] for a lookup's or getattr's attributes: the
    /// value read is kept a moment for the open that follows.
    pub(crate) fn newest_for_attr(&self, c: &CellAddr) -> FsResult<Option<Cell>> {
        if !c.view.is_now() {
            return self.newest(c);
        }
        let memo = self.store.memo();
        let epoch = memo.epoch(&c.table, &c.row);
        let cur = self.newest(c)?;
        if let Some(v) = &cur {
            memo.keep_value(&c.table, &c.row, v, epoch);
        }
        Ok(cur)
    }

    /// Whether a live row was read empty a moment ago (by the lookup of a
    /// failed open, or the one the kernel makes before a `mkdir`), with no
    /// write to it since: then neither it nor a family of it exists, and
    /// the next lookup or the mkdir need not read again (see `row_memo.rs`).
    pub(crate) fn row_read_empty(&self, table: &str, row: &[u8]) -> bool {
        self.store.memo().read_empty(table, row)
    }

    /// Whether a row has a visible cell in `view` (or is a pending
    /// directory). In a path walk (`walk`), a cell the row memo keeps
    /// answers yes without a read; a live row read empty a moment ago
    /// answers no without one.
    pub(crate) fn row_exists(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        walk: bool,
    ) -> FsResult<bool> {
        if view.is_now() && self.pending().has_row(table, row) {
            return Ok(true);
        }
        if view.is_now() && self.row_read_empty(table, row) {
            return Ok(false);
        }
        if walk && self.store.memo().has_cell(table, view.max_ts(), row) {
            return Ok(true);
        }
        self.peek(table, view, row, StoreView::read_spec(view), None)
    }

    /// Whether a family has a visible cell in its row (or, live, is a
    /// pending directory). In a path walk (`walk`), a cell of the family
    /// the row memo keeps answers yes without a read, and a read of the
    /// whole row (or family) a moment ago that found none answers no.
    pub(crate) fn family_exists(&self, f: &FamilyAddr, walk: bool) -> FsResult<bool> {
        if f.view.is_now() && self.pending().has_family(&f.table, &f.row, &f.family) {
            return Ok(true);
        }
        if f.view.is_now() && self.row_read_empty(&f.table, &f.row) {
            return Ok(false);
        }
        if walk {
            let memo = self.store.memo();
            match memo.family(&f.table, f.view.max_ts(), &f.row, &f.family) {
                Known::Seen(()) => return Ok(true),
                Known::Absent => return Ok(false),
                Known::Unknown => {}
            }
        }
        let spec = ScanSpec {
            families: Some(vec![f.family.to_string()]),
            ..StoreView::read_spec(f.view)
        };
        self.peek(&f.table, f.view, &f.row, spec, Some(&f.family))
    }

    /// What the walk's previous lookup read of the cell `c` (the row
    /// memo): its size and version, or that it is absent (that read
    /// returned every column of its family, and not `c`), or nothing.
    pub(crate) fn known_cell(&self, c: &CellAddr) -> Known<CellSeen> {
        self.store
            .memo()
            .column(&c.table, c.view.max_ts(), &c.row, &c.family, &c.qualifier)
    }

    /// The stamp of `c`'s row now (see [`crate::row_memo::RowMemo::stamp`]):
    /// taken before a read of it, it says later whether a write to the
    /// row was acknowledged since.
    pub(crate) fn row_stamp(&self, c: &CellAddr) -> RowStamp {
        self.store.memo().stamp(&c.table, &c.row)
    }

    /// Whether the newest version of a live cell of `c`'s family can only
    /// change by a write (which drops the row's stamp): its garbage
    /// collection never collects a column's newest version, whatever its
    /// age. A family with an age limit that can (`max_age`, alone or in a
    /// union) may lose it with no write, and no daemon is told.
    pub(crate) fn newest_lasts(&self, c: &CellAddr) -> bool {
        c.view.is_now()
            && self
                .schema(&c.table)
                .ok()
                .is_some_and(|s| s.families.get(&*c.family).is_some_and(family_newest_lasts))
    }

    /// What the row memo keeps, dropped as its age would drop it (no
    /// write: row stamps stay).
    #[cfg(test)]
    pub(crate) fn memo_expired(&self) {
        self.store.memo().expire_all();
    }

    /// The write epoch of `table` (see [`crate::row_memo::RowMemo::table_epoch`]).
    pub(crate) fn table_epoch(&self, table: &str) -> u64 {
        self.store.memo().table_epoch(table)
    }

    /// Rows changed by a writer other than the mount: the memo forgets them.
    pub(crate) fn rows_changed_elsewhere(&self, table: &str, rows: &[&[u8]]) {
        for r in rows {
            self.store.memo().forget_row(table, r);
        }
    }

    /// A table changed by a writer other than the mount.
    pub(crate) fn table_changed_elsewhere(&self, table: &str) {
        self.store.memo().forget_all();
        self.pending.table_changed_elsewhere(table);
    }

    pub(crate) fn column_spec(
        view: View,
        family: &str,
        qualifier: &[u8],
        versions: Option<u32>,
    ) -> ScanSpec {
        ScanSpec {
            families: Some(vec![family.to_string()]),
            column_regex: Some(exact_column_regex(family, qualifier)),
            time_range: view_range(view),
            max_versions: versions,
            ..Default::default()
        }
    }

    /// Whether a column has a visible version in its view (or, live, is a
    /// pending `.versions/` directory).
    pub(crate) fn column_exists(&self, c: &CellAddr) -> FsResult<bool> {
        if c.view.is_now() {
            // A live cell exists iff it has a newest version: the engine's
            // column read seeks straight to it (Bloom-filtered), where a
            // regex scan of the row would read the whole row.
            return Ok(self
                .pending()
                .has_column(&c.table, &c.row, &c.family, &c.qualifier)
                || self.newest(c)?.is_some());
        }
        let spec = ScanSpec {
            cell_limit: Some(1),
            ..StoreView::column_spec(c.view, &c.family, &c.qualifier, Some(1))
        };
        Ok(self
            .read_row(&c.table, &c.row, &spec)?
            .iter()
            .any(|x| is_of(x, c)))
    }

    /// The newest visible version of a cell in its view.
    pub(crate) fn newest(&self, c: &CellAddr) -> FsResult<Option<Cell>> {
        if c.view.is_now() {
            return self
                .store
                .read_cell(&c.table, &c.row, &c.family, &c.qualifier)
                .map_err(|e| match e {
                    engine::Error::TableNotFound(_) | engine::Error::UnknownFamily { .. } => {
                        Errno::ENOENT
                    }
                    e => self.fail(&format!("read of a cell in {}", c.table), &e),
                });
        }
        let spec = StoreView::column_spec(c.view, &c.family, &c.qualifier, Some(1));
        Ok(self
            .read_row(&c.table, &c.row, &spec)?
            .into_iter()
            .find(|x| is_of(x, c)))
    }

    /// Whether `c` is a live cell made with `creat` that holds no value yet.
    /// Ask before reading the cell from the store: the placeholder goes
    /// only once its release committed the cell, so one of the two finds
    /// it; asked after, a commit between the two made it look absent.
    pub(crate) fn is_pending_cell(&self, c: &CellAddr) -> bool {
        c.view.is_now()
            && self
                .pending()
                .has_cell(&c.table, &c.row, &c.family, &c.qualifier)
    }

    /// The value a cell or version file holds (None for other nodes).
    pub(crate) fn value_of(&self, node: &Node) -> Option<FsResult<Option<Cell>>> {
        Some(match node {
            Node::Cell(c) => self.newest(c),
            Node::Version { cell, ts } => self.version(cell, *ts),
            _ => return None,
        })
    }

    /// One exact version, if visible in the column's view.
    pub(crate) fn version(&self, c: &CellAddr, ts: u64) -> FsResult<Option<Cell>> {
        if c.view.max_ts().is_some_and(|t| ts > t) {
            return Ok(None);
        }
        let spec = ScanSpec {
            time_range: TimeRange::exactly(ts),
            ..StoreView::column_spec(View::Now, &c.family, &c.qualifier, Some(1))
        };
        Ok(self
            .read_row(&c.table, &c.row, &spec)?
            .into_iter()
            .find(|x| is_of(x, c) && x.timestamp == ts))
    }

    /// Every visible version of a column, newest first.
    pub(crate) fn versions(&self, c: &CellAddr) -> FsResult<Vec<Cell>> {
        let spec = StoreView::column_spec(c.view, &c.family, &c.qualifier, None);
        let mut v: Vec<Cell> = self
            .read_row(&c.table, &c.row, &spec)?
            .into_iter()
            .filter(|x| is_of(x, c))
            .collect();
        v.sort_by_key(|x| std::cmp::Reverse(x.timestamp));
        Ok(v)
    }

    /// The newest visible cell of every column of a family in a row.
    pub(crate) fn family_cells(&self, f: &FamilyAddr) -> FsResult<Vec<Cell>> {
        let spec = ScanSpec {
            families: Some(vec![f.family.to_string()]),
            ..StoreView::read_spec(f.view)
        };
        Ok(self
            .read_row(&f.table, &f.row, &spec)?
            .into_iter()
            .filter(|c| *c.family == *f.family)
            .collect())
    }

    /// [`StoreView::family_cells`] for a listing of the family: answered
    /// by the row's listing a moment ago if it kept the whole row, else
    /// read; the values are kept a moment for the opens that follow (see
    /// `listed_values.rs`), and what was read in the row memo.
    pub(crate) fn listed_family_cells(&self, f: &FamilyAddr) -> FsResult<Vec<Cell>> {
        if !f.view.is_now() {
            return self.family_cells(f);
        }
        let memo = self.store.memo();
        if let Some(cells) = memo.listed_family(&f.table, None, &f.row, &f.family) {
            return Ok(cells);
        }
        let epoch = memo.epoch(&f.table, &f.row);
        let cells = self.family_cells(f)?;
        memo.keep_listing(&f.table, &f.row, Some(&f.family), &cells, epoch);
        keep_listed(
            memo,
            &f.table,
            &f.row,
            &cells,
            Covered::Family(&f.family),
            epoch,
        );
        Ok(cells)
    }

    /// [`StoreView::row_families`] for a listing of the row: the cells
    /// read (the newest of every column) are kept a moment for the
    /// listings of its families and the opens that follow, and in the row
    /// memo for the getattrs and lookups.
    pub(crate) fn listed_row_families(
        &self,
        table: &str,
        view: View,
        row: &[u8],
    ) -> FsResult<BTreeSet<String>> {
        if !view.is_now() {
            return self.row_families(table, view, row);
        }
        let memo = self.store.memo();
        // The walk's lookup of the row read all of it a moment ago.
        if let Some(families) = memo.families(table, None, row) {
            return Ok(families);
        }
        let epoch = memo.epoch(table, row);
        let cells = self.read_row(table, row, &StoreView::read_spec(view))?;
        memo.keep_listing(table, row, None, &cells, epoch);
        keep_listed(memo, table, row, &cells, Covered::Row, epoch);
        Ok(cells.into_iter().map(|c| c.family).collect())
    }

    /// The newest version of `c` as its family's listing read it a moment
    /// ago, if one did (each is handed out once).
    pub(crate) fn listed_value(&self, c: &CellAddr) -> Option<Cell> {
        self.store
            .memo()
            .take_listed(&c.table, c.view.max_ts(), &c.row, &c.family, &c.qualifier)
    }

    /// Families with a visible cell in a row.
    pub(crate) fn row_families(
        &self,
        table: &str,
        view: View,
        row: &[u8],
    ) -> FsResult<BTreeSet<String>> {
        Ok(self
            .read_row(table, row, &StoreView::read_spec(view))?
            .into_iter()
            .map(|c| c.family)
            .collect())
    }

    /// Qualifiers with any visible version in a family of a row.
    pub(crate) fn family_columns(&self, f: &FamilyAddr) -> FsResult<BTreeSet<Vec<u8>>> {
        Ok(self
            .family_cells(f)?
            .into_iter()
            .map(|c| c.qualifier)
            .collect())
    }

    /// Resolves a row name: the key itself, or the long key a hashed name stands for.
    pub(crate) fn resolve_row(
        &self,
        table: &str,
        view: View,
        name: &KeyName,
    ) -> FsResult<Option<Vec<u8>>> {
        match name {
            KeyName::Key(k) => Ok(self.row_exists(table, view, k, false)?.then(|| k.clone())),
            KeyName::Hashed { prefix, .. } => {
                let spec = ScanSpec {
                    rows: RowRange::prefix(prefix),
                    cell_limit: None,
                    ..StoreView::read_spec(view)
                };
                let mut stream = self
                    .store
                    .scan(table, spec)
                    .map_err(|e| self.fail(&format!("scan of {table}"), &e))?;
                while let Some((row, _)) = stream
                    .next_row()
                    .map_err(|e| self.fail(&format!("scan of {table}"), &e))?
                {
                    if name.matches(&row) {
                        return Ok(Some(row));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Resolves a qualifier name within a family of a row.
    pub(crate) fn resolve_qualifier(
        &self,
        f: &FamilyAddr,
        name: &KeyName,
    ) -> FsResult<Option<Vec<u8>>> {
        match name {
            KeyName::Key(k) => Ok(Some(k.clone())),
            KeyName::Hashed { .. } => {
                let spec = ScanSpec {
                    families: Some(vec![f.family.to_string()]),
                    time_range: view_range(f.view),
                    max_versions: Some(1),
                    ..Default::default()
                };
                Ok(self
                    .read_row(&f.table, &f.row, &spec)?
                    .into_iter()
                    .map(|c| c.qualifier)
                    .find(|q| name.matches(q)))
            }
        }
    }
}

/// Keeps in the row memo what a listing's read of a live row (or of one
/// family in it) found, as a lookup's read would: the getattr the kernel
/// makes after a listing (it dropped the directory's atime) and the
/// lookups of the walk that follows need no read of their own, even once
/// the opens have taken the listed values. A wide row keeps its first
/// [`PEEK_CELLS`] columns, which answer for themselves only.
fn keep_listed(
    memo: &crate::row_memo::RowMemo,
    table: &str,
    row: &[u8],
    cells: &[Cell],
    covered: Covered<'_>,
    epoch: u64,
) {
    let (cells, covered) = match cells.get(..PEEK_CELLS as usize) {
        Some(first) if first.len() < cells.len() => (first, Covered::Part),
        _ => (cells, covered),
    };
    memo.keep(table, None, row, cells, covered, epoch);
}
