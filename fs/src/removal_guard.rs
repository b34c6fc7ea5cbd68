//! The removal snapshot: the first removal by name inside a table (`rm` of
//! a cell or version, `rmdir` of a row, family or column directory) after
//! [`QUIET`] without one takes an expiring snapshot `removed-<µs>` of the
//! table before the removal is applied. `rm -r TABLE` empties the table
//! from the bottom up before its `rmdir` sends it to the trash; this
//! snapshot keeps what it held (docs/trash.md). It expires when the trash
//! would collect the table, and none is taken while the trash is off.

use crate::store::Store;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Removals closer together than this are one streak, one snapshot.
pub const QUIET: Duration = Duration::from_secs(60);
/// The prefix of a removal snapshot's name (then the µs it was taken).
pub const PREFIX: &str = "removed-";
/// Tables remembered at most; older streaks are forgotten beyond it.
const MAX_TABLES: usize = 4096;

/// A table's streak of removals in this mount.
struct Streak {
    /// Its last removal.
    last: Instant,
    /// The snapshot its first removal took.
    snapshot: String,
}

/// The streak of removals of each table, in this mount.
#[derive(Default)]
pub struct RemovalGuard {
    /// Held while a snapshot is taken, so no removal of the streak is
    /// applied before the snapshot is published.
    streaks: Mutex<HashMap<String, Streak>>,
}

impl RemovalGuard {
    /// Called before a removal inside `table` is applied: takes the
    /// removal snapshot if this removal starts a streak. A snapshot that
    /// cannot be taken is logged and the removal goes on (a daemon that
    /// serves no store takes none), to be tried again at the next one.
    pub fn before_removal(&self, store: &dyn Store, table: &str) {
        let period = store.trash_period();
        if period.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut streaks = self.streaks.lock();
        if let Some(s) = streaks.get_mut(table) {
            if now.duration_since(s.last) < QUIET {
                s.last = now;
                return;
            }
        }
        let taken = since_epoch();
        let name = format!("{PREFIX}{}", taken.as_micros());
        let expire = (taken + period).as_micros() as u64;
        match store.take_snapshot_expiring(table, &name, expire) {
            Ok(()) => {
                log::info!("took removal snapshot {name} of {table} (kept {period:?})");
                if streaks.len() >= MAX_TABLES {
                    streaks.retain(|_, s| now.duration_since(s.last) < QUIET);
                }
                let snapshot = name;
                streaks.insert(
                    table.to_string(),
                    Streak {
                        last: now,
                        snapshot,
                    },
                );
            }
            Err(e) => log::warn!("removal snapshot of {table} not taken: {e}"),
        }
    }

    /// Called when `table` was deleted by `rmdir`: the snapshot of the
    /// streak that emptied it (if one is under way) is kept `trash_days`
    /// from now, as long as the table in the trash, and that marks it as
    /// the one `undelete` restores (`files/undelete.rs`).
    pub fn table_deleted(&self, store: &dyn Store, table: &str) {
        let Some(s) = self.streaks.lock().remove(table) else {
            return;
        };
        if s.last.elapsed() >= QUIET {
            return;
        }
        let expire = (since_epoch() + store.trash_period()).as_micros() as u64;
        match store.set_snapshot_expiry(table, &s.snapshot, expire) {
            Ok(()) => log::info!(
                "{table} deleted: its removal snapshot {} is kept with it",
                s.snapshot
            ),
            Err(e) => log::warn!(
                "removal snapshot {} of {table}: expiry not set: {e}",
                s.snapshot
            ),
        }
    }
}

/// Now, since the epoch.
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}
