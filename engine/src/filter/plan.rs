//! How a scan runs a filter: the leading part of a top-level chain that
//! keeps or drops each cell by its row key, column and timestamp is applied
//! while reading, before a value is copied; only the rest (if any) needs the
//! row's cells gathered and evaluated as a whole.
//!
//! Dropping a cell early is exact only ahead of every filter that looks at
//! other cells (limits, offsets, conditions) or that copies cells
//! (interleave, sink), hence only the chain's leading leaves qualify.

use super::eval::{Compiled, Node};
use super::limits::{limits, FilterLimits};
use super::{Labeled, RowFilter};
use crate::data::Cell;
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::Arc;

/// Plans kept compiled, newest last: a scan's filter is compiled once, not
/// again for each tablet and batch it reads (or each open of its file).
const CACHED: usize = 8;

type Cache = Mutex<Vec<(RowFilter, FilterLimits, Arc<Plan>)>>;

static CACHE: Cache = Mutex::new(Vec::new());

/// A filter split for a scan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Decided once per row by its key (row regex, row sample).
    row_tests: Vec<Node>,
    /// Decided once per column by its family and qualifier.
    column_tests: Vec<Node>,
    /// Decided per cell by its timestamp.
    time_tests: Vec<Node>,
    /// What remains to run on each row's surviving cells (None: nothing).
    rest: Option<Compiled>,
}

impl Plan {
    /// `f`'s plan under the process's limits: compiled now, or the same
    /// filter's plan compiled a moment ago.
    pub fn cached(f: &RowFilter) -> Result<Arc<Plan>> {
        let l = limits();
        {
            let mut c = CACHE.lock();
            if let Some(i) = c.iter().position(|(g, gl, _)| *gl == l && g == f) {
                let hit = c.remove(i);
                let plan = hit.2.clone();
                c.push(hit);
                return Ok(plan);
            }
        }
        let plan = Arc::new(Plan::new(f)?);
        let mut c = CACHE.lock();
        if c.len() >= CACHED {
            c.remove(0);
        }
        c.push((f.clone(), l, plan.clone()));
        Ok(plan)
    }

    /// Validates and compiles `f`.
    pub fn new(f: &RowFilter) -> Result<Plan> {
        f.validate()?;
        let compiled = Compiled::new(f)?;
        let limits = compiled.limits;
        let parts: Vec<Node> = match compiled.node {
            Node::Chain(v) => flatten(v),
            n => vec![n],
        };
        let mut row_tests = Vec::new();
        let mut column_tests = Vec::new();
        let mut time_tests = Vec::new();
        let mut rest = Vec::new();
        for n in parts {
            if !rest.is_empty() {
                rest.push(n);
            } else if n.row_test(b"").is_some() {
                row_tests.push(n);
            } else if matches!(n, Node::Time(_)) {
                time_tests.push(n);
            } else if n.cell_test("", b"", 0).is_some() {
                column_tests.push(n);
            } else {
                rest.push(n);
            }
        }
        Ok(Plan {
            row_tests,
            column_tests,
            time_tests,
            rest: (!rest.is_empty()).then(|| Compiled {
                node: Node::Chain(rest),
                limits,
            }),
        })
    }

    /// Whether a row with this key can output anything. Row samples are
    /// drawn here: call once per row.
    pub fn row_passes(&self, row: &[u8]) -> bool {
        self.row_tests.iter().all(|n| n.row_test(row) == Some(true))
    }

    /// Whether [`Plan::column_passes`] tests anything.
    pub fn tests_columns(&self) -> bool {
        !self.column_tests.is_empty()
    }

    /// Whether cells of this column can output anything; a column that
    /// cannot is skipped without reading it.
    pub fn column_passes(&self, family: &str, qualifier: &[u8]) -> bool {
        self.column_tests
            .iter()
            .all(|n| n.cell_test(family, qualifier, 0) == Some(true))
    }

    /// Whether a cell with this timestamp (of a column that passes) can
    /// output anything; one that cannot is dropped without copying its value.
    pub fn time_passes(&self, ts: u64) -> bool {
        self.time_tests
            .iter()
            .all(|n| n.cell_test("", b"", ts) == Some(true))
    }

    /// Whether rows must be gathered whole and passed to [`Plan::finish_row`].
    pub fn needs_rows(&self) -> bool {
        self.rest.is_some()
    }

    /// Whether what remains after the tests is the first cell of each row
    /// with its value stripped (`CellsPerRowLimit(1)` and `StripValue`, in
    /// either order): a listing of row keys, which a reader can answer by
    /// taking each row's first cell and skipping the rest of the row, where
    /// its first cell in key order is its first in the filter's order.
    pub fn first_cell_stripped(&self) -> bool {
        match &self.rest {
            Some(Compiled {
                node: Node::Chain(v),
                ..
            }) => matches!(
                v.as_slice(),
                [Node::RowLimit(1), Node::Strip] | [Node::Strip, Node::RowLimit(1)]
            ),
            _ => false,
        }
    }

    /// The output for one row's cells that passed the tests above;
    /// [`crate::Error::FilterTooLarge`] if it is over the filter's limits.
    pub fn finish_row(&self, row: &[u8], cells: Vec<Cell>) -> Result<Vec<Labeled>> {
        match &self.rest {
            Some(c) => c.try_apply(row, cells),
            None => Ok(cells
                .into_iter()
                .map(|cell| Labeled {
                    cell,
                    labels: Vec::new(),
                })
                .collect()),
        }
    }
}

/// Nested chains are one chain.
fn flatten(v: Vec<Node>) -> Vec<Node> {
    let mut out = Vec::with_capacity(v.len());
    for n in v {
        match n {
            Node::Chain(inner) => out.extend(flatten(inner)),
            n => out.push(n),
        }
    }
    out
}
