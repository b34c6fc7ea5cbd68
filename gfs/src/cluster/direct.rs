//! Writing replicas around the page cache (`O_DIRECT`).
//!
//! Three replicas on one machine pay the kernel's buffered write path three
//! times: each replica is its own file, so each append is copied into three
//! sets of page-cache pages, which are then written back. All but one
//! replica of a chunk that is not a log take their unsynced appends (an
//! SSTable's megabytes) with `O_DIRECT` instead, from one aligned copy of
//! the data: the disk reads the bytes from that buffer, nothing is copied
//! into the page cache, and no page of those files is left dirty for
//! writeback. The one buffered replica keeps recent data in the page
//! cache, and readers prefer it. Logs (small appends into zeros kept
//! ahead, see `zeros.rs`) and synced appends stay buffered.
//!
//! `O_DIRECT` wants the file offset, the length and the buffer aligned. A
//! direct append therefore writes whole pages: it starts at the page
//! holding the replica's current end (rewriting the bytes of that page
//! already written, which the chunk's tail holds in memory) and pads its
//! last page with zeros. Those zeros lie past the replica's length, which
//! is read off its checksum table: readers never see them, the next append
//! overwrites them, and the file's next sync, the chunk's seal, the
//! writer's close or a load cuts them (as a log's zeros ahead are cut).
//! The checksum entries stay buffered writes after the data, as for any
//! append. A chunkserver whose directory refuses `O_DIRECT` (tmpfs on
//! older kernels, some overlay filesystems) is probed once at start and
//! written buffered.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// What a direct write's offset, length and buffer are aligned to: the
/// page size, a multiple of every common logical block size.
pub(crate) const ALIGN: u64 = 4096;

/// Opens `path` for writes around the page cache.
pub(crate) fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// Whether files in `dir` take aligned `O_DIRECT` writes: one page is
/// written to a scratch file there, which is then removed.
pub(crate) fn probe(dir: &Path) -> bool {
    let path = dir.join(".direct-probe");
    let ok = (|| -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)?;
        let page = Aligned::new(&[], &[&[0u8; ALIGN as usize]]);
        f.write_all_at(page.bytes(), 0)
    })();
    let _ = std::fs::remove_file(&path);
    ok.is_ok()
}

/// Bytes in a buffer that starts on an [`ALIGN`] boundary and whose length
/// is a multiple of it (zeros at the end). Safe code only: an oversized
/// vector, used from its first aligned byte.
pub(crate) struct Aligned {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    /// `head` then `bufs`, padded with zeros to a multiple of [`ALIGN`].
    /// Only the bytes before the aligned start and the padding are zeroed:
    /// zeroing the whole buffer first (an SSTable's megabyte at a time) was
    /// 3% of the chunk layer's writes with three replicas.
    pub(crate) fn new(head: &[u8], bufs: &[&[u8]]) -> Aligned {
        let a = ALIGN as usize;
        let n = head.len() + bufs.iter().map(|b| b.len()).sum::<usize>();
        let len = n.div_ceil(a) * a;
        // The capacity is never exceeded below, so the buffer never moves
        // and the alignment found here holds.
        let mut raw: Vec<u8> = Vec::with_capacity(len + a);
        let start = raw.as_ptr().align_offset(a).min(a);
        raw.resize(start, 0);
        for b in std::iter::once(head).chain(bufs.iter().copied()) {
            raw.extend_from_slice(b);
        }
        raw.resize(start + len, 0);
        debug_assert_eq!(raw[start..].as_ptr() as usize % a, 0);
        Aligned { raw, start, len }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

/// One append as a direct write: `buf` goes at data offset `at` (the page
/// holding the chunk's end).
pub(crate) struct DirectAppend {
    pub(crate) at: u64,
    pub(crate) buf: Aligned,
}

impl DirectAppend {
    /// The direct write of appending `bufs` at `len`, where `tail` holds
    /// the bytes of the chunk's partial last block (`len % block` of them):
    /// the part of it in the page holding `len` is written again. `None` if
    /// `tail` is not that long (the caller then writes buffered).
    pub(crate) fn new(len: u64, tail: &[u8], block: u64, bufs: &[&[u8]]) -> Option<DirectAppend> {
        if tail.len() as u64 != len % block || !block.is_multiple_of(ALIGN) {
            return None;
        }
        let head = (len % ALIGN) as usize;
        let head = &tail[tail.len() - head..];
        let at = len / ALIGN * ALIGN;
        let buf = Aligned::new(head, bufs);
        Some(DirectAppend { at, buf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_start_and_end_on_a_page() {
        for (head, body) in [(0usize, 1usize), (10, 4086), (4095, 2), (0, 8192), (3, 0)] {
            let h = vec![1u8; head];
            let b = vec![2u8; body];
            let a = Aligned::new(&h, &[&b]);
            let bytes = a.bytes();
            assert_eq!(bytes.as_ptr() as usize % ALIGN as usize, 0);
            assert_eq!(bytes.len() % ALIGN as usize, 0);
            assert!(bytes.len() >= head + body && bytes.len() < head + body + ALIGN as usize);
            assert!(bytes[..head].iter().all(|&x| x == 1));
            assert!(bytes[head..head + body].iter().all(|&x| x == 2));
            assert!(bytes[head + body..].iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn an_append_rewrites_the_page_holding_the_end() {
        let block = 64 << 10;
        let tail: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let d = DirectAppend::new(block + 5000, &tail, block, &[b"abc"]).unwrap();
        assert_eq!(d.at, block + 4096);
        let b = d.buf.bytes();
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[..904], &tail[4096..]);
        assert_eq!(&b[904..907], b"abc");
        assert!(b[907..].iter().all(|&x| x == 0));
        // A tail that does not match the length: no direct write.
        assert!(DirectAppend::new(block + 5000, &tail[1..], block, &[b"abc"]).is_none());
        let d = DirectAppend::new(2 * block, &[], block, &[&[7u8; 4096]]).unwrap();
        assert_eq!((d.at, d.buf.bytes().len()), (2 * block, 4096));
    }

    #[test]
    fn probe_answers_for_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        // Whatever the filesystem says, the probe leaves nothing behind.
        let _ = probe(dir.path());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(!probe(&dir.path().join("missing")));
    }
}
