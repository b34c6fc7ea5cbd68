//! What a tablet server reports: one `key=value` line of totals, and one
//! line per tablet; the counters behind them and what its background
//! threads are doing.

use super::{TabletServer, DEAD, SERVING};
use crate::counter::Counter;
use crate::group_commit::GroupCommitStats;
use crate::options::TabletInfo;
use crate::protocol::{ServedTablet, ServerReport, TabletStatus};
use crate::tablet::TabletVersion;
use crate::Result;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) writes: Counter,
    pub(super) reads: Counter,
    pub(super) scans: Counter,
    pub(super) flushes: AtomicU64,
    pub(super) merges: AtomicU64,
    pub(super) majors: AtomicU64,
    /// Bytes of SSTables written by minor compactions, and by merging and
    /// major ones: with the log's bytes, what a write costs the store.
    pub(super) flushed_bytes: AtomicU64,
    pub(super) compacted_bytes: AtomicU64,
    pub(super) splits: AtomicU64,
    pub(super) stalls: AtomicU64,
    /// Memtables frozen early: for the memory budget, the log's length,
    /// their age (`pressure.rs`).
    pub(super) memory_freezes: AtomicU64,
    pub(super) log_freezes: AtomicU64,
    pub(super) age_freezes: AtomicU64,
    /// Bytes of a dead server's sorted log read while loading tablets.
    pub(super) recovery_bytes: AtomicU64,
    pub(super) recovered_entries: AtomicU64,
    pub(super) loads: AtomicU64,
    pub(super) unloads: AtomicU64,
    /// Loads that raised the clock to a tablet's newest timestamp, and the
    /// largest jump (µs): clock skew between servers being absorbed.
    pub(super) clock_raised: AtomicU64,
    pub(super) clock_raise_max_us: AtomicU64,
}

/// What the background threads are doing now, by job.
#[derive(Default)]
pub(super) struct Activity {
    jobs: Mutex<BTreeMap<String, String>>,
}

impl Activity {
    /// Job `key` is doing `what` (None: it is done).
    pub(super) fn set(&self, key: &str, what: Option<String>) {
        let mut a = self.jobs.lock();
        match what {
            Some(w) => {
                a.insert(key.to_string(), w);
            }
            None => {
                a.remove(key);
            }
        }
    }

    /// `job: what` lines, by job.
    fn lines(&self) -> Vec<String> {
        self.jobs
            .lock()
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect()
    }
}

impl TabletStatus for TabletServer {
    fn tablet_ids(&self) -> Result<Vec<u64>> {
        Ok(self.tablets.ids())
    }

    fn served(&self) -> Result<Vec<ServedTablet>> {
        Ok(self
            .served_tablets()
            .iter()
            .map(|x| {
                let t = &x.tablet;
                let v = t.version();
                ServedTablet {
                    id: t.id,
                    table_id: t.table_id,
                    start: t.start.clone(),
                    end: t.end.clone(),
                    bytes: t.sstable_bytes(&v) + v.mem.approximate_bytes() as u64,
                    requests: x.requests.get(),
                    clean: !t.has_foreign_files(&v),
                    files: v.files.iter().map(|f| f.meta.number).collect(),
                    traffic_bytes: x.load.bytes.get(),
                    load_split: x.load.split_row(&t.start, t.end.as_deref()),
                }
            })
            .collect())
    }

    fn files_in_flight(&self) -> Result<Vec<u64>> {
        let mut files: Vec<u64> = self.env.numbers.in_flight().into_iter().collect();
        files.extend(self.holds.pinned());
        Ok(files)
    }

    fn report(&self) -> Result<ServerReport> {
        let c = &self.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let tablets = self.served_tablets();
        let mut memtable_bytes = 0;
        let mut sstable_bytes = 0;
        for s in &tablets {
            let v = s.tablet.version();
            memtable_bytes += memtable_bytes_of(&v);
            sstable_bytes += s.tablet.sstable_bytes(&v);
        }
        Ok(ServerReport {
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
            log_bytes: self.core.log().stats().bytes,
            flushed_bytes: get(&c.flushed_bytes),
            compacted_bytes: get(&c.compacted_bytes),
            splits: get(&c.splits),
            stalls: get(&c.stalls),
            memory_flushes: get(&c.memory_freezes),
            log_flushes: get(&c.log_freezes),
            age_flushes: get(&c.age_freezes),
            loads: get(&c.loads),
            unloads: get(&c.unloads),
            recovery_bytes_read: get(&c.recovery_bytes),
            recovered_entries: get(&c.recovered_entries),
            last_seq: self.core.visible_seq(),
            clock_raised: get(&c.clock_raised),
            clock_raise_max_us: get(&c.clock_raise_max_us),
            activity: self.activity.lines(),
        })
    }

    /// The served tablets with their sizes.
    fn tablet_infos(&self) -> Result<Vec<TabletInfo>> {
        Ok(self
            .served_tablets()
            .iter()
            .map(|s| {
                let t = &s.tablet;
                let v = t.version();
                TabletInfo {
                    id: t.id,
                    table: s.table.name.clone(),
                    start: t.start.clone(),
                    end: t.end.clone(),
                    memtable_bytes: memtable_bytes_of(&v),
                    sstable_bytes: t.sstable_bytes(&v),
                    sstables: v.files.len(),
                    server: self.name.clone(),
                }
            })
            .collect())
    }

    /// Requests served by tablet `id` since it was loaded.
    fn tablet_requests(&self, id: u64) -> Result<u64> {
        Ok(self.tablets.requests(id))
    }

    /// Group-commit figures of this server's log.
    fn group_commit_stats(&self) -> Result<GroupCommitStats> {
        Ok(self.core.group_stats())
    }

    /// Group-commit and log figures as `key=value` words.
    fn commit_line(&self) -> Result<String> {
        let g = self.core.group_stats();
        let l = self.core.log().stats();
        Ok(format!(
            "server={} {} {}",
            self.name,
            crate::status::kv(&g, "group_commit_"),
            crate::status::kv(&l, "log_")
        ))
    }
}

/// Bytes in a tablet version's memtables, the frozen ones included.
fn memtable_bytes_of(v: &TabletVersion) -> u64 {
    (v.mem.approximate_bytes() + v.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>()) as u64
}
