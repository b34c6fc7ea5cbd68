//! The background scrub: every replica on every chunkserver is read and
//! verified (superblock, checksum table, padding, data) at most at
//! `scrub_rate` bytes per second, and only while no client has done I/O for
//! `scrub_idle`. A replica that fails is reported like one a reader found
//! bad: dropped and copied afresh from a good replica. A pass starts every
//! `scrub_interval` (the first right after start).

use super::throttle::Throttle;
use super::{Inner, Signal};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the scrub is doing.
#[derive(Clone, Debug, Default)]
pub struct ScrubHealth {
    /// "off", "waiting" (for the next pass), "running" or "paused" (client I/O).
    pub state: &'static str,
    /// Passes started (the current one included).
    pub pass: u64,
    /// Replicas verified in this pass, of `total`.
    pub scanned: u64,
    /// Replicas to verify in this pass.
    pub total: u64,
    /// Bytes read in this pass.
    pub bytes: u64,
    /// Replicas found bad by the scrub, over all passes.
    pub corruptions: u64,
    /// ... of which re-replicated since.
    pub repaired: u64,
    /// When the last complete pass ended (seconds since the epoch), how
    /// long it took and how many bytes it read.
    pub last_pass_end: Option<u64>,
    /// See `last_pass_end`.
    pub last_pass_secs: f64,
    /// See `last_pass_end`.
    pub last_pass_bytes: u64,
}

/// The scrub's shared state.
pub(crate) struct Scrub {
    progress: parking_lot::Mutex<ScrubHealth>,
    /// Chunks the scrub found bad and that are not yet re-replicated.
    flagged: parking_lot::Mutex<HashSet<u64>>,
    /// Client reads and writes so far: the scrub waits while this moves.
    client_ops: std::sync::atomic::AtomicU64,
    signal: Signal,
    throttle: Throttle,
}

impl Scrub {
    /// Reads at most `rate` bytes a second (0: the scrub is off).
    pub(crate) fn new(rate: u64) -> Scrub {
        Scrub {
            progress: Default::default(),
            flagged: Default::default(),
            client_ops: Default::default(),
            signal: Signal::default(),
            throttle: Throttle::new(rate),
        }
    }

    /// Wakes the scrub thread (to stop).
    pub(crate) fn wake(&self) {
        self.signal.notify();
    }

    /// What the scrub is doing.
    pub(crate) fn progress(&self) -> ScrubHealth {
        self.progress.lock().clone()
    }

    /// The read budget per second.
    pub(crate) fn rate(&self) -> u64 {
        self.throttle.rate()
    }

    /// A client read or wrote: background scrubbing yields.
    pub(crate) fn client_io(&self) {
        self.client_ops.fetch_add(1, Ordering::Relaxed);
    }

    /// Chunk `h` got a new replica: if the scrub had found it bad, that is
    /// a repair of what the scrub found.
    pub(crate) fn repaired(&self, h: u64) {
        if self.flagged.lock().remove(&h) {
            self.progress.lock().repaired += 1;
        }
    }
}

pub(crate) fn scrub_loop(inner: Arc<Inner>) {
    if inner.opts.scrub_rate == 0 {
        inner.scrub.progress.lock().state = "off";
        return;
    }
    let mut idle = Idle::new(&inner);
    loop {
        // A pass starts (and each read happens) only while clients are quiet.
        if !idle.wait(&inner) {
            return;
        }
        let started = Instant::now();
        let done = scrub_pass(&inner, &mut |n| {
            idle.wait(&inner) && inner.scrub.throttle.take(n, || inner.stopping())
        });
        if done {
            let mut p = inner.scrub.progress.lock();
            p.last_pass_end = Some(unix_now());
            p.last_pass_secs = started.elapsed().as_secs_f64();
            p.last_pass_bytes = p.bytes;
        }
        inner.scrub.progress.lock().state = "waiting";
        let next = started + inner.opts.scrub_interval;
        while !inner.stopping() && Instant::now() < next {
            inner
                .scrub
                .signal
                .wait((next - Instant::now()).min(Duration::from_secs(1)));
        }
    }
}

/// Tracks client I/O: the scrub goes on only once none happened for
/// `scrub_idle`.
struct Idle {
    seen: u64,
    changed: Instant,
}

impl Idle {
    fn new(inner: &Inner) -> Idle {
        Idle {
            seen: inner.scrub.client_ops.load(Ordering::Relaxed),
            changed: Instant::now(),
        }
    }

    /// Waits until the clients have been quiet long enough; false if the
    /// cluster is stopping.
    fn wait(&mut self, inner: &Inner) -> bool {
        let quiet = inner.opts.scrub_idle;
        let mut paused = false;
        loop {
            if inner.stopping() {
                return false;
            }
            let now = inner.scrub.client_ops.load(Ordering::Relaxed);
            if now != self.seen {
                self.seen = now;
                self.changed = Instant::now();
            }
            let waited = self.changed.elapsed();
            if waited >= quiet {
                if paused {
                    inner.scrub.progress.lock().state = "running";
                }
                return true;
            }
            if !paused {
                inner.scrub.progress.lock().state = "paused";
                paused = true;
            }
            inner
                .scrub
                .signal
                .wait((quiet - waited).min(Duration::from_millis(100)));
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Verifies every replica once, calling `pace(bytes)` before each read;
/// bad ones are reported and re-replicated. Returns whether the pass
/// got to the end.
pub(crate) fn scrub_pass(inner: &Inner, pace: &mut dyn FnMut(u64) -> bool) -> bool {
    let work: Vec<(usize, u64)> = inner
        .servers
        .iter()
        .filter(|s| s.serving())
        .flat_map(|s| {
            let mut hs = s.handles();
            hs.sort_unstable();
            hs.into_iter().map(move |h| (s.id, h))
        })
        .collect();
    {
        let mut p = inner.scrub.progress.lock();
        p.state = "running";
        p.pass += 1;
        p.scanned = 0;
        p.total = work.len() as u64;
        p.bytes = 0;
    }
    for (sid, h) in work {
        let s = &inner.servers[sid];
        let replica = s.replica(h).filter(|r| !r.is_bad());
        if let Some(r) = replica.filter(|_| s.serving() && s.gate.check_read().is_ok()) {
            let mut counted = |n: u64| {
                let go = pace(n);
                if go {
                    inner.scrub.progress.lock().bytes += n;
                }
                go
            };
            match r.scrub_paced(&inner.io, &mut counted) {
                Ok(true) => {}
                Ok(false) => return false,
                // A replica deleted or a server failed meanwhile is not
                // corrupt; anything else is.
                Err(_) if r.is_bad() || !s.serving() || s.gate.check_read().is_err() => {}
                Err(why) => {
                    s.gate.stats.corrupt();
                    inner.scrub.flagged.lock().insert(h);
                    inner.scrub.progress.lock().corruptions += 1;
                    inner.report_bad(h, sid, &format!("scrub: {why}"), true);
                }
            }
        }
        inner.scrub.progress.lock().scanned += 1;
    }
    true
}

/// Verifies every replica now, unpaced; returns how many failed.
pub(crate) fn scrub_now(inner: &Inner) -> usize {
    let before = inner.scrub.progress.lock().corruptions;
    scrub_pass(inner, &mut |_| !inner.stopping());
    let mut p = inner.scrub.progress.lock();
    p.last_pass_end = Some(unix_now());
    p.state = if inner.opts.scrub_rate == 0 {
        "off"
    } else {
        "waiting"
    };
    (p.corruptions - before) as usize
}
