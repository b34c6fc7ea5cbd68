//! Point reads that several threads make of one peer at once, sent as one
//! frame (a multi-get, as HBase's; docs/internal-rpc.md, "Batches"): the
//! callee's connection thread wakes once for all of them instead of once
//! each. Nothing waits to fill a batch: a read goes out at once while fewer
//! than [`SENDERS`] frames to the peer are in flight; reads that come
//! meanwhile queue, and the next sender takes them all (up to
//! [`MAX_BATCH`]). The callee answers each read as if it came alone.

use super::messages::{Call, Op, Reply};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use tonic::Status;

/// Frames of reads in flight to one peer before more reads queue.
pub(crate) const SENDERS: usize = 2;
/// The most reads in one frame.
pub(crate) const MAX_BATCH: usize = 32;
/// The most request bytes one frame gathers (a callee takes 4 MiB of a
/// `Control` request by default).
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Once a batch's replies reach this many bytes, its callee runs the
/// rest of it no more: their callers send them alone.
pub(crate) const REPLY_ROOM: usize = 16 << 20;

/// Whether `op` may travel in a batch: a point read (short, changing
/// nothing, so one lost with its batch is simply sent again).
pub(crate) fn batchable(op: &Op) -> bool {
    matches!(
        op,
        Op::ReadRow { .. } | Op::PeekRow { .. } | Op::ReadColumn { .. }
    )
}

/// What a queued read is waiting for.
enum Turn {
    Queued(Call),
    /// Taken into a batch that is out.
    Sent,
    /// Its turn to send (a sender handed it on); the call is back.
    Lead(Call),
    Done(Result<Reply, Status>),
}

struct Slot {
    turn: Mutex<Turn>,
    cv: Condvar,
    bytes: usize,
}

