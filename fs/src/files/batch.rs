//! `.mutate`: batches written line by line, checked, and committed as
//! one transaction per row on close.

use crate::ctx::Ctx;
use crate::mutate::{format_results, BatchError, Line, Op, Txn};
use crate::node::{CellAddr, Key, Name, Node, View, MUTATE};
use crate::open_files::handles::MutateHandle;
use crate::options::{FsResult, Stats};
use crate::perms::{Caller, R, W};
use engine::schema::TableSchema;
use engine::{Mutation, RowOp, RowTxn};
use fuser::Errno;

/// Parses written batch text; a bad line fails this write.
pub(super) fn feed_batch(cx: &Ctx, m: &mut MutateHandle, data: &[u8]) -> FsResult<()> {
    if let Some((code, _)) = &m.failed {
        return Err(*code);
    }
    let what = format!("{}/{MUTATE}", m.table);
    let lines = match m.parser.feed(data) {
        Ok(l) => l,
        Err(e) => return Err(batch_failed(cx, m, batch_errno(&e), e.to_string(), &what)),
    };
    // An unfinished line waits in memory: it counts as a write buffer.
    if let Err(e) = m.charge.resize(m.parser.partial_len() as u64) {
        let why = if e == Errno::EDQUOT {
            "this user's open files hold too much not yet committed (write_buffer_uid)"
        } else {
            "open files hold too much not yet committed (write_buffer_total)"
        };
        return Err(batch_failed(cx, m, e, why.to_string(), &what));
    }
    check_lines(cx, m, &lines, &what)
}

/// The schema and permission checks of lines as they are written.
fn check_lines(cx: &Ctx, m: &mut MutateHandle, lines: &[Line], what: &str) -> FsResult<()> {
    if lines.is_empty() {
        return Ok(());
    }
    let schema = cx.data.schema(&m.table)?;
    for l in lines {
        if let Err((code, why)) = check_op(cx, &schema, &m.caller, &l.op) {
            return Err(batch_failed(
                cx,
                m,
                code,
                format!("line {}: {why}", l.line),
                what,
            ));
        }
    }
    Ok(())
}

