//! How [`crate::LocalStore`] moves bytes: io_uring or plain syscalls.
//!
//! [`Io`] is the one place that picks the path for each operation, so the
//! store's code is the same in both modes and a benchmark can switch between
//! them with [`IoMode`]. It also counts what actually ran ([`IoStats`]), which
//! is how tests and status files prove io_uring was used.

use crate::{power, sysio, uring};
use std::fmt;
use std::fs::File;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Which kernel interface carries file data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IoMode {
    /// Batched submissions through a per-thread io_uring (the default).
    #[default]
    Uring,
    /// One `pread`/`pwritev`/`fdatasync` system call per operation.
    Syscall,
}

impl fmt::Display for IoMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoMode::Uring => "io_uring",
            IoMode::Syscall => "syscall",
        })
    }
}

/// The text given to [`IoMode::from_str`] names no mode.
#[derive(Debug, thiserror::Error)]
#[error("unknown I/O mode {0:?} (expected io_uring or syscall)")]
pub struct ParseIoModeError(pub String);

impl FromStr for IoMode {
    type Err = ParseIoModeError;
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "io_uring" | "uring" => Ok(IoMode::Uring),
            "syscall" | "sync" => Ok(IoMode::Syscall),
            _ => Err(ParseIoModeError(s.to_string())),
        }
    }
}

/// What a store has done so far, by path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// io_uring submissions (each one `io_uring_enter` batch of requests).
    pub uring_batches: u64,
    /// Requests (SQEs) carried by those batches.
    pub uring_ops: u64,
    /// Operations done with plain system calls (Syscall mode or fallback).
    pub syscall_ops: u64,
}

/// Live counters behind [`IoStats`].
#[derive(Default)]
pub(crate) struct Counters {
    uring_batches: AtomicU64,
    uring_ops: AtomicU64,
    syscall_ops: AtomicU64,
}

impl Counters {
    pub(crate) fn uring_batch(&self, ops: usize) {
        self.uring_batches.fetch_add(1, Ordering::Relaxed);
        self.uring_ops.fetch_add(ops as u64, Ordering::Relaxed);
    }
    fn syscall(&self) {
        self.syscall_ops.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            uring_batches: self.uring_batches.load(Ordering::Relaxed),
            uring_ops: self.uring_ops.load(Ordering::Relaxed),
            syscall_ops: self.syscall_ops.load(Ordering::Relaxed),
        }
    }
}

/// One read of a batch: `len` bytes at `offset` of `file`.
pub(crate) struct ReadReq<'a> {
    pub(crate) file: &'a File,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// One request of a [`Chain`].
pub(crate) enum Step<'a> {
    /// Writes `bufs` back to back at `offset`.
    Write {
        file: &'a File,
        offset: u64,
        bufs: Vec<&'a [u8]>,
    },
    /// fdatasync (`data_only`) or fsync; with `upto` > 0 (io_uring only)
    /// of the file's first `upto` bytes (see [`Chain::sync_upto`]).
    Sync {
        file: &'a File,
        data_only: bool,
        upto: u64,
    },
}

/// Requests that run in order, each only if the one before it succeeded.
#[derive(Default)]
pub(crate) struct Chain<'a> {
    pub(crate) steps: Vec<Step<'a>>,
}

impl<'a> Chain<'a> {
    pub(crate) fn new() -> Self {
        Chain { steps: Vec::new() }
    }

    /// Adds a write of `bufs` at `offset`, split into requests the kernel
    /// takes whole (at most [`MAX_IOV`] buffers and [`MAX_RW`] bytes each).
    pub(crate) fn write(
        &mut self,
        file: &'a File,
        mut offset: u64,
        bufs: &[&'a [u8]],
    ) -> &mut Self {
        let mut cur: Vec<&'a [u8]> = Vec::new();
        let mut bytes = 0usize;
        for b in bufs {
            let mut rest: &'a [u8] = b;
            while !rest.is_empty() {
                if cur.len() == MAX_IOV || bytes == MAX_RW {
                    let n = bytes as u64;
                    self.steps.push(Step::Write {
                        file,
                        offset,
                        bufs: std::mem::take(&mut cur),
                    });
                    offset += n;
                    bytes = 0;
                }
                let take = rest.len().min(MAX_RW - bytes);
                cur.push(&rest[..take]);
                bytes += take;
                rest = &rest[take..];
            }
        }
        if !cur.is_empty() {
            self.steps.push(Step::Write {
                file,
                offset,
                bufs: cur,
            });
        }
        self
    }

    /// Adds an fdatasync (`data_only`) or fsync of `file`.
    pub(crate) fn sync(&mut self, file: &'a File, data_only: bool) -> &mut Self {
        self.steps.push(Step::Sync {
            file,
            data_only,
            upto: 0,
        });
        self
    }

    /// Adds an fdatasync of `file` that writes back only its dirty pages
    /// below `upto` (an io_uring fsync with a range: the journal commit and
    /// the disk's cache flush are those of any fdatasync). A log replica's
    /// zeros ahead of its data are dirty too and would otherwise go to disk
    /// at every sync, only to be overwritten by the next appends and written
    /// again. Without io_uring (or under a power-cut model) the whole file
    /// is synced, which is never less durable.
    pub(crate) fn sync_upto(&mut self, file: &'a File, upto: u64) -> &mut Self {
        self.steps.push(Step::Sync {
            file,
            data_only: true,
            upto,
        });
        self
    }
}

/// Most buffers in one write request (UIO_MAXIOV).
const MAX_IOV: usize = 1024;
/// Most bytes in one write request (the kernel caps a transfer near 2 GiB).
const MAX_RW: usize = 1 << 30;

/// Warn once per process when a thread cannot get a ring; repeating it per
/// operation would flood the log while the fallback keeps working.
static RING_WARNED: AtomicBool = AtomicBool::new(false);

/// Performs positional reads, writes and syncs in the chosen mode.
pub(crate) struct Io {
    mode: IoMode,
    counters: Counters,
}

impl Io {
    /// Uses `mode`, but if io_uring is asked for and this thread cannot set up
    /// a ring (kernel too old, disabled by sysctl or seccomp), warns and uses
    /// syscalls instead.
    pub(crate) fn new(mode: IoMode) -> Io {
        match mode {
            IoMode::Uring => Io::from_probe(uring::probe()),
            IoMode::Syscall => Io::with_mode(IoMode::Syscall),
        }
    }

