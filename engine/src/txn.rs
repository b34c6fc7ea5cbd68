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

/// A guard on a row transaction: the ops run only if the newest value of the
/// column satisfies the predicate (`expect == true`) or does not (`false`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub condition: Condition,
    pub expect: bool,
}

/// Operations on one row applied atomically: under the row lock, the guard is
/// evaluated, read-modify-write ops read the row as it is, and everything is
/// committed as one log record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowTxn {
    pub row: Vec<u8>,
    pub guard: Option<Guard>,
    pub ops: Vec<RowOp>,
}

/// What a row transaction did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOutcome {
    /// False when a guard stopped the ops.
    pub applied: bool,
    /// New values written by Increment/Append ops, in op order.
    pub results: Vec<Vec<u8>>,
}
