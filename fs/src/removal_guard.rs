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

/// When the last removal of each table was, in this mount.
#[derive(Default)]
pub struct RemovalGuard {
    /// Held while a snapshot is taken, so no removal of the streak is
    /// applied before the snapshot is published.
    streaks: Mutex<HashMap<String, Instant>>,
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
        if let Some(last) = streaks.get_mut(table) {
            if now.duration_since(*last) < QUIET {
                *last = now;
                return;
            }
        }
        let taken = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let name = format!("{PREFIX}{}", taken.as_micros());
        let expire = (taken + period).as_micros() as u64;
        match store.take_snapshot_expiring(table, &name, expire) {
            Ok(()) => {
                log::info!("took removal snapshot {name} of {table} (kept {period:?})");
                if streaks.len() >= MAX_TABLES {
                    streaks.retain(|_, last| now.duration_since(*last) < QUIET);
                }
                streaks.insert(table.to_string(), now);
            }
            Err(e) => log::warn!("removal snapshot of {table} not taken: {e}"),
        }
    }
}
