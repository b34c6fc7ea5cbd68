//! The lock table: who holds each node's reader/writer lock, who waits for
//! it, and lock-delay. Pure bookkeeping, no I/O and no blocking; the cell
//! drives it under its mutex.
//!
//! Fairness: waiters queue in arrival order and only the head of the queue may
//! be granted; a non-blocking attempt succeeds only when nobody waits. So a
//! waiting writer is never starved by a stream of readers.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::types::{HandleId, LockHolder, LockMode, NodeId, OwnerKey};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub mode: LockMode,
    /// The handle it was taken through, whose session's death releases it.
    pub handle: Option<HandleId>,
}

#[derive(Clone, Copy, Debug)]
struct Waiter {
    ticket: u64,
    owner: OwnerKey,
    mode: LockMode,
}

#[derive(Debug, Default)]
struct NodeLock {
    holders: BTreeMap<OwnerKey, Held>,
    queue: VecDeque<Waiter>,
    /// Nobody new may acquire before this instant (a holder died).
    delay_until: Option<Instant>,
}

impl NodeLock {
    fn is_idle(&self, now: Instant) -> bool {
        self.holders.is_empty()
            && self.queue.is_empty()
            && self.delay_until.is_none_or(|d| d <= now)
    }

    /// Whether `owner` could hold `mode` given the other holders.
    fn compatible(&self, owner: OwnerKey, mode: LockMode) -> bool {
        self.holders
            .iter()
            .all(|(o, h)| *o == owner || (mode == LockMode::Shared && h.mode == LockMode::Shared))
    }
}

#[derive(Debug, Default)]
pub struct LockTable {
    nodes: HashMap<NodeId, NodeLock>,
    by_owner: HashMap<OwnerKey, BTreeSet<NodeId>>,
    next_ticket: u64,
}

/// One node's lock state, for status lines.
pub struct LockInfo {
    pub node: NodeId,
    pub holders: Vec<LockHolder>,
    pub waiters: Vec<LockHolder>,
    pub delay_left: Option<Duration>,
}

/// Why a request cannot be granted now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// In lock-delay until this instant.
    Delay(Instant),
    /// Held incompatibly, or others are queued ahead.
    Busy,
}

impl LockTable {
    pub fn held(&self, node: NodeId, owner: OwnerKey) -> Option<Held> {
        self.nodes.get(&node)?.holders.get(&owner).copied()
    }

    /// Whether `owner` may be granted `mode` now. `ticket` is the caller's
    /// place in the queue; without one (a non-blocking attempt) the queue
    /// must be empty.
    pub fn check(
        &self,
        node: NodeId,
        owner: OwnerKey,
        mode: LockMode,
        ticket: Option<u64>,
        now: Instant,
    ) -> Result<(), Blocked> {
        let Some(nl) = self.nodes.get(&node) else {
            return if ticket.is_none() {
                Ok(())
            } else {
                Err(Blocked::Busy)
            };
        };
        if let Some(d) = nl.delay_until {
            if d > now {
                return Err(Blocked::Delay(d));
            }
        }
        let first = nl.queue.front().map(|w| w.ticket);
        if first != ticket {
            return Err(Blocked::Busy);
        }
        if nl.compatible(owner, mode) {
            Ok(())
        } else {
            Err(Blocked::Busy)
        }
    }

    /// Whether `owner`, holding the lock shared, may upgrade at once: it is
    /// the sole holder and no lock-delay runs. Queued waiters are no reason
    /// to refuse, since they wait for this holder anyway.
    pub fn can_upgrade(&self, node: NodeId, owner: OwnerKey, now: Instant) -> bool {
        self.nodes.get(&node).is_some_and(|nl| {
            nl.holders.len() == 1
                && nl.holders.contains_key(&owner)
                && nl.delay_until.is_none_or(|d| d <= now)
        })
    }

    /// Records that `owner` holds `mode` (new, upgraded or downgraded).
    pub fn grant(
        &mut self,
        node: NodeId,
        owner: OwnerKey,
        mode: LockMode,
        handle: Option<HandleId>,
    ) {
        let nl = self.nodes.entry(node).or_default();
        nl.delay_until = None;
        nl.holders.insert(owner, Held { mode, handle });
        self.by_owner.entry(owner).or_default().insert(node);
    }

    /// Releases `owner`'s lock on `node`; a dead holder starts the lock-delay.
    pub fn release(
        &mut self,
        node: NodeId,
        owner: OwnerKey,
        dead: Option<Duration>,
        now: Instant,
    ) -> Option<Held> {
        let nl = self.nodes.get_mut(&node)?;
        let held = nl.holders.remove(&owner)?;
        if let Some(delay) = dead {
            if !delay.is_zero() {
                let until = now + delay;
                nl.delay_until = Some(nl.delay_until.map_or(until, |d| d.max(until)));
            }
        }
        if let Some(set) = self.by_owner.get_mut(&owner) {
            set.remove(&node);
            if set.is_empty() {
                self.by_owner.remove(&owner);
            }
        }
        self.gc(node, now);
        Some(held)
    }

    pub fn enqueue(&mut self, node: NodeId, owner: OwnerKey, mode: LockMode) -> u64 {
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.nodes.entry(node).or_default().queue.push_back(Waiter {
            ticket,
            owner,
            mode,
        });
        ticket
    }

    pub fn dequeue(&mut self, node: NodeId, ticket: u64, now: Instant) {
        if let Some(nl) = self.nodes.get_mut(&node) {
            nl.queue.retain(|w| w.ticket != ticket);
            self.gc(node, now);
        }
    }

    fn gc(&mut self, node: NodeId, now: Instant) {
        if self.nodes.get(&node).is_some_and(|nl| nl.is_idle(now)) {
            self.nodes.remove(&node);
        }
    }

