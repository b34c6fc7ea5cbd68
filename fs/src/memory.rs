//! Handing freed memory back to the system.
//!
//! The daemon allocates through jemalloc (`mountd` makes it the global
//! allocator), which keeps what a burst of small allocations freed (a large
//! batch, a walk of a million inodes) for reuse and returns it only as it
//! decays, over seconds of later allocator activity. After such bursts we
//! ask it to return free pages at once.

use std::sync::atomic::{AtomicU64, Ordering};

static TRIMS: AtomicU64 = AtomicU64::new(0);

/// Returns free heap pages to the system (cheap when there are none).
pub fn give_back() {
    TRIMS.fetch_add(1, Ordering::Relaxed);
    if !purge_jemalloc() {
        log::debug!("jemalloc refused to purge its arenas");
    }
    // What C code allocated through glibc.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas under their locks;
    // it takes no pointers from us and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns the free pages of every jemalloc arena to the system.
fn purge_jemalloc() -> bool {
    // jemalloc's name for every arena at once (`MALLCTL_ARENAS_ALL`).
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: the name is NUL-terminated; purging takes and returns no
    // value, so the old/new pointers are null with length 0, as jemalloc's
    // mallctl(3) documents for this name. It is safe from any thread.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
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
        assert!(purge_jemalloc(), "jemalloc takes the purge");
    }
}
