//! The public data model: cells, mutations, conditions and scan specifications.

use crate::key::Timestamp;
pub use crate::storage::{BloomKind, Compression};
use crate::value::Value;
use std::ops::Bound;

/// Row keys are at most this long (Bigtable's 64 KiB).
pub const MAX_ROW_KEY: usize = 64 * 1024;
/// Qualifiers are at most this long.
pub const MAX_QUALIFIER: usize = 16 * 1024;
/// Default limit on one cell value (configurable in [`crate::Options`]).
pub const DEFAULT_MAX_VALUE: usize = 64 * 1024 * 1024;

/// One version of one cell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cell {
    /// The row key.
    #[serde(with = "crate::byte_string")]
    pub row: Vec<u8>,
    /// The column family.
    pub family: String,
    /// The column qualifier within the family.
    #[serde(with = "crate::byte_string")]
    pub qualifier: Vec<u8>,
    /// The version's timestamp, in microseconds.
    pub timestamp: Timestamp,
    /// The stored bytes (shared with the block they were read from, if any).
    pub value: Value,
}

/// One version of a column a read named: its timestamp and value (the
/// row, family and qualifier are the reader's own, not copied back).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    /// The version's timestamp, in microseconds.
    pub timestamp: Timestamp,
    /// The stored bytes (shared with the block they were read from, if any).
    pub value: Value,
}

impl Version {
    /// The version as the cell at `row`, `family`, `qualifier`.
    pub fn into_cell(self, row: &[u8], family: &str, qualifier: &[u8]) -> Cell {
        Cell {
            row: row.to_vec(),
            family: family.to_string(),
            qualifier: qualifier.to_vec(),
            timestamp: self.timestamp,
            value: self.value,
        }
    }
}

/// One cell of a scan, borrowed from the scanner until its next step: what
/// a caller that only looks at each cell reads with no copy of its row,
/// family or qualifier (as an LSM store's iterator hands out its current
/// key and value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellView<'a> {
    /// The row key.
    pub row: &'a [u8],
    /// The column family.
    pub family: &'a str,
    /// The column qualifier within the family.
    pub qualifier: &'a [u8],
    /// The version's timestamp, in microseconds.
    pub timestamp: Timestamp,
    /// The stored bytes (shared with the block they were read from, if
    /// any).
    pub value: &'a Value,
}

impl CellView<'_> {
    /// The cell, copied out.
    pub fn to_cell(&self) -> Cell {
        Cell {
            row: self.row.to_vec(),
            family: self.family.to_string(),
            qualifier: self.qualifier.to_vec(),
            timestamp: self.timestamp,
            value: self.value.clone(),
        }
    }
}

impl Cell {
    /// The cell, borrowed.
    pub fn view(&self) -> CellView<'_> {
        CellView {
            row: &self.row,
            family: &self.family,
            qualifier: &self.qualifier,
            timestamp: self.timestamp,
            value: &self.value,
        }
    }
}

/// A row gathered from a cell stream: its key, its cells, and the first cell
/// of the next row, read ahead (if any).
pub(crate) type GatheredRow = (Vec<u8>, Vec<Cell>, Option<Cell>);

/// Gathers the row whose first cell `next` yields, reading on until a cell of
/// another row (handed back for the caller to keep) or the end.
pub(crate) fn gather_row<E>(
    mut next: impl FnMut() -> Result<Option<Cell>, E>,
) -> Result<Option<GatheredRow>, E> {
    let Some(first) = next()? else {
        return Ok(None);
    };
    let row = first.row.clone();
    let mut cells = vec![first];
    while let Some(c) = next()? {
        if c.row != row {
            return Ok(Some((row, cells, Some(c))));
        }
        cells.push(c);
    }
    Ok(Some((row, cells, None)))
}

/// A half-open range of timestamps `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TimeRange {
    /// First timestamp in the range.
    pub start: Timestamp,
    /// First timestamp after the range.
    pub end: Timestamp,
}

impl TimeRange {
    /// Every timestamp.
    pub const ALL: TimeRange = TimeRange {
        start: 0,
        end: u64::MAX,
    };
    /// Exactly one timestamp.
    pub fn exactly(ts: Timestamp) -> TimeRange {
        TimeRange {
            start: ts,
            end: ts.saturating_add(1),
        }
    }
    /// Whether `ts` lies in `[start, end)`.
    pub fn contains(&self, ts: Timestamp) -> bool {
        ts >= self.start && ts < self.end
    }
}

