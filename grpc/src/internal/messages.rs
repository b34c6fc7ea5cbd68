//! The internal service's messages: a call names its target (a tablet
//! server of the receiving daemon, or its master) and one operation of the
//! protocol; the reply carries the operation's result, encoded, or the
//! error as the engine would have returned it in process.

use engine::protocol::WireError;
use engine::{Cell, RowMutation, RowTxn, ScanSpec};
use serde::{Deserialize, Serialize};

/// One request.
#[derive(Debug, Serialize, Deserialize)]
pub struct Call {
    /// The tablet server asked (None: the daemon's active master).
    pub server: Option<String>,
    /// What is asked.
    pub op: Op,
}

/// The operations of the tablet-server and master protocol
/// (`engine::protocol`), one variant each.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Op {
    // tablet server: data
    IsServing,
    Apply {
        tablet: u64,
        ms: Vec<RowMutation>,
        sync: bool,
        /// A sequencer in its text form.
        fence: Option<String>,
    },
    ApplyTxns {
        tablet: u64,
        txns: Vec<RowTxn>,
        sync: bool,
    },
    ReadRow {
        tablet: u64,
        #[serde(with = "engine::byte_string")]
        row: Vec<u8>,
        spec: Box<ScanSpec>,
    },
    PeekRow {
        tablet: u64,
        #[serde(with = "engine::byte_string")]
        row: Vec<u8>,
        spec: Box<ScanSpec>,
    },
    ReadColumn {
        tablet: u64,
        #[serde(with = "engine::byte_string")]
        row: Vec<u8>,
        family: String,
        #[serde(with = "engine::byte_string")]
        qualifier: Vec<u8>,
        max_versions: Option<u32>,
    },
    // tablet server: the master's
    /// A tablet's METADATA cell, and the assigning master's lock.
    Load {
        meta: Vec<u8>,
        master: String,
    },
    Unload {
        id: u64,
    },
    DropTablet {
        id: u64,
    },
    /// A table's definition (its name and METADATA cell).
    LearnTable {
        name: String,
        def: Vec<u8>,
    },
    Fence,
    TabletIds,
    Served,
    FilesInFlight,
    Report,
    // tablet server: operators'
    TabletInfos,
    TabletRequests {
        id: u64,
    },
    Sync,
    Flush {
        table: Option<u64>,
    },
    Compact {
        table: u64,
        major: bool,
    },
    SplitNow {
        table: u64,
    },
    SplitAtRows {
        table: u64,
        rows: Vec<Vec<u8>>,
    },
    GroupCommitStats,
    CommitLine,
    Kill,
    // master
    IsActive,
    /// A schema in its stored form.
    CreateTable {
        name: String,
        schema: Vec<u8>,
    },
    DeleteTable {
        name: String,
    },
    SetSchema {
        name: String,
        schema: Vec<u8>,
    },
    MoveTablet {
        table: String,
        row: Vec<u8>,
        to: String,
    },
    TabletSplit {
        server: String,
        parent: u64,
        children: Vec<u64>,
    },
    Wake,
    KillMaster,
    MasterReport,
    // Added after the others, so that their encodings stay as they were.
    UndeleteTable {
        id: u64,
        name: Option<String>,
    },
    PurgeTrash {
        id: u64,
    },
    // tablet server: snapshots' (after the others, so the variants before
    // keep their numbers on the wire)
    HoldWrites {
        table: u64,
        hold_ms: u64,
    },
    ReleaseWrites {
        hold: u64,
    },
    Unpin {
        hold: u64,
    },
    // master: snapshots'
    CloneSnapshot {
        table: String,
        snapshot: String,
        to: String,
    },
    RestoreSnapshot {
        table: String,
        snapshot: String,
    },
    // daemons' cache coherence (docs/coherence.md; after the others, so
    // the variants before keep their numbers on the wire)
    /// The daemon advertised at `addr` caches rows and asks to be told of
    /// this daemon's writes for `lease_ms` (at most 3 s); the reply is the
    /// lease's time left in ms and whether it held without a break.
    Watch {
        addr: String,
        lease_ms: u64,
    },
    /// Rows of `table` changed (`whole`: any row may have); answered once
    /// the receiving daemon's kernel dropped what it caches of them.
    Invalidate {
        table: String,
        rows: Vec<Vec<u8>>,
        whole: bool,
    },
    /// Several tables' invalidations in one message (concurrent writes to
    /// several tables, batched); answered as `Invalidate` is.
    InvalidateMany {
        tables: Vec<Invalidation>,
    },
    // master: snapshots, for a daemon that serves nothing and cannot reach
    // the files (after the others, so the variants before keep their
    // numbers on the wire); manifests go in their file's bytes.
    TakeSnapshot {
        table: String,
        name: String,
        expire_micros: Option<u64>,
        cluster: Option<String>,
    },
    SetSnapshotExpiry {
        table: String,
        name: String,
        expire_micros: Option<u64>,
    },
    SnapshotManifests {
        table: String,
    },
    SnapshotManifest {
        table: String,
        name: String,
    },
    DeleteSnapshot {
        table: String,
        name: String,
    },
}

/// Rows of `table` that changed (`whole`: any row may have).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invalidation {
    pub table: String,
    pub rows: Vec<Vec<u8>>,
    pub whole: bool,
}

