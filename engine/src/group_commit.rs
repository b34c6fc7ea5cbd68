//! Group commit: many writers, one log write (and at most one fsync) per group.
//!
//! LevelDB's leader/follower scheme (`DBImpl::Write`). Each caller of
//! [`GroupCommit::submit`] queues its item. The caller at the front of the
//! queue, when no batch is in progress, gets a [`Leader`] token back instead
//! of a result: it takes every queued item (up to a byte cap), writes them
//! itself, as one batch, and hands the results back through the token, which
//! chooses the next leader, then gives each follower its result in its own
//! slot (waiters never poll the queue's lock). Meanwhile new callers keep
//! queueing, so under load each batch carries everything that arrived during
//! the previous one: the fsync cost is shared.
//!
//! A leader may first wait a *window* for more items to queue (an option,
//! off by default): where each batch is a request to a remote store, fewer,
//! larger batches cost less. An *adaptive* window waits only while the
//! last batch held more than one item (others are writing too), at most a
//! quarter of the recent batch time and 1 ms, and ends early once as many
//! items are queued as the last batch held.
//!
//! Where each batch is an fsync, a leader may instead *gather* (an option):
//! wait for the writers the last batch released, who come back at once
//! with their next write. Without it, synchronous writers split into groups
//! that take turns (half of them queue while the other half's fsync runs),
//! and every fsync carries half the writers. A gathering leader waits, at
//! most a quarter of the recent batch time, until as many items are queued
//! as the last batch held plus those that queued while it was written; a
//! lone writer never waits.
//!
//! A leader may also hand the lead on before its batch is written
//! ([`Leader::pass_on`]): the next batch is then gathered and written while
//! this one's write is out (several writes in flight to a store far away). The tablet server sends synced writes through
//! it, whose fsync the batch shares; an unsynced write logs itself under the
//! commit lock, which on a busy machine costs less than being handed to a
//! leader and woken again.

use crate::{Error, Result};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How often an unsynced item's caller yields its core before it parks
/// until its batch is done.
const YIELDS_BEFORE_SLEEP: u32 = 16;

/// Callers yield only while batches take less than this on average: a
/// longer batch (a replicated append waiting for its replicas) would leave
/// the yielding callers spinning, taking the cores from the I/O workers
/// and the leader.
const SPIN_BATCH_NANOS: u64 = 20_000;

/// Counters for stats and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupCommitStats {
    /// Batches processed.
    pub batches: u64,
    /// Items processed (sum of batch sizes).
    pub items: u64,
    /// Batches that asked for a sync.
    pub syncs: u64,
    /// Largest batch seen, in items.
    pub max_batch: u64,
}

/// The slot state: still queued, processed (the result is in the slot), or
/// chosen to lead the next batch.
const WAITING: u8 = 0;
const DONE: u8 = 1;
const LEAD: u8 = 2;

/// Where one caller waits: the leader fills in its result, or makes it the
/// next leader, and unparks it. Waiting callers poll the state without
/// taking the queue's lock, and an unpark of a thread that has not parked
/// yet costs no system call.
struct Slot<R> {
    state: AtomicU8,
    result: Mutex<Option<Result<R>>>,
    thread: Thread,
}

impl<R> Slot<R> {
    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.thread.unpark();
    }
}

struct Queued<T, R> {
    item: T,
    sync: bool,
    size: usize,
    slot: Arc<Slot<R>>,
}

struct Inner<T, R> {
    /// Items not yet taken by a leader, oldest first.
    queue: VecDeque<Queued<T, R>>,
    /// A leader is processing a batch, or has been chosen and is about to:
    /// batches run one at a time, in queue order.
    busy: bool,
}

