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
        self.note_request_at(pid, self.now());
    }

    fn note_request_at(&self, pid: u32, now: u64) {
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

    /// Whether a thread that has just answered should look for the next
    /// request at `now`.
    fn may_look(&self, now: u64) -> bool {
        self.window != 0 && self.window_open(now) && self.active_callers(now) < self.cpus
    }

    /// Submits the queue's pending answers and looks for a completion until
    /// the window since the last request closes. Returns whether a
    /// completion is waiting; if not, the caller submits and waits as
    /// usual. Called only by the ring's own thread.
    pub(super) fn look_for_request(&self, ring: &IoUring<squeue::Entry128, cqueue::Entry>) -> bool {
        self.look(&mut RingProbe(ring), &|| self.now())
    }

    /// [`Looking::look_for_request`] with what it needs from the ring, the
    /// CPU and the clock given, so the decisions are tested without them.
    fn look(&self, probe: &mut impl Probe, now: &dyn Fn() -> u64) -> bool {
        if !self.may_look(now()) {
            return false;
        }
        if self.looking.fetch_add(1, Ordering::AcqRel) >= MAX_LOOKING {
            self.looking.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        let mut found = false;
        let mut yielded_to_others = false;
        if probe.submit() {
            loop {
                if probe.completion_waiting() {
                    found = true;
                    break;
                }
                let before = now();
                if !self.window_open(before) || yielded_to_others {
                    break;
                }
                probe.yield_cpu();
                // Something else ran meanwhile: this CPU is not going idle,
                // and looking on would only take turns from it (unless the
                // yield brought a request, which the next look finds).
                yielded_to_others = now().saturating_sub(before) > BUSY_YIELD_NANOS;
            }
        }
        self.looking.fetch_sub(1, Ordering::AcqRel);
        found
    }
}

/// What looking does to a ring and its CPU.
trait Probe {
    /// Submits the queue's pending answers; false if the ring refused.
    fn submit(&mut self) -> bool;
    /// Whether a completion waits to be read.
    fn completion_waiting(&mut self) -> bool;
    /// Gives up the CPU to whatever else may run on it.
    fn yield_cpu(&mut self);
}

struct RingProbe<'a>(&'a IoUring<squeue::Entry128, cqueue::Entry>);

