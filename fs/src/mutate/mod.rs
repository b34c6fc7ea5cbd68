//! The `.mutate` batch format.
//!
//! One mutation a line; blank lines and lines whose first non-blank byte is
//! `#` are ignored; a trailing `\r` is dropped. Fields are separated by spaces
//! or tabs, and each field is `%XX`-escaped: write a space as `%20`, a tab as
//! `%09`, a newline as `%0A`, `%` as `%25`; a lone `%` is the empty string.
//! A column is `<family>:<qualifier>` (the family ends at the first `:`).
//!
//! ```text
//! set          <row> <column> <value> [<timestamp>]   write a version (server time by default)
//! delete       <row> <column> [<timestamp>]           delete one version, or every version
//! delete       <row> <column> <from>..<to>            delete the versions in [from, to)
//!                                                     (either end may be left out)
//! deletefamily <row> <family>                         delete the family's cells in the row
//! deleterow    <row>                                  delete the row
//! increment    <row> <column> <delta>                 add to a 64-bit big-endian counter
//! append       <row> <column> <value>                 append bytes to the newest value
//! if           <row> <column> [<value>]               guard: the column exists (and equals value)
//! ifnot        <row> <column> [<value>]               guard: it does not
//! if           <row> filter=<expr>                    guard: the row filter outputs a cell
//! ifnot        <row> filter=<expr>                    guard: it outputs none
//! ```
//!
//! A filter is written as in `.scan` queries (`crate::filter_query`), e.g.
//! `if r filter=chain(family(lock),value(free))`; it must hold no space (write
//! `%20`), and it reads every family of the row (the writer needs read
//! permission on all of them).
//!
//! Timestamps are decimal microseconds. All lines of one row form one
//! transaction, applied atomically in line order; a guard line makes every
//! mutation of its row in the batch conditional (at most one guard per row):
//! with `if` they run when the column exists (and equals the value), with
//! `ifnot` when it does not. Rows are applied in the order they first appear.

use crate::names::{decode_field, encode_field};
use engine::key::MAX_TIMESTAMP;
use engine::{
    Condition, Guard, Mutation, Predicate, RowFilter, RowOp, RowTxn, TimeRange, TxnOutcome,
};
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::path::Path;

mod spool;
pub use spool::Spool;

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Set {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        value: Vec<u8>,
        ts: Option<u64>,
    },
    Delete {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        ts: Option<u64>,
    },
    /// The versions of a column in a time range.
    DeleteVersions {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        range: TimeRange,
    },
    DeleteFamily {
        row: Vec<u8>,
        family: String,
    },
    DeleteRow {
        row: Vec<u8>,
    },
    Increment {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        delta: i64,
    },
    Append {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        value: Vec<u8>,
    },
    Guard {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        value: Option<Vec<u8>>,
        expect: bool,
    },
    /// A guard that holds when the filter outputs a cell of the row.
    FilterGuard {
        row: Vec<u8>,
        filter: RowFilter,
        expect: bool,
    },
}

impl Op {
    pub fn row(&self) -> &[u8] {
        match self {
            Op::Set { row, .. }
            | Op::Delete { row, .. }
            | Op::DeleteVersions { row, .. }
            | Op::FilterGuard { row, .. }
            | Op::DeleteFamily { row, .. }
            | Op::DeleteRow { row }
            | Op::Increment { row, .. }
            | Op::Append { row, .. }
            | Op::Guard { row, .. } => row,
        }
    }

    /// The family the line touches (`None`: every family of the row).
    pub fn family(&self) -> Option<&str> {
        match self {
            Op::DeleteRow { .. } | Op::FilterGuard { .. } => None,
            Op::Set { family, .. }
            | Op::Delete { family, .. }
            | Op::DeleteVersions { family, .. }
            | Op::DeleteFamily { family, .. }
            | Op::Increment { family, .. }
            | Op::Append { family, .. }
            | Op::Guard { family, .. } => Some(family),
        }
    }

    /// Whether the line reads data (guards, read-modify-write).
    pub fn reads(&self) -> bool {
        matches!(
            self,
            Op::Increment { .. } | Op::Append { .. } | Op::Guard { .. } | Op::FilterGuard { .. }
        )
    }

    /// Whether the line writes data.
    pub fn writes(&self) -> bool {
        !matches!(self, Op::Guard { .. } | Op::FilterGuard { .. })
    }
}

/// A parsed line with its 1-based number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub line: usize,
    pub op: Op,
}

/// A syntax or consistency error, naming the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchError {
    pub line: usize,
    pub reason: String,
    /// Not the text's fault: keeping or reading it back failed.
    pub io: bool,
}

