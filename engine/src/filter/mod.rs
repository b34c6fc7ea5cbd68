//! Row filters with Cloud Bigtable's `RowFilter` semantics, evaluated inside
//! the tablet server.
//!
//! A filter sees one row at a time: the row's visible cells (after deletes,
//! the family's GC rule and the scan's own selections) in order — family,
//! qualifier, newest timestamp first — and outputs a subsequence of them,
//! possibly transformed (value stripped, labels added) or, through
//! [`RowFilter::Interleave`], duplicated. The variants map one to one onto
//! the fields of `google.bigtable.v2.RowFilter`, so a future gRPC
//! `ReadRows` converts without loss.
//!
//! - `eval.rs`: the row evaluator (compiled regexes, chains, interleaves,
//!   conditions, sinks, labels).
//! - `plan.rs`: what a scan can decide from keys alone before copying a
//!   value (the key-only prefix of a top-level chain).
//! - `re2.rs`: RE2 byte patterns in the `regex` crate's syntax.
//! - `limits.rs`: what one filter may cost (cells, copied bytes, regex size).
//!
//! Regexes follow RE2's rules as Cloud Bigtable applies them: byte regexes
//! (Unicode off; raw bytes that are not UTF-8 allowed, `\C` any byte) that
//! must match the whole row key, family, qualifier or value; `.` does not
//! match `\n` unless the pattern sets `(?s)`.

mod eval;
mod limits;
mod plan;
mod re2;
pub(crate) use re2::one_line_error;

pub use eval::{Compiled, Labeled};
pub use limits::{limit_hits, limits, set_limits, FilterLimits};
pub use plan::Plan;

use crate::data::TimeRange;
use crate::error::{Error, Result};
use std::ops::Bound;

/// Deepest nesting a filter may have (parsers and evaluation recurse).
pub const MAX_DEPTH: usize = 32;
/// Most nodes a filter may have.
pub const MAX_NODES: usize = 1024;

/// A filter over a row's cells (`google.bigtable.v2.RowFilter`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum RowFilter {
    /// Each filter in turn reads the previous one's output (`chain`).
    Chain(Vec<RowFilter>),
    /// Each filter reads the whole input; their outputs are merged in cell
    /// order, duplicates kept (`interleave`).
    Interleave(Vec<RowFilter>),
    /// If `predicate` outputs any cell for the row, the row goes through
    /// `true_filter`, else through `false_filter`; a missing branch outputs
    /// nothing (`condition`).
    Condition {
        /// Decides, per row, which branch it goes through.
        predicate: Box<RowFilter>,
        /// Applied to rows where the predicate outputs a cell.
        true_filter: Option<Box<RowFilter>>,
        /// Applied to the other rows.
        false_filter: Option<Box<RowFilter>>,
    },
    /// Outputs its input straight to the result, bypassing the filters
    /// around it; outputs nothing to its parent (`sink`).
    Sink,
    /// Every cell (`pass_all_filter`).
    PassAll,
    /// No cell (`block_all_filter`).
    BlockAll,
    /// Rows whose whole key matches (`row_key_regex_filter`).
    RowKeyRegex(Vec<u8>),
    /// Each row with this probability (`row_sample_filter`), 0 <= p <= 1.
    RowSample(f64),
    /// Cells whose family name matches (`family_name_regex_filter`).
    FamilyNameRegex(String),
    /// Cells whose qualifier matches (`column_qualifier_regex_filter`).
    ColumnQualifierRegex(Vec<u8>),
    /// Cells of `family` whose qualifier lies in the range (`column_range_filter`).
    ColumnRange {
        /// The family whose qualifiers are compared.
        family: String,
        /// Where the qualifier range starts.
        start: Bound<Vec<u8>>,
        /// Where the qualifier range ends.
        end: Bound<Vec<u8>>,
    },
    /// Cells with a timestamp in `[start, end)` (`timestamp_range_filter`).
    TimestampRange(TimeRange),
    /// Cells whose value matches (`value_regex_filter`).
    ValueRegex(Vec<u8>),
    /// Cells whose value lies in the range (`value_range_filter`).
    ValueRange {
        /// Where the value range starts.
        start: Bound<Vec<u8>>,
        /// Where the value range ends.
        end: Bound<Vec<u8>>,
    },
    /// Skips the row's first N cells (`cells_per_row_offset_filter`).
    CellsPerRowOffset(u32),
    /// The row's first N cells (`cells_per_row_limit_filter`).
    CellsPerRowLimit(u32),
    /// The first N cells of each column, i.e. its newest N versions
    /// (`cells_per_column_limit_filter`).
    CellsPerColumnLimit(u32),
    /// Replaces each value by the empty string (`strip_value_transformer`).
    StripValue,
    /// Adds a label to each cell (`apply_label_transformer`).
    ApplyLabel(String),
}

