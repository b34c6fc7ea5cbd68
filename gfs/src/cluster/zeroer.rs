//! The zeros ahead of a log replica's data, renewed off the appends' path.
//!
//! A log's unsynced appends are stores into zeros written ahead of its data
//! (see `zeros.rs`). Written by the append that ran out of them, a window
//! costs that append about a third of a millisecond per replica, while it
//! holds the commit log and every writer behind it waits. So an append that
//! leaves fewer than `zeros::EARLY` ahead asks this thread to renew them;
//! appends store into the zeros already written meanwhile, and only one
//! that outruns the refill waits for it (see [`Replica::refill_zeros`]).

use super::replica::Replica;
use super::Inner;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

/// The queue of replicas whose zeros run low (each at most once at a time).
pub(crate) struct Zeroer {
    tx: Sender<Option<Arc<Replica>>>,
    rx: Receiver<Option<Arc<Replica>>>,
}

impl Zeroer {
    pub(crate) fn new() -> Zeroer {
        let (tx, rx) = crossbeam_channel::unbounded();
        Zeroer { tx, rx }
    }

    /// Renews the zeros of `r`, which an append just found running low.
    pub(crate) fn ask(&self, r: &Arc<Replica>) {
        // The receiver lives as long as the sender (both in `Inner`).
        let _ = self.tx.send(Some(r.clone()));
    }

    /// Wakes the thread (to see that the cluster stops).
    pub(crate) fn wake(&self) {
        let _ = self.tx.send(None);
    }
}

pub(crate) fn zero_loop(inner: Arc<Inner>) {
    while !inner.stopping() {
        match inner.zeroer.rx.recv_timeout(Duration::from_secs(1)) {
            Ok(Some(r)) => r.refill_zeros(&inner.io),
            Ok(None) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
}
