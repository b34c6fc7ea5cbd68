//! GenerateInitialChangeStreamPartitions and ReadChangeStream over the
//! table's change log (docs/changes.md). A partition is a row range (the
//! tablets' at the time partitions are asked for); the engine reads a row
//! range's changes whatever tablets hold it, so a split or merge never
//! closes a stream. Tokens are the engine's positions (`<µs>[.<n>]`).

use crate::v2;
use engine::changes::{ChangeBatch, ChangeQuery, ChangeRecord, Position};
use engine::Mutation;
use prost_types::Timestamp;
use std::time::Duration;
use tonic::Status;
use v2::read_change_stream_response::{self as resp, data_change, StreamRecord};

/// Changes read at once.
pub const BATCH: usize = 256;

/// The partition of the rows `[start, end)`.
pub fn partition(start: Vec<u8>, end: Option<Vec<u8>>) -> v2::StreamPartition {
    v2::StreamPartition {
        row_range: Some(v2::RowRange {
            start_key: Some(v2::row_range::StartKey::StartKeyClosed(start)),
            end_key: end.map(v2::row_range::EndKey::EndKeyOpen),
        }),
    }
}

/// What one ReadChangeStream reads.
pub struct Plan {
    pub table: String,
    pub partition: v2::StreamPartition,
    pub query: ChangeQuery,
    pub heartbeat: Duration,
    /// The instance's cluster: every change's `source_cluster_id`.
    pub cluster: String,
}

fn us_of(t: &Timestamp) -> Result<u64, Status> {
    u64::try_from(i128::from(t.seconds) * 1_000_000 + i128::from(t.nanos) / 1000)
        .map_err(|_| Status::invalid_argument("a time before 1970"))
}

fn ts_of(us: u64) -> Timestamp {
    Timestamp {
        seconds: (us / 1_000_000) as i64,
        nanos: ((us % 1_000_000) * 1000) as i32,
    }
}

impl Plan {
    /// Checks the request: a closed-start, open-end partition, a start time
    /// or one token of that partition, an end time, a heartbeat period.
    pub fn new(table: String, req: &v2::ReadChangeStreamRequest) -> Result<Plan, Status> {
        let partition = req
            .partition
            .clone()
            .ok_or_else(|| Status::invalid_argument("partition is required"))?;
        let range = partition.row_range.clone().unwrap_or_default();
        let start = match range.start_key {
            None => Vec::new(),
            Some(v2::row_range::StartKey::StartKeyClosed(k)) => k,
            Some(_) => {
                return Err(Status::invalid_argument(
                    "a partition starts at a closed key (as GenerateInitialChangeStreamPartitions gives)",
                ))
            }
        };
        let end = match range.end_key {
            None => None,
            Some(v2::row_range::EndKey::EndKeyOpen(k)) if k.is_empty() => None,
            Some(v2::row_range::EndKey::EndKeyOpen(k)) => Some(k),
            Some(_) => return Err(Status::invalid_argument(
                "a partition ends at an open key (as GenerateInitialChangeStreamPartitions gives)",
            )),
        };
        use v2::read_change_stream_request::StartFrom;
        let after = match &req.start_from {
            None => Position::default(),
            Some(StartFrom::StartTime(t)) => Position {
                ts: us_of(t)?,
                skip: 0,
            },
            Some(StartFrom::ContinuationTokens(ts)) => {
                let [tok] = ts.tokens.as_slice() else {
                    return Err(Status::invalid_argument(
                        "give one continuation token, of this partition",
                    ));
                };
                if tok.partition.as_ref() != Some(&partition) {
                    return Err(Status::invalid_argument(
                        "the continuation token is of another partition",
                    ));
                }
                Position::parse(&tok.token).map_err(|e| Status::invalid_argument(e.to_string()))?
            }
        };
        let until = req.end_time.as_ref().map(us_of).transpose()?;
        let heartbeat = req
            .heartbeat_duration
            .as_ref()
            .map(|d| Duration::from_secs(d.seconds.max(0) as u64))
            .unwrap_or(Duration::from_secs(10))
            .clamp(Duration::from_secs(1), Duration::from_secs(60));
        Ok(Plan {
            table,
            partition,
            query: ChangeQuery {
                start,
                end,
                after,
                until,
                max_records: BATCH,
            },
            heartbeat,
            cluster: String::new(),
        })
    }

    fn token(&self, p: Position) -> v2::StreamContinuationToken {
        v2::StreamContinuationToken {
            partition: Some(self.partition.clone()),
            token: p.to_token(),
        }
    }

