//! Bigtable (OSDI 2006) as a Rust library: the data model, the tablet server's
//! storage (memtable, commit log with group commit, SSTables, compactions,
//! locality groups, caches, Bloom filters), tablets and splits, METADATA, the
//! master and tablet servers, recovery of a dead server's log, and the client
//! library. Files live in a [`gfs::FileStore`]; coordination goes through a
//! [`chubby::LockService`].
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod aggregate;
mod aligned_alloc;
pub mod backup;
pub mod byte_string;
mod data;
mod error;
mod iterator;
pub mod key;
pub mod keyviz;
pub mod schema;

mod cache;
mod catalog;
pub mod changes;
mod client;
mod cluster;
mod coding;
mod compaction;
mod compaction_filter;
mod concat;
mod coordination;
mod counter;
mod cow_map;
mod db;
mod duration;
mod env;
pub mod filter;
mod gc_rule;
mod group_commit;
mod log;
mod master;
mod memtable;
mod merge;
mod metadata;
pub mod mutation;
mod numbers;
mod options;
mod own_lines;
mod packed_row;
mod point;
pub mod protocol;
mod quiesce;
pub mod read;
mod recovery;
mod scan;
pub mod snapshot;
mod sstable;
mod status;
mod storage;
mod tablet;
mod tablet_server;
mod trash;
mod txn;
mod value;
mod visibility;
mod xorshift;

pub use data::*;
pub use db::{Bigtable, Scanner};
pub use env::{now_micros, Hooks};
pub use error::{Error, Result};
pub use filter::RowFilter;
pub use options::{Options, TabletInfo};
pub use protocol::ServerReport;
pub use scan::ScanSpec;
pub use trash::{TrashCost, TrashEntry};
pub use txn::{Guard, Reach, RowOp, RowTxn, TxnOutcome};
pub use value::Value;

/// Parsers of on-disk input, reachable for the engine's fuzz tests
/// (`tests/fuzz.rs`), which feed them damaged bytes; not part of the API.
#[doc(hidden)]
pub mod fuzz {
    pub use crate::iterator::InternalIterator;
    pub use crate::log::{LogReader, LogRecord, LogWriter};
    pub use crate::sstable::{Block, BlockIter, Table, TableBuilder, TableOptions};
    pub use crate::visibility::EntryKey;
}

#[cfg(test)]
mod tests;
