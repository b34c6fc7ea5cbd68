//! The plain-syscall path: `pread`, `pwritev`, `fdatasync`/`fsync`.
//!
//! Used in [`crate::IoMode::Syscall`] (the baseline a benchmark compares
//! io_uring against) and as the fallback where no ring can be set up.

use crate::requests::{Chain, Counters, FileIo, ReadReq, Reads, Step, WriteReq};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// Most iovecs one `pwritev` accepts (UIO_MAXIOV).
const MAX_IOV: usize = 1024;
/// Writes of up to this many buffers build their iovecs on the stack.
const SMALL_IOV: usize = 8;
/// Consecutive EAGAINs tolerated before giving up, so nothing spins forever.
const MAX_AGAIN: u32 = 1000;

/// One system call per operation, each counted.
pub(crate) struct Syscalls;

impl FileIo for Syscalls {
    fn read(&self, file: &File, ranges: &[(u64, usize)], ctr: &Counters) -> Reads {
        ranges
            .iter()
            .map(|&(offset, len)| {
                ctr.syscall();
                read(file, offset, len)
            })
            .collect()
    }

    fn write(&self, w: WriteReq<'_>, ctr: &Counters) -> io::Result<()> {
        ctr.syscall();
        write(w.file, w.offset, w.bufs)?;
        if w.sync {
            ctr.syscall();
            self::sync(w.file, true)?;
        }
        Ok(())
    }

    fn read_multi(&self, reqs: &[ReadReq<'_>], ctr: &Counters) -> Vec<io::Result<Vec<u8>>> {
        reqs.iter()
            .map(|r| {
                ctr.syscall();
                read(r.file, r.offset, r.len)
            })
            .collect()
    }

    fn run_chains(&self, chains: &[Chain<'_>], ctr: &Counters) -> Vec<io::Result<()>> {
        chains
            .iter()
            .map(|chain| {
                for step in &chain.steps {
                    ctr.syscall();
                    match step {
                        Step::Write { file, offset, bufs } => write(file, *offset, bufs)?,
                        Step::Sync {
                            file, data_only, ..
                        } => self::sync(file, *data_only)?,
                    }
                }
                Ok(())
            })
            .collect()
    }

    fn sync(&self, file: &File, data_only: bool, ctr: &Counters) -> io::Result<()> {
        ctr.syscall();
        self::sync(file, data_only)
    }
}

/// Reads up to `len` bytes at `offset`; returns fewer only at end of file.
pub(crate) fn read(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    let mut again = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                again = 0;
            }
            Err(e) if retryable(&e, &mut again) => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Writes all of `bufs` back to back at `offset`, resuming after short writes.
pub(crate) fn write(file: &File, mut offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
    // Next buffer to write and how much of it is written already.
    let (mut start, mut skip) = (0, 0);
    let mut again = 0;
    // A commit-log append is one buffer: its iovecs stay on the stack.
    let mut small = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; SMALL_IOV];
    let mut large = Vec::new();
    while start < bufs.len() {
        let pending = &bufs[start..bufs.len().min(start + MAX_IOV)];
        let iov: &mut [libc::iovec] = if pending.len() <= SMALL_IOV {
            &mut small[..pending.len()]
        } else {
            large.resize(pending.len(), small[0]);
            &mut large
        };
        for (i, (v, b)) in iov.iter_mut().zip(pending).enumerate() {
            let b = if i == 0 { &b[skip..] } else { b };
            *v = libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            };
        }
        if iov.iter().all(|v| v.iov_len == 0) {
            start += pending.len();
            skip = 0;
            continue;
        }
        let off =
            libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: every iovec points into a slice of `bufs`, alive and unchanged
        // for the duration of the call; the kernel only reads from them.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                off,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if retryable(&e, &mut again) {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        again = 0;
        let mut n = n as usize;
        offset += n as u64;
        // Skip the buffers written in full, then note how much of the one
        // cut short is written.
        while n > 0 && start < bufs.len() {
            let left = bufs[start].len() - skip;
            if n >= left {
                n -= left;
                start += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// `fdatasync` when `data_only`, else `fsync` (which directories need).
pub(crate) fn sync(file: &File, data_only: bool) -> io::Result<()> {
    let mut again = 0;
    loop {
        let res = if data_only {
            file.sync_data()
        } else {
            file.sync_all()
        };
        match res {
            Err(e) if retryable(&e, &mut again) => {}
            other => return other,
        }
    }
}

/// EINTR is always retried; EAGAIN only a bounded number of times in a row.
fn retryable(e: &io::Error, again: &mut u32) -> bool {
    match e.raw_os_error() {
        Some(libc::EINTR) => true,
        Some(libc::EAGAIN) if *again < MAX_AGAIN => {
            *again += 1;
            std::thread::yield_now();
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_many_buffers_and_read_back() {
        let f = tempfile::tempfile().unwrap();
        // More buffers than one pwritev takes, some empty.
        let data: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![(i % 251) as u8; (i % 3) as usize])
            .collect();
        let bufs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        write(&f, 10, &bufs).unwrap();
        let want: Vec<u8> = data.concat();
        assert_eq!(read(&f, 10, want.len()).unwrap(), want);
        // Past the end the read comes back short, not as an error.
        assert_eq!(read(&f, 10 + want.len() as u64 - 1, 5).unwrap().len(), 1);
        sync(&f, true).unwrap();
        sync(&f, false).unwrap();
    }
}
