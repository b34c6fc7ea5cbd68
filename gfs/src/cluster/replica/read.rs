//! Verified reads of replicas: the blocks that cover a range and their
//! stored checksum entries, read in one batch and checked against the
//! in-memory table.

use super::Replica;
use crate::cluster::chunk::{self, Entry, BLOCK};
use crate::io::{Io, ReadReq};
use std::fs::File;
use std::io;
use std::sync::Arc;

/// Why a replica could not serve a read.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// The bytes on disk do not match their checksums.
    Corrupt(String),
    /// The kernel failed the read.
    Io(io::Error),
    /// The replica holds fewer bytes than asked for.
    Short { have: u64 },
    /// The replica is known bad, stale, or its server is down.
    Unavailable(String),
}

impl std::fmt::Display for ReadFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFail::Corrupt(d) => write!(f, "corrupt: {d}"),
            ReadFail::Io(e) => write!(f, "I/O error: {e}"),
            ReadFail::Short { have } => write!(f, "replica holds only {have} bytes"),
            ReadFail::Unavailable(d) => write!(f, "unavailable: {d}"),
        }
    }
}

impl Replica {
    /// Snapshot of what a read of `[offset, offset+len)` needs, or why it
    /// cannot be served.
    fn plan(&self, offset: u64, len: usize) -> Result<Plan, ReadFail> {
        if self.is_bad() {
            return Err(ReadFail::Unavailable("replica is marked bad".into()));
        }
        self.gate.check_read().map_err(ReadFail::Io)?;
        let st = self.state.read();
        let end = offset
            .checked_add(len as u64)
            .ok_or(ReadFail::Short { have: st.len })?;
        if end > st.len {
            return Err(ReadFail::Short { have: st.len });
        }
        if len == 0 {
            return Ok(Plan {
                first: 0,
                data_len: 0,
                entries: Vec::new(),
            });
        }
        let k0 = offset / BLOCK;
        let k1 = (end - 1) / BLOCK;
        let data_end = ((k1 + 1) * BLOCK).min(st.len);
        Ok(Plan {
            first: k0,
            data_len: (data_end - k0 * BLOCK) as usize,
            entries: st.table[k0 as usize..=k1 as usize].to_vec(),
        })
    }

