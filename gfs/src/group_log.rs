//! A small group-commit logger over one [`WritableFile`], as the commit log
//! does it: what the benchmarks (`bigtable-bench gfs`, this crate's cluster
//! bench) append through.

use crate::{Error, Result, WritableFile};
use parking_lot::{Condvar, Mutex};

/// Appends with group commit: whoever finds the file free becomes the leader
/// and writes every record queued so far with one `append_sync`.
pub struct GroupLog {
    state: Mutex<LogState>,
    done: Condvar,
}

struct LogState {
    /// `None` while a leader is writing.
    file: Option<Box<dyn WritableFile>>,
    queue: Vec<Vec<u8>>,
    /// Tickets: records queued so far, and how many of them are durable.
    queued: u64,
    durable: u64,
    failed: Option<String>,
    batches: u64,
}

impl GroupLog {
    /// A logger appending to `file`.
    pub fn new(file: Box<dyn WritableFile>) -> GroupLog {
        GroupLog {
            state: Mutex::new(LogState {
                file: Some(file),
                queue: Vec::new(),
                queued: 0,
                durable: 0,
                failed: None,
                batches: 0,
            }),
            done: Condvar::new(),
        }
    }

    /// Appends `record`; returns once it is on stable storage. After a failed
    /// write every append fails.
    pub fn append(&self, record: Vec<u8>) -> Result<()> {
        let mut st = self.state.lock();
        st.queue.push(record);
        st.queued += 1;
        let ticket = st.queued;
        loop {
            if st.durable >= ticket {
                return Ok(());
            }
            if let Some(e) = &st.failed {
                return Err(Error::io(
                    "group log",
                    std::io::Error::other(format!("group commit failed: {e}")),
                ));
            }
            if let Some(mut file) = st.file.take() {
                let batch = std::mem::take(&mut st.queue);
                let upto = st.queued;
                drop(st);
                let bufs: Vec<&[u8]> = batch.iter().map(Vec::as_slice).collect();
                let written = file.append_sync(&bufs);
                st = self.state.lock();
                st.file = Some(file);
                st.batches += 1;
                match written {
                    Ok(_) => st.durable = upto,
                    Err(e) => st.failed = Some(e.to_string()),
                }
                self.done.notify_all();
            } else {
                self.done.wait(&mut st);
            }
        }
    }

    /// Write + fdatasync submissions so far.
    pub fn batches(&self) -> u64 {
        self.state.lock().batches
    }
}
