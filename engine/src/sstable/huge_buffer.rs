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
/// A buffer smaller than a huge page: a cache line.
const SMALL_ALIGN: usize = 64;

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
        // Only whole huge pages are asked for; the tail past the last one,
        // and a buffer smaller than one, take ordinary pages. (Rounding up
        // made every small in-memory table cost 2 MiB: a test's thousands
        // of them ran a machine out of memory.)
        let huge = len / HUGE_PAGE * HUGE_PAGE;
        let align = if huge > 0 { HUGE_PAGE } else { SMALL_ALIGN };
        let mem = AlignedAlloc::new(len, align);
        mem.advise_huge_pages(huge);
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
        let (empty, starts) = HugeBuffer::concat(&[]);
        assert!(empty.is_empty() && starts.is_empty());
        // Past one huge page: aligned to it, and no bigger than its parts.
        let (big, starts) = HugeBuffer::concat(&[vec![1u8; HUGE_PAGE], vec![2u8; 100]]);
        assert_eq!(starts, vec![0, HUGE_PAGE]);
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(big.mem.size(), HUGE_PAGE + 100);
        assert_eq!(buf.mem.size(), 5003);
    }
}
