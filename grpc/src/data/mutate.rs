//! The API's mutations as engine mutations.

use crate::v2;
use engine::{Mutation, RowMutation, TimeRange};
use tonic::Status;
use v2::mutation::Mutation as M;

/// A timestamp of a request: -1 asks for the server's time. Tables have
/// millisecond granularity (GetTable says `MILLIS`), so microseconds must
/// be whole milliseconds.
fn timestamp(ts: i64) -> Result<Option<u64>, Status> {
    match ts {
        -1 => Ok(None),
        t if t >= 0 && t % 1000 != 0 => Err(Status::invalid_argument(format!(
            "Timestamp granularity mismatch: expected a multiple of 1000 microseconds \
             (millisecond granularity), got {t}"
        ))),
        t if t >= 0 => Ok(Some(t as u64)),
        t => Err(Status::invalid_argument(format!("invalid timestamp {t}"))),
    }
}

/// `[start, end)` of a request; an end of 0 means "no end".
pub fn time_range(r: Option<&v2::TimestampRange>) -> Result<TimeRange, Status> {
    let Some(r) = r else {
        return Ok(TimeRange::ALL);
    };
    if r.start_timestamp_micros < 0 || r.end_timestamp_micros < 0 {
        return Err(Status::invalid_argument("negative timestamp in a range"));
    }
    let start = r.start_timestamp_micros as u64;
    let end = match r.end_timestamp_micros {
        0 => u64::MAX,
        e => e as u64,
    };
    if end < start {
        return Err(Status::invalid_argument(
            "timestamp range ends before it starts",
        ));
    }
    Ok(TimeRange { start, end })
}

/// Most mutations one request may carry (all its rows together), as in
/// Cloud Bigtable.
pub const MAX_MUTATIONS: usize = 100_000;

/// Refuses a request of more than [`MAX_MUTATIONS`] mutations.
pub fn check_mutation_count(n: usize) -> Result<(), Status> {
    if n > MAX_MUTATIONS {
        return Err(Status::invalid_argument(format!(
            "Too many mutations: {n}, at most {MAX_MUTATIONS} per request"
        )));
    }
    Ok(())
}

/// One row's mutations; a bad one fails the whole row (nothing applied).
pub fn row_mutation(row: &[u8], ms: &[v2::Mutation]) -> Result<RowMutation, Status> {
    super::rows::check_row_key(row)?;
    if ms.is_empty() {
        return Err(Status::invalid_argument("No mutations provided"));
    }
    check_mutation_count(ms.len())?;
    let mut out = RowMutation::new(row);
    for m in ms {
        out.mutations.push(one(m)?);
    }
    Ok(out)
}

/// An `AddToCell` or `MergeToCell` (an Int64 family's state is its input,
/// so both fold the same way): the qualifier a `raw_value`, the timestamp a
/// `raw_timestamp_micros`, the input an `int_value` (or 8 big-endian bytes).
fn aggregate(
    what: &str,
    family: &str,
    qualifier: Option<&v2::Value>,
    timestamp: Option<&v2::Value>,
    input: Option<&v2::Value>,
) -> Result<Mutation, Status> {
    use v2::value::Kind;
    let bad = |m: String| Status::invalid_argument(format!("{what}: {m}"));
    let qualifier = match qualifier.and_then(|v| v.kind.as_ref()) {
        Some(Kind::RawValue(q)) => q.clone(),
        _ => return Err(bad("column_qualifier must be a raw_value".into())),
    };
    let timestamp = match timestamp.and_then(|v| v.kind.as_ref()) {
        Some(Kind::RawTimestampMicros(t)) if *t >= 0 => *t as u64,
        Some(Kind::RawTimestampMicros(t)) => return Err(bad(format!("invalid timestamp {t}"))),
        _ => return Err(bad("timestamp must be a raw_timestamp_micros".into())),
    };
    let input = match input.and_then(|v| v.kind.as_ref()) {
        Some(Kind::IntValue(i)) => *i,
        Some(Kind::RawValue(b) | Kind::BytesValue(b)) => {
            engine::aggregate::input_from_bytes(b).map_err(|e| bad(e.to_string()))?
        }
        _ => return Err(bad("input must be an Int64 int_value".into())),
    };
    Ok(Mutation::AddToCell {
        family: family.to_string(),
        qualifier,
        timestamp,
        input,
    })
}

