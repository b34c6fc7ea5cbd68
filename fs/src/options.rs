//! The mount's settings, its operation counters and the result types every
//! layer shares.

use fuser::{Errno, FileAttr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest write the kernel sends in one request.
pub const MAX_WRITE: u32 = 1 << 20;

/// Result of a filesystem operation.
pub type FsResult<T> = Result<T, Errno>;

/// Settings of a mount.
#[derive(Debug, Clone)]
pub struct FsOptions {
    /// How long the kernel may cache attributes.
    pub attr_timeout: Duration,
    /// How long the kernel may cache names.
    pub entry_timeout: Duration,
    /// How long the kernel may cache names and attributes of table, row and
    /// family directories (the daemon invalidates them when it changes them).
    pub dir_timeout: Duration,
    /// How long a writer's open waits for readers that hold the cell through
    /// the page cache to close (see `open_files/pages.rs`).
    pub reader_wait: Duration,
    /// fsync the commit log on every close (not only on fsync).
    pub sync_writes: bool,
    /// Largest cell value (EFBIG above).
    pub max_value_size: usize,
    /// Owner of the root directory.
    pub uid: u32,
    /// Group of the root directory.
    pub gid: u32,
    /// Where `statfs` measures free space (the data directory).
    pub statfs_path: Option<PathBuf>,
    /// `.bigtable/mount`'s text, rendered by whoever mounts (mountd: every
    /// option in effect, as `name=value` lines).
    pub mount_status: String,
    /// Where a `.mutate` batch larger than memory waits for its close (an
    /// unlinked file; None: the system's temp directory).
    pub spool_dir: Option<PathBuf>,
    /// Bounds on what writers may hold in memory.
    pub limits: crate::write_budget::WriteLimits,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            dir_timeout: Duration::from_secs(1),
            reader_wait: Duration::from_secs(1),
            sync_writes: false,
            max_value_size: engine::DEFAULT_MAX_VALUE,
            uid: 0,
            gid: 0,
            statfs_path: None,
            mount_status: String::new(),
            spool_dir: None,
            limits: crate::write_budget::WriteLimits::default(),
        }
    }
}

/// FUSE requests answered, and forgets received (`.bigtable/stats`): what a
/// walk costs per cell. Process-wide, as there is one mount per daemon.
pub static FUSE_REQUESTS: AtomicU64 = AtomicU64::new(0);
pub static FUSE_FORGETS: AtomicU64 = AtomicU64::new(0);

/// Operation counters (`.bigtable/stats`).
#[derive(Default)]
pub struct Stats {
    pub lookups: AtomicU64,
    pub getattrs: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub commits: AtomicU64,
    pub batches: AtomicU64,
    pub batch_rows: AtomicU64,
    pub scans: AtomicU64,
    pub readdirs: AtomicU64,
    pub errors: AtomicU64,
}

impl Stats {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A name the kernel may cache: the attributes and how long.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub attr: FileAttr,
    pub ttl: Duration,
}

/// Microseconds since the epoch as a time.
pub fn micros_to_time(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}
