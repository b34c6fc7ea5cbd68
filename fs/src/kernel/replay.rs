//! inotify on other daemons' writes (docs/coherence.md, "inotify"). FUSE
//! invalidations raise no fsnotify event, so after another daemon wrote
//! rows this mount's kernel holds, the daemon replays the write through its
//! own mount from a thread of its own: each cell of those rows that the
//! kernel knows, or that a family directory it knows lists, is opened for
//! appending and closed without a write. The mount writes and commits
//! nothing for that; a watcher sees `IN_OPEN` and `IN_CLOSE_WRITE` on the
//! cell. Best effort: a full queue drops replays (counted), never
//! invalidations, which are sent before this runs.

use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Rows waiting to be replayed; more are dropped.
const QUEUE: usize = 1024;
/// Cells replayed per family directory listed.
const MAX_LISTED: usize = 256;

/// One row to replay: cells the kernel knows, and family directories it
/// knows (their cells are listed first), relative to the mount point.
#[derive(Default)]
pub struct RowReplay {
    pub cells: Vec<PathBuf>,
    pub families: Vec<PathBuf>,
}

/// The replaying thread's queue.
#[derive(Default)]
pub struct Replayer {
    tx: OnceLock<Sender<RowReplay>>,
    dropped: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
}

impl Replayer {
    /// Starts replaying through the mount at `mountpoint`.
    pub fn start(&self, mountpoint: PathBuf) {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        if self.tx.set(tx).is_err() {
            return;
        }
        let done = self.done.clone();
        let spawned = std::thread::Builder::new()
            .name("bt-replay".into())
            .spawn(move || run(&mountpoint, rx, &done));
        if let Err(e) = spawned {
            log::warn!("no inotify events for other daemons' writes: {e}");
        }
    }

    /// Queues a row's replay (dropped, and counted, when the queue is full).
    pub fn send(&self, r: RowReplay) {
        if r.cells.is_empty() && r.families.is_empty() {
            return;
        }
        if let Some(tx) = self.tx.get() {
            if let Err(TrySendError::Full(_)) = tx.try_send(r) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Cells replayed, and rows dropped for a full queue.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

fn run(mnt: &std::path::Path, rx: Receiver<RowReplay>, done: &AtomicU64) {
    for r in rx {
        let mut cells: BTreeSet<PathBuf> = r.cells.iter().map(|c| mnt.join(c)).collect();
        for f in &r.families {
            let Ok(list) = std::fs::read_dir(mnt.join(f)) else {
                continue;
            };
            for e in list.flatten().take(MAX_LISTED) {
                let hidden = e.file_name().as_encoded_bytes().first() == Some(&b'.');
                if !hidden && e.file_type().is_ok_and(|t| t.is_file()) {
                    cells.insert(e.path());
                }
            }
        }
        for c in cells {
            // Opened to append and closed unwritten: nothing is committed.
            if std::fs::OpenOptions::new().append(true).open(&c).is_ok() {
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}
