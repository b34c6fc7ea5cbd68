//! Bigtable (OSDI 2006) as a Rust library: the data model, the tablet server's
//! storage (memtable, commit log with group commit, SSTables, compactions,
//! locality groups, caches, Bloom filters), tablets and splits, and the client
//! API. Files live in a [`gfs::FileStore`].
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod data;
pub mod error;
pub mod iterator;
pub mod key;
pub mod schema;

pub mod cache;
pub mod coding;
pub mod compaction;
pub mod compaction_filter;
pub mod coordination;
pub mod db;
pub mod group_commit;
pub mod log;
pub mod manifest;
pub mod memtable;
pub mod merge;
pub mod mutation;
pub mod read;
#[cfg(test)]
mod read_model_test;
pub mod server;
pub mod sstable;
pub mod tablet;
pub mod txn;
pub mod visibility;

pub use data::*;
pub use db::{Bigtable, Options, Scanner, TabletInfo};
pub use error::{Error, Result};
pub use txn::{RowOp, RowTxn, TxnOutcome};
