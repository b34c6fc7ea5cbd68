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

/// Heap memory freed in one place that glibc may keep for reuse before it
/// hands any back on its own ([`give_back`] still returns all of it).
const KEEP_FREED_BYTES: i32 = 16 << 20;
/// Allocations up to this size come from the heap, not a mapping of their own.
const HEAP_UP_TO_BYTES: i32 = 1 << 20;

/// Tunes glibc's malloc for the block cache's churn; call once at startup.
///
/// Left to itself, glibc gives freed memory at the top of a heap back to the
/// system once it passes 128 KiB, and serves every allocation of 128 KiB or
/// more (a chunk-layer read of a block that straddles two checksum blocks)
/// with a fresh mapping. Each block-cache miss then faulted in and zeroed the
/// pages of its buffer again: 13% of the CPU of random reads over the chunk
/// layer.
///
/// glibc also gives every thread that meets a locked arena one of its own,
/// up to eight per CPU, and a block read on one thread is mostly freed on
/// another (the one whose insert evicts it). Over the chunk layer, random
/// reads then kept faulting in fresh pages (a quarter of their CPU went to
/// the kernel zeroing them) and the process grew to 1.2 GB with a 256 MiB
/// block cache; with one arena per CPU it stayed near 400 MB and read
/// 1.7–2× as fast. Returns whether glibc took every setting.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = i32::try_from(cpus).unwrap_or(i32::MAX);
        // SAFETY: mallopt only sets glibc's own tuning parameters; it takes
        // no pointers and is safe before and after other threads allocate.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_UP_TO_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_FREED_BYTES) == 1
                && libc::mallopt(libc::M_ARENA_MAX, arenas) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
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

    #[test]
    fn glibc_takes_the_settings() {
        assert_eq!(
            keep_freed_memory(),
            cfg!(all(target_os = "linux", target_env = "gnu"))
        );
        // A 256 KiB allocation now comes from the heap and works as before.
        let v = vec![7u8; 256 << 10];
        assert!(v.iter().all(|&b| b == 7));
    }
}
