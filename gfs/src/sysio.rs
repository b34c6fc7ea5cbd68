//! The plain-syscall path: `pread`, `pwritev`, `fdatasync`/`fsync`.
//!
//! Used in [`crate::IoMode::Syscall`] (the baseline a benchmark compares
//! io_uring against) and as the fallback where no ring can be set up.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// Most iovecs one `pwritev` accepts (UIO_MAXIOV).
const MAX_IOV: usize = 1024;
/// Consecutive EAGAINs tolerated before giving up, so nothing spins forever.
const MAX_AGAIN: u32 = 1000;

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
    let mut rest: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
    let mut start = 0;
    let mut again = 0;
    while start < rest.len() {
        let iov: Vec<libc::iovec> = rest[start..]
            .iter()
            .take(MAX_IOV)
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
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
        // Skip the buffers written in full, then trim the one cut short.
        while n > 0 && start < rest.len() {
            let b = rest[start];
            if n >= b.len() {
                n -= b.len();
                start += 1;
            } else {
                rest[start] = &b[n..];
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
