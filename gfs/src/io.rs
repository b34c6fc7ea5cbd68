//! How [`crate::LocalStore`] moves bytes: io_uring or plain syscalls.
//!
//! [`Io`] is the one place that picks the path, so the store's code is the
//! same in both modes and a benchmark can switch between them with
//! [`IoMode`]. Each path implements [`FileIo`]: `sysio::Syscalls`,
//! `uring::UringIo` (which falls back to the former), and in test builds
//! `power::PowerCutIo` decorates either with the power-cut model. `Io` also
//! counts what actually ran ([`IoStats`]), which is how tests and status
//! files prove io_uring was used.

pub use crate::requests::IoStats;
pub(crate) use crate::requests::{Chain, Counters, FileIo, ReadReq, Reads, WriteReq};
use crate::sysio::Syscalls;
use crate::uring::{self, UringIo};
use std::fmt;
use std::fs::File;
use std::io;
use std::str::FromStr;

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

/// The path of a mode: matched on per call, not called through a vtable.
enum Path {
    Uring(UringIo),
    Syscall(Syscalls),
}

impl FileIo for Path {
    fn read(&self, file: &File, ranges: &[(u64, usize)], ctr: &Counters) -> Reads {
        match self {
            Path::Uring(p) => p.read(file, ranges, ctr),
            Path::Syscall(p) => p.read(file, ranges, ctr),
        }
    }

    fn write(&self, w: WriteReq<'_>, ctr: &Counters) -> io::Result<()> {
        match self {
            Path::Uring(p) => p.write(w, ctr),
            Path::Syscall(p) => p.write(w, ctr),
        }
    }

    fn read_multi(&self, reqs: &[ReadReq<'_>], ctr: &Counters) -> Vec<io::Result<Vec<u8>>> {
        match self {
            Path::Uring(p) => p.read_multi(reqs, ctr),
            Path::Syscall(p) => p.read_multi(reqs, ctr),
        }
    }

    fn run_chains(&self, chains: &[Chain<'_>], ctr: &Counters) -> Vec<io::Result<()>> {
        match self {
            Path::Uring(p) => p.run_chains(chains, ctr),
            Path::Syscall(p) => p.run_chains(chains, ctr),
        }
    }

    fn sync(&self, file: &File, data_only: bool, ctr: &Counters) -> io::Result<()> {
        match self {
            Path::Uring(p) => p.sync(file, data_only, ctr),
            Path::Syscall(p) => p.sync(file, data_only, ctr),
        }
    }
}

/// What `Io` runs on: in test builds the power-cut decorator around the
/// mode's path, else the path itself.
#[cfg(feature = "testing")]
type Stack = crate::power::PowerCutIo<Path>;
#[cfg(not(feature = "testing"))]
type Stack = Path;

#[cfg(feature = "testing")]
fn stack(path: Path) -> Stack {
    crate::power::PowerCutIo(path)
}

#[cfg(not(feature = "testing"))]
fn stack(path: Path) -> Stack {
    path
}

/// Performs positional reads, writes and syncs in the chosen mode.
pub(crate) struct Io {
    mode: IoMode,
    counters: Counters,
    path: Stack,
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
        let path = match mode {
            IoMode::Uring => Path::Uring(UringIo),
            IoMode::Syscall => Path::Syscall(Syscalls),
        };
        Io {
            mode,
            counters: Counters::default(),
            path: stack(path),
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
    pub(crate) fn read(&self, file: &File, ranges: &[(u64, usize)]) -> Reads {
        self.path.read(file, ranges, &self.counters)
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
        let w = WriteReq {
            file,
            offset,
            bufs,
            sync,
        };
        self.path.write(w, &self.counters)
    }

    /// Reads every request (files may differ) in one batch where possible;
    /// each gets its own result. A buffer is short only at end of file.
    pub(crate) fn read_multi(&self, reqs: &[ReadReq<'_>]) -> Vec<io::Result<Vec<u8>>> {
        self.path.read_multi(reqs, &self.counters)
    }

    /// Runs independent chains of writes and syncs, all in one submission
    /// where possible; each chain gets its own result.
    pub(crate) fn run_chains(&self, chains: &[Chain<'_>]) -> Vec<io::Result<()>> {
        self.path.run_chains(chains, &self.counters)
    }

    /// fdatasync (`data_only`) or fsync; the latter also works on directories.
    pub(crate) fn sync(&self, file: &File, data_only: bool) -> io::Result<()> {
        self.path.sync(file, data_only, &self.counters)
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
