//! Mutations: validation against a schema, conversion into internal entries,
//! and the read-modify-write helpers (increment, append, check-and-mutate).

use crate::aggregate::{self, Aggregator};
use crate::data::{Condition, Mutation, Predicate, RowMutation, MAX_QUALIFIER, MAX_ROW_KEY};
use crate::error::{Error, Result};
use crate::key::{self, Kind, SeqNo, Timestamp, MAX_TIMESTAMP, TOMBSTONE_TS};
use crate::schema::TableSchema;
use crate::txn::{Guard, RowOp, RowTxn};

/// Checks one row mutation against the schema and limits; nothing is applied
/// if this fails. Row keys must be 1..=64 KiB (Cloud Bigtable rejects empty
/// keys). `UnknownFamily` errors carry an empty table name: the caller, which
/// knows the table, fills it in.
pub fn validate(schema: &TableSchema, m: &RowMutation, max_value: usize) -> Result<()> {
    if m.row.len() > MAX_ROW_KEY {
        return Err(Error::RowKeyTooLong(m.row.len()));
    }
    if m.row.is_empty() {
        return Err(Error::invalid("row key is empty"));
    }
    if m.mutations.is_empty() {
        return Err(Error::invalid("mutation has no operations"));
    }
    let known = |family: &str| -> Result<()> { family_kind(schema, family).map(|_| ()) };
    let qualifier_ok = |q: &[u8]| -> Result<()> {
        if q.len() > MAX_QUALIFIER {
            Err(Error::invalid(format!(
                "qualifier is {} bytes; the limit is {MAX_QUALIFIER}",
                q.len()
            )))
        } else {
            Ok(())
        }
    };
    for op in &m.mutations {
        match op {
            Mutation::SetCell {
                family,
                qualifier,
                timestamp,
                value,
            } => {
                if family_kind(schema, family)?.is_some() {
                    return Err(Error::invalid(format!(
                        "family {family} is an aggregate family: write it with AddToCell \
                         or MergeToCell, not SetCell"
                    )));
                }
                qualifier_ok(qualifier)?;
                if value.len() > max_value {
                    return Err(Error::ValueTooLarge {
                        size: value.len(),
                        limit: max_value,
                    });
                }
                if let Some(ts) = timestamp {
                    if *ts > MAX_TIMESTAMP {
                        return Err(Error::invalid(format!(
                            "timestamp {ts} is above the largest allowed, {MAX_TIMESTAMP}"
                        )));
                    }
                }
            }
            Mutation::DeleteCells {
                family,
                qualifier,
                range,
            } => {
                known(family)?;
                qualifier_ok(qualifier)?;
                if range.start >= range.end {
                    return Err(Error::invalid(format!(
                        "empty time range [{}, {})",
                        range.start, range.end
                    )));
                }
                if range.start > MAX_TIMESTAMP {
                    return Err(Error::invalid(format!(
                        "time range start {} is above the largest timestamp",
                        range.start
                    )));
                }
            }
            Mutation::DeleteFamily { family } => known(family)?,
            Mutation::DeleteRow => {}
            Mutation::AddToCell {
                family,
                qualifier,
                timestamp,
                ..
            } => {
                if family_kind(schema, family)?.is_none() {
                    return Err(Error::invalid(format!(
                        "family {family} is not an aggregate family: AddToCell and \
                         MergeToCell need one (a family made with an aggregate type)"
                    )));
                }
                qualifier_ok(qualifier)?;
                if *timestamp > MAX_TIMESTAMP {
                    return Err(Error::invalid(format!(
                        "timestamp {timestamp} is above the largest allowed, {MAX_TIMESTAMP}"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The aggregator of `family` (`None` for a plain family); an unknown
/// family is `UnknownFamily` with an empty table name.
fn family_kind(schema: &TableSchema, family: &str) -> Result<Option<Aggregator>> {
    match schema.families.get(family) {
        Some(f) => Ok(f.aggregate),
        None => Err(Error::UnknownFamily {
            table: String::new(),
            family: family.to_string(),
        }),
    }
}

/// Validates every mutation of a batch; the first failure comes back as
/// `BadBatchEntry { index }` around the cause.
pub fn validate_batch(schema: &TableSchema, batch: &[RowMutation], max_value: usize) -> Result<()> {
    for (index, m) in batch.iter().enumerate() {
        validate(schema, m, max_value).map_err(|e| Error::BadBatchEntry {
            index,
            source: Box::new(e),
        })?;
    }
    Ok(())
}

/// Bytes of the values `m`'s `SetCell`s write (what a commit reports).
pub fn value_bytes(m: &RowMutation) -> u64 {
    m.mutations
        .iter()
        .map(|op| match op {
            Mutation::SetCell { value, .. } => value.len() as u64,
            _ => 0,
        })
        .sum()
}

/// How many sequence numbers [`to_entries`] uses for `m`.
pub fn seq_count(m: &RowMutation) -> u64 {
    m.mutations.len() as u64
}

/// The internal entries of one (validated) row mutation, in op order. Op `i`
/// gets sequence number `first_seq + i`, so a later op in the same mutation
/// wins over an earlier one (a delete then a set keeps the set).
pub fn to_entries(m: &RowMutation, first_seq: SeqNo, now_ts: Timestamp) -> Vec<(Vec<u8>, Vec<u8>)> {
    let row = m.row.as_slice();
    m.mutations
        .iter()
        .enumerate()
        .map(|(i, op)| {
            let seq = first_seq.saturating_add(i as u64);
            match op {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => (
                    key::encode(
                        row,
                        family.as_bytes(),
                        qualifier,
                        timestamp.unwrap_or(now_ts),
                        seq,
                        Kind::Put,
                    ),
                    value.clone(),
                ),
                Mutation::DeleteCells {
                    family,
                    qualifier,
                    range,
                } => (
                    key::encode(
                        row,
                        family.as_bytes(),
                        qualifier,
                        TOMBSTONE_TS,
                        seq,
                        Kind::DeleteColumn,
                    ),
                    encode_range(range.start, range.end).to_vec(),
                ),
                Mutation::DeleteFamily { family } => (
                    key::encode(
                        row,
                        family.as_bytes(),
                        b"",
                        TOMBSTONE_TS,
                        seq,
                        Kind::DeleteFamily,
                    ),
                    Vec::new(),
                ),
                Mutation::DeleteRow => (
                    key::encode(row, b"", b"", TOMBSTONE_TS, seq, Kind::DeleteRow),
                    Vec::new(),
                ),
                // An operand; readers and major compactions fold it
                // ([`crate::aggregate`]).
                Mutation::AddToCell {
                    family,
                    qualifier,
                    timestamp,
                    input,
                } => (
                    key::encode(
                        row,
                        family.as_bytes(),
                        qualifier,
                        *timestamp,
                        seq,
                        Kind::Put,
                    ),
                    aggregate::encode(*input).to_vec(),
                ),
            }
        })
        .collect()
}

/// The value of a `DeleteColumn` entry: `BE64(start) ++ BE64(end)`.
pub fn encode_range(start: Timestamp, end: Timestamp) -> [u8; 16] {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&start.to_be_bytes());
    v[8..].copy_from_slice(&end.to_be_bytes());
    v
}

/// Decodes a `DeleteColumn` value; `None` if it is not 16 bytes.
pub fn decode_range(v: &[u8]) -> Option<(Timestamp, Timestamp)> {
    if v.len() != 16 {
        return None;
    }
    let start = u64::from_be_bytes(v[..8].try_into().ok()?);
    let end = u64::from_be_bytes(v[8..].try_into().ok()?);
    Some((start, end))
}

/// Adds `delta` to a 64-bit big-endian two's-complement counter (Cloud
/// Bigtable's and HBase's encoding); a missing cell counts as 0. The sum
/// wraps around as Cloud Bigtable's does (`i64::MAX + 2 == i64::MIN + 1`).
pub fn increment(old: Option<&[u8]>, delta: i64) -> Result<Vec<u8>> {
    let current = match old {
        None => 0i64,
        Some(b) => {
            let arr: [u8; 8] = b.try_into().map_err(|_| Error::NotACounter(b.len()))?;
            i64::from_be_bytes(arr)
        }
    };
    let next = current.wrapping_add(delta);
    Ok(next.to_be_bytes().to_vec())
}

/// Appends `data` to a cell's value (a missing cell is empty).
pub fn append(old: Option<&[u8]>, data: &[u8], max_value: usize) -> Result<Vec<u8>> {
    let old = old.unwrap_or(&[]);
    let size = old.len().saturating_add(data.len());
    if size > max_value {
        return Err(Error::ValueTooLarge {
            size,
            limit: max_value,
        });
    }
    let mut v = Vec::with_capacity(size);
    v.extend_from_slice(old);
    v.extend_from_slice(data);
    Ok(v)
}

/// Whether a check-and-mutate condition holds, given the newest visible value
/// of its column.
pub fn check(cond: &Condition, newest: Option<&[u8]>) -> bool {
    match &cond.predicate {
        Predicate::Exists => newest.is_some(),
        Predicate::Equals(v) => newest == Some(v.as_slice()),
    }
}

/// Checks a row transaction against the schema before anything runs.
pub fn validate_txn(table: &str, schema: &TableSchema, t: &RowTxn, max_value: usize) -> Result<()> {
    let check_family = |f: &str| {
        if schema.families.contains_key(f) {
            Ok(())
        } else {
            Err(Error::UnknownFamily {
                table: table.to_string(),
                family: f.to_string(),
            })
        }
    };
    if t.row.len() > MAX_ROW_KEY {
        return Err(Error::RowKeyTooLong(t.row.len()));
    }
    if t.ops.is_empty() && t.otherwise.is_empty() {
        return Err(Error::invalid(
            "a row transaction needs at least one operation",
        ));
    }
    match &t.guard {
        Some(Guard::Cell(c)) => check_family(&c.family)?,
        Some(Guard::Filter(f)) => {
            f.compile()?;
        }
        None => {}
    }
    let mut plain = RowMutation::new(t.row.clone());
    for op in t.ops.iter().chain(&t.otherwise) {
        match op {
            RowOp::Mutate(m) => plain.mutations.push(m.clone()),
            RowOp::Increment {
                family, qualifier, ..
            }
            | RowOp::Append {
                family, qualifier, ..
            } => {
                check_family(family)?;
                if schema
                    .families
                    .get(family)
                    .is_some_and(|f| f.aggregate.is_some())
                {
                    return Err(Error::invalid(format!(
                        "family {family} is an aggregate family: ReadModifyWriteRow does not \
                         apply to it (use AddToCell)"
                    )));
                }
                if qualifier.len() > MAX_QUALIFIER {
                    return Err(Error::invalid(format!(
                        "qualifier is {} bytes; the limit is {MAX_QUALIFIER}",
                        qualifier.len()
                    )));
                }
            }
        }
    }
    if !plain.mutations.is_empty() {
        validate(schema, &plain, max_value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{TimeRange, DEFAULT_MAX_VALUE};
    use crate::schema::FamilySchema;

    fn schema() -> TableSchema {
        TableSchema::with_families([FamilySchema::new("f"), FamilySchema::new("g")])
    }

    #[test]
    fn validate_accepts_good_mutations() {
        let m = RowMutation::new("r")
            .set("f", "q", "v")
            .set_at("g", "", MAX_TIMESTAMP, "v")
            .delete_cells("f", "q", TimeRange::ALL)
            .delete_cells("f", "q", TimeRange::exactly(5))
            .delete_family("g")
            .delete_row();
        validate(&schema(), &m, DEFAULT_MAX_VALUE).unwrap();
    }

    #[test]
    fn validate_rejects_each_bad_input() {
        let s = schema();
        let long_row = RowMutation::new(vec![b'x'; MAX_ROW_KEY + 1]).set("f", "q", "v");
        assert!(matches!(
            validate(&s, &long_row, 10),
            Err(Error::RowKeyTooLong(n)) if n == MAX_ROW_KEY + 1
        ));
        let max_row = RowMutation::new(vec![b'x'; MAX_ROW_KEY]).set("f", "q", "v");
        validate(&s, &max_row, 10).unwrap();
        assert!(matches!(
            validate(&s, &RowMutation::new(""), 10),
            Err(Error::InvalidArgument(_))
        ));
        let empty = RowMutation::new("r");
        assert!(matches!(
            validate(&s, &empty, 10),
            Err(Error::InvalidArgument(_))
        ));
        for m in [
            RowMutation::new("r").set("nope", "q", "v"),
            RowMutation::new("r").delete_cells("nope", "q", TimeRange::ALL),
            RowMutation::new("r").delete_family("nope"),
        ] {
            assert!(matches!(
                validate(&s, &m, 10),
                Err(Error::UnknownFamily { family, .. }) if family == "nope"
            ));
        }
        let big = RowMutation::new("r").set("f", "q", vec![0u8; 11]);
        assert!(matches!(
            validate(&s, &big, 10),
            Err(Error::ValueTooLarge {
                size: 11,
                limit: 10
            })
        ));
        validate(&s, &RowMutation::new("r").set("f", "q", vec![0u8; 10]), 10).unwrap();
        let q = RowMutation::new("r").set("f", vec![b'q'; MAX_QUALIFIER + 1], "v");
        assert!(matches!(
            validate(&s, &q, 10),
            Err(Error::InvalidArgument(_))
        ));
        let ts = RowMutation::new("r").set_at("f", "q", MAX_TIMESTAMP + 1, "v");
        assert!(matches!(
            validate(&s, &ts, 10),
            Err(Error::InvalidArgument(_))
        ));
        let range = RowMutation::new("r").delete_cells("f", "q", TimeRange { start: 5, end: 5 });
        assert!(matches!(
            validate(&s, &range, 10),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn aggregate_families_take_only_adds() {
        let mut agg = FamilySchema::new("a");
        agg.aggregate = Some(crate::schema::Aggregator::Sum);
        let s = TableSchema::with_families([FamilySchema::new("f"), agg]);
        let ok = RowMutation::new("r")
            .add_to_cell("a", "q", 0, 5)
            .delete_cells("a", "q", TimeRange::ALL)
            .delete_family("a");
        validate(&s, &ok, 10).unwrap();
        for bad in [
            RowMutation::new("r").set("a", "q", "v"),
            RowMutation::new("r").add_to_cell("f", "q", 0, 1),
            RowMutation::new("r").add_to_cell("a", "q", MAX_TIMESTAMP + 1, 1),
        ] {
            assert!(
                matches!(validate(&s, &bad, 10), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            validate(&s, &RowMutation::new("r").add_to_cell("x", "q", 0, 1), 10),
            Err(Error::UnknownFamily { .. })
        ));
        let e = to_entries(&RowMutation::new("r").add_to_cell("a", "q", 7, -2), 3, 0);
        let k = key::decode(&e[0].0).unwrap();
        assert_eq!((k.timestamp, k.seq, k.kind), (7, 3, Kind::Put));
        assert_eq!(e[0].1, (-2i64).to_be_bytes());
        let rmw = RowTxn::new(
            "r",
            vec![RowOp::Increment {
                family: "a".into(),
                qualifier: b"q".to_vec(),
                delta: 1,
            }],
        );
        assert!(matches!(
            validate_txn("t", &s, &rmw, 10),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn validate_batch_names_the_entry() {
        let s = schema();
        let batch = vec![
            RowMutation::new("a").set("f", "q", "v"),
            RowMutation::new("b").set("f", "q", "v"),
            RowMutation::new("c").set("zz", "q", "v"),
            RowMutation::new("d"),
        ];
        match validate_batch(&s, &batch, 10) {
            Err(Error::BadBatchEntry { index, source }) => {
                assert_eq!(index, 2);
                assert!(matches!(*source, Error::UnknownFamily { .. }));
            }
            other => panic!("{other:?}"),
        }
        validate_batch(&s, &batch[..2], 10).unwrap();
    }

    #[test]
    fn entries_have_one_seq_per_op_in_order() {
        let m = RowMutation::new("r")
            .delete_row()
            .set("f", "q", "now")
            .set_at("f", "q", 7, "seven")
            .delete_cells("f", "q", TimeRange { start: 3, end: 9 })
            .delete_family("g");
        let e = to_entries(&m, 100, 555);
        assert_eq!(e.len(), 5);
        let k: Vec<_> = e.iter().map(|(k, _)| key::decode(k).unwrap()).collect();
        assert_eq!(
            (k[0].family.as_slice(), k[0].timestamp, k[0].seq, k[0].kind),
            (&b""[..], TOMBSTONE_TS, 100, Kind::DeleteRow)
        );
        assert_eq!((k[1].timestamp, k[1].seq, k[1].kind), (555, 101, Kind::Put));
        assert_eq!(e[1].1, b"now");
        assert_eq!((k[2].timestamp, k[2].seq), (7, 102));
        assert_eq!(e[2].1, b"seven");
        assert_eq!(
            (k[3].timestamp, k[3].seq, k[3].kind),
            (TOMBSTONE_TS, 103, Kind::DeleteColumn)
        );
        assert_eq!(decode_range(&e[3].1), Some((3, 9)));
        assert_eq!(
            (k[4].family.as_slice(), k[4].qualifier.as_slice(), k[4].kind),
            (&b"g"[..], &b""[..], Kind::DeleteFamily)
        );
        assert_eq!(k[4].seq, 104);
        assert_eq!(seq_count(&m), 5);
    }

    #[test]
    fn increments() {
        assert_eq!(increment(None, 5).unwrap(), 5i64.to_be_bytes());
        let v = increment(Some(&7i64.to_be_bytes()), -10).unwrap();
        assert_eq!(v, (-3i64).to_be_bytes());
        assert!(matches!(
            increment(Some(b"abc"), 1),
            Err(Error::NotACounter(3))
        ));
        assert_eq!(
            increment(Some(&i64::MAX.to_be_bytes()), 2).unwrap(),
            (i64::MIN + 1).to_be_bytes()
        );
        assert_eq!(
            increment(Some(&i64::MIN.to_be_bytes()), -1).unwrap(),
            i64::MAX.to_be_bytes()
        );
        assert_eq!(
            increment(Some(&i64::MAX.to_be_bytes()), 0).unwrap(),
            i64::MAX.to_be_bytes()
        );
    }

    #[test]
    fn appends_and_checks() {
        assert_eq!(append(None, b"ab", 10).unwrap(), b"ab");
        assert_eq!(append(Some(b"xy"), b"ab", 10).unwrap(), b"xyab");
        assert!(matches!(
            append(Some(b"xyz"), b"ab", 4),
            Err(Error::ValueTooLarge { size: 5, limit: 4 })
        ));
        let exists = Condition {
            family: "f".into(),
            qualifier: b"q".to_vec(),
            predicate: Predicate::Exists,
        };
        assert!(check(&exists, Some(b"")));
        assert!(!check(&exists, None));
        let eq = Condition {
            predicate: Predicate::Equals(b"v".to_vec()),
            ..exists
        };
        assert!(check(&eq, Some(b"v")));
        assert!(!check(&eq, Some(b"w")));
        assert!(!check(&eq, None));
    }
}
