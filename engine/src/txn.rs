//! Single-row transactions: what `.mutate` batches, increments, appends and
//! check-and-mutate all reduce to.

use crate::data::{Condition, Mutation};
use crate::filter::RowFilter;

/// What decides which branch of a row transaction runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Guard {
    /// A test of one column's newest value (read with a point lookup).
    Cell(Condition),
    /// Cloud Bigtable's `CheckAndMutateRow` predicate: it holds when the
    /// filter outputs at least one cell of the row.
    Filter(RowFilter),
}

impl From<Condition> for Guard {
    fn from(c: Condition) -> Guard {
        Guard::Cell(c)
    }
}

impl From<RowFilter> for Guard {
    fn from(f: RowFilter) -> Guard {
        Guard::Filter(f)
    }
}

/// One operation inside a row transaction.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RowOp {
    /// A plain mutation (set, delete cells / family / row).
    Mutate(Mutation),
    /// Adds `delta` to a 64-bit big-endian counter (missing = 0).
    Increment {
        /// The family of the counter column.
        family: String,
        /// The counter column.
        qualifier: Vec<u8>,
        /// What is added (may be negative).
        delta: i64,
    },
    /// Appends bytes to the newest value (missing = empty).
    Append {
        /// The family of the column.
        family: String,
        /// The column appended to.
        qualifier: Vec<u8>,
        /// The bytes appended.
        data: Vec<u8>,
    },
}

/// What part of a row one [`RowOp`] touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach<'a> {
    /// One column, read and rewritten: an increment or an append.
    ReadModifyWrite(&'a str, &'a [u8]),
    /// One column, written or deleted.
    Column(&'a str, &'a [u8]),
    /// Every column of a family.
    Family(&'a str),
    /// The whole row.
    Row,
}

impl RowOp {
    /// What part of the row this op touches: where repeated appends and
    /// increments of one column may be folded, and what stops the folding.
    pub fn reach(&self) -> Reach<'_> {
        match self {
            RowOp::Increment {
                family, qualifier, ..
            }
            | RowOp::Append {
                family, qualifier, ..
            } => Reach::ReadModifyWrite(family, qualifier),
            RowOp::Mutate(m) => match m {
                Mutation::SetCell {
                    family, qualifier, ..
                }
                | Mutation::DeleteCells {
                    family, qualifier, ..
                }
                | Mutation::AddToCell {
                    family, qualifier, ..
                } => Reach::Column(family, qualifier),
                Mutation::DeleteFamily { family } => Reach::Family(family),
                Mutation::DeleteRow => Reach::Row,
            },
        }
    }
}

/// Operations on one row applied atomically: under the row lock, the guard
/// (if any) is evaluated, read-modify-write ops read the row as it is, and
/// everything is committed as one log record. This is check-and-mutate in
/// general form: `ops` run when the guard holds (or there is none),
/// `otherwise` when it does not.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RowTxn {
    /// The row the transaction reads and changes.
    pub row: Vec<u8>,
    /// The condition choosing the branch; `None` runs `ops`.
    pub guard: Option<Guard>,
    /// What runs when the guard holds (or there is none).
    pub ops: Vec<RowOp>,
    /// What runs when the guard does not hold.
    pub otherwise: Vec<RowOp>,
}

impl RowTxn {
    /// An unguarded transaction.
    pub fn new(row: impl Into<Vec<u8>>, ops: Vec<RowOp>) -> RowTxn {
        RowTxn {
            row: row.into(),
            guard: None,
            ops,
            otherwise: Vec::new(),
        }
    }
}

/// What a row transaction did.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TxnOutcome {
    /// Whether the guard held (true when there was none): `ops` ran if true,
    /// `otherwise` if false.
    pub guard_held: bool,
    /// New values written by Increment/Append ops, in op order. An op whose
    /// value a later increment or append of the same column replaced (no
    /// op touching the column between them) has an empty entry: only the
    /// last value is written, as all of them share the transaction's
    /// timestamp and only the last was ever visible.
    pub results: Vec<Vec<u8>>,
}
