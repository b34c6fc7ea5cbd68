//! A batch as it is written: lines parsed as they complete, the text kept
//! in a [`Spool`], and read back at close a chunk of rows at a time.

use super::{group, parse_line, BatchError, Line, Spool, Txn};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

/// Parses a batch as it is written: complete lines are parsed at once, so a
/// bad line fails the `write` that completes it. Only the text is kept (in a
/// [`Spool`]); close parses it again, a chunk of rows at a time.
#[derive(Debug)]
pub struct BatchParser {
    partial: Vec<u8>,
    /// Longest line taken, newline excluded (`mutate_max_line=`).
    max_line: usize,
    /// Most text (plus [`LINE_COST`] a line) grouped in memory at once
    /// (`mutate_max_group=`).
    max_group: usize,
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

/// Default longest `.mutate` line: a largest value (64 MiB) written with
/// every byte `%XX`-escaped, and room for its row key and column.
pub const DEFAULT_MAX_LINE: usize = 3 * engine::DEFAULT_MAX_VALUE + (1 << 20);
/// Default bytes of batch text grouped in memory at once.
pub const DEFAULT_MAX_GROUP: usize = 512 << 20;
/// What a parsed line costs in memory beyond its text (its `Op` and the
/// grouping's bookkeeping), counted against the grouping limit.
pub const LINE_COST: usize = 256;

fn group_too_big(max: usize, scattered: bool) -> String {
    if scattered {
        format!(
            "the batch's rows are not together, so it is grouped in memory as a whole, and it is over {max} bytes (mutate_max_group; write each row's lines together)"
        )
    } else {
        format!("one row's lines are over {max} bytes (mutate_max_group)")
    }
}

impl BatchParser {
    /// A parser whose text spills to a file in `spool_dir` (None: the
    /// system's temp directory) once it outgrows memory.
    pub fn new(spool_dir: Option<&Path>) -> BatchParser {
        BatchParser::with_limits(spool_dir, DEFAULT_MAX_LINE, DEFAULT_MAX_GROUP)
    }

    /// [`BatchParser::new`] with these limits on a line and on text grouped at once.
    pub fn with_limits(spool_dir: Option<&Path>, max_line: usize, max_group: usize) -> BatchParser {
        BatchParser {
            partial: Vec::new(),
            max_line,
            max_group,
            line_no: 0,
            ops: 0,
            bytes: 0,
            spool: Spool::new(spool_dir),
            order: RowOrder::default(),
        }
    }

    /// Bytes of a line not yet ended, held in memory.
    pub fn partial_len(&self) -> usize {
        self.partial.len()
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
        if self.partial.len() + rest.len() > self.max_line {
            return Err(BatchError::too_big(
                self.line_no + 1,
                format!(
                    "line is longer than {} bytes (mutate_max_line)",
                    self.max_line
                ),
            ));
        }
        self.partial.extend_from_slice(rest);
        Ok(out)
    }

    /// Parses one line (with its newline, if any) and spools its text.
    fn push_line(&mut self, text: &[u8], out: &mut Vec<Line>) -> Result<(), BatchError> {
        self.line_no += 1;
        let line = self.line_no;
        let body = text.strip_suffix(b"\n").unwrap_or(text);
        if body.len() > self.max_line {
            return Err(BatchError::too_big(
                line,
                format!(
                    "line is longer than {} bytes (mutate_max_line)",
                    self.max_line
                ),
            ));
        }
        match parse_line(body) {
            Ok(Some(op)) => {
                self.order.see(op.row());
                self.ops += 1;
                out.push(Line { line, op });
            }
            Ok(None) => {}
            Err(reason) => return Err(BatchError::at(line, reason)),
        }
        // Rows out of order are grouped as a whole at close: refuse such a
        // batch as soon as it is too big rather than at close.
        if self.order.scattered
            && self
                .bytes
                .saturating_add(self.ops.saturating_mul(LINE_COST))
                > self.max_group
        {
            return Err(BatchError::too_big(
                line,
                group_too_big(self.max_group, true),
            ));
        }
        let spooled = self.spool.push(body).and_then(|_| self.spool.push(b"\n"));
        spooled.map_err(|e| BatchError {
            line,
            reason: format!("cannot keep the batch's text: {e}"),
            io: true,
            too_big: false,
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
        let fresh = BatchParser::with_limits(dir.as_deref(), self.max_line, self.max_group);
        let done = std::mem::replace(self, fresh);
        let batch = Batch {
            spool: done.spool,
            scattered: done.order.scattered,
            ops: done.ops,
            max_group: done.max_group,
        };
        Ok((last, batch))
    }

    /// Bytes written since the batch began.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing but blank space was written yet.
    pub fn is_empty(&self) -> bool {
        self.ops == 0 && self.partial.iter().all(|b| b.is_ascii_whitespace())
    }

    /// Drops what was written (O_TRUNC): a new, empty batch.
    pub fn reset(&mut self) {
        let dir = self.spool.dir().map(Path::to_path_buf);
        *self = BatchParser::with_limits(dir.as_deref(), self.max_line, self.max_group);
    }
}

impl Default for BatchParser {
    fn default() -> Self {
        BatchParser::new(None)
    }
}

/// A finished batch: its text, read back in chunks at close.
#[derive(Debug)]
pub struct Batch {
    spool: Spool,
    scattered: bool,
    ops: usize,
    max_group: usize,
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
            too_big: false,
        };
        let max_group = self.max_group;
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
            bytes += body.len() + LINE_COST;
            if bytes > max_group {
                return Err(
                    BatchError::too_big(line_no, group_too_big(max_group, scattered)).into(),
                );
            }
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
