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

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use io_uring::{IoUring, cqueue, squeue};

/// The window in ns; 0: threads sleep at once.
static WINDOW_NANOS: AtomicU64 = AtomicU64::new(0);

/// When any queue last had a request, in ns of [`monotonic_nanos`].
static LAST_REQUEST: AtomicU64 = AtomicU64::new(0);

/// Threads looking now.
static LOOKING: AtomicUsize = AtomicUsize::new(0);
const MAX_LOOKING: usize = 4;

/// A yield that took longer than this ran another thread.
const BUSY_YIELD_NANOS: u64 = 10_000;

/// CPUs callers can run on.
static CPUS: AtomicUsize = AtomicUsize::new(1);

/// Recent callers: thread id in the high half, the low 32 bits of the time
/// of its last request in µs in the low half. Racy updates only blur the
/// count, which is a hint.
const CALLER_SLOTS: usize = 8;
static CALLERS: [AtomicU64; CALLER_SLOTS] = [const { AtomicU64::new(0) }; CALLER_SLOTS];

/// A caller counts as active this long after its last request.
const CALLER_ACTIVE_MICROS: u32 = 1_000;

/// Sets how long queue threads look for the next request before sleeping;
/// zero turns looking off.
pub fn set_io_uring_spin(window: std::time::Duration) {
    WINDOW_NANOS.store(
        u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

/// Sets the CPU count from the number of queues (one per possible CPU),
/// capped at the CPUs this process may run on: a machine may list far more
/// possible CPUs than it has online.
pub(super) fn set_cpus(queues: usize) {
    let usable = std::thread::available_parallelism().map_or(queues, |n| n.get());
    CPUS.store(queues.min(usable).max(1), Ordering::Relaxed);
}

/// Nanoseconds since the first call: the clock of the timestamps here.
fn monotonic_nanos() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Records a request from thread `pid` (0: the kernel's own, such as an
/// asynchronous release, which is not a caller waiting).
pub(super) fn note_request(pid: u32) {
    let now = monotonic_nanos();
    LAST_REQUEST.store(now, Ordering::Relaxed);
    if pid == 0 {
        return;
    }
    let stamp = (u64::from(pid) << 32) | u64::from((now / 1_000) as u32);
    let mut oldest = (0, 0u32);
    for (i, slot) in CALLERS.iter().enumerate() {
        let v = slot.load(Ordering::Relaxed);
        if v >> 32 == u64::from(pid) {
            slot.store(stamp, Ordering::Relaxed);
            return;
        }
        let age = ((now / 1_000) as u32).wrapping_sub(v as u32);
        if v == 0 || age > oldest.1 {
            oldest = (i, if v == 0 { u32::MAX } else { age });
        }
    }
    CALLERS[oldest.0].store(stamp, Ordering::Relaxed);
}

/// Callers with a request in the last [`CALLER_ACTIVE_MICROS`].
fn active_callers(now: u64) -> usize {
    let now_us = (now / 1_000) as u32;
    CALLERS
        .iter()
        .map(|s| s.load(Ordering::Relaxed))
        .filter(|&v| v != 0 && now_us.wrapping_sub(v as u32) < CALLER_ACTIVE_MICROS)
        .count()
}

/// Submits the queue's pending answers and looks for a completion until
/// the window since the last request closes. Returns whether a completion
/// is waiting; if not, the caller submits and waits as usual. Called only
/// by the ring's own thread.
pub(super) fn look_for_request(ring: &IoUring<squeue::Entry128, cqueue::Entry>) -> bool {
    let window = WINDOW_NANOS.load(Ordering::Relaxed);
    let open = || monotonic_nanos().saturating_sub(LAST_REQUEST.load(Ordering::Relaxed)) <= window;
    if window == 0 || !open() || active_callers(monotonic_nanos()) >= CPUS.load(Ordering::Relaxed) {
        return false;
    }
    if LOOKING.fetch_add(1, Ordering::AcqRel) >= MAX_LOOKING {
        LOOKING.fetch_sub(1, Ordering::AcqRel);
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
            if !open() || yielded_to_others {
                break;
            }
            // Returning from the call runs the ring's pending task work,
            // which is what posts a new request's completion.
            let before = monotonic_nanos();
            // SAFETY: takes no arguments.
            unsafe { libc::sched_yield() };
            // Something else ran meanwhile: this CPU is not going idle, and
            // looking on would only take turns from it (unless the yield
            // brought a request, which the next look finds).
            yielded_to_others = monotonic_nanos().saturating_sub(before) > BUSY_YIELD_NANOS;
        }
    }
    LOOKING.fetch_sub(1, Ordering::AcqRel);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_counted_once_each_and_age_out() {
        for slot in &CALLERS {
            slot.store(0, Ordering::Relaxed);
        }
        note_request(7);
        note_request(7);
        note_request(8);
        note_request(0);
        let now = monotonic_nanos();
        assert_eq!(active_callers(now), 2);
        // More callers than slots: the oldest are replaced.
        for pid in 100..100 + CALLER_SLOTS as u32 + 3 {
            note_request(pid);
        }
        assert_eq!(active_callers(monotonic_nanos()), CALLER_SLOTS);
        let later = now + u64::from(CALLER_ACTIVE_MICROS) * 1_000 * 2;
        assert_eq!(active_callers(later), 0);
    }
}
