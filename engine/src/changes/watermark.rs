//! The low watermark of a server's change log: a commit timestamp at or
//! below which every change this server will ever log is already visible.
//! A writer takes its commit timestamp and registers it in one step, and
//! deregisters once its write is visible; the watermark is just below the
//! oldest registered one (or below now when none is), so a reader that has
//! read every change up to it can never see one appear behind it.

use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Commit timestamps of writes to change-logged tables not yet visible.
#[derive(Default)]
pub struct InFlight {
    open: Mutex<BTreeMap<u64, u32>>,
}

impl InFlight {
    /// Takes a commit timestamp from `next` and registers it.
    pub fn stamp(&self, next: impl FnOnce() -> u64) -> u64 {
        let mut open = self.open.lock();
        let ts = next();
        *open.entry(ts).or_default() += 1;
        ts
    }

    /// The write at `ts` is visible (or failed).
    pub fn done(&self, ts: u64) {
        let mut open = self.open.lock();
        if let Some(n) = open.get_mut(&ts) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ts);
            }
        }
    }

    /// The watermark. `now` (the wall clock) is read under the lock: a
    /// timestamp handed out later is at least the clock then, so above
    /// `now - 1`, on this server and on any whose clock is not behind this
    /// one's (the server a tablet moves to; docs/changes.md).
    pub fn watermark(&self, now: impl FnOnce() -> u64) -> u64 {
        let open = self.open.lock();
        let clock = now().saturating_sub(1);
        match open.keys().next() {
            Some(&oldest) => clock.min(oldest.saturating_sub(1)),
            None => clock,
        }
    }
}

/// Deregisters its timestamps when dropped (after the commit, or on error).
pub struct Stamps<'a> {
    pub(crate) inflight: &'a InFlight,
    pub(crate) ts: Vec<u64>,
}

impl Drop for Stamps<'_> {
    fn drop(&mut self) {
        for &t in &self.ts {
            self.inflight.done(t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_stays_below_open_writes() {
        let f = InFlight::default();
        assert_eq!(f.watermark(|| 100), 99);
        let a = f.stamp(|| 50);
        let b = f.stamp(|| 60);
        assert_eq!(f.watermark(|| 100), 49);
        f.done(a);
        assert_eq!(f.watermark(|| 100), 59);
        f.done(b);
        assert_eq!(f.watermark(|| 100), 99);
    }
}