    fn from_probe(probe: io::Result<()>) -> Io {
        match probe {
            Ok(()) => Io::with_mode(IoMode::Uring),
            Err(e) => {
                log::warn!("io_uring unavailable ({e}); falling back to plain system calls");
                Io::with_mode(IoMode::Syscall)
            }
        }
    }

    fn with_mode(mode: IoMode) -> Io {
        Io {
            mode,
            counters: Counters::default(),
        }
    }

    pub(crate) fn mode(&self) -> IoMode {
        self.mode
    }

    pub(crate) fn stats(&self) -> IoStats {
        self.counters.snapshot()
    }

    /// Reads each `(offset, len)` range; a returned buffer is shorter than
    /// asked only where the file ended first.
    pub(crate) fn read(&self, file: &File, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>> {
        if self.mode == IoMode::Uring {
            match uring::with_ring(|r| r.read(file, ranges, &self.counters)) {
                Ok(res) => return res,
                Err(e) => self.warn_no_ring(&e),
            }
        }
        ranges
            .iter()
            .map(|&(offset, len)| {
                self.counters.syscall();
                sysio::read(file, offset, len)
            })
            .collect()
    }

    /// Writes `bufs` back to back at `offset`, all of them; with `sync` the
    /// data is also made durable before this returns.
    pub(crate) fn write(
        &self,
        file: &File,
        offset: u64,
        bufs: &[&[u8]],
        sync: bool,
    ) -> io::Result<()> {
        if let Some(r) = power::write(file, offset, bufs, sync) {
            return r;
        }
        // An unsynced write only copies into the page cache, which ext4 will
        // not do from io_uring's submitting thread: the ring hands it to a
        // worker thread and back, two context switches that cost more than
        // the copy (measured: unsynced log appends 2-3x faster by pwritev).
        if self.mode == IoMode::Uring && sync {
            match uring::with_ring(|r| r.write(file, offset, bufs, sync, &self.counters)) {
                Ok(res) => return res,
                Err(e) => self.warn_no_ring(&e),
            }
        }
        self.counters.syscall();
        sysio::write(file, offset, bufs)?;
        if sync {
            self.counters.syscall();
            sysio::sync(file, true)?;
        }
        Ok(())
    }

    /// Reads every request (files may differ) in one batch where possible;
    /// each gets its own result. A buffer is short only at end of file.
    pub(crate) fn read_multi(&self, reqs: &[ReadReq<'_>]) -> Vec<io::Result<Vec<u8>>> {
        if self.mode == IoMode::Uring {
            match uring::with_ring(|r| r.read_multi(reqs, &self.counters)) {
                Ok(res) => return res,
                Err(e) => self.warn_no_ring(&e),
            }
        }
        reqs.iter()
            .map(|r| {
                self.counters.syscall();
                sysio::read(r.file, r.offset, r.len)
            })
            .collect()
    }

    /// Runs independent chains of writes and syncs, all in one submission
    /// where possible; each chain gets its own result.
    /// Chains without a sync run by plain system calls, as in [`Io::write`].
    pub(crate) fn run_chains(&self, chains: &[Chain<'_>]) -> Vec<io::Result<()>> {
        if let Some(r) = power::run_chains(chains) {
            return r;
        }
        let syncs = chains
            .iter()
            .any(|c| c.steps.iter().any(|s| matches!(s, Step::Sync { .. })));
        if self.mode == IoMode::Uring && syncs {
            match uring::with_ring(|r| r.run_chains(chains, &self.counters)) {
                Ok(res) => return res,
                Err(e) => self.warn_no_ring(&e),
            }
        }
        chains
            .iter()
            .map(|chain| {
                for step in &chain.steps {
                    self.counters.syscall();
                    match step {
                        Step::Write { file, offset, bufs } => sysio::write(file, *offset, bufs)?,
                        Step::Sync {
                            file, data_only, ..
                        } => sysio::sync(file, *data_only)?,
                    }
                }
                Ok(())
            })
            .collect()
    }

    /// fdatasync (`data_only`) or fsync; the latter also works on directories.
    pub(crate) fn sync(&self, file: &File, data_only: bool) -> io::Result<()> {
        if let Some(r) = power::sync(file, data_only) {
            return r;
        }
        if self.mode == IoMode::Uring {
            match uring::with_ring(|r| r.sync(file, data_only, &self.counters)) {
                Ok(res) => return res,
                Err(e) => self.warn_no_ring(&e),
            }
        }
        self.counters.syscall();
        sysio::sync(file, data_only)
    }

    fn warn_no_ring(&self, e: &io::Error) {
        if !RING_WARNED.swap(true, Ordering::Relaxed) {
            log::warn!("no io_uring on this thread ({e}); using plain system calls here");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_probe_falls_back_to_syscalls() {
        let io = Io::from_probe(Err(io::Error::from_raw_os_error(libc::EPERM)));
        assert_eq!(io.mode(), IoMode::Syscall);
        let f = tempfile::tempfile().unwrap();
        io.write(&f, 0, &[b"abc"], true).unwrap();
        assert_eq!(io.read(&f, &[(1, 2)]).unwrap(), vec![b"bc".to_vec()]);
        let s = io.stats();
        assert_eq!(s.uring_ops, 0);
        assert_eq!(s.syscall_ops, 3);
    }

    #[test]
    fn chains_and_multi_reads_in_both_modes() {
        for mode in [IoMode::Uring, IoMode::Syscall] {
            let io = Io::new(mode);
            let (a, b) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
            let mut ca = Chain::new();
            ca.write(&a, 0, &[b"hello", b"", b" world"])
                .sync(&a, true)
                .write(&a, 64 << 10, &[b"past the range"])
                .sync_upto(&a, 11);
            let mut cb = Chain::new();
            cb.write(&b, 4, &[b"xyz"])
                .write(&b, 0, &[b"abcd"])
                .sync(&b, false);
            let res = io.run_chains(&[ca, cb]);
            assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
            let got = io.read_multi(&[
                ReadReq {
                    file: &a,
                    offset: 6,
                    len: 5,
                },
                ReadReq {
                    file: &b,
                    offset: 0,
                    len: 7,
                },
                ReadReq {
                    file: &b,
                    offset: 5,
                    len: 10,
                },
            ]);
            let got: Vec<Vec<u8>> = got.into_iter().map(|r| r.unwrap()).collect();
            assert_eq!(
                got,
                vec![b"world".to_vec(), b"abcdxyz".to_vec(), b"yz".to_vec()]
            );
        }
    }

    #[test]
    fn a_failing_chain_does_not_fail_the_others() {
        let io = Io::new(IoMode::Uring);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ro"), b"x").unwrap();
        let ro = File::open(dir.path().join("ro")).unwrap();
        let ok = tempfile::tempfile().unwrap();
        let mut bad = Chain::new();
        bad.write(&ro, 0, &[b"y"]).sync(&ro, true);
        let mut good = Chain::new();
        good.write(&ok, 0, &[b"fine"]).sync(&ok, true);
        let res = io.run_chains(&[bad, good]);
        assert_eq!(
            res[0].as_ref().unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert!(res[1].is_ok());
        assert_eq!(io.read(&ok, &[(0, 4)]).unwrap()[0], b"fine");
        if io.mode() == IoMode::Uring {
            // Both chains went out in one submission.
            assert_eq!(io.stats().uring_batches, 2);
        }
    }

    #[test]
    fn chain_write_splits_many_buffers() {
        let f = tempfile::tempfile().unwrap();
        let data: Vec<[u8; 1]> = (0..3000u32).map(|i| [(i % 256) as u8]).collect();
        let bufs: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
        let mut c = Chain::new();
        c.write(&f, 0, &bufs);
        assert_eq!(c.steps.len(), 3);
        let io = Io::new(IoMode::Uring);
        assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
        assert_eq!(io.read(&f, &[(0, 3000)]).unwrap()[0], data.concat());
    }

    #[test]
    fn mode_parses_and_prints() {
        for m in [IoMode::Uring, IoMode::Syscall] {
            assert_eq!(m.to_string().parse::<IoMode>().unwrap(), m);
        }
        assert!("aio".parse::<IoMode>().is_err());
        assert_eq!(IoMode::default(), IoMode::Uring);
    }
}
