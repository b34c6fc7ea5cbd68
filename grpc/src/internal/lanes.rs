//! One sender per watching daemon (docs/coherence.md, "Sending"): the
//! invalidations of concurrent writes to one watcher travel together, one
//! message per round trip, instead of a thread and a call per write.
//!
//! A lane is a queue and a flag saying who sends its next batch. A writer
//! that finds its watcher's lane idle sends the batch itself, on its own
//! thread (no hand-off when writes do not overlap); one that finds it busy
//! queues its invalidation and waits. Whoever finishes a batch while more
//! is queued hands the lane to its long-lived thread, which sends until
//! the queue is empty. A write with several watchers sends one lane's
//! batch itself and hands the others to their threads. Every write still
//! waits for each of its own invalidations: answered, or its watcher's
//! lease over.

use super::messages::{Invalidation, Op};
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a daemon calls another daemon itself (the internal RPC's dialer).
pub(crate) trait DaemonCalls: Send + Sync {
    /// Asks the daemon at `addr` `op`; its reply's bytes.
    fn daemon_call(&self, addr: &str, op: Op, timeout: Duration) -> engine::Result<Vec<u8>>;
}

/// What a lane needs of the protocol that owns it (coherence.rs): the
/// leases' bookkeeping stays there, the lanes only send.
pub(crate) trait Owner: Send + Sync + 'static {
    /// The dialer, once the daemon has one.
    fn dialer(&self) -> Option<&Arc<dyn DaemonCalls>>;
    /// The daemon is stopping: lane threads end.
    fn stopped(&self) -> bool;
    /// One invalidation to `addr` is over, `answered` or not.
    fn done(&self, addr: &str, watcher: bool, answered: bool);
    /// One message was sent (counted).
    fn sent_message(&self);
}

/// Rows one invalidation names; more invalidate the table.
pub(crate) const MAX_ROWS: usize = 1024;
/// Bytes of row keys one message carries, at most (more: the table).
pub(crate) const MAX_ROW_BYTES: usize = 1 << 20;
/// Writes' invalidations one message carries, at most.
const MAX_BATCH: usize = 256;
/// Tables one message names, at most.
const MAX_TABLES: usize = 64;
/// Between tries of an invalidation that failed (the watcher restarting).
const RETRY: Duration = Duration::from_millis(20);
/// A lane's thread that had nothing to send this long ends.
const IDLE: Duration = Duration::from_secs(30);

/// One write's wait for its invalidations.
pub(crate) struct Waiter {
    left: Mutex<usize>,
    cv: Condvar,
}

impl Waiter {
    pub(crate) fn new(n: usize) -> Arc<Waiter> {
        Arc::new(Waiter {
            left: Mutex::new(n),
            cv: Condvar::new(),
        })
    }

    fn one_done(&self) {
        let mut left = self.left.lock();
        *left = left.saturating_sub(1);
        if *left == 0 {
            self.cv.notify_all();
        }
    }

    /// Returns once every invalidation of the write ended.
    pub(crate) fn wait(&self) {
        let mut left = self.left.lock();
        while *left > 0 {
            self.cv.wait(&mut left);
        }
    }
}

/// One write's invalidation to one daemon.
pub(crate) struct Item {
    pub(crate) inv: Arc<Invalidation>,
    /// When the watcher's lease (or the unregistered daemon's wait) ends.
    pub(crate) until: Instant,
    /// A registered watcher (not a daemon listed in its first seconds).
    pub(crate) watcher: bool,
    pub(crate) waiter: Arc<Waiter>,
}

#[derive(Clone, Copy, PartialEq)]
enum Sender {
    Idle,
    /// A writer sends the batch on its own thread.
    Writer,
    /// The lane's thread sends until the queue is empty.
    Thread,
}

struct State {
    queue: Vec<Item>,
    sender: Sender,
    thread: bool,
}

/// The invalidations waiting for one watching daemon.
pub(crate) struct Lane {
    addr: String,
    state: Mutex<State>,
    work: Condvar,
}

/// What a writer must do for a lane after queueing its invalidation.
pub(crate) enum Role {
    /// Send the batch itself ([`Lane::lead`]).
    Lead,
    /// Nothing: another sender carries it.
    Wait,
}

impl Lane {
    pub(crate) fn new(addr: &str) -> Arc<Lane> {
        Arc::new(Lane {
            addr: addr.to_string(),
            state: Mutex::new(State {
                queue: Vec::new(),
                sender: Sender::Idle,
                thread: false,
            }),
            work: Condvar::new(),
        })
    }

