//! This daemon's leases at the other daemons (docs/coherence.md): once a
//! second it renews a lease at every daemon that runs tablet servers, so
//! that their writes invalidate what its kernel caches, and it drops
//! everything its kernel caches whenever it may have missed an
//! invalidation (a lease that is new, broken or ran out).

use super::coherence::{Coherence, LEASE};
use super::messages::Op;
use chubby::LockService;
use engine::protocol::{daemon_address, known_daemons, known_servers, server_address, Lease};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often leases are renewed.
pub(crate) const RENEW: Duration = Duration::from_secs(1);
/// How soon a renewal that was not extended (an invalidation was pending)
/// is tried again.
const RETRY_SOON: Duration = Duration::from_millis(50);
/// A lease counts as over this much before its end: the writers waiting
/// for this daemon stop at its end, after this daemon dropped its caches.
const MARGIN: Duration = Duration::from_millis(250);

/// Starts the renewing thread; it ends when `c` is dropped or stopped.
pub(crate) fn start(c: &Arc<Coherence>, lock: Arc<dyn LockService>) {
    let _ = c.since.set(Instant::now());
    let weak = Arc::downgrade(c);
    let spawned = std::thread::Builder::new()
        .name("bt-follow".into())
        .spawn(move || run(weak, lock));
    if let Err(e) = spawned {
        log::error!("cannot follow other daemons' writes: {e}");
    }
}

/// Every other daemon (registered, or running a tablet server): their
/// advertised addresses. The names come from what the lock service was
/// told of (etcd's watch); an address is read once per name (`known`:
/// a server's name is never reused, a daemon's is made from its address).
fn peers(
    lock: &dyn LockService,
    me: &str,
    known: &mut HashMap<String, String>,
) -> BTreeSet<String> {
    let servers = known_servers(lock).unwrap_or_default();
    let daemons = known_daemons(lock);
    let keys: BTreeSet<String> = servers
        .iter()
        .map(|n| format!("s/{n}"))
        .chain(daemons.iter().map(|n| format!("d/{n}")))
        .collect();
    known.retain(|k, _| keys.contains(k));
    for key in &keys {
        if known.contains_key(key) {
            continue;
        }
        let addr = match key.split_at(2) {
            ("s/", name) => server_address(lock, name),
            (_, name) => daemon_address(lock, name),
        };
        if let Some(a) = addr {
            known.insert(key.clone(), a);
        }
    }
    known.values().filter(|a| *a != me).cloned().collect()
}

/// Keeps this daemon's file in the daemons directory (taken again if its
/// session ended), so that daemons which run no tablet server are found too.
fn keep_registered(lock: &Arc<dyn LockService>, me: &str, held: &mut Option<Lease>) {
    if held.as_ref().is_some_and(|l| l.held()) {
        return;
    }
    *held = None;
    match Lease::register_daemon(lock.clone(), me) {
        Ok(l) => *held = l,
        Err(e) => log::warn!("cannot register this daemon for cache invalidation: {e}"),
    }
}

/// Renews the lease at `addr`: when it ends (by this daemon's clock, no
/// later than by the peer's) and whether it held without a break.
fn renew(c: &Coherence, addr: &str, timeout: Duration) -> Option<(Instant, bool)> {
    let dialer = c.dialer.get()?;
    let sent = Instant::now();
    let op = Op::Watch {
        addr: c.me.to_string(),
        lease_ms: LEASE.as_millis() as u64,
    };
    let bytes = dialer.daemon_call(addr, op, timeout).ok()?;
    let (left_ms, continuous): (u64, bool) = super::codec::decode_bounded(&bytes).ok()?;
    Some((
        sent + Duration::from_millis(left_ms).saturating_sub(MARGIN),
        continuous,
    ))
}

/// Forgets the leases that ended; whether any did.
fn lapse(c: &Coherence, leases: &mut HashMap<String, Instant>) -> bool {
    let now = Instant::now();
    let before = leases.len();
    leases.retain(|_, end| *end > now);
    c.stats.leases.store(leases.len() as u64, Ordering::Relaxed);
    leases.len() < before
}

fn run(weak: Weak<Coherence>, lock: Arc<dyn LockService>) {
    let mut leases: HashMap<String, Instant> = HashMap::new();
    let mut registered = None;
    let mut addresses = HashMap::new();
    loop {
        let Some(c) = weak.upgrade() else { return };
        if c.stopped.load(Ordering::Acquire) {
            return;
        }
        let started = Instant::now();
        // Leases that ended are dropped first: no call may delay it past
        // the time writers stop waiting for this daemon.
        if lapse(&c, &mut leases) {
            c.drop_all();
        }
        keep_registered(&lock, &c.me, &mut registered);
        let peers = peers(&*lock, &c.me, &mut addresses);
        *c.listed.lock() = peers.iter().cloned().collect();
        leases.retain(|a, _| peers.contains(a));
        // A renewal may not outlast the first lease's end.
        let first_end = leases.values().min().copied();
        let timeout = first_end
            .map_or(RENEW, |e| {
                RENEW.min(e.saturating_duration_since(Instant::now()))
            })
            .max(RETRY_SOON);
        let renewed: Vec<(String, Option<(Instant, bool)>)> = std::thread::scope(|s| {
            let handles: Vec<_> = peers
                .iter()
                .map(|a| {
                    let c = &c;
                    (a.clone(), s.spawn(move || renew(c, a, timeout)))
                })
                .collect();
            handles
                .into_iter()
                .map(|(a, h)| (a, h.join().ok().flatten()))
                .collect()
        });
        let mut drop_all = false;
        let mut soon = false;
        for (addr, r) in renewed {
            match r {
                Some((end, continuous)) => {
                    drop_all |= !continuous;
                    soon |= end < Instant::now() + LEASE - RENEW;
                    leases.insert(addr, end);
                }
                // No lease there yet: its writes may pass this daemon by.
                None if !leases.contains_key(&addr) => drop_all = true,
                None => {}
            }
        }
        if lapse(&c, &mut leases) || drop_all {
            c.drop_all();
        }
        // After any drop: until when this daemon hears of every write.
        if let Some(sink) = c.sink.get() {
            let until = if peers.iter().all(|a| leases.contains_key(a)) {
                // No other daemon: one that starts sends its first writes
                // to this one, listed in the lock service.
                leases
                    .values()
                    .min()
                    .copied()
                    .unwrap_or(started + 2 * RENEW)
            } else {
                Instant::now()
            };
            sink.writes_reported_until(until);
        }
        // Wake for the next renewal, or when the first lease ends.
        let mut wake = started + if soon { RETRY_SOON } else { RENEW };
        if let Some(end) = leases.values().min() {
            wake = wake.min(*end);
        }
        drop(c);
        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
    }
}
