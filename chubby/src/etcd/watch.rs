//! Events from one etcd watch on the cell's prefix. Node keys give
//! ChildAdded/ChildRemoved/ContentsChanged/Deleted (a delete and a put of
//! the same node id in one revision is a rename, not a deletion); waiter
//! keys give LockAcquired/LockReleased. A compacted revision is handled by
//! re-reading the prefix and starting again from there.
//!
//! The watch also keeps what it saw of the namespace's paths and of every
//! lock's waiter keys, so that the engine's liveness loops (is my lock
//! still held, is that server's, who is in the servers directory) are
//! answered without a request to etcd ([`super::known`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use etcd_client::{EventType, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, WatchOptions};
use parking_lot::{Condvar, Mutex};

use super::node::{self, NodeVal, Waiter};
use super::EtcdCell;
use crate::error::Result;
use crate::events::Events;
use crate::types::{Event, NodeId, NodeKind};

#[derive(Default)]
pub struct Inner {
    pub events: Events,
    /// Path of every node, and node of every path, as the watch saw them.
    pub paths: HashMap<NodeId, String>,
    /// Ordered, so that a directory's children are one range.
    pub ids: BTreeMap<String, NodeId>,
    /// Every lock's waiter keys as the watch saw them, by node.
    pub locks: HashMap<NodeId, HashMap<String, Seen>>,
    /// Revision delivered so far.
    pub rev: i64,
    /// Watch responses applied so far: a lock waiter reads its lock again
    /// when this moves (see [`WatchState::wait_change`]).
    pub changes: u64,
    pub restarts: u64,
}

/// A waiter key as the watch saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub create_rev: i64,
    pub lease: i64,
    pub waiter: Waiter,
}

#[derive(Default)]
pub struct WatchState {
    pub inner: Mutex<Inner>,
    cond: Condvar,
}

impl WatchState {
    /// Wakes the lock waiters to read their locks again (a change made
    /// or seen here: a release, a lost session).
    pub fn poke(&self) {
        self.inner.lock().changes += 1;
        self.cond.notify_all();
    }

    /// The count of changes seen so far (for [`WatchState::wait_change`]).
    pub fn changes(&self) -> u64 {
        self.inner.lock().changes
    }

    /// Waits until the watch applies a change after `seen`, or `until`;
    /// `cancelled()` is asked every `slice` (false: it was).
    pub fn wait_change(
        &self,
        seen: u64,
        until: Instant,
        slice: Duration,
        cancelled: &dyn Fn() -> bool,
    ) -> bool {
        let mut g = self.inner.lock();
        loop {
            let now = Instant::now();
            if g.changes != seen || now >= until {
                return true;
            }
            let _ = self.cond.wait_for(&mut g, slice.min(until - now));
            if parking_lot::MutexGuard::unlocked(&mut g, cancelled) {
                return false;
            }
        }
    }

    pub fn wait_for(&self, rev: i64, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut g = self.inner.lock();
        while g.rev < rev {
            if self.cond.wait_until(&mut g, deadline).timed_out() {
                return;
            }
        }
    }
}

fn parent_and_name(path: &str) -> (String, String) {
    match path.rfind('/') {
        Some(0) => ("/".into(), path[1..].into()),
        Some(i) => (path[..i].into(), path[i + 1..].into()),
        None => ("/".into(), path.into()),
    }
}

impl Inner {
    fn emit(&mut self, id: NodeId, event: Event) {
        if self.events.wanted(id) {
            let path = self.paths.get(&id).cloned().unwrap_or_default();
            self.events.emit(id, &path, event);
        }
    }

    fn emit_parent(&mut self, path: &str, event: impl FnOnce(String) -> Event) {
        let (parent, name) = parent_and_name(path);
        if let Some(&pid) = self.ids.get(&parent) {
            self.emit(pid, event(name));
        }
    }

    fn forget(&mut self, id: NodeId) {
        if let Some(p) = self.paths.remove(&id) {
            self.ids.remove(&p);
        }
    }

    fn learn(&mut self, id: NodeId, path: &str) {
        self.forget(id);
        self.paths.insert(id, path.to_string());
        self.ids.insert(path.to_string(), id);
    }

