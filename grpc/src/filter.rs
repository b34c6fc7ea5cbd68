//! `RowFilter` evaluated over the cells of one row, with the API's semantics:
//! a filter maps a row's cells (ordered by family, qualifier, newest first)
//! to the cells that pass; chains compose, interleaves merge their outputs in
//! cell order (duplicates kept), conditions pick a branch by whether the
//! predicate yields any cell, and `sink` sends cells straight to the output.

use crate::v2;
use regex::bytes::Regex as BytesRegex;
use std::cmp::Ordering;
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use tonic::Status;
use v2::row_filter::Filter as F;

/// A cell as filters see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FCell {
    pub family: String,
    pub qualifier: Vec<u8>,
    pub timestamp: u64,
    pub value: Vec<u8>,
    pub labels: Vec<String>,
}

impl FCell {
    /// Row order of cells: family, qualifier, newest first.
    pub fn order(a: &FCell, b: &FCell) -> Ordering {
        a.family
            .cmp(&b.family)
            .then_with(|| a.qualifier.cmp(&b.qualifier))
            .then_with(|| b.timestamp.cmp(&a.timestamp))
    }
}

impl From<engine::Cell> for FCell {
    fn from(c: engine::Cell) -> FCell {
        FCell {
            family: c.family,
            qualifier: c.qualifier,
            timestamp: c.timestamp,
            value: c.value,
            labels: Vec::new(),
        }
    }
}

