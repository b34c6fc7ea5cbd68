//! Row locks: a write holds the locks of its rows from routing to commit,
//! so that a read-modify-write sees no other write of its row in between.
//! Rows hash to a fixed set of striped mutexes.

use parking_lot::{Mutex, MutexGuard};

const STRIPES: usize = 1024;

/// The striped row locks of one tablet server.
pub(super) struct RowLocks {
    stripes: Vec<Mutex<()>>,
}

/// The stripes a write holds (one, for a single row, without a Vec).
#[allow(dead_code)] // held for their Drop
pub(super) enum RowGuard<'a> {
    One(MutexGuard<'a, ()>),
    Many(Vec<MutexGuard<'a, ()>>),
}

impl RowLocks {
    pub(super) fn new() -> RowLocks {
        RowLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    fn stripe(&self, table: u64, row: &[u8]) -> usize {
        let h = seahash::hash(row) ^ table.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h % self.stripes.len() as u64) as usize
    }

    /// Locks the stripes of all `rows`, in index order so lockers never deadlock.
    pub(super) fn lock<'a, 'r>(
        &'a self,
        table: u64,
        rows: impl Iterator<Item = &'r [u8]>,
    ) -> RowGuard<'a> {
        let mut idx: Vec<usize> = Vec::new();
        let mut rows = rows.map(|r| self.stripe(table, r));
        let Some(first) = rows.next() else {
            return RowGuard::Many(Vec::new());
        };
        let Some(second) = rows.next() else {
            return RowGuard::One(self.stripes[first].lock());
        };
        idx.extend([first, second]);
        idx.extend(rows);
        idx.sort_unstable();
        idx.dedup();
        RowGuard::Many(idx.into_iter().map(|i| self.stripes[i].lock()).collect())
    }
}
