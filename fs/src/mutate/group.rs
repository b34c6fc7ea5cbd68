//! A batch's lines checked and grouped into one transaction per row, with
//! at most one guard a row.

use super::{BatchError, Line, Op};
use engine::{Condition, Guard, Mutation, Predicate, Reach, RowOp, RowTxn, TimeRange, TxnOutcome};
use std::collections::HashMap;

/// Repeated appends (or increments) of one column in a row's transaction
/// become one: `append r f:q A` then `append r f:q B` is `append r f:q AB`
/// when nothing between them touches the column. Applied one by one, N
/// appends of a growing value cost O(N²) bytes in memory, in the log and in
/// the results; folded they cost O(N). The row reads the same afterwards
/// (the versions a transaction writes share its timestamp, so only the
/// last was ever visible); the results show one `value` line for them.
#[derive(Default)]
struct Folds {
    /// Where in the row's ops the last append or increment of each column
    /// is, while nothing after it touched the column.
    last: HashMap<(String, Vec<u8>), usize>,
}

impl Folds {
    fn push(&mut self, ops: &mut Vec<RowOp>, op: RowOp) {
        match op.reach() {
            Reach::Column(family, qualifier) => {
                self.last.remove(&(family.to_string(), qualifier.to_vec()));
            }
            Reach::Family(family) => self.last.retain(|(f, _), _| f != family),
            Reach::Row => self.last.clear(),
            Reach::ReadModifyWrite(family, qualifier) => {
                let key = (family.to_string(), qualifier.to_vec());
                if let Some(prev) = self.last.get(&key).and_then(|&i| ops.get_mut(i)) {
                    if fold_into(prev, &op) {
                        return;
                    }
                }
                self.last.insert(key, ops.len());
            }
        }
        ops.push(op);
    }
}

/// Folds `op` into `prev`, an earlier op of the same column, when both are
/// increments (the deltas add, wrapping as counters do:
/// engine::mutation::increment) or both appends (the bytes join).
fn fold_into(prev: &mut RowOp, op: &RowOp) -> bool {
    match (prev, op) {
        (RowOp::Increment { delta: d, .. }, RowOp::Increment { delta, .. }) => {
            *d = d.wrapping_add(*delta);
            true
        }
        (RowOp::Append { data: d, .. }, RowOp::Append { data, .. }) => {
            d.extend_from_slice(data);
            true
        }
        _ => false,
    }
}

/// One row's transaction and the line that began it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Txn {
    pub first_line: usize,
    pub txn: RowTxn,
    /// The row's mutations run when the guard holds (`if`, or no guard) or
    /// when it does not (`ifnot`: they are the transaction's `otherwise`).
    pub when_held: bool,
}

impl Txn {
    /// The mutations that run when this transaction applies.
    pub fn ops(&self) -> &[RowOp] {
        if self.when_held {
            &self.txn.ops
        } else {
            &self.txn.otherwise
        }
    }

    fn ops_mut(&mut self) -> &mut Vec<RowOp> {
        if self.when_held {
            &mut self.txn.ops
        } else {
            &mut self.txn.otherwise
        }
    }

    /// Whether the mutations ran, given the engine's outcome.
    pub fn applied(&self, o: &TxnOutcome) -> bool {
        o.guard_held == self.when_held
    }
}

/// Groups lines into one transaction per row (see the module comment).
pub fn group(lines: Vec<Line>) -> Result<Vec<Txn>, BatchError> {
    struct Row {
        first_line: usize,
        row: Vec<u8>,
        guard: Option<(usize, Guard, bool)>,
        ops: Vec<RowOp>,
        folds: Folds,
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    for Line { line, op } in lines {
        let i = *index.entry(op.row().to_vec()).or_insert_with(|| {
            rows.push(Row {
                first_line: line,
                row: op.row().to_vec(),
                guard: None,
                ops: Vec::new(),
                folds: Folds::default(),
            });
            rows.len() - 1
        });
        let r = &mut rows[i];
        let row_op = match op {
            Op::Guard {
                family,
                qualifier,
                value,
                expect,
                ..
            } => {
                if let Some((prev, _, _)) = &r.guard {
                    return Err(BatchError::at(
                        line,
                        format!("the row already has a condition (line {prev})"),
                    ));
                }
                let predicate = match value {
                    Some(v) => Predicate::Equals(v),
                    None => Predicate::Exists,
                };
                let condition = Condition {
                    family,
                    qualifier,
                    predicate,
                };
                r.guard = Some((line, condition.into(), expect));
                continue;
            }
            Op::FilterGuard { filter, expect, .. } => {
                if let Some((prev, _, _)) = &r.guard {
                    return Err(BatchError::at(
                        line,
                        format!("the row already has a condition (line {prev})"),
                    ));
                }
                r.guard = Some((line, filter.into(), expect));
                continue;
            }
            Op::DeleteVersions {
                family,
                qualifier,
                range,
                ..
            } => RowOp::Mutate(Mutation::DeleteCells {
                family,
                qualifier,
                range,
            }),
            Op::Set {
                family,
                qualifier,
                value,
                ts,
                ..
            } => RowOp::Mutate(Mutation::SetCell {
                family,
                qualifier,
                timestamp: ts,
                value,
            }),
            Op::Delete {
                family,
                qualifier,
                ts,
                ..
            } => RowOp::Mutate(Mutation::DeleteCells {
                family,
                qualifier,
                range: ts.map(TimeRange::exactly).unwrap_or(TimeRange::ALL),
            }),
            Op::DeleteFamily { family, .. } => RowOp::Mutate(Mutation::DeleteFamily { family }),
            Op::DeleteRow { .. } => RowOp::Mutate(Mutation::DeleteRow),
            Op::Increment {
                family,
                qualifier,
                delta,
                ..
            } => RowOp::Increment {
                family,
                qualifier,
                delta,
            },
            Op::Add {
                family,
                qualifier,
                input,
                ts,
                ..
            } => RowOp::Mutate(Mutation::AddToCell {
                family,
                qualifier,
                timestamp: ts,
                input,
            }),
            Op::Append {
                family,
                qualifier,
                value,
                ..
            } => RowOp::Append {
                family,
                qualifier,
                data: value,
            },
        };
        r.folds.push(&mut r.ops, row_op);
    }
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        if r.ops.is_empty() {
            return Err(BatchError::at(
                r.guard.as_ref().map_or(r.first_line, |g| g.0),
                "the condition guards no mutation".into(),
            ));
        }
        let (guard, when_held) = match r.guard {
            Some((_, c, expect)) => (Some(c), expect),
            None => (None, true),
        };
        let mut t = Txn {
            first_line: r.first_line,
            txn: RowTxn {
                row: r.row,
                guard,
                ops: Vec::new(),
                otherwise: Vec::new(),
            },
            when_held,
        };
        *t.ops_mut() = r.ops;
        out.push(t);
    }
    Ok(out)
}
