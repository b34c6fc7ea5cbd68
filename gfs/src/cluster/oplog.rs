//! The master's operation log: every change to the namespace and the chunk
//! map, one framed record each, appended before the change takes effect.
//!
//! Record: `[u32 payload length][u64 seahash of payload][payload]`. A restart
//! loads the newest checkpoint and replays the logs written since. A record
//! cut short at the very end of the last log (the process died while writing
//! it), with no valid record anywhere after it, is a torn tail and is
//! dropped; a bad record anywhere else is
//! corruption and stops the master from starting on wrong metadata, unless
//! it looks torn (see [`looks_torn`]): before an fdatasync the kernel may
//! write the pages of unsynced records back in any order, so a power cut
//! can leave a hole in the middle of the unsynced tail with later records
//! whole after it. Nothing after such a hole was acknowledged.

use super::coding::{Decoder, Encoder};
use super::mirror::Mirrors;
pub(crate) use super::mirror::{log_name, parse_log_name};
use crate::{Error, Result, WritableFile};
use std::sync::Arc;

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

/// What a disk writes atomically, and so the grain of a torn write.
const SECTOR: usize = 512;

/// Whether the bad record at `pos` (whose header claims it ends at `end`)
/// shows what a power cut leaves in an append-only file: part of it in a
/// sector that was written back before the record was appended, or never,
/// reads as zeros from the record's start, or from a sector's start, to the
/// end of that sector. Random damage (a flipped bit) does not zero a piece
/// of 8 bytes or more at such a place.
pub(crate) fn looks_torn(buf: &[u8], pos: usize, end: usize) -> bool {
    let end = end.min(buf.len());
    let mut lo = pos;
    while lo < end {
        let hi = ((lo / SECTOR + 1) * SECTOR).min(end);
        let piece = &buf[lo..hi];
        if piece.len() >= 8.min(end - pos) && piece.iter().all(|&b| b == 0) {
            return true;
        }
        lo = hi;
    }
    false
}

/// The first offset at or after `from` where a whole record lies that
/// verifies and decodes. Only asked after a bad record, so the scan's cost
/// does not matter; 64 bits of checksum plus a decode keep random bytes
/// from passing for a record.
fn valid_frame_after(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len().saturating_sub(HEADER)).find(|&p| {
        let len = u32::from_le_bytes([buf[p], buf[p + 1], buf[p + 2], buf[p + 3]]) as usize;
        let Some(payload) = buf.get(p + HEADER..p + HEADER + len) else {
            return false;
        };
        let mut h = [0u8; 8];
        h.copy_from_slice(&buf[p + 4..p + HEADER]);
        len > 0 && seahash::hash(payload) == u64::from_le_bytes(h) && Op::decode(payload).is_ok()
    })
}

