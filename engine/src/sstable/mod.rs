//! SSTables (paper sections 4 and 6): immutable sorted files of internal
//! key/value pairs, in blocks of 64 KiB (configurable) with lz4 compression
//! per block, a block index at the end loaded at open (one block read per
//! lookup), a Bloom filter per table, and a checksum on every block.
//!
//! The byte layout is documented in docs/formats/engine.md, section "SSTable".
//!
//! - [`TableBuilder`] writes a table from ascending keys.
//! - [`Table`] opens one (from the file with a [`BlockCache`], or wholly in
//!   memory) and hands out [`TableIterator`]s.

mod block;
mod block_builder;
mod block_cache;
mod bloom;
mod builder;
pub(crate) mod format;
mod huge_buffer;
mod last_block;
mod sorted_keys;
mod table;

pub use block::{Block, BlockIter};
pub use block_cache::BlockCache;
pub use builder::TableBuilder;
pub use table::Table;

use crate::key::Timestamp;
use crate::storage::{BloomKind, Compression};

/// Entries between restart points in data blocks: a seek scans at most this many.
pub const DATA_RESTART_INTERVAL: usize = 16;

/// Bytes of entries after which a data block places a restart point sooner.
/// A seek's scan decodes each entry it passes, and with large values every
/// entry is a cache miss of its own: restarts every entry let the binary
/// search do that work instead. Small entries still get the full interval
/// (16 of 64 bytes span 1 KiB), so prefix compression loses little.
pub const DATA_RESTART_BYTES: usize = 1024;

/// How a table is written (per locality group).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Target size of an uncompressed data block; default 64 KiB.
    pub block_size: usize,
    /// Compression of each block.
    pub compression: Compression,
    /// Which Bloom filters the table carries.
    pub bloom: BloomKind,
    /// Bloom filter bits per distinct row (and column); default 10 (~1% false positives).
    pub bloom_bits_per_key: usize,
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size: 64 * 1024,
            compression: Compression::default(),
            bloom: BloomKind::default(),
            bloom_bits_per_key: 10,
        }
    }
}

/// What [`TableBuilder::finish`] reports about the table it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableInfo {
    pub file_size: u64,
    pub entries: u64,
    /// Smallest and largest internal keys (empty when there are no entries).
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    /// The largest sequence number of any entry (0 when empty).
    pub max_seq: u64,
    /// The timestamps of its cells (`None` when it holds none).
    pub timestamps: Option<TimeRange>,
}

/// The smallest and largest timestamp of a table's cells. Tombstones are
/// left out: they carry a marker in the timestamp slot, not a time. A
/// server loading a tablet raises its clock to `max` (so writes after a
/// move are newer than writes before it); `min` is there for pruning reads
/// by time range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub min: Timestamp,
    pub max: Timestamp,
}

impl TimeRange {
    /// `range` widened to hold `ts`.
    pub fn widen(range: Option<TimeRange>, ts: Timestamp) -> TimeRange {
        match range {
            Some(r) => TimeRange {
                min: r.min.min(ts),
                max: r.max.max(ts),
            },
            None => TimeRange { min: ts, max: ts },
        }
    }
}

#[cfg(test)]
mod tests;