/// Schema and permission checks of one batch line.
pub(super) fn check_op(
    cx: &Ctx,
    schema: &TableSchema,
    caller: &Caller,
    op: &Op,
) -> Result<(), (Errno, String)> {
    let want = if op.reads() { R } else { 0 } | if op.writes() { W } else { 0 };
    let families: Vec<&engine::schema::FamilySchema> = match op.family() {
        Some(f) => vec![schema
            .families
            .get(f)
            .ok_or_else(|| (Errno::ENOENT, format!("no column family {f:?} in table")))?],
        None => schema.families.values().collect(),
    };
    for f in &families {
        // An aggregate family takes `add` (and deletes); a plain one
        // anything but `add`.
        let wrong = match op {
            Op::Set { .. } | Op::Increment { .. } | Op::Append { .. } => f.aggregate.is_some(),
            Op::Add { .. } => f.aggregate.is_none(),
            _ => false,
        };
        if wrong {
            let kind = if f.aggregate.is_some() {
                "an aggregate family: write it with add"
            } else {
                "not an aggregate family: add needs one"
            };
            return Err((Errno::EINVAL, format!("family {} is {kind}", f.name)));
        }
    }
    for f in families {
        if !caller.may(f.owner, f.group, f.mode, want) {
            return Err((
                Errno::EACCES,
                format!("permission denied on family {}", f.name),
            ));
        }
    }
    if op.row().len() > engine::MAX_ROW_KEY {
        return Err((
            Errno::ENAMETOOLONG,
            format!(
                "row key is {} bytes; the limit is {}",
                op.row().len(),
                engine::MAX_ROW_KEY
            ),
        ));
    }
    if let Op::Set { qualifier, .. }
    | Op::Delete { qualifier, .. }
    | Op::DeleteVersions { qualifier, .. }
    | Op::Increment { qualifier, .. }
    | Op::Append { qualifier, .. }
    | Op::Guard { qualifier, .. } = op
    {
        if qualifier.len() > engine::MAX_QUALIFIER {
            return Err((
                Errno::ENAMETOOLONG,
                format!(
                    "qualifier is {} bytes; the limit is {}",
                    qualifier.len(),
                    engine::MAX_QUALIFIER
                ),
            ));
        }
    }
    if let Op::Set { value, .. } | Op::Append { value, .. } = op {
        if value.len() > cx.opts.max_value_size {
            return Err((
                Errno::EFBIG,
                format!(
                    "value is {} bytes; the limit is {}",
                    value.len(),
                    cx.opts.max_value_size
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn batch_failed(
    cx: &Ctx,
    m: &mut MutateHandle,
    code: Errno,
    why: String,
    what: &str,
) -> Errno {
    log::info!("{what}: {why}");
    Stats::add(&cx.data.stats().errors, 1);
    m.results
        .extend_from_slice(format!("error {why}\n").as_bytes());
    m.failed = Some((code, why));
    code
}

/// Validates and applies the written batch: a first pass over its text
/// checks every transaction as the engine will, a second applies them a
/// chunk of rows at a time (memory follows the chunk, not the batch).
pub(super) fn commit_batch(cx: &Ctx, m: &mut MutateHandle) -> FsResult<()> {
    let what = format!("{}/{MUTATE}", m.table);
    let (last, mut batch) = match m.parser.finish() {
        Ok(b) => b,
        Err(e) => return Err(batch_failed(cx, m, batch_errno(&e), e.to_string(), &what)),
    };
    // The last line (without newline) was not checked by write.
    check_lines(cx, m, &last, &what)?;
    if batch.is_empty() {
        return Ok(());
    }
    let schema = cx.data.schema(&m.table)?;
    let max_value = cx.opts.max_value_size;
    let checked = batch.for_each_chunk(CHUNK_ROWS, |txns| {
        for t in &txns {
            engine::mutation::validate_txn(&m.table, &schema, &t.txn, max_value)
                .map_err(|e| Failed::Engine(Some(t.first_line), e))?;
        }
        Ok::<(), Failed>(())
    });
    if let Err(f) = checked {
        let (code, why) = f.describe();
        return Err(batch_failed(cx, m, code, why, &what));
    }
    let (table, keep) = (m.table.clone(), m.keep_results);
    let mut results = Vec::new();
    let mut rows = 0u64;
    let applied = batch.for_each_chunk(CHUNK_ROWS, |txns| {
        let raw: Vec<RowTxn> = txns.iter().map(|t| t.txn.clone()).collect();
        let outcomes = cx
            .data
            .store()
            .apply_txns(&table, &raw, cx.write_options())
            .map_err(|e| {
                let line = match &e {
                    engine::Error::BadBatchEntry { index, .. } => {
                        txns.get(*index).map(|t| t.first_line)
                    }
                    _ => None,
                };
                Failed::Engine(line, e)
            })?;
        rows += raw.len() as u64;
        if keep {
            results.extend_from_slice(&format_results(&txns, &outcomes));
        }
        batch_changed(cx, &table, &txns);
        Ok::<(), Failed>(())
    });
    Stats::add(&cx.data.stats().batch_rows, rows);
    m.results.extend_from_slice(&results);
    if let Err(f) = applied {
        let (code, why) = f.describe();
        return Err(batch_failed(cx, m, code, why, &what));
    }
    Stats::add(&cx.data.stats().batches, 1);
    if batch.ops() >= TRIM_AFTER_OPS {
        crate::memory::give_back();
    }
    Ok(())
}

/// Tells the kernel what a chunk of a batch changed under it.
fn batch_changed(cx: &Ctx, table: &str, txns: &[Txn]) {
    for t in txns {
        let row = &t.txn.row;
        let row_known = cx.kernel.inodes().is_known(&Node::Row {
            table: Name::from(table),
            view: View::Now,
            row: Key::from(row.as_slice()),
        });
        for op in t.txn.ops.iter().chain(&t.txn.otherwise) {
            // A delete writes no data: the row's and family's
            // directories made by mkdir stay (they last while the mount
            // runs, as docs/mount.md says).
            let cell = match op {
                RowOp::Mutate(Mutation::DeleteCells {
                    family, qualifier, ..
                }) => {
                    super::lost_cells::writers_lost_cells(
                        cx,
                        |n| n.is_column_of(table, row, family, qualifier),
                        true,
                    );
                    Some((family, qualifier, false))
                }
                RowOp::Mutate(Mutation::SetCell {
                    family, qualifier, ..
                })
                | RowOp::Mutate(Mutation::AddToCell {
                    family, qualifier, ..
                })
                | RowOp::Increment {
                    family, qualifier, ..
                }
                | RowOp::Append {
                    family, qualifier, ..
                } => Some((family, qualifier, true)),
                RowOp::Mutate(Mutation::DeleteFamily { family }) => {
                    super::lost_cells::writers_lost_cells(
                        cx,
                        |n| super::lost_cells::cell_in(n, table, row, Some(family)),
                        true,
                    );
                    cx.kernel.invalidate_row(table, row, Some(family));
                    None
                }
                RowOp::Mutate(Mutation::DeleteRow) => {
                    super::lost_cells::writers_lost_cells(
                        cx,
                        |n| super::lost_cells::cell_in(n, table, row, None),
                        true,
                    );
                    cx.kernel.invalidate_row(table, row, None);
                    None
                }
            };
            if let Some((f, q, writes)) = cell {
                cx.kernel.invalidate(&Node::Cell(CellAddr::now(
                    Name::from(table),
                    Key::from(row.as_slice()),
                    Name::from(f.as_str()),
                    q.clone(),
                )));
                if writes {
                    cx.data.pending().data_written(table, row, f);
                }
            }
        }
        if row_known {
            cx.kernel.invalidate_row(table, row, None);
        }
    }
    // The kernel keeps listings of directories it lists unopened: rows
    // may have come or gone.
    if !txns.is_empty() {
        cx.kernel.invalidate(&Node::Table(Name::from(table)));
    }
}

/// Rows per chunk of a batch handed to the engine at once.
const CHUNK_ROWS: usize = 4096;

/// After a batch this large, freed memory is handed back to the system.
const TRIM_AFTER_OPS: usize = 10_000;

fn batch_errno(e: &BatchError) -> Errno {
    if e.io {
        Errno::EIO
    } else if e.too_big {
        Errno::EFBIG
    } else {
        Errno::EINVAL
    }
}

/// Why a batch failed at close.
enum Failed {
    Batch(BatchError),
    /// The engine refused or failed a transaction (beginning at that line).
    Engine(Option<usize>, engine::Error),
}

impl From<BatchError> for Failed {
    fn from(e: BatchError) -> Failed {
        Failed::Batch(e)
    }
}

impl Failed {
    fn describe(&self) -> (Errno, String) {
        match self {
            Failed::Batch(e) => (batch_errno(e), e.to_string()),
            Failed::Engine(line, e) => {
                let code = crate::errno::errno(e);
                match line {
                    Some(l) => (code, format!("line {l}: {e}")),
                    None => (code, e.to_string()),
                }
            }
        }
    }
}