    /// A batch as responses: each change one DataChange, in as many
    /// messages as its chunks need ([`messages`]), the last with the token
    /// after it.
    pub fn data_changes(
        &self,
        b: &ChangeBatch,
        readable: Option<&[String]>,
    ) -> Vec<v2::ReadChangeStreamResponse> {
        let mut at = self.query.after;
        let mut out = Vec::with_capacity(b.records.len());
        for r in &b.records {
            at = at.after_record(r.commit_ts);
            let head = Head {
                cluster: &self.cluster,
                tiebreaker: at.skip.saturating_sub(1) as i32,
                token: at.to_token(),
                watermark: b.watermark,
            };
            out.extend(messages(r, &head, readable, CHUNK));
        }
        out
    }

    /// A heartbeat at position `p` and watermark `w`.
    pub fn heartbeat(&self, p: Position, w: u64) -> v2::ReadChangeStreamResponse {
        v2::ReadChangeStreamResponse {
            stream_record: Some(StreamRecord::Heartbeat(resp::Heartbeat {
                continuation_token: Some(self.token(p)),
                estimated_low_watermark: Some(ts_of(w)),
            })),
        }
    }
}

/// Most value bytes in one chunk, and (about) in one message: a client's
/// default message limit (4 MiB) is never reached.
pub const CHUNK: usize = 1 << 20;

/// What a change's messages carry besides its ops.
struct Head<'a> {
    cluster: &'a str,
    /// The change's place among those of its commit timestamp (0, 1, …).
    tiebreaker: i32,
    /// Resumes after the change.
    token: String,
    watermark: u64,
}

/// The API's form of one op, if the caller may read its family.
fn api_op(
    m: &Mutation,
    commit_ts: u64,
    readable: Option<&[String]>,
) -> Option<v2::mutation::Mutation> {
    use v2::mutation::Mutation as M;
    use v2::value::Kind;
    let visible = |f: &String| readable.is_none_or(|fs| fs.contains(f));
    let value = |k: Kind| {
        Some(v2::Value {
            kind: Some(k),
            ..Default::default()
        })
    };
    Some(match m {
        Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } if visible(family) => M::SetCell(v2::mutation::SetCell {
            family_name: family.clone(),
            column_qualifier: qualifier.clone(),
            timestamp_micros: timestamp.unwrap_or(commit_ts) as i64,
            value: value.clone(),
        }),
        Mutation::DeleteCells {
            family,
            qualifier,
            range,
        } if visible(family) => M::DeleteFromColumn(v2::mutation::DeleteFromColumn {
            family_name: family.clone(),
            column_qualifier: qualifier.clone(),
            time_range: Some(v2::TimestampRange {
                start_timestamp_micros: range.start as i64,
                end_timestamp_micros: if range.end == u64::MAX {
                    0
                } else {
                    range.end as i64
                },
            }),
        }),
        Mutation::DeleteFamily { family } if visible(family) => {
            M::DeleteFromFamily(v2::mutation::DeleteFromFamily {
                family_name: family.clone(),
            })
        }
        Mutation::DeleteRow => M::DeleteFromRow(v2::mutation::DeleteFromRow {}),
        // As MutateRow takes it (grpc/src/data/mutate.rs).
        Mutation::AddToCell {
            family,
            qualifier,
            timestamp,
            input,
        } if visible(family) => M::AddToCell(v2::mutation::AddToCell {
            family_name: family.clone(),
            column_qualifier: value(Kind::RawValue(qualifier.clone())),
            timestamp: value(Kind::RawTimestampMicros(*timestamp as i64)),
            input: value(Kind::IntValue(*input)),
        }),
        // Ops on families the caller may not read are left out.
        _ => return None,
    })
}

/// The chunks of one op: a `SetCell` whose value is over `chunk` bytes is
/// cut into pieces with `chunk_info` (offset, whole size, last), which a
/// client puts back together; any other op is one chunk.
fn chunks_of(op: v2::mutation::Mutation, chunk: usize) -> Vec<resp::MutationChunk> {
    use v2::mutation::Mutation as M;
    let whole = |op| resp::MutationChunk {
        chunk_info: None,
        mutation: Some(v2::Mutation { mutation: Some(op) }),
    };
    let M::SetCell(set) = op else {
        return vec![whole(op)];
    };
    if set.value.len() <= chunk {
        return vec![whole(M::SetCell(set))];
    }
    let size = set.value.len();
    set.value
        .chunks(chunk)
        .enumerate()
        .map(|(i, piece)| resp::MutationChunk {
            chunk_info: Some(resp::mutation_chunk::ChunkInfo {
                chunked_value_size: size as i32,
                chunked_value_offset: (i * chunk) as i32,
                last_chunk: (i + 1) * chunk >= size,
            }),
            mutation: Some(v2::Mutation {
                mutation: Some(M::SetCell(v2::mutation::SetCell {
                    value: piece.to_vec(),
                    ..set.clone()
                })),
            }),
        })
        .collect()
}