/// Parses a log file. Only the last record may be bad, or one that looks
/// torn (the records after it are dropped too); anything else is an error.
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
            // A record cut short by the end of the file is a torn append only
            // if nothing valid follows it; a whole record further on means
            // the length field itself was damaged.
            if let Some(next) = valid_frame_after(buf, pos + 1) {
                return Err(format!(
                    "record at byte {pos} claims {len} bytes, past the end of the \
                     file, but a valid record follows at byte {next}"
                ));
            }
            return torn(ops);
        };
        let ends_file = HEADER + len == rest.len();
        if seahash::hash(payload) != u64::from_le_bytes(h) {
            if ends_file || looks_torn(buf, pos, pos + HEADER + len) {
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

/// The log file being appended to, in every copy of the master's files.
pub(crate) struct OpLog {
    mirrors: Arc<Mirrors>,
    pub(crate) seq: u64,
    /// One writer per live copy (by copy index).
    writers: Vec<(usize, Box<dyn WritableFile>)>,
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
    pub(crate) fn create(mirrors: &Arc<Mirrors>, seq: u64, lsn: u64) -> Result<OpLog> {
        let writers = mirrors.create_log(seq)?;
        Ok(OpLog {
            mirrors: mirrors.clone(),
            seq,
            writers,
            written: lsn,
            durable: lsn,
            failed: false,
        })
    }

    /// Appends a record (handed to the OS: it survives a crash of this
    /// process); returns its sequence number.
    pub(crate) fn append(&mut self, op: &Op, sync: bool) -> Result<u64> {
        let rec = frame(op);
        self.each("appending to the log", |w| {
            if sync {
                w.append_sync(&[&rec]).map(|_| ())
            } else {
                w.append(&rec).map(|_| ())
            }
        })?;
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
        self.each("syncing the log", |w| w.sync())?;
        self.durable = self.written;
        Ok(())
    }

    /// Runs `f` on every copy's writer; a copy where it fails is dropped
    /// (and lost until the next checkpoint). Fails if every copy failed.
    fn each(
        &mut self,
        what: &str,
        mut f: impl FnMut(&mut Box<dyn WritableFile>) -> Result<()>,
    ) -> Result<()> {
        let mut last = None;
        let mut i = 0;
        while i < self.writers.len() {
            match f(&mut self.writers[i].1) {
                Ok(()) => i += 1,
                Err(e) => {
                    let (copy, _) = self.writers.remove(i);
                    self.mirrors.lose(copy, &format!("{what}: {e}"));
                    last = Some(e);
                }
            }
        }
        if self.writers.is_empty() {
            // The file may end in a partial record: the next change must
            // start a new log (after a checkpoint).
            self.failed = true;
            return Err(last.unwrap_or_else(|| {
                Error::io(
                    "gfs master log",
                    std::io::Error::other("no copy of the log is writable"),
                )
            }));
        }
        Ok(())
    }

    pub(crate) fn lsn(&self) -> u64 {
        self.written
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.writers.iter().map(|(_, w)| w.len()).max().unwrap_or(0)
    }

    /// Starts file `seq` in place of this one. Only after a checkpoint: it
    /// holds everything this log did, so nothing here needs syncing.
    pub(crate) fn switch(&mut self, seq: u64) -> Result<()> {
        let next = OpLog::create(&self.mirrors, seq, self.written)?;
        *self = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileStore;

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

    /// The example in docs/formats/chunk-layer.md, byte for byte.
    #[test]
    fn frame_bytes_are_as_documented() {
        let rec = frame(&Op::Create {
            id: 1,
            name: "a".into(),
        });
        let want: &[u8] = &[
            0x12, 0, 0, 0, // payload length 18
            0x07, 0x99, 0x71, 0xd4, 0xdb, 0xea, 0x99, 0xa3, // seahash(payload)
            1,    // tag: Create
            1, 0, 0, 0, 0, 0, 0, 0, // file id
            1, 0, 0, 0, 0, 0, 0, 0, b'a', // name
        ];
        assert_eq!(rec, want);
        assert_eq!(log_name(7), "oplog-00000000000000000007");
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
        // A hole of zeros in the middle (pages written back out of order
        // before a power cut) ends the log there.
        let second = frame(&ops()[0]).len();
        let mut holed = all.clone();
        holed[second..second + 16].fill(0);
        let p = parse(&holed).unwrap();
        assert_eq!((p.ops.len(), p.good_len), (1, second as u64));
        assert!(p.torn.is_some());
    }

    #[test]
    fn a_damaged_length_before_later_records_is_corruption() {
        let all: Vec<u8> = ops().iter().flat_map(frame).collect();
        // One flipped bit in the second record's length sends it past the
        // end of the file; the records after it are still whole.
        let second = frame(&ops()[0]).len();
        let mut bad = all.clone();
        bad[second + 3] ^= 0x40;
        let err = parse(&bad).err().unwrap();
        assert!(err.contains(&format!("record at byte {second}")), "{err}");
        // The same damage in the last record leaves nothing after it: torn.
        let last = all.len() - frame(ops().last().unwrap()).len();
        let mut bad = all.clone();
        bad[last + 3] ^= 0x40;
        let p = parse(&bad).unwrap();
        assert_eq!((p.ops.len(), p.good_len), (ops().len() - 1, last as u64));
    }

    #[test]
    fn torn_looking_means_zeros_from_the_record_or_a_sector_start() {
        let mut buf = vec![7u8; 3 * SECTOR];
        assert!(!looks_torn(&buf, 100, 3 * SECTOR));
        // Zeros from the record start to the sector end.
        buf[100..SECTOR].fill(0);
        assert!(looks_torn(&buf, 100, 3 * SECTOR));
        // A whole sector of zeros inside the record.
        let mut buf = vec![7u8; 3 * SECTOR];
        buf[SECTOR..2 * SECTOR].fill(0);
        assert!(looks_torn(&buf, 100, 3 * SECTOR));
        // Zeros in the middle of a sector, or too few, are damage.
        let mut buf = vec![7u8; 3 * SECTOR];
        buf[200..300].fill(0);
        buf[2 * SECTOR..2 * SECTOR + 4].fill(0);
        assert!(!looks_torn(&buf, 100, 3 * SECTOR));
    }

    #[test]
    fn log_appends_and_switches() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().join("a"), dir.path().join("b")];
        let mirrors = Arc::new(Mirrors::open(&dirs, crate::IoMode::Uring));
        let mut log = OpLog::create(&mirrors, 1, 0).unwrap();
        assert_eq!(log.append(&ops()[0], false).unwrap(), 1);
        assert_eq!(log.append(&ops()[1], true).unwrap(), 2);
        log.sync_to(2).unwrap();
        log.switch(2).unwrap();
        assert_eq!(log.append(&ops()[2], false).unwrap(), 3);
        for d in &dirs {
            let store = crate::LocalStore::open(d).unwrap();
            let names = store.list("oplog-").unwrap();
            assert_eq!(names, vec![log_name(1), log_name(2)]);
            assert_eq!(parse_log_name(&names[1]), Some(2));
            let buf = std::fs::read(d.join(log_name(1))).unwrap();
            assert_eq!(parse(&buf).unwrap().ops, ops()[..2].to_vec());
        }
        // A copy that fails is dropped; the others go on.
        std::fs::remove_dir_all(&dirs[1]).unwrap();
        log.switch(3).unwrap();
        assert_eq!(mirrors.live(), 1);
        assert_eq!(log.append(&ops()[3], true).unwrap(), 4);
        assert!(dirs[0].join(log_name(3)).is_file());
    }
}
