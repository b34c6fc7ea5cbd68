//! Evaluating a compiled filter over one row's cells.
//!
//! Cells travel through the tree as indices into the row's cells (plus
//! whether the value was stripped and the labels added), so chains and
//! interleaves never copy values; the output is materialised once.
//!
//! Every cell an interleave outputs and every label added is charged to
//! the row's budget, [`FilterLimits::max_cells`]; the values the output copies
//! are charged to [`FilterLimits::max_bytes`]. Over either, the row fails
//! with [`Error::FilterTooLarge`] rather than growing without bound
//! (`chain(interleave(all,all),…)` doubles every cell per level).

use super::limits::{self, FilterLimits, MAX_ONE_REGEX};
use super::{in_range, RowFilter};
use crate::data::{Cell, TimeRange};
use crate::error::{Error, Result};
use crate::value::Value;
use regex::bytes::{Regex, RegexBuilder};
use std::ops::Bound;

/// A cell of a filtered read and the labels `apply_label` gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labeled {
    /// The cell.
    pub cell: Cell,
    /// Labels given to it, in the order given.
    pub labels: Vec<String>,
}

/// A filter ready to run: regexes compiled, limits fixed.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub(crate) node: Node,
    pub(crate) limits: FilterLimits,
}

#[derive(Debug, Clone)]
pub(crate) enum Node {
    Chain(Vec<Node>),
    Interleave(Vec<Node>),
    Condition {
        predicate: Box<Node>,
        true_filter: Option<Box<Node>>,
        false_filter: Option<Box<Node>>,
    },
    Sink,
    PassAll,
    BlockAll,
    RowKey(Regex),
    Sample(f64),
    Family(Regex),
    Qualifier(Regex),
    ColumnRange {
        family: String,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    Time(TimeRange),
    Value(Regex),
    ValueRange {
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
    Offset(u32),
    RowLimit(u32),
    ColumnLimit(u32),
    Strip,
    Label(String),
}

/// Compiles a filter regex: RE2 over bytes (Unicode off, raw bytes and
/// `\C` allowed, see `re2.rs`), anchored at both ends.
#[cfg(test)]
pub(crate) fn whole_match_regex(what: &str, pattern: &[u8]) -> Result<Regex> {
    bounded_regex(what, pattern, MAX_ONE_REGEX)
}

/// [`whole_match_regex`] with its program and its lazy DFA's cache each
/// held to `size` bytes.
fn bounded_regex(what: &str, pattern: &[u8], size: usize) -> Result<Regex> {
    let p = super::re2::to_regex_syntax(pattern);
    let build = |s: &str| {
        RegexBuilder::new(s)
            .unicode(false)
            .size_limit(size)
            .dfa_size_limit(size)
            .build()
            .map_err(|e| Error::BadRegex {
                pattern: String::from_utf8_lossy(pattern).into_owned(),
                reason: format!("{what} regex: {}", super::re2::one_line_error(&e, s)),
            })
    };
    // The bare pattern first: it proves the parentheses balance, so the
    // anchoring group cannot be escaped (e.g. by `a)|(b`).
    build(&p)?;
    build(&format!(r"\A(?:{p})\z"))
}

/// How many regexes a filter holds.
fn regexes(f: &RowFilter) -> usize {
    match f {
        RowFilter::Chain(v) | RowFilter::Interleave(v) => v.iter().map(regexes).sum(),
        RowFilter::Condition {
            predicate,
            true_filter,
            false_filter,
        } => {
            regexes(predicate)
                + [true_filter, false_filter]
                    .into_iter()
                    .flatten()
                    .map(|f| regexes(f))
                    .sum::<usize>()
        }
        RowFilter::RowKeyRegex(_)
        | RowFilter::FamilyNameRegex(_)
        | RowFilter::ColumnQualifierRegex(_)
        | RowFilter::ValueRegex(_) => 1,
        _ => 0,
    }
}

impl Node {
    /// Compiles `f`, its regexes sharing `regex_bytes` equally.
    pub(crate) fn compile(f: &RowFilter, regex_bytes: usize) -> Result<Node> {
        let each = (regex_bytes / regexes(f).max(1)).min(MAX_ONE_REGEX);
        Node::compile_with(f, each)
    }

    fn compile_with(f: &RowFilter, each: usize) -> Result<Node> {
        let whole_match_regex = |what: &str, p: &[u8]| bounded_regex(what, p, each);
        let all = |v: &[RowFilter]| {
            v.iter()
                .map(|f| Node::compile_with(f, each))
                .collect::<Result<Vec<_>>>()
        };
        let opt = |f: &Option<Box<RowFilter>>| -> Result<Option<Box<Node>>> {
            f.as_deref()
                .map(|f| Node::compile_with(f, each).map(Box::new))
                .transpose()
        };
        Ok(match f {
            RowFilter::Chain(v) => Node::Chain(all(v)?),
            RowFilter::Interleave(v) => Node::Interleave(all(v)?),
            RowFilter::Condition {
                predicate,
                true_filter,
                false_filter,
            } => Node::Condition {
                predicate: Box::new(Node::compile_with(predicate, each)?),
                true_filter: opt(true_filter)?,
                false_filter: opt(false_filter)?,
            },
            RowFilter::Sink => Node::Sink,
            RowFilter::PassAll => Node::PassAll,
            RowFilter::BlockAll => Node::BlockAll,
            RowFilter::RowKeyRegex(p) => Node::RowKey(whole_match_regex("row key", p)?),
            RowFilter::RowSample(p) => Node::Sample(*p),
            RowFilter::FamilyNameRegex(p) => {
                Node::Family(whole_match_regex("family", p.as_bytes())?)
            }
            RowFilter::ColumnQualifierRegex(p) => {
                Node::Qualifier(whole_match_regex("qualifier", p)?)
            }
            RowFilter::ColumnRange { family, start, end } => Node::ColumnRange {
                family: family.clone(),
                start: start.clone(),
                end: end.clone(),
            },
            RowFilter::TimestampRange(r) => Node::Time(*r),
            RowFilter::ValueRegex(p) => Node::Value(whole_match_regex("value", p)?),
            RowFilter::ValueRange { start, end } => Node::ValueRange {
                start: start.clone(),
                end: end.clone(),
            },
            RowFilter::CellsPerRowOffset(n) => Node::Offset(*n),
            RowFilter::CellsPerRowLimit(n) => Node::RowLimit(*n),
            RowFilter::CellsPerColumnLimit(n) => Node::ColumnLimit(*n),
            RowFilter::StripValue => Node::Strip,
            RowFilter::ApplyLabel(l) => Node::Label(l.clone()),
        })
    }

    /// For a filter decided by the row key alone: whether the row passes.
    /// `None` if the filter is not such a filter. Draws a sample each call.
    pub(crate) fn row_test(&self, row: &[u8]) -> Option<bool> {
        match self {
            Node::RowKey(re) => Some(re.is_match(row)),
            Node::Sample(p) => Some(sample(*p)),
            _ => None,
        }
    }

    /// For a filter that keeps or drops each cell by its column and
    /// timestamp alone: whether the cell passes. `None` otherwise.
    pub(crate) fn cell_test(&self, family: &str, qualifier: &[u8], ts: u64) -> Option<bool> {
        match self {
            Node::PassAll => Some(true),
            Node::BlockAll => Some(false),
            Node::Family(re) => Some(re.is_match(family.as_bytes())),
            Node::Qualifier(re) => Some(re.is_match(qualifier)),
            Node::ColumnRange {
                family: f,
                start,
                end,
            } => Some(f == family && in_range(qualifier, start, end)),
            Node::Time(r) => Some(r.contains(ts)),
            _ => None,
        }
    }
}

fn sample(p: f64) -> bool {
    p >= 1.0 || (p > 0.0 && rand::random::<f64>() < p)
}

/// A cell on its way through the tree.
#[derive(Debug, Clone)]
struct Out {
    idx: usize,
    strip: bool,
    labels: Vec<String>,
}

struct Row<'a> {
    key: &'a [u8],
    cells: &'a [Cell],
    /// What sinks sent straight to the result.
    sunk: Vec<Out>,
    /// Copies of cells the row's evaluation may still make.
    budget: usize,
    limit: usize,
}

impl Row<'_> {
    /// Charges `n` copies of cells to the row's budget.
    fn charge(&mut self, n: usize) -> Result<()> {
        match self.budget.checked_sub(n) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(too_large(format!(
                "its evaluation makes more than {} copies of cells in one row (filter_max_cells)",
                self.limit
            ))),
        }
    }
}

