//! Public value types shared by the [`crate::LockService`] trait and its callers.

use std::fmt;
use std::time::{Duration, SystemTime};

/// Durable identity of a node; stable across renames and restarts (usable as an inode number).
pub type NodeId = u64;

/// Identity of a lock holder, chosen by the caller (the FUSE layer passes the
/// lock owner, which names an open file description).
pub type OwnerKey = u64;

/// Id of the root directory.
pub const ROOT_ID: NodeId = 1;

/// Largest file contents accepted (Chubby files are small).
pub const MAX_CONTENTS: usize = 256 * 1024;

/// A client session: a process or component whose death releases its locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

/// An open handle on a node, belonging to one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleId(pub u64);

/// What an operation acts on: a path, or the node behind an open handle
/// (which follows the node across renames).
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Path(&'a str),
    Handle(HandleId),
}

impl<'a> From<&'a str> for Target<'a> {
    fn from(path: &'a str) -> Self {
        Target::Path(path)
    }
}

impl<'a> From<&'a String> for Target<'a> {
    fn from(path: &'a String) -> Self {
        Target::Path(path)
    }
}

impl From<HandleId> for Target<'_> {
    fn from(h: HandleId) -> Self {
        Target::Handle(h)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    File,
    Dir,
}

/// Reader (shared) or writer (exclusive) mode of a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    Shared,
    Exclusive,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Shared => "shared",
            LockMode::Exclusive => "exclusive",
        }
    }
}

impl fmt::Display for LockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Attributes of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub id: NodeId,
    pub kind: NodeKind,
    /// Permission bits only (0o7777); the file type is `kind`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Contents length for a file, number of entries for a directory.
    pub size: u64,
    /// 2 + subdirectories for a directory, 1 for a file.
    pub nlink: u32,
    /// Grows by one with every replacement of the contents.
    pub content_generation: u64,
    /// Grows by one with every acquisition of the lock in writer mode.
    pub lock_generation: u64,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub lock_delay: Duration,
    pub ephemeral: bool,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: String,
    pub id: NodeId,
    pub kind: NodeKind,
}

/// How to create a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    pub kind: NodeKind,
    /// Permission bits (masked to 0o7777); the caller applies its umask.
    pub mode: u32,
    /// Deleted when no handle is open on it (and, for a directory, it is empty).
    pub ephemeral: bool,
    /// Lock-delay; `None` takes the cell's default.
    pub lock_delay: Option<Duration>,
}

impl NodeSpec {
    pub fn file(mode: u32) -> Self {
        NodeSpec {
            kind: NodeKind::File,
            mode,
            ephemeral: false,
            lock_delay: None,
        }
    }

    pub fn dir(mode: u32) -> Self {
        NodeSpec {
            kind: NodeKind::Dir,
            ..NodeSpec::file(mode)
        }
    }

    pub fn ephemeral(mut self) -> Self {
        self.ephemeral = true;
        self
    }

    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }
}

/// How to open a handle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub read: bool,
    pub write: bool,
    /// Create the node with this spec if it does not exist.
    pub create: Option<NodeSpec>,
    /// With `create`: fail with `Exists` if the node exists (O_EXCL).
    pub exclusive: bool,
}

impl OpenOptions {
    pub fn read() -> Self {
        OpenOptions {
            read: true,
            ..Default::default()
        }
    }

    pub fn read_write() -> Self {
        OpenOptions {
            read: true,
            write: true,
            ..Default::default()
        }
    }

    pub fn create(mut self, spec: NodeSpec) -> Self {
        self.create = Some(spec);
        self
    }

    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }
}

/// One holder of a lock (for F_GETLK and status files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockHolder {
    pub owner: OwnerKey,
    pub mode: LockMode,
}

/// A change to one node, delivered in order to its subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    ContentsChanged,
    ChildAdded(String),
    ChildRemoved(String),
    LockAcquired(LockMode),
    LockReleased,
    /// The node is gone; no event follows and the channel closes.
    Deleted,
}

/// An event on any node, for whole-namespace watchers (cache invalidation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    pub id: NodeId,
    /// The node's path when the event happened.
    pub path: String,
    pub event: Event,
}