    /// Rebuilds the path maps from a full read; nodes that vanished get
    /// Deleted, new ones ChildAdded on their parent.
    fn reload(&mut self, prefix: &str, kvs: &[KeyValue], lock_kvs: &[KeyValue], rev: i64) {
        self.locks.clear();
        for kv in lock_kvs {
            self.saw_waiter(prefix, kv);
        }
        let mut seen = HashSet::new();
        for kv in kvs {
            let Ok(key) = kv.key_str() else { continue };
            let Some(path) = node::path_of_key(prefix, key) else {
                continue;
            };
            let Ok(v) = NodeVal::decode(key, kv.value()) else {
                continue;
            };
            seen.insert(v.id);
            if self.paths.get(&v.id).map(String::as_str) != Some(path) {
                let known = self.paths.contains_key(&v.id);
                self.learn(v.id, path);
                if known || self.rev > 0 {
                    self.emit_parent(path, Event::ChildAdded);
                }
            }
        }
        let gone: Vec<NodeId> = self
            .paths
            .keys()
            .filter(|id| !seen.contains(id))
            .copied()
            .collect();
        for id in gone {
            let path = self.paths.get(&id).cloned().unwrap_or_default();
            self.emit(id, Event::Deleted);
            self.emit_parent(&path, Event::ChildRemoved);
            self.forget(id);
        }
        self.rev = rev;
    }

    /// Records a waiter key's put (false: not a waiter key).
    fn saw_waiter(&mut self, prefix: &str, kv: &KeyValue) -> bool {
        let (Ok(key), Some(w)) = (kv.key_str(), Waiter::decode(kv.value())) else {
            return false;
        };
        let Some(id) = lock_node(prefix, key) else {
            return false;
        };
        let seen = Seen {
            create_rev: kv.create_revision(),
            lease: kv.lease(),
            waiter: w,
        };
        self.locks
            .entry(id)
            .or_default()
            .insert(key.to_string(), seen);
        true
    }

    fn forget_waiter(&mut self, id: NodeId, key: &str) {
        if let Some(keys) = self.locks.get_mut(&id) {
            keys.remove(key);
            if keys.is_empty() {
                self.locks.remove(&id);
            }
        }
    }

    fn apply(&mut self, prefix: &str, events: &[etcd_client::Event]) {
        // Ids put as new nodes, by revision: a delete of one of them in the
        // same revision is the first half of a rename.
        let mut moved: HashSet<(i64, NodeId)> = HashSet::new();
        for ev in events {
            if let (EventType::Put, Some(kv)) = (ev.event_type(), ev.kv()) {
                if let Ok(key) = kv.key_str() {
                    if node::path_of_key(prefix, key).is_some() {
                        if let Ok(v) = NodeVal::decode(key, kv.value()) {
                            moved.insert((kv.mod_revision(), v.id));
                        }
                    }
                }
            }
        }
        for ev in events {
            let Some(kv) = ev.kv() else { continue };
            let Ok(key) = kv.key_str() else { continue };
            let prev = ev.prev_kv();
            if let Some(path) = node::path_of_key(prefix, key) {
                let old = prev.and_then(|p| NodeVal::decode(key, p.value()).ok());
                match ev.event_type() {
                    EventType::Put => {
                        let Ok(v) = NodeVal::decode(key, kv.value()) else {
                            continue;
                        };
                        match old {
                            Some(o) if o.id == v.id => {
                                if v.kind == NodeKind::File && o.data != v.data {
                                    self.emit(v.id, Event::ContentsChanged);
                                }
                            }
                            other => {
                                if let Some(o) = other {
                                    // A rename replaced this node.
                                    self.emit(o.id, Event::Deleted);
                                    self.emit_parent(path, Event::ChildRemoved);
                                    self.forget(o.id);
                                }
                                let old_path = self.paths.get(&v.id).cloned();
                                self.learn(v.id, path);
                                let same_place = old_path.as_deref().is_some_and(|op| {
                                    let (a, b) = (parent_and_name(op), parent_and_name(path));
                                    a.1 == b.1 && self.ids.get(&a.0) == self.ids.get(&b.0)
                                });
                                if !same_place {
                                    self.emit_parent(path, Event::ChildAdded);
                                }
                            }
                        }
                    }
                    EventType::Delete => {
                        let Some(o) = old else { continue };
                        if moved.contains(&(kv.mod_revision(), o.id)) {
                            // Renamed: its parent loses the name, unless the
                            // parent moved with it (a directory's subtree).
                            let (parent, name) = parent_and_name(path);
                            let parent_moves = self
                                .ids
                                .get(&parent)
                                .is_some_and(|pid| moved.contains(&(kv.mod_revision(), *pid)));
                            if !parent_moves {
                                if let Some(&pid) = self.ids.get(&parent) {
                                    self.emit(pid, Event::ChildRemoved(name));
                                }
                            }
                        } else {
                            self.emit(o.id, Event::Deleted);
                            self.emit_parent(path, Event::ChildRemoved);
                            self.forget(o.id);
                        }
                    }
                }
            } else if let Some(id) = lock_node(prefix, key) {
                let was = prev.and_then(|p| Waiter::decode(p.value()));
                match ev.event_type() {
                    EventType::Put => {
                        self.saw_waiter(prefix, kv);
                        if let Some(w) = Waiter::decode(kv.value()) {
                            let before = was.filter(|w| w.granted).map(|w| w.mode);
                            if w.granted && before != Some(w.mode) {
                                self.emit(id, Event::LockAcquired(w.mode));
                            }
                        }
                    }
                    EventType::Delete => {
                        self.forget_waiter(id, key);
                        if was.is_some_and(|w| w.granted) {
                            self.emit(id, Event::LockReleased);
                        }
                    }
                }
            }
        }
    }
}