    /// Nodes on which `owner` holds a lock.
    pub fn nodes_of(&self, owner: OwnerKey) -> Vec<NodeId> {
        self.by_owner
            .get(&owner)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Locks taken through `handle`.
    pub fn taken_via(&self, handle: HandleId) -> Vec<(NodeId, OwnerKey)> {
        let mut out = Vec::new();
        for (node, nl) in &self.nodes {
            for (owner, held) in &nl.holders {
                if held.handle == Some(handle) {
                    out.push((*node, *owner));
                }
            }
        }
        out
    }

    /// Forgets a deleted node's lock; returns its former holders.
    pub fn remove_node(&mut self, node: NodeId) -> Vec<OwnerKey> {
        let Some(nl) = self.nodes.remove(&node) else {
            return Vec::new();
        };
        let owners: Vec<OwnerKey> = nl.holders.keys().copied().collect();
        for o in &owners {
            if let Some(set) = self.by_owner.get_mut(o) {
                set.remove(&node);
                if set.is_empty() {
                    self.by_owner.remove(o);
                }
            }
        }
        owners
    }

    pub fn holders(&self, node: NodeId) -> Vec<LockHolder> {
        self.nodes
            .get(&node)
            .map(|nl| {
                nl.holders
                    .iter()
                    .map(|(o, h)| LockHolder {
                        owner: *o,
                        mode: h.mode,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The mode the lock is held in, if held: exclusive if any holder is.
    pub fn mode_held(&self, node: NodeId) -> Option<LockMode> {
        let nl = self.nodes.get(&node)?;
        nl.holders
            .values()
            .map(|h| h.mode)
            .max_by_key(|m| *m == LockMode::Exclusive)
    }

    /// (locked nodes, holders, waiters) for status lines.
    pub fn counts(&self) -> (usize, usize, usize) {
        let held = self
            .nodes
            .values()
            .filter(|n| !n.holders.is_empty())
            .count();
        let holders = self.nodes.values().map(|n| n.holders.len()).sum();
        let waiters = self.nodes.values().map(|n| n.queue.len()).sum();
        (held, holders, waiters)
    }

    /// Every node with lock state: holders, waiters in queue order, and
    /// remaining lock-delay.
    pub fn describe(&self, now: Instant) -> Vec<LockInfo> {
        let mut out: Vec<LockInfo> = self
            .nodes
            .iter()
            .map(|(id, nl)| LockInfo {
                node: *id,
                holders: self.holders(*id),
                waiters: nl
                    .queue
                    .iter()
                    .map(|w| LockHolder {
                        owner: w.owner,
                        mode: w.mode,
                    })
                    .collect(),
                delay_left: nl.delay_until.and_then(|d| d.checked_duration_since(now)),
            })
            .collect();
        out.sort_by_key(|e| e.node);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockMode::{Exclusive, Shared};

    #[test]
    fn shared_and_exclusive_compatibility() {
        let mut t = LockTable::default();
        let now = Instant::now();
        assert!(t.check(1, 10, Shared, None, now).is_ok());
        t.grant(1, 10, Shared, None);
        assert!(t.check(1, 11, Shared, None, now).is_ok());
        assert_eq!(t.check(1, 11, Exclusive, None, now), Err(Blocked::Busy));
        // The sole holder may upgrade.
        assert!(t.check(1, 10, Exclusive, None, now).is_ok());
        t.grant(1, 11, Shared, None);
        assert_eq!(t.check(1, 10, Exclusive, None, now), Err(Blocked::Busy));
        assert_eq!(t.mode_held(1), Some(Shared));
        t.release(1, 11, None, now);
        t.grant(1, 10, Exclusive, None);
        assert_eq!(t.mode_held(1), Some(Exclusive));
        assert_eq!(t.check(1, 11, Shared, None, now), Err(Blocked::Busy));
        t.release(1, 10, None, now);
        assert_eq!(t.counts(), (0, 0, 0));
    }

    #[test]
    fn queued_writer_blocks_later_readers() {
        let mut t = LockTable::default();
        let now = Instant::now();
        t.grant(1, 10, Shared, None);
        let w = t.enqueue(1, 20, Exclusive);
        // A new reader is compatible with the holder but must not overtake.
        assert_eq!(t.check(1, 30, Shared, None, now), Err(Blocked::Busy));
        let r = t.enqueue(1, 30, Shared);
        assert_eq!(t.check(1, 30, Shared, Some(r), now), Err(Blocked::Busy));
        t.release(1, 10, None, now);
        assert!(t.check(1, 20, Exclusive, Some(w), now).is_ok());
        t.dequeue(1, w, now);
        t.grant(1, 20, Exclusive, None);
        assert_eq!(t.check(1, 30, Shared, Some(r), now), Err(Blocked::Busy));
    }

    #[test]
    fn dead_holder_starts_delay() {
        let mut t = LockTable::default();
        let now = Instant::now();
        t.grant(1, 10, Exclusive, Some(HandleId(4)));
        assert_eq!(t.taken_via(HandleId(4)), vec![(1, 10)]);
        t.release(1, 10, Some(Duration::from_secs(1)), now);
        assert!(matches!(
            t.check(1, 11, Shared, None, now),
            Err(Blocked::Delay(_))
        ));
        let later = now + Duration::from_secs(2);
        assert!(t.check(1, 11, Shared, None, later).is_ok());
        assert!(t.nodes_of(10).is_empty());
    }

    #[test]
    fn removing_a_node_forgets_its_holders() {
        let mut t = LockTable::default();
        t.grant(1, 10, Exclusive, None);
        t.grant(2, 10, Shared, None);
        assert_eq!(t.remove_node(1), vec![10]);
        assert_eq!(t.nodes_of(10), vec![2]);
    }
}
