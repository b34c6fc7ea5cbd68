//! Chunk leases: the master grants one replica (the primary) the right to
//! order mutations of a chunk for a while.
//!
//! A grant bumps the chunk's version on every live replica first (as in GFS),
//! so a replica that was down when the lease was granted is stale from then
//! on. The primary extends its lease while it keeps mutating, without a new
//! version; an expired lease is granted afresh.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lease {
    /// The chunkserver holding the lease.
    pub(crate) primary: usize,
    pub(crate) expires: Instant,
}

impl Lease {
    pub(crate) fn new(primary: usize, now: Instant, duration: Duration) -> Lease {
        Lease {
            primary,
            expires: now + duration,
        }
    }

    pub(crate) fn valid(&self, now: Instant) -> bool {
        now < self.expires
    }

    /// Extends the lease if less than half of `duration` is left; a lease
    /// that has expired cannot be extended (it must be granted anew).
    pub(crate) fn extend(&mut self, now: Instant, duration: Duration) -> bool {
        if !self.valid(now) {
            return false;
        }
        if self.expires.saturating_duration_since(now) < duration / 2 {
            self.expires = now + duration;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_expire_and_extend() {
        let now = Instant::now();
        let d = Duration::from_secs(60);
        let mut l = Lease::new(2, now, d);
        assert!(l.valid(now));
        assert!(l.extend(now + Duration::from_secs(10), d));
        assert_eq!(l.expires, now + d, "more than half left: unchanged");
        assert!(l.extend(now + Duration::from_secs(40), d));
        assert_eq!(l.expires, now + Duration::from_secs(100));
        assert!(!l.valid(now + Duration::from_secs(100)));
        assert!(!l.extend(now + Duration::from_secs(101), d));
    }
}
