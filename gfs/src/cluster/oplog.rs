//! The master's operation log: every change to the namespace and the chunk
//! map, one framed record each, appended before the change takes effect.
//!
//! Record: `[u32 payload length][u64 seahash of payload][payload]`. A restart
//! loads the newest checkpoint and replays the logs written since. A record
//! cut short at the very end of the last log (the process died while writing
//! it) is a torn tail and is dropped; a bad record anywhere else is
//! corruption and stops the master from starting on wrong metadata.

use super::coding::{Decoder, Encoder};
use crate::{FileStore, LocalStore, Result, WritableFile};

/// One change to the master's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A new empty file.
    Create { id: u64, name: String },
    /// A new chunk at the end of `file`; the chunk before it (if any) is
    /// sealed at `prev_len` bytes. New chunks start at version 1.
    AddChunk {
        file: u64,
        handle: u64,
        prev_len: Option<u64>,
    },
    /// A chunk's version after a lease grant or a replica was dropped.
    SetVersion { handle: u64, version: u64 },
    /// `from` takes the name `to`; a file called `to` goes to the trash.
    Rename { from: String, to: String, at: u64 },
    /// The file goes to the trash (reclaimed later by garbage collection).
    Delete { name: String, at: u64 },
    /// A trashed file and its chunks are forgotten.
    Purge { file: u64 },
    /// Chunk handles below `upto` may be in use (by replicas created before
    /// their chunk was logged): never hand them out again, even after a
    /// crash, so an orphan replica can never pass for a new chunk.
    ReserveHandles { upto: u64 },
}

const CREATE: u8 = 1;
const ADD_CHUNK: u8 = 2;
const SET_VERSION: u8 = 3;
const RENAME: u8 = 4;
const DELETE: u8 = 5;
const PURGE: u8 = 6;
const RESERVE_HANDLES: u8 = 7;
const HEADER: usize = 12;

impl Op {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::default();
        match self {
            Op::Create { id, name } => {
                e.u8(CREATE).u64(*id).str(name);
            }
            Op::AddChunk {
                file,
                handle,
                prev_len,
            } => {
                e.u8(ADD_CHUNK).u64(*file).u64(*handle);
                match prev_len {
                    Some(l) => e.u8(1).u64(*l),
                    None => e.u8(0),
                };
            }
            Op::SetVersion { handle, version } => {
                e.u8(SET_VERSION).u64(*handle).u64(*version);
            }
            Op::Rename { from, to, at } => {
                e.u8(RENAME).str(from).str(to).u64(*at);
            }
            Op::Delete { name, at } => {
                e.u8(DELETE).str(name).u64(*at);
            }
            Op::Purge { file } => {
                e.u8(PURGE).u64(*file);
            }
            Op::ReserveHandles { upto } => {
                e.u8(RESERVE_HANDLES).u64(*upto);
            }
        }
        e.buf
    }

    pub(crate) fn decode(b: &[u8]) -> std::result::Result<Op, String> {
        let mut d = Decoder::new(b);
        let op = match d.u8()? {
            CREATE => Op::Create {
                id: d.u64()?,
                name: d.str()?,
            },
            ADD_CHUNK => Op::AddChunk {
                file: d.u64()?,
                handle: d.u64()?,
                prev_len: match d.u8()? {
                    0 => None,
                    1 => Some(d.u64()?),
                    t => return Err(format!("bad option tag {t}")),
                },
            },
            SET_VERSION => Op::SetVersion {
                handle: d.u64()?,
                version: d.u64()?,
            },
            RENAME => Op::Rename {
                from: d.str()?,
                to: d.str()?,
                at: d.u64()?,
            },
            DELETE => Op::Delete {
                name: d.str()?,
                at: d.u64()?,
            },
            PURGE => Op::Purge { file: d.u64()? },
            RESERVE_HANDLES => Op::ReserveHandles { upto: d.u64()? },
            t => return Err(format!("unknown op {t}")),
        };
        d.done()?;
        Ok(op)
    }
}

/// The framed bytes of one record.
pub(crate) fn frame(op: &Op) -> Vec<u8> {
    let payload = op.encode();
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seahash::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

/// The records of one log file.
pub(crate) struct Parsed {
    pub(crate) ops: Vec<Op>,
    /// Bytes of whole, valid records.
    pub(crate) good_len: u64,
    /// Set when the file ends in a torn record (how many bytes it held).
    pub(crate) torn: Option<u64>,
}

/// Parses a log file. Only the last record may be bad (torn); anything else
/// is an error.
pub(crate) fn parse(buf: &[u8]) -> std::result::Result<Parsed, String> {
    let mut ops = Vec::new();
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let torn = |ops| {
            Ok(Parsed {
                ops,
                good_len: pos as u64,
                torn: Some(rest.len() as u64),
            })
        };
        if rest.len() < HEADER {
            return torn(ops);
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let mut h = [0u8; 8];
        h.copy_from_slice(&rest[4..12]);
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return torn(ops);
        };
        let ends_file = HEADER + len == rest.len();
        if seahash::hash(payload) != u64::from_le_bytes(h) {
            if ends_file {
                return torn(ops);
            }
            return Err(format!("record at byte {pos} fails its checksum"));
        }
        ops.push(Op::decode(payload).map_err(|e| format!("record at byte {pos}: {e}"))?);
        pos += HEADER + len;
    }
    Ok(Parsed {
        ops,
        good_len: pos as u64,
        torn: None,
    })
}

