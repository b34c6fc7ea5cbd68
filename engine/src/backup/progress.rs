//! Copies under way and lately finished, with how far each got: the
//! mount's `.bigtable/backups` and the gRPC operations read them.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Finished copies kept for their readers.
const KEEP_FINISHED: usize = 32;

/// What a copy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// A snapshot copied out to a backup store.
    Backup,
    /// A backup copied from one backup store to another.
    Copy,
    /// A backup copied back into a table.
    Restore,
}

/// Where a copy is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Copying.
    Running,
    /// Every file copied and the backup (or the table) there.
    Done,
    /// Stopped by this error; nothing listed as made.
    Failed(String),
}

/// One copy.
#[derive(Debug)]
pub struct Job {
    /// What it does.
    pub kind: JobKind,
    /// The backup store it copies to (from, for a restore).
    pub store: String,
    /// The backup's table.
    pub table: String,
    /// The backup's name.
    pub name: String,
    /// When it started (µs since the epoch).
    pub started_micros: u64,
    /// Bytes of the files it copies.
    pub bytes_total: AtomicU64,
    /// Bytes copied or found already there.
    pub bytes_done: AtomicU64,
    /// Of those, bytes found already there (not copied again).
    pub bytes_skipped: AtomicU64,
    /// Files it copies.
    pub files_total: AtomicU64,
    /// Files copied or found there.
    pub files_done: AtomicU64,
    /// Where it is.
    pub state: Mutex<JobState>,
    /// When it ended (µs since the epoch; 0 while running).
    pub ended_micros: AtomicU64,
}

impl Job {
    /// Percent done, 0-100.
    pub fn percent(&self) -> u32 {
        if *self.state.lock() == JobState::Done {
            return 100;
        }
        let total = self.bytes_total.load(Ordering::Relaxed);
        let done = self.bytes_done.load(Ordering::Relaxed);
        (done.min(total) * 100)
            .checked_div(total)
            .map_or(0, |p| p.min(99) as u32)
    }
}

/// The copies of one handle.
#[derive(Default)]
pub struct Jobs {
    jobs: Mutex<Vec<Arc<Job>>>,
}

impl Jobs {
    /// Records a copy starting.
    pub fn start(&self, kind: JobKind, store: &str, table: &str, name: &str) -> Arc<Job> {
        let job = Arc::new(Job {
            kind,
            store: store.to_string(),
            table: table.to_string(),
            name: name.to_string(),
            started_micros: crate::now_micros(),
            bytes_total: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            bytes_skipped: AtomicU64::new(0),
            files_total: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
            state: Mutex::new(JobState::Running),
            ended_micros: AtomicU64::new(0),
        });
        let mut jobs = self.jobs.lock();
        jobs.push(job.clone());
        // Drop the oldest finished ones beyond the few kept.
        let finished = jobs
            .iter()
            .filter(|j| *j.state.lock() != JobState::Running)
            .count();
        let mut extra = finished.saturating_sub(KEEP_FINISHED);
        jobs.retain(|j| {
            if extra > 0 && *j.state.lock() != JobState::Running {
                extra -= 1;
                false
            } else {
                true
            }
        });
        job
    }

    /// Every copy kept, oldest first.
    pub fn all(&self) -> Vec<Arc<Job>> {
        self.jobs.lock().clone()
    }
}

/// Marks `job` finished with `r`'s outcome.
pub fn finish<T>(job: &Job, r: &crate::Result<T>) {
    *job.state.lock() = match r {
        Ok(_) => JobState::Done,
        Err(e) => JobState::Failed(e.to_string()),
    };
    job.ended_micros
        .store(crate::now_micros(), Ordering::Relaxed);
}
