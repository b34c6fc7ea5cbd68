//! Reader/writer locks from waiter keys (etcd has none): each request puts
//! a key under `P/l/<id>/`, bound to the session's lease; it is granted once
//! no granted key conflicts with it and no earlier waiting key does (arrival
//! order). A grant marks the key granted and writes a marker `P/d/<id>/<name>`
//! that is not leased: an orderly unlock deletes both, a dead holder (its
//! lease gone, or released as dead) leaves the marker orphaned, and the lock
//! stays unavailable for the node's lock-delay from when that is seen.

use std::time::{Duration, Instant};

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};

use super::node::{self, Waiter};
use super::ns::Found;
use super::{EtcdCell, Held};
use crate::acl::{self, Credentials};
use crate::error::{Error, Result};
use crate::sequencer::Sequencer;
use crate::service::{LockGrant, LockRequest, Wait};
use crate::types::{HandleId, LockHolder, LockMode, NodeId, OwnerKey, Target};

/// Longest a waiter sleeps before asking `cancelled()` again.
const POLL: Duration = Duration::from_millis(50);
/// Longest a waiter of a busy lock goes without reading it again: it reads
/// it when the watch sees a change, this only in case the watch lags.
const REREAD: Duration = Duration::from_secs(1);

enum Blocked {
    Busy,
    Delay(Instant),
}

/// One read of a lock: its waiter keys (in arrival order) and markers.
struct LockView {
    waiters: Vec<(KeyValue, Waiter)>,
    markers: Vec<KeyValue>,
    node: Option<Found>,
    /// The revision the view was read at.
    rev: i64,
}

