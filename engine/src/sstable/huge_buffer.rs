//! One immutable buffer in transparent huge pages, for data that reads
//! probe at random for as long as it lives: an in-memory locality group's
//! blocks. A random probe over hundreds of MiB in 4 KiB pages misses the
//! TLB almost every time, and in a VM each miss walks two page tables;
//! random reads of such a group ran at half the rate on 4 KiB pages. The
//! huge pages cost more to fault in where a VM hands free memory back to
//! its host, which is paid once, when the table opens.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// One transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// An immutable byte buffer asked of the kernel in huge pages.
pub struct HugeBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
    len: usize,
}

// SAFETY: the buffer is plain memory, written only while being built (by
// `concat`, before anyone else sees it) and read-only after.
unsafe impl Send for HugeBuffer {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for HugeBuffer {}

impl HugeBuffer {
    /// The parts one after another, and where each starts.
    pub fn concat(parts: &[Vec<u8>]) -> (HugeBuffer, Vec<usize>) {
        let len: usize = parts.iter().map(Vec::len).sum();
        // Whole huge pages, so that the last one can be huge too.
        let size = len.max(1).next_multiple_of(HUGE_PAGE);
        let layout = match Layout::from_size_align(size, HUGE_PAGE) {
            Ok(l) => l,
            Err(_) => alloc::handle_alloc_error(Layout::new::<u64>()),
        };
        // SAFETY: `layout` has a nonzero size.
        let raw = unsafe { alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        // SAFETY: the range is the allocation just made; the advice only
        // changes how the kernel backs it, and failing (no THP) is harmless.
        unsafe { libc::madvise(raw.cast(), size, libc::MADV_HUGEPAGE) };
        let mut starts = Vec::with_capacity(parts.len());
        let mut at = 0;
        for p in parts {
            // SAFETY: `at + p.len() <= len <= size`: inside the allocation,
            // which does not overlap `p`.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), raw.add(at), p.len()) };
            starts.push(at);
            at += p.len();
        }
        (HugeBuffer { ptr, layout, len }, starts)
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `concat` and the
        // allocation lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HugeBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc::alloc(self.layout)` and is freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_are_laid_end_to_end() {
        let parts = vec![b"abc".to_vec(), Vec::new(), vec![7u8; 5000]];
        let (buf, starts) = HugeBuffer::concat(&parts);
        assert_eq!(starts, vec![0, 3, 3]);
        assert_eq!(buf.len(), 5003);
        assert_eq!(&buf[..3], b"abc");
        assert!(buf[3..].iter().all(|&b| b == 7));
        assert_eq!(buf.as_ptr() as usize % HUGE_PAGE, 0);
        let (empty, starts) = HugeBuffer::concat(&[]);
        assert!(empty.is_empty() && starts.is_empty());
    }
}
