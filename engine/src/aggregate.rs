//! Aggregate column families (Cloud Bigtable's `Aggregate` value types): a
//! family whose cells are 64-bit integers that writes combine instead of
//! overwrite.
//!
//! An `AddToCell` (or `MergeToCell`) is stored as an ordinary put of its
//! 8-byte big-endian input at the cell's timestamp, one entry per write.
//! Where a plain family keeps only the highest-sequence put at a column and
//! timestamp, an aggregate family folds every visible one with its
//! aggregator: readers see one cell per column and timestamp, and a major
//! compaction writes the folded value in their place. Tombstones hide
//! operands by sequence number as they hide any put, so a delete followed by
//! an add starts the cell again from that add.
//!
//! Minor and merging compactions keep the operands apart: an input that is
//! not every file of the tablet may lack a tombstone whose sequence number
//! lies between two operands, and folding them would move the older one past
//! it.

use crate::error::{Error, Result};

/// How an aggregate family combines the values written to one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Aggregator {
    /// The sum, wrapping around in two's complement as Cloud Bigtable does.
    Sum,
    /// The smallest value written.
    Min,
    /// The largest value written.
    Max,
}

impl Aggregator {
    /// Every aggregator, in the order the text form lists them.
    pub const ALL: [Aggregator; 3] = [Aggregator::Sum, Aggregator::Min, Aggregator::Max];

    /// The name of an Int64 family with this aggregator in the `.schema` text.
    pub fn type_name(self) -> &'static str {
        match self {
            Aggregator::Sum => "int64_sum",
            Aggregator::Min => "int64_min",
            Aggregator::Max => "int64_max",
        }
    }

    /// The aggregator of `type_name`, if it names one.
    pub fn from_type_name(name: &str) -> Option<Aggregator> {
        Aggregator::ALL.into_iter().find(|a| a.type_name() == name)
    }

    /// Combines two values.
    pub fn combine(self, a: i64, b: i64) -> i64 {
        match self {
            Aggregator::Sum => a.wrapping_add(b),
            Aggregator::Min => a.min(b),
            Aggregator::Max => a.max(b),
        }
    }

    /// Folds the stored operand `operand` into the accumulated value `acc`
    /// (both 8-byte big-endian). An operand of another length (a value a
    /// plain family held under the same name) is left out, so one bad entry
    /// cannot make the cell unreadable.
    pub fn fold_into(self, acc: &mut Vec<u8>, operand: &[u8]) {
        let (Some(a), Some(b)) = (decode(acc), decode(operand)) else {
            if decode(acc).is_none() && decode(operand).is_some() {
                acc.clear();
                acc.extend_from_slice(operand);
            }
            return;
        };
        acc.clear();
        acc.extend_from_slice(&encode(self.combine(a, b)));
    }
}

/// The stored form of an Int64 value: 8 bytes, big-endian two's complement.
pub fn encode(v: i64) -> [u8; 8] {
    v.to_be_bytes()
}

/// The Int64 value of a stored cell; `None` unless it is 8 bytes.
pub fn decode(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

/// The Int64 input of an API value given as bytes (`MergeToCell` states, raw
/// values): exactly 8 big-endian bytes.
pub fn input_from_bytes(bytes: &[u8]) -> Result<i64> {
    decode(bytes).ok_or_else(|| {
        Error::invalid(format!(
            "an Int64 aggregate input is 8 big-endian bytes, not {}",
            bytes.len()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combines_and_wraps() {
        assert_eq!(Aggregator::Sum.combine(2, 3), 5);
        assert_eq!(Aggregator::Sum.combine(i64::MAX, 2), i64::MIN + 1);
        assert_eq!(Aggregator::Sum.combine(i64::MIN, -1), i64::MAX);
        assert_eq!(Aggregator::Min.combine(-4, 9), -4);
        assert_eq!(Aggregator::Max.combine(-4, 9), 9);
        for a in Aggregator::ALL {
            assert_eq!(Aggregator::from_type_name(a.type_name()), Some(a));
        }
        assert_eq!(Aggregator::from_type_name("int64"), None);
    }

    #[test]
    fn folds_bytes_and_leaves_out_bad_operands() {
        let mut acc = encode(7).to_vec();
        Aggregator::Sum.fold_into(&mut acc, &encode(-10));
        assert_eq!(decode(&acc), Some(-3));
        Aggregator::Sum.fold_into(&mut acc, b"abc");
        assert_eq!(decode(&acc), Some(-3), "a bad operand is left out");
        let mut bad = b"xyz".to_vec();
        Aggregator::Max.fold_into(&mut bad, &encode(4));
        assert_eq!(
            decode(&bad),
            Some(4),
            "a bad head gives way to a good operand"
        );
        assert_eq!(input_from_bytes(&encode(-1)).unwrap(), -1);
        assert!(input_from_bytes(b"1234567").is_err());
    }
}
