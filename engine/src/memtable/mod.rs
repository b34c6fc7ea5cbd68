//! The memtable: recently committed mutations, sorted in memory.
//!
//! An insert-only concurrent skiplist ([`skiplist`]) keyed by internal keys
//! (see [`crate::key`]), its nodes carved out of an arena ([`arena`]). Every
//! op carries its own sequence number, so keys are unique and an insert never
//! overwrites another op; readers iterate while writers insert, without
//! locks. Entries are never removed: a memtable is dropped whole once it has
//! been written to an SSTable.

mod arena;
mod skiplist;

use crate::iterator::InternalIterator;
use crate::key::{self, SeqNo};
use crate::Result;
use skiplist::{Node, SkipList};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A concurrent sorted map of internal key → value.
#[derive(Default)]
pub struct Memtable {
    list: SkipList,
    max_seq: AtomicU64,
    /// Set when the memtable is frozen: the last sequence number a write
    /// may still be inserting into it (0: none).
    sealed: AtomicU64,
    /// When the first entry went in: nanoseconds since [`epoch`], plus one
    /// (0: empty). A memtable's age is how long its oldest write has been
    /// only in memory and the log.
    first_insert: AtomicU64,
}

/// The instant memtable ages are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Memtable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one entry (a copy of `key` and `value`). `key` must be an
    /// internal key ([`crate::key::encode`]); inserting a key that is already
    /// present keeps the entry there (the same op replayed twice carries the
    /// same value, so that is harmless).
    pub fn insert(&self, key: &[u8], value: &[u8]) {
        if let Some(parts) = key::split(key) {
            self.max_seq.fetch_max(parts.seq, Ordering::AcqRel);
        }
        if self.first_insert.load(Ordering::Relaxed) == 0 {
            let now = epoch().elapsed().as_nanos() as u64 + 1;
            let _ =
                self.first_insert
                    .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
        }
        self.list.insert(key, value);
    }

    /// How long ago the first entry went in (None while empty).
    pub fn age(&self) -> Option<Duration> {
        match self.first_insert.load(Ordering::Relaxed) {
            0 => None,
            t => Some(
                epoch()
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(t - 1)),
            ),
        }
    }

    /// Bytes of entries with their skiplist nodes (the arena's chunks hold
    /// at most a chunk more for each of its two runs).
    pub fn approximate_bytes(&self) -> usize {
        self.list.used()
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The highest sequence number inserted so far (0 when empty).
    pub fn max_seq(&self) -> SeqNo {
        self.max_seq.load(Ordering::Acquire)
    }

    /// Records, as it is frozen, the last sequence number that a write in
    /// flight may still insert: it is complete once that number is visible.
    pub fn seal(&self, last: SeqNo) {
        self.sealed.store(last, Ordering::Release);
    }

    /// The number [`Memtable::seal`] recorded (0 if never sealed).
    pub fn sealed(&self) -> SeqNo {
        self.sealed.load(Ordering::Acquire)
    }

    /// A cursor over the memtable that keeps it alive; it sees entries
    /// inserted after its creation if they sort after its position.
    pub fn iter(self: &Arc<Self>) -> MemtableIterator {
        MemtableIterator {
            current: std::ptr::null(),
            table: Arc::clone(self),
        }
    }
}

/// Iterator over a [`Memtable`]; owns an `Arc` of it.
///
/// It points at a node in the memtable's arena, so `key()`/`value()` borrow
/// the entry in place (no copy of possibly large values) and `next()` follows
/// the node's own link instead of searching from the top.
pub struct MemtableIterator {
    /// The current node (null: not positioned). Points into `table`'s arena.
    current: *const Node,
    table: Arc<Memtable>,
}

// SAFETY: `current` points into the arena of `table`, which this iterator
// keeps alive and which is `Sync`; nodes are immutable once published.
unsafe impl Send for MemtableIterator {}

impl MemtableIterator {
    fn set(&mut self, n: Option<&Node>) {
        self.current = n.map_or(std::ptr::null(), |n| n as *const Node);
    }

    fn node(&self) -> Option<&Node> {
        // SAFETY: a non-null `current` is a node of `self.table`, alive as
        // long as `self` holds the `Arc`.
        unsafe { self.current.as_ref() }
    }
}

impl InternalIterator for MemtableIterator {
    fn seek_to_first(&mut self) -> Result<()> {
        let t = Arc::clone(&self.table);
        self.set(t.list.first());
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let t = Arc::clone(&self.table);
        self.set(t.list.seek(target));
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        let next = self.node().and_then(|n| self.table.list.next_of(n));
        let p = next.map_or(std::ptr::null(), |n| n as *const Node);
        self.current = p;
        Ok(())
    }

    fn valid(&self) -> bool {
        !self.current.is_null()
    }

    fn key(&self) -> &[u8] {
        self.node().map_or(&[], |n| n.key())
    }

    fn value(&self) -> &[u8] {
        self.node().map_or(&[], |n| n.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::drain;
    use crate::key::Kind;

    fn k(row: &str, ts: u64, seq: u64) -> Vec<u8> {
        key::encode(row.as_bytes(), b"f", b"q", ts, seq, Kind::Put)
    }

    #[test]
    fn insert_seek_iterate() {
        let m = Arc::new(Memtable::new());
        assert!(m.is_empty());
        m.insert(&k("b", 1, 2), b"b1");
        m.insert(&k("a", 1, 1), b"a1");
        m.insert(&k("a", 2, 3), b"a2");
        assert_eq!(m.len(), 3);
        assert_eq!(m.max_seq(), 3);
        assert!(m.approximate_bytes() >= 3 * 16 + 6);

        let mut it = m.iter();
        assert!(!it.valid());
        it.seek_to_first().unwrap();
        let all = drain(&mut it);
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
        m.insert(&k("x", 1, 1), &[7; 1000]);
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
                        m.insert(&k(&format!("row{:04}", i), 5, seq), &seq.to_be_bytes());
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
        assert_eq!(drain(&mut it).len(), 2000);
    }
}
