//! Reading: turns the merged stream of every internal entry (memtables and
//! SSTables, all sequence numbers, tombstones included) into the cells a
//! reader sees.
//!
//! For each column, in this order:
//! 1. entries with a sequence number above the snapshot do not exist;
//! 2. row, family and column tombstones hide entries with a lower sequence
//!    number (column tombstones only inside their time range), and of several
//!    cells at one timestamp only the highest-sequence one counts
//!    ([`crate::visibility`]);
//! 3. the family's GC rule is applied to the remaining versions newest first
//!    (collected versions vanish at once, before any compaction);
//! 4. the scan's filters: families, column regex, time range, versions per
//!    column (the newest N inside the time range), then row and cell limits.
//!
//! Entries of families no longer in the schema are skipped.

use crate::data::{Cell, RowRange, ScanSpec, TimeRange};
use crate::error::{Error, Result};
use crate::iterator::InternalIterator;
use crate::key::{self, Kind, SeqNo};
use crate::schema::{GcRule, TableSchema};
use crate::visibility::{prefix_end, Change, EntryKey, Tracker, Verdict};
use regex::bytes::{Regex, RegexBuilder};
use std::collections::HashSet;
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
                reason: e.to_string(),
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

/// Per-column state of the scan filters.
#[derive(Default)]
struct ColumnState {
    /// Decoded qualifier, once a cell of the column is emitted.
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
    cell_limit: Option<u64>,
    /// `esc(row) esc(family) esc(qualifier)` of a single-column read.
    target_column: Option<Vec<u8>>,
    tracker: Tracker,
    /// Name and GC rule of the current family (None while skipping one).
    family: Option<(String, GcRule)>,
    column: ColumnState,
    /// The current row's key, decoded once a cell of it is emitted.
    row: Option<Vec<u8>>,
    row_counted: bool,
    rows_emitted: u64,
    cells_emitted: u64,
    done: bool,
    /// A cell read ahead by `next_row`.
    pending: Option<Cell>,
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
        let mut r = CellReader {
            iter,
            schema,
            snapshot: snapshot_seq,
            now: now_micros,
            end_key,
            families: spec
                .families
                .as_ref()
                .map(|f| f.iter().cloned().collect()),
            regex,
            time_range: spec.time_range,
            max_versions: spec.max_versions,
            row_limit: spec.row_limit,
            cell_limit: spec.cell_limit,
            target_column: None,
            tracker: Tracker::new(),
            family: None,
            column: ColumnState::default(),
            row: None,
            row_counted: false,
            rows_emitted: 0,
            cells_emitted: 0,
            done: false,
            pending: None,
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
        if let Some(c) = self.pending.take() {
            return Ok(Some(c));
        }
        self.guarded(true)
    }

    /// The next row with at least one visible cell, and its cells.
    pub fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        let Some(first) = self.next_cell()? else {
            return Ok(None);
        };
        let row = first.row.clone();
        let mut cells = vec![first];
        while let Some(c) = self.guarded(true)? {
            if c.row != row {
                self.pending = Some(c);
                break;
            }
            cells.push(c);
        }
        Ok(Some((row, cells)))
    }

    /// The key of the next row with at least one visible cell, skipping the
    /// rest of that row without copying values (directory listings). Each
    /// row counts as one cell against the cell limit.
    pub fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        let cell = match self.pending.take() {
            Some(c) => c,
            None => match self.guarded(false)? {
                Some(c) => c,
                None => return Ok(None),
            },
        };
        let end = prefix_end(self.tracker.row_enc());
        if let Err(e) = self.skip_to(&end) {
            self.done = true;
            return Err(e);
        }
        Ok(Some(cell.row))
    }

    /// `advance`, ending the scan after an error so iteration stops.
    fn guarded(&mut self, want_value: bool) -> Result<Option<Cell>> {
        let r = self.advance(want_value);
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

    fn advance(&mut self, want_value: bool) -> Result<Option<Cell>> {
        loop {
            if self.done || !self.iter.valid() {
                self.done = true;
                return Ok(None);
            }
            let key = self.iter.key();
            if self.end_key.as_deref().is_some_and(|end| key >= end) {
                self.done = true;
                return Ok(None);
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
                    return Ok(None);
                }
                self.row = None;
                self.row_counted = false;
            }
            if k.is_row_level() {
                self.tracker.classify(&k, self.iter.value())?;
                self.iter.next()?;
                continue;
            }
            if change >= Change::Family {
                self.family = self.wanted_family(&k)?;
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
                    let (matches, q) = self.column_matches(&k)?;
                    self.column.qualifier = Some(q);
                    if !matches {
                        let end = prefix_end(k.column_enc);
                        self.skip_to(&end)?;
                        continue;
                    }
                }
            }
            let verdict = self.tracker.classify(&k, self.iter.value())?;
            let Verdict::Visible { index } = verdict else {
                self.iter.next()?;
                continue;
            };
            let ts = k.timestamp;
            let gc = match &self.family {
                Some((_, gc)) => *gc,
                None => GcRule::KEEP_ALL,
            };
            // Collected versions form a suffix of the column, as do versions
            // older than the time range: either ends the column.
            let column_over = gc.collects(index, ts, self.now)
                || ts < self.time_range.start
                || self
                    .max_versions
                    .is_some_and(|n| self.column.emitted >= n);
            if column_over {
                let end = prefix_end(k.column_enc);
                self.skip_to(&end)?;
                continue;
            }
            if ts >= self.time_range.end {
                self.iter.next()?;
                continue;
            }
            if self.cell_limit.is_some_and(|l| self.cells_emitted >= l)
                || (!self.row_counted && self.row_limit.is_some_and(|l| self.rows_emitted >= l))
            {
                self.done = true;
                return Ok(None);
            }
            let row = match &self.row {
                Some(r) => r.clone(),
                None => {
                    let r = k.row()?;
                    self.row = Some(r.clone());
                    r
                }
            };
            let qualifier = match &self.column.qualifier {
                Some(q) => q.clone(),
                None => {
                    let q = k.qualifier()?;
                    self.column.qualifier = Some(q.clone());
                    q
                }
            };
            let family = self
                .family
                .as_ref()
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            let value = if want_value {
                self.iter.value().to_vec()
            } else {
                Vec::new()
            };
            self.iter.next()?;
            self.column.emitted += 1;
            self.cells_emitted += 1;
            if !self.row_counted {
                self.row_counted = true;
                self.rows_emitted += 1;
            }
            return Ok(Some(Cell {
                row,
                family,
                qualifier,
                timestamp: ts,
                value,
            }));
        }
    }

    /// The family's name and GC rule if the scan reads it (in the schema and
    /// in the scan's family list).
    fn wanted_family(&self, k: &EntryKey<'_>) -> Result<Option<(String, GcRule)>> {
        let raw = k.family()?;
        let Ok(name) = std::str::from_utf8(&raw) else {
            return Ok(None);
        };
        let Some(f) = self.schema.family(name) else {
            return Ok(None);
        };
        if self.families.as_ref().is_some_and(|s| !s.contains(name)) {
            return Ok(None);
        }
        Ok(Some((f.name.clone(), f.gc)))
    }

    /// Whether the column regex accepts `k`'s column; also the decoded qualifier.
    fn column_matches(&self, k: &EntryKey<'_>) -> Result<(bool, Vec<u8>)> {
        let q = k.qualifier()?;
        let Some(re) = &self.regex else {
            return Ok((true, q));
        };
        let fam = self.family.as_ref().map(|(n, _)| n.as_str()).unwrap_or("");
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
