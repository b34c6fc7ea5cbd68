//! What operations hand to the FUSE adapter, and the `setattr` request:
//! plain data shared by the data path, the lock directory and the adapter.

use fuser::{FileAttr, FileType};

/// What `open`/`create` tell the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Opened {
    pub fh: u64,
    /// Bypass the page cache (generated files, or cached attributes are stale).
    pub direct_io: bool,
    /// Keep the page cache: the kernel's attributes show this very version,
    /// so pages it cached from it are still good (no READ at all).
    pub keep_cache: bool,
    /// Nothing to do at close (read-only): the kernel need not send FLUSH.
    pub noflush: bool,
    /// A stream (a `.chubby/` events file): no seeking.
    pub nonseekable: bool,
}

/// The attribute changes of a `setattr`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// atime or mtime given.
    pub times: bool,
    /// The mtime to set (`touch -d`, `cp -p`, `rsync -t`): a cell's mtime is
    /// its newest version's timestamp, so that version moves to it; other
    /// nodes' times are accepted and ignored.
    pub mtime: Option<std::time::SystemTime>,
}

/// What `readdir` hands to the FUSE reply.
#[derive(Debug, Clone)]
pub struct DirOut<'a> {
    pub ino: u64,
    pub offset: u64,
    pub kind: FileType,
    pub name: &'a [u8],
    /// Set for readdirplus.
    pub attr: Option<FileAttr>,
    /// How long the kernel may cache the entry (readdirplus).
    pub ttl: std::time::Duration,
}
