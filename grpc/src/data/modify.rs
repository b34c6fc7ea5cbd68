//! The writing RPCs past a single MutateRow: MutateRows (a status per
//! entry), CheckAndMutateRow and ReadModifyWriteRow.

use super::mutate;
use crate::{auth, status, v2};
use engine::access::{Identity, R, W};
use engine::{Bigtable, Error, Mutation, RowFilter, RowMutation, RowOp, RowTxn, WriteOptions};
use std::collections::BTreeMap;
use tonic::{Code, Status};

/// Applies every valid entry that `allowed` lets through (each row
/// atomically) and reports each entry. Each entry is checked once against
/// the schema before the batch goes to the engine, so bad entries cost
/// linear time (the engine names only the first bad entry of a batch).
pub fn mutate_rows(
    bt: &Bigtable,
    table: &str,
    entries: &[v2::mutate_rows_request::Entry],
    allowed: impl Fn(&RowMutation) -> Result<(), Status>,
) -> Result<v2::MutateRowsResponse, Status> {
    let mut schema = bt.schema(table).map_err(status::from_engine)?;
    let max_value = bt.max_value_size();
    let mut results: Vec<Status> = vec![Status::ok(""); entries.len()];
    // (entry index, mutation) of the entries that converted.
    let mut pending: Vec<(usize, RowMutation)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match mutate::row_mutation(&e.row_key, &e.mutations).and_then(|m| allowed(&m).map(|()| m)) {
            Ok(m) => pending.push((i, m)),
            Err(s) => results[i] = s,
        }
    }
    // A daemon that learns the schema from the master may not know a new
    // family yet: read the tables again once, not once per entry.
    let check = |schema: &engine::schema::TableSchema, m: &RowMutation| {
        engine::mutation::validate(schema, m, max_value).map_err(|e| e.in_table(table))
    };
    let unknown_family = pending
        .iter()
        .any(|(_, m)| check(&schema, m).is_err_and(|e| e.is_unknown_family()));
    if unknown_family && bt.refresh_tables().is_ok() {
        schema = bt.schema(table).map_err(status::from_engine)?;
    }
    pending.retain(|(i, m)| match check(&schema, m) {
        Ok(()) => true,
        Err(e) => {
            results[*i] = status::from_engine(e);
            false
        }
    });
    // What remains is valid unless the schema changed meanwhile; then the
    // engine names the first bad entry: take that one out and try again.
    while !pending.is_empty() {
        let batch: Vec<RowMutation> = pending.iter().map(|(_, m)| m.clone()).collect();
        match bt.apply_batch(table, &batch, WriteOptions::default()) {
            Ok(_) => break,
            Err(e) => match e.root() {
                Error::BadBatchEntry { index, .. } if *index < pending.len() => {
                    let (i, _) = pending.remove(*index);
                    results[i] = status::from_engine(e);
                }
                _ => {
                    let s = status::from_engine(e);
                    for (i, _) in pending.drain(..) {
                        results[i] = s.clone();
                    }
                }
            },
        }
    }
    Ok(v2::MutateRowsResponse {
        entries: results
            .iter()
            .enumerate()
            .map(|(i, s)| v2::mutate_rows_response::Entry {
                index: i as i64,
                status: Some(status::to_rpc(s)),
            })
            .collect(),
        rate_limit_info: None,
    })
}

