//! The tablet server's two caches (paper section 6), both weighted by bytes and
//! built on quick_cache's S3-FIFO, which keeps one-off scan traffic from
//! flushing the hot set the way plain LRU would.
//!
//! - [`BlockCache`](crate::sstable::BlockCache): decompressed SSTable blocks
//!   keyed by (file number, block offset) — helps reads that touch data near
//!   what was read recently. It lives with the tables that fill it; this module
//!   holds what both caches share ([`CacheStats`], the entry overhead, and
//!   `CountedCache`, the counted S3-FIFO core both wrap).
//! - [`ScanCache`]: the raw SSTable entries of one row of one tablet — helps
//!   reads that repeat the same row.

use crate::counter::Counter;
use crate::packed_row::PackedRow;
use parking_lot::RwLock;
use quick_cache::sync::Cache;
use quick_cache::Weighter;
use std::collections::HashMap;

/// Counters of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    /// Weight currently held, in bytes.
    pub bytes: u64,
    pub capacity: u64,
    pub entries: u64,
}

/// Bookkeeping cost charged per entry besides its payload.
pub(crate) const ENTRY_OVERHEAD: u64 = 64;

/// How many entries of `avg_item` bytes a cache of `capacity` sizes itself for.
pub(crate) fn estimated_items(capacity: u64, avg_item: u64) -> usize {
    usize::try_from(capacity / avg_item)
        .unwrap_or(usize::MAX)
        .max(64)
}

/// What both caches are built on: a quick_cache S3-FIFO cache keyed by two
/// numbers and weighted by bytes, with its hit and miss counters.
pub(crate) struct CountedCache<V, W> {
    cache: Cache<(u64, u64), V, W>,
    hits: Counter,
    misses: Counter,
}

impl<V: Clone, W: Weighter<(u64, u64), V> + Clone> CountedCache<V, W> {
    /// A cache of `capacity` bytes, sized for entries of about `avg_item`.
    pub(crate) fn new(capacity: u64, avg_item: u64, weighter: W) -> Self {
        CountedCache {
            cache: Cache::with_weighter(estimated_items(capacity, avg_item), capacity, weighter),
            hits: Counter::default(),
            misses: Counter::default(),
        }
    }

    /// The entry at `key`, counting a hit or a miss.
    pub(crate) fn get(&self, key: (u64, u64)) -> Option<V> {
        let found = self.cache.get(&key);
        self.count(found.is_some());
        found
    }

    /// The entry at `key`, counting nothing (for lookups that count once
    /// for several probes).
    pub(crate) fn peek(&self, key: (u64, u64)) -> Option<V> {
        self.cache.get(&key)
    }

    /// Counts one hit or one miss.
    pub(crate) fn count(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.incr();
    }

    pub(crate) fn insert(&self, key: (u64, u64), value: V) {
        self.cache.insert(key, value);
    }

    pub(crate) fn remove(&self, key: (u64, u64)) {
        self.cache.remove(&key);
    }

    /// Keeps only the entries `keep` approves of. O(cache size).
    pub(crate) fn retain(&self, keep: impl Fn(&(u64, u64), &V) -> bool) {
        self.cache.retain(keep);
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            bytes: self.cache.weight(),
            capacity: self.cache.capacity(),
            entries: self.cache.len() as u64,
        }
    }
}

#[derive(Clone)]
struct ScanValue {
    generation: u64,
    row: PackedRow,
}

#[derive(Clone)]
struct ScanWeighter;

impl Weighter<(u64, u64), ScanValue> for ScanWeighter {
    fn weight(&self, _key: &(u64, u64), v: &ScanValue) -> u64 {
        (v.row.heap_bytes() + std::mem::size_of::<ScanValue>()) as u64 + ENTRY_OVERHEAD
    }
}

/// The cache key of a row: (tablet, hash of the row). The row itself is in
/// the value, so the key needs no allocation; two rows with one hash only
/// displace each other.
fn row_key(tablet: u64, row: &[u8]) -> (u64, u64) {
    (tablet, seahash::hash(row))
}

