//! A bytes-per-second budget for background work (re-replication, scrub),
//! so it never takes the disks from clients for long.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// The longest sleep between checks of whether to give up.
const SLICE: Duration = Duration::from_millis(50);
/// The longest one piece may be made to wait.
const MAX_WAIT: Duration = Duration::from_secs(86_400);

pub(crate) struct Throttle {
    /// Bytes per second; 0 means no limit.
    rate: u64,
    /// When the budget is free again: each taker reserves its share of time
    /// after the previous one, so concurrent takers split the rate.
    next: Mutex<Option<Instant>>,
}

impl Throttle {
    pub(crate) fn new(rate: u64) -> Throttle {
        Throttle {
            rate,
            next: Mutex::new(None),
        }
    }

    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }

    /// Waits until `bytes` more fit in the budget. Returns false (without
    /// waiting further) as soon as `stop` says so.
    pub(crate) fn take(&self, bytes: u64, stop: impl Fn() -> bool) -> bool {
        if self.rate == 0 {
            return !stop();
        }
        // Pieces are at most megabytes; a day caps anything absurd.
        let cost = Duration::try_from_secs_f64(bytes as f64 / self.rate as f64)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        let until = {
            let mut next = self.next.lock();
            let now = Instant::now();
            // Unused budget does not pile up: an idle spell gives no burst.
            let start = next.map_or(now, |n| n.max(now));
            let until = start.checked_add(cost).unwrap_or(start);
            *next = Some(until);
            until
        };
        // Bytes are paid for before they move: wait out this piece's share.
        loop {
            if stop() {
                return false;
            }
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(SLICE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_bounds_throughput_and_stop_interrupts() {
        let t = Throttle::new(1 << 20);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert!(t.take(64 << 10, || false));
        }
        // 256 KiB at 1 MiB/s takes at least a quarter second.
        assert!(t0.elapsed() >= Duration::from_millis(250));
        let t0 = Instant::now();
        assert!(!t.take(100 << 20, || t0.elapsed() > Duration::from_millis(20)));
        assert!(t0.elapsed() < Duration::from_secs(50));
        assert!(Throttle::new(0).take(u64::MAX, || false));
    }
}