/// A compiled filter (regexes compiled once per request).
#[derive(Debug)]
pub enum Filter {
    PassAll,
    BlockAll,
    Sink,
    Chain(Vec<Filter>),
    Interleave(Vec<Filter>),
    Condition {
        predicate: Box<Filter>,
        on_true: Option<Box<Filter>>,
        on_false: Option<Box<Filter>>,
    },
    RowKey(BytesRegex),
    RowSample(f64),
    Family(regex::Regex),
    Qualifier(BytesRegex),
    ColumnRange {
        family: String,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    Timestamps {
        start: u64,
        end: u64,
    },
    Value(BytesRegex),
    ValueRange {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    CellsPerRowOffset(usize),
    CellsPerRowLimit(usize),
    CellsPerColumnLimit(usize),
    StripValue,
    Label(String),
}

fn bad(what: impl Into<String>) -> Status {
    Status::invalid_argument(what.into())
}

/// RE2-style full match over bytes: `.` matches any byte.
fn bytes_regex(what: &str, pattern: &[u8]) -> Result<BytesRegex, Status> {
    let text = std::str::from_utf8(pattern)
        .map_err(|_| bad(format!("{what}: the regex is not valid UTF-8")))?;
    BytesRegex::new(&format!("(?s-u)^(?:{text})$"))
        .map_err(|e| bad(format!("{what}: invalid regex {text:?}: {e}")))
}

fn count(what: &str, n: i32) -> Result<usize, Status> {
    usize::try_from(n).map_err(|_| bad(format!("{what} must not be negative")))
}

fn flag(what: &str, on: bool) -> Result<(), Status> {
    if on {
        Ok(())
    } else {
        Err(bad(format!("{what} must be true")))
    }
}

fn in_range(v: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
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

impl Filter {
    /// Compiles a request's filter; no filter passes everything.
    pub fn compile(f: Option<&v2::RowFilter>) -> Result<Filter, Status> {
        match f {
            None => Ok(Filter::PassAll),
            Some(f) => Filter::compile_one(f),
        }
    }

    fn compile_opt(f: Option<&v2::RowFilter>) -> Result<Option<Box<Filter>>, Status> {
        f.map(|f| Filter::compile_one(f).map(Box::new)).transpose()
    }

    fn compile_one(f: &v2::RowFilter) -> Result<Filter, Status> {
        use v2::column_range::{EndQualifier as EQ, StartQualifier as SQ};
        use v2::value_range::{EndValue as EV, StartValue as SV};
        let Some(filter) = &f.filter else {
            // An empty filter message passes everything, as an absent one does.
            return Ok(Filter::PassAll);
        };
        Ok(match filter {
            F::Chain(c) => Filter::Chain(
                c.filters
                    .iter()
                    .map(Filter::compile_one)
                    .collect::<Result<_, _>>()?,
            ),
            F::Interleave(i) => Filter::Interleave(
                i.filters
                    .iter()
                    .map(Filter::compile_one)
                    .collect::<Result<_, _>>()?,
            ),
            F::Condition(c) => Filter::Condition {
                predicate: Box::new(Filter::compile(c.predicate_filter.as_deref())?),
                on_true: Filter::compile_opt(c.true_filter.as_deref())?,
                on_false: Filter::compile_opt(c.false_filter.as_deref())?,
            },
            F::Sink(on) => {
                flag("sink", *on)?;
                Filter::Sink
            }
            F::PassAllFilter(on) => {
                flag("pass_all_filter", *on)?;
                Filter::PassAll
            }
            F::BlockAllFilter(on) => {
                flag("block_all_filter", *on)?;
                Filter::BlockAll
            }
            F::RowKeyRegexFilter(r) => Filter::RowKey(bytes_regex("row_key_regex_filter", r)?),
            F::RowSampleFilter(p) => {
                if !(*p > 0.0 && *p < 1.0) {
                    return Err(bad("row_sample_filter must be in (0, 1)"));
                }
                Filter::RowSample(*p)
            }
            F::FamilyNameRegexFilter(r) => Filter::Family(
                regex::Regex::new(&format!("^(?:{r})$"))
                    .map_err(|e| bad(format!("family_name_regex_filter {r:?}: {e}")))?,
            ),
            F::ColumnQualifierRegexFilter(r) => {
                Filter::Qualifier(bytes_regex("column_qualifier_regex_filter", r)?)
            }
            F::ColumnRangeFilter(r) => Filter::ColumnRange {
                family: r.family_name.clone(),
                start: match &r.start_qualifier {
                    Some(SQ::StartQualifierClosed(q)) => Bound::Included(q.clone()),
                    Some(SQ::StartQualifierOpen(q)) => Bound::Excluded(q.clone()),
                    None => Bound::Unbounded,
                },
                end: match &r.end_qualifier {
                    Some(EQ::EndQualifierClosed(q)) => Bound::Included(q.clone()),
                    Some(EQ::EndQualifierOpen(q)) => Bound::Excluded(q.clone()),
                    None => Bound::Unbounded,
                },
            },
            F::TimestampRangeFilter(r) => {
                let t = crate::data::mutate::time_range(Some(r))?;
                Filter::Timestamps {
                    start: t.start,
                    end: t.end,
                }
            }
            F::ValueRegexFilter(r) => Filter::Value(bytes_regex("value_regex_filter", r)?),
            F::ValueRangeFilter(r) => Filter::ValueRange {
                start: match &r.start_value {
                    Some(SV::StartValueClosed(v)) => Bound::Included(v.clone()),
                    Some(SV::StartValueOpen(v)) => Bound::Excluded(v.clone()),
                    None => Bound::Unbounded,
                },
                end: match &r.end_value {
                    Some(EV::EndValueClosed(v)) => Bound::Included(v.clone()),
                    Some(EV::EndValueOpen(v)) => Bound::Excluded(v.clone()),
                    None => Bound::Unbounded,
                },
            },
            F::CellsPerRowOffsetFilter(n) => {
                Filter::CellsPerRowOffset(count("cells_per_row_offset_filter", *n)?)
            }
            F::CellsPerRowLimitFilter(n) => {
                Filter::CellsPerRowLimit(count("cells_per_row_limit_filter", *n)?)
            }
            F::CellsPerColumnLimitFilter(n) => {
                Filter::CellsPerColumnLimit(count("cells_per_column_limit_filter", *n)?)
            }
            F::StripValueTransformer(on) => {
                flag("strip_value_transformer", *on)?;
                Filter::StripValue
            }
            F::ApplyLabelTransformer(l) => {
                let ok = !l.is_empty()
                    && l.len() <= 15
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                if !ok {
                    return Err(bad(format!(
                        "apply_label_transformer {l:?}: labels are [a-z0-9-]+, at most 15 bytes"
                    )));
                }
                Filter::Label(l.clone())
            }
        })
    }

    /// Whether the filter passes every cell unchanged (no work to do).
    pub fn is_pass_all(&self) -> bool {
        matches!(self, Filter::PassAll)
    }

    /// The cells of row `key` that pass, in row order. `cells` must be in row order.
    pub fn apply(&self, key: &[u8], cells: Vec<FCell>) -> Vec<FCell> {
        let mut sunk = Vec::new();
        let mut out = self.eval(key, cells, &mut sunk);
        if !sunk.is_empty() {
            out.extend(sunk);
            out.sort_by(FCell::order);
        }
        out
    }

    fn eval(&self, key: &[u8], cells: Vec<FCell>, sunk: &mut Vec<FCell>) -> Vec<FCell> {
        let keep = |cells: Vec<FCell>, f: &dyn Fn(&FCell) -> bool| -> Vec<FCell> {
            cells.into_iter().filter(|c| f(c)).collect()
        };
        match self {
            Filter::PassAll => cells,
            Filter::BlockAll => Vec::new(),
            Filter::Sink => {
                sunk.extend(cells);
                Vec::new()
            }
            Filter::Chain(fs) => fs.iter().fold(cells, |cells, f| f.eval(key, cells, sunk)),
            Filter::Interleave(fs) => {
                let mut out = Vec::new();
                for f in fs {
                    out.extend(f.eval(key, cells.clone(), sunk));
                }
                out.sort_by(FCell::order);
                out
            }
            Filter::Condition {
                predicate,
                on_true,
                on_false,
            } => {
                // The predicate's own sinks do not reach the output.
                let matched = !predicate
                    .eval(key, cells.clone(), &mut Vec::new())
                    .is_empty();
                let branch = if matched { on_true } else { on_false };
                match branch {
                    Some(f) => f.eval(key, cells, sunk),
                    None => Vec::new(),
                }
            }
            Filter::RowKey(r) => {
                if r.is_match(key) {
                    cells
                } else {
                    Vec::new()
                }
            }
            Filter::RowSample(p) => {
                let draw = std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish();
                if (draw as f64 / u64::MAX as f64) < *p {
                    cells
                } else {
                    Vec::new()
                }
            }
            Filter::Family(r) => keep(cells, &|c| r.is_match(&c.family)),
            Filter::Qualifier(r) => keep(cells, &|c| r.is_match(&c.qualifier)),
            Filter::ColumnRange { family, start, end } => keep(cells, &|c| {
                &c.family == family && in_range(&c.qualifier, start, end)
            }),
            Filter::Timestamps { start, end } => {
                keep(cells, &|c| c.timestamp >= *start && c.timestamp < *end)
            }
            Filter::Value(r) => keep(cells, &|c| r.is_match(&c.value)),
            Filter::ValueRange { start, end } => keep(cells, &|c| in_range(&c.value, start, end)),
            Filter::CellsPerRowOffset(n) => cells.into_iter().skip(*n).collect(),
            Filter::CellsPerRowLimit(n) => cells.into_iter().take(*n).collect(),
            Filter::CellsPerColumnLimit(n) => {
                let mut out = Vec::with_capacity(cells.len());
                let mut column: Option<(String, Vec<u8>)> = None;
                let mut in_column = 0;
                for c in cells {
                    let same = column
                        .as_ref()
                        .is_some_and(|(f, q)| *f == c.family && *q == c.qualifier);
                    if same {
                        in_column += 1;
                    } else {
                        column = Some((c.family.clone(), c.qualifier.clone()));
                        in_column = 0;
                    }
                    if in_column < *n {
                        out.push(c);
                    }
                }
                out
            }
            Filter::StripValue => cells
                .into_iter()
                .map(|mut c| {
                    c.value.clear();
                    c
                })
                .collect(),
            Filter::Label(l) => cells
                .into_iter()
                .map(|mut c| {
                    c.labels.push(l.clone());
                    c
                })
                .collect(),
        }
    }
}