impl Slot {
    fn set(&self, t: Turn) {
        *self.turn.lock() = t;
        self.cv.notify_one();
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Arc<Slot>>,
    sending: usize,
}

/// The reads to one peer waiting for a sender.
#[derive(Default)]
pub(crate) struct Gather {
    state: Mutex<State>,
}

/// A sender's batch: its own call first, then the queued ones it took.
pub(crate) type Send<'a> = &'a dyn Fn(Vec<Call>) -> Vec<Result<Reply, Status>>;

impl Gather {
    /// Runs `call` (of `bytes` encoded), in a batch of the reads queued
    /// meanwhile or alone: `send` sends a batch and returns one result per
    /// call, in order.
    pub(crate) fn run(&self, call: Call, bytes: usize, send: Send<'_>) -> Result<Reply, Status> {
        let slot = {
            let mut st = self.state.lock();
            static S: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
            let senders = *S.get_or_init(|| {
                std::env::var("BT_SENDERS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(SENDERS)
            });
            if st.sending < senders {
                st.sending += 1;
                drop(st);
                return self.lead(call, bytes, send);
            }
            let slot = Arc::new(Slot {
                turn: Mutex::new(Turn::Queued(call)),
                cv: Condvar::new(),
                bytes,
            });
            st.queue.push_back(slot.clone());
            slot
        };
        let call = {
            let mut t = slot.turn.lock();
            loop {
                match std::mem::replace(&mut *t, Turn::Sent) {
                    Turn::Done(r) => return r,
                    Turn::Lead(c) => break c,
                    waiting @ (Turn::Queued(_) | Turn::Sent) => {
                        *t = waiting;
                        slot.cv.wait(&mut t);
                    }
                }
            }
        };
        self.lead(call, bytes, send)
    }

    /// Sends `own` with what is queued, hands the turn on, answers the
    /// reads it took.
    fn lead(&self, own: Call, bytes: usize, send: Send<'_>) -> Result<Reply, Status> {
        let mut turn = TurnGuard {
            gather: self,
            taken: Vec::new(),
            handed: false,
        };
        let mut calls = vec![own];
        {
            let mut st = self.state.lock();
            let mut total = bytes;
            while calls.len() < MAX_BATCH {
                let Some(next) = st.queue.front() else { break };
                if total + next.bytes > MAX_BATCH_BYTES {
                    break;
                }
                total += next.bytes;
                let Some(slot) = st.queue.pop_front() else {
                    break;
                };
                let queued = std::mem::replace(&mut *slot.turn.lock(), Turn::Sent);
                if let Turn::Queued(c) = queued {
                    calls.push(c);
                    turn.taken.push(slot);
                }
            }
        }
        let mut results = send(calls).into_iter();
        let mine = results
            .next()
            .unwrap_or_else(|| Err(Status::internal("a batch answered no call")));
        // The next batch goes out before this one's readers are woken.
        turn.hand_on();
        for slot in std::mem::take(&mut turn.taken) {
            let r = results
                .next()
                .unwrap_or_else(|| Err(Status::internal("a batch answered too few calls")));
            slot.set(Turn::Done(r));
        }
        mine
    }
}

/// A sender's duties, done even if it panics: the reads it took are
/// answered, and the turn passes to the first queued read (or a sender
/// fewer is counted).
struct TurnGuard<'a> {
    gather: &'a Gather,
    taken: Vec<Arc<Slot>>,
    handed: bool,
}

impl TurnGuard<'_> {
    fn hand_on(&mut self) {
        let next = {
            let mut st = self.gather.state.lock();
            match st.queue.pop_front() {
                Some(n) => Some(n),
                None => {
                    st.sending -= 1;
                    None
                }
            }
        };
        if let Some(n) = next {
            let mut t = n.turn.lock();
            if let Turn::Queued(c) = std::mem::replace(&mut *t, Turn::Sent) {
                *t = Turn::Lead(c);
            }
            n.cv.notify_one();
        }
        self.handed = true;
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        for slot in self.taken.drain(..) {
            slot.set(Turn::Done(Err(Status::internal(
                "the thread sending a batch of reads failed",
            ))));
        }
        if !self.handed {
            self.hand_on();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    fn read(n: u64) -> Call {
        Call {
            server: Some("ts0".into()),
            op: Op::ReadRow {
                tablet: n,
                row: n.to_be_bytes().to_vec(),
                spec: Box::default(),
            },
        }
    }

    fn tablet(c: &Call) -> u64 {
        match c.op {
            Op::ReadRow { tablet, .. } => tablet,
            _ => u64::MAX,
        }
    }

    /// Reads that come while `SENDERS` frames are out queue, and go out
    /// together once one comes back; every read gets its own answer, and
    /// no more than `SENDERS` frames are ever out at once.
    #[test]
    fn reads_queued_behind_busy_senders_share_a_frame() {
        let g = Gather::default();
        let (sizes, out, most) = (
            Mutex::new(Vec::new()),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let threads = 8usize;
        let send = |calls: Vec<Call>| -> Vec<Result<Reply, Status>> {
            let now = out.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let first = {
                let mut s = sizes.lock();
                s.push(calls.len());
                s.len() <= SENDERS
            };
            if first {
                // The first senders are held until every other read is
                // queued (or was taken into their frames).
                let start = std::time::Instant::now();
                while sizes.lock().iter().sum::<usize>() + g.state.lock().queue.len() < threads {
                    assert!(start.elapsed().as_secs() < 30, "reads never queued");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
            out.fetch_sub(1, Ordering::SeqCst);
            calls
                .iter()
                .map(|c| Ok(Reply(Ok(tablet(c).to_le_bytes().to_vec()))))
                .collect()
        };
        std::thread::scope(|s| {
            for t in 0..threads as u64 {
                let (g, send) = (&g, &send);
                s.spawn(move || {
                    let r = g.run(read(t), 64, send).unwrap();
                    assert_eq!(r.0.unwrap(), t.to_le_bytes().to_vec());
                });
            }
        });
        let sizes = sizes.lock().clone();
        assert_eq!(sizes.iter().sum::<usize>(), threads, "{sizes:?}");
        assert!(
            sizes.iter().any(|&n| n > 1),
            "the queued reads went out together: {sizes:?}"
        );
        assert!(most.load(Ordering::SeqCst) <= SENDERS);
        let st = g.state.lock();
        assert_eq!(
            (st.sending, st.queue.len()),
            (0, 0),
            "all turns handed back"
        );
    }

    /// A sender that fails (its send panics) still answers the reads it
    /// took and hands the turn on: nobody waits forever.
    #[test]
    fn a_failed_sender_answers_what_it_took() {
        let g = Gather::default();
        let calls = AtomicUsize::new(0);
        let send = |c: Vec<Call>| -> Vec<Result<Reply, Status>> {
            if calls.fetch_add(1, Ordering::SeqCst) % 2 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
                panic!("a sender dies");
            }
            c.iter().map(|_| Ok(Reply(Ok(Vec::new())))).collect()
        };
        std::thread::scope(|s| {
            for t in 0..6 {
                let (g, send) = (&g, &send);
                s.spawn(move || {
                    for i in 0..20 {
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            g.run(read(t * 100 + i), 64, send)
                        }));
                        // Answered one way or the other.
                        if let Ok(r) = r {
                            let _ = r;
                        }
                    }
                });
            }
        });
        let st = g.state.lock();
        assert_eq!(
            (st.sending, st.queue.len()),
            (0, 0),
            "all turns handed back"
        );
    }
}