impl BatchError {
    fn at(line: usize, reason: String) -> BatchError {
        BatchError {
            line,
            reason,
            io: false,
        }
    }
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

fn field(s: &[u8], what: &str) -> Result<Vec<u8>, String> {
    decode_field(s)
        .ok_or_else(|| format!("{what}: bad %XX escape in {:?}", String::from_utf8_lossy(s)))
}

fn column(s: &[u8]) -> Result<(String, Vec<u8>), String> {
    let c = field(s, "column")?;
    let colon = c.iter().position(|&b| b == b':').ok_or_else(|| {
        format!(
            "column {:?} is not family:qualifier",
            String::from_utf8_lossy(&c)
        )
    })?;
    let family = std::str::from_utf8(&c[..colon])
        .map_err(|_| "family name is not UTF-8".to_string())?
        .to_string();
    if family.is_empty() {
        return Err("empty family name".into());
    }
    Ok((family, c[colon + 1..].to_vec()))
}

fn family_field(s: &[u8]) -> Result<String, String> {
    let f = field(s, "family")?;
    String::from_utf8(f).map_err(|_| "family name is not UTF-8".to_string())
}

fn timestamp(s: &[u8]) -> Result<u64, String> {
    let t = std::str::from_utf8(s)
        .ok()
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| format!("bad timestamp {:?}", String::from_utf8_lossy(s)))?;
    if t > MAX_TIMESTAMP {
        return Err(format!(
            "timestamp {t} is above the largest ({MAX_TIMESTAMP})"
        ));
    }
    Ok(t)
}

/// `<from>..<to>` (either end may be empty) as `[from, to)`; `None` if the
/// field has no `..` (a single timestamp).
fn time_range(s: &[u8]) -> Result<Option<TimeRange>, String> {
    let Some(dots) = s.windows(2).position(|w| w == b"..") else {
        return Ok(None);
    };
    let (a, b) = (&s[..dots], &s[dots + 2..]);
    let start = if a.is_empty() { 0 } else { timestamp(a)? };
    let end = if b.is_empty() {
        u64::MAX
    } else {
        timestamp(b)?
    };
    if start >= end {
        return Err(format!("empty time range {}", String::from_utf8_lossy(s)));
    }
    Ok(Some(TimeRange { start, end }))
}

/// Parses one line (without its newline); `Ok(None)` for blank and comment lines.
pub fn parse_line(text: &[u8]) -> Result<Option<Op>, String> {
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let fields: Vec<&[u8]> = text
        .split(|&b| b == b' ' || b == b'\t')
        .filter(|f| !f.is_empty())
        .collect();
    let Some((&verb, args)) = fields.split_first() else {
        return Ok(None);
    };
    if verb.first() == Some(&b'#') {
        return Ok(None);
    }
    let verb = String::from_utf8_lossy(verb).into_owned();
    let arity = |min: usize, max: usize, usage: &str| -> Result<(), String> {
        if args.len() < min || args.len() > max {
            Err(format!("usage: {usage}"))
        } else {
            Ok(())
        }
    };
    let op = match verb.as_str() {
        "set" => {
            arity(3, 4, "set <row> <family>:<qualifier> <value> [<timestamp>]")?;
            let (family, qualifier) = column(args[1])?;
            Op::Set {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: field(args[2], "value")?,
                ts: args.get(3).map(|t| timestamp(t)).transpose()?,
            }
        }
        "delete" => {
            arity(
                2,
                3,
                "delete <row> <family>:<qualifier> [<timestamp> | <from>..<to>]",
            )?;
            let (family, qualifier) = column(args[1])?;
            let row = field(args[0], "row")?;
            match args.get(2).map(|a| time_range(a)).transpose()?.flatten() {
                Some(range) => Op::DeleteVersions {
                    row,
                    family,
                    qualifier,
                    range,
                },
                None => Op::Delete {
                    row,
                    family,
                    qualifier,
                    ts: args.get(2).map(|t| timestamp(t)).transpose()?,
                },
            }
        }
        "deletefamily" => {
            arity(2, 2, "deletefamily <row> <family>")?;
            Op::DeleteFamily {
                row: field(args[0], "row")?,
                family: family_field(args[1])?,
            }
        }
        "deleterow" => {
            arity(1, 1, "deleterow <row>")?;
            Op::DeleteRow {
                row: field(args[0], "row")?,
            }
        }
        "increment" => {
            arity(3, 3, "increment <row> <family>:<qualifier> <delta>")?;
            let (family, qualifier) = column(args[1])?;
            let d = String::from_utf8_lossy(args[2]);
            let delta = d
                .strip_prefix('+')
                .unwrap_or(&d)
                .parse::<i64>()
                .map_err(|_| format!("bad delta {d:?} (a signed 64-bit decimal)"))?;
            Op::Increment {
                row: field(args[0], "row")?,
                family,
                qualifier,
                delta,
            }
        }
        "append" => {
            arity(3, 3, "append <row> <family>:<qualifier> <value>")?;
            let (family, qualifier) = column(args[1])?;
            Op::Append {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: field(args[2], "value")?,
            }
        }
        "if" | "ifnot" if args.get(1).is_some_and(|a| a.starts_with(b"filter=")) => {
            arity(2, 2, &format!("{verb} <row> filter=<expr>"))?;
            let filter = crate::filter_query::parse(&args[1][b"filter=".len()..])
                .map_err(|e| format!("filter=: {e}"))?;
            Op::FilterGuard {
                row: field(args[0], "row")?,
                filter,
                expect: verb == "if",
            }
        }
        "if" | "ifnot" => {
            arity(2, 3, &format!("{verb} <row> <family>:<qualifier> [<value>]"))?;
            let (family, qualifier) = column(args[1])?;
            Op::Guard {
                row: field(args[0], "row")?,
                family,
                qualifier,
                value: args.get(2).map(|v| field(v, "value")).transpose()?,
                expect: verb == "if",
            }
        }
        other => {
            return Err(format!(
                "unknown mutation {other:?} (set, delete, deletefamily, deleterow, increment, append, if, ifnot)"
            ))
        }
    };
    Ok(Some(op))
}

