//! The file layer on an S3-compatible object store (AWS S3, Google Cloud
//! Storage's XML API, Ceph RGW, MinIO, SeaweedFS), for tables that must
//! outlive one machine.
//!
//! An object store has no append and no rename, so the three kinds of file
//! the engine writes each take the shape the store is good at:
//!
//! - a file written once (an SSTable, a sorted recovery run) gathers its
//!   bytes and goes up as one object, created with put-if-absent, when it is
//!   synced; reads are ranged GETs through a bounded, checksummed cache of
//!   fetched ranges on local disk;
//! - a log (the commit log) is a series of objects, one per append (one per
//!   group-commit batch), each created with put-if-absent under the next
//!   sequence number and stored before the append returns;
//! - a descriptor replaced in place (the root tablet's) is written by
//!   compare-and-swap on its ETag, never blindly.
//!
//! Alone, one daemon owns a prefix at a time: opening a store takes the
//! prefix over (a new epoch in `OWNER`) and seals every log, which fences
//! any daemon still writing there (see [`S3Store::open`]). Daemons that
//! share a lock service share the prefix instead ([`S3Config::shared`]):
//! the lock service says which servers live, and a dead server's logs are
//! sealed one directory at a time before they are recovered.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]

mod bridge;
mod client;
mod config;
mod credentials;
mod disk_cache;
mod error;
mod files;
mod inventory;
mod keys;
mod owner;
mod shared;
mod stats;
mod store;

pub use config::{S3Config, DEFAULT_DISK_CACHE, DEFAULT_TIMEOUT};
pub use credentials::Credentials;
pub use error::{Error, Result};
pub use inventory::{inventory, StoredObject};
pub use store::S3Store;
