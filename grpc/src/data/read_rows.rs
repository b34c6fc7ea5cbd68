//! ReadRows: the request's rows, filtered, in key order (or reversed),
//! streamed as chunks, a piece at a time (see [`Reader`]).

use super::chunks::Chunker;
use crate::filter::{self, FCell};
use crate::shared::Shared;
use crate::{status, v2};
use engine::schema::TableSchema;
use engine::{Bigtable, RowRange, ScanSpec, Scanner};
use std::collections::VecDeque;
use std::sync::Arc;
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

/// The next row of `scanner` that passes the filter, its cells family by
/// family in the order the families were made, as Cloud Bigtable sends
/// a row (the engine reads them in name order).
fn next_row(
    plan: &Plan,
    schema: &TableSchema,
    scanner: &mut Scanner,
) -> Result<Option<Row>, Status> {
    loop {
        let Some((key, mut cells)) = scanner.next_row().map_err(status::from_engine)? else {
            return Ok(None);
        };
        schema.order_row(&mut cells);
        let mut cells: Vec<FCell> = match &plan.local {
            Some(f) => f
                .try_apply(&key, cells)
                .map_err(status::from_engine)?
                .into_iter()
                .map(FCell::from)
                .collect(),
            None => cells.into_iter().map(FCell::from).collect(),
        };
        // Stable: an interleave's duplicates keep their order. (Without a
        // filter here the row is in order already.)
        if plan.local.is_some() {
            cells.sort_by(|a, b| FCell::order(schema, a, b));
        }
        if !cells.is_empty() {
            return Ok(Some((key, cells)));
        }
    }
}

/// A ReadRows in progress. Each [`Reader::next`] runs on a blocking thread
/// and returns about one response's worth; between calls the reader holds
/// no thread, so a client that does not read holds none either.
pub struct Reader {
    bt: Bigtable,
    plan: Plan,
    /// Ranges not yet begun, in the order they are read.
    ranges: VecDeque<RowRange>,
    scanner: Option<Scanner>,
    /// The table's schema as the current range began (families' order).
    schema: Arc<TableSchema>,
    /// Reversed: the current range's rows, sent from the back.
    tail: VecDeque<Row>,
    sent: u64,
    done: bool,
}

impl Reader {
    /// A reader of `plan` (its table checked already).
    pub fn new(bt: Bigtable, plan: Plan) -> Reader {
        let mut ranges: VecDeque<RowRange> = plan.ranges.iter().cloned().collect();
        if plan.reversed {
            ranges = ranges.into_iter().rev().collect();
        }
        // A caller who may read no family of the table reads nothing.
        let done = plan.families.as_ref().is_some_and(|f| f.is_empty());
        Reader {
            bt,
            plan,
            ranges,
            scanner: None,
            schema: Arc::default(),
            tail: VecDeque::new(),
            sent: 0,
            done,
        }
    }

    /// Whether every response has been returned.
    pub fn done(&self) -> bool {
        self.done
    }

    fn scanner(&mut self, range: RowRange) -> Result<Scanner, Status> {
        self.schema = self
            .bt
            .schema(&self.plan.table)
            .map_err(status::from_engine)?;
        let spec = ScanSpec {
            rows: range,
            filter: self
                .plan
                .filter
                .clone()
                .filter(|_| self.plan.local.is_none()),
            families: self.plan.families.clone(),
            ..Default::default()
        };
        self.bt
            .scan(&self.plan.table, spec)
            .map_err(status::from_engine)
    }

    /// The next row to send, in the order asked for.
    fn row(&mut self) -> Result<Option<Row>, Status> {
        if self.plan.reversed {
            // The engine scans forward: keep a range's last rows (at most
            // the limit) and send them newest key first.
            while self.tail.is_empty() {
                let Some(range) = self.ranges.pop_front() else {
                    return Ok(None);
                };
                let mut scanner = self.scanner(range)?;
                let room = self.plan.limit.saturating_sub(self.sent);
                while let Some(row) = next_row(&self.plan, &self.schema, &mut scanner)? {
                    self.tail.push_back(row);
                    if self.plan.limit != 0 && self.tail.len() as u64 > room {
                        self.tail.pop_front();
                    }
                }
            }
            return Ok(self.tail.pop_back());
        }
        loop {
            if self.scanner.is_none() {
                let Some(range) = self.ranges.pop_front() else {
                    return Ok(None);
                };
                self.scanner = Some(self.scanner(range)?);
            }
            let Some(scanner) = self.scanner.as_mut() else {
                continue;
            };
            match next_row(&self.plan, &self.schema, scanner)? {
                Some(row) => return Ok(Some(row)),
                None => self.scanner = None,
            }
        }
    }

    /// Reads on until at least one full response is ready (or the rows
    /// end), and returns the responses.
    pub fn next(&mut self) -> Result<Vec<v2::ReadRowsResponse>, Status> {
        let mut batch = Vec::new();
        if self.done {
            return Ok(batch);
        }
        let mut out = Chunker::new(|r| {
            batch.push(r);
            true
        });
        while out.sent == 0 {
            let Some((key, cells)) = self.row()? else {
                self.done = true;
                break;
            };
            out.row(&key, cells);
            self.sent += 1;
            if self.plan.limit != 0 && self.sent >= self.plan.limit {
                self.done = true;
                break;
            }
        }
        out.flush();
        drop(out);
        Ok(batch)
    }
}
