//! Bigtable as a filesystem: tables, rows, column families and timestamped
//! cells as directories and files (docs/mount.md, the user's manual, describes the namespace).
//!
//! [`Fs`] implements every operation over a [`Store`] (the engine's client,
//! or an in-memory store in tests) without FUSE types beyond errno and
//! attributes, so the whole mapping is tested without a mount; [`FuseFs`]
//! adapts it to `fuser`. `fs/README.md` maps every file to its layer; each
//! module imports only from the layers listed before it:
//!
//! 1. parsers and plumbing: `names`, `query`, `mutate`, `schema_file`,
//!    `output`, `perms`, `errno`, `options`, `counts`, `store`, `pending`,
//!    `notify`, `pages`, `pool`, `local_locks`, `status`, `reply`, `memory`
//! 2. `node`: what an inode stands for
//! 3. `inodes`, `handles`, `cursors`
//! 4. `view` (engine queries) and `attr` (pure attribute functions)
//! 5. `ctx`: the data path's shared state
//! 6. operations: `lookup`, `dirs`, `files`, and the lock directory `lockdir`
//! 7. `fs`: [`Fs`], which routes each request to the data path or `lockdir`
//! 8. `fuse`: [`FuseFs`], argument conversion and replies, and busy polling
//!    of the FUSE device between requests
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod attr;
pub mod counts;
mod ctx;
pub mod cursors;
pub mod dirs;
pub mod errno;
pub mod files;
pub mod filter_query;
mod fs;
mod fuse;
pub mod handles;
pub mod inodes;
pub mod local_locks;
pub mod lockdir;
pub mod lookup;
pub mod memory;
pub mod mutate;
pub mod names;
pub mod node;
pub mod notify;
pub mod options;
pub mod output;
pub mod pages;
pub mod pending;
pub mod perms;
mod pool;
pub mod query;
pub mod reply;
pub mod schema_file;
pub mod status;
pub mod store;
mod view;

#[cfg(any(test, feature = "mock"))]
pub mod mock;
#[cfg(test)]
mod tests;

pub use crate::fs::Fs;
pub use crate::fuse::{BusyPoll, FuseFs, COMMIT_WORKERS, DEFAULT_BUSY_POLL};
pub use crate::options::{Entry, FsOptions, FsResult, MAX_WRITE};
pub use crate::perms::Caller;
pub use crate::status::Statfs;
pub use crate::store::{RowStream, Store};
/// The FUSE crate this is built on (for the binaries that mount it).
pub use fuser;