/// Applies `true_mutations` if the predicate outputs a cell of the row (no
/// predicate: if the row has any cell), else `false_mutations`, atomically
/// under the row lock. Returns whether the predicate matched. `who` needs
/// write permission on the table and each family written; the predicate
/// sees only the families `who` may read.
pub fn check_and_mutate(
    bt: &Bigtable,
    table: &str,
    req: &v2::CheckAndMutateRowRequest,
    who: &Identity,
) -> Result<bool, Status> {
    super::rows::check_row_key(&req.row_key)?;
    let schema = bt.schema(table).map_err(status::from_engine)?;
    auth::table(who, table, &schema, W)?;
    let mut predicate =
        crate::filter::from_api(req.predicate_filter.as_ref())?.unwrap_or(RowFilter::PassAll);
    if let Some(readable) = auth::readable(who, &schema) {
        predicate = auth::over(&readable, predicate);
    }
    let convert = |ms: &[v2::Mutation]| -> Result<Vec<Mutation>, Status> {
        ms.iter().map(mutate::one).collect()
    };
    let on_true = convert(&req.true_mutations)?;
    let on_false = convert(&req.false_mutations)?;
    if on_true.is_empty() && on_false.is_empty() {
        return Err(Status::invalid_argument("No mutations provided"));
    }
    mutate::check_mutation_count(on_true.len() + on_false.len())?;
    auth::mutations(who, &schema, &on_true)?;
    auth::mutations(who, &schema, &on_false)?;
    bt.check_and_mutate_filter(
        table,
        &req.row_key,
        &predicate,
        on_true,
        on_false,
        WriteOptions::default(),
    )
    .map_err(status::from_engine)
}

/// Applies the rules atomically and returns the new cells. `who` needs
/// write permission on the table, and read and write permission on each
/// family (it is told the values), as `append` and `increment` in `.mutate`.
pub fn read_modify_write(
    bt: &Bigtable,
    table: &str,
    req: &v2::ReadModifyWriteRowRequest,
    who: &Identity,
) -> Result<v2::Row, Status> {
    use v2::read_modify_write_rule::Rule;
    super::rows::check_row_key(&req.row_key)?;
    if req.rules.is_empty() {
        return Err(Status::invalid_argument("no rules given"));
    }
    let schema = bt.schema(table).map_err(status::from_engine)?;
    auth::table(who, table, &schema, W)?;
    for r in &req.rules {
        if let Some(f) = schema.families.get(&r.family_name) {
            auth::family(who, f, R | W)?;
        }
    }
    let mut ops = Vec::with_capacity(req.rules.len());
    for r in &req.rules {
        let family = r.family_name.clone();
        let qualifier = r.column_qualifier.clone();
        ops.push(match &r.rule {
            Some(Rule::AppendValue(data)) => RowOp::Append {
                family,
                qualifier,
                data: data.clone(),
            },
            Some(Rule::IncrementAmount(delta)) => RowOp::Increment {
                family,
                qualifier,
                delta: *delta,
            },
            None => return Err(Status::invalid_argument("a rule names no change")),
        });
    }
    let txn = RowTxn::new(req.row_key.clone(), ops);
    let outcome = bt
        .apply_txns(table, std::slice::from_ref(&txn), WriteOptions::default())
        .map_err(|e| match e.root() {
            // A cell that is not an 8-byte counter.
            Error::NotACounter(_) => Status::new(Code::InvalidArgument, e.to_string()),
            _ => status::from_engine(e),
        })?
        .pop()
        .ok_or_else(|| Status::internal("transaction produced no outcome"))?;
    // The last value written to each column, in row order.
    let mut columns: BTreeMap<(String, Vec<u8>), Vec<u8>> = BTreeMap::new();
    for (r, value) in req.rules.iter().zip(outcome.results) {
        columns.insert((r.family_name.clone(), r.column_qualifier.clone()), value);
    }
    let mut families: Vec<v2::Family> = Vec::new();
    for ((family, qualifier), value) in columns {
        // The version's timestamp is the server's; read it back.
        let timestamp = bt
            .read_cell(table, &req.row_key, &family, &qualifier)
            .ok()
            .flatten()
            .map_or_else(engine::now_micros, |c| c.timestamp);
        let cell = v2::Cell {
            timestamp_micros: timestamp as i64,
            value,
            labels: Vec::new(),
        };
        let column = v2::Column {
            qualifier,
            cells: vec![cell],
        };
        match families.last_mut() {
            Some(f) if f.name == family => f.columns.push(column),
            _ => families.push(v2::Family {
                name: family,
                columns: vec![column],
            }),
        }
    }
    Ok(v2::Row {
        key: req.row_key.clone(),
        families,
    })
}