    /// Queues `item`. An idle lane is led by the caller when `lead` (it
    /// then must call [`Lane::lead`]), else handed to its thread.
    pub(crate) fn push<O: Owner>(self: &Arc<Lane>, c: &Arc<O>, item: Item, lead: bool) -> Role {
        let mut s = self.state.lock();
        s.queue.push(item);
        if s.sender != Sender::Idle {
            return Role::Wait;
        }
        if lead {
            s.sender = Sender::Writer;
            return Role::Lead;
        }
        self.hand_to_thread(c, s);
        Role::Wait
    }

    /// Sends one batch on the caller's thread (the caller's own
    /// invalidation is in it), then hands what queued meanwhile on.
    pub(crate) fn lead<O: Owner>(self: &Arc<Lane>, c: &Arc<O>, dialer: &dyn DaemonCalls) {
        let batch = take_batch(&mut self.state.lock().queue);
        send(&**c, dialer, &self.addr, batch);
        let mut s = self.state.lock();
        if s.queue.is_empty() {
            s.sender = Sender::Idle;
        } else {
            self.hand_to_thread(c, s);
        }
    }

    /// Lets the lane's thread send what is queued (started if it is not
    /// running; if it cannot be, the caller sends all itself).
    fn hand_to_thread<O: Owner>(
        self: &Arc<Lane>,
        c: &Arc<O>,
        mut s: parking_lot::MutexGuard<'_, State>,
    ) {
        s.sender = Sender::Thread;
        if s.thread {
            self.work.notify_one();
            return;
        }
        s.thread = true;
        drop(s);
        let (lane, co) = (self.clone(), c.clone());
        let spawned = std::thread::Builder::new()
            .name("bt-invalidate".into())
            .spawn(move || lane.run(&co));
        if let Err(e) = spawned {
            log::warn!("cannot start a sender of invalidations: {e}");
            self.state.lock().thread = false;
            if let Some(dialer) = c.dialer() {
                self.drain(&**c, &**dialer);
            }
        }
    }

    /// Sends batches until the queue is empty, then leaves the lane idle.
    fn drain<O: Owner>(&self, c: &O, dialer: &dyn DaemonCalls) {
        loop {
            let batch = {
                let mut s = self.state.lock();
                if s.queue.is_empty() {
                    s.sender = Sender::Idle;
                    return;
                }
                take_batch(&mut s.queue)
            };
            send(c, dialer, &self.addr, batch);
        }
    }

    /// The lane's thread: sends whenever the lane is handed to it; ends
    /// when idle for [`IDLE`] or the daemon stops.
    fn run<O: Owner>(self: Arc<Lane>, c: &Arc<O>) {
        let mut idle_since = Instant::now();
        loop {
            {
                let mut s = self.state.lock();
                while s.sender != Sender::Thread {
                    let stop = c.stopped();
                    if stop || idle_since.elapsed() >= IDLE {
                        s.thread = false;
                        return;
                    }
                    self.work.wait_for(&mut s, Duration::from_secs(1));
                }
            }
            match c.dialer() {
                Some(dialer) => self.drain(&**c, &**dialer),
                None => {
                    // No dialer, nothing can be sent: the writers stop waiting.
                    let mut s = self.state.lock();
                    for item in s.queue.drain(..) {
                        item.waiter.one_done();
                    }
                    s.sender = Sender::Idle;
                }
            }
            idle_since = Instant::now();
        }
    }
}

/// The oldest queued invalidations one message may carry.
fn take_batch(queue: &mut Vec<Item>) -> Vec<Item> {
    let mut n = 0;
    let mut bytes = 0;
    let mut tables: Vec<&str> = Vec::new();
    for item in queue.iter() {
        let b: usize = item.inv.rows.iter().map(|r| r.len()).sum();
        let new_table = !tables.contains(&item.inv.table.as_str());
        if n > 0
            && (n == MAX_BATCH
                || bytes + b > MAX_ROW_BYTES
                || (new_table && tables.len() == MAX_TABLES))
        {
            break;
        }
        if new_table {
            tables.push(&item.inv.table);
        }
        n += 1;
        bytes += b;
    }
    queue.drain(..n).collect()
}

