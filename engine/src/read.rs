//! Reading: turns the merged stream of every internal entry (memtables and
//! SSTables, all sequence numbers, tombstones included) into the cells a
//! reader sees.
//!
//! For each column, in this order:
//! 1. entries with a sequence number above the snapshot do not exist;
//! 2. row, family and column tombstones hide entries with a lower sequence
//!    number (column tombstones only inside their time range), and of several
//!    cells at one timestamp only the highest-sequence one counts
//!    ([`crate::visibility`]) — in an aggregate family they fold into one
//!    cell instead ([`crate::aggregate`]);
//! 3. the family's GC rule is applied to the remaining versions newest first
//!    (collected versions vanish at once, before any compaction);
//! 4. the scan's selections: families, column regex, time range, versions
//!    per column (the newest N inside the time range);
//! 5. the scan's row filter ([`crate::filter`]), if any: its key-only
//!    leading part while reading, the rest on each row's gathered cells,
//!    put family by family in the families' creation order;
//! 6. row and cell limits, counting what the filter outputs.
//!
//! Entries of families no longer in the schema are skipped.

use crate::data::{gather_row, Cell, CellView, RowRange, TimeRange};
use crate::error::{Error, Result};
use crate::filter::Plan;
use crate::iterator::InternalIterator;
use crate::key::{self, Kind, SeqNo, Timestamp};
use crate::scan::{CellBudget, ScanSpec};
use crate::schema::{Aggregator, GcRule, TableSchema, CHANGES_FAMILY};
use crate::value::Value;
use crate::visibility::{prefix_end, Change, EntryKey, Tracker, Verdict};
use regex::bytes::{Regex, RegexBuilder};
use std::collections::{HashSet, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// How many `next()` calls to try before a `seek()` when skipping forward:
/// short skips are cheaper stepped over than re-seeking every merged source.
const NEXTS_BEFORE_SEEK: usize = 8;

/// Compiles a scan's column regex: it must match the whole of
/// `family:qualifier` (bytes). Unicode mode is off and `.` matches any byte,
/// newline included, because qualifiers are arbitrary bytes; non-ASCII
/// literals in the pattern still match their UTF-8 encoding.
pub fn compile_column_regex(pattern: &str) -> Result<Regex> {
    let build = |p: &str| {
        RegexBuilder::new(p)
            .unicode(false)
            .dot_matches_new_line(true)
            .build()
            .map_err(|e| Error::BadRegex {
                pattern: pattern.to_string(),
                reason: crate::filter::one_line_error(&e, p),
            })
    };
    // Compile the bare pattern first: it proves the parentheses balance, so
    // the anchoring group below cannot be escaped (e.g. by `a)|(b`).
    build(pattern)?;
    build(&format!(r"\A(?:{pattern})\z"))
}

/// A regex matching exactly one column (for a single-column read).
pub fn exact_column_regex(family: &str, qualifier: &[u8]) -> String {
    let mut p = regex::escape(family);
    p.push(':');
    for &b in qualifier {
        if b.is_ascii_alphanumeric() {
            p.push(b as char);
        } else {
            p.push_str(&format!(r"\x{b:02x}"));
        }
    }
    p
}

/// What a reader does with a visible version of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Return it.
    Emit,
    /// Leave it out, but older versions may still be returned.
    Skip,
    /// Leave it and every older version of the column out.
    EndColumn,
}

/// Steps 3 and 4 of the module doc for the `index`-th visible version
/// (newest first) of a column, at `ts`, when `emitted` versions of the column
/// were returned already. Collected versions form a suffix of the column, as
/// do versions older than the time range: either ends the column.
pub(crate) fn take_version(
    gc: Option<&GcRule>,
    index: usize,
    ts: u64,
    now: u64,
    time_range: TimeRange,
    max_versions: Option<u32>,
    emitted: u32,
) -> Take {
    let collected = gc.is_some_and(|gc| gc.collects(index, ts, now));
    if collected || ts < time_range.start || max_versions.is_some_and(|n| emitted >= n) {
        Take::EndColumn
    } else if ts >= time_range.end {
        Take::Skip
    } else {
        Take::Emit
    }
}

