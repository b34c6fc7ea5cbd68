//! Bytes held by open cells' uncommitted write buffers, per uid and in
//! total. A handle's buffer holds the whole value it will commit (a 1-byte
//! `pwrite` at 64 MiB − 1 holds 64 MiB), so without a bound a few handles
//! exhaust the daemon's memory. Each writable cell handle carries a
//! [`Charge`] that follows its buffer's length; a write that would take a
//! uid over `write_buffer_uid=` fails with EDQUOT, one that would take the
//! daemon over `write_buffer_total=` with ENOSPC. Closing the handle (or
//! committing and dropping its buffer) gives the bytes back.

use fuser::Errno;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default bytes of write buffers one uid may hold (`write_buffer_uid=`).
pub const DEFAULT_PER_UID: u64 = 256 << 20;
/// Default bytes of write buffers the daemon holds (`write_buffer_total=`).
pub const DEFAULT_TOTAL: u64 = 1 << 30;

/// What writers may hold in memory (mount options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteLimits {
    /// Longest `.mutate` line (`mutate_max_line=`; EFBIG above).
    pub mutate_max_line: usize,
    /// Bytes of `.mutate` text grouped in memory at once
    /// (`mutate_max_group=`; EFBIG above).
    pub mutate_max_group: usize,
    /// Write-buffer bytes of one uid (`write_buffer_uid=`; EDQUOT above).
    pub buffer_per_uid: u64,
    /// Write-buffer bytes of the daemon (`write_buffer_total=`; ENOSPC above).
    pub buffer_total: u64,
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits {
            mutate_max_line: crate::mutate::DEFAULT_MAX_LINE,
            mutate_max_group: crate::mutate::DEFAULT_MAX_GROUP,
            buffer_per_uid: DEFAULT_PER_UID,
            buffer_total: DEFAULT_TOTAL,
        }
    }
}

/// The ledger of write-buffer bytes.
#[derive(Debug)]
pub struct WriteBudget {
    per_uid: u64,
    total: u64,
    used: Mutex<Used>,
    /// Writes refused for a limit (`write_buffer_refusals` in `.bigtable/stats`).
    refusals: AtomicU64,
}

#[derive(Debug, Default)]
struct Used {
    total: u64,
    by_uid: HashMap<u32, u64>,
}

impl WriteBudget {
    /// A ledger with these limits.
    pub fn new(per_uid: u64, total: u64) -> Arc<WriteBudget> {
        Arc::new(WriteBudget {
            per_uid,
            total,
            used: Mutex::new(Used::default()),
            refusals: AtomicU64::new(0),
        })
    }

    /// Bytes held now, in total.
    /// Writes refused for a limit so far.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    pub fn used(&self) -> u64 {
        self.used.lock().total
    }

    /// A charge of nothing yet for a buffer of `uid`.
    pub fn charge(self: &Arc<Self>, uid: u32) -> Charge {
        Charge {
            budget: self.clone(),
            uid,
            bytes: 0,
        }
    }

    fn grow(&self, uid: u32, by: u64) -> Result<(), Errno> {
        let mut u = self.used.lock();
        let mine = u.by_uid.get(&uid).copied().unwrap_or(0);
        let refused = if mine.saturating_add(by) > self.per_uid {
            Some(Errno::EDQUOT)
        } else if u.total.saturating_add(by) > self.total {
            Some(Errno::ENOSPC)
        } else {
            None
        };
        if let Some(e) = refused {
            self.refusals.fetch_add(1, Ordering::Relaxed);
            return Err(e);
        }
        u.total += by;
        *u.by_uid.entry(uid).or_insert(0) += by;
        Ok(())
    }

    fn shrink(&self, uid: u32, by: u64) {
        let mut u = self.used.lock();
        u.total = u.total.saturating_sub(by);
        if let Some(n) = u.by_uid.get_mut(&uid) {
            *n = n.saturating_sub(by);
            if *n == 0 {
                u.by_uid.remove(&uid);
            }
        }
    }
}

impl Default for WriteBudget {
    fn default() -> Self {
        WriteBudget {
            per_uid: DEFAULT_PER_UID,
            total: DEFAULT_TOTAL,
            used: Mutex::new(Used::default()),
            refusals: AtomicU64::new(0),
        }
    }
}

/// What one buffer holds of the budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<WriteBudget>,
    uid: u32,
    bytes: u64,
}

impl Charge {
    /// Makes the charge `len` bytes: EDQUOT or ENOSPC (and no change) if
    /// growing it would pass a limit.
    pub fn resize(&mut self, len: u64) -> Result<(), Errno> {
        if len > self.bytes {
            self.budget.grow(self.uid, len - self.bytes)?;
        } else {
            self.budget.shrink(self.uid, self.bytes - len);
        }
        self.bytes = len;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.shrink(self.uid, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_uid_then_total_and_given_back() {
        let b = WriteBudget::new(100, 150);
        let mut a1 = b.charge(1);
        a1.resize(60).unwrap();
        let mut a2 = b.charge(1);
        assert_eq!(a2.resize(41), Err(Errno::EDQUOT));
        a2.resize(40).unwrap();
        let mut c = b.charge(2);
        assert_eq!(c.resize(51), Err(Errno::ENOSPC));
        c.resize(50).unwrap();
        assert_eq!(b.used(), 150);
        drop(a1);
        assert_eq!(b.used(), 90);
        a2.resize(10).unwrap();
        assert_eq!(b.used(), 60);
        c.resize(100).unwrap();
        assert_eq!(b.refusals.load(Ordering::Relaxed), 2);
        drop((a2, c));
        assert_eq!(b.used(), 0);
    }
}
