//! `.chubby/`: the lock service's namespace in the mount (README, "The lock directory").
//!
//! Every node of the cell is a directory or a small file here, and every
//! file is a lock:
//!
//! - Contents: a file is read from a snapshot taken at the read at offset 0
//!   and replaced as a whole when a writer closes it (or fsyncs), so readers
//!   never see a mixture; more than 256 KiB fails with EFBIG. A writer killed
//!   by a signal before closing changes nothing.
//! - Locks: `flock -s`/`-x` and fcntl locks become the service's reader and
//!   writer locks, owned by the open file description (the FUSE lock owner;
//!   fcntl byte ranges are widened to the whole file). They are released by
//!   unlock, by the last close of the description, and when the last process
//!   holding it is killed — then with the file's lock-delay.
//! - Waiting: a blocked SETLKW (and a blocking read of an events file) runs
//!   on its own thread and watches its caller's pending signals
//!   ([`interrupt`]), answering EINTR, so `flock -w`, `timeout` and `kill -9`
//!   work although fuser never passes FUSE_INTERRUPT on.
//! - Extended attributes ([`xattr`]): `user.chubby.sequencer`,
//!   `user.chubby.check`, `user.chubby.lock`, `user.chubby.lock_delay_ms`,
//!   `user.chubby.ephemeral`, `user.chubby.content_generation`.
//! - Events ([`events`]): `<dir>/.events` streams one line per change in the
//!   directory; the kernel's caches are invalidated for every change made
//!   behind its back (by the engine, or by a dead holder's cleanup).
//!
//! Inodes are [`LockNode`]s inside [`crate::node::Node::Lock`]; open files
//! use file handles from their own number space ([`is_lock_fh`]).

pub mod events;
mod files;
pub mod interrupt;
pub mod local;
mod locks;
mod nodes;
pub mod xattr;

#[cfg(test)]
mod tests;

use crate::core::Fs;
use crate::notify::Invalidator;
use chubby::{Credentials, LockService, OwnerKey};
use fuser::Errno;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use files::{Done, LockOpened};
pub use locks::{LockReply, LockRequest, OFFSET_MAX};

/// The directory's name in the mount's root.
pub const DIR_NAME: &str = ".chubby";
/// In every directory: the stream of its events (not listed).
pub const EVENTS: &str = ".events";
/// In `.chubby/` itself: the service's status lines (not listed).
pub const STATUS: &str = ".status";

/// File handles of `.chubby/` opens have this bit set; the rest of the
/// filesystem numbers its handles from 1 upwards.
const FH_BIT: u64 = 1 << 62;

/// Whether a file handle belongs to `.chubby/`.
pub fn is_lock_fh(fh: u64) -> bool {
    fh & FH_BIT != 0
}

/// An inode under `.chubby/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockNode {
    /// A node of the cell by its path ("/" is `.chubby/` itself).
    Entry(String),
    /// `<dir>/.events`, by the directory's path.
    Events(String),
    /// `.chubby/.status`.
    Status,
}

impl LockNode {
    pub fn root() -> LockNode {
        LockNode::Entry("/".into())
    }

    /// Input of the inode number hash (see `Node::ino`).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let (tag, s) = match self {
            LockNode::Entry(p) => (0, p.as_str()),
            LockNode::Events(p) => (1, p.as_str()),
            LockNode::Status => (2, ""),
        };
        out.push(tag);
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    /// The directory this inode lies in, and its name there.
    pub fn parent_and_name(&self) -> (crate::node::Node, Vec<u8>) {
        use crate::node::Node;
        match self {
            LockNode::Entry(p) if p == "/" => (Node::Root, DIR_NAME.as_bytes().to_vec()),
            LockNode::Entry(p) => {
                let (dir, name) = split(p);
                (
                    Node::Lock(LockNode::Entry(dir.to_string())),
                    name.as_bytes().to_vec(),
                )
            }
            LockNode::Events(d) => (
                Node::Lock(LockNode::Entry(d.clone())),
                EVENTS.as_bytes().to_vec(),
            ),
            LockNode::Status => (Node::Lock(LockNode::root()), STATUS.as_bytes().to_vec()),
        }
    }

    /// The inode number of the cell node at `path`.
    pub fn entry_ino(path: &str) -> u64 {
        crate::node::Node::Lock(LockNode::Entry(path.to_string())).ino()
    }
}