/// Per-column state of the scan filters.
#[derive(Default)]
struct ColumnState {
    /// Decoded qualifier, from the column's check until a cell of the
    /// column takes it.
    qualifier: Option<Vec<u8>>,
    /// Whether the column regex was evaluated for this column.
    checked: bool,
    /// Cells emitted from this column.
    emitted: u32,
}

/// Reads visible cells, in row, family, qualifier, newest-timestamp-first order.
pub struct CellReader {
    iter: Box<dyn InternalIterator>,
    schema: Arc<TableSchema>,
    snapshot: SeqNo,
    now: u64,
    /// Exclusive upper bound of the keys read.
    end_key: Option<Vec<u8>>,
    families: Option<HashSet<String>>,
    regex: Option<Regex>,
    time_range: TimeRange,
    max_versions: Option<u32>,
    row_limit: Option<u64>,
    /// The cell and byte limits (none with a filter: see [`Filtering`]).
    budget: CellBudget,
    /// `esc(row) esc(family) esc(qualifier)` of a single-column read.
    target_column: Option<Vec<u8>>,
    tracker: Tracker,
    /// Name, GC rule and aggregator of the current family (None while
    /// skipping one).
    family: Option<(String, GcRule, Option<Aggregator>)>,
    column: ColumnState,
    /// The current row's key, decoded once a cell of it is emitted (while
    /// `row_known`); the buffer is reused from row to row.
    row: Vec<u8>,
    row_known: bool,
    row_counted: bool,
    rows_emitted: u64,
    /// The end of the current row's keys, built in one buffer kept from
    /// row to row (a listing skips each row's rest).
    row_end: Vec<u8>,
    done: bool,
    /// A cell read ahead by `next_row`.
    pending: Option<Cell>,
    filtering: Option<Box<Filtering>>,
    /// What `step` stopped at, besides `row` and `family`.
    emitted: Emitted,
    /// Where [`CellReader::current`] finds the cell `advance_view` stopped
    /// at.
    viewing: Viewing,
}

/// The parts of the cell `step` stopped at that the reader does not hold
/// already (its row is `row`, its family the current family's name).
#[derive(Default)]
struct Emitted {
    /// Decoded into a buffer kept from cell to cell (unless a cell took it).
    qualifier: Vec<u8>,
    timestamp: Timestamp,
    value: Value,
}

/// Where the cell of the last `advance_view` is.
#[derive(Default)]
enum Viewing {
    #[default]
    Nothing,
    /// In `row`, `family` and `emitted`.
    Parts,
    /// A whole cell (read ahead, or out of a row filter).
    Owned(Cell),
}

/// What an emitted cell carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The whole cell.
    Value,
    /// The cell with an empty value.
    Key,
    /// The row and timestamp alone (no family, qualifier or value): a
    /// listing of row keys.
    Row,
}

/// A scan's row filter and the limits that count its output.
struct Filtering {
    plan: Arc<Plan>,
    row_limit: Option<u64>,
    budget: CellBudget,
    rows: u64,
    last_row: Option<Vec<u8>>,
    /// The filter's output not yet returned.
    queue: VecDeque<Cell>,
    /// The first cell of the next row, read ahead while gathering one.
    ahead: Option<Cell>,
    /// The filter asks for each row's first cell, stripped, and key order
    /// is the filter's order: take that cell and skip the rest of the row
    /// (a listing of row keys), with no row gathered or filter evaluated.
    first_cell_only: bool,
}