impl Default for TimeRange {
    fn default() -> Self {
        TimeRange::ALL
    }
}

/// One change to one row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mutation {
    /// Writes a version; `timestamp: None` lets the server assign the current time in µs.
    SetCell {
        /// The family written to.
        family: String,
        /// The column within the family.
        #[serde(with = "crate::byte_string")]
        qualifier: Vec<u8>,
        /// The version's timestamp.
        timestamp: Option<Timestamp>,
        /// The bytes written.
        #[serde(with = "crate::byte_string")]
        value: Vec<u8>,
    },
    /// Deletes the versions of one column whose timestamps lie in `range`
    /// (one version: [`TimeRange::exactly`]; the whole column: [`TimeRange::ALL`]).
    DeleteCells {
        /// The family of the column.
        family: String,
        /// The column within the family.
        #[serde(with = "crate::byte_string")]
        qualifier: Vec<u8>,
        /// The timestamps whose versions are deleted.
        range: TimeRange,
    },
    /// Deletes every cell of a family in this row.
    DeleteFamily {
        /// The family emptied.
        family: String,
    },
    /// Deletes every cell of the row.
    DeleteRow,
    /// Folds `input` into the cell at `timestamp` of an aggregate family with
    /// the family's aggregator (Cloud Bigtable's `AddToCell`; `MergeToCell`
    /// of an Int64 state is the same). The timestamp names the cell: writes
    /// at one column and timestamp aggregate into one cell.
    AddToCell {
        /// The aggregate family written to.
        family: String,
        /// The column within the family.
        #[serde(with = "crate::byte_string")]
        qualifier: Vec<u8>,
        /// The cell's timestamp.
        timestamp: Timestamp,
        /// The value folded in.
        input: i64,
    },
}

impl Mutation {
    /// This op as written at `ts`: a `SetCell` that names no timestamp
    /// gets `ts`, as the server stamps it; every other op is unchanged.
    pub fn stamped(&self, ts: Timestamp) -> Mutation {
        match self {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp: None,
                value,
            } => Mutation::SetCell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp: Some(ts),
                value: value.clone(),
            },
            other => other.clone(),
        }
    }
}

/// Mutations of one row, applied atomically and in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RowMutation {
    /// The row changed.
    #[serde(with = "crate::byte_string")]
    pub row: Vec<u8>,
    /// The changes, applied in order.
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    /// A mutation of `row` with no changes yet.
    pub fn new(row: impl Into<Vec<u8>>) -> Self {
        RowMutation {
            row: row.into(),
            mutations: Vec::new(),
        }
    }
    /// Adds a write of `value` at the server's current time.
    pub fn set(
        mut self,
        family: &str,
        qualifier: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.mutations.push(Mutation::SetCell {
            family: family.to_string(),
            qualifier: qualifier.into(),
            timestamp: None,
            value: value.into(),
        });
        self
    }
    /// Adds a write of `value` at timestamp `ts`.
    pub fn set_at(
        mut self,
        family: &str,
        qualifier: impl Into<Vec<u8>>,
        ts: Timestamp,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.mutations.push(Mutation::SetCell {
            family: family.to_string(),
            qualifier: qualifier.into(),
            timestamp: Some(ts),
            value: value.into(),
        });
        self
    }
    /// Adds a deletion of one column's versions in `range`.
    pub fn delete_cells(
        mut self,
        family: &str,
        qualifier: impl Into<Vec<u8>>,
        range: TimeRange,
    ) -> Self {
        self.mutations.push(Mutation::DeleteCells {
            family: family.to_string(),
            qualifier: qualifier.into(),
            range,
        });
        self
    }
    /// Adds a deletion of every cell of `family` in the row.
    pub fn delete_family(mut self, family: &str) -> Self {
        self.mutations.push(Mutation::DeleteFamily {
            family: family.to_string(),
        });
        self
    }
    /// Adds a deletion of the whole row.
    pub fn delete_row(mut self) -> Self {
        self.mutations.push(Mutation::DeleteRow);
        self
    }
    /// Adds `input` to the aggregate cell at timestamp `ts`.
    pub fn add_to_cell(
        mut self,
        family: &str,
        qualifier: impl Into<Vec<u8>>,
        ts: Timestamp,
        input: i64,
    ) -> Self {
        self.mutations.push(Mutation::AddToCell {
            family: family.to_string(),
            qualifier: qualifier.into(),
            timestamp: ts,
            input,
        });
        self
    }
}