/// Parses a batch as it is written: complete lines are parsed at once, so a
/// bad line fails the `write` that completes it. Only the text is kept (in a
/// [`Spool`]); close parses it again, a chunk of rows at a time.
#[derive(Debug, Default)]
pub struct BatchParser {
    partial: Vec<u8>,
    line_no: usize,
    /// Lines holding a mutation.
    ops: usize,
    bytes: usize,
    spool: Spool,
    order: RowOrder,
}

/// Whether each row's lines come together (then close applies the batch a
/// chunk of rows at a time); remembers a 64-bit hash per finished run of rows.
#[derive(Debug, Default)]
struct RowOrder {
    last: Option<Vec<u8>>,
    finished: HashSet<u64>,
    /// A row came back after other rows (or two rows' hashes collided).
    scattered: bool,
}

impl RowOrder {
    fn see(&mut self, row: &[u8]) {
        if self.scattered || self.last.as_deref() == Some(row) {
            return;
        }
        if let Some(prev) = self.last.take() {
            self.finished.insert(seahash::hash(&prev));
        }
        if self.finished.contains(&seahash::hash(row)) {
            self.scattered = true;
            self.finished = HashSet::new();
            return;
        }
        self.last = Some(row.to_vec());
    }
}

impl BatchParser {
    /// A parser whose text spills to a file in `spool_dir` (None: the
    /// system's temp directory) once it outgrows memory.
    pub fn new(spool_dir: Option<&Path>) -> BatchParser {
        BatchParser {
            spool: Spool::new(spool_dir),
            ..Default::default()
        }
    }

    /// Feeds written bytes; returns the lines completed by them.
    pub fn feed(&mut self, data: &[u8]) -> Result<Vec<Line>, BatchError> {
        let mut out = Vec::new();
        self.bytes += data.len();
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (head, tail) = rest.split_at(nl + 1);
            rest = tail;
            if self.partial.is_empty() {
                self.push_line(head, &mut out)?;
            } else {
                let mut full = std::mem::take(&mut self.partial);
                full.extend_from_slice(head);
                self.push_line(&full, &mut out)?;
            }
        }
        self.partial.extend_from_slice(rest);
        Ok(out)
    }

    /// Parses one line (with its newline, if any) and spools its text.
    fn push_line(&mut self, text: &[u8], out: &mut Vec<Line>) -> Result<(), BatchError> {
        self.line_no += 1;
        let line = self.line_no;
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        match parse_line(body) {
            Ok(Some(op)) => {
                self.order.see(op.row());
                self.ops += 1;
                out.push(Line { line, op });
            }
            Ok(None) => {}
            Err(reason) => return Err(BatchError::at(line, reason)),
        }
        let spooled = self.spool.push(body).and_then(|_| self.spool.push(b"\n"));
        spooled.map_err(|e| BatchError {
            line,
            reason: format!("cannot keep the batch's text: {e}"),
            io: true,
        })
    }

    /// Ends the batch (a last line without newline counts): returns the
    /// lines completed now and the whole batch, and starts a new one.
    pub fn finish(&mut self) -> Result<(Vec<Line>, Batch), BatchError> {
        let mut last = Vec::new();
        if !self.partial.is_empty() {
            let text = std::mem::take(&mut self.partial);
            self.push_line(&text, &mut last)?;
        }
        let dir = self.spool.dir().map(Path::to_path_buf);
        let done = std::mem::replace(self, BatchParser::new(dir.as_deref()));
        let batch = Batch {
            spool: done.spool,
            scattered: done.order.scattered,
            ops: done.ops,
        };
        Ok((last, batch))
    }

    /// Bytes written since the batch began.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.ops == 0 && self.partial.iter().all(|b| b.is_ascii_whitespace())
    }

    /// Drops what was written (O_TRUNC): a new, empty batch.
    pub fn reset(&mut self) {
        let dir = self.spool.dir().map(Path::to_path_buf);
        *self = BatchParser::new(dir.as_deref());
    }
}