impl CellReader {
    /// Positions `iter` at the start of `spec.rows`. `snapshot_seq` hides
    /// every entry with a higher sequence number; `now_micros` is the time the
    /// GC age limits are measured against. A bad column regex fails here.
    pub fn new(
        iter: Box<dyn InternalIterator>,
        spec: &ScanSpec,
        schema: Arc<TableSchema>,
        snapshot_seq: SeqNo,
        now_micros: u64,
    ) -> Result<CellReader> {
        let regex = spec
            .column_regex
            .as_deref()
            .map(compile_column_regex)
            .transpose()?;
        let (start_key, end_key) = key_bounds(&spec.rows);
        let mut filtering = match &spec.filter {
            Some(f) => Some(Box::new(Filtering {
                first_cell_only: false,
                plan: Plan::cached(f)?,
                row_limit: spec.row_limit,
                budget: CellBudget::of(spec),
                rows: 0,
                last_row: None,
                queue: VecDeque::new(),
                ahead: None,
            })),
            None => None,
        };
        if let Some(f) = filtering.as_deref_mut() {
            f.first_cell_only = f.plan.first_cell_stripped() && schema.ranks_follow_names();
        }
        // With a filter the limits count its output, not what it reads.
        let unfiltered = filtering.is_none();
        let mut r = CellReader {
            iter,
            schema,
            snapshot: snapshot_seq,
            now: now_micros,
            end_key,
            families: spec.families.as_ref().map(|f| f.iter().cloned().collect()),
            regex,
            time_range: spec.time_range,
            max_versions: spec.max_versions,
            row_limit: spec.row_limit.filter(|_| unfiltered),
            budget: if unfiltered {
                CellBudget::of(spec)
            } else {
                CellBudget::default()
            },
            target_column: None,
            tracker: Tracker::new(),
            family: None,
            column: ColumnState::default(),
            row: Vec::new(),
            row_known: false,
            row_counted: false,
            rows_emitted: 0,
            row_end: Vec::new(),
            done: false,
            pending: None,
            emitted: Emitted::default(),
            viewing: Viewing::Nothing,
            filtering,
        };
        match start_key {
            Some(k) => r.iter.seek(&k)?,
            None => r.iter.seek_to_first()?,
        }
        Ok(r)
    }

    /// A reader of one column of one row, seeking straight to it (the
    /// engine's point reads and the read half of read-modify-write).
    #[allow(clippy::too_many_arguments)]
    pub fn column(
        iter: Box<dyn InternalIterator>,
        schema: Arc<TableSchema>,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        time_range: TimeRange,
        max_versions: Option<u32>,
        snapshot_seq: SeqNo,
        now_micros: u64,
    ) -> Result<CellReader> {
        let spec = ScanSpec {
            rows: RowRange {
                start: Bound::Included(row.to_vec()),
                end: Bound::Included(row.to_vec()),
            },
            families: Some(vec![family.to_string()]),
            time_range,
            max_versions,
            ..Default::default()
        };
        let mut r = CellReader::new(iter, &spec, schema, snapshot_seq, now_micros)?;
        // Nothing after this column matters; cells of earlier columns of the
        // family are skipped by seeking (see `advance`).
        r.end_key = Some(key::column_end(row, family.as_bytes(), qualifier));
        r.target_column = Some(key::column_prefix(row, family.as_bytes(), qualifier));
        Ok(r)
    }

    /// The next visible cell, or `None` at the end of the scan.
    pub fn next_cell(&mut self) -> Result<Option<Cell>> {
        self.viewing = Viewing::Nothing;
        if let Some(c) = self.pending.take() {
            return Ok(Some(c));
        }
        if self.filtering.is_some() {
            let r = self.next_filtered();
            if r.is_err() {
                self.done = true;
            }
            return r;
        }
        self.guarded(Want::Value)
    }

