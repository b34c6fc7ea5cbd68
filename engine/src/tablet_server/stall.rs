//! Back-pressure: writers wait while a tablet has too many frozen
//! memtables or the server's memtables pass twice their budget
//! (`pressure.rs`), and are woken when a flush makes room, a check finds
//! it made, or the server stops.

use parking_lot::{Condvar, Mutex};
use std::time::Duration;

/// Where stalled writers wait.
#[derive(Default)]
pub(super) struct Stall {
    lock: Mutex<()>,
    room: Condvar,
}

impl Stall {
    /// Waits while `blocked()` holds, looking again at least every 50 ms.
    pub(super) fn wait_while(&self, blocked: impl Fn() -> bool) {
        let mut g = self.lock.lock();
        while blocked() {
            self.room.wait_for(&mut g, Duration::from_millis(50));
        }
    }

    /// Wakes every stalled writer to look again.
    pub(super) fn release(&self) {
        let _g = self.lock.lock();
        self.room.notify_all();
    }
}
