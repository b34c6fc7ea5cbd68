//! The block cache (paper section 6): decompressed SSTable blocks shared by
//! every table of a tablet server, keyed by (file number, block offset).
//! Weighted by what a block costs the process, like the scan cache (see
//! [`crate::cache`]): a block of a mapped file is charged its restart index
//! only, since its bytes are the page cache's (see [`Block::cache_charge`]).

use super::block::Block;
use crate::cache::{CacheStats, CountedCache, ENTRY_OVERHEAD};
use quick_cache::Weighter;
use std::sync::Arc;

#[derive(Clone)]
struct BlockWeighter;

impl Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), block: &Arc<Block>) -> u64 {
        block.cache_charge() as u64 + ENTRY_OVERHEAD
    }
}

/// Decompressed SSTable blocks shared by every table of a tablet server.
pub struct BlockCache {
    cache: CountedCache<Arc<Block>, BlockWeighter>,
}

impl BlockCache {
    pub fn new(capacity_bytes: u64) -> Self {
        BlockCache {
            // Sized for mapped blocks, charged their restart index (a few KiB).
            cache: CountedCache::new(capacity_bytes, 4 * 1024, BlockWeighter),
        }
    }

    /// The block at `offset` of table `file_number`, counting a hit or miss.
    pub fn get(&self, file_number: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.get((file_number, offset))
    }

    /// Counts a hit on a block found without a lookup (a thread's last
    /// block, see `last_block.rs`).
    pub(crate) fn count_hit(&self) {
        self.cache.count(true);
    }

    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<Block>) {
        self.cache.insert((file_number, offset), block);
    }

    /// Drops every block of a table (e.g. after it was deleted). O(cache size);
    /// not needed for correctness, since file numbers are never reused.
    pub fn evict_file(&self, file_number: u64) {
        self.cache.retain(|(f, _), _| *f != file_number);
    }

    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(n: usize) -> Arc<Block> {
        // A valid empty-restart block padded to about n bytes: n-8 bytes of
        // entry area are never parsed here.
        let mut d = vec![0u8; n];
        d.extend_from_slice(&0u32.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        Arc::new(Block::new(d, 1, 0).unwrap())
    }

    #[test]
    fn block_cache_hits_misses_and_weight() {
        let c = BlockCache::new(1 << 20);
        assert!(c.get(1, 0).is_none());
        let b = block(1000);
        // The data, plus its one restart's key (empty) and bookkeeping.
        assert_eq!(b.size(), 1008 + 20);
        let charge = b.cache_charge() as u64;
        assert!(charge > 1028, "an owned block is charged its buffer");
        c.insert(1, 0, b);
        assert_eq!(c.get(1, 0).unwrap().size(), 1028);
        assert!(c.get(1, 4096).is_none());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 2, 1));
        assert_eq!(s.bytes, charge + ENTRY_OVERHEAD);
        c.evict_file(1);
        assert!(c.get(1, 0).is_none());
    }

    #[test]
    fn block_cache_respects_capacity() {
        let c = BlockCache::new(256 * 1024);
        for i in 0..200 {
            c.insert(1, i * 4096, block(4096));
        }
        assert!(c.stats().bytes <= 256 * 1024, "{:?}", c.stats());
        assert!(c.stats().entries > 0);
    }
}
