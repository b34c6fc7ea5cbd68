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
//! add          <row> <column> <n> [<timestamp>]       fold n into an aggregate family's cell
//!                                                     (at timestamp 0 by default)
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
//!
//! `parse.rs` parses one line; `batch.rs` takes a batch as it is written
//! and reads it back at close; `group.rs` checks the lines and groups them
//! into one transaction per row; `results.rs` writes what a batch did.

use engine::{RowFilter, TimeRange};

mod batch;
mod group;
mod parse;
mod results;
mod spool;

pub use batch::{BatchParser, DEFAULT_MAX_GROUP, DEFAULT_MAX_LINE};
pub use group::{group, Txn};
pub use parse::parse_line;
pub use results::format_results;
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
    /// An `AddToCell` into an aggregate family.
    Add {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        input: i64,
        ts: u64,
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
            | Op::Add { row, .. }
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
            | Op::Add { family, .. }
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
    /// The line (from 1) the error is on.
    pub line: usize,
    /// What is wrong with it, in words.
    pub reason: String,
    /// Not the text's fault: keeping or reading it back failed.
    pub io: bool,
    /// Over a size limit (`mutate_max_line=`, `mutate_max_group=`): EFBIG.
    pub too_big: bool,
}

impl BatchError {
    fn at(line: usize, reason: String) -> BatchError {
        BatchError {
            line,
            reason,
            io: false,
            too_big: false,
        }
    }

    fn too_big(line: usize, reason: String) -> BatchError {
        BatchError {
            too_big: true,
            ..BatchError::at(line, reason)
        }
    }
}

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

#[cfg(test)]
mod tests;