/// A limit hit: counted, logged (without the row's key) and refused.
fn too_large(why: String) -> Error {
    limits::note_hit();
    log::warn!("row filter refused: {why}");
    Error::FilterTooLarge(why)
}

impl Compiled {
    pub(crate) fn new(f: &RowFilter) -> Result<Compiled> {
        Compiled::with_limits(f, limits::limits())
    }

    /// Compiles `f` under `limits` rather than the process's.
    pub fn with_limits(f: &RowFilter, limits: FilterLimits) -> Result<Compiled> {
        Ok(Compiled {
            node: Node::compile(f, limits.regex_bytes)?,
            limits,
        })
    }

    /// The filter's output for one row whose cells are in read order
    /// (family, qualifier, newest first), or [`Error::FilterTooLarge`] if
    /// its evaluation goes over the limits (never a silently short row).
    pub fn try_apply(&self, row: &[u8], cells: Vec<Cell>) -> Result<Vec<Labeled>> {
        let input: Vec<Out> = (0..cells.len())
            .map(|idx| Out {
                idx,
                strip: false,
                labels: Vec::new(),
            })
            .collect();
        let mut r = Row {
            key: row,
            cells: &cells,
            sunk: Vec::new(),
            budget: self.limits.max_cells,
            limit: self.limits.max_cells,
        };
        let mut out = eval(&self.node, &mut r, input)?;
        // Sinks and the tree's own output each pass the row once for free;
        // together they may not pass more than `max_cells` copies beyond it.
        let copies = (out.len() + r.sunk.len()).saturating_sub(cells.len());
        if copies > self.limits.max_cells {
            return Err(too_large(format!(
                "its output holds {copies} copies of cells beyond the row's own; the limit is {} (filter_max_cells)",
                self.limits.max_cells
            )));
        }
        if !r.sunk.is_empty() {
            out.append(&mut r.sunk);
            out.sort_by_key(|o| o.idx);
        }
        materialise(cells, out, self.limits.max_bytes)
    }

