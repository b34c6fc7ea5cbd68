//! The read-only files of `.bigtable/`.

use crate::core::Fs;
use crate::node::StatusFile;
use std::fmt::Write;
use std::sync::atomic::Ordering;

impl Fs {
    /// The current text of a status file.
    pub fn status_content(&self, f: StatusFile) -> Vec<u8> {
        let mut out = String::new();
        match f {
            StatusFile::Status => {
                for l in self.store.status() {
                    let _ = writeln!(out, "{l}");
                }
            }
            StatusFile::Tables => {
                let _ = writeln!(out, "# table families tablets owner group mode");
                for t in self.store.list_tables() {
                    let (fams, owner, group, mode) = match self.store.schema(&t) {
                        Ok(s) => (s.families.len(), s.owner, s.group, s.mode),
                        Err(_) => continue,
                    };
                    let tablets = self.store.tablets(&t).map(|v| v.len()).unwrap_or(0);
                    let _ = writeln!(out, "{t} {fams} {tablets} {owner} {group} {mode:04o}");
                }
            }
            StatusFile::Tablets => {
                let _ = writeln!(
                    out,
                    "# table id start end memtable_bytes sstable_bytes sstables"
                );
                for t in self.store.list_tables() {
                    for tab in self.store.tablets(&t).unwrap_or_default() {
                        let key = |k: &[u8]| {
                            String::from_utf8_lossy(&crate::names::encode_field(k)).into_owned()
                        };
                        let _ = writeln!(
                            out,
                            "{} {} {} {} {} {} {}",
                            tab.table,
                            tab.id,
                            key(&tab.start),
                            tab.end.as_deref().map_or("-".to_string(), key),
                            tab.memtable_bytes,
                            tab.sstable_bytes,
                            tab.sstables
                        );
                    }
                }
            }
            StatusFile::Stats => {
                let s = &self.stats;
                let rows = [
                    ("lookups", s.lookups.load(Ordering::Relaxed)),
                    ("getattrs", s.getattrs.load(Ordering::Relaxed)),
                    ("reads", s.reads.load(Ordering::Relaxed)),
                    ("read_bytes", s.read_bytes.load(Ordering::Relaxed)),
                    ("writes", s.writes.load(Ordering::Relaxed)),
                    ("write_bytes", s.write_bytes.load(Ordering::Relaxed)),
                    ("commits", s.commits.load(Ordering::Relaxed)),
                    ("batches", s.batches.load(Ordering::Relaxed)),
                    ("batch_rows", s.batch_rows.load(Ordering::Relaxed)),
                    ("scans", s.scans.load(Ordering::Relaxed)),
                    ("readdirs", s.readdirs.load(Ordering::Relaxed)),
                    ("errors", s.errors.load(Ordering::Relaxed)),
                    ("invalidations", self.inval.sent()),
                    ("inodes", self.inodes.len() as u64),
                    ("open_handles", self.handles.len() as u64),
                    ("pending_dirs", self.pending.len() as u64),
                ];
                for (k, v) in rows {
                    let _ = writeln!(out, "{k} {v}");
                }
            }
            StatusFile::Mount => {
                let o = &self.opts;
                let _ = writeln!(out, "options {}", o.description);
                let _ = writeln!(out, "attr_timeout {:?}", o.attr_timeout);
                let _ = writeln!(out, "entry_timeout {:?}", o.entry_timeout);
                let _ = writeln!(out, "sync {}", o.sync_writes);
                let _ = writeln!(out, "max_value_size {}", o.max_value_size);
            }
        }
        out.into_bytes()
    }

    /// FUSE `statfs`: the data directory's space, in 4 KiB blocks.
    pub fn statfs(&self) -> Statfs {
        let mut s = Statfs {
            blocks: 1 << 30,
            bfree: 1 << 30,
            bavail: 1 << 30,
            files: 1 << 40,
            ffree: 1 << 40,
            bsize: 4096,
            namelen: crate::names::NAME_MAX as u32,
            frsize: 4096,
        };
        if let Some(p) = &self.opts.statfs_path {
            if let Ok(v) = nix::sys::statvfs::statvfs(p.as_path()) {
                let frsize = v.fragment_size().max(1);
                let scale = |n: u64| n.saturating_mul(frsize) / 4096;
                s.blocks = scale(v.blocks());
                s.bfree = scale(v.blocks_free());
                s.bavail = scale(v.blocks_available());
            }
        }
        s
    }
}

/// What `statfs` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}