/// Value bytes of a chunk (what sizes a message).
fn chunk_bytes(c: &resp::MutationChunk) -> usize {
    match c.mutation.as_ref().and_then(|m| m.mutation.as_ref()) {
        Some(v2::mutation::Mutation::SetCell(s)) => s.value.len(),
        _ => 0,
    }
}

/// One change as DataChange messages of at most about `chunk` value bytes
/// each: the first has the row, type, commit time, cluster and tiebreaker,
/// the last `done`, the token and the watermark (as the v2 API splits a
/// DataChange).
fn messages(
    r: &ChangeRecord,
    head: &Head<'_>,
    readable: Option<&[String]>,
    chunk: usize,
) -> Vec<v2::ReadChangeStreamResponse> {
    let chunks: Vec<resp::MutationChunk> = r
        .mutations
        .iter()
        .filter_map(|m| api_op(m, r.commit_ts, readable))
        .flat_map(|op| chunks_of(op, chunk))
        .collect();
    // Chunks grouped into messages.
    let mut groups: Vec<Vec<resp::MutationChunk>> = vec![Vec::new()];
    let mut bytes = 0;
    for c in chunks {
        let n = chunk_bytes(&c);
        let last = groups.len() - 1;
        if bytes + n > chunk && !groups[last].is_empty() {
            groups.push(Vec::new());
            bytes = 0;
        }
        bytes += n;
        if let Some(g) = groups.last_mut() {
            g.push(c);
        }
    }
    let n = groups.len();
    groups
        .into_iter()
        .enumerate()
        .map(|(i, chunks)| {
            let (first, last) = (i == 0, i + 1 == n);
            let dc = resp::DataChange {
                r#type: if !first {
                    data_change::Type::Unspecified
                } else if r.gc {
                    data_change::Type::GarbageCollection
                } else {
                    data_change::Type::User
                } as i32,
                source_cluster_id: if first {
                    head.cluster.to_string()
                } else {
                    String::new()
                },
                row_key: if first { r.row.clone() } else { Vec::new() },
                commit_timestamp: first.then(|| ts_of(r.commit_ts)),
                tiebreaker: if first { head.tiebreaker } else { 0 },
                chunks,
                done: last,
                token: if last {
                    head.token.clone()
                } else {
                    String::new()
                },
                estimated_low_watermark: last.then(|| ts_of(head.watermark)),
            };
            v2::ReadChangeStreamResponse {
                stream_record: Some(StreamRecord::DataChange(dc)),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn set(value: Vec<u8>) -> Mutation {
        Mutation::SetCell {
            family: "f".into(),
            qualifier: b"q".to_vec(),
            timestamp: Some(5),
            value,
        }
    }

    #[test]
    fn a_large_value_is_chunked_over_messages_and_put_back_together() {
        let big: Vec<u8> = (0..2500u32).map(|i| i as u8).collect();
        let r = ChangeRecord {
            row: b"r".to_vec(),
            commit_ts: 9,
            gc: false,
            mutations: vec![
                set(b"small".to_vec()),
                set(big.clone()),
                Mutation::DeleteRow,
            ],
        };
        let head = Head {
            cluster: "c1",
            tiebreaker: 2,
            token: "9.3".into(),
            watermark: 8,
        };
        let msgs = messages(&r, &head, None, 1000);
        let dcs: Vec<resp::DataChange> = msgs
            .into_iter()
            .map(|m| match m.stream_record {
                Some(StreamRecord::DataChange(d)) => d,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(dcs.len() >= 3, "{}", dcs.len());
        let (first, last) = (&dcs[0], &dcs[dcs.len() - 1]);
        assert_eq!(first.row_key, b"r");
        assert_eq!(first.source_cluster_id, "c1");
        assert_eq!(first.tiebreaker, 2);
        assert!(first.commit_timestamp.is_some());
        assert!(dcs[..dcs.len() - 1]
            .iter()
            .all(|d| !d.done && d.token.is_empty()));
        assert!(last.done);
        assert_eq!(last.token, "9.3");
        // Put back together, the ops are the record's.
        let mut ops = Vec::new();
        let mut value: Option<Vec<u8>> = None;
        for c in dcs.iter().flat_map(|d| &d.chunks) {
            let Some(v2::mutation::Mutation::SetCell(s)) = c.mutation.clone().unwrap().mutation
            else {
                ops.push("other".to_string());
                continue;
            };
            match &c.chunk_info {
                Some(info) => {
                    let v = value.get_or_insert_with(Vec::new);
                    assert_eq!(info.chunked_value_offset as usize, v.len());
                    assert_eq!(info.chunked_value_size as usize, big.len());
                    v.extend_from_slice(&s.value);
                    if info.last_chunk {
                        assert_eq!(value.take().unwrap(), big);
                        ops.push("big".into());
                    }
                }
                None => ops.push(String::from_utf8(s.value).unwrap()),
            }
        }
        assert_eq!(ops, ["small", "big", "other"]);
    }
}
