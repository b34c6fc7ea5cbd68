//! Durable state of a cell in one local directory: a snapshot plus the log of
//! records after it. Every record carries a sequence number so that a log left
//! over from before the latest snapshot (a crash between the two renames) is
//! skipped on replay instead of applied twice.
//!
//! Files: `LOCK` (held while open), `snapshot`, `wal`, and `*.tmp` while writing.

use std::io;
use std::sync::Arc;

use crate::codec::{Reader, Writer};
use crate::disk::Disk;
use crate::error::{Error, Result};
use crate::namespace::{Meta, Namespace};
use crate::record::Record;
use crate::snapshot;
use crate::wal::Wal;

pub struct Store {
    disk: Arc<dyn Disk>,
    wal: Wal,
    /// Sequence number of the last durable record.
    seq: u64,
    /// Sequence number the current snapshot covers.
    snapshot_seq: u64,
    snapshot_after_bytes: u64,
    snapshots_written: u64,
    /// Set when a failed write left the log in an unknown state: from then on
    /// every mutation fails rather than risk acknowledging something lost.
    poisoned: Option<String>,
}

/// What recovery found, for the log and status lines.
#[derive(Clone, Debug, Default)]
pub struct RecoveryInfo {
    pub snapshot_seq: u64,
    pub replayed: u64,
    pub skipped: u64,
}

impl Store {
    /// Opens or creates the cell on `disk` and recovers the namespace. A new
    /// cell starts with a root directory carrying `root`.
    pub fn open(
        disk: Arc<dyn Disk>,
        root: Meta,
        snapshot_after_bytes: u64,
    ) -> Result<(Store, Namespace, RecoveryInfo)> {
        for tmp in ["snapshot.tmp", "wal.tmp"] {
            // Best effort: a leftover temporary file is never read.
            let _ = disk.remove(tmp);
        }
        let snap = snapshot::read(&*disk, "snapshot")?;
        let (wal, payloads) = Wal::open(disk.clone(), "wal")?;
        let mut info = RecoveryInfo::default();
        let fresh = snap.is_none();
        let (snapshot_seq, mut ns) = match snap {
            Some(s) => s,
            None if payloads.is_empty() => (0, Namespace::with_root(root)),
            None => {
                return Err(Error::corruption(format!(
                    "{}: log has {} records but there is no snapshot",
                    disk.describe(),
                    payloads.len()
                )))
            }
        };
        info.snapshot_seq = snapshot_seq;
        let mut seq = snapshot_seq;
        for payload in &payloads {
            let mut r = Reader::new(payload);
            let rseq = r.u64()?;
            let rec = Record::decode(&mut r)?;
            if !r.is_empty() {
                // As a snapshot's: bytes past the last field are damage.
                return Err(Error::corruption(format!(
                    "{}: log record {rseq} has trailing bytes",
                    disk.describe()
                )));
            }
            if rseq <= snapshot_seq {
                info.skipped += 1;
                continue;
            }
            if rseq != seq + 1 {
                return Err(Error::corruption(format!(
                    "log sequence jumps from {seq} to {rseq}"
                )));
            }
            ns.apply(&rec)
                .map_err(|e| Error::corruption(format!("replaying record {rseq}: {e}")))?;
            seq = rseq;
            info.replayed += 1;
        }
        let mut store = Store {
            disk,
            wal,
            seq,
            snapshot_seq,
            snapshot_after_bytes,
            snapshots_written: 0,
            poisoned: None,
        };
        // A new cell gets its snapshot at once, so that the root's attributes
        // are durable and a log never exists without a snapshot.
        if fresh || info.skipped > 0 {
            store.checkpoint(&ns)?;
        }
        Ok((store, ns, info))
    }

