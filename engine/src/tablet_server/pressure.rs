//! Memtables written out before they are full (paper §5.4: a minor
//! compaction "shrinks the memory usage of the tablet server, and it
//! reduces the amount of data that has to be read from the commit log
//! during recovery"). A memtable fills to `memtable_bytes` only if its
//! tablet is written enough; three things bound a server however its
//! writes spread over its tablets:
//!
//! - memory: past `memtable_budget` for all its memtables, the largest are
//!   frozen (RocksDB's write buffer manager rule: the active memtables
//!   above 7/8 of the budget, or all of them at the budget with the active
//!   ones at least half of it);
//! - the log: past `log_max_files` old files, the tablets whose unwritten
//!   entries keep the oldest ones are frozen, so those files can go;
//! - age: a memtable whose first entry is older than `memtable_max_age`.
//!
//! The background threads check before each job, and a writer wakes one
//! each time an eighth of the budget has been written since. Writers wait
//! (`commit.rs`, with a tablet's own limit on frozen memtables) while the
//! memtables pass twice the budget: the disk has fallen that far behind.

use super::commit::freeze;
use super::{Served, TabletServer};
use crate::Result;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the last check found, and one check at a time (every background
/// thread runs it).
#[derive(Default)]
pub(super) struct Pressure {
    checking: Mutex<()>,
    /// Bytes in the server's memtables at the last check, and the bytes
    /// committed by its start.
    total: AtomicU64,
    written: AtomicU64,
}

impl Pressure {
    /// Whether writers must wait: the memtables as the last check found
    /// them, plus everything committed since, pass twice the budget (the
    /// disk is that far behind; HBase blocks updates likewise). What was
    /// written out since counts until the next check, which every flush
    /// is followed by.
    pub(super) fn over_limit(&self, written_now: u64, budget: u64) -> bool {
        let since = written_now.saturating_sub(self.written.load(Ordering::Acquire));
        self.total.load(Ordering::Acquire).saturating_add(since) > budget.saturating_mul(2)
    }
}

/// Whether RocksDB's rule asks for a freeze: `active` bytes in memtables
/// taking writes, `frozen` in those waiting to be written out.
fn over_budget(active: u64, frozen: u64, budget: u64) -> bool {
    active > budget / 8 * 7 || (active + frozen >= budget && active >= budget / 2)
}

/// Which of the active memtables (their sizes) to freeze, largest first,
/// until the rule no longer asks for more.
fn to_freeze(sizes: &[u64], frozen: u64, budget: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] > 0).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
    let mut active: u64 = sizes.iter().sum();
    let mut frozen = frozen;
    let mut out = Vec::new();
    for i in order {
        if !over_budget(active, frozen, budget) {
            break;
        }
        active -= sizes[i];
        frozen += sizes[i];
        out.push(i);
    }
    out
}

