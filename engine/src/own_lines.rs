//! Copies of small data that every core reads on every request (a tablet's
//! bounds, a file's key range and families, a version's file list), each
//! on cache lines of its own.
//!
//! The allocator packs small objects side by side: a 12-byte row key
//! shares its 64-byte line with three other 16-byte objects, and when one
//! of those is a reading thread's scratch (a buffer allocated and freed
//! per request), every read on another core pulls the line back across
//! (false sharing). On a 2-core AMD EPYC VM, giving a tablet's and a
//! location's bounds lines of their own made a 64 MiB table's cached
//! sequential point reads 19–28% and memtable reads 29–49% faster (the
//! comparisons of those few bytes had cost as much as the whole block
//! search). A capacity of whole lines puts the
//! bytes in a size class whose slots start on line boundaries in jemalloc,
//! the daemon's allocator (its classes that are multiples of 64 bytes are
//! laid out from page-aligned slabs), so nothing else lives on them.
//!
//! The structs such reads go through (a tablet, its version, a file, a
//! location, a table's catalog entry) are `#[repr(align(64))]` for the
//! same reason: an aligned type gets lines of its own from any allocator.

/// The cache line the allocator's line-sized classes align to.
const LINE: usize = 64;

/// The capacity that gives `len` bytes lines of their own.
fn capacity(len: usize) -> usize {
    len.max(1).next_multiple_of(LINE)
}

/// A copy of `b` alone on its cache lines.
pub fn bytes(b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(capacity(b.len()));
    v.extend_from_slice(b);
    v
}

/// A copy of `s` alone on its cache lines.
pub fn string(s: &str) -> String {
    let mut v = String::with_capacity(capacity(s.len()));
    v.push_str(s);
    v
}

/// `v`'s elements moved into an allocation of whole cache lines (kept as
/// it is when empty, or when an element's size does not divide a line).
pub fn vec<T>(v: Vec<T>) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    if v.is_empty()
        || size == 0
        || !LINE.is_multiple_of(size)
        || v.capacity() * size == capacity(v.len() * size)
    {
        return v;
    }
    let mut out = Vec::with_capacity(capacity(v.len() * size) / size);
    out.extend(v);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_equal_and_fill_whole_lines() {
        for len in [0usize, 1, 12, 63, 64, 65, 200] {
            let src: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let b = bytes(&src);
            assert_eq!(b, src);
            assert_eq!(b.capacity() % LINE, 0, "{len} bytes");
            let s = string(&"x".repeat(len));
            assert_eq!(s, "x".repeat(len));
            assert_eq!(s.capacity() % LINE, 0, "{len} chars");
            let words = vec(vec![7u64; len]);
            assert_eq!(words, vec![7u64; len]);
            assert_eq!(words.capacity() * 8 % LINE, 0, "{len} words");
        }
    }
}