    /// Whether the filter outputs any cell for the row (a condition's test,
    /// and check-and-mutate's predicate).
    pub fn matches(&self, row: &[u8], cells: Vec<Cell>) -> Result<bool> {
        Ok(!self.try_apply(row, cells)?.is_empty())
    }
}

/// Turns indices back into cells, moving each value out on its last use;
/// refused if the copies would take more than `max_bytes`.
fn materialise(cells: Vec<Cell>, out: Vec<Out>, max_bytes: u64) -> Result<Vec<Labeled>> {
    let mut last_use = vec![usize::MAX; cells.len()];
    for (i, o) in out.iter().enumerate() {
        last_use[o.idx] = i;
    }
    let copied: u64 = out
        .iter()
        .enumerate()
        .filter(|(i, o)| !o.strip && last_use[o.idx] != *i)
        .map(|(_, o)| cells[o.idx].value.len() as u64)
        .sum();
    if copied > max_bytes {
        return Err(too_large(format!(
            "its output copies {copied} bytes of values in one row; the limit is {max_bytes} (filter_max_bytes)"
        )));
    }
    let mut cells: Vec<Option<Cell>> = cells.into_iter().map(Some).collect();
    let mut result = Vec::with_capacity(out.len());
    for (i, o) in out.into_iter().enumerate() {
        let cell = if last_use[o.idx] == i {
            cells[o.idx].take()
        } else if o.strip {
            cells[o.idx].as_ref().map(strip_clone)
        } else {
            cells[o.idx].clone()
        };
        if let Some(mut cell) = cell {
            if o.strip {
                cell.value = Value::new();
            }
            result.push(Labeled {
                cell,
                labels: o.labels,
            });
        }
    }
    Ok(result)
}

/// A copy of a cell without copying its value.
fn strip_clone(c: &Cell) -> Cell {
    Cell {
        row: c.row.clone(),
        family: c.family.clone(),
        qualifier: c.qualifier.clone(),
        timestamp: c.timestamp,
        value: Value::new(),
    }
}

