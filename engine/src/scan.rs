//! What a read asks for: rows, columns, versions, limits and a row filter.
//! It sits above both the data model and the filters it combines.

use crate::data::{RowRange, TimeRange};
use crate::filter::RowFilter;
use std::ops::Bound;

/// A read of many rows (and, with a single-row range, of one row).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanSpec {
    /// The rows read.
    pub rows: RowRange,
    /// Only these families; `None` means all.
    pub families: Option<Vec<String>>,
    /// A regex matched against the whole of `family:qualifier` (bytes), e.g.
    /// `anchor:.*\.cnn\.com` for the paper's `anchor:*.cnn.com`.
    pub column_regex: Option<String>,
    /// Only versions whose timestamp lies in this range.
    pub time_range: TimeRange,
    /// At most this many newest versions per column; `None` means all retained.
    pub max_versions: Option<u32>,
    /// Stop after this many rows.
    pub row_limit: Option<u64>,
    /// Stop after this many cells.
    pub cell_limit: Option<u64>,
    /// Stop once the values returned come to this many bytes: the cell
    /// that reaches it is the last, so a read returns at least one cell.
    /// A read that returns fewer bytes ended by itself (or by another
    /// limit): the mount reads a small row whole this way, and knows it
    /// saw all of it.
    pub byte_limit: Option<u64>,
    /// Read as of this sequence snapshot (`None`: now). Set by the engine for consistent scans.
    pub snapshot: Option<u64>,
    /// A row filter run on what the fields above select, inside the tablet
    /// server; `row_limit`, `cell_limit` and `byte_limit` then count its
    /// output.
    pub filter: Option<RowFilter>,
}

/// A read's limits on the cells it returns (`cell_limit`, `byte_limit`),
/// and what it has returned so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct CellBudget {
    cell_limit: Option<u64>,
    byte_limit: Option<u64>,
    cells: u64,
    bytes: u64,
}

impl CellBudget {
    /// The limits `spec` sets.
    pub(crate) fn of(spec: &ScanSpec) -> CellBudget {
        CellBudget {
            cell_limit: spec.cell_limit,
            byte_limit: spec.byte_limit,
            ..CellBudget::default()
        }
    }

    /// Whether no more cells may be returned.
    pub(crate) fn spent(&self) -> bool {
        self.cell_limit.is_some_and(|l| self.cells >= l)
            || self.byte_limit.is_some_and(|l| self.bytes >= l)
    }

    /// Whether any limit is set.
    pub(crate) fn limited(&self) -> bool {
        self.cell_limit.is_some() || self.byte_limit.is_some()
    }

    /// Counts a cell returned, of `value_len` bytes.
    pub(crate) fn spend(&mut self, value_len: usize) {
        self.cells += 1;
        self.bytes += value_len as u64;
    }
}

impl ScanSpec {
    /// A read of the one row `row`, every column and version.
    pub fn row(row: &[u8]) -> ScanSpec {
        ScanSpec {
            rows: RowRange {
                start: Bound::Included(row.to_vec()),
                end: Bound::Included(row.to_vec()),
            },
            ..Default::default()
        }
    }

    /// This read limited to the tablet `[start, end)`: it starts no
    /// earlier than the tablet, and ends no later.
    pub fn clipped(&self, start: &[u8], end: Option<&[u8]>) -> ScanSpec {
        let mut part = self.clone();
        let starts_before = match &part.rows.start {
            Bound::Unbounded => true,
            Bound::Included(k) | Bound::Excluded(k) => k.as_slice() < start,
        };
        if starts_before {
            part.rows.start = Bound::Included(start.to_vec());
        }
        if let Some(end) = end {
            let tablet_end_first = match &part.rows.end {
                Bound::Unbounded => true,
                Bound::Included(e) => end <= e.as_slice(),
                Bound::Excluded(e) => end < e.as_slice(),
            };
            if tablet_end_first {
                part.rows.end = Bound::Excluded(end.to_vec());
            }
        }
        part
    }
}
