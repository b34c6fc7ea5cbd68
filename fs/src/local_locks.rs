//! flock and fcntl locks on the Bigtable side of the mount (tables, cells).
//!
//! Once `init` asks for FUSE_POSIX_LOCKS | FUSE_FLOCK_LOCKS the kernel sends
//! every lock request of the mount to the daemon, not only those on
//! `.chubby/` files; files outside it keep the kernel's own semantics from
//! this table: in memory, whole-file, released at once when the holder
//! closes or dies (no lock-delay, nothing durable).

use chubby::LockMode;
use fuser::Errno;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::time::Duration;

/// How often a waiter looks at its caller's pending signals.
const POLL: Duration = Duration::from_millis(50);

/// One holder of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub mode: LockMode,
    /// The process that took it (for F_GETLK).
    pub pid: u32,
    /// The file handle it was taken through: a read-only open of a cell is
    /// not flushed at close, so its RELEASE ends fcntl locks taken through it.
    pub fh: u64,
}

/// Locks by inode number, then by lock owner.
#[derive(Default)]
pub struct LocalLocks {
    locks: Mutex<HashMap<u64, HashMap<u64, Held>>>,
    cond: Condvar,
}

fn compatible(holders: &HashMap<u64, Held>, owner: u64, mode: LockMode) -> bool {
    holders
        .iter()
        .filter(|(o, _)| **o != owner)
        .all(|(_, h)| mode == LockMode::Shared && h.mode == LockMode::Shared)
}

impl LocalLocks {
    /// Takes the lock if no other owner holds it incompatibly (EAGAIN otherwise).
    pub fn try_lock(&self, ino: u64, owner: u64, held: Held) -> Result<(), Errno> {
        let mode = held.mode;
        let mut g = self.locks.lock();
        let holders = g.entry(ino).or_default();
        if !compatible(holders, owner, mode) {
            if holders.is_empty() {
                g.remove(&ino);
            }
            return Err(Errno::EAGAIN);
        }
        holders.insert(owner, held);
        Ok(())
    }

    /// Waits for the lock; EINTR as soon as `cancelled()` says so. A shared
    /// holder that must wait to upgrade gives up its lock first, as flock(2).
    pub fn lock_wait(
        &self,
        ino: u64,
        owner: u64,
        held: Held,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), Errno> {
        let mode = held.mode;
        let mut g = self.locks.lock();
        let mut dropped = false;
        loop {
            let holders = g.entry(ino).or_default();
            if compatible(holders, owner, mode) {
                if cancelled() {
                    return Err(Errno::EINTR);
                }
                holders.insert(owner, held);
                return Ok(());
            }
            if !dropped && holders.remove(&owner).is_some() {
                self.cond.notify_all();
            }
            dropped = true;
            self.cond.wait_for(&mut g, POLL);
            if parking_lot::MutexGuard::unlocked(&mut g, cancelled) {
                return Err(Errno::EINTR);
            }
        }
    }

    /// Releases `owner`'s lock on `ino`; whether it held one.
    pub fn unlock(&self, ino: u64, owner: u64) -> bool {
        let mut g = self.locks.lock();
        let Some(holders) = g.get_mut(&ino) else {
            return false;
        };
        let had = holders.remove(&owner).is_some();
        if holders.is_empty() {
            g.remove(&ino);
        }
        if had {
            self.cond.notify_all();
        }
        had
    }

    /// Releases every lock taken through file handle `fh` on `ino`.
    pub fn unlock_fh(&self, ino: u64, fh: u64) {
        let mut g = self.locks.lock();
        let Some(holders) = g.get_mut(&ino) else {
            return;
        };
        let before = holders.len();
        holders.retain(|_, h| h.fh != fh);
        let released = holders.len() != before;
        if holders.is_empty() {
            g.remove(&ino);
        }
        if released {
            self.cond.notify_all();
        }
    }

    /// A holder other than `owner` that a request for `mode` would wait for.
    pub fn conflict(&self, ino: u64, owner: u64, mode: LockMode) -> Option<Held> {
        let g = self.locks.lock();
        g.get(&ino)?
            .iter()
            .find(|(o, h)| {
                **o != owner && (mode == LockMode::Exclusive || h.mode == LockMode::Exclusive)
            })
            .map(|(_, h)| *h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn by(mode: LockMode, pid: u32) -> Held {
        Held {
            mode,
            pid,
            fh: u64::from(pid),
        }
    }

    #[test]
    fn shared_and_exclusive() {
        let l = LocalLocks::default();
        l.try_lock(1, 10, by(LockMode::Shared, 100)).unwrap();
        l.try_lock(1, 11, by(LockMode::Shared, 101)).unwrap();
        assert_eq!(
            l.try_lock(1, 12, by(LockMode::Exclusive, 102)),
            Err(Errno::EAGAIN)
        );
        assert_eq!(
            l.conflict(1, 12, LockMode::Exclusive).map(|h| h.mode),
            Some(LockMode::Shared)
        );
        assert!(l.conflict(1, 12, LockMode::Shared).is_none());
        // Another inode is independent.
        l.try_lock(2, 12, by(LockMode::Exclusive, 102)).unwrap();
        assert!(l.unlock(1, 10));
        assert!(!l.unlock(1, 10));
        // Sole holder upgrades at once.
        assert!(l.unlock(1, 11));
        l.try_lock(1, 13, by(LockMode::Shared, 103)).unwrap();
        l.try_lock(1, 13, by(LockMode::Exclusive, 103)).unwrap();
        assert_eq!(l.conflict(1, 14, LockMode::Shared).unwrap().pid, 103);
        // Closing the handle a lock was taken through ends it.
        l.unlock_fh(1, 103);
        assert!(l.conflict(1, 14, LockMode::Exclusive).is_none());
    }

    #[test]
    fn waiter_is_granted_after_unlock_or_cancelled() {
        let l = Arc::new(LocalLocks::default());
        l.try_lock(1, 10, by(LockMode::Exclusive, 1)).unwrap();
        let l2 = l.clone();
        let t = std::thread::spawn(move || l2.lock_wait(1, 11, by(LockMode::Shared, 2), &|| false));
        std::thread::sleep(Duration::from_millis(30));
        assert!(l.unlock(1, 10));
        assert_eq!(t.join().unwrap(), Ok(()));
        // A cancelled waiter gives up and never holds the lock.
        l.try_lock(1, 12, by(LockMode::Exclusive, 3)).unwrap_err();
        let start = std::time::Instant::now();
        let r = l.lock_wait(1, 12, by(LockMode::Exclusive, 3), &|| {
            start.elapsed() > Duration::from_millis(60)
        });
        assert_eq!(r, Err(Errno::EINTR));
        assert!(l.conflict(1, 11, LockMode::Exclusive).is_none());
    }
}
