//! A streaming scan across a table's tablets, in row order. Each tablet's
//! part is read from a snapshot its server takes when the part starts.

use super::Client;
use crate::data::*;
use crate::protocol::{CellSource, ScanPart};
use crate::scan::{CellBudget, ScanSpec};
use crate::Result;
use std::ops::Bound;
use std::sync::Arc;

/// Where a scan's parts come from: the live table's tablets, or those of
/// a snapshot ([`crate::snapshot::SnapshotView`]).
pub(crate) trait Parts: Send {
    /// The part of `spec` in the tablet holding `row`, and that tablet's end.
    fn part(&self, row: &[u8], spec: &ScanSpec) -> Result<ScanPart>;
}

/// The live table's tablets, through their servers.
struct Live {
    client: Arc<Client>,
    table: u64,
}

impl Parts for Live {
    fn part(&self, row: &[u8], spec: &ScanSpec) -> Result<ScanPart> {
        self.client
            .with_tablet(self.table, row, |s, l| s.scan_part(l.tablet, spec))
    }
}

/// The rows of a scan, read one tablet at a time as they are asked for
/// (see [`crate::Bigtable::scan`]).
pub struct Scanner {
    parts: Box<dyn Parts>,
    spec: ScanSpec,
    /// Where the next tablet's part starts (None: done).
    resume: Option<Bound<Vec<u8>>>,
    reader: Option<Box<dyn CellSource>>,
    rows: u64,
    budget: CellBudget,
    last_row: Option<Vec<u8>>,
    /// A cell read ahead by next_row.
    pending: Option<Cell>,
    /// That cell while a view step stopped at it.
    held: Option<Cell>,
    /// View steps went on without noting their rows in `last_row` (no row
    /// limit to count against): [`Scanner::settle_views`] notes the last.
    views_unsettled: bool,
}

impl Scanner {
    pub(crate) fn new(client: Arc<Client>, table: u64, spec: ScanSpec) -> Scanner {
        Scanner::over(Box::new(Live { client, table }), spec)
    }

    /// A scan of the parts `parts` gives.
    pub(crate) fn over(parts: Box<dyn Parts>, spec: ScanSpec) -> Scanner {
        Scanner {
            parts,
            resume: Some(spec.rows.start.clone()),
            budget: CellBudget::of(&spec),
            spec,
            reader: None,
            rows: 0,
            last_row: None,
            pending: None,
            held: None,
            views_unsettled: false,
        }
    }

    fn open_next_tablet(&mut self) -> Result<bool> {
        let Some(resume) = self.resume.take() else {
            return Ok(false);
        };
        let row = match &resume {
            Bound::Included(k) | Bound::Excluded(k) => k.clone(),
            Bound::Unbounded => Vec::new(),
        };
        let mut part = self.spec.clone();
        part.row_limit = None;
        part.cell_limit = None;
        part.byte_limit = None;
        part.rows.start = resume;
        let (reader, end) = self.parts.part(&row, &part)?;
        // Go on at the tablet's end unless the scan ends first.
        self.resume = end
            .filter(|e| match &self.spec.rows.end {
                Bound::Unbounded => true,
                Bound::Included(x) => e.as_slice() <= x.as_slice(),
                Bound::Excluded(x) => e.as_slice() < x.as_slice(),
            })
            .map(Bound::Included);
        self.reader = Some(reader);
        Ok(true)
    }

    fn next_cell(&mut self) -> Result<Option<Cell>> {
        self.settle_views();
        if let Some(c) = self.pending.take() {
            return Ok(Some(c));
        }
        loop {
            if self.budget.spent() {
                return Ok(None);
            }
            if let Some(r) = &mut self.reader {
                if let Some(c) = r.next_cell()? {
                    if self.last_row.as_deref() != Some(c.row.as_slice()) && !self.enter_row(&c.row)
                    {
                        return Ok(None);
                    }
                    self.budget.spend(c.value.len());
                    return Ok(Some(c));
                }
                self.reader = None;
            }
            if !self.open_next_tablet()? {
                return Ok(None);
            }
        }
    }

    /// Counts a new row `row`; false (and the scan ended) when the row
    /// limit is reached.
    fn enter_row(&mut self, row: &[u8]) -> bool {
        if !count_row(&mut self.rows, &mut self.last_row, self.spec.row_limit, row) {
            self.end();
            return false;
        }
        true
    }

