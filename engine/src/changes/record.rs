//! One change record: the value stored in the hidden change family, at key
//! `esc(row) esc(".changes") esc("") BE64(!commit_ts) BE64(!seq) Put`
//! (docs/formats/changes.md). It holds the row mutation as applied, every
//! timestamp resolved, so replaying it elsewhere writes the same cells.

use crate::coding::{put_bytes, put_str, put_varint, Decoder};
use crate::data::{Mutation, RowMutation, TimeRange};
use crate::error::{Error, Result};
use crate::key::Timestamp;

/// The first byte of a record's value: its format.
const VERSION: u8 = 1;
/// Why the change was made.
const SOURCE_USER: u8 = 1;
const SOURCE_GC: u8 = 2;

/// A change as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    /// The row changed.
    pub row: Vec<u8>,
    /// The commit timestamp (µs): the stream's order.
    pub commit_ts: Timestamp,
    /// Made by garbage collection rather than a writer.
    pub gc: bool,
    /// The ops in the order applied (later ones win), timestamps resolved.
    pub mutations: Vec<Mutation>,
}

/// The ops of `m` as committed at `commit_ts`: a `SetCell` without a
/// timestamp gets the commit timestamp, as its cell did.
pub fn resolved(m: &RowMutation, commit_ts: Timestamp) -> Vec<Mutation> {
    m.mutations.iter().map(|op| op.stamped(commit_ts)).collect()
}

/// The stored value of a record of `ops`.
pub fn encode_value(ops: &[Mutation], gc: bool) -> Vec<u8> {
    let mut out = vec![VERSION, if gc { SOURCE_GC } else { SOURCE_USER }];
    put_varint(&mut out, ops.len() as u64);
    for op in ops {
        match op {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                out.push(1);
                put_str(&mut out, family);
                put_bytes(&mut out, qualifier);
                put_varint(&mut out, timestamp.unwrap_or(0));
                put_bytes(&mut out, value);
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                range,
            } => {
                out.push(2);
                put_str(&mut out, family);
                put_bytes(&mut out, qualifier);
                put_varint(&mut out, range.start);
                put_varint(&mut out, range.end);
            }
            Mutation::DeleteFamily { family } => {
                out.push(3);
                put_str(&mut out, family);
            }
            Mutation::DeleteRow => out.push(4),
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                input,
            } => {
                out.push(5);
                put_str(&mut out, family);
                put_bytes(&mut out, qualifier);
                put_varint(&mut out, *timestamp);
                put_varint(&mut out, *input as u64);
            }
        }
    }
    out
}

/// Decodes a stored value (of the record of `row` at `commit_ts`).
pub fn decode_value(row: Vec<u8>, commit_ts: Timestamp, v: &[u8]) -> Result<ChangeRecord> {
    let mut r = Decoder::new(v, "change record");
    if r.u8()? != VERSION {
        return Err(Error::corruption("change record: unknown version"));
    }
    let gc = match r.u8()? {
        SOURCE_USER => false,
        SOURCE_GC => true,
        b => return Err(Error::corruption(format!("change record: source {b}"))),
    };
    let n = r.varint()?;
    // Each op takes at least one byte: a count beyond that is corrupt.
    if n > v.len() as u64 {
        return Err(Error::corruption(
            "change record: op count beyond its bytes",
        ));
    }
    let mut mutations = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let op = match r.u8()? {
            1 => Mutation::SetCell {
                family: r.string()?,
                qualifier: r.bytes()?.to_vec(),
                timestamp: Some(r.varint()?),
                value: r.bytes()?.to_vec(),
            },
            2 => Mutation::DeleteCells {
                family: r.string()?,
                qualifier: r.bytes()?.to_vec(),
                range: TimeRange {
                    start: r.varint()?,
                    end: r.varint()?,
                },
            },
            3 => Mutation::DeleteFamily {
                family: r.string()?,
            },
            4 => Mutation::DeleteRow,
            5 => Mutation::AddToCell {
                family: r.string()?,
                qualifier: r.bytes()?.to_vec(),
                timestamp: r.varint()?,
                input: r.varint()? as i64,
            },
            b => return Err(Error::corruption(format!("change record: op {b}"))),
        };
        mutations.push(op);
    }
    if !r.is_empty() {
        return Err(Error::corruption("change record: trailing bytes"));
    }
    Ok(ChangeRecord {
        row,
        commit_ts,
        gc,
        mutations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip_and_refuse_damage() {
        let m = RowMutation {
            row: b"r".to_vec(),
            mutations: vec![
                Mutation::SetCell {
                    family: "f".into(),
                    qualifier: b"q\0".to_vec(),
                    timestamp: None,
                    value: b"v".to_vec(),
                },
                Mutation::DeleteCells {
                    family: "f".into(),
                    qualifier: b"x".to_vec(),
                    range: TimeRange { start: 3, end: 9 },
                },
                Mutation::DeleteFamily { family: "g".into() },
                Mutation::DeleteRow,
                Mutation::AddToCell {
                    family: "n".into(),
                    qualifier: b"c".to_vec(),
                    timestamp: 5,
                    input: -4,
                },
            ],
        };
        let ops = resolved(&m, 77);
        assert!(matches!(
            ops[0],
            Mutation::SetCell {
                timestamp: Some(77),
                ..
            }
        ));
        let v = encode_value(&ops, false);
        let r = decode_value(b"r".to_vec(), 77, &v).unwrap();
        assert_eq!(r.mutations, ops);
        assert!(!r.gc);
        assert!(
            decode_value(b"r".to_vec(), 77, &encode_value(&ops, true))
                .unwrap()
                .gc
        );
        for cut in 0..v.len() {
            assert!(decode_value(Vec::new(), 0, &v[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = v.clone();
        extra.push(0);
        assert!(decode_value(Vec::new(), 0, &extra).is_err());
    }
}