/// What a committed write wrote, so that its caller need not read it
/// back: the timestamp the server gave its cells that name none (for
/// several rows, the newest), and the bytes of the values it set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Written {
    /// The timestamp of the cells that named none.
    pub timestamp: Timestamp,
    /// Bytes of the values set.
    pub bytes: u64,
}

/// A read of one row that, finding it empty, says how far the emptiness
/// goes ([`crate::Bigtable::peek_row`]): a lookup of a name that does not
/// exist yet (a new row) then learns that the rows after it up to the next
/// one do not exist either.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RowPeek {
    /// The row's cells that the read selected (at least one).
    Cells(Vec<Cell>),
    /// No row from the one read up to `until` (exclusive; None: the
    /// table's end) has a cell the read selects.
    Absent {
        /// The next row with such a cell, or the end of the tablet read.
        until: Option<Vec<u8>>,
    },
}

impl RowPeek {
    /// `cells`, the whole answer of a read of `row`: empty, they say
    /// only that `row` itself is absent.
    pub fn of_row(row: &[u8], cells: Vec<Cell>) -> RowPeek {
        if cells.is_empty() {
            // The least key after `row`.
            let mut until = row.to_vec();
            until.push(0);
            RowPeek::Absent { until: Some(until) }
        } else {
            RowPeek::Cells(cells)
        }
    }
}

/// A read of one column of one row: its newest `max_versions` versions
/// (all if None).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnRead<'a> {
    /// The row.
    pub row: &'a [u8],
    /// The column's family.
    pub family: &'a str,
    /// The column's qualifier.
    pub qualifier: &'a [u8],
    /// How many versions at most, newest first (all if None).
    pub max_versions: Option<u32>,
}

/// Write options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// fsync the commit log before returning (survives power loss); otherwise
    /// the record is written to the OS before returning (survives kill -9).
    pub sync: bool,
}

/// What a check-and-mutate compares against: the newest visible version of one column.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Condition {
    /// The family of the column tested.
    pub family: String,
    /// The column tested.
    pub qualifier: Vec<u8>,
    /// What its newest visible value must satisfy.
    pub predicate: Predicate,
}

/// A test of a cell's newest value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Predicate {
    /// The column has a visible version.
    Exists,
    /// The newest value equals these bytes.
    Equals(Vec<u8>),
}

/// Which rows a scan covers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowRange {
    /// Where the range starts.
    pub start: Bound<Vec<u8>>,
    /// Where the range ends.
    pub end: Bound<Vec<u8>>,
}

impl RowRange {
    /// Every row.
    pub fn all() -> Self {
        RowRange {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }
    /// Rows whose key starts with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        // The first key after every key with this prefix: strip trailing 0xFF and increment.
        let mut end = prefix.to_vec();
        while end.last() == Some(&0xFF) {
            end.pop();
        }
        let end = match end.last_mut() {
            Some(b) => {
                *b += 1;
                Bound::Excluded(end)
            }
            None => Bound::Unbounded,
        };
        RowRange {
            start: Bound::Included(prefix.to_vec()),
            end,
        }
    }
    /// `[start, end)`.
    pub fn between(start: &[u8], end: &[u8]) -> Self {
        RowRange {
            start: Bound::Included(start.to_vec()),
            end: Bound::Excluded(end.to_vec()),
        }
    }
    /// Whether `row` lies in the range.
    pub fn contains(&self, row: &[u8]) -> bool {
        let after_start = match &self.start {
            Bound::Included(s) => row >= s.as_slice(),
            Bound::Excluded(s) => row > s.as_slice(),
            Bound::Unbounded => true,
        };
        let before_end = match &self.end {
            Bound::Included(e) => row <= e.as_slice(),
            Bound::Excluded(e) => row < e.as_slice(),
            Bound::Unbounded => true,
        };
        after_start && before_end
    }
}

impl Default for RowRange {
    fn default() -> Self {
        RowRange::all()
    }
}
