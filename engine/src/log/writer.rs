//! Frames records into the block format of [`super::format`] and appends them.

use super::format::{checksum, BLOCK_SIZE, FIRST, FULL, HEADER_SIZE, LAST, MIDDLE, XXH3};
use crate::Result;
use gfs::WritableFile;

/// Appends framed records to one log file.
///
/// Each call to [`LogWriter::add_records`] issues exactly one append (or one
/// append+fsync) however many records it carries: that is what makes group
/// commit pay for one write per group.
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    name: String,
    /// Offset within the current block where the next header goes.
    block_offset: usize,
    /// Set when an append failed: the file may end in a partial write, so
    /// nothing more may be appended after it (a new file must be started).
    failed: bool,
    /// The file's length at its last successful sync.
    synced_len: u64,
    buf: Vec<u8>,
}

impl LogWriter {
    /// Writes to `file` (named `name` in messages), continuing its block
    /// layout if it is not empty.
    pub fn new(file: Box<dyn WritableFile>, name: impl Into<String>) -> Self {
        let block_offset = (file.len() % BLOCK_SIZE as u64) as usize;
        let synced_len = file.len();
        LogWriter {
            file,
            name: name.into(),
            block_offset,
            failed: false,
            synced_len,
            buf: Vec::new(),
        }
    }

    /// Frames every payload into one buffer and appends it in one call; with
    /// `sync`, the same submission also makes it durable.
    pub fn add_records(&mut self, payloads: &[Vec<u8>], sync: bool) -> Result<()> {
        if self.failed {
            return Err(gfs::Error::Io {
                name: self.name.clone(),
                source: std::io::Error::other("an earlier append to this log failed"),
            }
            .into());
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let mut offset = self.block_offset;
        for p in payloads {
            frame(p, &mut buf, &mut offset);
        }
        let res = if buf.is_empty() {
            if sync {
                self.file.sync()
            } else {
                Ok(())
            }
        } else if sync {
            self.file.append_sync(&[&buf]).map(|_| ())
        } else {
            self.file.append_vectored(&[&buf]).map(|_| ())
        };
        // Keep a modest buffer around for the next group, not a huge one.
        if buf.capacity() <= 4 * 1024 * 1024 {
            self.buf = buf;
        }
        match res {
            Ok(()) => {
                self.block_offset = offset;
                if sync {
                    self.synced_len = self.file.len();
                }
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e.into())
            }
        }
    }

    /// Makes everything appended so far durable.
    pub fn sync(&mut self) -> Result<()> {
        match self.file.sync() {
            Ok(()) => {
                self.synced_len = self.file.len();
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e.into())
            }
        }
    }

    /// Bytes appended since the last successful sync.
    pub fn unsynced_len(&self) -> u64 {
        self.len().saturating_sub(self.synced_len)
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether nothing was written to the file.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an append failed (the writer refuses further appends).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// The file's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Appends the physical records of one payload to `out`; `offset` is the
/// position within the current block and is advanced.
pub(super) fn frame(payload: &[u8], out: &mut Vec<u8>, offset: &mut usize) {
    let mut left = payload;
    let mut begin = true;
    loop {
        let leftover = BLOCK_SIZE - *offset;
        if leftover < HEADER_SIZE {
            // Too small for a header: pad, and start the next block.
            out.resize(out.len() + leftover, 0);
            *offset = 0;
        }
        let avail = BLOCK_SIZE - *offset - HEADER_SIZE;
        let n = left.len().min(avail);
        let end = n == left.len();
        let ty = match (begin, end) {
            (true, true) => FULL,
            (true, false) => FIRST,
            (false, true) => LAST,
            (false, false) => MIDDLE,
        };
        let start = out.len();
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.push(ty | XXH3);
        out.extend_from_slice(&left[..n]);
        let sum = checksum(&out[start + 6..]);
        out[start..start + 4].copy_from_slice(&sum.to_le_bytes());
        *offset += HEADER_SIZE + n;
        left = &left[n..];
        begin = false;
        if end {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_pad_and_split() {
        let mut out = Vec::new();
        let mut off = BLOCK_SIZE - HEADER_SIZE - 10;
        frame(&[1; 10], &mut out, &mut off);
        assert_eq!(off, BLOCK_SIZE);
        assert_eq!(out.len(), HEADER_SIZE + 10);
        assert_eq!(out[6], FULL | XXH3);
        // A full block: the next record starts at a fresh block.
        frame(&[2; 5], &mut out, &mut off);
        assert_eq!(off, HEADER_SIZE + 5);
        // 3 bytes left: padded with zeros.
        let mut out = Vec::new();
        let mut off = BLOCK_SIZE - 3;
        frame(&[3; 1], &mut out, &mut off);
        assert_eq!(&out[..3], &[0, 0, 0]);
        assert_eq!(out[3 + 6], FULL | XXH3);
        // Exactly a header left: an empty FIRST fragment, then LAST.
        let mut out = Vec::new();
        let mut off = BLOCK_SIZE - HEADER_SIZE;
        frame(&[4; 9], &mut out, &mut off);
        assert_eq!(out[6], FIRST | XXH3);
        assert_eq!(u16::from_le_bytes([out[4], out[5]]), 0);
        assert_eq!(out[HEADER_SIZE + 6], LAST | XXH3);
        // A payload of three blocks' worth.
        let mut out = Vec::new();
        let mut off = 0;
        frame(&vec![5; 3 * BLOCK_SIZE], &mut out, &mut off);
        assert_eq!(out[6], FIRST | XXH3);
        assert_eq!(out[BLOCK_SIZE + 6], MIDDLE | XXH3);
        assert_eq!(out[3 * BLOCK_SIZE + 6], LAST | XXH3);
        assert_eq!(out.len(), 3 * BLOCK_SIZE + 4 * HEADER_SIZE);
    }
}
