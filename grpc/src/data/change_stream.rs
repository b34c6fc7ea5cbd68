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
        })
    }

    fn token(&self, p: Position) -> v2::StreamContinuationToken {
        v2::StreamContinuationToken {
            partition: Some(self.partition.clone()),
            token: p.to_token(),
        }
    }

    /// A batch as responses: one DataChange per change, each with the
    /// token after it.
    pub fn data_changes(
        &self,
        b: &ChangeBatch,
        readable: Option<&[String]>,
    ) -> Vec<v2::ReadChangeStreamResponse> {
        let mut at = self.query.after;
        let mut out = Vec::with_capacity(b.records.len());
        for r in &b.records {
            at = at.after_record(r.commit_ts);
            out.push(v2::ReadChangeStreamResponse {
                stream_record: Some(StreamRecord::DataChange(data_change(
                    r,
                    at,
                    b.watermark,
                    readable,
                ))),
            });
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

fn data_change(
    r: &ChangeRecord,
    at: Position,
    watermark: u64,
    readable: Option<&[String]>,
) -> resp::DataChange {
    let visible = |f: &String| readable.is_none_or(|fs| fs.contains(f));
    let chunks = r
        .mutations
        .iter()
        .filter_map(|m| {
            use v2::mutation::Mutation as M;
            let api = match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } if visible(family) => M::SetCell(v2::mutation::SetCell {
                    family_name: family.clone(),
                    column_qualifier: qualifier.clone(),
                    timestamp_micros: timestamp.unwrap_or(r.commit_ts) as i64,
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
                // Aggregates and unreadable families are left out.
                _ => return None,
            };
            Some(resp::MutationChunk {
                chunk_info: None,
                mutation: Some(v2::Mutation {
                    mutation: Some(api),
                }),
            })
        })
        .collect();
    resp::DataChange {
        r#type: if r.gc {
            data_change::Type::GarbageCollection
        } else {
            data_change::Type::User
        } as i32,
        source_cluster_id: String::new(),
        row_key: r.row.clone(),
        commit_timestamp: Some(ts_of(r.commit_ts)),
        tiebreaker: 0,
        chunks,
        done: true,
        token: at.to_token(),
        estimated_low_watermark: Some(ts_of(watermark)),
    }
}