/// The answer: the operation's result in bincode, or its error.
#[derive(Debug, Serialize, Deserialize)]
pub struct Reply(#[serde(with = "result_bytes")] pub Result<Vec<u8>, WireError>);

/// A reply's result with its bytes as one byte string (the same bincode
/// layout as a sequence of bytes, but read and written in one piece).
mod result_bytes {
    use engine::protocol::WireError;
    use serde::de::{Deserializer, Visitor};
    use serde::{Deserialize, Serialize, Serializer};

    struct Bytes<'a>(&'a [u8]);

    impl Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(self.0)
        }
    }

    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = ByteBuf;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v.to_vec()))
                }
                fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<ByteBuf, E> {
                    Ok(ByteBuf(v))
                }
            }
            d.deserialize_byte_buf(V)
        }
    }

    pub fn serialize<S: Serializer>(
        r: &Result<Vec<u8>, WireError>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        r.as_ref().map(|v| Bytes(v)).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Result<Vec<u8>, WireError>, D::Error> {
        Ok(Result::<ByteBuf, WireError>::deserialize(d)?.map(|b| b.0))
    }
}

/// A tablet's part of a scan.
#[derive(Debug, Serialize, Deserialize)]
pub struct ScanCall {
    /// The tablet server asked.
    pub server: String,
    /// The tablet.
    pub tablet: u64,
    /// What is read.
    pub spec: ScanSpec,
}

/// One message of a scan's stream: first `Start`, then cells in order.
#[derive(Debug, Serialize, Deserialize)]
pub enum ScanChunk {
    /// The part has started; the tablet's end row (None: the table's last).
    Start {
        /// Where the scan goes on.
        end: Option<Vec<u8>>,
    },
    /// The next cells.
    Cells(Vec<Cell>),
    /// The part failed here.
    Failed(WireError),
    /// The part is complete (a stream that stops without it was cut off).
    End,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_reply_reads_back_and_keeps_the_plain_layout() {
        let ok = Reply(Ok(vec![1, 2, 3, 250]));
        let bytes = bincode::serialize(&ok).unwrap();
        let plain: Result<Vec<u8>, WireError> = Ok(vec![1, 2, 3, 250]);
        assert_eq!(bytes, bincode::serialize(&plain).unwrap());
        let back: Reply = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back.0.unwrap(), vec![1, 2, 3, 250]);
        let err = Reply(Err(WireError::Unavailable("x".into())));
        let back: Reply = bincode::deserialize(&bincode::serialize(&err).unwrap()).unwrap();
        assert!(matches!(back.0, Err(WireError::Unavailable(m)) if m == "x"));
    }

    /// A cell as it was laid out when its byte strings were sequences.
    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct OldCell {
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        timestamp: u64,
        value: Vec<u8>,
    }

    #[test]
    fn byte_strings_keep_the_sequence_layout_both_ways() {
        let value: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let cell = Cell {
            row: b"row\xff".to_vec(),
            family: "cf".into(),
            qualifier: vec![0, 1, 200],
            timestamp: 42,
            value: engine::Value::from(value.clone()),
        };
        let old = OldCell {
            row: cell.row.clone(),
            family: "cf".into(),
            qualifier: cell.qualifier.clone(),
            timestamp: 42,
            value,
        };
        let new_bytes = bincode::serialize(&cell).unwrap();
        assert_eq!(new_bytes, bincode::serialize(&old).unwrap());
        let back: Cell = crate::internal::codec::decode_bounded(&new_bytes).unwrap();
        assert_eq!(back, cell);
        let back: OldCell = bincode::deserialize(&new_bytes).unwrap();
        assert_eq!(back, old);
        let call = Op::ReadColumn {
            tablet: 1,
            row: b"r".to_vec(),
            family: "cf".into(),
            qualifier: b"q".to_vec(),
            max_versions: Some(1),
        };
        let b = bincode::serialize(&call).unwrap();
        let back: Op = crate::internal::codec::decode_bounded(&b).unwrap();
        assert!(
            matches!(back, Op::ReadColumn { row, qualifier, .. } if row == b"r" && qualifier == b"q")
        );
    }

    /// A write's mutation as it was laid out before its byte strings were
    /// serde byte strings.
    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    enum OldMutation {
        SetCell {
            family: String,
            qualifier: Vec<u8>,
            timestamp: Option<u64>,
            value: Vec<u8>,
        },
        DeleteCells {
            family: String,
            qualifier: Vec<u8>,
            range: engine::TimeRange,
        },
    }

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct OldRowMutation {
        row: Vec<u8>,
        mutations: Vec<OldMutation>,
    }

    #[test]
    fn a_writes_byte_strings_keep_the_sequence_layout() {
        let m = engine::RowMutation::new(b"row\xff".to_vec())
            .set_at("cf", vec![0, 1, 200], 7, vec![9u8; 300])
            .delete_cells("cf", b"q".to_vec(), engine::TimeRange::ALL);
        let old = OldRowMutation {
            row: b"row\xff".to_vec(),
            mutations: vec![
                OldMutation::SetCell {
                    family: "cf".into(),
                    qualifier: vec![0, 1, 200],
                    timestamp: Some(7),
                    value: vec![9u8; 300],
                },
                OldMutation::DeleteCells {
                    family: "cf".into(),
                    qualifier: b"q".to_vec(),
                    range: engine::TimeRange::ALL,
                },
            ],
        };
        let b = bincode::serialize(&m).unwrap();
        assert_eq!(b, bincode::serialize(&old).unwrap());
        let back: engine::RowMutation = crate::internal::codec::decode_bounded(&b).unwrap();
        assert_eq!(back, m);
        let back: OldRowMutation = bincode::deserialize(&b).unwrap();
        assert_eq!(back, old);
    }
}
