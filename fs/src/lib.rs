//! Bigtable as a filesystem: tables, rows, column families and timestamped
//! cells as directories and files (the README's manual describes the namespace).
//!
//! [`Fs`] implements every operation over a [`Store`] (the engine's client,
//! or an in-memory store in tests) without FUSE types beyond errno and
//! attributes, so the whole mapping is tested without a mount; [`FuseFs`]
//! adapts it to `fuser`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod core;
pub mod dirs;
pub mod errno;
pub mod files;
mod fuse;
pub mod handles;
pub mod inodes;
pub mod lockdir;
pub mod lookup;
pub mod mutate;
pub mod names;
pub mod node;
pub mod notify;
pub mod output;
pub mod pending;
pub mod perms;
mod pool;
pub mod query;
pub mod schema_file;
mod status;
pub mod store;

#[cfg(any(test, feature = "mock"))]
pub mod mock;
#[cfg(test)]
mod tests;

pub use crate::core::{Entry, Fs, FsOptions, FsResult};
pub use crate::fuse::{FuseFs, COMMIT_WORKERS, MAX_WRITE};
pub use crate::perms::Caller;
pub use crate::status::Statfs;
pub use crate::store::{RowStream, Store};
/// The FUSE crate this is built on (for the binaries that mount it).
pub use fuser;