// Validation rejects NaN probabilities, so equality is reflexive.
impl Eq for RowFilter {}

/// Labels are at most this long (Cloud Bigtable's limit is 15 characters;
/// we allow more but keep them short).
pub const MAX_LABEL: usize = 64;

impl RowFilter {
    /// Checks the filter's shape and compiles it; a bad regex or parameter is
    /// an error here, before any data is read.
    pub fn compile(&self) -> Result<Compiled> {
        self.validate()?;
        Compiled::new(self)
    }

    /// Checks depth, size, probabilities, labels and where sinks may stand
    /// (not inside a condition, as in Cloud Bigtable).
    pub fn validate(&self) -> Result<()> {
        let mut nodes = 0;
        self.check(0, false, &mut nodes)
    }

    fn check(&self, depth: usize, in_condition: bool, nodes: &mut usize) -> Result<()> {
        *nodes += 1;
        if depth >= MAX_DEPTH {
            return Err(bad(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        if *nodes > MAX_NODES {
            return Err(bad(format!("more than {MAX_NODES} filters")));
        }
        match self {
            RowFilter::Chain(v) | RowFilter::Interleave(v) => {
                for f in v {
                    f.check(depth + 1, in_condition, nodes)?;
                }
            }
            RowFilter::Condition {
                predicate,
                true_filter,
                false_filter,
            } => {
                predicate.check(depth + 1, true, nodes)?;
                for f in [true_filter, false_filter].into_iter().flatten() {
                    f.check(depth + 1, true, nodes)?;
                }
            }
            RowFilter::Sink if in_condition => {
                return Err(bad("sink cannot be used inside a condition"));
            }
            RowFilter::RowSample(p) if !(0.0..=1.0).contains(p) => {
                return Err(bad(format!(
                    "row sample probability {p} is not between 0 and 1"
                )));
            }
            RowFilter::ApplyLabel(l) => {
                if l.is_empty() || l.len() > MAX_LABEL {
                    return Err(bad(format!("label must be 1..={MAX_LABEL} bytes")));
                }
                if !l
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    return Err(bad(format!(
                        "label {l:?} may hold only letters, digits, - and _"
                    )));
                }
            }
            RowFilter::ColumnRange { family, .. } if family.is_empty() => {
                return Err(bad("column range needs a family"));
            }
            RowFilter::TimestampRange(r) if r.start > r.end => {
                return Err(bad(format!(
                    "timestamp range [{}, {}) ends before it starts",
                    r.start, r.end
                )));
            }
            _ => {}
        }
        Ok(())
    }

    /// A chain of `filters` (a single filter stays itself).
    pub fn chain(mut filters: Vec<RowFilter>) -> RowFilter {
        if filters.len() == 1 {
            if let Some(f) = filters.pop() {
                return f;
            }
        }
        RowFilter::Chain(filters)
    }
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadFilter(reason.into())
}

/// Whether `v` lies between the bounds.
pub(crate) fn in_range(v: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after = match start {
        Bound::Included(s) => v >= s.as_slice(),
        Bound::Excluded(s) => v > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before = match end {
        Bound::Included(e) => v <= e.as_slice(),
        Bound::Excluded(e) => v < e.as_slice(),
        Bound::Unbounded => true,
    };
    after && before
}
