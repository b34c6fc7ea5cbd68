//! The two lanes of the commit log (the paper's two log-writing threads,
//! section 6): each a thread, the channel to it, and its current file.
//! The thread writes the jobs handed to it, in order, then does what the
//! write left to do (a roll, a sync) off the caller's path; how the log
//! chooses between the lanes is in `commit_log.rs`.

use super::shared::{Chore, Shared};
use crate::key::SeqNo;
use crate::log::writer::LogWriter;
use crate::Result;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Records handed to a lane's thread, and where it reports the result.
struct Job {
    payloads: Arc<Vec<Vec<u8>>>,
    max_seq: SeqNo,
    sync: bool,
    done: Sender<Result<()>>,
}

/// A lane's current file, shared by its thread and by inline appends.
pub(super) type LaneFile = Arc<Mutex<Option<(u64, LogWriter)>>>;

/// One lane: the channel to its thread, the thread, and its current file.
pub(super) struct Lane {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    pub(super) file: LaneFile,
    /// Jobs handed to the thread and not yet written: an inline append may
    /// only go ahead of none, so each file stays in sequence order.
    queued: Arc<AtomicUsize>,
}

impl Lane {
    /// Starts lane `lane`: a fresh file and the thread writing into it.
    pub(super) fn start(shared: &Arc<Shared>, lane: usize) -> Result<Lane> {
        let (number, w) = shared.create_file()?;
        shared.install(lane, number, None);
        let (tx, rx) = unbounded();
        let s = Arc::clone(shared);
        let file: LaneFile = Arc::new(Mutex::new(Some((number, w))));
        let queued = Arc::new(AtomicUsize::new(0));
        let (f, q) = (Arc::clone(&file), Arc::clone(&queued));
        let thread = std::thread::Builder::new()
            .name(format!("commit-log-{lane}"))
            .spawn(move || run(s, lane, f, q, rx))
            .map_err(|e| gfs::Error::Io {
                name: shared.dir.clone(),
                source: e,
            })?;
        Ok(Lane {
            tx: Some(tx),
            thread: Some(thread),
            file,
            queued,
        })
    }

    /// Whether nothing handed to the thread is still unwritten.
    pub(super) fn idle(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    /// Hands a job to the thread; the receiver yields its result.
    pub(super) fn send(
        &self,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
        sync: bool,
    ) -> Receiver<Result<()>> {
        let (done, rx) = bounded(1);
        let job = Job {
            payloads: Arc::clone(payloads),
            max_seq,
            sync,
            done,
        };
        if let Some(tx) = &self.tx {
            self.queued.fetch_add(1, Ordering::AcqRel);
            // On failure the job (and its `done`) is dropped: the receiver
            // then reports a disconnect.
            let _ = tx.send(job);
        }
        rx
    }

    /// Closes the channel: the thread ends once its queued jobs are
    /// written, syncing its file on the way out.
    pub(super) fn close(&mut self) {
        self.tx = None;
    }

    /// Waits for the thread to end (after [`Lane::close`]).
    pub(super) fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread of one lane: writes jobs in order to its current file.
fn run(
    shared: Arc<Shared>,
    lane: usize,
    file: LaneFile,
    queued: Arc<AtomicUsize>,
    rx: Receiver<Job>,
) {
    for job in rx.iter() {
        let mut cur = file.lock();
        let res = shared.write(lane, &mut cur, &job.payloads, job.max_seq, job.sync);
        let chore = shared.chore(&cur);
        if chore.is_none() {
            queued.fetch_sub(1, Ordering::AcqRel);
        }
        // The caller may have stopped waiting (the other lane answered first).
        let _ = job.done.send(res);
        if let Some(chore) = chore {
            // Off the caller's path: the next append finds a fresh or synced
            // file. The lane counts as busy meanwhile (a sync may take a
            // while), so inline appends use the other lane.
            let done = match chore {
                Chore::Roll => shared.roll(lane, &mut cur),
                Chore::Sync => {
                    shared.background_syncs.fetch_add(1, Ordering::Relaxed);
                    shared.sync_current(lane, &mut cur)
                }
            };
            if let Err(e) = done {
                log::warn!(
                    "commit log {}: lane {lane}: {chore:?} failed: {e}",
                    shared.dir
                );
            }
            drop(cur);
            queued.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let mut cur = file.lock();
    if let Some((_, w)) = cur.as_mut() {
        if !w.failed() {
            if let Err(e) = w.sync() {
                log::warn!("{}: sync at close failed: {e}", w.name());
            }
        }
    }
}