/// The paper's scan cache: per (tablet, row), the raw internal entries the
/// SSTable layer returned, packed (see [`PackedRow`]).
///
/// SSTables never change, but a tablet's *set* of SSTables does (every
/// compaction). [`ScanCache::clear_tablet`] is O(1): it bumps the tablet's
/// generation, and entries of older generations read as misses and age out.
/// A reader that read the SSTables before a compaction finished must not
/// publish its (stale) result afterwards: it takes [`ScanCache::generation`]
/// before reading and inserts with [`ScanCache::insert_if_current`].
pub struct ScanCache {
    cache: CountedCache<ScanValue, ScanWeighter>,
    generations: RwLock<HashMap<u64, u64>>,
}

impl ScanCache {
    pub fn new(capacity_bytes: u64) -> Self {
        ScanCache {
            cache: CountedCache::new(capacity_bytes, 1024, ScanWeighter),
            generations: RwLock::new(HashMap::new()),
        }
    }

    /// The tablet's current generation (0 until it is first cleared).
    pub fn generation(&self, tablet: u64) -> u64 {
        self.generations.read().get(&tablet).copied().unwrap_or(0)
    }

    pub fn get(&self, tablet: u64, row: &[u8]) -> Option<PackedRow> {
        self.get_first(&[tablet], row)
    }

    /// The row as cached under the first of `tablets` (cache ids) that has
    /// it; counts one hit or one miss.
    pub fn get_first(&self, tablets: &[u64], row: &[u8]) -> Option<PackedRow> {
        let hash = seahash::hash(row);
        let found = tablets.iter().find_map(|&tablet| {
            let current = self.generation(tablet);
            self.cache
                .peek((tablet, hash))
                .filter(|v| v.generation == current && v.row.row() == row)
                .map(|v| v.row)
        });
        self.cache.count(found.is_some());
        found
    }

    /// Caches a row under the tablet's current generation. Only safe if the
    /// caller keeps the tablet's SSTable set from changing between its read and
    /// this call; otherwise use [`ScanCache::insert_if_current`].
    pub fn insert(&self, tablet: u64, row: PackedRow) {
        let generation = self.generation(tablet);
        self.insert_if_current(tablet, generation, row);
    }

    /// Caches a row read at `generation`, unless the tablet has been cleared
    /// since. Returns whether it was cached.
    pub fn insert_if_current(&self, tablet: u64, generation: u64, row: PackedRow) -> bool {
        // Holding the read lock keeps clear_tablet from slipping in between
        // the check and the insert.
        let gens = self.generations.read();
        if gens.get(&tablet).copied().unwrap_or(0) != generation {
            return false;
        }
        self.cache
            .insert(row_key(tablet, row.row()), ScanValue { generation, row });
        true
    }

    /// Drops one row of a tablet.
    pub fn invalidate(&self, tablet: u64, row: &[u8]) {
        self.cache.remove(row_key(tablet, row));
    }

    /// Drops every row of a tablet in O(1) (see the type's documentation).
    pub fn clear_tablet(&self, tablet: u64) {
        *self.generations.write().entry(tablet).or_insert(0) += 1;
    }

    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::InternalIterator;

    #[test]
    fn scan_cache_generations() {
        let c = ScanCache::new(1 << 20);
        let rows = PackedRow::pack(b"r", [(&b"k"[..], &b"v"[..])]);
        assert!(c.get(7, b"r").is_none());
        c.insert(7, rows.clone());
        c.insert(8, rows.clone());
        let mut hit = c.get(7, b"r").unwrap().iter();
        hit.seek_to_first().unwrap();
        assert_eq!((hit.key(), hit.value()), (&b"k"[..], &b"v"[..]));
        assert!(c.get(7, b"s").is_none(), "another row is not a hit");
        assert!(c.get_first(&[9, 7], b"r").is_some());
        c.invalidate(7, b"r");
        assert!(c.get(7, b"r").is_none());

        let g = c.generation(7);
        c.insert(7, rows.clone());
        c.clear_tablet(7);
        assert!(c.get(7, b"r").is_none());
        assert!(c.get(8, b"r").is_some(), "other tablets untouched");
        // A read that began before the clear may not publish its result.
        assert!(!c.insert_if_current(7, g, rows.clone()));
        assert!(c.get(7, b"r").is_none());
        assert!(c.insert_if_current(7, c.generation(7), rows.clone()));
        assert!(c.get(7, b"r").is_some());
        let s = c.stats();
        assert_eq!(s.hits, 4);
        assert_eq!(s.misses, 5);
    }
}