    /// Steps to the next visible cell, as [`CellReader::next_cell`], and
    /// keeps it for [`CellReader::current`] instead of handing it out:
    /// false at the end of the scan. Its row, family and qualifier are not
    /// copied into a cell of their own.
    pub fn advance_view(&mut self) -> Result<bool> {
        if self.pending.is_some() || self.filtering.is_some() {
            let c = self.next_cell()?;
            let found = c.is_some();
            self.viewing = c.map_or(Viewing::Nothing, Viewing::Owned);
            return Ok(found);
        }
        self.viewing = Viewing::Nothing;
        let found = self.step(Want::Value);
        if found.is_err() {
            self.done = true;
        }
        if let Ok(true) = found {
            self.viewing = Viewing::Parts;
        }
        found
    }

    /// The cell the last [`CellReader::advance_view`] stopped at (None
    /// after any other step).
    pub fn current(&self) -> Option<CellView<'_>> {
        match &self.viewing {
            Viewing::Nothing => None,
            Viewing::Owned(c) => Some(c.view()),
            Viewing::Parts => Some(CellView {
                row: &self.row,
                family: self.family.as_ref().map_or("", |(name, _, _)| name),
                qualifier: &self.emitted.qualifier,
                timestamp: self.emitted.timestamp,
                value: &self.emitted.value,
            }),
        }
    }

    /// The next cell the row filter outputs, within the limits.
    fn next_filtered(&mut self) -> Result<Option<Cell>> {
        loop {
            let Some(f) = self.filtering.as_deref_mut() else {
                return Ok(None);
            };
            if f.budget.spent() {
                return Ok(None);
            }
            if let Some(c) = f.queue.pop_front() {
                if f.last_row.as_deref() != Some(c.row.as_slice()) {
                    if f.row_limit.is_some_and(|l| f.rows >= l) {
                        f.queue.clear();
                        return Ok(None);
                    }
                    f.rows += 1;
                    f.last_row = Some(c.row.clone());
                }
                f.budget.spend(c.value.len());
                return Ok(Some(c));
            }
            if f.first_cell_only {
                let Some(mut first) = self.advance(Want::Key)? else {
                    return Ok(None);
                };
                first.value = Value::new();
                self.skip_row()?;
                if let Some(f) = self.filtering.as_deref_mut() {
                    f.queue.push_back(first);
                }
                continue;
            }
            let ahead = f.ahead.take();
            let needs_rows = f.plan.needs_rows();
            let first = match ahead {
                Some(c) => c,
                None => match self.advance(Want::Value)? {
                    Some(c) => c,
                    None => return Ok(None),
                },
            };
            if !needs_rows {
                if let Some(f) = self.filtering.as_deref_mut() {
                    f.queue.push_back(first);
                }
                continue;
            }
            let row = first.row.clone();
            let mut cells = vec![first];
            while let Some(c) = self.advance(Want::Value)? {
                if c.row != row {
                    if let Some(f) = self.filtering.as_deref_mut() {
                        f.ahead = Some(c);
                    }
                    break;
                }
                cells.push(c);
            }
            // The filter sees the row family by family in creation order,
            // as Cloud Bigtable's does (CellsPerRowLimitFilter counts so).
            self.schema.order_row(&mut cells);
            if let Some(f) = self.filtering.as_deref_mut() {
                let out = f.plan.finish_row(&row, cells)?;
                f.queue.extend(out.into_iter().map(|l| l.cell));
            }
        }
    }

    /// The next row with at least one visible cell, and its cells.
    pub fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        let Some((row, cells, ahead)) = gather_row(|| self.next_cell())? else {
            return Ok(None);
        };
        // next_cell took any earlier read-ahead cell already.
        self.pending = ahead;
        Ok(Some((row, cells)))
    }

    /// The key of the next row with at least one visible cell, skipping the
    /// rest of that row without copying values (directory listings). Each
    /// row counts as one cell against the cell limit. Under a filter, the
    /// row of the filter's next cell; a filter that keeps each row's first
    /// cell stripped (a listing's) is that row, read the same way.
    pub fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        self.viewing = Viewing::Nothing;
        if let Some(f) = self.filtering.as_deref() {
            // A row limit is counted here; a cell or byte budget by the filter.
            if !(f.first_cell_only && !f.budget.limited() && f.queue.is_empty()) {
                return Ok(self.next_cell()?.map(|c| c.row));
            }
            if f.row_limit.is_some_and(|l| f.rows >= l) {
                return Ok(None);
            }
        }
        let cell = match self.pending.take() {
            // Counted when the filter let it out.
            Some(c) => c,
            None => match self.guarded(Want::Row)? {
                Some(c) => {
                    if let Some(f) = self.filtering.as_deref_mut() {
                        f.rows += 1;
                    }
                    c
                }
                None => return Ok(None),
            },
        };
        if let Err(e) = self.skip_row() {
            self.done = true;
            return Err(e);
        }
        Ok(Some(cell.row))
    }

    /// Steps past the rest of the current row.
    fn skip_row(&mut self) -> Result<()> {
        let mut end = std::mem::take(&mut self.row_end);
        key::prefix_end_into(self.tracker.row_enc(), &mut end);
        let r = self.skip_to(&end);
        self.row_end = end;
        r
    }

    /// `advance`, ending the scan after an error so iteration stops.
    fn guarded(&mut self, want: Want) -> Result<Option<Cell>> {
        let r = self.advance(want);
        if r.is_err() {
            self.done = true;
        }
        r
    }

    /// Steps forward to `target` (no-op if already there or beyond).
    fn skip_to(&mut self, target: &[u8]) -> Result<()> {
        for _ in 0..NEXTS_BEFORE_SEEK {
            if !self.iter.valid() || self.iter.key() >= target {
                return Ok(());
            }
            self.iter.next()?;
        }
        if self.iter.valid() && self.iter.key() < target {
            self.iter.seek(target)?;
        }
        Ok(())
    }

    /// The next visible cell, handed out whole.
    fn advance(&mut self, want: Want) -> Result<Option<Cell>> {
        if !self.step(want)? {
            return Ok(None);
        }
        // Handed to the cell, not copied: the next cell decodes its own.
        let (family, qualifier) = if want == Want::Row {
            (String::new(), Vec::new())
        } else {
            let family = self
                .family
                .as_ref()
                .map(|(n, _, _)| n.clone())
                .unwrap_or_default();
            (family, std::mem::take(&mut self.emitted.qualifier))
        };
        Ok(Some(Cell {
            row: self.row.clone(),
            family,
            qualifier,
            timestamp: self.emitted.timestamp,
            value: std::mem::take(&mut self.emitted.value),
        }))
    }

    /// Steps to the next visible cell: false at the end of the scan. The
    /// cell's row is then in `row`, its family's name in `family` (unless
    /// `want` is [`Want::Row`]) and the rest in `emitted`.
    fn step(&mut self, want: Want) -> Result<bool> {
        loop {
            if self.done || !self.iter.valid() {
                self.done = true;
                return Ok(false);
            }
            let key = self.iter.key();
            if self.end_key.as_deref().is_some_and(|end| key >= end) {
                self.done = true;
                return Ok(false);
            }
            let k = EntryKey::parse(key)?;
            if k.seq > self.snapshot {
                self.iter.next()?;
                continue;
            }
            let change = self.tracker.position(&k);
            if change == Change::Row {
                if self.row_limit.is_some_and(|l| self.rows_emitted >= l) {
                    self.done = true;
                    return Ok(false);
                }
                self.row_known = false;
                self.row_counted = false;
                if let Some(f) = self.filtering.as_deref() {
                    k.row_into(&mut self.row)?;
                    self.row_known = true;
                    if !f.plan.row_passes(&self.row) {
                        self.skip_row()?;
                        continue;
                    }
                }
            }
            if k.is_row_level() {
                self.tracker.classify(&k, self.iter.value())?;
                self.iter.next()?;
                continue;
            }
            // A new row usually keeps the family of the last one: its name
            // and rule are looked up (and copied) only when they change.
            if change >= Change::Family
                && !self
                    .family
                    .as_ref()
                    .is_some_and(|(name, _, _)| k.family_is(name.as_bytes()))
            {
                self.family = self.wanted_family(&k)?;
                self.tracker
                    .set_aggregate(self.family.as_ref().is_some_and(|f| f.2.is_some()));
                if self.family.is_none() {
                    let end = prefix_end(k.family_prefix);
                    self.skip_to(&end)?;
                    continue;
                }
            }
            if change >= Change::Column {
                self.column = ColumnState::default();
            }
            if k.kind == Kind::Put {
                // Every tombstone of the column sorts before its cells, so
                // skipping the rest of a column from here loses none.
                if let Some(target) = self.target_column.as_deref() {
                    if k.column_enc < target {
                        let target = target.to_vec();
                        self.skip_to(&target)?;
                        continue;
                    }
                }
                if !self.column.checked {
                    self.column.checked = true;
                    // The qualifier is decoded here only for a test of it;
                    // else when a cell of the column is emitted, if one is.
                    if self.tests_columns() {
                        let (mut matches, q) = self.column_matches(&k)?;
                        if let (true, Some(f), Some((fam, _, _))) =
                            (matches, self.filtering.as_deref(), self.family.as_ref())
                        {
                            matches = f.plan.column_passes(fam, &q);
                        }
                        self.column.qualifier = Some(q);
                        if !matches {
                            let end = prefix_end(k.column_enc);
                            self.skip_to(&end)?;
                            continue;
                        }
                    }
                }
            }
            let verdict = self.tracker.classify(&k, self.iter.value())?;
            let Verdict::Visible { index } = verdict else {
                self.iter.next()?;
                continue;
            };
            let ts = k.timestamp;
            let gc = self.family.as_ref().map(|(_, gc, _)| gc);
            match take_version(
                gc,
                index,
                ts,
                self.now,
                self.time_range,
                self.max_versions,
                self.column.emitted,
            ) {
                Take::EndColumn => {
                    let end = prefix_end(k.column_enc);
                    self.skip_to(&end)?;
                    continue;
                }
                Take::Skip => {
                    self.iter.next()?;
                    continue;
                }
                Take::Emit => {}
            }
            // The filter's time tests come after the versions count: the
            // scan's selections apply before the filter.
            if self
                .filtering
                .as_deref()
                .is_some_and(|f| !f.plan.time_passes(ts))
            {
                self.column.emitted += 1;
                self.iter.next()?;
                continue;
            }
            if self.budget.spent()
                || (!self.row_counted && self.row_limit.is_some_and(|l| self.rows_emitted >= l))
            {
                self.done = true;
                return Ok(false);
            }
            if !self.row_known {
                k.row_into(&mut self.row)?;
                self.row_known = true;
            }
            let want_value = want == Want::Value;
            if want != Want::Row {
                // A qualifier decoded for a test of it is used as it is; a
                // column's later version (in a read of several) decodes it
                // again.
                match self.column.qualifier.take() {
                    Some(q) => self.emitted.qualifier = q,
                    None => k.qualifier_into(&mut self.emitted.qualifier)?,
                }
            }
            // An aggregate cell is the fold of its operands at this timestamp.
            let aggregate = self.family.as_ref().and_then(|f| f.2);
            let (value, stepped) = match aggregate {
                Some(agg) if want_value => {
                    let mut value = self.iter.value().to_vec();
                    let column = k.column_enc.to_vec();
                    self.iter.next()?;
                    self.fold_twins(&column, ts, agg, &mut value)?;
                    (Value::from(value), true)
                }
                // Shared with the block it sits in, not copied.
                _ if want_value => (self.iter.shared_value(), false),
                _ => (Value::new(), false),
            };
            // A one-column read with all the versions it wants is over: not
            // stepping on saves a decode (or a block load) past the column.
            let column_done = self.target_column.is_some()
                && self
                    .max_versions
                    .is_some_and(|n| self.column.emitted + 1 >= n);
            if column_done {
                self.done = true;
            } else if !stepped {
                self.iter.next()?;
            }
            self.column.emitted += 1;
            self.budget.spend(value.len());
            if !self.row_counted {
                self.row_counted = true;
                self.rows_emitted += 1;
            }
            self.emitted.timestamp = ts;
            self.emitted.value = value;
            return Ok(true);
        }
    }

    /// The family's name and GC rule if the scan reads it (in the schema and
    /// in the scan's family list).
    fn wanted_family(
        &self,
        k: &EntryKey<'_>,
    ) -> Result<Option<(String, GcRule, Option<Aggregator>)>> {
        let raw = k.family()?;
        let Ok(name) = std::str::from_utf8(&raw) else {
            return Ok(None);
        };
        // The hidden change family is read only when named (by the change
        // reader; users cannot name it).
        let named = self.families.as_ref().map(|s| s.contains(name));
        if named == Some(false) || (named.is_none() && name == CHANGES_FAMILY) {
            return Ok(None);
        }
        let Some(f) = self.schema.stored_family(name) else {
            return Ok(None);
        };
        Ok(Some((f.name.clone(), f.gc.clone(), f.aggregate)))
    }

    /// Folds into `value` the visible operands of `column` at `ts` that
    /// follow its cell, stepping past them.
    fn fold_twins(
        &mut self,
        column: &[u8],
        ts: u64,
        agg: Aggregator,
        value: &mut Vec<u8>,
    ) -> Result<()> {
        while self.iter.valid() {
            let k = EntryKey::parse(self.iter.key())?;
            if k.column_enc != column || k.timestamp != ts || k.kind != Kind::Put {
                break;
            }
            if k.seq <= self.snapshot {
                self.tracker.position(&k);
                if let Verdict::Fold { .. } = self.tracker.classify(&k, self.iter.value())? {
                    agg.fold_into(value, self.iter.value());
                }
            }
            self.iter.next()?;
        }
        Ok(())
    }

    /// Whether a column's qualifier is tested (by the column regex, or by
    /// the filter's column tests) before its cells are read.
    fn tests_columns(&self) -> bool {
        self.regex.is_some()
            || self
                .filtering
                .as_deref()
                .is_some_and(|f| f.plan.tests_columns())
    }

    /// Whether the column regex accepts `k`'s column; also the decoded qualifier.
    fn column_matches(&self, k: &EntryKey<'_>) -> Result<(bool, Vec<u8>)> {
        let q = k.qualifier()?;
        let Some(re) = &self.regex else {
            return Ok((true, q));
        };
        let fam = self
            .family
            .as_ref()
            .map(|(n, _, _)| n.as_str())
            .unwrap_or("");
        let mut text = Vec::with_capacity(fam.len() + 1 + q.len());
        text.extend_from_slice(fam.as_bytes());
        text.push(b':');
        text.extend_from_slice(&q);
        Ok((re.is_match(&text), q))
    }
}

impl Iterator for CellReader {
    type Item = Result<Cell>;
    fn next(&mut self) -> Option<Result<Cell>> {
        self.next_cell().transpose()
    }
}

/// The internal-key bounds of a row range: where to seek, and the exclusive end.
fn key_bounds(rows: &RowRange) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let start = match &rows.start {
        Bound::Included(r) => Some(key::row_start(r)),
        Bound::Excluded(r) => Some(key::row_end(r)),
        Bound::Unbounded => None,
    };
    let end = match &rows.end {
        Bound::Included(r) => Some(key::row_end(r)),
        Bound::Excluded(r) => Some(key::row_start(r)),
        Bound::Unbounded => None,
    };
    (start, end)
}

#[cfg(test)]
mod tests;