fn eval(node: &Node, r: &mut Row<'_>, input: Vec<Out>) -> Result<Vec<Out>> {
    if input.is_empty() {
        return Ok(input);
    }
    let keep = |input: Vec<Out>, f: &dyn Fn(&Cell) -> bool| -> Vec<Out> {
        input.into_iter().filter(|o| f(&r.cells[o.idx])).collect()
    };
    Ok(match node {
        Node::Chain(v) => {
            let mut cur = input;
            for n in v {
                cur = eval(n, r, cur)?;
            }
            cur
        }
        Node::Interleave(v) => {
            let mut all: Vec<Out> = Vec::new();
            for n in v {
                // What each branch outputs is kept: copies of the input.
                let out = eval(n, r, input.clone())?;
                r.charge(out.len())?;
                all.extend(out);
            }
            // Stable: copies of one cell keep the order of the filters.
            all.sort_by_key(|o| o.idx);
            all
        }
        Node::Condition {
            predicate,
            true_filter,
            false_filter,
        } => {
            let held = !eval(predicate, r, input.clone())?.is_empty();
            let branch = if held { true_filter } else { false_filter };
            match branch {
                Some(n) => eval(n, r, input)?,
                None => Vec::new(),
            }
        }
        Node::Sink => {
            // The row's own cells may reach the output once for free; what
            // sinks send beyond that (from interleaves, or predicates that
            // sink) are copies like an interleave's.
            let free = r.cells.len();
            let before = r.sunk.len().saturating_sub(free);
            r.sunk.extend(input);
            r.charge(r.sunk.len().saturating_sub(free) - before)?;
            Vec::new()
        }
        Node::PassAll => input,
        Node::BlockAll => Vec::new(),
        Node::RowKey(re) => {
            if re.is_match(r.key) {
                input
            } else {
                Vec::new()
            }
        }
        Node::Sample(p) => {
            if sample(*p) {
                input
            } else {
                Vec::new()
            }
        }
        Node::Family(_) | Node::Qualifier(_) | Node::ColumnRange { .. } | Node::Time(_) => {
            keep(input, &|c| {
                node.cell_test(&c.family, &c.qualifier, c.timestamp) == Some(true)
            })
        }
        Node::Value(re) => {
            let cells = r.cells;
            input
                .into_iter()
                .filter(|o| {
                    let v: &[u8] = if o.strip { b"" } else { &cells[o.idx].value };
                    re.is_match(v)
                })
                .collect()
        }
        Node::ValueRange { start, end } => {
            let cells = r.cells;
            input
                .into_iter()
                .filter(|o| {
                    let v: &[u8] = if o.strip { b"" } else { &cells[o.idx].value };
                    in_range(v, start, end)
                })
                .collect()
        }
        Node::Offset(n) => input.into_iter().skip(*n as usize).collect(),
        Node::RowLimit(n) => input.into_iter().take(*n as usize).collect(),
        Node::ColumnLimit(n) => {
            let mut out = Vec::with_capacity(input.len());
            let mut prev: Option<usize> = None;
            let mut count = 0u32;
            for o in input {
                let c = &r.cells[o.idx];
                let same = prev.is_some_and(|p| {
                    let q = &r.cells[p];
                    q.family == c.family && q.qualifier == c.qualifier
                });
                if !same {
                    count = 0;
                }
                prev = Some(o.idx);
                if count < *n {
                    count += 1;
                    out.push(o);
                }
            }
            out
        }
        Node::Strip => input
            .into_iter()
            .map(|mut o| {
                o.strip = true;
                o
            })
            .collect(),
        Node::Label(l) => {
            r.charge(input.len())?;
            input
                .into_iter()
                .map(|mut o| {
                    o.labels.push(l.clone());
                    o
                })
                .collect()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_match_whole_and_dot_skips_newline() {
        let re = whole_match_regex("row key", b"a.").unwrap();
        assert!(re.is_match(b"ab"));
        assert!(!re.is_match(b"a\n"));
        assert!(!re.is_match(b"xab"));
        assert!(!re.is_match(b"abc"));
        let re = whole_match_regex("row key", b"(?s)a.").unwrap();
        assert!(re.is_match(b"a\n"));
        assert!(re.is_match(b"a\xff"));
    }

    #[test]
    fn regexes_take_raw_bytes_and_any_byte() {
        // Raw bytes that are not UTF-8, as clients' literal filters send them.
        let re = whole_match_regex("value", b"\xff\x00\xaa").unwrap();
        assert!(re.is_match(b"\xff\x00\xaa"));
        assert!(!re.is_match(b"\xff\x00\xab"));
        let re = whole_match_regex("value", "☃".as_bytes()).unwrap();
        assert!(re.is_match("☃".as_bytes()));
        // `\C` is any byte, newline too.
        let re = whole_match_regex("row key", br"a\C\C").unwrap();
        assert!(re.is_match(b"a\n\xff"));
        assert!(!re.is_match(b"a\n"));
        assert!(whole_match_regex("value", br"a\").is_err());
    }
}
