//! Numbers for SSTables and tablet ids: unique across every daemon that
//! serves one Bigtable, and above every number found in the store or in
//! METADATA.
//!
//! A daemon alone counts up from the largest number it has seen. Daemons
//! that share a store take blocks of numbers from a counter in the lock
//! service (`/bigtable/numbers`, read and advanced under its lock), so two
//! daemons never hand out the same number: counting up from what each has
//! seen would not do, since each sees the other's numbers only later.

use crate::coordination;
use crate::Result;
use chubby::LockService;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;

/// Numbers one reservation takes: a daemon asks the lock service about
/// once per this many SSTables and tablets.
const BLOCK: u64 = 4096;

#[derive(Default)]
pub struct Numbers {
    state: Mutex<State>,
    /// SSTables being written: not yet in METADATA, and not garbage.
    in_flight: Mutex<HashSet<u64>>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// The end of the reserved block; `None`: no blocks, count up freely.
    limit: Option<u64>,
    /// Where blocks come from, once the store is shared.
    lock: Option<Arc<dyn LockService>>,
    /// The largest number seen, for the counter's first reservation.
    seen: u64,
}

impl Numbers {
    /// From now on take numbers in blocks reserved in `lock`'s counter.
    pub fn reserve_from(&self, lock: Arc<dyn LockService>) -> Result<()> {
        let mut s = self.state.lock();
        s.lock = Some(lock);
        s.limit = Some(0);
        refill(&mut s)
    }

    /// A number no one has used.
    pub fn next_id(&self) -> Result<u64> {
        let mut s = self.state.lock();
        if s.limit.is_some_and(|l| s.next >= l) {
            refill(&mut s)?;
        }
        let n = s.next;
        s.next += 1;
        s.seen = s.seen.max(n);
        Ok(n)
    }

    /// Keeps later numbers from colliding with `seen` (a number found in
    /// the store or METADATA).
    pub fn bump(&self, seen: u64) {
        let mut s = self.state.lock();
        s.seen = s.seen.max(seen);
        match s.limit {
            None => s.next = s.next.max(seen + 1),
            // Blocks other daemons reserved lie above or below ours; a
            // number inside ours can only be one made before the counter
            // existed: skip past it.
            Some(l) if seen >= s.next && seen < l => s.next = seen + 1,
            Some(_) => {}
        }
    }

    /// A number for an output file that sweeps leave alone until released.
    pub fn new_output(&self) -> Result<u64> {
        let n = self.next_id()?;
        self.in_flight.lock().insert(n);
        Ok(n)
    }

    pub fn release(&self, numbers: impl IntoIterator<Item = u64>) {
        let mut f = self.in_flight.lock();
        for n in numbers {
            f.remove(&n);
        }
    }

    pub fn in_flight(&self) -> HashSet<u64> {
        self.in_flight.lock().clone()
    }
}

/// Takes the next block from the lock service.
fn refill(s: &mut State) -> Result<()> {
    let Some(lock) = &s.lock else {
        return Ok(());
    };
    let start = coordination::reserve_numbers(&**lock, s.seen.max(s.next) + 1, BLOCK)?;
    s.next = start;
    s.limit = Some(start + BLOCK);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> (tempfile::TempDir, Arc<dyn LockService>) {
        let dir = tempfile::tempdir().unwrap();
        let cell = chubby::LocalCell::open(dir.path(), chubby::CellOptions::default()).unwrap();
        coordination::ensure_layout(&*cell).unwrap();
        (dir, cell)
    }

    #[test]
    fn counts_up_past_what_it_saw() {
        let n = Numbers::default();
        n.bump(41);
        assert_eq!(n.next_id().unwrap(), 42);
        n.bump(10);
        assert_eq!(n.next_id().unwrap(), 43);
    }

    #[test]
    fn daemons_sharing_a_cell_never_collide() {
        let (_d, lock) = cell();
        let daemons: Vec<Numbers> = (0..3).map(|_| Numbers::default()).collect();
        daemons[0].bump(500);
        for d in &daemons {
            d.reserve_from(lock.clone()).unwrap();
        }
        let mut all = HashSet::new();
        for round in 0..(BLOCK as usize * 2 + 10) {
            for (i, d) in daemons.iter().enumerate() {
                let n = d.next_id().unwrap();
                assert!(n > 500, "{n} is not above what the first daemon saw");
                assert!(
                    all.insert(n),
                    "{n} handed out twice (daemon {i}, round {round})"
                );
            }
        }
        // A number seen inside a daemon's own block is skipped.
        let d = &daemons[1];
        let next = d.next_id().unwrap();
        d.bump(next + 3);
        assert!(d.next_id().unwrap() > next + 3);
    }
}
