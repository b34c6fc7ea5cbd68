//! The file layer under every commit log and SSTable.
//!
//! Everything above this crate sees files only through [`FileStore`]: names are
//! slash-separated strings in a flat namespace (never local paths), files are
//! append-only while being written and immutable once sealed, and reads are at
//! an offset. That is the shape GFS gives Bigtable, and it is what HDFS or an
//! S3-compatible object store could implement later.
//!
//! [`LocalStore`] keeps each file as a file under one data directory and does
//! all its I/O through io_uring. [`Cluster`] is the GFS-like layer: a master
//! and one chunkserver per data directory, files split into replicated,
//! checksummed chunks; it is what the engine and the mount run on.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

#[cfg(test)]
mod bench;
mod cluster;
#[cfg(feature = "testing")]
mod crash;
mod error;
mod group_log;
mod io;
mod local;
mod map;
#[cfg(feature = "testing")]
mod mem;
mod name;
#[cfg(feature = "testing")]
mod power;
// Without the `testing` feature no power-cut model can be installed: the
// hooks the I/O layer calls do nothing.
#[cfg(not(feature = "testing"))]
#[path = "power_hooks_off.rs"]
mod power;
mod requests;
mod shared_map;
mod sysio;
mod uring;
mod zeros;

pub use cluster::{
    Cluster, ClusterHealth, ClusterOptions, ScrubHealth, ServerHealth, DEFAULT_CHUNK_SIZE,
};
#[cfg(feature = "testing")]
pub use crash::{CrashReport, CrashStore, OpKind};
pub use error::{Error, Result};
pub use group_log::GroupLog;
pub use io::{IoMode, IoStats, ParseIoModeError};
pub use local::LocalStore;
pub use map::Mapped;
#[cfg(feature = "testing")]
pub use mem::MemStore;
#[cfg(feature = "testing")]
pub use power::{PowerCut, PowerReport};

use std::sync::Arc;

/// A store of named, append-only files.
pub trait FileStore: Send + Sync + 'static {
    /// Creates a new empty file for appending; fails with [`Error::AlreadyExists`]
    /// if the name is taken.
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>>;
    /// Creates a new empty file for many small, often synced appends (a
    /// commit log). A store may make its syncs cheaper than those of
    /// [`FileStore::create`]'s files, with the same promises, by writing
    /// zeros ahead of the data: such a file may end in zeros after a crash.
    fn create_log(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        self.create(name)
    }
    /// Reopens an existing file to append more to it (used for logs).
    fn open_append(&self, name: &str) -> Result<Box<dyn WritableFile>>;
    /// Opens a file for reading at offsets.
    fn open(&self, name: &str) -> Result<Arc<dyn ReadableFile>>;
    /// Deletes a file. Open readers may keep reading it.
    fn delete(&self, name: &str) -> Result<()>;
    /// Deletes files nothing refers to any more (a collector's sweep);
    /// returns each one's result, in order. A deletion a crash undoes
    /// leaves a file that is still unused and is swept again, so a store
    /// need not make each one durable before the next: a local disk syncs
    /// each directory once for the whole batch.
    fn delete_unused(&self, names: &[String]) -> Vec<Result<()>> {
        names.iter().map(|n| self.delete(n)).collect()
    }
    /// Atomically renames `from` to `to`, replacing `to` if it exists.
    fn rename(&self, from: &str, to: &str) -> Result<()>;
    /// Durably writes a small file whole, atomically replacing any file of
    /// that name: readers see the old bytes or the new, never a mix. Local
    /// stores write the bytes aside and rename them over; an object store
    /// writes the object by compare-and-swap, so that a daemon that has lost
    /// the store to another cannot overwrite what the other wrote.
    fn replace(&self, name: &str, bufs: &[&[u8]]) -> Result<()> {
        let tmp = format!("{name}.tmp");
        // A crash may have left the temporary file behind.
        match self.delete(&tmp) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let mut f = self.create(&tmp)?;
        f.append_sync(bufs)?;
        drop(f);
        self.rename(&tmp, name)
    }
    /// Whether a file of that name exists.
    fn exists(&self, name: &str) -> Result<bool>;
    /// Size of a file in bytes.
    fn size(&self, name: &str) -> Result<u64>;
    /// Names of all files whose name starts with `prefix`, sorted.
    fn list(&self, prefix: &str) -> Result<Vec<String>>;
    /// Human-readable health lines for status files (one line per component).
    fn status(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether every append to a log ([`FileStore::create_log`]) is durable
    /// when it returns, so that a sync adds nothing: true of an object
    /// store, where each append is a stored object. A commit log then
    /// batches unsynced writes the way it batches synced ones, since each
    /// append costs a request either way.
    fn durable_appends(&self) -> bool {
        false
    }
    /// Whether several daemons may serve tables from this store at once
    /// (an object store every machine reaches), each fencing a dead
    /// server's logs with [`FileStore::seal_logs`] before recovering them.
    /// A store on this machine's disks is one daemon's alone.
    fn shared_by_daemons(&self) -> bool {
        false
    }
    /// Seals the logs in directory `dir` (names starting with `dir/`)
    /// before another server recovers them: a writer that still appends
    /// there (a server whose machine froze past its lease and woke up)
    /// fails from now on, and so does one creating a new log in `dir`.
    /// Returns how many logs were sealed. A store one daemon owns alone
    /// has nothing to do: that daemon stopped the dead server itself.
    fn seal_logs(&self, dir: &str) -> Result<usize> {
        let _ = dir;
        Ok(0)
    }
}

/// A file being written. Appends are buffered by the implementation only up to
/// the call: when `append` returns the bytes have been handed to the OS (they
/// survive a crash of this process); when `sync` returns they are on stable
/// storage (they survive a crash of the machine).
pub trait WritableFile: Send {
    /// Appends `data` at the end; returns the offset at which it was written.
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        self.append_vectored(&[data])
    }
    /// Appends several buffers as one write (one submission).
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64>;
    /// Appends `bufs` and makes them durable in the same submission (write + linked fsync).
    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Current length of the file.
    fn len(&self) -> u64;
    /// Whether nothing has been written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file open for reading at offsets; shareable between threads.
pub trait ReadableFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; a short file is an error.
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Reads `len` bytes at `offset` for a caller that checks them itself
    /// (an SSTable block carries its own checksum): the store may then skip
    /// its own checks and read only the bytes asked for. `check` is called
    /// on the bytes read; when it fails, the store looks at its copy with
    /// its own checks (and reports it if they fail too) and reads again as
    /// [`ReadableFile::read_at`] does, calling `check` on that. Returns the
    /// last bytes read: the caller learns from its `check` whether they
    /// passed.
    fn read_at_checked(
        &self,
        offset: u64,
        len: usize,
        check: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<u8>> {
        let bytes = self.read_at(offset, len)?;
        check(&bytes);
        Ok(bytes)
    }
    /// Reads several ranges in one submission; results in request order.
    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>>;
    /// Length of the file when it was opened (or now, for files still growing).
    fn len(&self) -> Result<u64>;
    /// Whether the file holds no bytes (by [`ReadableFile::len`]).
    fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// The file's bytes, as long as the reader last saw it (at open, or at
    /// its last [`ReadableFile::len`]), mapped into memory,
    /// for a caller that knows the file never changes once written (an
    /// SSTable): its reads then copy nothing. `None` where the store has no
    /// file to map (the chunk layer, in-memory stores) or the file is empty.
    fn map(&self) -> Option<Arc<Mapped>> {
        None
    }
}