/// One mutation.
pub fn one(m: &v2::Mutation) -> Result<Mutation, Status> {
    Ok(match &m.mutation {
        Some(M::SetCell(s)) => Mutation::SetCell {
            family: s.family_name.clone(),
            qualifier: s.column_qualifier.clone(),
            timestamp: timestamp(s.timestamp_micros)?,
            value: s.value.clone(),
        },
        Some(M::DeleteFromColumn(d)) => Mutation::DeleteCells {
            family: d.family_name.clone(),
            qualifier: d.column_qualifier.clone(),
            range: time_range(d.time_range.as_ref())?,
        },
        Some(M::DeleteFromFamily(d)) => Mutation::DeleteFamily {
            family: d.family_name.clone(),
        },
        Some(M::DeleteFromRow(_)) => Mutation::DeleteRow,
        Some(M::AddToCell(a)) => aggregate(
            "AddToCell",
            &a.family_name,
            a.column_qualifier.as_ref(),
            a.timestamp.as_ref(),
            a.input.as_ref(),
        )?,
        Some(M::MergeToCell(a)) => aggregate(
            "MergeToCell",
            &a.family_name,
            a.column_qualifier.as_ref(),
            a.timestamp.as_ref(),
            a.input.as_ref(),
        )?,
        None => return Err(Status::invalid_argument("empty mutation")),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn set(ts: i64) -> v2::Mutation {
        v2::Mutation {
            mutation: Some(M::SetCell(v2::mutation::SetCell {
                family_name: "f".into(),
                column_qualifier: b"q".to_vec(),
                timestamp_micros: ts,
                value: b"v".to_vec(),
            })),
        }
    }

    #[test]
    fn converts_and_rejects() {
        let m = row_mutation(b"r", &[set(-1), set(5000)]).unwrap();
        assert!(matches!(
            m.mutations[0],
            Mutation::SetCell {
                timestamp: None,
                ..
            }
        ));
        assert!(matches!(
            m.mutations[1],
            Mutation::SetCell {
                timestamp: Some(5000),
                ..
            }
        ));
        assert!(row_mutation(b"r", &[set(-2)]).is_err());
        // Tables have millisecond granularity; row keys are 1..=4096 bytes.
        assert!(row_mutation(b"r", &[set(5)]).is_err());
        assert!(row_mutation(b"", &[set(1000)]).is_err());
        assert!(row_mutation(&[b'k'; 4096], &[set(1000)]).is_ok());
        assert!(row_mutation(&[b'k'; 4097], &[set(1000)]).is_err());
        assert!(row_mutation(b"r", &vec![set(1000); MAX_MUTATIONS]).is_ok());
        assert!(row_mutation(b"r", &vec![set(1000); MAX_MUTATIONS + 1]).is_err());
        assert!(row_mutation(b"r", &[]).is_err());
        assert!(row_mutation(b"r", &[v2::Mutation { mutation: None }]).is_err());
        let v = |k| {
            Some(v2::Value {
                r#type: None,
                kind: Some(k),
            })
        };
        use v2::value::Kind;
        let add = |ts, input| v2::Mutation {
            mutation: Some(M::AddToCell(v2::mutation::AddToCell {
                family_name: "a".into(),
                column_qualifier: v(Kind::RawValue(b"q".to_vec())),
                timestamp: ts,
                input,
            })),
        };
        let m = row_mutation(
            b"r",
            &[
                add(v(Kind::RawTimestampMicros(7)), v(Kind::IntValue(-3))),
                add(
                    v(Kind::RawTimestampMicros(0)),
                    v(Kind::RawValue(5i64.to_be_bytes().to_vec())),
                ),
            ],
        )
        .unwrap();
        assert_eq!(
            m.mutations,
            vec![
                Mutation::AddToCell {
                    family: "a".into(),
                    qualifier: b"q".to_vec(),
                    timestamp: 7,
                    input: -3
                },
                Mutation::AddToCell {
                    family: "a".into(),
                    qualifier: b"q".to_vec(),
                    timestamp: 0,
                    input: 5
                }
            ]
        );
        for bad in [
            add(None, v(Kind::IntValue(1))),
            add(v(Kind::RawTimestampMicros(-1)), v(Kind::IntValue(1))),
            add(v(Kind::RawTimestampMicros(0)), None),
            add(v(Kind::RawTimestampMicros(0)), v(Kind::RawValue(vec![1]))),
            add(v(Kind::IntValue(0)), v(Kind::IntValue(1))),
        ] {
            assert!(row_mutation(b"r", &[bad]).is_err());
        }
        let r = time_range(Some(&v2::TimestampRange {
            start_timestamp_micros: 3,
            end_timestamp_micros: 0,
        }))
        .unwrap();
        assert_eq!((r.start, r.end), (3, u64::MAX));
    }
}