/// Freezes what the budget, the log's length and the memtables' age ask
/// for (see the module comment). It never fails: the flushes it asks for
/// must run even when the store refuses a deletion.
pub(super) fn relieve(server: &TabletServer) {
    let Some(_one) = server.pressure.checking.try_lock() else {
        return;
    };
    let opts = &server.env.opts;
    let written = server.core.written();
    let tablets: Vec<Arc<Served>> = server
        .served_tablets()
        .into_iter()
        .filter(|s| !s.tablet.retired.load(Ordering::Acquire))
        .collect();
    let mut frozen_now = vec![false; tablets.len()];

    // Memory.
    let mut sizes = Vec::with_capacity(tablets.len());
    let mut frozen = 0u64;
    for s in &tablets {
        let v = s.tablet.version();
        // An empty memtable still holds its skiplist's head.
        sizes.push(match v.mem.is_empty() {
            true => 0,
            false => v.mem.approximate_bytes() as u64,
        });
        frozen += v
            .imm
            .iter()
            .map(|m| m.approximate_bytes() as u64)
            .sum::<u64>();
    }
    let total = sizes.iter().sum::<u64>() + frozen;
    let was_over = server
        .pressure
        .over_limit(server.core.written(), opts.memtable_budget);
    server.pressure.total.store(total, Ordering::Release);
    server.pressure.written.store(written, Ordering::Release);
    if was_over {
        server.stall.release();
    }
    for i in to_freeze(&sizes, frozen, opts.memtable_budget.max(1)) {
        freeze(server, &tablets[i].tablet);
        frozen_now[i] = true;
        server
            .counters
            .memory_freezes
            .fetch_add(1, Ordering::Relaxed);
    }

    // The log: entries up to `target` must be in SSTables for all but the
    // newest `log_max_files` old files to go.
    if let Some(target) = server.core.log().retention_target(opts.log_max_files) {
        // Files whose entries are all written out go at the next flush;
        // with none coming, now.
        if let Err(e) = delete_obsolete_logs(server) {
            log::warn!("{}: cannot delete old log files: {e}", server.name);
        }
        for (i, s) in tablets.iter().enumerate() {
            let v = s.tablet.version();
            // The active memtable holds entries above the newest frozen
            // one's seal (or above what was flushed, with none frozen).
            let below = v
                .imm
                .last()
                .map(|m| m.sealed())
                .unwrap_or(0)
                .max(s.tablet.flushed_seq.load(Ordering::Acquire));
            if !frozen_now[i] && !v.mem.is_empty() && below < target {
                freeze(server, &s.tablet);
                frozen_now[i] = true;
                server.counters.log_freezes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    // Age.
    if !opts.memtable_max_age.is_zero() {
        for (i, s) in tablets.iter().enumerate() {
            let old = s
                .tablet
                .version()
                .mem
                .age()
                .is_some_and(|a| a > opts.memtable_max_age);
            if !frozen_now[i] && old {
                freeze(server, &s.tablet);
                server.counters.age_freezes.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Deletes the log files whose entries are all in SSTables (after every
/// minor compaction, and when the log is long).
pub(super) fn delete_obsolete_logs(server: &TabletServer) -> Result<()> {
    // Entries up to `visible` are all in memtables; a tablet with unflushed
    // data still needs the log from its redo point on.
    let visible = server.core.visible_seq();
    let mut min_live = visible;
    for s in server.served_tablets() {
        let t = &s.tablet;
        let v = t.version();
        if t.has_unflushed(&v) {
            min_live = min_live.min(t.flushed_seq.load(Ordering::Acquire));
        }
    }
    server.core.log().delete_obsolete(min_live)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn nothing_is_frozen_under_the_budget() {
        assert!(to_freeze(&[10 * MB, 20 * MB, 30 * MB], 0, 100 * MB).is_empty());
        // At the budget with most of it frozen: the flushes will free it.
        assert!(to_freeze(&[10 * MB, 20 * MB], 80 * MB, 100 * MB).is_empty());
    }

    #[test]
    fn the_largest_are_frozen_until_the_rule_is_met() {
        // 120 active: past 7/8; freezing 50 leaves 70 active and 50
        // frozen, at the budget with active ≥ half: the 40 goes too.
        assert_eq!(
            to_freeze(&[30 * MB, 50 * MB, 40 * MB], 0, 100 * MB),
            vec![1, 2]
        );
        // 90 active: past 7/8 (87.5); freezing 50 leaves 40 active.
        assert_eq!(to_freeze(&[50 * MB, 40 * MB], 0, 100 * MB), vec![0]);
    }

    #[test]
    fn many_small_memtables_are_frozen_too() {
        let sizes = vec![MB; 200];
        let got = to_freeze(&sizes, 0, 100 * MB);
        // Down to half the budget active.
        assert_eq!(got.len(), 200 - 49);
        assert!(!over_budget(49 * MB, 151 * MB, 100 * MB));
    }

    #[test]
    fn empty_memtables_are_never_frozen() {
        assert!(to_freeze(&[0, 0, 0], 500 * MB, 100 * MB).is_empty());
    }
}
