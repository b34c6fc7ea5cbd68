//! Writing into and slicing a buffer at a file offset: what the data path's
//! files and `.chubby/`'s files share.

/// Copies `data` into `buf` at `offset`, zero-filling a gap.
pub(crate) fn write_at(buf: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset..end].copy_from_slice(data);
}

/// Up to `size` bytes of `data` from `offset`; empty past the end.
pub(crate) fn slice_at(data: &[u8], offset: u64, size: u32) -> Vec<u8> {
    let start = (offset as usize).min(data.len());
    let end = start.saturating_add(size as usize).min(data.len());
    data[start..end].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_at_fills_gaps() {
        let mut b = b"abc".to_vec();
        write_at(&mut b, 5, b"xy");
        assert_eq!(b, b"abc\0\0xy");
        write_at(&mut b, 1, b"Z");
        assert_eq!(b, b"aZc\0\0xy");
        assert_eq!(slice_at(&b, 5, 10), b"xy");
        assert_eq!(slice_at(&b, 50, 10), b"");
    }
}