/// One message for `batch`: each table's rows once, or the whole table
/// past the bounds. A batch of one table is a plain `Invalidate`.
pub(crate) fn message(batch: &[Item]) -> Op {
    let mut order: Vec<&str> = Vec::new();
    let mut by_table: HashMap<&str, Vec<&Invalidation>> = HashMap::new();
    for item in batch {
        let t = item.inv.table.as_str();
        by_table
            .entry(t)
            .or_insert_with(|| {
                order.push(t);
                Vec::new()
            })
            .push(&item.inv);
    }
    let mut merged: Vec<Invalidation> = order
        .iter()
        .map(|t| {
            let invs = &by_table[t];
            let rows = invs
                .iter()
                .flat_map(|i| i.rows.iter().map(|r| r.as_slice()));
            let mut m = Invalidation::of(t, rows);
            m.whole |= invs.iter().any(|i| i.whole);
            if m.whole {
                m.rows.clear();
            }
            m
        })
        .collect();
    if merged.len() == 1 {
        let Invalidation { table, rows, whole } = merged.remove(0);
        return Op::Invalidate { table, rows, whole };
    }
    Op::InvalidateMany { tables: merged }
}

/// Sends `batch` to `addr` until it answers, each invalidation of it
/// until its own lease's end; then each write is told.
fn send<O: Owner>(c: &O, dialer: &dyn DaemonCalls, addr: &str, mut batch: Vec<Item>) {
    loop {
        let now = Instant::now();
        // Those whose lease ran out are over, unanswered.
        batch.retain(|i| {
            let over = i.until <= now;
            if over {
                c.done(addr, i.watcher, false);
                i.waiter.one_done();
            }
            !over
        });
        let Some(until) = batch.iter().map(|i| i.until).min() else {
            return;
        };
        let op = message(&batch);
        c.sent_message();
        if dialer.daemon_call(addr, op, until - now).is_ok() {
            for i in &batch {
                c.done(addr, i.watcher, true);
                i.waiter.one_done();
            }
            return;
        }
        std::thread::sleep(RETRY.min(until.saturating_duration_since(Instant::now())));
    }
}

