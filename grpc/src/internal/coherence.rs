//! Cache coherence between daemons (docs/coherence.md), after Chubby's
//! cache invalidation: a daemon whose kernel caches the cluster's rows
//! holds a lease at every other daemon (`Watch`, renewed by `follow.rs`);
//! a daemon that wrote rows tells each watcher with a live lease which
//! (`Invalidate`) and returns from the write only once each has dropped
//! them from its kernel, or its lease ran out. A lease is not extended
//! while an invalidation to its holder is unanswered, so a daemon whose
//! lease ends drops everything it caches no later than a writer stops
//! waiting for it.

use super::lanes::{DaemonCalls, Item, Lane, Owner, Role, Waiter};
use super::messages::{Invalidation, Op};
use engine::protocol::{AfterWrite, WireError};
use engine::Bigtable;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a watcher's lease lasts from a renewal: the longest a write
/// waits for a daemon that stopped answering.
pub(crate) const LEASE: Duration = Duration::from_secs(3);
/// Watchers a daemon keeps (one per other daemon); more are refused.
const MAX_WATCHERS: usize = 1024;
/// A daemon's first seconds: the others may not have registered with it
/// yet, so its writes are also sent to every daemon listed in the lock
/// service (each waited for at most [`UNREGISTERED_WAIT`]).
const GRACE: Duration = LEASE;
const UNREGISTERED_WAIT: Duration = Duration::from_millis(500);

/// A watcher's lease.
struct Watcher {
    expires: Instant,
    /// Invalidations sent and not answered: the lease is not extended meanwhile.
    pending: u32,
}

/// What the invalidated daemon's kernel is told (the mount's caches).
pub type Sink = Arc<dyn crate::Changes>;

/// Counters for `.bigtable/status` and the benchmark.
#[derive(Default)]
pub struct CoherenceStats {
    /// Invalidations sent to other daemons and answered (one per write
    /// and daemon).
    pub sent: AtomicU64,
    /// Messages that carried them (several writes' at once when batched).
    pub messages: AtomicU64,
    /// Invalidations that gave up on a watcher when its lease ran out.
    pub expired: AtomicU64,
    /// Invalidations received from other daemons.
    pub received: AtomicU64,
    /// Times this daemon dropped all it caches (a lease lost or new).
    pub dropped_all: AtomicU64,
    /// Microseconds writes waited for watchers, summed.
    pub wait_us: AtomicU64,
    /// Writes that waited for at least one watcher.
    pub waited_writes: AtomicU64,
    /// Other daemons this daemon holds a live lease at now.
    pub leases: AtomicU64,
}

/// One daemon's side of the protocol: who watches its writes, and what to
/// tell its own kernel when another daemon writes.
pub struct Coherence {
    /// This daemon's advertised address (how watchers name themselves).
    pub(crate) me: Arc<str>,
    watchers: Mutex<HashMap<String, Watcher>>,
    /// One sender per daemon told of writes (`lanes.rs`).
    lanes: Mutex<HashMap<String, Arc<Lane>>>,
    pub(crate) sink: OnceLock<Sink>,
    pub(crate) bt: OnceLock<Bigtable>,
    pub(crate) dialer: OnceLock<Arc<dyn DaemonCalls>>,
    /// Set when the daemon stops: the renewing thread ends.
    pub(crate) stopped: AtomicBool,
    /// The other daemons registered in the lock service (`follow.rs`).
    pub(crate) listed: Mutex<Vec<String>>,
    /// When this daemon started following (see [`GRACE`]).
    pub(crate) since: OnceLock<Instant>,
    /// Figures.
    pub stats: CoherenceStats,
}

impl Coherence {
    pub(crate) fn new(me: Arc<str>) -> Coherence {
        Coherence {
            me,
            watchers: Mutex::new(HashMap::new()),
            lanes: Mutex::new(HashMap::new()),
            sink: OnceLock::new(),
            bt: OnceLock::new(),
            dialer: OnceLock::new(),
            stopped: AtomicBool::new(false),
            listed: Mutex::new(Vec::new()),
            since: OnceLock::new(),
            stats: CoherenceStats::default(),
        }
    }

    /// This daemon may have missed invalidations: its kernel drops all it
    /// caches of every table.
    pub(crate) fn drop_all(&self) {
        let (Some(sink), Some(bt)) = (self.sink.get(), self.bt.get()) else {
            return;
        };
        self.stats.dropped_all.fetch_add(1, Ordering::Relaxed);
        for t in bt.list_tables() {
            sink.table(&t);
        }
    }

    /// Answers `Watch` and `Invalidate`; None for any other operation.
    pub(crate) fn handle(&self, op: &Op) -> Option<Result<Vec<u8>, WireError>> {
        match op {
            Op::Watch { addr, lease_ms } => {
                Some(self.watch(addr, *lease_ms).and_then(|g| encode(&g)))
            }
            Op::Invalidate { table, rows, whole } => {
                self.invalidate(table, rows, *whole);
                Some(encode(&()))
            }
            Op::InvalidateMany { tables } => {
                for i in tables {
                    self.invalidate(&i.table, &i.rows, i.whole);
                }
                Some(encode(&()))
            }
            _ => None,
        }
    }