pub(crate) fn log_name(seq: u64) -> String {
    format!("oplog-{seq:020}")
}

pub(crate) fn parse_log_name(name: &str) -> Option<u64> {
    name.strip_prefix("oplog-")?.parse().ok()
}

/// The log file being appended to.
pub(crate) struct OpLog {
    store: LocalStore,
    pub(crate) seq: u64,
    writer: Box<dyn WritableFile>,
    /// Sequence number of the last record appended (across files).
    written: u64,
    /// ... and of the last one known durable.
    durable: u64,
    /// An append failed: the file may end in a partial record, so the next
    /// change must start a new log (after a checkpoint).
    pub(crate) failed: bool,
}

impl OpLog {
    /// Starts log file `seq` (which must not exist); `lsn` continues the
    /// numbering of records.
    pub(crate) fn create(store: &LocalStore, seq: u64, lsn: u64) -> Result<OpLog> {
        let mut writer = store.create(&log_name(seq))?;
        // Make the new (empty) file's name durable now.
        writer.sync()?;
        Ok(OpLog {
            store: store.clone(),
            seq,
            writer,
            written: lsn,
            durable: lsn,
            failed: false,
        })
    }

    /// Appends a record (handed to the OS: it survives a crash of this
    /// process); returns its sequence number.
    pub(crate) fn append(&mut self, op: &Op, sync: bool) -> Result<u64> {
        let rec = frame(op);
        let res = if sync {
            self.writer.append_sync(&[&rec])
        } else {
            self.writer.append(&rec)
        };
        if let Err(e) = res {
            self.failed = true;
            return Err(e);
        }
        self.written += 1;
        if sync {
            self.durable = self.written;
        }
        Ok(self.written)
    }

    /// Makes every record up to `lsn` durable.
    pub(crate) fn sync_to(&mut self, lsn: u64) -> Result<()> {
        if self.durable >= lsn {
            return Ok(());
        }
        if let Err(e) = self.writer.sync() {
            self.failed = true;
            return Err(e);
        }
        self.durable = self.written;
        Ok(())
    }

    pub(crate) fn lsn(&self) -> u64 {
        self.written
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.writer.len()
    }

    /// Starts file `seq` in place of this one. Only after a checkpoint: it
    /// holds everything this log did, so nothing here needs syncing.
    pub(crate) fn switch(&mut self, seq: u64) -> Result<()> {
        let next = OpLog::create(&self.store, seq, self.written)?;
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Vec<Op> {
        vec![
            Op::Create {
                id: 1,
                name: "log/000001.log".into(),
            },
            Op::AddChunk {
                file: 1,
                handle: 9,
                prev_len: None,
            },
            Op::AddChunk {
                file: 1,
                handle: 10,
                prev_len: Some(12345),
            },
            Op::SetVersion {
                handle: 9,
                version: 3,
            },
            Op::Rename {
                from: "a".into(),
                to: "b".into(),
                at: 77,
            },
            Op::Delete {
                name: "b".into(),
                at: 78,
            },
            Op::Purge { file: 1 },
            Op::ReserveHandles { upto: 4096 },
        ]
    }

    #[test]
    fn ops_roundtrip() {
        for op in ops() {
            assert_eq!(Op::decode(&op.encode()).unwrap(), op);
        }
        assert!(Op::decode(&[99]).is_err());
        let mut extra = ops()[0].encode();
        extra.push(0);
        assert!(Op::decode(&extra).is_err());
    }

    #[test]
    fn torn_tail_is_dropped_and_middle_damage_is_refused() {
        let all: Vec<u8> = ops().iter().flat_map(frame).collect();
        let p = parse(&all).unwrap();
        assert_eq!((p.ops, p.good_len, p.torn), (ops(), all.len() as u64, None));
        let last_start = all.len() - frame(ops().last().unwrap()).len();
        // Every cut inside the last record: all earlier records survive.
        for cut in last_start..all.len() {
            let p = parse(&all[..cut]).unwrap();
            assert_eq!(p.ops.len(), ops().len() - 1, "cut {cut}");
            assert_eq!(p.good_len, last_start as u64);
            assert_eq!(p.torn.is_some(), cut > last_start);
        }
        // A damaged last record is a torn tail too.
        let mut bad = all.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&bad).unwrap().ops.len(), ops().len() - 1);
        // Damage in the middle is corruption.
        let mut bad = all.clone();
        bad[HEADER + 2] ^= 1;
        assert!(parse(&bad).is_err());
    }

    #[test]
    fn log_appends_and_switches() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        let mut log = OpLog::create(&store, 1, 0).unwrap();
        assert_eq!(log.append(&ops()[0], false).unwrap(), 1);
        assert_eq!(log.append(&ops()[1], true).unwrap(), 2);
        log.sync_to(2).unwrap();
        log.switch(2).unwrap();
        assert_eq!(log.append(&ops()[2], false).unwrap(), 3);
        let names = store.list("oplog-").unwrap();
        assert_eq!(names, vec![log_name(1), log_name(2)]);
        assert_eq!(parse_log_name(&names[1]), Some(2));
        let r = store.open(&log_name(1)).unwrap();
        let buf = r.read_at(0, r.len().unwrap() as usize).unwrap();
        assert_eq!(parse(&buf).unwrap().ops, ops()[..2].to_vec());
    }
}
