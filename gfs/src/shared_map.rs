//! Ranges of a file mapped shared and writable, which unsynced log appends
//! store into instead of writing: a chunk replica's header (superblock and
//! checksum table) and, on both stores, the window of zeros written ahead of
//! a log's data (see `zeros.rs`).
//!
//! Each buffered `pwrite` of a small record costs far more than copying its
//! bytes (ext4 walks its write path for every call: about 1.3-1.4 µs for
//! 1000 bytes, against 0.17 µs for a store into a mapped page, measured
//! here); an unsynced append to a chunk replica is two of them (its data,
//! then the checksum entry that makes it part of the replica, see
//! `cluster/chunk.rs`), six on three replicas. Through a shared mapping the
//! bytes are stores into the same page-cache pages: they survive a `kill -9`
//! as the `pwrite`s did, an fdatasync of the file writes them, and reads of
//! the file see them. (A `kill -9` in the middle of a store can leave part
//! of a record, never acknowledged: the log's reader drops it as a torn
//! tail or a damaged block, as after a machine crash.) Only a log's last
//! file (or chunk replica) is mapped, only while it takes appends; the data
//! window reaches past the zeros written so far (to the chunk's end, or 16
//! MiB on the local store) so that their renewals need no new mapping, but
//! only pages the appends stored into are ever touched, so a server's mapped
//! pages stay a few megabytes. A sync unmaps the data window first: writeback write-protects each mapped dirty page with a TLB
//! shootdown of its own, where one unmap flushes them all.

use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// A range of a file, mapped shared and writable.
///
/// Its bytes are plain shared memory, never borrowed as a Rust slice: they
/// are written only through `ptr` (by [`SharedMap::store_all`], whose
/// callers serialize their stores) and faulted in by
/// [`SharedMap::populate`], which reads nothing. So a renewal of a log's
/// zeros can fault in pages of the window while the log's appends store
/// into it (with exclusive access, an append that met a renewal wrote
/// instead: 4.5% of the engine's appends on three replicas, each three
/// `pwrite`s).
pub(crate) struct SharedMap {
    /// Owns the mapping (unmapped on drop); not dereferenced after `ptr`
    /// was taken.
    map: memmap2::MmapMut,
    /// The mapping's first byte.
    ptr: NonNull<u8>,
    /// Bytes mapped.
    len: usize,
    /// File offset of the mapping's first byte.
    off: u64,
    /// File offset below which stores may go: the file holds every byte
    /// of the mapping below it. A mapping may reach past the end of the
    /// file (see [`SharedMap::reaching`]); nothing is stored there.
    held: AtomicU64,
}

