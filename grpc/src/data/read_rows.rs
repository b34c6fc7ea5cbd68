//! ReadRows: the request's rows, filtered, in key order (or reversed),
//! streamed as chunks. Runs on a blocking thread; `send` returns false once
//! the client has gone, which ends the scan.

use super::chunks::Chunker;
use crate::filter::{self, FCell};
use crate::server::Shared;
use crate::{status, v2};
use engine::{Bigtable, RowRange, ScanSpec};
use std::collections::VecDeque;
use tonic::Status;

/// The checked parts of a request.
pub struct Plan {
    pub table: String,
    pub ranges: Vec<RowRange>,
    pub filter: Option<engine::RowFilter>,
    /// The filter runs here (it labels cells), not in the tablet server.
    pub local: Option<engine::filter::Compiled>,
    /// 0: no limit.
    pub limit: u64,
    pub reversed: bool,
    /// Only these families (those the caller may read; None: all).
    pub families: Option<Vec<String>>,
}

impl Plan {
    pub fn new(shared: &Shared, req: &v2::ReadRowsRequest) -> Result<Plan, Status> {
        let limit = u64::try_from(req.rows_limit)
            .map_err(|_| Status::invalid_argument("rows_limit must not be negative"))?;
        let filter = filter::from_api(req.filter.as_ref())?;
        let local = match &filter {
            Some(f) if filter::labels(f) => Some(f.compile().map_err(status::from_engine)?),
            _ => None,
        };
        Ok(Plan {
            table: shared.table(&req.table_name)?,
            ranges: super::rows::ranges(req.rows.as_ref())?,
            filter,
            local,
            limit,
            reversed: req.reversed,
            families: None,
        })
    }
}

/// A row key and its cells.
type Row = (Vec<u8>, Vec<FCell>);

/// The rows of one range that pass the filter, in key order.
fn scan_range<'a>(
    bt: &'a Bigtable,
    plan: &'a Plan,
    range: &RowRange,
) -> Result<impl Iterator<Item = Result<Row, Status>> + 'a, Status> {
    let spec = ScanSpec {
        rows: range.clone(),
        filter: plan.filter.clone().filter(|_| plan.local.is_none()),
        families: plan.families.clone(),
        ..Default::default()
    };
    let mut scanner = bt.scan(&plan.table, spec).map_err(status::from_engine)?;
    Ok(std::iter::from_fn(move || loop {
        match scanner.next_row() {
            Err(e) => return Some(Err(status::from_engine(e))),
            Ok(None) => return None,
            Ok(Some((key, cells))) => {
                let mut cells: Vec<FCell> = match &plan.local {
                    Some(f) => f.apply(&key, cells).into_iter().map(FCell::from).collect(),
                    None => cells.into_iter().map(FCell::from).collect(),
                };
                // Stable: an interleave's duplicates keep their order.
                cells.sort_by(FCell::order);
                if !cells.is_empty() {
                    return Some(Ok((key, cells)));
                }
            }
        }
    }))
}

/// Streams the rows of `plan` through `send`.
pub fn run(
    bt: &Bigtable,
    plan: &Plan,
    send: impl FnMut(v2::ReadRowsResponse) -> bool,
) -> Result<(), Status> {
    // Fail before any response if the table is missing.
    bt.schema(&plan.table).map_err(status::from_engine)?;
    if plan.families.as_ref().is_some_and(|f| f.is_empty()) {
        return Ok(());
    }
    let mut out = Chunker::new(send);
    let mut sent = 0u64;
    let full = |sent: u64| plan.limit != 0 && sent >= plan.limit;
    if !plan.reversed {
        for range in &plan.ranges {
            for row in scan_range(bt, plan, range)? {
                let (key, cells) = row?;
                out.row(&key, cells);
                sent += 1;
                if full(sent) || !out.open {
                    out.flush();
                    return Ok(());
                }
            }
        }
    } else {
        // The engine scans forward: keep a range's last rows (at most the
        // limit) and send them newest key first.
        for range in plan.ranges.iter().rev() {
            let mut tail: VecDeque<Row> = VecDeque::new();
            for row in scan_range(bt, plan, range)? {
                tail.push_back(row?);
                if plan.limit != 0 && tail.len() as u64 > plan.limit - sent {
                    tail.pop_front();
                }
            }
            while let Some((key, cells)) = tail.pop_back() {
                out.row(&key, cells);
                sent += 1;
                if full(sent) || !out.open {
                    out.flush();
                    return Ok(());
                }
            }
        }
    }
    out.flush();
    Ok(())
}
