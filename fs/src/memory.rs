//! Handing freed memory back to the system.
//!
//! glibc's malloc keeps what a burst of small allocations freed (a large
//! batch, a walk of a million inodes) in its arenas, so the daemon's RSS
//! stayed at its peak long after the memory was free. After such bursts we
//! ask it to return free pages.

use std::sync::atomic::{AtomicU64, Ordering};

static TRIMS: AtomicU64 = AtomicU64::new(0);

/// Returns free heap pages to the system (cheap when there are none).
pub fn give_back() {
    TRIMS.fetch_add(1, Ordering::Relaxed);
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks;
    // it takes no pointers from us and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// How many times memory was handed back (`.bigtable/stats`).
pub fn trims() -> u64 {
    TRIMS.load(Ordering::Relaxed)
}

/// The process's resident set in bytes, from `/proc/self/statm` (0 if unknown).
pub fn rss_bytes() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf reads a constant of the running system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_known_and_trim_counts() {
        assert!(rss_bytes() > 0);
        let before = trims();
        give_back();
        assert!(trims() > before);
    }
}
