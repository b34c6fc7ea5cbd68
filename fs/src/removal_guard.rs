//! The removal snapshot: the first removal by name inside a table (`rm` of
//! a cell or version, `rmdir` of a row, family or column directory) after
//! [`QUIET`] without one takes an expiring snapshot `removed-<µs>` of the
//! table before the removal is applied. `rm -r TABLE` empties the table
//! from the bottom up before its `rmdir` sends it to the trash; this
//! snapshot keeps what it held (docs/trash.md). It expires when the trash
//! would collect the table, and none is taken while the trash is off.

use crate::store::Store;
use engine::Result;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Removals closer together than this are one streak, one snapshot.
pub const QUIET: Duration = Duration::from_secs(60);
/// The prefix of a removal snapshot's name (then the µs it was taken).
pub const PREFIX: &str = "removed-";
/// Tables remembered at most; older streaks are forgotten beyond it.
const MAX_TABLES: usize = 4096;

/// What the guard needs of the store (any [`Store`]; the tests' own).
pub trait Snapshots {
    /// How long a deleted table stays in the trash (zero: no trash).
    fn trash_period(&self) -> Duration;
    /// Takes snapshot `name` of `table`, expiring at `expire` (µs).
    fn take_expiring(&self, table: &str, name: &str, expire: u64) -> Result<()>;
    /// Sets snapshot `name` of `table` to expire at `expire` (µs).
    fn set_expiry(&self, table: &str, name: &str, expire: u64) -> Result<()>;
}

impl<S: Store + ?Sized> Snapshots for S {
    fn trash_period(&self) -> Duration {
        Store::trash_period(self)
    }
    fn take_expiring(&self, table: &str, name: &str, expire: u64) -> Result<()> {
        self.take_snapshot_expiring(table, name, expire)
    }
    fn set_expiry(&self, table: &str, name: &str, expire: u64) -> Result<()> {
        self.set_snapshot_expiry(table, name, expire)
    }
}

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
    /// cannot be taken is logged and the removal goes on, to be tried
    /// again at the next one.
    pub fn before_removal(&self, store: &dyn Snapshots, table: &str) {
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
        match store.take_expiring(table, &name, expire) {
            // The name is this instant's: one that exists is this take's,
            // retried after its answer was lost (a daemon that serves
            // nothing asks another daemon's master for it).
            Ok(()) | Err(engine::Error::SnapshotExists(_)) => {
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
    pub fn table_deleted(&self, store: &dyn Snapshots, table: &str) {
        let Some(s) = self.streaks.lock().remove(table) else {
            return;
        };
        if s.last.elapsed() >= QUIET {
            return;
        }
        let expire = (since_epoch() + store.trash_period()).as_micros() as u64;
        match store.set_expiry(table, &s.snapshot, expire) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the snapshots taken and the expiries set.
    #[derive(Default)]
    struct Fake {
        period: Duration,
        fail: std::sync::atomic::AtomicBool,
        /// Takes answer that the snapshot exists, having taken it.
        exists: std::sync::atomic::AtomicBool,
        calls: Mutex<Vec<String>>,
    }

    impl Snapshots for Fake {
        fn trash_period(&self) -> Duration {
            self.period
        }
        fn take_expiring(&self, table: &str, name: &str, _: u64) -> Result<()> {
            if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(engine::Error::Unavailable("down".into()));
            }
            self.calls.lock().push(format!("take {table} {name}"));
            if self.exists.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(engine::Error::SnapshotExists(format!("{table}/{name}")));
            }
            Ok(())
        }
        fn set_expiry(&self, table: &str, name: &str, _: u64) -> Result<()> {
            self.calls.lock().push(format!("expiry {table} {name}"));
            Ok(())
        }
    }

    fn fake(period: Duration) -> Fake {
        Fake {
            period,
            ..Fake::default()
        }
    }

    #[test]
    fn one_snapshot_per_streak_and_table_none_without_the_trash() {
        let g = RemovalGuard::default();
        let off = fake(Duration::ZERO);
        g.before_removal(&off, "t");
        assert!(off.calls.lock().is_empty());

        let on = fake(Duration::from_secs(86_400));
        g.before_removal(&on, "t");
        g.before_removal(&on, "t");
        g.before_removal(&on, "u");
        let calls = on.calls.lock().clone();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(calls[0].starts_with("take t removed-"), "{calls:?}");
        assert!(calls[1].starts_with("take u removed-"), "{calls:?}");

        // rmdir of t keeps its streak's snapshot; the next removal (of a
        // new table of that name) starts a new streak.
        g.table_deleted(&on, "t");
        let name = calls[0].trim_start_matches("take t ");
        assert_eq!(on.calls.lock()[2], format!("expiry t {name}"));
        g.table_deleted(&on, "t");
        assert_eq!(on.calls.lock().len(), 3);
        g.before_removal(&on, "t");
        assert_eq!(on.calls.lock().len(), 4);
    }

    #[test]
    fn a_failed_snapshot_is_tried_again_at_the_next_removal() {
        let g = RemovalGuard::default();
        let s = fake(Duration::from_secs(60));
        s.fail.store(true, std::sync::atomic::Ordering::Relaxed);
        g.before_removal(&s, "t");
        assert!(s.calls.lock().is_empty());
        s.fail.store(false, std::sync::atomic::Ordering::Relaxed);
        g.before_removal(&s, "t");
        assert_eq!(s.calls.lock().len(), 1);
    }

    #[test]
    fn a_take_retried_after_its_answer_was_lost_starts_the_streak() {
        let g = RemovalGuard::default();
        let s = fake(Duration::from_secs(60));
        s.exists.store(true, std::sync::atomic::Ordering::Relaxed);
        g.before_removal(&s, "t");
        g.before_removal(&s, "t");
        let calls = s.calls.lock().clone();
        assert_eq!(calls.len(), 1, "{calls:?}");
        // And it is the snapshot the table's rmdir keeps.
        g.table_deleted(&s, "t");
        let name = calls[0].trim_start_matches("take t ");
        assert_eq!(s.calls.lock()[1], format!("expiry t {name}"));
    }
}
