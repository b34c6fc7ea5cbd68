//! Bigtable (OSDI 2006) as a Rust library: the data model, the tablet server's
//! storage (memtable, commit log with group commit, SSTables, compactions,
//! locality groups, caches, Bloom filters), tablets and splits, METADATA, the
//! master and tablet servers, recovery of a dead server's log, and the client
//! library. Files live in a [`gfs::FileStore`]; coordination goes through a
//! [`chubby::LockService`].
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod data;
pub mod error;
pub mod iterator;
pub mod key;
pub mod schema;

pub mod cache;
pub mod catalog;
pub mod client;
pub mod cluster;
pub mod coding;
pub mod compaction;
pub mod compaction_filter;
pub mod coordination;
pub mod counter;
pub mod cow_map;
pub mod db;
mod duration;
pub mod env;
pub mod filter;
#[cfg(test)]
mod filter_model_test;
pub mod gc_rule;
pub mod group_commit;
pub mod log;
pub mod master;
pub mod memtable;
pub mod merge;
pub mod metadata;
pub mod mutation;
pub mod options;
pub mod packed_row;
pub mod point;
pub mod read;
#[cfg(test)]
mod read_model_test;
pub mod recovery;
mod scan;
pub mod sstable;
pub mod status;
pub mod tablet;
pub mod tablet_server;
pub mod txn;
pub mod visibility;

pub use data::*;
pub use db::{Bigtable, Scanner};
pub use env::now_micros;
pub use error::{Error, Result};
pub use filter::RowFilter;
pub use options::{Options, TabletInfo};
pub use scan::ScanSpec;
pub use txn::{Guard, RowOp, RowTxn, TxnOutcome};
