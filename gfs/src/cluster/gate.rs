//! What every replica of a chunkserver consults before I/O (the `Gate`:
//! up or not, an injected fault) and the server's counters: shared by the
//! server and its replicas, so neither imports the other.

use super::fds::FdCache;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// A fault injected into one chunkserver, to rehearse failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every write fails with ENOSPC; reads still work.
    DiskFull,
    /// Every read and write fails with EIO.
    IoError,
}

/// What a chunkserver has done, for status lines.
#[derive(Default)]
pub(crate) struct ServerStats {
    pub(crate) reads: AtomicU64,
    pub(crate) read_bytes: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    pub(crate) read_errors: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    pub(crate) corrupt: AtomicU64,
}

impl ServerStats {
    pub(crate) fn read(&self, bytes: usize) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.read_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
    pub(crate) fn write(&self, bytes: u64) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.write_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    pub(crate) fn read_error(&self) {
        self.read_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn write_error(&self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn corrupt(&self) {
        self.corrupt.fetch_add(1, Ordering::Relaxed);
    }
}

/// What every replica of a server consults before I/O: whether the server
/// is up, and any injected fault. Shared by the server and its replicas.
pub(crate) struct Gate {
    pub(crate) server: usize,
    /// Open replica files (shared by every server of a cluster).
    pub(crate) fds: Arc<FdCache>,
    offline: AtomicBool,
    fault: AtomicU8,
    /// The server's directory takes `O_DIRECT` writes (probed at start;
    /// see `direct.rs`).
    direct: AtomicBool,
    pub(crate) stats: ServerStats,
}

const NO_FAULT: u8 = 0;
const FAULT_FULL: u8 = 1;
const FAULT_EIO: u8 = 2;

impl Gate {
    pub(crate) fn new(server: usize, fds: Arc<FdCache>) -> Gate {
        Gate {
            server,
            fds,
            offline: AtomicBool::new(false),
            fault: AtomicU8::new(NO_FAULT),
            direct: AtomicBool::new(false),
            stats: ServerStats::default(),
        }
    }

    pub(crate) fn fault(&self) -> Option<Fault> {
        match self.fault.load(Ordering::Acquire) {
            FAULT_FULL => Some(Fault::DiskFull),
            FAULT_EIO => Some(Fault::IoError),
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn set_offline(&self, offline: bool) {
        self.offline.store(offline, Ordering::Release);
    }

    #[cfg(test)]
    pub(crate) fn inject(&self, fault: Option<Fault>) {
        let v = match fault {
            None => NO_FAULT,
            Some(Fault::DiskFull) => FAULT_FULL,
            Some(Fault::IoError) => FAULT_EIO,
        };
        self.fault.store(v, Ordering::Release);
    }

    /// Whether replicas here may be written around the page cache.
    pub(crate) fn direct(&self) -> bool {
        self.direct.load(Ordering::Acquire)
    }

    pub(crate) fn set_direct(&self, on: bool) {
        self.direct.store(on, Ordering::Release);
    }

    pub(crate) fn is_offline(&self) -> bool {
        self.offline.load(Ordering::Acquire)
    }

    pub(crate) fn check_read(&self) -> io::Result<()> {
        if self.is_offline() {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!("chunkserver {} is offline", self.server),
            ));
        }
        if self.fault() == Some(Fault::IoError) {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    pub(crate) fn check_write(&self) -> io::Result<()> {
        self.check_read()?;
        if self.fault() == Some(Fault::DiskFull) {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}