/// The last segment of a key: a waiter's name, which its marker shares.
fn name_of(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

fn conflicts(a: LockMode, b: LockMode) -> bool {
    a == LockMode::Exclusive || b == LockMode::Exclusive
}

impl EtcdCell {
    fn view(&self, f: &Found) -> Result<LockView> {
        let pre = || Some(GetOptions::new().with_prefix());
        let txn = Txn::new().and_then([
            TxnOp::get(node::lock_prefix(&self.prefix, f.val.id), pre()),
            TxnOp::get(node::marker_prefix(&self.prefix, f.val.id), pre()),
            TxnOp::get(f.key.clone(), None),
        ]);
        let r = self.txn("read a lock", txn)?;
        let rev = Self::rev_of(r.header());
        let mut gets = r.op_responses().into_iter().filter_map(|o| match o {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        let (Some(l), Some(d), Some(n)) = (gets.next(), gets.next(), gets.next()) else {
            return Err(Error::corruption("etcd answered a lock read oddly"));
        };
        let mut waiters: Vec<(KeyValue, Waiter)> = l
            .kvs()
            .iter()
            .filter_map(|kv| Waiter::decode(kv.value()).map(|w| (kv.clone(), w)))
            .collect();
        waiters.sort_by_key(|(kv, _)| kv.create_revision());
        let node = match n.kvs().first() {
            Some(kv) => {
                let f2 = self.get_found(kv)?;
                (f2.val.id == f.val.id).then_some(f2)
            }
            None => None,
        };
        Ok(LockView {
            waiters,
            markers: d.kvs().to_vec(),
            node,
            rev,
        })
    }

    fn get_found(&self, kv: &KeyValue) -> Result<Found> {
        let key = kv
            .key_str()
            .map_err(|_| Error::corruption("non-UTF-8 key"))?;
        Ok(Found {
            path: node::path_of_key(&self.prefix, key)
                .unwrap_or("/")
                .to_string(),
            key: key.to_string(),
            val: node::NodeVal::decode(key, kv.value())?,
            create_rev: kv.create_revision(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
        })
    }

    /// Whether waiter `me` (create_revision) may be granted `mode` now, and
    /// the orphaned markers whose delay is over (to delete with the grant).
    /// `strict` (try_lock) also refuses while anyone else waits.
    fn may_grant(
        &self,
        v: &LockView,
        me: i64,
        mode: LockMode,
        strict: bool,
    ) -> std::result::Result<Vec<String>, Blocked> {
        for (kv, w) in &v.waiters {
            if kv.create_revision() == me {
                continue;
            }
            let earlier = kv.create_revision() < me;
            if w.granted && conflicts(w.mode, mode) {
                return Err(Blocked::Busy);
            }
            if !w.granted && (strict || (earlier && conflicts(w.mode, mode))) {
                return Err(Blocked::Busy);
            }
        }
        let live: std::collections::HashSet<&str> = v
            .waiters
            .iter()
            .filter_map(|(kv, _)| kv.key_str().ok().map(name_of))
            .collect();
        let delay = Duration::from_millis(v.node.as_ref().map_or(0, |n| n.val.lock_delay_ms));
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut until: Option<Instant> = None;
        let mut local = self.local.lock();
        for kv in &v.markers {
            let Ok(key) = kv.key_str() else { continue };
            if live.contains(name_of(key)) {
                continue;
            }
            let seen = *local.delay_seen.entry(key.to_string()).or_insert(now);
            if now >= seen + delay {
                expired.push(key.to_string());
            } else {
                until = Some(until.map_or(seen + delay, |u| u.max(seen + delay)));
            }
        }
        drop(local);
        match until {
            Some(u) => Err(Blocked::Delay(u)),
            None => Ok(expired),
        }
    }

    /// Marks waiter `key` granted (with its marker; a writer-mode grant also
    /// records the generation in the node). False if the view went stale.
    fn grant(
        &self,
        v: &LockView,
        key: &str,
        me: i64,
        w: &Waiter,
        expired: &[String],
    ) -> Result<bool> {
        let Some(n) = &v.node else {
            return Err(Error::NotFound("the lock's node was removed".into()));
        };
        let granted = Waiter {
            granted: true,
            ..w.clone()
        };
        let lease = self.lease.id();
        let mut when = vec![Compare::version(key.to_string(), CompareOp::Greater, 0)];
        let mut ops = vec![
            TxnOp::put(key.to_string(), granted.encode(), Self::lease_opts(lease)),
            TxnOp::put(
                format!(
                    "{}{}",
                    node::marker_prefix(&self.prefix, n.val.id),
                    name_of(key)
                ),
                "",
                None,
            ),
        ];
        for m in expired {
            ops.push(TxnOp::delete(m.clone(), None));
        }
        if w.mode == LockMode::Exclusive {
            let mut val = n.val.clone();
            val.lock_gen = me as u64;
            when.push(Compare::mod_revision(
                n.key.clone(),
                CompareOp::Equal,
                n.mod_rev,
            ));
            ops.push(TxnOp::put(
                n.key.clone(),
                val.encode(),
                Self::lease_opts(n.lease),
            ));
        }
        let r = self.txn("grant a lock", Txn::new().when(when).and_then(ops))?;
        if r.succeeded() {
            let mut local = self.local.lock();
            for m in expired {
                local.delay_seen.remove(m);
            }
            drop(local);
            self.settle(Self::rev_of(r.header()));
        }
        Ok(r.succeeded())
    }

    /// Puts a new waiter key; returns it and its create_revision.
    fn enqueue(&self, node: NodeId, owner: OwnerKey, mode: LockMode) -> Result<(String, i64)> {
        let lease = self.lease.id();
        if lease == 0 {
            return Err(super::etcd_err(
                "lock",
                "no session with etcd (reconnecting)",
            ));
        }
        let n = self
            .names
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = format!(
            "{}{lease:x}_{owner:x}_{n}",
            node::lock_prefix(&self.prefix, node)
        );
        let w = Waiter {
            owner,
            mode,
            granted: false,
        };
        let k = key.clone();
        let r = self.run("queue for a lock", move |mut c| async move {
            c.put(k, w.encode(), Self::lease_opts(lease)).await
        })?;
        Ok((key, Self::rev_of(r.header())))
    }

    fn delete_keys(&self, keys: Vec<String>) -> Result<()> {
        let ops: Vec<TxnOp> = keys.into_iter().map(|k| TxnOp::delete(k, None)).collect();
        let r = self.txn("release a lock", Txn::new().and_then(ops))?;
        self.settle(Self::rev_of(r.header()));
        Ok(())
    }

    /// Resolves a lock target; it needs read or write permission, and write
    /// permission on a node owned by root ([`acl::may_lock`]).
    fn lock_target(
        &self,
        creds: &Credentials,
        target: Target<'_>,
    ) -> Result<(Found, Option<HandleId>)> {
        let (f, _) = self.resolve_target(creds, target)?;
        if !acl::may_lock(creds, f.val.perm()) {
            return Err(Error::PermissionDenied(f.path));
        }
        let h = match target {
            Target::Handle(h) => Some(h),
            Target::Path(_) => None,
        };
        Ok((f, h))
    }

    fn held(&self, node: NodeId, owner: OwnerKey) -> Option<Held> {
        self.local
            .lock()
            .held
            .iter()
            .find(|h| h.node == node && h.owner == owner)
            .cloned()
    }

    fn grant_of(path: &str, mode: LockMode, rev: i64) -> LockGrant {
        LockGrant {
            mode,
            generation: rev as u64,
            sequencer: Sequencer {
                path: path.to_string(),
                mode,
                generation: rev as u64,
            },
        }
    }

    /// Asks for the lock: queues, then waits (unless `Wait::No`).
    pub(super) fn acquire_on_etcd(
        &self,
        req: LockRequest<'_>,
        wait: Wait<'_>,
    ) -> Result<LockGrant> {
        let (owner, mode) = (req.owner, req.mode);
        let (wait, deadline, cancelled): (bool, _, &dyn Fn() -> bool) = match wait {
            Wait::No => (false, None, &|| false),
            Wait::Until {
                deadline,
                cancelled,
            } => (true, deadline, cancelled),
        };
        if wait && cancelled() {
            return Err(Error::Interrupted);
        }
        let (f, handle) = self.lock_target(req.creds, req.target)?;
        let handle = handle.or_else(|| self.held(f.val.id, owner).and_then(|h| h.handle));
        if let Some(h) = self.held(f.val.id, owner) {
            if h.mode == mode {
                return Ok(Self::grant_of(&f.path, mode, h.rev));
            }
            if mode == LockMode::Shared {
                // Downgrade: at once, same generation.
                let w = Waiter {
                    owner,
                    mode,
                    granted: true,
                };
                let (k, lease) = (h.key.clone(), self.lease.id());
                let r = self.run("downgrade a lock", move |mut c| async move {
                    c.put(k, w.encode(), Self::lease_opts(lease)).await
                })?;
                self.settle(Self::rev_of(r.header()));
                self.set_held_mode(f.val.id, owner, mode);
                return Ok(Self::grant_of(&f.path, mode, h.rev));
            }
            // Upgrade: at once for the sole holder, else (waiting) give up
            // the shared lock first, as flock(2) does.
            let v = self.view(&f)?;
            let others = v
                .waiters
                .iter()
                .any(|(kv, w)| w.granted && kv.create_revision() != h.rev);
            if !others {
                if let Some(g) = self.upgrade(&f, &v, &h)? {
                    return Ok(g);
                }
            } else if !wait {
                return Err(Error::WouldBlock);
            }
            self.release_held(&h, false)?;
        }
        let (key, me) = self.enqueue(f.val.id, owner, mode)?;
        let w = Waiter {
            owner,
            mode,
            granted: false,
        };
        let res = self.wait_turn(&f, &key, me, &w, wait, deadline, cancelled);
        match &res {
            Ok(_) => {
                self.local.lock().held.push(Held {
                    node: f.val.id,
                    owner,
                    key,
                    rev: me,
                    mode,
                    handle,
                });
            }
            Err(_) => {
                let _ = self.delete_keys(vec![key]);
            }
        }
        res.map(|_| Self::grant_of(&f.path, mode, me))
    }

    #[allow(clippy::too_many_arguments)]
    fn wait_turn(
        &self,
        f: &Found,
        key: &str,
        me: i64,
        w: &Waiter,
        wait: bool,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<()> {
        loop {
            // Before the read: a change after it wakes the wait below.
            let seen = self.watch.changes();
            let v = self.view(f)?;
            if v.node.is_none() {
                return Err(Error::NotFound(format!("{} was removed", f.path)));
            }
            if !v.waiters.iter().any(|(kv, _)| kv.create_revision() == me) {
                return Err(super::etcd_err("lock", "the session ended while waiting"));
            }
            let now = Instant::now();
            let sleep = match self.may_grant(&v, me, w.mode, !wait) {
                Ok(expired) => {
                    if wait && cancelled() {
                        return Err(Error::Interrupted);
                    }
                    if self.grant(&v, key, me, w, &expired)? {
                        return Ok(());
                    }
                    continue;
                }
                Err(_) if !wait => return Err(Error::WouldBlock),
                Err(Blocked::Delay(until)) => until.saturating_duration_since(now),
                Err(Blocked::Busy) => REREAD,
            };
            let mut sleep = sleep.clamp(Duration::from_millis(1), REREAD);
            if let Some(d) = deadline {
                if now >= d {
                    return Err(Error::TimedOut);
                }
                sleep = sleep.min(d - now);
            }
            if !self.watch.wait_change(seen, now + sleep, POLL, cancelled) {
                return Err(Error::Interrupted);
            }
        }
    }

    /// The sole holder's upgrade, at once whoever waits (they wait for it
    /// anyway): its shared key and marker are replaced by a new granted
    /// exclusive key (a new revision: a new generation) and its marker, if
    /// none of the lock's keys changed since `v` was read. None if some did.
    fn upgrade(&self, f: &Found, v: &LockView, h: &Held) -> Result<Option<LockGrant>> {
        let lease = self.lease.id();
        let lp = node::lock_prefix(&self.prefix, h.node);
        let mp = node::marker_prefix(&self.prefix, h.node);
        let n = self
            .names
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{lease:x}_{:x}_{n}", h.owner);
        let w = Waiter {
            owner: h.owner,
            mode: LockMode::Exclusive,
            granted: true,
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(lp.clone(), CompareOp::Less, v.rev + 1).with_prefix()])
            .and_then([
                TxnOp::delete(h.key.clone(), None),
                TxnOp::delete(format!("{mp}{}", name_of(&h.key)), None),
                TxnOp::put(format!("{lp}{name}"), w.encode(), Self::lease_opts(lease)),
                TxnOp::put(format!("{mp}{name}"), "", None),
            ]);
        let r = self.txn("upgrade a lock", txn)?;
        if !r.succeeded() {
            return Ok(None);
        }
        let rev = Self::rev_of(r.header());
        for x in self.local.lock().held.iter_mut() {
            if x.node == h.node && x.owner == h.owner {
                x.key = format!("{lp}{name}");
                x.rev = rev;
                x.mode = LockMode::Exclusive;
            }
        }
        // The node's lock generation, for stat (best effort: a concurrent
        // change of the node wins).
        if let Some(cur) = &v.node {
            let mut val = cur.val.clone();
            val.lock_gen = rev as u64;
            let _ = self.replace_node(cur, &val);
        }
        self.settle(rev);
        Ok(Some(Self::grant_of(&f.path, LockMode::Exclusive, rev)))
    }

    /// Deletes dead holders' markers nobody will clear: those of nodes that
    /// are gone (an ephemeral node that went with its lease), and those
    /// orphaned for longer than any lock-delay.
    pub(super) fn sweep_markers(&self) -> Result<()> {
        let keys_only = || Some(GetOptions::new().with_prefix().with_keys_only());
        let (dp, lp) = (format!("{}/d/", self.prefix), format!("{}/l/", self.prefix));
        let txn = Txn::new().and_then([
            TxnOp::get(dp.clone(), keys_only()),
            TxnOp::get(lp.clone(), keys_only()),
        ]);
        let r = self.txn("sweep lock markers", txn)?;
        let mut gets = r.op_responses().into_iter().filter_map(|o| match o {
            TxnOpResponse::Get(g) => Some(g),
            _ => None,
        });
        let (Some(d), Some(l)) = (gets.next(), gets.next()) else {
            return Ok(());
        };
        let live: std::collections::HashSet<String> = l
            .kvs()
            .iter()
            .filter_map(|kv| kv.key_str().ok())
            .filter_map(|k| k.strip_prefix(&lp).map(str::to_string))
            .collect();
        let now = Instant::now();
        let mut doomed = Vec::new();
        {
            let nodes = self.watch.inner.lock();
            let mut local = self.local.lock();
            for kv in d.kvs() {
                let Ok(key) = kv.key_str() else { continue };
                let Some(rest) = key.strip_prefix(&dp) else {
                    continue;
                };
                let id: Option<NodeId> = rest.split('/').next().and_then(|i| i.parse().ok());
                // Until the watch has read the namespace every node looks
                // gone: only the lock-delay rule applies then.
                let node_gone =
                    nodes.rev > 0 && id.is_some_and(|id| !nodes.paths.contains_key(&id));
                // Only an orphaned marker starts its lock-delay: a live
                // holder's is no concern of the sweep.
                if live.contains(rest) {
                    continue;
                }
                let seen = *local.delay_seen.entry(key.to_string()).or_insert(now);
                // A node created since the watch last caught up looks gone
                // too: give it a lease period first.
                let gone_long = node_gone && now >= seen + self.opts.lease_ttl;
                if gone_long || now >= seen + self.opts.max_lock_delay {
                    local.delay_seen.remove(key);
                    doomed.push(key.to_string());
                }
            }
        }
        if !doomed.is_empty() {
            self.delete_keys(doomed)?;
        }
        Ok(())
    }

    fn set_held_mode(&self, node: NodeId, owner: OwnerKey, mode: LockMode) {
        for h in self.local.lock().held.iter_mut() {
            if h.node == node && h.owner == owner {
                h.mode = mode;
            }
        }
    }

    /// Lets go of a held lock: orderly (key and marker go) or as dead (the
    /// marker stays, so the lock-delay applies).
    pub(super) fn release_held(&self, h: &Held, dead: bool) -> Result<()> {
        self.local
            .lock()
            .held
            .retain(|x| !(x.node == h.node && x.owner == h.owner));
        let marker = format!(
            "{}{}",
            node::marker_prefix(&self.prefix, h.node),
            name_of(&h.key)
        );
        let mut keys = vec![h.key.clone()];
        if dead {
            // The delay starts now here; elsewhere when first seen.
            self.local.lock().delay_seen.insert(marker, Instant::now());
        } else {
            keys.push(marker);
        }
        let r = self.delete_keys(keys);
        self.watch.poke();
        r
    }

    pub(super) fn unlock_impl(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool> {
        let (f, _) = self.resolve_target(&Credentials::root(), target)?;
        match self.held(f.val.id, owner) {
            Some(h) => self.release_held(&h, false).map(|_| true),
            None => Ok(false),
        }
    }

    pub(super) fn release_owner_dead_impl(&self, owner: OwnerKey) -> usize {
        let mine: Vec<Held> = self
            .local
            .lock()
            .held
            .iter()
            .filter(|h| h.owner == owner)
            .cloned()
            .collect();
        mine.iter()
            .filter(|h| self.release_held(h, true).is_ok())
            .count()
    }

    /// Releases the locks taken through a handle.
    pub(super) fn release_handle(&self, handle: HandleId, dead: bool) {
        let via: Vec<Held> = self
            .local
            .lock()
            .held
            .iter()
            .filter(|h| h.handle == Some(handle))
            .cloned()
            .collect();
        for h in via {
            if let Err(e) = self.release_held(&h, dead) {
                log::warn!("chubby: releasing a lock on etcd: {e}");
            }
        }
    }

    pub(super) fn holders_impl(&self, target: Target<'_>) -> Result<Vec<LockHolder>> {
        let (f, _) = self.resolve_target(&Credentials::root(), target)?;
        let v = self.view(&f)?;
        Ok(v.waiters
            .into_iter()
            .filter(|(_, w)| w.granted)
            .map(|(_, w)| LockHolder {
                owner: w.owner,
                mode: w.mode,
            })
            .collect())
    }

    pub(super) fn sequencer_impl(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer> {
        let (f, _) = self.resolve_target(&Credentials::root(), target).ok()?;
        let h = self.held(f.val.id, owner)?;
        Some(Self::grant_of(&f.path, h.mode, h.rev).sequencer)
    }

    /// A transaction comparing the holder key's create_revision: true iff a
    /// key of the named lock with that revision is granted in that mode, and
    /// (if it is this daemon's) its session is alive.
    pub(super) fn check_sequencer_impl(&self, seq: &Sequencer) -> bool {
        let Ok(f) = self.lookup(&Credentials::root(), &seq.path) else {
            return false;
        };
        let Ok(v) = self.view(&f) else { return false };
        let gen = seq.generation as i64;
        v.waiters.iter().any(|(kv, w)| {
            kv.create_revision() == gen
                && w.granted
                && w.mode == seq.mode
                && !self.local.lock().lost_leases.contains(&kv.lease())
                && (kv.lease() != self.lease.id() || self.lease.alive(self.opts.lease_ttl))
        })
    }
}
