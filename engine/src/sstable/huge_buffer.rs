//! One immutable buffer in transparent huge pages, for data that reads
//! probe at random for as long as it lives: an in-memory locality group's
//! blocks. A random probe over hundreds of MiB in 4 KiB pages misses the
//! TLB almost every time, and in a VM each miss walks two page tables;
//! random reads of such a group ran at half the rate on 4 KiB pages. The
//! huge pages cost more to fault in where a VM hands free memory back to
//! its host, which is paid once, when the table opens.

use crate::aligned_alloc::AlignedAlloc;

/// One transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// An immutable byte buffer asked of the kernel in huge pages.
pub struct HugeBuffer {
    mem: AlignedAlloc,
    len: usize,
}

// SAFETY: the buffer is written only while being built (by `concat`, before
// anyone else sees it) and read-only after.
unsafe impl Sync for HugeBuffer {}

impl HugeBuffer {
    /// The parts one after another, and where each starts.
    pub fn concat(parts: &[Vec<u8>]) -> (HugeBuffer, Vec<usize>) {
        let len: usize = parts.iter().map(Vec::len).sum();
        // Whole huge pages, so that the last one can be huge too.
        let mem = AlignedAlloc::new(len.max(1).next_multiple_of(HUGE_PAGE), HUGE_PAGE);
        mem.advise_huge_pages();
        let raw = mem.ptr().as_ptr();
        let mut starts = Vec::with_capacity(parts.len());
        let mut at = 0;
        for p in parts {
            // SAFETY: `at + p.len() <= len <= mem.size()`: inside the
            // allocation, which does not overlap `p`.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), raw.add(at), p.len()) };
            starts.push(at);
            at += p.len();
        }
        (HugeBuffer { mem, len }, starts)
    }
}

impl std::ops::Deref for HugeBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written by `concat` and the
        // allocation lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.mem.ptr().as_ptr(), self.len) }
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