impl fmt::Display for LockNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockNode::Entry(p) if p == "/" => write!(f, "/{DIR_NAME}"),
            LockNode::Entry(p) => write!(f, "/{DIR_NAME}{p}"),
            LockNode::Events(d) if d == "/" => write!(f, "/{DIR_NAME}/{EVENTS}"),
            LockNode::Events(d) => write!(f, "/{DIR_NAME}{d}/{EVENTS}"),
            LockNode::Status => write!(f, "/{DIR_NAME}/{STATUS}"),
        }
    }
}

/// Splits a cell path into its directory and last name ("/a/b" → ("/a", "b")).
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

/// The path of `name` inside directory `dir`.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Who took a lock through the mount, for F_GETLK and sequencer lookups.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OwnerInfo {
    /// The `.chubby/` file handle the lock was taken through.
    pub fh: u64,
    /// The process (thread group) that took it.
    pub pid: u32,
}

/// The state behind `.chubby/`.
pub struct LockDir {
    pub(crate) svc: Arc<dyn LockService>,
    pub(crate) handles: Mutex<HashMap<u64, Arc<Mutex<files::LockHandle>>>>,
    next_fh: AtomicU64,
    pub(crate) owners: Arc<Mutex<HashMap<OwnerKey, OwnerInfo>>>,
    pub(crate) hub: Arc<events::Hub>,
    /// Kernel cache invalidation for changes made behind the kernel's back.
    pub(crate) inval: Arc<Invalidator>,
}

impl LockDir {
    /// Serves `svc` under `.chubby/` and starts the thread that turns the
    /// service's changes into events-file lines and kernel invalidations.
    pub fn new(svc: Arc<dyn LockService>) -> LockDir {
        let hub = Arc::new(events::Hub::default());
        let inval = Arc::new(Invalidator::default());
        events::start_watcher(svc.watch_all(), hub.clone(), inval.clone());
        LockDir {
            svc,
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(0),
            owners: Arc::default(),
            hub,
            inval,
        }
    }

    /// Starts invalidating the kernel's caches through a mounted session.
    pub fn start_notifier(&self, notifier: fuser::Notifier) {
        self.inval.start(notifier);
    }

    pub(crate) fn insert(&self, h: files::LockHandle) -> u64 {
        let fh = FH_BIT | (self.next_fh.fetch_add(1, Ordering::Relaxed) + 1);
        self.handles.lock().insert(fh, Arc::new(Mutex::new(h)));
        fh
    }

    pub(crate) fn handle(&self, fh: u64) -> Result<Arc<Mutex<files::LockHandle>>, Errno> {
        self.handles.lock().get(&fh).cloned().ok_or(Errno::EBADF)
    }

    pub(crate) fn remove(&self, fh: u64) -> Option<Arc<Mutex<files::LockHandle>>> {
        self.handles.lock().remove(&fh)
    }

    /// Status lines of the service (`.chubby/.status`).
    pub fn status_text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for l in self.svc.status() {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        }
        out
    }
}

/// The errno for a lock-service error, logged like the rest of the mount's refusals.
pub(crate) fn errno(what: &dyn fmt::Display, e: &chubby::Error) -> Errno {
    let code = e.errno();
    match e {
        chubby::Error::Io { .. } | chubby::Error::Corruption(_) => log::error!("{what}: {e}"),
        chubby::Error::NotFound(_) | chubby::Error::WouldBlock => log::debug!("{what}: {e}"),
        _ => log::info!("{what}: {e}"),
    }
    Errno::from_i32(code)
}

/// The lock service's view of a caller (supplementary groups from /proc).
pub(crate) fn creds(caller: &crate::perms::Caller) -> Credentials {
    let c = caller.clone().with_groups();
    Credentials {
        uid: c.uid,
        gid: c.gid,
        groups: c.groups,
    }
}

impl Fs {
    /// Serves a lock service under `.chubby/` (without one, `.chubby/` does
    /// not exist).
    pub fn with_lock_service(mut self, svc: Arc<dyn LockService>) -> Fs {
        self.lockdir = Some(LockDir::new(svc));
        self
    }

    pub(crate) fn lockdir(&self) -> Result<&LockDir, Errno> {
        self.lockdir.as_ref().ok_or(Errno::ENOENT)
    }

    /// The `.chubby/` inode behind `ino`, if it is one.
    pub fn lock_node(&self, ino: u64) -> Option<LockNode> {
        match &*self.inodes.get(ino)? {
            crate::node::Node::Lock(l) => Some(l.clone()),
            _ => None,
        }
    }
}
