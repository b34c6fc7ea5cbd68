//! A log chunk replica's header (superblock and checksum table) mapped
//! writable.
//!
//! An unsynced append to a replica is two writes: its data, then the
//! checksum entry that makes it part of the replica (see `chunk.rs`). On
//! three replicas that is six system calls per append, and the entry's
//! `pwrite` of 16 bytes costs about what the data's does. Through a shared
//! mapping the entry is a store into the same page-cache page: it survives
//! a `kill -9` as the `pwrite` did, an fdatasync of the file writes it, and
//! reads of the file see it. Only the replicas of a log's last chunk are
//! mapped (a few per server), and only while it takes appends.

use std::fs::File;

/// The first `len` bytes of a replica file, mapped shared and writable.
pub(crate) struct HeaderMap {
    map: memmap2::MmapMut,
}

impl HeaderMap {
    /// Maps the header of `file`, which is at least `len` bytes long;
    /// `None` if the system refuses (appends then write their entries).
    pub(crate) fn of(file: &File, len: u64) -> Option<HeaderMap> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a replica file is created with its whole header and is
        // never cut below it (a load or a close cuts only data), so every
        // page of the mapping lies inside the file for the mapping's life.
        // The bytes are only written through `store`, under the replica's
        // I/O lock, as `pwrite`s of the same bytes would be.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(file) };
        match map {
            Ok(map) => Some(HeaderMap { map }),
            Err(e) => {
                log::debug!("mapping a replica header of {len} bytes: {e}; writing it instead");
                None
            }
        }
    }

    /// Stores `bytes` at offset `off` of the header; false if they do not
    /// fit inside it.
    pub(crate) fn store(&mut self, off: u64, bytes: &[u8]) -> bool {
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        match self.map.get_mut(off..off + bytes.len()) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

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
        let mut m = HeaderMap::of(&f, 4096).unwrap();
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
}
