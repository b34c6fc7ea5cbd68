//! The lock service interface. Everything above it (the engine, the FUSE
//! layer) sees only node paths, handles, owner keys and events, never local
//! files, so that a cell backed by etcd could replace [`crate::LocalCell`].

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::acl::Credentials;
use crate::error::Result;
use crate::sequencer::Sequencer;
use crate::types::{
    DirEntry, Event, HandleId, LockHolder, LockMode, NodeSpec, OpenOptions, OwnerKey, SessionId,
    Stat, Target, WatchEvent,
};

/// A granted lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockGrant {
    /// The mode granted.
    pub mode: LockMode,
    /// The node's lock generation (incremented by this grant in writer mode).
    pub generation: u64,
    /// The token to hand to servers that must check this holder is current.
    pub sequencer: Sequencer,
}

/// Who asks for which lock, in which mode. A path target needs read or
/// write permission; a lock taken through a handle is tied to that handle
/// and its session.
#[derive(Clone, Copy, Debug)]
pub struct LockRequest<'a> {
    /// Whose permissions are checked.
    pub creds: &'a Credentials,
    /// Who holds the lock once granted.
    pub owner: OwnerKey,
    /// The node, by path or by handle.
    pub target: Target<'a>,
    /// Shared or exclusive.
    pub mode: LockMode,
}

impl<'a> LockRequest<'a> {
    /// `owner` asks for `target` in `mode` with `creds`' permissions.
    pub fn new(
        creds: &'a Credentials,
        owner: OwnerKey,
        target: Target<'a>,
        mode: LockMode,
    ) -> LockRequest<'a> {
        LockRequest {
            creds,
            owner,
            target,
            mode,
        }
    }
}

/// Whether a lock request waits, and until when.
#[derive(Clone, Copy)]
pub enum Wait<'a> {
    /// Fail with `WouldBlock` rather than wait.
    No,
    /// Wait in arrival order until `deadline` (`TimedOut`) or until
    /// `cancelled()` is true (`Interrupted`).
    Until {
        /// When to give up (None: never).
        deadline: Option<Instant>,
        /// Polled while waiting, and once more just before granting.
        cancelled: &'a dyn Fn() -> bool,
    },
}

/// A Chubby-like lock service: a namespace of directories and small files,
/// each of which is also a reader/writer lock.
///
/// Paths are absolute and slash-separated ("/bigtable/master"). Every
/// namespace operation checks `creds` against owner/group/other mode bits as a
/// POSIX filesystem would; lock operations on a handle rely on the check made
/// when the handle was opened.
pub trait LockService: Send + Sync {
    // --- sessions and handles ---

    /// Starts a session for one client; `holder` describes it ("pid 1234").
    fn open_session(&self, holder: &str) -> SessionId;
    /// Ends a session as if its client died: locks taken through its handles
    /// are released with lock-delay, then its handles are closed (ephemeral
    /// nodes with no other handle vanish).
    fn close_session(&self, session: SessionId) -> Result<()>;
    /// Opens (and with `opts.create`, creates) a node. Checks read/write
    /// permission as asked for; a directory may be opened for reading only.
    fn open_handle(
        &self,
        session: SessionId,
        creds: &Credentials,
        path: &str,
        opts: &OpenOptions,
    ) -> Result<(HandleId, Stat)>;
    /// Closes a handle: locks taken through it are released in an orderly way
    /// (no lock-delay); an ephemeral node whose last handle this was vanishes.
    /// A caller that knows the holder died calls `release_owner_dead` first.
    fn close_handle(&self, handle: HandleId) -> Result<()>;
    /// The current path of a handle's node (it follows renames).
    fn handle_path(&self, handle: HandleId) -> Result<String>;

    // --- namespace ---