/// A finished batch: its text, read back in chunks at close.
#[derive(Debug)]
pub struct Batch {
    spool: Spool,
    scattered: bool,
    ops: usize,
}

/// Text per chunk of rows read back at once (a bound on memory, not on rows).
const CHUNK_BYTES: usize = 4 << 20;

impl Batch {
    /// Whether the batch holds no mutation.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }

    /// Lines holding a mutation.
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// Whether the text outgrew memory and went to a file.
    pub fn spilled(&self) -> bool {
        self.spool.spilled()
    }

    /// Whether some row's lines are not together, so that the batch must be
    /// grouped in memory as a whole.
    pub fn scattered(&self) -> bool {
        self.scattered
    }

    /// Calls `f` with the batch's transactions (see [`group`]), in order,
    /// at most about `max_rows` rows (or [`CHUNK_BYTES`] of text) at a time;
    /// every row's lines are in one call. May be called again (a second pass).
    pub fn for_each_chunk<E: From<BatchError>>(
        &mut self,
        max_rows: usize,
        mut f: impl FnMut(Vec<Txn>) -> Result<(), E>,
    ) -> Result<(), E> {
        let io_err = |e: std::io::Error| BatchError {
            line: 0,
            reason: format!("cannot read the batch's text back: {e}"),
            io: true,
        };
        let scattered = self.scattered;
        let mut reader = self.spool.reader().map_err(io_err)?;
        let mut text = Vec::new();
        let mut line_no = 0;
        let mut lines: Vec<Line> = Vec::new();
        let (mut rows, mut bytes) = (0usize, 0usize);
        loop {
            text.clear();
            let n = reader.read_until(b'\n', &mut text).map_err(io_err)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let body = text.strip_suffix(b"\n").unwrap_or(&text);
            let Some(op) = parse_line(body).map_err(|r| BatchError::at(line_no, r))? else {
                continue;
            };
            let new_row = lines.last().is_none_or(|l| l.op.row() != op.row());
            if !scattered && new_row && (rows >= max_rows || bytes >= CHUNK_BYTES) {
                f(group(std::mem::take(&mut lines))?)?;
                (rows, bytes) = (0, 0);
            }
            rows += usize::from(new_row);
            bytes += body.len();
            lines.push(Line { line: line_no, op });
        }
        drop(reader);
        if lines.is_empty() {
            return Ok(());
        }
        let mut txns = group(lines)?;
        if !scattered {
            return f(txns);
        }
        while !txns.is_empty() {
            let rest = txns.split_off(txns.len().min(max_rows.max(1)));
            f(std::mem::replace(&mut txns, rest))?;
        }
        Ok(())
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
        r.ops.push(row_op);
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

/// The text read back from a `.mutate` handle after its batch ran: per row
/// `applied <row>` or `skipped <row>` (its guard failed), then one
/// `value <row> <column> <new value>` per increment (decimal) or append (escaped).
pub fn format_results(txns: &[Txn], outcomes: &[TxnOutcome]) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, o) in txns.iter().zip(outcomes) {
        let row = encode_field(&t.txn.row);
        out.extend_from_slice(if t.applied(o) {
            b"applied "
        } else {
            b"skipped "
        });
        out.extend_from_slice(&row);
        out.push(b'\n');
        let rmw = t.ops().iter().filter_map(|op| match op {
            RowOp::Increment {
                family, qualifier, ..
            } => Some((family, qualifier, true)),
            RowOp::Append {
                family, qualifier, ..
            } => Some((family, qualifier, false)),
            RowOp::Mutate(_) => None,
        });
        for ((family, qualifier, is_counter), value) in rmw.zip(&o.results) {
            out.extend_from_slice(b"value ");
            out.extend_from_slice(&row);
            out.push(b' ');
            let mut col = family.as_bytes().to_vec();
            col.push(b':');
            col.extend_from_slice(qualifier);
            out.extend_from_slice(&encode_field(&col));
            out.push(b' ');
            match (is_counter, <[u8; 8]>::try_from(value.as_slice())) {
                (true, Ok(be)) => {
                    out.extend_from_slice(i64::from_be_bytes(be).to_string().as_bytes())
                }
                _ => out.extend_from_slice(&encode_field(value)),
            }
            out.push(b'\n');
        }
    }
    out
}

#[cfg(test)]
mod tests;
