//! Single-row transactions: what `.mutate` batches, increments, appends and
//! check-and-mutate all reduce to.

use crate::data::{Condition, Mutation};

/// One operation inside a row transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowOp {
    /// A plain mutation (set, delete cells / family / row).
    Mutate(Mutation),
    /// Adds `delta` to a 64-bit big-endian counter (missing = 0).
    Increment {
        family: String,
        qualifier: Vec<u8>,
        delta: i64,
    },
    /// Appends bytes to the newest value (missing = empty).
    Append {
        family: String,
        qualifier: Vec<u8>,
        data: Vec<u8>,
    },
}

/// Operations on one row applied atomically: under the row lock, the guard
/// (if any) is evaluated, read-modify-write ops read the row as it is, and
/// everything is committed as one log record. This is check-and-mutate in
/// general form: `ops` run when the guard holds (or there is none),
/// `otherwise` when it does not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowTxn {
    pub row: Vec<u8>,
    pub guard: Option<Condition>,
    pub ops: Vec<RowOp>,
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOutcome {
    /// Whether the guard held (true when there was none): `ops` ran if true,
    /// `otherwise` if false.
    pub guard_held: bool,
    /// New values written by Increment/Append ops, in op order.
    pub results: Vec<Vec<u8>>,
}