    /// Creates a file or directory. An ephemeral node needs a handle to live,
    /// so it must be created through `open_handle`.
    fn create(&self, creds: &Credentials, path: &str, spec: &NodeSpec) -> Result<Stat>;
    /// Reads a whole file.
    fn read(&self, creds: &Credentials, target: Target<'_>) -> Result<(Vec<u8>, Stat)>;
    /// Replaces a file's contents atomically (at most `MAX_CONTENTS` bytes).
    fn set_contents(&self, creds: &Credentials, target: Target<'_>, data: &[u8]) -> Result<Stat>;
    /// Removes a file (a directory needs `rmdir`).
    fn unlink(&self, creds: &Credentials, path: &str) -> Result<()>;
    /// Removes an empty directory.
    fn rmdir(&self, creds: &Credentials, path: &str) -> Result<()>;
    /// Renames, replacing a file or empty directory at `to` as rename(2) does.
    fn rename(&self, creds: &Credentials, from: &str, to: &str) -> Result<()>;
    /// Entries of a directory, sorted by name.
    fn list(&self, creds: &Credentials, path: &str) -> Result<Vec<DirEntry>>;
    /// A node's attributes.
    fn stat(&self, creds: &Credentials, target: Target<'_>) -> Result<Stat>;
    /// Sets the permission bits (owner or root only).
    fn chmod(&self, creds: &Credentials, target: Target<'_>, mode: u32) -> Result<Stat>;
    /// Changes owner (root only) and/or group (owner, to a group of theirs).
    fn chown(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Stat>;
    /// Sets a node's lock-delay (needs write permission; bounded by the cell).
    fn set_lock_delay(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        delay: Duration,
    ) -> Result<Stat>;
    /// Marks a node ephemeral or permanent (needs write permission). An
    /// ephemeral node with no open handle vanishes at once.
    fn set_ephemeral(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        ephemeral: bool,
    ) -> Result<Stat>;

    // --- locks ---

    /// Takes the lock without waiting: `WouldBlock` if held incompatibly, in
    /// lock-delay, or others are waiting. Asking again for a mode already held
    /// succeeds; shared→exclusive upgrades if sole holder, exclusive→shared
    /// downgrades at once.
    fn try_lock(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
    ) -> Result<LockGrant> {
        self.acquire(LockRequest::new(creds, owner, target, mode), Wait::No)
    }
    /// Waits for the lock in arrival order. Gives up with `TimedOut` at
    /// `deadline`, and with `Interrupted` as soon as `cancelled()` is true
    /// (polled at least every 50 ms, and once more just before granting, so a
    /// waiter that was cancelled is never granted). An upgrade that must wait
    /// first drops the shared lock, as flock(2) does. `cancelled` runs with
    /// the service's lock held for that last look: it must be quick and must
    /// not call back into the service.
    fn lock_wait(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<LockGrant> {
        let req = LockRequest {
            creds,
            owner,
            target,
            mode,
        };
        self.acquire(
            req,
            Wait::Until {
                deadline,
                cancelled,
            },
        )
    }
    /// What `try_lock` (`Wait::No`) and `lock_wait` do; backends implement
    /// this one.
    fn acquire(&self, req: LockRequest<'_>, wait: Wait<'_>) -> Result<LockGrant>;
    /// Orderly release by `owner`: no lock-delay. Returns whether it held one.
    fn unlock(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool>;
    /// `owner` died: releases all its locks, each starting its lock-delay.
    /// Returns how many were released.
    fn release_owner_dead(&self, owner: OwnerKey) -> usize;
    /// Current holders of a node's lock (for F_GETLK and status).
    fn holders(&self, target: Target<'_>) -> Result<Vec<LockHolder>>;
    /// `owner`'s sequencer for the lock it holds on `target`.
    fn sequencer(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer>;
    /// True iff the named lock is held right now in that mode at that generation.
    fn check_sequencer(&self, seq: &Sequencer) -> bool;

    // --- what the client already knows ---
    //
    // Liveness loops (a tablet server watching its own lock, a master
    // watching the servers' and standing by for the master lock) ask these
    // first, many times a second: a backend that is told of changes (etcd's
    // watch) answers them without a request. `true` (or `Some`) is as of
    // the last change it was told of; `false` (or `None`) means "ask":
    // then the caller makes the exact call. The embedded cell, whose exact
    // calls cost no request, keeps these defaults.

    /// True when the changes pushed to this client show `seq`'s lock held
    /// (its holder's session alive, by this client's clock if its own).
    fn known_valid(&self, _seq: &Sequencer) -> bool {
        false
    }
    /// True when the changes pushed to this client show the lock of the
    /// node at `path` held by someone.
    fn known_held(&self, _path: &str) -> bool {
        false
    }
    /// The names in directory `dir` as the changes pushed to this client
    /// show them (no permission check: for a trusted layer).
    fn known_list(&self, _dir: &str) -> Option<Vec<String>> {
        None
    }

    // --- events and status ---

    /// Events about one node (a directory also gets child events), in order,
    /// until it is deleted. Dropping the receiver unsubscribes.
    fn subscribe(&self, creds: &Credentials, target: Target<'_>) -> Result<Receiver<Event>>;
    /// Every event on every node, with its path (for cache invalidation by a
    /// trusted layer; no permission check).
    fn watch_all(&self) -> Receiver<WatchEvent>;
    /// Human-readable lines describing the whole cell.
    fn status(&self) -> Vec<String>;
}
