//! Appends through a shared memory mapping, for commit logs.
//!
//! A commit log's unsynced append must reach the OS before it is
//! acknowledged (it then survives the process being killed), but it need not
//! reach the disk. A `write` system call per append costs more than the rest
//! of a small write. Bytes copied into a shared mapping of the file are in
//! the OS's page cache as soon as the copy ends, with no system call: the
//! kernel writes them back like any dirty page, and keeps them if the process
//! dies. `sync` is an fdatasync, which writes back the mapping's dirty pages
//! too.
//!
//! The file is extended ahead of the appends with `fallocate` (which reserves
//! the blocks, so a full disk fails the extension with ENOSPC instead of
//! faulting a later copy with SIGBUS), a window of [`WINDOW`] bytes at a
//! time, and only the window being appended to is mapped: the pages of a
//! mapping count in the process's resident size, and those behind the window
//! are the kernel's to write back and drop. So a file's size runs ahead of
//! its contents, with zeros after them; dropping the writer cuts the file to
//! its contents, and after a crash a reader finds the zeros (the commit log's
//! reader takes zeros to the end of a file as its end).

use crate::{Error, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// How much of the file is mapped (and reserved ahead) at a time.
const WINDOW: usize = 1 << 20;

/// The mapped window of a file: `len` bytes at `ptr`, from file offset `off`.
struct Window {
    ptr: NonNull<u8>,
    off: usize,
    len: usize,
}

/// A file appended to through a shared mapping (see the module comment).
pub(crate) struct MappedFile {
    file: File,
    window: Window,
    /// Bytes appended: the file's contents end here.
    len: usize,
}

// SAFETY: the mapping is private to this value (nothing else holds its
// address), so moving it to another thread moves sole access with it.
unsafe impl Send for MappedFile {}

impl MappedFile {
    /// Maps `file` (new and empty) for appends; fails if the filesystem
    /// cannot reserve blocks with `fallocate` or map the file, so the caller
    /// can write it with system calls instead.
    pub(crate) fn new(file: File) -> std::io::Result<MappedFile> {
        let window = map(&file, 0, WINDOW)?;
        Ok(MappedFile {
            file,
            window,
            len: 0,
        })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    pub(crate) fn len(&self) -> u64 {
        self.len as u64
    }

    /// Copies `bufs` after the contents; returns where they start.
    pub(crate) fn append(&mut self, name: &str, bufs: &[&[u8]]) -> Result<u64> {
        let n: usize = bufs.iter().map(|b| b.len()).sum();
        let end = self
            .len
            .checked_add(n)
            .ok_or_else(|| Error::io(name, std::io::Error::other("file too large")))?;
        if end > self.window.off + self.window.len {
            self.slide(end).map_err(|e| Error::io(name, e))?;
        }
        let start = self.len;
        let mut at = start - self.window.off;
        for b in bufs {
            // SAFETY: the window covers file offsets `off..off + len` and
            // `start..end` lies inside it (checked above), so the copy stays
            // inside the mapping, which is writable and shared; the source
            // is a slice, which cannot overlap the mapping (nothing else
            // holds its address).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.window.ptr.as_ptr().add(at),
                    b.len(),
                );
            }
            at += b.len();
        }
        self.len = end;
        Ok(start as u64)
    }

    /// Maps a new window from the page holding the end of the contents, long
    /// enough to hold them up to `end`.
    fn slide(&mut self, end: usize) -> std::io::Result<()> {
        let page = page_size();
        let off = self.len / page * page;
        let len = (end - off).div_ceil(WINDOW) * WINDOW;
        let window = map(&self.file, off, len)?;
        unmap(&self.window);
        self.window = window;
        Ok(())
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        unmap(&self.window);
        // Cut the zeros after the contents; a failure leaves them, which a
        // reader takes as the end anyway.
        if let Err(e) = self.file.set_len(self.len as u64) {
            log::warn!("cutting a mapped file to its {} bytes: {e}", self.len);
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(1)
}

/// Reserves file offsets `off..off + len` (growing the file to cover them)
/// and maps them, shared and writable. `off` is a multiple of the page size.
fn map(file: &File, off: usize, len: usize) -> std::io::Result<Window> {
    let too_large = || std::io::Error::other("file too large");
    let start = libc::off_t::try_from(off).map_err(|_| too_large())?;
    let size = libc::off_t::try_from(len).map_err(|_| too_large())?;
    // SAFETY: a plain system call on a descriptor we own.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, start, size) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new mapping of a descriptor we own, at an address the kernel
    // picks; the file covers `off..off + len` (reserved just above).
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            start,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Window {
        ptr: NonNull::new(ptr.cast()).ok_or_else(|| std::io::Error::other("mmap gave null"))?,
        off,
        len,
    })
}

fn unmap(w: &Window) {
    // SAFETY: a live mapping made by `map`, never used again by its owner.
    unsafe {
        libc::munmap(w.ptr.as_ptr().cast(), w.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn new_file(dir: &std::path::Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.join("log"))
            .unwrap()
    }

    #[test]
    fn appends_are_in_the_file_before_the_writer_is_dropped_and_the_zeros_go_at_drop() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MappedFile::new(new_file(dir.path())).unwrap();
        assert_eq!(m.append("log", &[b"hello ", b"world"]).unwrap(), 0);
        assert_eq!(m.append("log", &[b"!"]).unwrap(), 11);
        // Another descriptor reads the page cache: the bytes are there.
        let seen = std::fs::read(dir.path().join("log")).unwrap();
        assert_eq!(seen.len(), WINDOW, "the file runs ahead of its contents");
        assert_eq!(&seen[..12], b"hello world!");
        assert!(seen[12..].iter().all(|&b| b == 0));
        drop(m);
        assert_eq!(
            std::fs::read(dir.path().join("log")).unwrap(),
            b"hello world!"
        );
    }

    #[test]
    fn an_append_larger_than_a_window_lands_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MappedFile::new(new_file(dir.path())).unwrap();
        m.append("log", &[b"head"]).unwrap();
        let big = vec![7u8; 2 * WINDOW + 5];
        assert_eq!(m.append("log", &[&big, b"tail"]).unwrap(), 4);
        drop(m);
        let got = std::fs::read(dir.path().join("log")).unwrap();
        assert_eq!(got.len(), 4 + big.len() + 4);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4 + big.len()].iter().all(|&b| b == 7));
        assert_eq!(&got[4 + big.len()..], b"tail");
    }

    #[test]
    fn the_window_slides_past_its_first_size_and_keeps_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MappedFile::new(new_file(dir.path())).unwrap();
        let mut want = Vec::new();
        let piece: Vec<u8> = (0..=250u8).collect();
        while want.len() < 3 * WINDOW + 17 {
            m.append("log", &[&piece, b"x"]).unwrap();
            want.extend_from_slice(&piece);
            want.push(b'x');
        }
        assert_eq!(m.len(), want.len() as u64);
        drop(m);
        assert_eq!(std::fs::read(dir.path().join("log")).unwrap(), want);
    }
}