    /// Another daemon wrote `rows` of `table` (or any row): this daemon's
    /// kernel drops them.
    fn invalidate(&self, table: &str, rows: &[Vec<u8>], whole: bool) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        if let Some(sink) = self.sink.get() {
            if whole {
                sink.table(table);
            } else {
                let rows: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
                sink.rows_from_peer(table, &rows);
            }
        }
    }

    /// Grants or renews the lease of the daemon at `addr`: the time left of
    /// it, and whether it held one without a break until now (if not, it
    /// must drop all it caches: writes may have passed it by).
    fn watch(&self, addr: &str, lease_ms: u64) -> Result<(u64, bool), WireError> {
        if addr == &*self.me {
            return Err(WireError::InvalidArgument(
                "a daemon watching itself".into(),
            ));
        }
        let lease = Duration::from_millis(lease_ms).min(LEASE);
        let now = Instant::now();
        let mut w = self.watchers.lock();
        let continuous = match w.get_mut(addr) {
            Some(x) if x.expires > now => {
                // Chubby's rule: no extension while an invalidation waits.
                if x.pending == 0 {
                    x.expires = now + lease;
                }
                true
            }
            _ => {
                if w.len() >= MAX_WATCHERS {
                    w.retain(|_, x| x.expires > now || x.pending > 0);
                    if w.len() >= MAX_WATCHERS {
                        return Err(WireError::Unavailable("too many watching daemons".into()));
                    }
                }
                w.insert(
                    addr.to_string(),
                    Watcher {
                        expires: now + lease,
                        pending: 0,
                    },
                );
                false
            }
        };
        let left = w.get(addr).map_or(Duration::ZERO, |x| x.expires - now);
        Ok((left.as_millis() as u64, continuous))
    }

    /// The watchers with a live lease, each marked as having one more
    /// invalidation pending, with its lease's end.
    fn take_watchers(&self) -> Vec<(String, Instant, bool)> {
        let now = Instant::now();
        let mut w = self.watchers.lock();
        w.retain(|_, x| x.expires > now || x.pending > 0);
        let mut out: Vec<(String, Instant, bool)> = w
            .iter_mut()
            .filter(|(_, x)| x.expires > now)
            .map(|(a, x)| {
                x.pending += 1;
                (a.clone(), x.expires, true)
            })
            .collect();
        if self.since.get().is_some_and(|t| t.elapsed() < GRACE) {
            for a in self.listed.lock().iter() {
                if !w.contains_key(a) {
                    out.push((a.clone(), now + UNREGISTERED_WAIT, false));
                }
            }
        }
        out
    }

    /// The invalidation to `addr` ended: answered, or its lease is over
    /// (then the watcher is forgotten: it must register afresh).
    pub(crate) fn done(&self, addr: &str, watcher: bool, answered: bool) {
        let mut w = self.watchers.lock();
        if let Some(x) = w.get_mut(addr).filter(|_| watcher) {
            x.pending = x.pending.saturating_sub(1);
            if !answered {
                w.remove(addr);
            }
        }
        if answered {
            self.stats.sent.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.expired.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The hook the engine calls after each write this daemon makes.
pub(crate) struct Hook(pub(crate) Arc<Coherence>);

impl Hook {
    /// Queues `inv` for every watcher with a live lease (their senders
    /// carry it, batched with concurrent writes' in one message per
    /// round trip) and returns when each answered or its lease ran out.
    fn tell_all(&self, inv: Invalidation) {
        let c = &self.0;
        let Some(dialer) = c.dialer.get() else {
            return;
        };
        let targets = c.take_watchers();
        if targets.is_empty() {
            return;
        }
        let started = Instant::now();
        let inv = Arc::new(inv);
        let waiter = Waiter::new(targets.len());
        let mut lead = None;
        for (addr, until, watcher) in targets {
            let lane = c.lane(&addr);
            let item = Item {
                inv: inv.clone(),
                until,
                watcher,
                waiter: waiter.clone(),
            };
            // This thread sends one idle lane's batch itself; the others'
            // threads send theirs meanwhile.
            if let Role::Lead = lane.push(c, item, lead.is_none()) {
                lead = Some(lane);
            }
        }
        if let Some(lane) = lead {
            lane.lead(c, &**dialer);
        }
        waiter.wait();
        let us = started.elapsed().as_micros() as u64;
        c.stats.wait_us.fetch_add(us, Ordering::Relaxed);
        c.stats.waited_writes.fetch_add(1, Ordering::Relaxed);
    }
}

impl Coherence {
    /// The sender of invalidations to `addr`; lanes of daemons that are no
    /// longer watchers nor listed are forgotten (a write that holds one
    /// still completes through it).
    fn lane(&self, addr: &str) -> Arc<Lane> {
        let mut lanes = self.lanes.lock();
        if let Some(l) = lanes.get(addr) {
            return l.clone();
        }
        if lanes.len() >= 2 * MAX_WATCHERS {
            let w = self.watchers.lock();
            let listed = self.listed.lock();
            lanes.retain(|a, _| w.contains_key(a) || listed.contains(a));
        }
        let l = Lane::new(addr);
        lanes.insert(addr.to_string(), l.clone());
        l
    }
}

impl Owner for Coherence {
    fn dialer(&self) -> Option<&Arc<dyn DaemonCalls>> {
        self.dialer.get()
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn done(&self, addr: &str, watcher: bool, answered: bool) {
        Coherence::done(self, addr, watcher, answered)
    }

    fn sent_message(&self) {
        self.stats.messages.fetch_add(1, Ordering::Relaxed);
    }
}

impl AfterWrite for Hook {
    fn wrote(&self, table: &str, rows: &[&[u8]]) {
        self.tell_all(Invalidation::of(table, rows.iter().copied()));
    }

    fn changed_table(&self, table: &str) {
        self.tell_all(Invalidation {
            table: table.to_string(),
            rows: Vec::new(),
            whole: true,
        });
    }

    fn status_line(&self) -> String {
        let s = &self.0.stats;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "coherence_watchers={} coherence_leases={} coherence_sent={} coherence_messages={} coherence_expired={} coherence_received={} coherence_dropped_all={} coherence_waited_writes={} coherence_wait_us={}",
            self.0.watchers.lock().len(),
            g(&s.leases),
            g(&s.sent),
            g(&s.messages),
            g(&s.expired),
            g(&s.received),
            g(&s.dropped_all),
            g(&s.waited_writes),
            g(&s.wait_us),
        )
    }
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    bincode::serialize(v).map_err(|e| WireError::Unavailable(format!("cannot encode a reply: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(c: &Coherence, addr: &str) -> (u64, bool) {
        c.watch(addr, LEASE.as_millis() as u64).unwrap()
    }

    #[test]
    fn a_lease_is_new_then_continuous_and_not_extended_while_an_invalidation_waits() {
        let c = Coherence::new("me:1".into());
        assert!(c.watch("me:1", 3000).is_err(), "a daemon watching itself");
        let (left, continuous) = watch(&c, "b:1");
        assert!(!continuous, "a new lease must make B drop everything");
        assert!(left <= LEASE.as_millis() as u64 && left > 2000);
        assert!(watch(&c, "b:1").1);
        // An invalidation is pending: renewals do not extend the lease.
        let taken = c.take_watchers();
        assert_eq!(taken.len(), 1);
        let end = taken[0].1;
        std::thread::sleep(Duration::from_millis(30));
        let (left, continuous) = watch(&c, "b:1");
        assert!(continuous);
        assert!(Instant::now() + Duration::from_millis(left) <= end + Duration::from_millis(5));
        // Unanswered until its end: B is forgotten, and its next renewal
        // says the lease broke.
        c.done("b:1", true, false);
        assert_eq!(c.stats.expired.load(Ordering::Relaxed), 1);
        assert!(!watch(&c, "b:1").1);
        // Answered: the lease is extended again.
        c.take_watchers();
        c.done("b:1", true, true);
        assert!(watch(&c, "b:1").1);
    }

    #[test]
    fn a_lease_is_at_most_three_seconds_and_watchers_are_bounded() {
        let c = Coherence::new("me:1".into());
        let (left, _) = c.watch("b:1", 3_600_000).unwrap();
        assert!(left <= LEASE.as_millis() as u64);
        for i in 0..MAX_WATCHERS - 1 {
            c.watch(&format!("d{i}:1"), 3000).unwrap();
        }
        assert!(c.watch("one-too-many:1", 3000).is_err());
        // Renewing one already there still works.
        assert!(c.watch("b:1", 3000).is_ok());
    }

    #[test]
    fn an_invalidation_names_each_row_once_or_the_whole_table() {
        use super::super::lanes::{MAX_ROWS, MAX_ROW_BYTES};
        let rows: Vec<&[u8]> = vec![b"a", b"b", b"a"];
        let i = Invalidation::of("t", rows.into_iter());
        assert_eq!(i.table, "t");
        assert_eq!(i.rows, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(!i.whole);
        let many: Vec<Vec<u8>> = (0..MAX_ROWS + 1)
            .map(|i| i.to_string().into_bytes())
            .collect();
        let i = Invalidation::of("t", many.iter().map(|r| r.as_slice()));
        assert!(i.whole && i.rows.is_empty());
        let big = vec![0u8; MAX_ROW_BYTES + 1];
        let i = Invalidation::of("t", std::iter::once(big.as_slice()));
        assert!(i.whole && i.rows.is_empty());
    }
}
