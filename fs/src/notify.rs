//! Invalidating the kernel's caches when the daemon changes data behind them.
//!
//! The daemon is the only writer of the store, so it knows every change; the
//! kernel only knows the ones that went through its own inodes (a write to a
//! cell file). A `.mutate` batch, a `deleterow`, a schema change or a rename
//! changes what other cached inodes and entries show, so we tell the kernel.
//!
//! Notifications are sent from their own thread: an invalidation takes the
//! kernel's lock on the directory, and the request that caused it may hold
//! that very lock until we reply — sending inline could deadlock. The
//! request then waits, briefly and with a time limit, until its
//! invalidations are through ([`Invalidator::settle`]), so that a program
//! that sees its `close` or `unlink` return also sees the kernel's caches
//! agree.

use crossbeam_channel::{Receiver, Sender};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// One invalidation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inval {
    /// Attributes and cached data of an inode.
    Inode(u64),
    /// A name in a directory (the child is gone or changed identity).
    Entry { parent: u64, name: Vec<u8> },
}

enum Msg {
    Inval(Inval),
    /// Answered once everything queued before it is sent.
    Barrier(Sender<()>),
}

/// How long a request waits for its invalidations (a bound, in case the
/// kernel holds a directory lock until some other request is answered).
const SETTLE_LIMIT: Duration = Duration::from_millis(200);

/// See the module comment.
#[derive(Default)]
pub struct Invalidator {
    tx: OnceLock<Sender<Msg>>,
    sent: Arc<AtomicU64>,
    /// Invalidations queued and not yet sent.
    queued: Arc<AtomicU64>,
}

impl Invalidator {
    /// Starts sending through `notifier` (once the session exists).
    pub fn start(&self, notifier: fuser::Notifier) {
        let (tx, rx) = crossbeam_channel::unbounded();
        if self.tx.set(tx).is_err() {
            return;
        }
        let (sent, queued) = (self.sent.clone(), self.queued.clone());
        let spawned = std::thread::Builder::new()
            .name("bt-inval".into())
            .spawn(move || run(notifier, rx, sent, queued));
        if let Err(e) = spawned {
            log::error!("cannot start the invalidation thread: {e}");
        }
    }

    /// Queues an invalidation (dropped if no session is attached, as in tests).
    pub fn send(&self, inval: Inval) {
        if let Some(tx) = self.tx.get() {
            self.queued.fetch_add(1, Ordering::SeqCst);
            if tx.send(Msg::Inval(inval)).is_err() {
                self.queued.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Waits (at most a short while) until everything queued so far is sent.
    pub fn settle(&self) {
        if self.queued.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(tx) = self.tx.get() {
            let (ack, done) = crossbeam_channel::bounded(1);
            if tx.send(Msg::Barrier(ack)).is_ok() && done.recv_timeout(SETTLE_LIMIT).is_err() {
                log::debug!("invalidations still pending after {SETTLE_LIMIT:?}");
            }
        }
    }

    /// Invalidations sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

fn run(notifier: fuser::Notifier, rx: Receiver<Msg>, sent: Arc<AtomicU64>, queued: Arc<AtomicU64>) {
    for msg in rx {
        let inval = match msg {
            Msg::Inval(i) => i,
            Msg::Barrier(ack) => {
                let _ = ack.send(());
                continue;
            }
        };
        let r = match &inval {
            Inval::Inode(ino) => notifier.inval_inode(fuser::INodeNo(*ino), 0, 0),
            Inval::Entry { parent, name } => {
                notifier.inval_entry(fuser::INodeNo(*parent), OsStr::from_bytes(name))
            }
        };
        queued.fetch_sub(1, Ordering::SeqCst);
        match r {
            Ok(()) => {
                sent.fetch_add(1, Ordering::Relaxed);
            }
            // The kernel no longer has it: nothing to invalidate.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) => log::debug!("invalidation {inval:?} failed: {e}"),
        }
    }
}
