//! The memtable: recently committed mutations, sorted in memory.
//!
//! A lock-free skiplist (`crossbeam_skiplist::SkipMap`) keyed by internal keys
//! (see [`crate::key`]). Every op carries its own sequence number, so keys are
//! unique and an insert never overwrites another op; readers iterate while
//! writers insert, without locks. Entries are never removed: a memtable is
//! dropped whole once it has been written to an SSTable.

use crate::iterator::InternalIterator;
use crate::key::{self, SeqNo};
use crate::Result;
use crossbeam_skiplist::map::Entry;
use crossbeam_skiplist::SkipMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes charged per entry on top of key and value: the skiplist node (key and
/// value headers, reference count, tower of next pointers) and allocator slack.
/// An estimate; it only needs to be in the right range for flush decisions.
pub const ENTRY_OVERHEAD: usize = 64;

/// A concurrent sorted map of internal key → value.
#[derive(Default)]
pub struct Memtable {
    map: SkipMap<Vec<u8>, Vec<u8>>,
    bytes: AtomicUsize,
    max_seq: AtomicU64,
}

impl Memtable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one entry. `key` must be an internal key ([`crate::key::encode`]);
    /// inserting a key that is already present replaces its value (the same op
    /// replayed twice carries the same value, so that is harmless).
    pub fn insert(&self, key: Vec<u8>, value: Vec<u8>) {
        if let Some(parts) = key::split(&key) {
            self.max_seq.fetch_max(parts.seq, Ordering::AcqRel);
        }
        let charge = key.len() + value.len() + ENTRY_OVERHEAD;
        self.map.insert(key, value);
        self.bytes.fetch_add(charge, Ordering::Relaxed);
    }

    /// Approximate memory held: keys + values + per-entry overhead.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The highest sequence number inserted so far (0 when empty).
    pub fn max_seq(&self) -> SeqNo {
        self.max_seq.load(Ordering::Acquire)
    }

    /// A cursor over the memtable that keeps it alive; it sees entries
    /// inserted after its creation if they sort after its position.
    pub fn iter(self: &Arc<Self>) -> MemtableIterator {
        MemtableIterator {
            current: None,
            table: Arc::clone(self),
        }
    }
}

type MapEntry = Entry<'static, Vec<u8>, Vec<u8>>;

/// Iterator over a [`Memtable`]; owns an `Arc` of it.
///
/// It holds a reference-counted skiplist entry, so `key()`/`value()` borrow the
/// node in place (no copy of possibly large values) and `next()` follows the
/// node's own link instead of searching from the top.
pub struct MemtableIterator {
    // Declared before `table` so that it is dropped first: the entry points
    // into the skiplist owned by `table`.
    current: Option<MapEntry>,
    table: Arc<Memtable>,
}

/// Erases the borrow of `table` from an entry so that it can be stored next to
/// the `Arc` that keeps the table alive.
///
/// # Safety
/// The caller must keep the `Arc<Memtable>` the entry came from alive for as
/// long as the returned entry exists (including its drop).
unsafe fn detach(e: Entry<'_, Vec<u8>, Vec<u8>>) -> MapEntry {
    // SAFETY: only the lifetime changes; the layout is identical. The caller
    // guarantees the map outlives the entry (see the function contract).
    unsafe { std::mem::transmute::<Entry<'_, Vec<u8>, Vec<u8>>, MapEntry>(e) }
}

impl InternalIterator for MemtableIterator {
    fn seek_to_first(&mut self) -> Result<()> {
        self.current = None;
        let e = self.table.map.front();
        // SAFETY: the entry comes from `self.table`, which this iterator owns
        // and which is dropped only after `current` (field order); the map is
        // inside an `Arc`, so it never moves while the iterator exists.
        self.current = e.map(|e| unsafe { detach(e) });
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.current = None;
        let e = self.table.map.lower_bound(Bound::Included(target));
        // SAFETY: as in `seek_to_first`.
        self.current = e.map(|e| unsafe { detach(e) });
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(e) = self.current.as_mut() {
            if !e.move_next() {
                self.current = None;
            }
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn key(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |e| e.key().as_slice())
    }

    fn value(&self) -> &[u8] {
        self.current.as_ref().map_or(&[], |e| e.value().as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    fn k(row: &str, ts: u64, seq: u64) -> Vec<u8> {
        key::encode(row.as_bytes(), b"f", b"q", ts, seq, Kind::Put)
    }

    fn collect(it: &mut MemtableIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        while it.valid() {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    #[test]
    fn insert_seek_iterate() {
        let m = Arc::new(Memtable::new());
        assert!(m.is_empty());
        m.insert(k("b", 1, 2), b"b1".to_vec());
        m.insert(k("a", 1, 1), b"a1".to_vec());
        m.insert(k("a", 2, 3), b"a2".to_vec());
        assert_eq!(m.len(), 3);
        assert_eq!(m.max_seq(), 3);
        assert!(m.approximate_bytes() >= 3 * ENTRY_OVERHEAD + 6);

        let mut it = m.iter();
        assert!(!it.valid());
        it.seek_to_first().unwrap();
        let all = collect(&mut it);
        let vals: Vec<&[u8]> = all.iter().map(|(_, v)| v.as_slice()).collect();
        // Newer timestamp first within a column, rows ascending.
        assert_eq!(vals, vec![&b"a2"[..], b"a1", b"b1"]);

        it.seek(&key::row_start(b"b")).unwrap();
        assert!(it.valid());
        assert_eq!(it.value(), b"b1");
        it.seek(&key::row_end(b"b")).unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn iterator_keeps_table_alive_and_is_send() {
        let m = Arc::new(Memtable::new());
        m.insert(k("x", 1, 1), vec![7; 1000]);
        let mut it = m.iter();
        drop(m);
        let h = std::thread::spawn(move || {
            it.seek_to_first().unwrap();
            (it.valid(), it.value().len())
        });
        assert_eq!(h.join().unwrap(), (true, 1000));
    }

    #[test]
    fn concurrent_writers_and_sorted_readers() {
        let m = Arc::new(Memtable::new());
        let writers: Vec<_> = (0..4u64)
            .map(|w| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let seq = w * 1000 + i + 1;
                        m.insert(
                            k(&format!("row{:04}", i), 5, seq),
                            seq.to_be_bytes().to_vec(),
                        );
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    let mut passes = 0;
                    let mut it = m.iter();
                    while passes < 20 {
                        it.seek_to_first().unwrap();
                        let mut prev: Option<Vec<u8>> = None;
                        while it.valid() {
                            if let Some(p) = &prev {
                                assert!(p.as_slice() < it.key(), "out of order");
                            }
                            // Values always match their key's sequence number.
                            let seq = key::split(it.key()).unwrap().seq;
                            assert_eq!(it.value(), seq.to_be_bytes());
                            prev = Some(it.key().to_vec());
                            it.next().unwrap();
                        }
                        passes += 1;
                    }
                })
            })
            .collect();
        for h in writers.into_iter().chain(readers) {
            h.join().unwrap();
        }
        assert_eq!(m.len(), 2000);
        assert_eq!(m.max_seq(), 3500);
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        assert_eq!(collect(&mut it).len(), 2000);
    }
}
