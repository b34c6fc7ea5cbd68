//! [`LocalCell`]: the lock service on a local directory. One mutex guards the
//! whole state (the namespace is small); every mutation is logged and fsync'd
//! before it is applied, and events are sent under the same mutex so that
//! subscribers see changes in order. Lock waiters sleep on one condition
//! variable and poll their cancellation at least every 50 ms.

mod lock_ops;
mod ns_ops;
mod service_impl;
mod session_ops;
mod state;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::disk::{Disk, LocalDisk};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::locks::LockTable;
use crate::namespace::{now_ns, Meta};
use crate::session::Sessions;
use crate::store::Store;
use state::State;

/// Settings of a local cell.
#[derive(Clone, Debug)]
pub struct CellOptions {
    /// Lock-delay given to new nodes that do not ask for one.
    pub default_lock_delay: Duration,
    /// Upper bound for any node's lock-delay.
    pub max_lock_delay: Duration,
    /// Attributes of the root directory when the cell is created.
    pub root_mode: u32,
    /// Owner of the root directory when the cell is created.
    pub root_uid: u32,
    /// Group of the root directory when the cell is created.
    pub root_gid: u32,
    /// Write a snapshot and start a new log once the log reaches this size.
    pub snapshot_after_bytes: u64,
    /// Nodes each user but root may own (EDQUOT beyond).
    pub quota_nodes: u64,
    /// Bytes of file contents each user but root may own (EDQUOT beyond).
    pub quota_bytes: u64,
}

impl Default for CellOptions {
    fn default() -> Self {
        CellOptions {
            default_lock_delay: Duration::from_secs(5),
            max_lock_delay: Duration::from_secs(60),
            root_mode: 0o755,
            root_uid: 0,
            root_gid: 0,
            snapshot_after_bytes: 4 << 20,
            quota_nodes: u64::MAX,
            quota_bytes: u64::MAX,
        }
    }
}

/// A lock-service cell kept in one local directory.
pub struct LocalCell {
    state: Mutex<State>,
    /// Signalled whenever a lock may have become available.
    cond: Condvar,
}

impl LocalCell {
    /// Opens the cell in `dir`, creating it if empty, and recovers its
    /// namespace. Ephemeral nodes left from before are removed: no handle
    /// survives a restart. Locks start free; their generations are kept.
    pub fn open(dir: &Path, opts: CellOptions) -> Result<Arc<LocalCell>> {
        let disk = LocalDisk::open(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
        Self::open_on(Arc::new(disk), opts)
    }

    /// [`LocalCell::open`] on any [`Disk`] (e.g. a `CrashDisk` in
    /// power-loss tests).
    pub fn open_on(disk: Arc<dyn Disk>, opts: CellOptions) -> Result<Arc<LocalCell>> {
        if opts.default_lock_delay > opts.max_lock_delay {
            return Err(Error::invalid(format!(
                "default lock-delay {:?} exceeds the maximum {:?}",
                opts.default_lock_delay, opts.max_lock_delay
            )));
        }
        let t = now_ns();
        let root = Meta {
            uid: opts.root_uid,
            gid: opts.root_gid,
            mode: opts.root_mode & 0o7777,
            mtime_ns: t,
            ctime_ns: t,
            lock_delay_ms: opts.default_lock_delay.as_millis() as u64,
            ephemeral: false,
            content_gen: 0,
            lock_gen: 0,
        };
        let what = disk.describe();
        let (store, ns, recovery) = Store::open(disk, root, opts.snapshot_after_bytes)?;
        log::info!(
            "chubby: opened cell {} ({} nodes; snapshot seq {}, {} log records replayed)",
            what,
            ns.len(),
            recovery.snapshot_seq,
            recovery.replayed
        );
        let mut state = State {
            ns,
            store,
            locks: LockTable::default(),
            sessions: Sessions::default(),
            events: Events::default(),
            opts,
            recovery,
            quota_refusals: 0,
        };
        state.reap_all_ephemeral()?;
        Ok(Arc::new(LocalCell {
            state: Mutex::new(state),
            cond: Condvar::new(),
        }))
    }
}
