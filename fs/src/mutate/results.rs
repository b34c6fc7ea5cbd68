//! What a batch did, as read back from its `.mutate` handle.

use super::Txn;
use crate::names::encode_field;
use engine::{RowOp, TxnOutcome};

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