impl Probe for RingProbe<'_> {
    fn submit(&mut self) -> bool {
        self.0.submit().is_ok()
    }

    fn completion_waiting(&mut self) -> bool {
        // SAFETY: only the ring's own thread looks (`look_for_request`), and
        // only it reads its completion queue.
        !unsafe { self.0.completion_shared() }.is_empty()
    }

    fn yield_cpu(&mut self) {
        // Returning from the call runs the ring's pending task work, which
        // is what posts a new request's completion.
        // SAFETY: takes no arguments.
        unsafe { libc::sched_yield() };
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const US: u64 = 1_000;

    /// A ring whose next request comes after `requests_after` yields (never
    /// if `None`), each yield taking `yield_ns` of a fake clock.
    struct FakeProbe<'a> {
        clock: &'a Cell<u64>,
        yield_ns: u64,
        requests_after: Option<usize>,
        submits: bool,
        submitted: usize,
        yields: usize,
    }

    impl<'a> FakeProbe<'a> {
        fn new(clock: &'a Cell<u64>, yield_ns: u64, requests_after: Option<usize>) -> Self {
            FakeProbe {
                clock,
                yield_ns,
                requests_after,
                submits: true,
                submitted: 0,
                yields: 0,
            }
        }
    }

    impl Probe for FakeProbe<'_> {
        fn submit(&mut self) -> bool {
            self.submitted += 1;
            self.submits
        }
        fn completion_waiting(&mut self) -> bool {
            self.requests_after.is_some_and(|n| self.yields >= n)
        }
        fn yield_cpu(&mut self) {
            self.yields += 1;
            self.clock.set(self.clock.get() + self.yield_ns);
        }
    }

    /// A session of `cpus` CPUs looking for `window`, whose last request
    /// (from thread 7) came at time 0 of the fake clock.
    fn looking(window: Duration, cpus: usize) -> Looking {
        let mut l = Looking::new(window, cpus);
        l.cpus = cpus;
        l.note_request_at(7, 0);
        l
    }

    #[test]
    fn a_thread_looks_until_a_request_comes() {
        let l = looking(Duration::from_micros(100), 2);
        let clock = Cell::new(0);
        let mut p = FakeProbe::new(&clock, US, Some(3));
        assert!(l.look(&mut p, &|| clock.get()));
        assert_eq!((p.submitted, p.yields), (1, 3));
        assert_eq!(l.looking.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn looking_stops_when_the_window_closes() {
        let l = looking(Duration::from_micros(10), 2);
        let clock = Cell::new(0);
        let mut p = FakeProbe::new(&clock, 3 * US, None);
        assert!(!l.look(&mut p, &|| clock.get()));
        // It looked through the window, and stopped at the first look after.
        assert_eq!(p.yields, 4);
        assert!(clock.get() > 10 * US && clock.get() <= 13 * US);
        assert_eq!(l.looking.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn looking_stops_after_a_yield_that_ran_other_threads() {
        let l = looking(Duration::from_millis(1), 2);
        let clock = Cell::new(0);
        let mut p = FakeProbe::new(&clock, BUSY_YIELD_NANOS + 1, None);
        assert!(!l.look(&mut p, &|| clock.get()));
        assert_eq!(p.yields, 1);
        // A busy yield that brought the request still finds it.
        clock.set(0);
        let mut p = FakeProbe::new(&clock, BUSY_YIELD_NANOS + 1, Some(1));
        assert!(l.look(&mut p, &|| clock.get()));
    }

    #[test]
    fn no_window_or_a_closed_one_means_no_looking() {
        let clock = Cell::new(0);
        let l = looking(Duration::ZERO, 2);
        let mut p = FakeProbe::new(&clock, US, Some(0));
        assert!(!l.look(&mut p, &|| clock.get()));
        assert_eq!(p.submitted, 0, "the caller submits as usual");

        let l = looking(Duration::from_micros(50), 2);
        clock.set(51 * US);
        assert!(!l.look(&mut p, &|| clock.get()));
        assert_eq!(p.submitted, 0);
        clock.set(50 * US);
        assert!(l.look(&mut p, &|| clock.get()));
    }

    #[test]
    fn as_many_active_callers_as_cpus_keep_threads_from_looking() {
        let l = looking(Duration::from_secs(1), 2);
        assert!(l.may_look(10 * US));
        l.note_request_at(8, 10 * US);
        assert!(!l.may_look(10 * US), "threads 7 and 8 keep both CPUs busy");
        // The kernel's own requests (pid 0) are no caller.
        let l = looking(Duration::from_secs(1), 2);
        l.note_request_at(0, 10 * US);
        assert!(l.may_look(10 * US));
        // Callers stop counting once idle a while.
        let l = looking(Duration::from_secs(1), 2);
        l.note_request_at(8, 0);
        let later = u64::from(CALLER_ACTIVE_MICROS) * US;
        assert!(!l.may_look(later - 1));
        assert!(l.may_look(later));
    }

    #[test]
    fn at_most_max_looking_threads_look_at_once() {
        let l = looking(Duration::from_micros(100), 2);
        l.looking.store(MAX_LOOKING, Ordering::Relaxed);
        let clock = Cell::new(0);
        let mut p = FakeProbe::new(&clock, US, Some(0));
        assert!(!l.look(&mut p, &|| clock.get()));
        assert_eq!(p.submitted, 0);
        assert_eq!(l.looking.load(Ordering::Relaxed), MAX_LOOKING);
        l.looking.store(MAX_LOOKING - 1, Ordering::Relaxed);
        assert!(l.look(&mut p, &|| clock.get()));
        assert_eq!(l.looking.load(Ordering::Relaxed), MAX_LOOKING - 1);
    }

    #[test]
    fn a_refused_submission_ends_the_look() {
        let l = looking(Duration::from_micros(100), 2);
        let clock = Cell::new(0);
        let mut p = FakeProbe::new(&clock, US, Some(0));
        p.submits = false;
        assert!(!l.look(&mut p, &|| clock.get()));
        assert_eq!((p.submitted, p.yields), (1, 0));
        assert_eq!(l.looking.load(Ordering::Relaxed), 0);
    }

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
