//! What a tablet server reports: one `key=value` line of totals, and one
//! line per tablet.

use super::{TabletServer, DEAD, SERVING};
use crate::options::TabletInfo;
use crate::protocol::ServerReport;
use std::sync::atomic::Ordering;

impl TabletServer {
    pub fn report(&self) -> ServerReport {
        let c = &self.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let tablets = self.served_tablets();
        let mut memtable_bytes = 0;
        let mut sstable_bytes = 0;
        for s in &tablets {
            let v = s.tablet.version();
            memtable_bytes += (v.mem.approximate_bytes()
                + v.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>())
                as u64;
            sstable_bytes += s.tablet.sstable_bytes(&v);
        }
        ServerReport {
            name: self.name.clone(),
            state: match self.state.load(Ordering::Acquire) {
                SERVING => "serving",
                DEAD => "dead",
                _ => "stopped",
            }
            .to_string(),
            tablets: tablets.len(),
            memtable_bytes,
            sstable_bytes,
            requests: tablets.iter().map(|s| s.requests.get()).sum(),
            writes: c.writes.get(),
            reads: c.reads.get(),
            scans: c.scans.get(),
            minor_compactions: get(&c.flushes),
            merging_compactions: get(&c.merges),
            major_compactions: get(&c.majors),
            splits: get(&c.splits),
            stalls: get(&c.stalls),
            loads: get(&c.loads),
            unloads: get(&c.unloads),
            recovery_bytes_read: get(&c.recovery_bytes),
            recovered_entries: get(&c.recovered_entries),
            last_seq: self.core.visible_seq(),
            clock_raised: get(&c.clock_raised),
            clock_raise_max_us: get(&c.clock_raise_max_us),
            activity: self
                .activity
                .lock()
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect(),
        }
    }

    /// The served tablets with their sizes.
    pub fn tablet_infos(&self) -> Vec<TabletInfo> {
        self.served_tablets()
            .iter()
            .map(|s| {
                let t = &s.tablet;
                let v = t.version();
                TabletInfo {
                    id: t.id,
                    table: s.table.name.clone(),
                    start: t.start.clone(),
                    end: t.end.clone(),
                    memtable_bytes: (v.mem.approximate_bytes()
                        + v.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>())
                        as u64,
                    sstable_bytes: t.sstable_bytes(&v),
                    sstables: v.files.len(),
                    server: self.name.clone(),
                }
            })
            .collect()
    }

    /// Requests served by tablet `id` since it was loaded.
    pub fn tablet_requests(&self, id: u64) -> u64 {
        self.tablets
            .snapshot()
            .get(&id)
            .map_or(0, |s| s.requests.get())
    }

    /// Group-commit figures of this server's log.
    pub fn group_commit_stats(&self) -> crate::group_commit::GroupCommitStats {
        self.commit.stats()
    }

    /// Group-commit and log figures as `key=value` words.
    pub fn commit_line(&self) -> String {
        let g = self.commit.stats();
        let l = self.core.log().stats();
        format!(
            "server={} {} {}",
            self.name,
            crate::status::kv(&g, "group_commit_"),
            crate::status::kv(&l, "log_")
        )
    }
}
