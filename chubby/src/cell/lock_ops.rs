//! The state's lock helpers (resolving a target, granting, converting a
//! held lock) and waiting for a turn, which needs the condition variable
//! next to the state's mutex. `service_impl.rs` takes and releases locks
//! with them.

use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::acl::{self, Credentials};
use crate::error::{Error, Result};
use crate::locks::Blocked;
use crate::record::Record;
use crate::sequencer::Sequencer;
use crate::service::LockGrant;
use crate::types::{Event, HandleId, LockMode, NodeId, OwnerKey, Target};

use super::state::State;
use super::LocalCell;

/// Longest a waiter sleeps before looking at `cancelled()` again.
pub const POLL: Duration = Duration::from_millis(50);

impl State {
    /// Resolves a lock target. Locking needs read or write permission (what
    /// opening the file for flock(2) would need), and write permission on a
    /// node owned by root ([`acl::may_lock`]) whether by path or by handle.
    pub fn lock_target(
        &self,
        creds: &Credentials,
        target: Target<'_>,
    ) -> Result<(NodeId, Option<HandleId>)> {
        let (id, _) = self.resolve_target(creds, target)?;
        let perm = self.ns.node(id)?.meta.perm();
        if !acl::may_lock(creds, perm) {
            return Err(Error::PermissionDenied(self.ns.path_of(id)));
        }
        Ok((id, target_handle(target)))
    }

    pub(super) fn grant_of(&self, node: NodeId, mode: LockMode) -> Result<LockGrant> {
        let generation = self.ns.node(node)?.meta.lock_gen;
        Ok(LockGrant {
            mode,
            generation,
            sequencer: Sequencer {
                path: self.ns.path_of(node),
                mode,
                generation,
            },
        })
    }

    /// Gives `owner` the lock in `mode` (the caller has checked it may). A
    /// writer-mode grant first makes the bumped generation durable.
    pub(super) fn grant(
        &mut self,
        node: NodeId,
        owner: OwnerKey,
        mode: LockMode,
        handle: Option<HandleId>,
    ) -> Result<LockGrant> {
        if mode == LockMode::Exclusive {
            let generation = self.ns.lock_gen_max() + 1;
            self.commit(Record::LockGeneration {
                id: node,
                generation,
            })?;
        }
        let handle = handle.or_else(|| self.locks.held(node, owner).and_then(|h| h.handle));
        self.locks.grant(node, owner, mode, handle);
        self.emit(node, Event::LockAcquired(mode));
        self.grant_of(node, mode)
    }

    /// What to do with a request from an owner that already holds the lock:
    /// `Some(result)` if it is settled without queueing.
    pub(super) fn convert(
        &mut self,
        node: NodeId,
        owner: OwnerKey,
        mode: LockMode,
        handle: Option<HandleId>,
    ) -> Option<Result<LockGrant>> {
        let held = self.locks.held(node, owner)?;
        if held.mode == mode {
            return Some(self.grant_of(node, mode));
        }
        if mode == LockMode::Shared {
            // Downgrade: always possible, keeps the generation.
            let handle = handle.or(held.handle);
            self.locks.grant(node, owner, LockMode::Shared, handle);
            self.emit(node, Event::LockAcquired(LockMode::Shared));
            return Some(self.grant_of(node, mode));
        }
        // Upgrade: possible at once only for the sole holder. Queued waiters
        // are no reason to refuse: they wait for this holder anyway.
        if self.locks.can_upgrade(node, owner, Instant::now()) {
            return Some(self.grant(node, owner, mode, handle));
        }
        None
    }
}

fn target_handle(target: Target<'_>) -> Option<HandleId> {
    match target {
        Target::Handle(h) => Some(h),
        Target::Path(_) => None,
    }
}

impl LocalCell {
    /// Waits, with the state's mutex, until `ticket` may take the lock.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn wait_turn(
        &self,
        st: &mut MutexGuard<'_, State>,
        node: NodeId,
        owner: OwnerKey,
        mode: LockMode,
        handle: Option<HandleId>,
        ticket: u64,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<LockGrant> {
        loop {
            if !st.ns.contains(node) {
                return Err(Error::NotFound(format!("node {node} was removed")));
            }
            if let Some(h) = handle {
                if !st.sessions.is_open(h) {
                    return Err(Error::BadHandle(format!(
                        "handle {} closed while waiting",
                        h.0
                    )));
                }
            }
            let now = Instant::now();
            let mut sleep = match st.locks.check(node, owner, mode, Some(ticket), now) {
                Ok(()) => {
                    // Last look under the mutex: a waiter cancelled by now
                    // (its process killed) must never be granted.
                    if cancelled() {
                        return Err(Error::Interrupted);
                    }
                    st.locks.dequeue(node, ticket, now);
                    return st.grant(node, owner, mode, handle);
                }
                Err(Blocked::Delay(until)) => until.saturating_duration_since(now),
                Err(Blocked::Busy) => POLL,
            };
            if let Some(d) = deadline {
                if now >= d {
                    return Err(Error::TimedOut);
                }
                sleep = sleep.min(d - now);
            }
            self.cond
                .wait_for(st, sleep.clamp(Duration::from_millis(1), POLL));
            if MutexGuard::unlocked(st, cancelled) {
                return Err(Error::Interrupted);
            }
        }
    }
}
