//! The write-ahead log: checksummed, length-prefixed records appended to one
//! file and fsync'd before an operation is acknowledged. A torn tail (a crash
//! in the middle of an append) is cut off on recovery.
//!
//! Frame: `[len: u32 LE][seahash(payload): u64 LE][payload]`.

use std::sync::Arc;

use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::types::MAX_CONTENTS;

const HEADER: usize = 12;
/// No record is larger than the biggest contents plus small fixed fields; a
/// length above this is garbage from a torn write.
pub const MAX_PAYLOAD: usize = MAX_CONTENTS + 64 * 1024;

pub fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seahash::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Splits a log into the payloads of its valid prefix; returns them and the
/// length of that prefix. Scanning stops at the first frame that is short,
/// oversized or fails its checksum.
pub fn scan(bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    while bytes.len() - pos >= HEADER {
        let mut len4 = [0u8; 4];
        len4.copy_from_slice(&bytes[pos..pos + 4]);
        let mut sum8 = [0u8; 8];
        sum8.copy_from_slice(&bytes[pos + 4..pos + HEADER]);
        let len = u32::from_le_bytes(len4) as usize;
        let start = pos + HEADER;
        if len == 0 || len > MAX_PAYLOAD || bytes.len() - start < len {
            break;
        }
        let payload = &bytes[start..start + len];
        if seahash::hash(payload) != u64::from_le_bytes(sum8) {
            break;
        }
        out.push(payload);
        pos = start + len;
    }
    (out, pos)
}

/// Where the first whole, valid frame at or after `from` starts. A crash
/// leaves at most one partial frame, at the end (every record is fsynced
/// before the next is written), so a valid frame after a bad one means the
/// bad one was damaged, not torn. Only asked after a bad frame.
pub fn valid_frame_after(bytes: &[u8], from: usize) -> Option<usize> {
    (from..bytes.len().saturating_sub(HEADER)).find(|&pos| {
        let mut len4 = [0u8; 4];
        len4.copy_from_slice(&bytes[pos..pos + 4]);
        let len = u32::from_le_bytes(len4) as usize;
        if len == 0 || len > MAX_PAYLOAD || bytes.len() - pos - HEADER < len {
            return false;
        }
        let mut sum8 = [0u8; 8];
        sum8.copy_from_slice(&bytes[pos + 4..pos + HEADER]);
        seahash::hash(&bytes[pos + HEADER..pos + HEADER + len]) == u64::from_le_bytes(sum8)
    })
}

pub struct Wal {
    disk: Arc<dyn Disk>,
    name: String,
    len: u64,
    /// Why the log can no longer be trusted, if it can't.
    broken: Option<String>,
}

fn ctx(disk: &dyn Disk, name: &str) -> impl Fn(std::io::Error) -> Error {
    let what = format!("{}/{name}", disk.describe());
    move |e| Error::io(what.clone(), e)
}

impl Wal {
    /// Opens the log `name` (a missing log is empty), returning it with the
    /// payloads of its valid records. A torn tail is truncated away; a bad
    /// frame with a valid one after it is damage, and an error.
    pub fn open(disk: Arc<dyn Disk>, name: &str) -> Result<(Wal, Vec<Vec<u8>>)> {
        let ctx = ctx(&*disk, name);
        let bytes = match disk.read(name).map_err(&ctx)? {
            Some(bytes) => bytes,
            None => {
                // A new log's directory entry must be durable before any
                // record in it is acknowledged, or a power cut loses the
                // whole file with its fsync'd records.
                disk.create(name).map_err(&ctx)?;
                disk.sync(name).map_err(&ctx)?;
                disk.sync_dir().map_err(&ctx)?;
                Vec::new()
            }
        };
        let (payloads, valid) = scan(&bytes);
        let payloads: Vec<Vec<u8>> = payloads.into_iter().map(<[u8]>::to_vec).collect();
        if valid < bytes.len() {
            if let Some(next) = valid_frame_after(&bytes, valid + 1) {
                return Err(Error::corruption(format!(
                    "{}/{name}: the frame at byte {valid} is damaged and a valid \
                     frame follows at byte {next}; refusing to drop the records \
                     after it",
                    disk.describe()
                )));
            }
            log::warn!(
                "chubby: {}/{name}: dropping {} bytes of torn log tail after {} records",
                disk.describe(),
                bytes.len() - valid,
                payloads.len()
            );
            disk.set_len(name, valid as u64).map_err(&ctx)?;
            disk.sync(name).map_err(&ctx)?;
        }
        let wal = Wal {
            disk,
            name: name.to_string(),
            len: valid as u64,
            broken: None,
        };
        Ok((wal, payloads))
    }

