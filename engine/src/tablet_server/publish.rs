//! Publishing committed batches to readers, in sequence order.
//!
//! After a batch's log write, each of its writers inserts its own entries
//! into the memtables, in parallel with the others and with the next log
//! write (RocksDB's concurrent memtable writes): no leader inserts everyone's
//! entries one after another. Reads take the visible sequence number as
//! their snapshot, so it may only pass a batch once every insert of it and
//! of every earlier batch is done. The writer that finishes a batch's last
//! insert publishes every complete batch at the front of the queue; each
//! writer waits until its batch is visible, so a write that returned is seen
//! by every later read.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;

/// How often a writer yields its core before parking until its batch is
/// visible: the inserts it waits for take microseconds.
const YIELDS_BEFORE_SLEEP: u32 = 16;

/// One logged batch: its last sequence number and how many of its writers
/// have not finished inserting.
pub(super) struct Batch {
    last: u64,
    pending: AtomicUsize,
}

impl Batch {
    pub(super) fn last(&self) -> u64 {
        self.last
    }
}

/// The visible sequence number and the batches not yet visible.
#[derive(Default)]
pub(super) struct Publisher {
    /// Every entry up to here is in its memtable.
    visible: AtomicU64,
    /// Logged batches not yet published, oldest first.
    queue: Mutex<VecDeque<Arc<Batch>>>,
    /// Parked writers and the sequence number each waits for.
    waiters: Mutex<Vec<(u64, Thread)>>,
}

impl Publisher {
    pub(super) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Queues a batch whose entries end at `last`, inserted by `members`
    /// writers. Batches begin in sequence order (under the commit lock).
    pub(super) fn begin(&self, last: u64, members: usize) -> Arc<Batch> {
        let batch = Arc::new(Batch {
            last,
            pending: AtomicUsize::new(members),
        });
        self.queue.lock().push_back(Arc::clone(&batch));
        if members == 0 {
            self.publish();
        }
        batch
    }

    /// One writer of `batch` has inserted all its entries.
    pub(super) fn done(&self, batch: &Batch) {
        if batch.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.publish();
        }
    }

    /// Makes every complete batch at the front of the queue visible and
    /// wakes the writers waiting for them.
    fn publish(&self) {
        let upto = {
            let mut queue = self.queue.lock();
            let mut upto = None;
            while let Some(front) = queue.front() {
                if front.pending.load(Ordering::Acquire) != 0 {
                    break;
                }
                upto = Some(front.last);
                queue.pop_front();
            }
            // Stored under the queue's lock: publications never go backwards.
            if let Some(v) = upto {
                self.visible.fetch_max(v, Ordering::AcqRel);
            }
            upto
        };
        if let Some(v) = upto {
            self.waiters.lock().retain(|(seq, thread)| {
                if *seq <= v {
                    thread.unpark();
                    false
                } else {
                    true
                }
            });
        }
    }

    /// Returns once every entry up to `seq` is visible.
    pub(super) fn wait(&self, seq: u64) {
        let mut yields = 0;
        while self.visible() < seq {
            if yields < YIELDS_BEFORE_SLEEP {
                yields += 1;
                std::thread::yield_now();
                continue;
            }
            {
                // Checked under the waiters' lock: a publisher stores the
                // sequence number before it takes that lock to wake waiters.
                let mut waiters = self.waiters.lock();
                if self.visible() >= seq {
                    return;
                }
                waiters.push((seq, std::thread::current()));
            }
            std::thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn batches_become_visible_in_order_whatever_order_they_complete_in() {
        let p = Publisher::default();
        let a = p.begin(3, 2);
        let b = p.begin(5, 1);
        let c = p.begin(9, 1);
        p.done(&b);
        p.done(&c);
        assert_eq!(p.visible(), 0, "the first batch is not complete");
        p.done(&a);
        assert_eq!(p.visible(), 0, "one of the first batch's writers is left");
        p.done(&a);
        assert_eq!(p.visible(), 9);
        let empty = p.begin(9, 0);
        assert_eq!(empty.last(), 9);
        assert_eq!(p.visible(), 9);
    }

    #[test]
    fn a_waiting_writer_returns_once_its_batch_is_published() {
        let p = Arc::new(Publisher::default());
        let first = p.begin(4, 1);
        let second = p.begin(8, 1);
        // The later batch completes first; its writer must wait for the
        // earlier one.
        p.done(&second);
        let waiter = {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                p.wait(8);
                p.visible()
            })
        };
        // Let the waiter get past its yields and park (a wait for a
        // condition: it is registered or it has returned).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while p.waiters.lock().is_empty() && !waiter.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "the waiter never parked"
            );
            std::thread::yield_now();
        }
        assert!(
            !waiter.is_finished(),
            "returned before its batch was visible"
        );
        p.done(&first);
        assert_eq!(waiter.join().unwrap(), 8);
        assert!(p.waiters.lock().is_empty());
    }
}
