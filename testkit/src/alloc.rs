//! [`Tracking`]: a global allocator that records the largest single
//! allocation the current thread made, for fuzz targets that check a parser
//! never allocates far beyond its input (a length field claiming gigabytes
//! must be refused before anything that size is allocated).
//!
//! A test binary installs it with
//! `#[global_allocator] static ALLOC: testkit::alloc::Tracking = testkit::alloc::Tracking;`
//! and measures with [`largest_alloc`]; without it installed,
//! [`largest_alloc`] reports 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Forwards to the system allocator, noting each thread's largest request.
pub struct Tracking;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// thread-local bookkeeping allocates nothing.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(layout.size())));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(new_size)));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns the largest single allocation it made on this thread.
pub fn largest_alloc<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    let out = f();
    (out, LARGEST.with(|m| m.get()))
}

/// What a parser may allocate at most for inputs of a few KiB.
pub const ALLOC_LIMIT: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOC: Tracking = Tracking;

    #[test]
    fn the_largest_allocation_of_the_closure_is_reported() {
        let (v, largest) = largest_alloc(|| vec![0u8; 1 << 20]);
        assert_eq!(v.len(), 1 << 20);
        assert!(largest >= 1 << 20);
        let ((), small) = largest_alloc(|| drop(vec![0u8; 10]));
        assert!(small < 1 << 20);
    }
}
