//! Public value types shared by the [`crate::LockService`] trait and its callers.

use std::fmt;
use std::time::{Duration, SystemTime};

/// Durable identity of a node; stable across renames and restarts (usable as an inode number).
pub type NodeId = u64;

/// Identity of a lock holder, chosen by the caller (the FUSE layer passes the
/// lock owner, which names an open file description).
pub type OwnerKey = u64;

/// Id of the root directory.
pub(crate) const ROOT_ID: NodeId = 1;

/// Largest file contents accepted (Chubby files are small).
pub const MAX_CONTENTS: usize = 256 * 1024;

/// Refuses contents over [`MAX_CONTENTS`] (both backends' `set_contents`).
pub(crate) fn check_contents(data: &[u8]) -> crate::error::Result<()> {
    if data.len() > MAX_CONTENTS {
        return Err(crate::error::Error::TooLarge {
            size: data.len(),
            max: MAX_CONTENTS,
        });
    }
    Ok(())
}

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
    /// The node at an absolute path now.
    Path(&'a str),
    /// The node an open handle was opened on.
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

/// Whether a node holds contents or entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// Holds up to [`MAX_CONTENTS`] bytes.
    File,
    /// Holds named children.
    Dir,
}

/// Reader (shared) or writer (exclusive) mode of a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// Reader mode: any number of holders at once.
    Shared,
    /// Writer mode: one holder; each grant bumps the node's lock generation.
    Exclusive,
}

impl LockMode {
    /// The mode's name as sequencers and status files spell it.
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
    /// The node's durable id.
    pub id: NodeId,
    /// File or directory.
    pub kind: NodeKind,
    /// Permission bits only (0o7777); the file type is `kind`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Contents length for a file, number of entries for a directory.
    pub size: u64,
    /// 2 + subdirectories for a directory, 1 for a file.
    pub nlink: u32,
    /// Grows by one with every replacement of the contents.
    pub content_generation: u64,
    /// Grows by one with every acquisition of the lock in writer mode.
    pub lock_generation: u64,
    /// Last change of the contents or entries.
    pub mtime: SystemTime,
    /// Last change of the contents, entries or attributes.
    pub ctime: SystemTime,
    /// How long the lock stays unavailable after its holder dies.
    pub lock_delay: Duration,
    /// Whether the node vanishes with its last open handle.
    pub ephemeral: bool,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name in the directory.
    pub name: String,
    /// The child's durable id.
    pub id: NodeId,
    /// File or directory.
    pub kind: NodeKind,
}

/// How to create a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// File or directory.
    pub kind: NodeKind,
    /// Permission bits (masked to 0o7777); the caller applies its umask.
    pub mode: u32,
    /// Deleted when no handle is open on it (and, for a directory, it is empty).
    pub ephemeral: bool,
    /// Lock-delay; `None` takes the cell's default.
    pub lock_delay: Option<Duration>,
}

impl NodeSpec {
    /// A permanent file with permission bits `mode` and the cell's lock-delay.
    pub fn file(mode: u32) -> Self {
        NodeSpec {
            kind: NodeKind::File,
            mode,
            ephemeral: false,
            lock_delay: None,
        }
    }

    /// A permanent directory with permission bits `mode` and the cell's lock-delay.
    pub fn dir(mode: u32) -> Self {
        NodeSpec {
            kind: NodeKind::Dir,
            ..NodeSpec::file(mode)
        }
    }

    /// Makes the node vanish with its last handle.
    pub fn ephemeral(mut self) -> Self {
        self.ephemeral = true;
        self
    }

    /// Sets the node's own lock-delay.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = Some(delay);
        self
    }
}

/// How to open a handle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Open for reading (needs read permission).
    pub read: bool,
    /// Open for writing (needs write permission; files only).
    pub write: bool,
    /// Create the node with this spec if it does not exist.
    pub create: Option<NodeSpec>,
    /// With `create`: fail with `Exists` if the node exists (O_EXCL).
    pub exclusive: bool,
}

impl OpenOptions {
    /// Read-only.
    pub fn read() -> Self {
        OpenOptions {
            read: true,
            ..Default::default()
        }
    }

    /// For reading and writing.
    pub fn read_write() -> Self {
        OpenOptions {
            read: true,
            write: true,
            ..Default::default()
        }
    }

    /// Creates the node with `spec` if it does not exist.
    pub fn create(mut self, spec: NodeSpec) -> Self {
        self.create = Some(spec);
        self
    }

    /// With `create`: fails if the node exists (O_EXCL).
    pub fn exclusive(mut self) -> Self {
        self.exclusive = true;
        self
    }
}

/// One holder of a lock (for F_GETLK and status files).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockHolder {
    /// Who holds it.
    pub owner: OwnerKey,
    /// In which mode.
    pub mode: LockMode,
}

/// A change to one node, delivered in order to its subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A file's contents were replaced.
    ContentsChanged,
    /// A directory gained the named entry (created or renamed in).
    ChildAdded(String),
    /// A directory lost the named entry (removed or renamed away).
    ChildRemoved(String),
    /// The lock was granted in this mode.
    LockAcquired(LockMode),
    /// A holder let go of the lock or died.
    LockReleased,
    /// The node is gone; no event follows and the channel closes.
    Deleted,
}

/// An event on any node, for whole-namespace watchers (cache invalidation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The node the event is about.
    pub id: NodeId,
    /// The node's path when the event happened.
    pub path: String,
    /// What happened.
    pub event: Event,
}

/// A node's lock-delay in milliseconds, as both cells store it; refused
/// above the cell's maximum.
pub(crate) fn lock_delay_ms(delay: Duration, max: Duration) -> crate::Result<u64> {
    if delay > max {
        return Err(crate::Error::invalid(format!(
            "lock-delay {delay:?} exceeds the maximum {max:?}"
        )));
    }
    Ok(delay.as_millis() as u64)
}
