//! How [`crate::LocalStore`] moves bytes: io_uring or plain syscalls.
//!
//! [`Io`] is the one place that picks the path for each operation, so the
//! store's code is the same in both modes and a benchmark can switch between
//! them with [`IoMode`]. It also counts what actually ran ([`IoStats`]), which
//! is how tests and status files prove io_uring was used.

pub use crate::requests::IoStats;
pub(crate) use crate::requests::{Chain, Counters, ReadReq, Step};
use crate::{power, sysio, uring};
use std::fmt;
use std::fs::File;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

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
