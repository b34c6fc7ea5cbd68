//! Looking for the next request before sleeping.
//!
//! A queue's thread answers on its caller's CPU, and the answer wakes the
//! caller while that thread still runs there, so the scheduler moves the
//! caller to an idle CPU: for a single caller (`find`, `rsync`, one shell
//! loop) that is an inter-processor wake-up of a halted CPU and a migration
//! per request, which on a small virtual machine cost more than the
//! request. While the queue threads look for work (yielding their CPU
//! between looks), no CPU is idle, the caller stays where it was, and its
//! next request finds its CPU's thread awake.
//!
//! Looking stops `window` after the last request of any queue, or when a
//! yield ran other threads without bringing a request (the CPU is not
//! going idle then); it is not started while at least as many callers as
//! CPUs are active: they keep the CPUs busy themselves, and a yielding
//! thread still takes its share.
//! At most [`MAX_LOOKING`] threads look at once, bounding the cost on large
//! machines (where a single caller then still moves between CPUs).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, squeue};

/// Threads of one session that may look at once.
const MAX_LOOKING: usize = 4;

/// A yield that took longer than this ran another thread.
const BUSY_YIELD_NANOS: u64 = 10_000;

/// Recent callers remembered.
const CALLER_SLOTS: usize = 8;

/// A caller counts as active this long after its last request.
const CALLER_ACTIVE_MICROS: u32 = 1_000;

/// What a session's queue threads share to decide whether to look.
pub(super) struct Looking {
    /// The window in ns; 0: threads sleep at once.
    window: u64,
    /// CPUs callers can run on.
    cpus: usize,
    /// The clock of the timestamps here.
    start: Instant,
    /// When any queue last had a request, in ns since `start`.
    last_request: AtomicU64,
    /// Threads looking now.
    looking: AtomicUsize,
    /// Recent callers: thread id in the high half, the low 32 bits of the
    /// time of its last request in µs in the low half. Racy updates only
    /// blur the count, which is a hint.
    callers: [AtomicU64; CALLER_SLOTS],
}

impl Looking {
    /// Looking for `window` after each request, for `queues` queues (one per
    /// possible CPU; the CPU count is capped at the CPUs this process may run
    /// on, since a machine may list far more possible CPUs than it has).
    pub(super) fn new(window: Duration, queues: usize) -> Looking {
        let usable = std::thread::available_parallelism().map_or(queues, |n| n.get());
        Looking {
            window: u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            cpus: queues.min(usable).max(1),
            start: Instant::now(),
            last_request: AtomicU64::new(0),
            looking: AtomicUsize::new(0),
            callers: [const { AtomicU64::new(0) }; CALLER_SLOTS],
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Records a request from thread `pid` (0: the kernel's own, such as an
    /// asynchronous release, which is not a caller waiting).
    pub(super) fn note_request(&self, pid: u32) {
        let now = self.now();
        self.last_request.store(now, Ordering::Relaxed);
        if pid == 0 {
            return;
        }
        let now_us = (now / 1_000) as u32;
        let stamp = (u64::from(pid) << 32) | u64::from(now_us);
        let mut oldest = (0, 0u32);
        for (i, slot) in self.callers.iter().enumerate() {
            let v = slot.load(Ordering::Relaxed);
            if v >> 32 == u64::from(pid) {
                slot.store(stamp, Ordering::Relaxed);
                return;
            }
            let age = if v == 0 {
                u32::MAX
            } else {
                now_us.wrapping_sub(v as u32)
            };
            if age > oldest.1 {
                oldest = (i, age);
            }
        }
        self.callers[oldest.0].store(stamp, Ordering::Relaxed);
    }

    /// Callers with a request in the [`CALLER_ACTIVE_MICROS`] before `now`.
    fn active_callers(&self, now: u64) -> usize {
        let now_us = (now / 1_000) as u32;
        self.callers
            .iter()
            .map(|s| s.load(Ordering::Relaxed))
            .filter(|&v| v != 0 && now_us.wrapping_sub(v as u32) < CALLER_ACTIVE_MICROS)
            .count()
    }

    fn window_open(&self, now: u64) -> bool {
        now.saturating_sub(self.last_request.load(Ordering::Relaxed)) <= self.window
    }

    /// Submits the queue's pending answers and looks for a completion until
    /// the window since the last request closes. Returns whether a
    /// completion is waiting; if not, the caller submits and waits as
    /// usual. Called only by the ring's own thread.
    pub(super) fn look_for_request(&self, ring: &IoUring<squeue::Entry128, cqueue::Entry>) -> bool {
        let now = self.now();
        if self.window == 0 || !self.window_open(now) || self.active_callers(now) >= self.cpus {
            return false;
        }
        if self.looking.fetch_add(1, Ordering::AcqRel) >= MAX_LOOKING {
            self.looking.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let mut found = false;
        let mut yielded_to_others = false;
        if ring.submit().is_ok() {
            loop {
                // SAFETY: only the ring's own thread reads its completion queue.
                if !unsafe { ring.completion_shared() }.is_empty() {
                    found = true;
                    break;
                }
                let before = self.now();
                if !self.window_open(before) || yielded_to_others {
                    break;
                }
                // Returning from the call runs the ring's pending task work,
                // which is what posts a new request's completion.
                // SAFETY: takes no arguments.
                unsafe { libc::sched_yield() };
                // Something else ran meanwhile: this CPU is not going idle,
                // and looking on would only take turns from it (unless the
                // yield brought a request, which the next look finds).
                yielded_to_others = self.now().saturating_sub(before) > BUSY_YIELD_NANOS;
            }
        }
        self.looking.fetch_sub(1, Ordering::AcqRel);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_counted_once_each_and_age_out() {
        let l = Looking::new(Duration::from_micros(50), 2);
        l.note_request(7);
        l.note_request(7);
        l.note_request(8);
        l.note_request(0);
        let now = l.now();
        assert_eq!(l.active_callers(now), 2);
        // More callers than slots: the oldest are replaced.
        for pid in 100..100 + CALLER_SLOTS as u32 + 3 {
            l.note_request(pid);
        }
        assert_eq!(l.active_callers(l.now()), CALLER_SLOTS);
        let later = now + u64::from(CALLER_ACTIVE_MICROS) * 1_000 * 2;
        assert_eq!(l.active_callers(later), 0);
    }

    #[test]
    fn the_cpu_count_is_capped_at_usable_cpus() {
        let usable = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(Looking::new(Duration::ZERO, 4096).cpus, usable.min(4096));
        assert_eq!(Looking::new(Duration::ZERO, 0).cpus, 1);
    }
}