    /// Notes the row of the last view step in `last_row`, where view
    /// steps did not: the other ways to read on drop the rest of that row
    /// (a row read in part is not read again).
    fn settle_views(&mut self) {
        if !std::mem::take(&mut self.views_unsettled) {
            return;
        }
        let row = match (&self.held, &self.reader) {
            (Some(c), _) => Some(c.row.as_slice()),
            (None, Some(r)) => r.current().map(|c| c.row),
            (None, None) => None,
        };
        if let Some(row) = row {
            let last = self.last_row.get_or_insert_with(Vec::new);
            last.clear();
            last.extend_from_slice(row);
        }
    }

    fn end(&mut self) {
        self.resume = None;
        self.reader = None;
    }

    /// The next cell of the scan, as [`Scanner::next_cell`] (the iterator)
    /// reads it, borrowed until the next step: its row, family and
    /// qualifier are not copied into a cell of their own.
    pub fn next_view(&mut self) -> Result<Option<CellView<'_>>> {
        if !self.advance_view()? {
            return Ok(None);
        }
        Ok(match &self.held {
            Some(c) => Some(c.view()),
            None => self.reader.as_ref().and_then(|r| r.current()),
        })
    }

    fn advance_view(&mut self) -> Result<bool> {
        self.held = self.pending.take();
        if self.held.is_some() {
            return Ok(true);
        }
        loop {
            if self.budget.spent() {
                return Ok(false);
            }
            if let Some(r) = &mut self.reader {
                if r.advance_view()? {
                    if self.spec.row_limit.is_none() && !self.budget.limited() {
                        // Nothing to count: the row is neither compared
                        // nor copied per cell.
                        self.views_unsettled = true;
                        return Ok(true);
                    }
                    let Some(c) = r.current() else {
                        return Err(crate::Error::corruption(
                            "a scan part stepped to a cell it does not show",
                        ));
                    };
                    let (new_row, bytes) = (self.last_row.as_deref() != Some(c.row), c.value.len());
                    if new_row
                        && !count_row(
                            &mut self.rows,
                            &mut self.last_row,
                            self.spec.row_limit,
                            c.row,
                        )
                    {
                        self.end();
                        return Ok(false);
                    }
                    self.budget.spend(bytes);
                    return Ok(true);
                }
                self.reader = None;
            }
            if !self.open_next_tablet()? {
                return Ok(false);
            }
        }
    }

    /// The key of the next row, its cells skipped where the tablet's part
    /// can (see [`CellSource::next_row_key`]); a row counts as one cell of
    /// no bytes against the limits.
    pub fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        self.settle_views();
        if let Some(c) = self.pending.take() {
            // Read ahead by `next_row`, and counted then; the rest of its
            // row is dropped below as repeats.
            return Ok(Some(c.row));
        }
        loop {
            if self.budget.spent() {
                return Ok(None);
            }
            if let Some(r) = &mut self.reader {
                if let Some(row) = r.next_row_key()? {
                    if self.last_row.as_deref() == Some(row.as_slice()) {
                        continue;
                    }
                    if !self.enter_row(&row) {
                        return Ok(None);
                    }
                    self.budget.spend(0);
                    return Ok(Some(row));
                }
                self.reader = None;
            }
            if !self.open_next_tablet()? {
                return Ok(None);
            }
        }
    }

    /// The next row with every selected cell of it.
    pub fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        let Some((row, cells, ahead)) = gather_row(|| self.next_cell())? else {
            return Ok(None);
        };
        // next_cell took any earlier read-ahead cell already.
        self.pending = ahead;
        Ok(Some((row, cells)))
    }
}

/// Counts `row` as a scan's next row, kept in `last_row` (its buffer
/// reused: one allocation per scan, not per row); false when `limit` rows
/// were counted already.
fn count_row(
    rows: &mut u64,
    last_row: &mut Option<Vec<u8>>,
    limit: Option<u64>,
    row: &[u8],
) -> bool {
    if limit.is_some_and(|l| *rows >= l) {
        return false;
    }
    *rows += 1;
    let last = last_row.get_or_insert_with(Vec::new);
    last.clear();
    last.extend_from_slice(row);
    true
}

impl Iterator for Scanner {
    type Item = Result<Cell>;
    fn next(&mut self) -> Option<Result<Cell>> {
        self.next_cell().transpose()
    }
}
