//! Answers from what the watch saw (`watch::Inner`), without a request to
//! etcd: what the engine's liveness loops ask many times a second (is my
//! lock still held, is that server's, who is registered). Each answer is
//! as of the watch's last event; a `false` or `None` sends the caller to
//! the exact request, so a watch that lags delays a failover but never
//! makes a lock look lost that is held.

use std::sync::atomic::Ordering;

use super::watch::Seen;
use super::EtcdCell;
use crate::sequencer::Sequencer;

impl EtcdCell {
    /// Whether a waiter key as the watch saw it still stands for a holder:
    /// granted, its lease not one this daemon lost, and, if the lease is
    /// this daemon's own, the session alive by the daemon's clock and the
    /// lock still among those it holds (a release here counts at once).
    fn stands(&self, key: &str, s: &Seen) -> bool {
        if !s.waiter.granted {
            return false;
        }
        let local = self.local.lock();
        if local.lost_leases.contains(&s.lease) {
            return false;
        }
        if s.lease == self.lease.id() {
            return self.lease.alive(self.opts.lease_ttl)
                && local.held.iter().any(|h| h.key == key);
        }
        true
    }

    pub(super) fn known_valid_impl(&self, seq: &Sequencer) -> bool {
        let gen = seq.generation as i64;
        let w = self.watch.inner.lock();
        let Some(keys) = w.ids.get(&seq.path).and_then(|id| w.locks.get(id)) else {
            return false;
        };
        keys.iter()
            .any(|(key, s)| s.create_rev == gen && s.waiter.mode == seq.mode && self.stands(key, s))
    }

    pub(super) fn known_held_impl(&self, path: &str) -> bool {
        let w = self.watch.inner.lock();
        let Some(keys) = w.ids.get(path).and_then(|id| w.locks.get(id)) else {
            return false;
        };
        keys.iter().any(|(key, s)| self.stands(key, s))
    }

    /// The names directly under directory `dir` as the watch saw them
    /// (None: the watch has not seen `dir`).
    pub(super) fn known_list_impl(&self, dir: &str) -> Option<Vec<String>> {
        let w = self.watch.inner.lock();
        w.ids.get(dir)?;
        let base = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        let names = w
            .ids
            .range(base.clone()..)
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(&base))
            .filter_map(|p| p.get(base.len()..))
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .map(str::to_string)
            .collect();
        Some(names)
    }

    /// Requests sent to etcd so far (for `status`).
    pub(super) fn requests(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}