/// Leader/follower batching of items of type `T` with per-item results `R`.
pub struct GroupCommit<T, R = ()> {
    inner: Mutex<Inner<T, R>>,
    max_batch_bytes: usize,
    /// How long a leader waits for more items before taking the queue.
    window: Duration,
    size_of: fn(&T) -> usize,
    batches: AtomicU64,
    items: AtomicU64,
    syncs: AtomicU64,
    max_batch: AtomicU64,
    /// Moving average of a batch's processing time.
    batch_nanos: AtomicU64,
    /// Whether leaders wait an adaptive window (see the module's comment).
    adaptive: bool,
    /// Moving average of a batch's processing time, synced or not (the
    /// adaptive window's scale).
    write_nanos: AtomicU64,
    /// Items in the last batch taken.
    last_batch: AtomicU64,
    /// Whether leaders gather (see the module's comment), and the longest
    /// they wait.
    gather: Option<Duration>,
    /// Writers seen at the end of the last batch: its items and those
    /// queued meanwhile (what a gathering leader waits for).
    writers: AtomicU64,
}

/// The adaptive window's ceiling.
const MAX_ADAPTIVE_WINDOW: Duration = Duration::from_millis(1);

/// What [`GroupCommit::submit`] hands back: the item's result (another
/// caller wrote its batch), or the lead of a batch to write.
pub enum Turn<'a, T, R> {
    Done(Result<R>),
    Lead(Leader<'a, T, R>),
}

/// The lead of one batch: [`Leader::take`] gives its items, which the
/// caller writes as one; [`Leader::finish`] hands out the results. Dropped
/// unfinished (an early return, a panic), it fails the batch's items, so
/// no follower waits forever, and passes the lead on.
pub struct Leader<'a, T, R> {
    gc: &'a GroupCommit<T, R>,
    /// The leader's time in group commit, its batch's write included.
    _timer: telemetry::Timer,
    mine: Arc<Slot<R>>,
    items: Vec<T>,
    slots: Vec<Arc<Slot<R>>>,
    sync: bool,
    started: Instant,
    /// Whether the batch was taken from the queue yet.
    taken: bool,
    /// Whether the lead was handed on already ([`Leader::pass_on`]).
    passed: bool,
}

