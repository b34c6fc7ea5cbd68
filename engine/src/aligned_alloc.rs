//! An owned block of raw memory with an alignment of its choosing, from
//! the global allocator and freed on drop: what the memtable arena's
//! chunks and an in-memory table's buffer are made of.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// `size` bytes (uninitialized) aligned to `align`.
pub(crate) struct AlignedAlloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is plain memory owned by whoever holds the value; it
// has no thread affinity.
unsafe impl Send for AlignedAlloc {}

impl AlignedAlloc {
    /// Aborts, as the standard collections do, if the system is out of
    /// memory; `align` must be a power of two (a constant at every caller).
    pub(crate) fn new(size: usize, align: usize) -> AlignedAlloc {
        let layout = match Layout::from_size_align(size.max(1), align) {
            Ok(l) => l,
            Err(_) => alloc::handle_alloc_error(Layout::new::<u64>()),
        };
        // SAFETY: `layout` has a nonzero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedAlloc { ptr, layout }
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    pub(crate) fn size(&self) -> usize {
        self.layout.size()
    }

    #[cfg(test)]
    pub(crate) fn align(&self) -> usize {
        self.layout.align()
    }

    /// Asks the kernel to back the block's first `len` bytes with
    /// transparent huge pages (best effort: without THP nothing changes).
    pub(crate) fn advise_huge_pages(&self, len: usize) {
        let len = len.min(self.size());
        if len == 0 {
            return;
        }
        // SAFETY: the range is inside this allocation; the advice only
        // changes how the kernel backs it.
        unsafe { libc::madvise(self.ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    }
}

impl Drop for AlignedAlloc {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc::alloc(self.layout)` and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
