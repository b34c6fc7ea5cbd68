//! One row's internal entries packed into a single buffer, as the scan cache
//! keeps them.
//!
//! Layout: `varint(row len) row` then, per entry in key order,
//! `varint(key len) varint(value len) key value`.
//!
//! Why one buffer, and inline when small: a tree walk caches every row it
//! visits. Kept as a vector of owned pairs, each cached row was four or five
//! small heap allocations, interleaved with the walk's short-lived inode
//! records; once the kernel forgot those inodes, the few live cache
//! allocations on every page kept malloc from giving the pages back (after a
//! walk of 100,000 rows, 152 MB stayed resident; 55 MB with the scan cache
//! shrunk to 1 MiB). A small row now
//! lives inside the cache's own slab, a larger one in one shared allocation.

use crate::coding::put_varint;
use crate::iterator::InternalIterator;
use crate::sstable::format::get_varint_usize;
use crate::{Error, Result};
use std::sync::Arc;

/// Rows whose packed form fits here stay inline (no heap allocation).
const INLINE: usize = 86;

#[derive(Clone)]
enum Bytes {
    Inline { len: u8, buf: [u8; INLINE] },
    Shared(Arc<[u8]>),
}

/// See the module comment. Cheap to clone: inline bytes are copied, a shared
/// buffer is reference-counted.
#[derive(Clone)]
pub struct PackedRow {
    bytes: Bytes,
    /// Where the entries start (after the row).
    entries_at: u32,
}

impl PackedRow {
    /// Packs `row` and its entries (sorted by key).
    pub fn pack<'a>(row: &[u8], entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Self {
        let mut b = Self::builder(row);
        for (k, v) in entries {
            b.push(k, v);
        }
        b.finish()
    }

    /// Starts packing `row`; add its entries in key order.
    pub fn builder(row: &[u8]) -> PackedRowBuilder {
        let mut out = Vec::with_capacity(INLINE);
        put_varint(&mut out, row.len() as u64);
        out.extend_from_slice(row);
        PackedRowBuilder {
            entries_at: out.len(),
            out,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Inline { len, buf } => &buf[..usize::from(*len)],
            Bytes::Shared(b) => b,
        }
    }

    /// The row these entries belong to.
    pub fn row(&self) -> &[u8] {
        let all = self.as_slice();
        let at = self.entries_at as usize;
        match get_varint_usize(all) {
            Some((_, n)) if n <= at => &all[n..at],
            _ => &[],
        }
    }

    /// Bytes held on the heap (0 when inline).
    pub fn heap_bytes(&self) -> usize {
        match &self.bytes {
            Bytes::Inline { .. } => 0,
            Bytes::Shared(b) => b.len(),
        }
    }

    /// An iterator over the entries (it shares or copies the bytes).
    pub fn iter(&self) -> PackedRowIter {
        let end = self.as_slice().len();
        PackedRowIter {
            row: self.clone(),
            next_at: end,
            key: 0..0,
            value: 0..0,
            valid: false,
        }
    }
}

/// Builds a [`PackedRow`] (see [`PackedRow::builder`]).
pub struct PackedRowBuilder {
    out: Vec<u8>,
    entries_at: usize,
}

impl PackedRowBuilder {
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        put_varint(&mut self.out, key.len() as u64);
        put_varint(&mut self.out, value.len() as u64);
        self.out.extend_from_slice(key);
        self.out.extend_from_slice(value);
    }

    /// Bytes packed so far, the row's own included.
    pub fn packed_bytes(&self) -> usize {
        self.out.len()
    }

    pub fn finish(self) -> PackedRow {
        // Cached rows are bounded far below 4 GiB.
        let entries_at = u32::try_from(self.entries_at).unwrap_or(u32::MAX);
        let bytes = match u8::try_from(self.out.len()) {
            Ok(len) if self.out.len() <= INLINE => {
                let mut buf = [0u8; INLINE];
                buf[..self.out.len()].copy_from_slice(&self.out);
                Bytes::Inline { len, buf }
            }
            _ => Bytes::Shared(Arc::from(self.out)),
        };
        PackedRow { bytes, entries_at }
    }
}

/// An [`InternalIterator`] over a [`PackedRow`]'s entries. Seeks are linear:
/// cached rows are small.
pub struct PackedRowIter {
    row: PackedRow,
    /// Offset of the entry after the current one.
    next_at: usize,
    key: std::ops::Range<usize>,
    value: std::ops::Range<usize>,
    valid: bool,
}

impl PackedRowIter {
    /// Decodes the entry at `next_at`, or ends the iteration there.
    fn step(&mut self) -> Result<()> {
        let all = self.row.as_slice();
        let at = self.next_at;
        if at >= all.len() {
            self.valid = false;
            return Ok(());
        }
        let corrupt = || Error::corruption("packed row: truncated entry");
        let (klen, n1) = get_varint_usize(&all[at..]).ok_or_else(corrupt)?;
        let (vlen, n2) = get_varint_usize(&all[at + n1..]).ok_or_else(corrupt)?;
        let key_at = at + n1 + n2;
        let value_at = key_at.checked_add(klen).ok_or_else(corrupt)?;
        let end = value_at.checked_add(vlen).ok_or_else(corrupt)?;
        if end > all.len() {
            self.valid = false;
            return Err(corrupt());
        }
        self.key = key_at..value_at;
        self.value = value_at..end;
        self.next_at = end;
        self.valid = true;
        Ok(())
    }
}

impl InternalIterator for PackedRowIter {
    fn seek_to_first(&mut self) -> Result<()> {
        self.next_at = self.row.entries_at as usize;
        self.step()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.seek_to_first()?;
        while self.valid && self.key() < target {
            self.step()?;
        }
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.step()
    }
    fn valid(&self) -> bool {
        self.valid
    }
    fn key(&self) -> &[u8] {
        &self.row.as_slice()[self.key.clone()]
    }
    fn value(&self) -> &[u8] {
        &self.row.as_slice()[self.value.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(it: &mut PackedRowIter) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    fn entries(n: usize, value_len: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| (format!("k{i:03}").into_bytes(), vec![b'v'; value_len]))
            .collect()
    }

    #[test]
    fn small_rows_stay_inline_and_large_ones_share_one_buffer() {
        for (n, value_len, inline) in [(0, 0, true), (1, 8, true), (2, 100, false), (50, 10, false)]
        {
            let e = entries(n, value_len);
            let p = PackedRow::pack(b"row", e.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
            assert_eq!(p.heap_bytes() == 0, inline, "{n} entries of {value_len}");
            assert_eq!(p.row(), b"row");
            let mut it = p.iter();
            assert!(!it.valid(), "not positioned before a seek");
            it.seek_to_first().unwrap();
            assert_eq!(collect(&mut it), e);
        }
    }

    #[test]
    fn seek_finds_the_first_key_at_or_after_the_target() {
        let e = entries(5, 3);
        let p = PackedRow::pack(b"", e.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let mut it = p.iter();
        it.seek(b"k002").unwrap();
        assert_eq!(it.key(), b"k002");
        it.seek(b"k0025").unwrap();
        assert_eq!(it.key(), b"k003");
        it.seek(b"k9").unwrap();
        assert!(!it.valid());
        it.seek(b"").unwrap();
        assert_eq!(collect(&mut it), e);
    }
}
