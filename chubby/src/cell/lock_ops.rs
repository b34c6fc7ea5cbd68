//! Lock acquisition and release. Waiting happens here because it needs the
//! condition variable next to the state's mutex.

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

    fn grant_of(&self, node: NodeId, mode: LockMode) -> Result<LockGrant> {
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
    fn grant(
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
    fn convert(
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
    pub(super) fn try_lock_impl(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
    ) -> Result<LockGrant> {
        let mut st = self.state.lock();
        let (node, handle) = st.lock_target(creds, target)?;
        if let Some(res) = st.convert(node, owner, mode, handle) {
            self.cond.notify_all();
            return res;
        }
        if st.locks.held(node, owner).is_some() {
            return Err(Error::WouldBlock);
        }
        match st.locks.check(node, owner, mode, None, Instant::now()) {
            Ok(()) => st.grant(node, owner, mode, handle),
            Err(_) => Err(Error::WouldBlock),
        }
    }

    pub(super) fn lock_wait_impl(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<LockGrant> {
        if cancelled() {
            return Err(Error::Interrupted);
        }
        let mut st = self.state.lock();
        let (node, handle) = st.lock_target(creds, target)?;
        if let Some(res) = st.convert(node, owner, mode, handle) {
            self.cond.notify_all();
            return res;
        }
        if st.locks.held(node, owner).is_some() {
            // An upgrade that must wait gives up the shared lock first, as
            // flock(2) does; two waiting upgraders cannot deadlock.
            st.release(node, owner, false);
            self.cond.notify_all();
        }
        let ticket = st.locks.enqueue(node, owner, mode);
        let res = self.wait_turn(
            &mut st, node, owner, mode, handle, ticket, deadline, cancelled,
        );
        st.locks.dequeue(node, ticket, Instant::now());
        // Our grant or departure may let the next waiter in.
        self.cond.notify_all();
        res
    }

    #[allow(clippy::too_many_arguments)]
    fn wait_turn(
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

    pub(super) fn unlock_impl(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool> {
        let mut st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target)?;
        let released = st.release(node, owner, false);
        if released {
            self.cond.notify_all();
        }
        Ok(released)
    }

    pub(super) fn release_owner_dead_impl(&self, owner: OwnerKey) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        for node in st.locks.nodes_of(owner) {
            if st.release(node, owner, true) {
                n += 1;
            }
        }
        if n > 0 {
            self.cond.notify_all();
        }
        n
    }

    pub(super) fn sequencer_impl(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer> {
        let st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target).ok()?;
        let held = st.locks.held(node, owner)?;
        st.grant_of(node, held.mode).ok().map(|g| g.sequencer)
    }

    pub(super) fn check_sequencer_impl(&self, seq: &Sequencer) -> bool {
        let st = self.state.lock();
        let Ok(node) = st.resolve_path(&Credentials::root(), &seq.path) else {
            return false;
        };
        let generation = st.ns.get(node).map(|n| n.meta.lock_gen);
        st.locks.mode_held(node) == Some(seq.mode) && generation == Some(seq.generation)
    }
}
