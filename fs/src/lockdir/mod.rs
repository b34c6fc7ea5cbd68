//! `.chubby/`: the lock service's namespace in the mount (docs/lock-directory.md).
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
//!
//! [`LockDir`] is a component of its own: its operations are its methods,
//! given the data path's context (`Ctx`: the inode table, the mount's
//! options, the local lock table, and the attributes of the root that
//! `..` of `.chubby/` shows). `Fs` routes `.chubby/` inodes and handles here;
//! the data path knows only that the root shows `.chubby/` (the `LockAttrs`
//! hook).

pub mod events;
mod files;
pub mod interrupt;
/// flock/fcntl locks kept in the mount (files outside the service).
pub(crate) use crate::local_locks as local;
mod locks;
mod nodes;
pub mod xattr;

#[cfg(test)]
mod tests;

use crate::ctx::{Ctx, LockAttrs};
use crate::notify::Invalidator;
use crate::options::FsResult;
use chubby::{Credentials, LockService, OwnerKey};
use fuser::Errno;
use fuser::FileAttr;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use files::{Done, LockOpened};
pub(crate) use locks::{getlk, setlk};
pub use locks::{LockReply, LockRequest};

pub use crate::node::lock::{join, split, LockNode, EVENTS, STATUS};

/// File handles of `.chubby/` opens have this bit set; the rest of the
/// filesystem numbers its handles from 1 upwards.
const FH_BIT: u64 = 1 << 62;

/// Whether a file handle belongs to `.chubby/`.
pub fn is_lock_fh(fh: u64) -> bool {
    fh & FH_BIT != 0
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

impl LockAttrs for LockDir {
    fn lock_attr(&self, cx: &Ctx, node: &LockNode) -> FsResult<FileAttr> {
        self.attr(cx, node)
    }

    /// The service's own `lock_*` status lines (a backend other than the
    /// embedded cell names itself there).
    fn lock_summary(&self) -> Vec<String> {
        let lines: Vec<String> = self
            .svc
            .status()
            .into_iter()
            .filter(|l| l.starts_with("lock_"))
            .collect();
        if lines.is_empty() {
            vec!["lock_backend=embedded".to_string()]
        } else {
            lines
        }
    }
}