impl<T, R> GroupCommit<T, R> {
    /// `max_batch_bytes` caps a batch by the sum of `size_of` over its items
    /// (a batch always takes at least its leader's item, however large).
    pub fn new(max_batch_bytes: usize, size_of: fn(&T) -> usize) -> Self {
        GroupCommit {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                busy: false,
            }),
            max_batch_bytes,
            window: Duration::ZERO,
            size_of,
            batches: AtomicU64::new(0),
            items: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            max_batch: AtomicU64::new(0),
            batch_nanos: AtomicU64::new(0),
            adaptive: false,
            write_nanos: AtomicU64::new(0),
            last_batch: AtomicU64::new(0),
            gather: None,
            writers: AtomicU64::new(0),
        }
    }

    /// Makes each leader gather the writers the last batch released (see
    /// the module's comment), waiting at most `cap`; `None`: not.
    pub fn with_gathering(mut self, cap: Option<Duration>) -> Self {
        self.gather = cap;
        self
    }

    /// Makes each leader wait an adaptive window (see the module's comment)
    /// instead of a fixed one.
    pub fn with_adaptive_window(mut self, on: bool) -> Self {
        self.adaptive = on;
        self
    }

    /// Moving average of a batch's write time (zero before the first).
    pub fn write_time(&self) -> Duration {
        Duration::from_nanos(self.write_nanos.load(Ordering::Relaxed))
    }

    /// Makes each leader wait `window` for more items before it takes the
    /// queue (zero: take what is queued at once).
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Queues `item` and returns once a batch containing it has been
    /// written, with that item's result (if the batch failed, every item of
    /// it gets the same error, as [`Error::Shared`]), or once this caller is
    /// to lead the next batch.
    pub fn submit(&self, item: T, sync: bool) -> Turn<'_, T, R> {
        let timer = telemetry::timer(telemetry::Latency::Commit, "wait");
        let slot = Arc::new(Slot {
            state: AtomicU8::new(WAITING),
            result: Mutex::new(None),
            thread: std::thread::current(),
        });
        let size = (self.size_of)(&item);
        let lead = {
            let mut g = self.inner.lock();
            g.queue.push_back(Queued {
                item,
                sync,
                size,
                slot: Arc::clone(&slot),
            });
            // Nobody is leading: this caller's item is alone in the queue.
            !std::mem::replace(&mut g.busy, true)
        };
        if !lead && self.wait(&slot, sync) == DONE {
            return Turn::Done(
                slot.result
                    .lock()
                    .take()
                    .unwrap_or_else(|| Err(Error::corruption("group commit: result missing"))),
            );
        }
        Turn::Lead(self.lead(slot, timer))
    }

    /// Waits until the slot is done or chosen to lead; returns which.
    fn wait(&self, slot: &Slot<R>, sync: bool) -> u8 {
        let mut yields = 0;
        loop {
            let state = slot.state.load(Ordering::Acquire);
            if state != WAITING {
                return state;
            }
            // An unsynced batch takes a few microseconds: giving the core to
            // its leader a few times costs less than parking and being woken
            // (two context switches per follower).
            if !sync
                && yields < YIELDS_BEFORE_SLEEP
                && self.batch_nanos.load(Ordering::Relaxed) < SPIN_BATCH_NANOS
            {
                yields += 1;
                std::thread::yield_now();
            } else {
                std::thread::park();
            }
        }
    }

    /// The lead of the batch at the front of the queue (which holds
    /// `mine`); [`Leader::take`] takes it.
    fn lead(&self, mine: Arc<Slot<R>>, timer: telemetry::Timer) -> Leader<'_, T, R> {
        Leader {
            gc: self,
            _timer: timer,
            mine,
            items: Vec::new(),
            slots: Vec::new(),
            sync: false,
            started: Instant::now(),
            taken: false,
            passed: false,
        }
    }

    /// Waits the window, if any, before a batch is taken.
    fn wait_window(&self) {
        if let Some(cap) = self.gather {
            self.gather_writers(cap);
            return;
        }
        if !self.adaptive {
            if !self.window.is_zero() {
                std::thread::sleep(self.window);
            }
            return;
        }
        let want = self.last_batch.load(Ordering::Relaxed);
        if want < 2 {
            return;
        }
        let window = (self.write_time() / 4).min(MAX_ADAPTIVE_WINDOW);
        let deadline = Instant::now() + window;
        while (self.inner.lock().queue.len() as u64) < want {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            std::thread::sleep((deadline - now).min(Duration::from_micros(50)));
        }
    }

    /// Waits, at most a quarter of the recent batch time and `cap`, until
    /// as many items are queued as there were writers at the end of the
    /// last batch. The writers it released come back within a wake-up, so
    /// the leader yields its core to them rather than sleeping past them.
    fn gather_writers(&self, cap: Duration) {
        let want = self.writers.load(Ordering::Relaxed);
        if want < 2 {
            return;
        }
        let deadline = Instant::now() + (self.write_time() / 4).min(cap);
        while (self.inner.lock().queue.len() as u64) < want {
            if Instant::now() >= deadline {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Takes the batch from the front of the queue: the leader's item and
    /// what queued behind it, up to the byte cap.
    fn collect(&self) -> (Vec<T>, Vec<Arc<Slot<R>>>, bool) {
        let mut items = Vec::new();
        let mut slots = Vec::new();
        let mut sync = false;
        let mut g = self.inner.lock();
        let mut bytes = 0usize;
        while let Some(front) = g.queue.front() {
            if !items.is_empty() && bytes.saturating_add(front.size) > self.max_batch_bytes {
                break;
            }
            let Some(q) = g.queue.pop_front() else { break };
            bytes = bytes.saturating_add(q.size);
            sync |= q.sync;
            items.push(q.item);
            slots.push(q.slot);
        }
        self.last_batch.store(items.len() as u64, Ordering::Relaxed);
        (items, slots, sync)
    }

    pub fn stats(&self) -> GroupCommitStats {
        GroupCommitStats {
            batches: self.batches.load(Ordering::Relaxed),
            items: self.items.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            max_batch: self.max_batch.load(Ordering::Relaxed),
        }
    }
}

impl<T, R> Leader<'_, T, R> {
    /// The batch's items in submission order, and whether any asked for a
    /// sync: after the window, if any, what is queued then. (Taken once: a
    /// second call gives nothing.)
    pub fn take(&mut self) -> (Vec<T>, bool) {
        self.take_queued();
        (std::mem::take(&mut self.items), self.sync)
    }

    fn take_queued(&mut self) {
        if self.taken {
            return;
        }
        self.taken = true;
        self.gc.wait_window();
        let (items, slots, sync) = self.gc.collect();
        self.items = items;
        self.slots = slots;
        self.sync = sync;
        self.started = Instant::now();
    }

    /// Hands the lead to the next caller in the queue now, before this
    /// batch is written, so that the next batch can be gathered and written
    /// meanwhile. Batches may then complete out of order: the caller must
    /// order what their results mean. Call after [`Leader::take`].
    pub fn pass_on(&mut self) {
        self.take_queued();
        if !self.passed {
            self.passed = true;
            self.hand_on();
        }
    }

    /// Hands out the batch's results (exactly one per item taken, in order;
    /// an error goes to every item), chooses the next leader; returns the
    /// leader's own result.
    pub fn finish(mut self, results: Result<Vec<R>>) -> Result<R> {
        self.take_queued();
        let slots = std::mem::take(&mut self.slots);
        let n = slots.len();
        self.account(n);
        let results = match results {
            Ok(v) if v.len() == n => Ok(v),
            Ok(v) => Err(Error::corruption(format!(
                "group commit: {} results for {n} items",
                v.len()
            ))),
            Err(e) => Err(e),
        };
        let mut own = None;
        match results {
            Ok(v) => {
                for (slot, r) in slots.into_iter().zip(v) {
                    self.give(slot, Ok(r), &mut own);
                }
            }
            Err(e) => {
                let shared = Arc::new(e);
                for slot in slots {
                    let e = Error::Shared(Arc::clone(&shared));
                    self.give(slot, Err(e), &mut own);
                }
            }
        }
        own.unwrap_or_else(|| Err(Error::corruption("group commit: leader's result missing")))
    }

    /// Counts the batch and chooses the next leader first, so that its
    /// batch starts while this one's callers are being woken.
    fn account(&mut self, n: usize) {
        let gc = self.gc;
        let took = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if !self.sync {
            // Synced batches are not the ones callers spin for.
            let avg = gc.batch_nanos.load(Ordering::Relaxed);
            gc.batch_nanos
                .store(avg - avg / 8 + took / 8, Ordering::Relaxed);
        }
        let avg = gc.write_nanos.load(Ordering::Relaxed);
        gc.write_nanos
            .store(avg - avg / 8 + took / 8, Ordering::Relaxed);
        gc.batches.fetch_add(1, Ordering::Relaxed);
        gc.items.fetch_add(n as u64, Ordering::Relaxed);
        gc.max_batch.fetch_max(n as u64, Ordering::Relaxed);
        if self.sync {
            gc.syncs.fetch_add(1, Ordering::Relaxed);
        }
        if gc.gather.is_some() {
            let queued = gc.inner.lock().queue.len();
            gc.writers.store((n + queued) as u64, Ordering::Relaxed);
        }
        if !self.passed {
            self.passed = true;
            self.hand_on();
        }
    }

    /// Makes the caller at the front of the queue the next leader, or
    /// leaves the lead free.
    fn hand_on(&self) {
        let mut g = self.gc.inner.lock();
        match g.queue.front() {
            Some(next) => next.slot.set(LEAD),
            None => g.busy = false,
        }
    }

    /// Gives `slot` its result (the leader's own is kept in `own`).
    fn give(&self, slot: Arc<Slot<R>>, r: Result<R>, own: &mut Option<Result<R>>) {
        if Arc::ptr_eq(&slot, &self.mine) {
            *own = Some(r);
        } else {
            *slot.result.lock() = Some(r);
            slot.set(DONE);
        }
    }
}

impl<T, R> Drop for Leader<'_, T, R> {
    fn drop(&mut self) {
        // Untaken, the leader's own item still heads the queue.
        self.take_queued();
        if self.slots.is_empty() {
            return;
        }
        log::error!("group commit: a leader stopped before finishing its batch");
        let slots = std::mem::take(&mut self.slots);
        let n = slots.len();
        self.account(n);
        let shared = Arc::new(Error::corruption(
            "group commit: the batch's leader stopped before writing it",
        ));
        let mut own = None;
        for slot in slots {
            self.give(slot, Err(Error::Shared(Arc::clone(&shared))), &mut own);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// What a caller does with its turn: leads with `write` when it leads.
    fn commit<T, R>(
        gc: &GroupCommit<T, R>,
        item: T,
        sync: bool,
        write: impl FnOnce(Vec<T>, bool) -> Result<Vec<R>>,
    ) -> Result<R> {
        match gc.submit(item, sync) {
            Turn::Done(r) => r,
            Turn::Lead(mut leader) => {
                let (items, sync) = leader.take();
                let written = write(items, sync);
                leader.finish(written)
            }
        }
    }

    type Log = Arc<Mutex<Vec<(u32, u32)>>>;

    fn record(log: &Log, delay: Duration, items: Vec<(u32, u32)>) -> Result<Vec<u64>> {
        std::thread::sleep(delay);
        let mut l = log.lock();
        let mut out = Vec::new();
        for it in items {
            l.push(it);
            out.push(l.len() as u64);
        }
        Ok(out)
    }

    #[test]
    fn many_threads_grouped_fifo_and_processed_before_return() {
        let log: Log = Arc::default();
        let gc = Arc::new(GroupCommit::new(1 << 20, |_: &(u32, u32)| 16));
        let threads: Vec<_> = (0..16u32)
            .map(|t| {
                let gc = Arc::clone(&gc);
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        let pos = commit(&gc, (t, i), i % 10 == 0, |items, _| {
                            record(&log, Duration::from_micros(200), items)
                        })
                        .unwrap();
                        // Processed before submit returned, at the position reported.
                        let l = log.lock();
                        assert_eq!(l[pos as usize - 1], (t, i));
                    }
                })
            })
            .collect();
        for h in threads {
            h.join().unwrap();
        }
        let l = log.lock();
        assert_eq!(l.len(), 16 * 200);
        let mut next = [0u32; 16];
        for &(t, i) in l.iter() {
            assert_eq!(i, next[t as usize], "thread {t} out of order");
            next[t as usize] += 1;
        }
        let s = gc.stats();
        assert_eq!(s.items, 3200);
        assert!(s.batches < s.items, "no grouping: {s:?}");
        assert!(s.max_batch > 1);
        assert!(s.syncs >= 1 && s.syncs <= s.batches);
    }

    #[test]
    fn byte_cap_limits_batches() {
        let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
        let gc = Arc::new(GroupCommit::new(100, |v: &Vec<u8>| v.len()));
        let write = |seen: &Mutex<Vec<usize>>, items: Vec<Vec<u8>>| {
            seen.lock().push(items.iter().map(Vec::len).sum());
            std::thread::sleep(Duration::from_millis(1));
            Ok(vec![(); items.len()])
        };
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let (gc, seen) = (Arc::clone(&gc), Arc::clone(&seen));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        commit(&gc, vec![0; 40], false, |i, _| write(&seen, i)).unwrap();
                    }
                    commit(&gc, vec![0; 500], false, |i, _| write(&seen, i)).unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let seen = seen.lock();
        assert_eq!(seen.iter().sum::<usize>(), 8 * (20 * 40 + 500));
        // Only a lone oversized leader item may exceed the cap.
        assert!(seen.iter().all(|&b| b <= 100 || b == 500), "{seen:?}");
    }

    #[test]
    fn error_reaches_every_item_of_the_batch() {
        let gc = Arc::new(GroupCommit::<u32, ()>::new(1 << 20, |_| 1));
        let hs: Vec<_> = (0..20u32)
            .map(|i| {
                let gc = Arc::clone(&gc);
                std::thread::spawn(move || {
                    let r = commit(&gc, i, true, |items, _| {
                        std::thread::sleep(Duration::from_millis(2));
                        if items.contains(&13) {
                            Err(Error::corruption("disk on fire"))
                        } else {
                            Ok(vec![(); items.len()])
                        }
                    });
                    (i, r)
                })
            })
            .collect();
        let mut failed = 0;
        for h in hs {
            let (i, r) = h.join().unwrap();
            if let Err(e) = r {
                failed += 1;
                assert!(matches!(e.root(), Error::Corruption(m) if m == "disk on fire"));
                assert_eq!(e.to_string(), "corruption: disk on fire");
            } else {
                assert_ne!(i, 13);
            }
        }
        assert!(failed >= 1);
        // The queue still works after a failed batch.
        assert!(commit(&gc, 1, false, |i, _| Ok(vec![(); i.len()])).is_ok());
    }

    #[test]
    fn a_dropped_leader_or_a_wrong_result_count_becomes_an_error() {
        let gc = GroupCommit::<u32, ()>::new(64, |_| 1);
        // A leader that panics (or returns early) drops its token unfinished.
        let Turn::Lead(leader) = gc.submit(0, false) else {
            panic!("a lone caller leads");
        };
        drop(leader);
        assert!(commit(&gc, 1, false, |_, _| Ok(Vec::new())).is_err());
        assert_eq!(gc.stats().batches, 2);
        // The lead passed on: the queue still works.
        assert!(commit(&gc, 2, false, |i, _| Ok(vec![(); i.len()])).is_ok());
    }

    /// A leader that passes the lead on lets the next caller lead its own
    /// batch while the first is still unwritten; both get their results.
    #[test]
    fn a_passed_lead_lets_the_next_batch_start_first() {
        let gc = Arc::new(GroupCommit::<u32, u32>::new(1 << 20, |_| 1));
        let Turn::Lead(mut first) = gc.submit(1, false) else {
            panic!("a lone caller leads");
        };
        let (items, _) = first.take();
        assert_eq!(items, vec![1]);
        first.pass_on();
        let gc2 = Arc::clone(&gc);
        // Without the pass, this caller would wait for `first` to finish.
        let second = std::thread::spawn(move || commit(&gc2, 2, false, |i, _| Ok(i)));
        assert_eq!(second.join().unwrap().unwrap(), 2);
        assert_eq!(first.finish(Ok(vec![10])).unwrap(), 10);
        assert_eq!(gc.stats().batches, 2);
        // The queue still works.
        assert_eq!(commit(&gc, 3, false, |i, _| Ok(i)).unwrap(), 3);
    }

    /// The adaptive window lets a lone caller through at once however slow
    /// the batches are, and still batches what queues meanwhile.
    #[test]
    fn the_adaptive_window_serves_a_lone_caller_and_groups_many() {
        let gc = Arc::new(GroupCommit::<u32, ()>::new(1 << 20, |_| 1).with_adaptive_window(true));
        for i in 0..3 {
            commit(&gc, i, false, |items, _| {
                std::thread::sleep(Duration::from_millis(5));
                Ok(vec![(); items.len()])
            })
            .unwrap();
        }
        assert_eq!(gc.stats().items, 3);
        assert!(
            gc.write_time() >= Duration::from_millis(1),
            "{:?}",
            gc.write_time()
        );
        let hs: Vec<_> = (0..8u32)
            .map(|i| {
                let gc = Arc::clone(&gc);
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        commit(&gc, i, true, |items, _| {
                            std::thread::sleep(Duration::from_millis(2));
                            Ok(vec![(); items.len()])
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(gc.stats().items, 3 + 160);
    }

    /// With a window, a leader waits for the items queued behind it: four
    /// callers arriving within the window share one batch.
    #[test]
    fn window_gathers_callers_into_one_batch() {
        let gc = Arc::new(
            GroupCommit::<u32, ()>::new(1 << 20, |_| 1).with_window(Duration::from_secs(5)),
        );
        let go = Arc::new(std::sync::Barrier::new(4));
        let hs: Vec<_> = (0..4u32)
            .map(|i| {
                let (gc, go) = (Arc::clone(&gc), Arc::clone(&go));
                std::thread::spawn(move || {
                    go.wait();
                    commit(&gc, i, true, |items, _| Ok(vec![(); items.len()]))
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap().unwrap();
        }
        // Released together, the four queue within the first one's window.
        assert_eq!(gc.stats().max_batch, 4, "{:?}", gc.stats());
    }

    /// Waits (by polling, with a deadline) until `gc` has `n` items queued.
    fn until_queued<T, R>(gc: &GroupCommit<T, R>, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while gc.inner.lock().queue.len() < n {
            assert!(Instant::now() < deadline, "{n} items never queued");
            std::thread::yield_now();
        }
    }

    /// A gathering leader waits for the writer the last batch released:
    /// three writers queued behind a batch of one, and the batch after it
    /// takes them and the first writer's next item, four in all.
    #[test]
    fn gathering_waits_for_the_writers_the_last_batch_released() {
        let gc = Arc::new(
            GroupCommit::<u32, ()>::new(1 << 20, |_| 1)
                .with_gathering(Some(Duration::from_secs(30))),
        );
        // A batch time long enough that the window is the cap.
        gc.write_nanos.store(u64::MAX / 2, Ordering::Relaxed);
        let writing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let first = {
            let (gc, writing) = (Arc::clone(&gc), Arc::clone(&writing));
            std::thread::spawn(move || {
                for i in 0..2u32 {
                    if i == 1 {
                        // Slow to come back: without gathering, the next
                        // leader would take the three without this one.
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    commit(&gc, i * 10, true, |items, _| {
                        if items == [0] {
                            writing.store(true, Ordering::Release);
                            until_queued(&gc, 3);
                        }
                        Ok(vec![(); items.len()])
                    })
                    .unwrap();
                }
            })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !writing.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the first batch never started");
            std::thread::yield_now();
        }
        let others: Vec<_> = (1..4u32)
            .map(|i| {
                let gc = Arc::clone(&gc);
                std::thread::spawn(move || {
                    commit(&gc, i, true, |items, _| Ok(vec![(); items.len()])).unwrap()
                })
            })
            .collect();
        first.join().unwrap();
        for h in others {
            h.join().unwrap();
        }
        let stats = gc.stats();
        assert_eq!(
            (stats.batches, stats.items, stats.max_batch),
            (2, 5, 4),
            "{stats:?}"
        );
    }

    /// A lone writer never waits to gather, however long batches take.
    #[test]
    fn a_lone_writer_does_not_wait_to_gather() {
        let gc = GroupCommit::<u32, ()>::new(1 << 20, |_| 1)
            .with_gathering(Some(Duration::from_secs(30)));
        gc.write_nanos.store(u64::MAX / 2, Ordering::Relaxed);
        let started = Instant::now();
        for i in 0..5 {
            commit(&gc, i, true, |items, _| Ok(vec![(); items.len()])).unwrap();
        }
        assert_eq!(gc.stats().batches, 5);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
    }
}