    /// Makes `rec` durable. Only after this returns may it be applied and
    /// acknowledged.
    pub fn append(&mut self, rec: &Record) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::io(
                self.disk.describe(),
                io::Error::other(format!("cell is read-only after a write failure: {why}")),
            ));
        }
        let mut w = Writer::default();
        w.u64(self.seq + 1);
        rec.encode(&mut w);
        let res = self.wal.append(&w.buf);
        if let Some(why) = self.wal.broken() {
            self.poisoned = Some(why.to_string());
        }
        res?;
        self.seq += 1;
        Ok(())
    }

    /// Marks the store unwritable (an applied record did not fit the tree).
    pub fn poison(&mut self, why: String) {
        self.poisoned = Some(why);
    }

    /// Writes a snapshot if the log has grown past the threshold.
    pub fn maybe_checkpoint(&mut self, ns: &Namespace) -> Result<()> {
        if self.wal.len() >= self.snapshot_after_bytes {
            self.checkpoint(ns)
        } else {
            Ok(())
        }
    }

    /// Snapshot, then start an empty log. A crash between the two leaves the
    /// old log, whose records the snapshot's sequence number makes replay skip.
    pub fn checkpoint(&mut self, ns: &Namespace) -> Result<()> {
        snapshot::write(&*self.disk, "snapshot", ns, self.seq)?;
        self.snapshot_seq = self.seq;
        self.snapshots_written += 1;
        match Wal::create_empty(self.disk.clone(), "wal") {
            Ok(wal) => {
                self.wal = wal;
                Ok(())
            }
            Err(e) => {
                // The old log handle may now point at an unlinked file.
                self.poisoned = Some(e.to_string());
                Err(e)
            }
        }
    }

    pub fn status(&self) -> Vec<String> {
        vec![
            format!("dir {}", self.disk.describe()),
            format!("log_seq {}", self.seq),
            format!("snapshot_seq {}", self.snapshot_seq),
            format!("log_bytes {}", self.wal.len()),
            format!("snapshots_written {}", self.snapshots_written),
            format!(
                "writable {}",
                match &self.poisoned {
                    None => "yes".to_string(),
                    Some(why) => format!("no ({why})"),
                }
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::LocalDisk;
    use crate::record::NewNode;
    use crate::types::{NodeKind, ROOT_ID};
    use std::fs;
    use std::path::Path;

    fn open(dir: &Path) -> Result<(Store, Namespace, RecoveryInfo)> {
        let disk = LocalDisk::open(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        Store::open(Arc::new(disk), root(), 1 << 20)
    }

    fn root() -> Meta {
        Meta::test_root(5000)
    }

    fn create(id: u64, name: &str) -> Record {
        Record::Create(NewNode {
            id,
            parent: ROOT_ID,
            name: name.into(),
            kind: NodeKind::File,
            uid: 0,
            gid: 0,
            mode: 0o644,
            ephemeral: false,
            lock_delay_ms: 0,
            lock_gen: id,
            time_ns: 3,
        })
    }

    #[test]
    fn replays_log_after_snapshot_and_skips_stale_log() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut st, mut ns, _) = open(dir.path()).unwrap();
            for (i, name) in ["a", "b"].iter().enumerate() {
                let rec = create(2 + i as u64, name);
                st.append(&rec).unwrap();
                ns.apply(&rec).unwrap();
            }
        }
        // Simulate a crash after the snapshot rename but before the log reset:
        // keep a copy of the old log and put it back after a checkpoint.
        let old_wal = fs::read(dir.path().join("wal")).unwrap();
        {
            let (mut st, ns, info) = open(dir.path()).unwrap();
            assert_eq!(info.replayed, 2);
            assert_eq!(ns.len(), 3);
            st.checkpoint(&ns).unwrap();
        }
        fs::write(dir.path().join("wal"), &old_wal).unwrap();
        let (_, ns, info) = open(dir.path()).unwrap();
        assert_eq!(info.skipped, 2);
        assert_eq!(info.replayed, 0);
        assert_eq!(ns.len(), 3);
    }

    #[test]
    fn second_open_of_same_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = open(dir.path()).unwrap();
        assert!(matches!(open(dir.path()), Err(Error::Io { .. })));
    }

    #[test]
    fn a_log_record_with_trailing_bytes_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut st, _, _) = open(dir.path()).unwrap();
            st.append(&create(2, "a")).unwrap();
        }
        let mut w = Writer::default();
        w.u64(2);
        create(3, "b").encode(&mut w);
        w.u8(0);
        let mut log = fs::read(dir.path().join("wal")).unwrap();
        log.extend(crate::wal::frame(&w.buf));
        fs::write(dir.path().join("wal"), log).unwrap();
        let err = open(dir.path()).err().unwrap();
        assert!(matches!(err, Error::Corruption(_)), "{err}");
        assert!(
            err.to_string().contains("record 2 has trailing bytes"),
            "{err}"
        );
    }

    #[test]
    fn log_without_snapshot_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut st, _, _) = open(dir.path()).unwrap();
            st.append(&create(2, "a")).unwrap();
        }
        fs::remove_file(dir.path().join("snapshot")).unwrap();
        assert!(matches!(open(dir.path()), Err(Error::Corruption(_))));
    }
}