    fn requests<'a>(&self, file: &'a File, p: &Plan, out: &mut Vec<ReadReq<'a>>) {
        out.push(ReadReq {
            file,
            offset: self.layout.data_off + p.first * BLOCK,
            len: p.data_len,
        });
        out.push(ReadReq {
            file,
            offset: self.layout.entry_off(p.first),
            len: p.entries.len() * chunk::ENTRY_LEN as usize,
        });
    }

    /// Checks the blocks read for a plan; returns the requested bytes.
    fn verify(
        &self,
        p: &Plan,
        offset: u64,
        len: usize,
        data: io::Result<Vec<u8>>,
        sums: io::Result<Vec<u8>>,
    ) -> Result<Vec<u8>, ReadFail> {
        let data = data.map_err(ReadFail::Io)?;
        let sums = sums.map_err(ReadFail::Io)?;
        if data.len() != p.data_len {
            return Err(ReadFail::Corrupt(format!(
                "file holds {} of {} data bytes",
                data.len(),
                p.data_len
            )));
        }
        for (i, want) in p.entries.iter().enumerate() {
            let k = p.first + i as u64;
            let on_disk = sums.get(i * 16..i * 16 + 16).unwrap_or(&[]);
            if on_disk != want.encode() {
                return Err(ReadFail::Corrupt(format!(
                    "checksum entry of block {k} damaged"
                )));
            }
            let start = i * BLOCK as usize;
            let end = (start + BLOCK as usize).min(data.len());
            if self.layout.sum.entry(&data[start.min(end)..end]) != *want {
                return Err(ReadFail::Corrupt(format!("block {k} fails its checksum")));
            }
        }
        // The piece asked for, copied out so that the buffer read goes back
        // whole: shrunk in place, it left holes the next read's larger
        // buffer did not fit, and the heap grew by fresh pages instead.
        let from = (offset - p.first * BLOCK) as usize;
        Ok(data[from..from + len].to_vec())
    }

    /// Reads `len` bytes at chunk offset `offset` without checking them
    /// against the checksum table, for a caller that checks them end to end
    /// (see [`crate::ReadableFile::read_at_checked`]): one read of just those
    /// bytes, where a checked read covers whole 64 KiB blocks and hashes them.
    pub(crate) fn read_unchecked(
        &self,
        io: &Io,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ReadFail> {
        if self.is_bad() {
            return Err(ReadFail::Unavailable("replica is marked bad".into()));
        }
        self.gate.check_read().map_err(ReadFail::Io)?;
        let have = self.len();
        if offset.checked_add(len as u64).is_none_or(|end| end > have) {
            return Err(ReadFail::Short { have });
        }
        let file = self.file().map_err(ReadFail::Io)?;
        let data = io
            .read_multi(&[ReadReq {
                file: &file,
                offset: self.layout.data_off + offset,
                len,
            }])
            .pop()
            .unwrap_or_else(|| Err(io::Error::other("missing read result")));
        let stats = &self.gate.stats;
        match data {
            Ok(d) if d.len() == len => {
                stats.read(len);
                Ok(d)
            }
            Ok(d) => Err(ReadFail::Short {
                have: offset + d.len() as u64,
            }),
            Err(e) => {
                stats.read_error();
                Err(ReadFail::Io(e))
            }
        }
    }

    /// Re-reads one range while holding the write lock, so no append can be
    /// changing the last block or its entry under the check.
    fn read_locked(&self, io: &Io, offset: u64, len: usize) -> Result<Vec<u8>, ReadFail> {
        let _g = self.io_lock.lock();
        let p = self.plan(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let file = self.file().map_err(ReadFail::Io)?;
        let mut reqs = Vec::with_capacity(2);
        self.requests(&file, &p, &mut reqs);
        let mut res = io.read_multi(&reqs).into_iter();
        let (d, s) = (res.next(), res.next());
        let missing = || Err(io::Error::other("missing read result"));
        self.verify(
            &p,
            offset,
            len,
            d.unwrap_or_else(missing),
            s.unwrap_or_else(missing),
        )
    }
}

struct Plan {
    first: u64,
    data_len: usize,
    entries: Vec<Entry>,
}

/// One range of a batched read: `len` bytes at `offset` within the chunk.
pub(crate) struct ReadPiece<'a> {
    pub(crate) replica: &'a Replica,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// Reads and verifies every piece (possibly on many replicas and servers)
/// in one batch of io_uring submissions: for each piece, the blocks that
/// cover it and their stored checksums. A piece that fails its check is read
/// once more under the replica's write lock before it is called corrupt.
pub(crate) fn read_verified(io: &Io, pieces: &[ReadPiece<'_>]) -> Vec<Result<Vec<u8>, ReadFail>> {
    let plans: Vec<Result<(Plan, Arc<File>), ReadFail>> = pieces
        .iter()
        .map(|p| {
            let plan = p.replica.plan(p.offset, p.len)?;
            let file = p.replica.file().map_err(ReadFail::Io)?;
            Ok((plan, file))
        })
        .collect();
    let mut reqs = Vec::new();
    for (p, plan) in pieces.iter().zip(&plans) {
        if let Ok((plan, file)) = plan {
            if p.len > 0 {
                p.replica.requests(file, plan, &mut reqs);
            }
        }
    }
    let mut res = io.read_multi(&reqs).into_iter();
    let missing = || Err(io::Error::other("missing read result"));
    pieces
        .iter()
        .zip(plans)
        .map(|(p, plan)| {
            let (plan, _file) = plan?;
            if p.len == 0 {
                return Ok(Vec::new());
            }
            let d = res.next().unwrap_or_else(missing);
            let s = res.next().unwrap_or_else(missing);
            let r = p.replica;
            let out = match r.verify(&plan, p.offset, p.len, d, s) {
                Err(ReadFail::Corrupt(_)) => r.read_locked(io, p.offset, p.len),
                other => other,
            };
            let stats = &r.gate.stats;
            match &out {
                Ok(b) => stats.read(b.len()),
                Err(ReadFail::Corrupt(_)) => stats.corrupt(),
                Err(ReadFail::Io(_)) => stats.read_error(),
                Err(_) => {}
            }
            out
        })
        .collect()
}