    /// Atomically replaces the log `name` with an empty one.
    pub fn create_empty(disk: Arc<dyn Disk>, name: &str) -> Result<Wal> {
        let tmp = format!("{name}.tmp");
        let tctx = ctx(&*disk, &tmp);
        disk.create(&tmp).map_err(&tctx)?;
        disk.sync(&tmp).map_err(&tctx)?;
        disk.rename(&tmp, name).map_err(ctx(&*disk, name))?;
        disk.sync_dir().map_err(ctx(&*disk, "."))?;
        Ok(Wal {
            disk,
            name: name.to_string(),
            len: 0,
            broken: None,
        })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    /// Set once a failure left the log in a state later appends cannot build on.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Appends one record and makes it durable. A failed write is cut back
    /// to the previous length so no partial frame precedes later ones (the
    /// log stays usable, e.g. after ENOSPC). A failed fsync, or a failed cut,
    /// marks the log broken: after fsync fails the kernel may have dropped
    /// dirty pages, so nothing more can be promised (fsyncgate).
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        let ctx = ctx(&*self.disk, &self.name);
        if let Some(why) = &self.broken {
            return Err(ctx(std::io::Error::other(format!(
                "log unusable after earlier failure: {why}"
            ))));
        }
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::invalid(format!(
                "log record of {} bytes exceeds {MAX_PAYLOAD}",
                payload.len()
            )));
        }
        let framed = frame(payload);
        if let Err(e) = self.disk.append(&self.name, &framed) {
            if let Err(e2) = self.disk.set_len(&self.name, self.len) {
                self.broken = Some(format!("cutting back a partial record failed: {e2}"));
            }
            return Err(ctx(e));
        }
        if let Err(e) = self.disk.sync(&self.name) {
            self.broken = Some(format!("fsync failed: {e}"));
            return Err(ctx(e));
        }
        self.len += framed.len() as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_stops_at_torn_or_corrupt_frame() {
        let mut log = frame(b"one");
        log.extend(frame(b"two"));
        let full = log.len();
        log.extend(frame(b"three"));
        let (p, valid) = scan(&log);
        assert_eq!(p, vec![&b"one"[..], b"two", b"three"]);
        assert_eq!(valid, log.len());
        // Every proper cut keeps exactly the whole frames before it.
        for cut in full..log.len() {
            let (p, valid) = scan(&log[..cut]);
            assert_eq!(p.len(), 2, "cut at {cut}");
            assert_eq!(valid, full);
        }
        let mut flipped = log.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(scan(&flipped).0.len(), 2);
        // A zero-filled tail (as a crashed filesystem may leave) is not a record.
        let mut zeros = log.clone();
        zeros.extend([0u8; 64]);
        assert_eq!(scan(&zeros).1, log.len());
    }

    #[test]
    fn a_damaged_frame_before_valid_ones_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let disk: Arc<dyn Disk> = Arc::new(crate::disk::LocalDisk::open(dir.path()).unwrap());
        let (mut wal, _) = Wal::open(disk.clone(), "wal").unwrap();
        for p in [&b"one"[..], b"two", b"three"] {
            wal.append(p).unwrap();
        }
        drop(wal);
        let good = std::fs::read(&path).unwrap();
        let second = frame(b"one").len();
        // A flipped bit in the second frame's payload, then in its length.
        for at in [second + HEADER + 1, second + 2] {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            let err = Wal::open(disk.clone(), "wal").err().unwrap();
            assert!(matches!(err, Error::Corruption(_)), "{err}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("wal: the frame at byte {second}")),
                "{msg}"
            );
            // Nothing was cut.
            assert_eq!(std::fs::read(&path).unwrap(), bad);
        }
        // The same damage in the last frame is a torn tail.
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let (_, recs) = Wal::open(disk, "wal").unwrap();
        assert_eq!(recs, vec![b"one".to_vec(), b"two".to_vec()]);
    }

    /// The example in docs/formats/lock-service.md, byte for byte.
    #[test]
    fn frame_bytes_are_as_documented() {
        let mut w = crate::codec::Writer::default();
        w.u64(1);
        crate::record::Record::LockGeneration {
            id: 2,
            generation: 3,
        }
        .encode(&mut w);
        let want: &[u8] = &[
            0x19, 0, 0, 0, // payload length 25
            0x7a, 0x41, 0x77, 0x92, 0x4d, 0xa8, 0x04, 0xf7, // seahash(payload)
            1, 0, 0, 0, 0, 0, 0, 0, // sequence number
            8, // tag: LockGeneration
            2, 0, 0, 0, 0, 0, 0, 0, // node id
            3, 0, 0, 0, 0, 0, 0, 0, // generation
        ];
        assert_eq!(frame(&w.buf), want);
        assert_eq!(MAX_PAYLOAD, 327_680);
    }

    #[test]
    fn open_truncates_tail_and_appends_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let disk: Arc<dyn Disk> = Arc::new(crate::disk::LocalDisk::open(dir.path()).unwrap());
        let (mut wal, recs) = Wal::open(disk.clone(), "wal").unwrap();
        assert!(recs.is_empty());
        wal.append(b"a").unwrap();
        wal.append(b"bb").unwrap();
        let good = wal.len();
        drop(wal);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, &frame(b"ccc")[..7]).unwrap();
        drop(f);
        let (mut wal, recs) = Wal::open(disk.clone(), "wal").unwrap();
        assert_eq!(recs, vec![b"a".to_vec(), b"bb".to_vec()]);
        assert_eq!(wal.len(), good);
        wal.append(b"d").unwrap();
        drop(wal);
        let (_, recs) = Wal::open(disk, "wal").unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2], b"d");
    }
}
