//! The commit log's files: the numbered files of its directory with the
//! highest sequence number each may hold, and per lane what was written
//! unsynced (a sync must cover it). Rolling, writing and syncing one lane's
//! current file happen here, whoever calls them (the lane's thread, or an
//! inline append).

use super::CommitLogOptions;
use crate::key::SeqNo;
use crate::log::log_file_name;
use crate::log::writer::LogWriter;
use crate::{Error, Result};
use gfs::FileStore;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) struct FileInfo {
    /// Highest sequence number that may be in the file; `None` for a file of
    /// an earlier run not scanned yet.
    pub(super) max_seq: Option<SeqNo>,
    /// The lane whose current file this is.
    pub(super) lane: Option<usize>,
}

pub(super) struct Shared {
    pub(super) store: Arc<dyn FileStore>,
    pub(super) dir: String,
    pub(super) opts: CommitLogOptions,
    pub(super) files: Mutex<Files>,
    pub(super) rolls: AtomicU64,
    pub(super) background_syncs: AtomicU64,
    /// Per lane: the batches written to it since its last successful sync
    /// (to its current file or, after a roll whose sync failed, an earlier
    /// one). A sync acknowledges every record before it, so before a lane
    /// syncs, what the other lane or an earlier file holds unsynced is
    /// written again into its file, where the sync covers it.
    pub(super) unsynced: [Mutex<Vec<Batch>>; 2],
}

/// Encoded records written together, their highest sequence number, and
/// the number of the file they went to.
pub(super) type Batch = (Arc<Vec<Vec<u8>>>, SeqNo, u64);

pub(super) struct Files {
    pub(super) map: BTreeMap<u64, FileInfo>,
    pub(super) next_number: u64,
}

impl Shared {
    pub(super) fn name(&self, number: u64) -> String {
        log_file_name(&self.dir, number)
    }

    /// Creates the next numbered file.
    pub(super) fn create_file(&self) -> Result<(u64, LogWriter)> {
        let number = {
            let mut f = self.files.lock();
            let n = f.next_number;
            f.next_number += 1;
            n
        };
        let name = self.name(number);
        let file = self.store.create_log(&name)?;
        Ok((number, LogWriter::new(file, name)))
    }

    /// Makes `number` the current file of `lane`, retiring `old`.
    pub(super) fn install(&self, lane: usize, number: u64, old: Option<u64>) {
        let mut f = self.files.lock();
        f.map.insert(
            number,
            FileInfo {
                max_seq: Some(0),
                lane: Some(lane),
            },
        );
        if let Some(info) = old.and_then(|o| f.map.get_mut(&o)) {
            info.lane = None;
        }
    }

    pub(super) fn note_seq(&self, number: u64, seq: SeqNo) {
        if let Some(info) = self.files.lock().map.get_mut(&number) {
            info.max_seq = Some(info.max_seq.unwrap_or(0).max(seq));
        }
    }
    /// Starts a new file for `lane`. The old one is synced first (best
    /// effort: only unsynced appends are at stake) so that a machine crash
    /// cannot keep later files while losing the end of an earlier one.
    pub(super) fn roll(&self, lane: usize, cur: &mut Option<(u64, LogWriter)>) -> Result<()> {
        if let Some((_, w)) = cur.as_mut() {
            let synced = !w.failed()
                && match w.sync() {
                    Ok(()) => true,
                    Err(e) => {
                        log::warn!("{}: sync before roll failed: {e}", w.name());
                        false
                    }
                };
            if synced {
                self.unsynced[lane].lock().clear();
            }
        }
        let (number, w) = self.create_file()?;
        let old = cur.replace((number, w)).map(|(n, _)| n);
        self.install(lane, number, old);
        self.rolls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn write(
        &self,
        lane: usize,
        cur: &mut Option<(u64, LogWriter)>,
        payloads: &Arc<Vec<Vec<u8>>>,
        max_seq: SeqNo,
        sync: bool,
    ) -> Result<()> {
        if cur.as_ref().is_none_or(|(_, w)| w.failed()) {
            self.roll(lane, cur)?;
        }
        let (number, w) = cur
            .as_mut()
            .ok_or_else(|| Error::corruption("commit log lane has no file"))?;
        if sync {
            self.cover_unsynced(lane, *number, w)?;
        }
        // Before the write: deletion must account for bytes that may land.
        self.note_seq(*number, max_seq);
        w.add_records(payloads, sync)?;
        let mut unsynced = self.unsynced[lane].lock();
        if sync {
            unsynced.clear();
        } else if !payloads.is_empty() {
            unsynced.push((Arc::clone(payloads), max_seq, *number));
        }
        Ok(())
    }

    /// Before `lane` syncs file `number`: writes into it what the other
    /// lane, or an earlier file of this lane, holds unsynced. Unsynced
    /// appends never pay for this; a sync after a lane switch or a failed
    /// roll does, once.
    fn cover_unsynced(&self, lane: usize, number: u64, w: &mut LogWriter) -> Result<()> {
        let mut todo: Vec<Batch> = self.unsynced[1 - lane].lock().clone();
        todo.extend(
            self.unsynced[lane]
                .lock()
                .iter()
                .filter(|b| b.2 != number)
                .cloned(),
        );
        if todo.is_empty() {
            return Ok(());
        }
        todo.sort_by_key(|b| b.1);
        let high = todo.iter().map(|b| b.1).max().unwrap_or(0);
        self.note_seq(number, high);
        let all: Vec<Vec<u8>> = todo.iter().flat_map(|b| b.0.iter().cloned()).collect();
        w.add_records(&all, false)?;
        // Once this lane's sync succeeds they are durable: the other lane
        // need not copy them again.
        let copied = |b: &Batch| todo.iter().any(|t| Arc::ptr_eq(&t.0, &b.0));
        self.unsynced[1 - lane].lock().retain(|b| !copied(b));
        Ok(())
    }

    /// What the lane's thread must do after a write, off the caller's path:
    /// replace a failed or full file, or sync one with much unsynced.
    pub(super) fn chore(&self, cur: &Option<(u64, LogWriter)>) -> Option<Chore> {
        let (_, w) = cur.as_ref()?;
        if w.failed() || w.len() >= self.opts.roll_size {
            Some(Chore::Roll)
        } else if w.unsynced_len() >= self.opts.sync_bytes {
            Some(Chore::Sync)
        } else {
            None
        }
    }

    /// Syncs the lane's current file; what it held unsynced is then durable
    /// and no longer kept.
    pub(super) fn sync_current(
        &self,
        lane: usize,
        cur: &mut Option<(u64, LogWriter)>,
    ) -> Result<()> {
        if let Some((number, w)) = cur.as_mut() {
            if !w.failed() {
                w.sync()?;
                let number = *number;
                self.unsynced[lane].lock().retain(|b| b.2 != number);
            }
        }
        Ok(())
    }
}

/// Work a lane's thread does after a write (see [`Shared::chore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chore {
    Roll,
    Sync,
}