impl Invalidation {
    /// `rows` of `table`, each once; the whole table past the bounds.
    pub(crate) fn of<'a>(table: &str, rows: impl Iterator<Item = &'a [u8]>) -> Invalidation {
        let mut seen = std::collections::HashSet::new();
        let mut list: Vec<Vec<u8>> = Vec::new();
        let mut bytes = 0;
        let mut whole = false;
        for r in rows {
            if seen.insert(r) {
                bytes += r.len();
                if list.len() == MAX_ROWS || bytes > MAX_ROW_BYTES {
                    whole = true;
                    list.clear();
                    break;
                }
                list.push(r.to_vec());
            }
        }
        Invalidation {
            table: table.to_string(),
            rows: list,
            whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::internal::coherence::{Coherence, Hook};
    use engine::protocol::AfterWrite;
    use std::collections::HashSet;
    use std::sync::atomic::Ordering;

    /// (table, row) pairs a watcher was told of.
    type Rows = HashSet<(String, Vec<u8>)>;

    /// Watchers that record what they were told; `deaf` never answers.
    #[derive(Default)]
    struct Told {
        rows: Mutex<HashMap<String, Rows>>,
        deaf: Mutex<HashSet<String>>,
        messages: Mutex<Vec<Op>>,
    }

    impl DaemonCalls for Told {
        fn daemon_call(&self, addr: &str, op: Op, timeout: Duration) -> engine::Result<Vec<u8>> {
            if self.deaf.lock().contains(addr) {
                std::thread::sleep(timeout);
                return Err(engine::Error::Unavailable("deaf".into()));
            }
            // Overlap concurrent writes, as a round trip does.
            std::thread::sleep(Duration::from_micros(300));
            let invs = match &op {
                Op::Invalidate { table, rows, whole } => vec![Invalidation {
                    table: table.clone(),
                    rows: rows.clone(),
                    whole: *whole,
                }],
                Op::InvalidateMany { tables } => tables.clone(),
                other => panic!("{other:?}"),
            };
            let mut told = self.rows.lock();
            let at = told.entry(addr.to_string()).or_default();
            for i in invs {
                assert!(!i.whole, "a write of one row invalidated its table");
                for r in i.rows {
                    at.insert((i.table.clone(), r));
                }
            }
            self.messages.lock().push(op);
            Ok(bincode::serialize(&()).unwrap())
        }
    }

    fn cluster(watchers: &[&str], lease_ms: u64) -> (Arc<Coherence>, Arc<Told>) {
        let c = Arc::new(Coherence::new("me:1".into()));
        let told = Arc::new(Told::default());
        let dialer: Arc<dyn DaemonCalls> = told.clone();
        assert!(c.dialer.set(dialer).is_ok());
        for w in watchers {
            let op = Op::Watch {
                addr: w.to_string(),
                lease_ms,
            };
            assert!(matches!(c.handle(&op), Some(Ok(_))));
        }
        (c, told)
    }

    #[test]
    fn every_write_reaches_every_watcher_before_it_returns() {
        let watchers = ["b:1", "c:1", "d:1"];
        let (c, told) = cluster(&watchers, 3000);
        std::thread::scope(|s| {
            for t in 0..6 {
                let (c, told) = (c.clone(), told.clone());
                s.spawn(move || {
                    let hook = Hook(c.clone());
                    for i in 0..40 {
                        let table = format!("t{}", i % 3);
                        let row = format!("row-{t}-{i}").into_bytes();
                        hook.wrote(&table, &[&row]);
                        // Renewals go on meanwhile (kept by the leases' rule).
                        if i % 10 == 0 {
                            let op = Op::Watch {
                                addr: "b:1".into(),
                                lease_ms: 3000,
                            };
                            assert!(matches!(c.handle(&op), Some(Ok(_))));
                        }
                        let seen = told.rows.lock();
                        for w in watchers {
                            let at = seen
                                .get(w)
                                .map(|x| x.contains(&(table.clone(), row.clone())));
                            assert_eq!(at, Some(true), "write {t}/{i} returned before {w} had it");
                        }
                    }
                });
            }
        });
        assert_eq!(c.stats.sent.load(Ordering::Relaxed), 6 * 40 * 3);
        assert_eq!(c.stats.expired.load(Ordering::Relaxed), 0);
        // No invalidation left pending: every lease may be extended again.
        let op = Op::Watch {
            addr: "c:1".into(),
            lease_ms: 3000,
        };
        let bytes = match c.handle(&op) {
            Some(Ok(b)) => b,
            other => panic!("{other:?}"),
        };
        let (left, continuous): (u64, bool) = bincode::deserialize(&bytes).unwrap();
        assert!(continuous && left > 2900, "{left} ms left");
        eprintln!(
            "{} invalidations in {} messages",
            c.stats.sent.load(Ordering::Relaxed),
            told.messages.lock().len()
        );
    }

    #[test]
    fn a_watcher_that_does_not_answer_holds_writes_until_its_lease_ends_only() {
        let granted = Instant::now();
        let (c, told) = cluster(&["b:1", "deaf:1"], 300);
        told.deaf.lock().insert("deaf:1".into());
        let hook = Hook(c.clone());
        hook.wrote("t", &[b"r1"]);
        // The lease ends no earlier than 300 ms after `granted`.
        assert!(
            granted.elapsed() >= Duration::from_millis(300),
            "returned before the lease ended"
        );
        assert!(told.rows.lock()["b:1"].contains(&("t".to_string(), b"r1".to_vec())));
        assert_eq!(c.stats.expired.load(Ordering::Relaxed), 1);
        // The deaf watcher is forgotten: the next write does not wait for
        // it (B's lease, run out meanwhile, is taken again).
        let op = Op::Watch {
            addr: "b:1".into(),
            lease_ms: 3000,
        };
        assert!(matches!(c.handle(&op), Some(Ok(_))));
        hook.wrote("t", &[b"r2"]);
        assert_eq!(c.stats.expired.load(Ordering::Relaxed), 1);
        assert!(told.rows.lock()["b:1"].contains(&("t".to_string(), b"r2".to_vec())));
    }

    #[test]
    fn a_batch_names_each_table_once() {
        let waiter = Waiter::new(3);
        let item = |t: &str, r: &[u8], whole: bool| Item {
            inv: Arc::new(Invalidation {
                table: t.into(),
                rows: vec![r.to_vec()],
                whole,
            }),
            until: Instant::now(),
            watcher: true,
            waiter: waiter.clone(),
        };
        let one = [
            item("t", b"a", false),
            item("t", b"b", false),
            item("t", b"a", false),
        ];
        match message(&one) {
            Op::Invalidate { table, rows, whole } => {
                assert_eq!(table, "t");
                assert_eq!(rows, vec![b"a".to_vec(), b"b".to_vec()]);
                assert!(!whole);
            }
            other => panic!("{other:?}"),
        }
        let two = [
            item("t", b"a", false),
            item("u", b"x", true),
            item("t", b"c", false),
        ];
        match message(&two) {
            Op::InvalidateMany { tables } => {
                assert_eq!(tables.len(), 2);
                assert_eq!(tables[0].rows, vec![b"a".to_vec(), b"c".to_vec()]);
                assert!(tables[1].whole && tables[1].rows.is_empty());
            }
            other => panic!("{other:?}"),
        }
    }
}
