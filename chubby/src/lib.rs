//! A Chubby-like lock service (Burrows, OSDI 2006) as a library.
//!
//! A *cell* holds a namespace of directories and small files. Every node is
//! also a reader/writer lock; writer-mode acquisitions bump a durable lock
//! generation that [`Sequencer`]s carry so servers can refuse stale holders.
//! Clients open sessions and handles; a dead session's locks enter lock-delay,
//! and ephemeral nodes vanish with their last handle. Changes are delivered as
//! ordered [`Event`]s.
//!
//! [`LockService`] is the interface; [`LocalCell`] implements it on a local
//! directory with a write-ahead log and snapshots; with the `etcd` feature,
//! `EtcdCell` implements it on an etcd cluster.
//!
//! ```
//! use chubby::{CellOptions, Credentials, LocalCell, LockMode, LockService, NodeSpec};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let cell = LocalCell::open(dir.path(), CellOptions::default()).unwrap();
//! let root = Credentials::root();
//! cell.create(&root, "/bigtable", &NodeSpec::dir(0o755)).unwrap();
//! cell.create(&root, "/bigtable/master", &NodeSpec::file(0o644)).unwrap();
//! let owner = 42; // e.g. the FUSE lock owner of an open file description
//! let grant = cell
//!     .try_lock(&root, owner, "/bigtable/master".into(), LockMode::Exclusive)
//!     .unwrap();
//! cell.set_contents(&root, "/bigtable/master".into(), b"host:7000").unwrap();
//! // Hand the sequencer to servers; they ask the cell whether it is current.
//! let seq: chubby::Sequencer = grant.sequencer.to_string().parse().unwrap();
//! assert!(cell.check_sequencer(&seq));
//! cell.unlock(owner, "/bigtable/master".into()).unwrap();
//! assert!(!cell.check_sequencer(&seq));
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod acl;
mod cell;
mod codec;
#[cfg(feature = "testing")]
mod crash_disk;
mod disk;
mod error;
#[cfg(feature = "etcd")]
mod etcd;
mod events;
mod locks;
mod namespace;
mod path;
mod record;
mod sequencer;
mod service;
mod session;
mod snapshot;
mod store;
#[cfg(test)]
mod tests;
mod types;
mod wal;

pub use acl::Credentials;
pub use cell::{CellOptions, LocalCell};
#[cfg(feature = "testing")]
pub use crash_disk::{CrashDisk, DiskOp};
pub use disk::{Disk, LocalDisk};
pub use error::{Error, Result};
#[cfg(feature = "etcd")]
pub use etcd::{EtcdCell, EtcdOptions};
pub use sequencer::Sequencer;
pub use service::{LockGrant, LockRequest, LockService, Wait};
pub use types::{
    DirEntry, Event, HandleId, LockHolder, LockMode, NodeId, NodeKind, NodeSpec, OpenOptions,
    OwnerKey, SessionId, Stat, Target, WatchEvent, MAX_CONTENTS,
};