/// The node id of a waiter key `P/l/<id>/<name>`.
fn lock_node(prefix: &str, key: &str) -> Option<NodeId> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("/l/")?;
    rest.split('/').next()?.parse().ok()
}

impl EtcdCell {
    /// Reads every node and restarts the path maps at that revision.
    fn reload_paths(&self) -> Result<i64> {
        let pre = || Some(GetOptions::new().with_prefix());
        let txn = Txn::new().and_then([
            TxnOp::get(format!("{}/n/", self.prefix), pre()),
            TxnOp::get(format!("{}/l/", self.prefix), pre()),
        ]);
        let r = self.txn("read the namespace", txn)?;
        let rev = Self::rev_of(r.header());
        let mut gets = r.op_responses().into_iter().filter_map(|o| match o {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        let (Some(nodes), Some(locks)) = (gets.next(), gets.next()) else {
            return Err(crate::error::Error::corruption(
                "etcd answered a namespace read oddly",
            ));
        };
        let mut g = self.watch.inner.lock();
        g.reload(&self.prefix, nodes.kvs(), locks.kvs(), rev);
        g.changes += 1;
        drop(g);
        self.watch.cond.notify_all();
        Ok(rev)
    }
}

/// Loads the namespace and starts the watch task (it holds the cell weakly).
pub fn start(cell: &Arc<EtcdCell>) -> Result<()> {
    cell.reload_paths()?;
    let weak: Weak<EtcdCell> = Arc::downgrade(cell);
    let client = cell.client.clone();
    let prefix = cell.prefix.clone();
    let stop = cell.stop.clone();
    let state = cell.watch.clone();
    cell.spawn(async move {
        let mut client = client;
        while !stop.load(Ordering::SeqCst) {
            let from = state.inner.lock().rev + 1;
            let opts = WatchOptions::new()
                .with_prefix()
                .with_prev_key()
                .with_start_revision(from);
            let mut stream = match client.watch(format!("{prefix}/"), Some(opts)).await {
                Ok(s) => s,
                Err(e) => {
                    log::debug!("chubby: etcd watch: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.compact_revision() > 0 || resp.canceled() {
                            // History we need is gone: read it all again.
                            log::info!(
                                "chubby: etcd watch from {from} compacted at {}: re-reading",
                                resp.compact_revision()
                            );
                            let Some(cell) = weak.upgrade() else { return };
                            let _ = cell.reload_paths();
                            state.inner.lock().restarts += 1;
                            break;
                        }
                        let mut g = state.inner.lock();
                        g.apply(&prefix, resp.events());
                        g.changes += 1;
                        let last = resp
                            .events()
                            .iter()
                            .filter_map(|e| e.kv())
                            .map(KeyValue::mod_revision)
                            .max();
                        if let Some(last) = last {
                            g.rev = g.rev.max(last);
                        }
                        drop(g);
                        state.cond.notify_all();
                    }
                    Ok(None) | Err(_) => {
                        state.inner.lock().restarts += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        break;
                    }
                }
            }
        }
    });
    Ok(())
}
