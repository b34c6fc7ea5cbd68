//! Bigtable as a filesystem: tables, rows, column families and timestamped
//! cells as directories and files (docs/mount.md, the user's manual, describes the namespace).
//!
//! [`Fs`] implements every operation over a [`Store`] (the engine's client,
//! or an in-memory store in tests) without FUSE types beyond errno and
//! attributes, so the whole mapping is tested without a mount; [`FuseFs`]
//! adapts it to `fuser`. `fs/README.md` maps every file to its layer; each
//! file imports only from its own layer or lower ones, which
//! `tests/tests/structure.rs` checks:
//!
//! 1. parsers and plumbing: `names`, `query`, `mutate`, `schema_file`,
//!    `output`, `perms`, `errno`, `options`, `counts`, `store`, `row_memo`, `store_calls`, `pending`,
//!    `notify`, `pool`, `local_locks`, `status`, `reply`, `memory`,
//!    `write_budget`, `filter_query`, `mock`
//! 2. `node`: what an inode stands for
//! 3. the components, each owning its state: `kernel` (inodes,
//!    invalidation), `open_files` (handles, pages, write budget), `listing`
//! 4. `view` (the store view component) and `attr` (pure attribute functions)
//! 5. `ctx`: the components side by side, and what crosses them
//! 6. operations: `lookup`, `dirs`, `files`, and the lock directory `lockdir`
//! 7. `fs`: [`Fs`], which routes each request to the data path or `lockdir`
//! 8. `fuse`: [`FuseFs`], argument conversion and replies, and busy polling
//!    of the FUSE device between requests
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod attr;
mod change_lines;
mod change_query;
mod change_sizes;
mod counts;
mod ctx;
mod dirs;
mod doing;
mod errno;
mod files;
mod filter_query;
mod fs;
mod fuse;
mod kernel;
mod listed_values;
mod listing;
mod local_locks;
mod lockdir;
mod lookup;
mod memory;
mod mutate;
mod names;
mod node;
mod notify;
mod offsets;
mod open_files;
mod options;
mod output;
mod pending;
mod perms;
mod pool;
mod query;
mod removal_guard;
mod reply;
mod row_gaps;
mod row_memo;
mod schema_file;
mod status;
mod store;
mod store_calls;
mod view;
mod write_budget;

#[cfg(any(test, feature = "mock"))]
pub mod mock;
#[cfg(test)]
mod tests;

pub use crate::fs::Fs;
pub use crate::fuse::{BusyPoll, FuseFs, COMMIT_WORKERS, DEFAULT_BUSY_POLL};
pub use crate::options::FsOptions;
pub use crate::status::StatusFile;
pub use crate::store::{RowStream, Store};
pub use crate::write_budget::WriteLimits;
/// The FUSE crate this is built on (for the binaries that mount it).
pub use fuser;

/// Parsers of outside input, reachable for the fuzz tests (`tests/fuzz.rs`),
/// which feed them arbitrary text; not part of the API.
#[doc(hidden)]
pub mod fuzz {
    pub mod names {
        pub use crate::names::{
            decode_field, display_name, encode_field, escape, parse_lenient, parse_strict,
            parse_version_name, version_name,
        };
    }
    pub mod query {
        pub use crate::query::parse;
    }
    pub mod filter_query {
        pub use crate::filter_query::{format, parse};
    }
    pub mod lookup {
        pub use crate::lookup::parse_at_name;
    }
    pub mod schema_file {
        pub use crate::schema_file::{apply, render};
    }
    pub mod interrupt {
        pub use crate::lockdir::interrupt::parse_status;
    }
    pub mod mutate {
        pub use crate::mutate::{parse_line, BatchError, BatchParser};
    }
}
