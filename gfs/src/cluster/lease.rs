//! Chunk leases: the master grants one replica (the primary) the right to
//! order mutations of a chunk for a while.
//!
//! A grant bumps the chunk's version on every live replica first (as in GFS),
//! so a replica that was down when the lease was granted is stale from then
//! on. The primary extends its lease while it keeps mutating, without a new
//! version; an expired lease is granted afresh.

use std::time::Duration;

/// A reading of the coarse monotonic clock: every append checks its
/// chunk's lease, and this clock costs a few nanoseconds to read where
/// `Instant::now` took about 23 here (2% of a chunk-layer log append).
/// It lags the true time by up to one kernel tick, so a lease counts as
/// expired [`SLACK`] early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tick(Duration);

/// More than any kernel tick (4 ms at 250 Hz).
const SLACK: Duration = Duration::from_millis(20);

impl Tick {
    pub(crate) fn now() -> Tick {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC_COARSE
        // exists on every Linux this runs on (since 2.6.32).
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        if rc != 0 {
            // Never expected; a lease then just looks expired sooner.
            return Tick(Duration::MAX);
        }
        Tick(Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        ))
    }

    fn after(self, d: Duration) -> Tick {
        Tick(self.0.saturating_add(d))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The chunkserver holding the lease.
    pub(crate) primary: usize,
    pub(crate) expires: Tick,
}

impl Lease {
    pub(crate) fn new(primary: usize, now: Tick, duration: Duration) -> Lease {
        Lease {
            primary,
            expires: now.after(duration),
        }
    }

    pub(crate) fn valid(&self, now: Tick) -> bool {
        now.after(SLACK) < self.expires
    }

    /// Extends the lease if less than half of `duration` is left; a lease
    /// that has expired cannot be extended (it must be granted anew).
    pub(crate) fn extend(&mut self, now: Tick, duration: Duration) -> bool {
        if !self.valid(now) {
            return false;
        }
        if self.expires.0.saturating_sub(now.0) < duration / 2 {
            self.expires = now.after(duration);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_expire_and_extend() {
        let now = Tick::now();
        let at = |secs: u64| now.after(Duration::from_secs(secs));
        let d = Duration::from_secs(60);
        let mut l = Lease::new(2, now, d);
        assert!(l.valid(now));
        assert!(l.extend(at(10), d));
        assert_eq!(l.expires, at(60), "more than half left: unchanged");
        assert!(l.extend(at(40), d));
        assert_eq!(l.expires, at(100));
        assert!(!l.valid(at(100)));
        assert!(!l.extend(at(101), d));
        // The clock may lag by a tick: a lease is over a little early.
        assert!(!l.valid(Tick(at(100).0 - SLACK / 2)));
        assert!(l.valid(Tick(at(100).0 - 2 * SLACK)));
    }

    #[test]
    fn the_coarse_clock_moves_forward() {
        let a = Tick::now();
        // Past a few ticks of any kernel (a sleep lasts at least this long).
        std::thread::sleep(Duration::from_millis(30));
        let b = Tick::now();
        assert!(
            b > a && b.0 - a.0 >= Duration::from_millis(20),
            "{a:?} {b:?}"
        );
    }
}