// SAFETY: the mapping is shared memory owned by `map`, whose lifetime
// bounds every use of `ptr`; stores through `ptr` are serialized by the
// callers of `store_all`, and no Rust reference to the bytes is made.
unsafe impl Send for SharedMap {}
// SAFETY: as for `Send`: `&self` methods only store through `ptr` (callers
// serialize them), read `held` atomically, and advise the kernel.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` bytes of `file` from `off` (rounded down to a page).
    ///
    /// # Safety
    ///
    /// The file must hold the whole range, and must not be cut below its
    /// end for as long as the mapping lives: a store past the end of the
    /// file kills the process (`SIGBUS`).
    pub(crate) unsafe fn range(file: &File, off: u64, len: u64) -> Option<SharedMap> {
        // SAFETY: the caller's promise, for the whole range.
        unsafe { Self::reaching(file, off, len, off + len) }
    }

    /// Maps `len` bytes of `file` from `off` (rounded down to a page), of
    /// which stores may go only below file offset `held` until
    /// [`SharedMap::hold_to`] moves it: a mapping may reach past the end of
    /// the file, so that a file growing ahead of its stores (a log's zeros)
    /// need not be mapped again each time it grows. Pages past the end of
    /// the file are never touched.
    ///
    /// # Safety
    ///
    /// The file must hold every byte of the range below `held`, and must
    /// not be cut below `held` for as long as the mapping lives: a store
    /// past the end of the file kills the process (`SIGBUS`).
    pub(crate) unsafe fn reaching(file: &File, off: u64, len: u64, held: u64) -> Option<SharedMap> {
        let page = page_size();
        let start = off - off % page;
        let len = usize::try_from(off + len - start).ok().filter(|&l| l > 0)?;
        // SAFETY: the caller promises the file covers the range below
        // `held` for the mapping's life; nothing is stored past it.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(start)
                .len(len)
                .map_mut(file)
        };
        match map {
            Ok(mut map) => Some(SharedMap {
                ptr: NonNull::new(map.as_mut_ptr())?,
                len: map.len(),
                map,
                off: start,
                held: AtomicU64::new(held),
            }),
            Err(e) => {
                log::debug!("mapping {len} bytes of a file at {start}: {e}; writing instead");
                None
            }
        }
    }

    /// Lets stores go below file offset `to` (never lowers the mark).
    ///
    /// # Safety
    ///
    /// As for [`SharedMap::reaching`]: the file holds every byte of the
    /// mapping below `to`, and is not cut below it while the mapping lives.
    pub(crate) unsafe fn hold_to(&self, to: u64) {
        self.held.fetch_max(to, Ordering::AcqRel);
    }

    /// Whether file bytes `[off, off + len)` lie inside the mapping, where
    /// the file holds them.
    pub(crate) fn covers(&self, off: u64, len: u64) -> bool {
        let held = self.held.load(Ordering::Acquire);
        off >= self.off && off + len <= held.min(self.end())
    }

    /// File offset just past the mapping.
    fn end(&self) -> u64 {
        self.off + self.len as u64
    }

    /// Faults in, writable, the mapping's pages of file bytes
    /// `[off, off + len)` (those inside it), as stores into them would,
    /// so the stores that follow take no faults. False if the system
    /// refused (nothing is lost: the stores then fault as usual).
    ///
    /// # Safety
    ///
    /// The file holds the range for as long as this runs.
    pub(crate) unsafe fn populate(&self, off: u64, len: u64) -> bool {
        let end = (off + len).min(self.end());
        let start = off.max(self.off);
        if start >= end {
            return true;
        }
        let page = page_size();
        let from = (start - self.off) / page * page;
        let to = (end - self.off).next_multiple_of(page).min(self.len as u64);
        self.map
            .advise_range(
                memmap2::Advice::PopulateWrite,
                from as usize,
                (to - from) as usize,
            )
            .is_ok()
    }

    /// Whether file bytes `[off, off + len)` lie inside the mapping's
    /// reach, held by the file or not.
    pub(crate) fn reaches(&self, off: u64, len: u64) -> bool {
        off >= self.off && off + len <= self.end()
    }

    /// Stores `bytes` at file offset `off`; false if they do not fit
    /// inside the mapping.
    pub(crate) fn store(&self, off: u64, bytes: &[u8]) -> bool {
        self.store_all(off, &[bytes])
    }

    /// Stores `bufs` back to back from file offset `off`; false (and
    /// nothing stored) if they do not all fit inside the mapping. Stores
    /// into one mapping must not run concurrently (callers hold a lock).
    pub(crate) fn store_all(&self, off: u64, bufs: &[&[u8]]) -> bool {
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if !self.covers(off, n) {
            return false;
        }
        let mut at = (off - self.off) as usize;
        for b in bufs {
            // SAFETY: `[at, at + b.len())` lies inside the mapping (checked
            // by `covers` above, the bufs summing to `n`), which `map`
            // keeps alive; the source is a Rust slice, never the mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), self.ptr.as_ptr().add(at), b.len())
            };
            at += b.len();
        }
        true
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    /// A new empty file, open for reading and writing.
    fn new_file(dir: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join("r"))
            .unwrap()
    }

    #[test]
    fn stores_are_what_reads_and_a_reopen_see() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        f.write_all(&[0u8; 8192]).unwrap();
        // SAFETY: the file holds 8192 bytes and is not cut while mapped.
        let m = unsafe { SharedMap::range(&f, 0, 4096) }.unwrap();
        assert!(m.store(100, b"entry"));
        assert!(!m.store(4094, b"past"));
        let mut got = [0u8; 5];
        f.read_exact_at(&mut got, 100).unwrap();
        assert_eq!(&got, b"entry");
        drop(m);
        drop(f);
        let back = std::fs::read(&path).unwrap();
        assert_eq!(&back[100..105], b"entry");
        assert_eq!(back.len(), 8192);
    }

    #[test]
    fn a_range_maps_from_its_page_and_refuses_stores_outside_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = new_file(dir.path());
        f.write_all_at(&[0u8; 3 * 4096], 0).unwrap();
        // SAFETY: the file holds the range and is not cut in this test.
        let m = unsafe { SharedMap::range(&f, 5000, 6000) }.unwrap();
        assert!(m.covers(4096, 10) && m.covers(10_990, 10));
        assert!(!m.covers(4000, 10) && !m.covers(10_995, 10));
        assert!(m.store_all(6000, &[b"ab", b"", b"cd"]));
        assert!(!m.store_all(10_998, &[b"ab", b"cd"]));
        let mut got = [0u8; 4];
        f.read_exact_at(&mut got, 6000).unwrap();
        assert_eq!(&got, b"abcd");
        f.read_exact_at(&mut got, 10_998).unwrap();
        assert_eq!(got, [0u8; 4], "a refused store stores nothing");
    }

    #[test]
    fn populating_pages_changes_nothing_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = new_file(dir.path());
        let bytes: Vec<u8> = (0..4 * 4096u32).map(|i| (i % 253) as u8).collect();
        f.write_all_at(&bytes, 0).unwrap();
        // SAFETY: the file holds 4 pages and is not cut in this test; the
        // mapping reaches two pages past its end.
        let m = unsafe { SharedMap::reaching(&f, 100, 6 * 4096 - 100, 4 * 4096) }.unwrap();
        // SAFETY: the file holds the range.
        assert!(unsafe { m.populate(1000, 2 * 4096) });
        // A range past the mapping's start or end is cut to it.
        // SAFETY: the file holds the range.
        assert!(unsafe { m.populate(0, 4096) });
        let mut back = vec![0u8; bytes.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == bytes, "populating changed the file");
        assert!(m.store(5000, b"after"));
        f.read_exact_at(&mut back[..5], 5000).unwrap();
        assert_eq!(&back[..5], b"after");
    }

    #[test]
    fn stores_go_on_while_another_thread_faults_the_pages_in() {
        const LEN: u64 = 4 << 20;
        let dir = tempfile::tempdir().unwrap();
        let f = new_file(dir.path());
        f.set_len(LEN).unwrap();
        // SAFETY: the file holds LEN bytes and is not cut in this test.
        let m = std::sync::Arc::new(unsafe { SharedMap::range(&f, 0, LEN) }.unwrap());
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let (m2, stop) = (m.clone(), &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: as above.
                    assert!(unsafe { m2.populate(0, LEN) });
                }
            });
            for i in 0..(LEN / 1000) {
                let rec = [(i % 251) as u8; 1000];
                assert!(m.store_all(i * 1000, &[&rec[..500], &rec[500..]]));
            }
            stop.store(true, Ordering::Relaxed);
        });
        let mut back = vec![0u8; LEN as usize];
        f.read_exact_at(&mut back, 0).unwrap();
        for (i, rec) in back.chunks_exact(1000).enumerate() {
            assert!(rec.iter().all(|&b| b == (i % 251) as u8), "record {i}");
        }
    }

    #[test]
    fn a_mapping_past_the_end_of_the_file_stores_only_where_the_file_is() {
        let dir = tempfile::tempdir().unwrap();
        let f = new_file(dir.path());
        f.write_all_at(&[0u8; 4096], 0).unwrap();
        // SAFETY: the file holds the first 4096 bytes and is not cut in
        // this test; the mapping reaches four pages past its end.
        let m = unsafe { SharedMap::reaching(&f, 0, 5 * 4096, 4096) }.unwrap();
        assert!(m.reaches(0, 5 * 4096) && !m.reaches(0, 5 * 4096 + 1));
        assert!(m.store(4090, b"end!!!"));
        // Past what the file holds: refused (a store there would be SIGBUS).
        assert!(!m.store(4094, b"past"));
        assert!(!m.store(8192, b"past"));
        // The file grows; the same mapping takes stores there.
        f.write_all_at(&[0u8; 8192], 4096).unwrap();
        // SAFETY: the file now holds 12288 bytes.
        unsafe { m.hold_to(3 * 4096) };
        assert!(m.store(8192, b"grown"));
        assert!(!m.store(3 * 4096 - 2, b"past"));
        let mut got = [0u8; 5];
        f.read_exact_at(&mut got, 8192).unwrap();
        assert_eq!(&got, b"grown");
        f.read_exact_at(&mut got[..4], 4092).unwrap();
        assert_eq!(&got[..4], b"d!!!");
    }
}
