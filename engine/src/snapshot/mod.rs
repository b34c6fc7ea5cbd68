//! Snapshots of a table (docs/snapshots.md): a manifest naming the
//! table's SSTables as they were at one instant, kept beside the table in
//! the file store; GC keeps every file a manifest names. Nothing is copied
//! but what was still only in memtables.
//!
//! - `manifest.rs`: the manifest and its bytes (docs/formats/snapshot.md)
//! - `store.rs`: where manifests live, publishing one atomically, what GC
//!   must keep
//! - `take.rs`: taking one across every server at one instant
//! - `ops.rs`: the operations where the files are (a daemon that serves
//!   nothing asks the master's daemon to run them)
//! - `view.rs`: reading one, the table as it was

mod manifest;
pub(crate) mod ops;
mod store;
mod take;
pub(crate) mod view;

pub use manifest::{Manifest, SnapTablet};
pub use store::validate_name as validate_snapshot_name;
pub(crate) use store::{
    live_files, per_table, publish as publish_manifest, read as read_manifest, read_whole,
};
#[cfg(test)]
pub(crate) use take::Step;
pub use view::SnapshotView;

use crate::schema::TableSchema;
use crate::{Bigtable, Result};
use std::sync::Arc;

/// What a listing shows of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its name, unique within its table.
    pub name: String,
    /// When the cut was taken (µs since the epoch).
    pub taken_micros: u64,
    /// Tablets the table had at the cut.
    pub tablets: usize,
    /// SSTables it names, and their bytes (shared with the table and
    /// other snapshots: not what deleting it frees).
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// When the collection deletes it (µs since the epoch); None: never.
    pub expire_micros: Option<u64>,
}

impl From<&Manifest> for SnapshotInfo {
    fn from(m: &Manifest) -> SnapshotInfo {
        SnapshotInfo {
            name: m.name.clone(),
            taken_micros: m.taken_micros,
            expire_micros: m.expire_micros,
            tablets: m.tablets.len(),
            files: m.files().len(),
            bytes: m.bytes(),
        }
    }
}

impl Bigtable {
    /// The store manifests and SSTables are in: this daemon's, unless it
    /// serves nothing (`tablet_servers=0` on its own empty store), which
    /// cannot reach the files. Taking, listing, expiring and deleting
    /// snapshots it asks of the active master's daemon instead (as clone
    /// and restore, done by the master); reading one's data, and backups,
    /// need the files.
    pub(crate) fn snapshot_store(&self) -> Result<&Arc<dyn gfs::FileStore>> {
        if self.cluster().is_client_only() {
            return Err(crate::Error::invalid(
                "a snapshot's data is read in a daemon that serves the store",
            ));
        }
        Ok(&self.env().store)
    }

    /// Runs `here` on this daemon's store, or where it serves nothing,
    /// `there` on the active master (whose daemon runs it on the store).
    fn where_files_are<T>(
        &self,
        here: impl FnOnce() -> Result<T>,
        there: impl Fn(&dyn crate::protocol::MasterService) -> Result<T>,
    ) -> Result<T> {
        if self.cluster().is_client_only() {
            self.ask_master(there)
        } else {
            here()
        }
    }

    /// Takes snapshot `name` of `table`: consistent at one instant across
    /// all its tablets (every write acknowledged before the call is in it,
    /// none that starts after it returns), whatever splits and moves
    /// happen meanwhile. Writes to the table wait for the moment the cut
    /// takes (one call to each server).
    pub fn take_snapshot(&self, table: &str, name: &str) -> Result<SnapshotInfo> {
        self.take_snapshot_expiring(table, name, None, None)
    }

    /// [`Bigtable::take_snapshot`] with an expiry (µs since the epoch):
    /// the master's collection deletes it once that time has passed; and
    /// for a backup, the API's cluster it was made in.
    pub fn take_snapshot_expiring(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
        cluster: Option<&str>,
    ) -> Result<SnapshotInfo> {
        let m = self.where_files_are(
            || {
                let t = self.table(table)?;
                ops::take_snapshot(self.env(), &t, name, expire_micros, cluster)
            },
            |m| decoded(m.take_snapshot(table, name, expire_micros, cluster)),
        )?;
        Ok(SnapshotInfo::from(&m))
    }

    /// Sets or clears snapshot `name`'s expiry (the manifest is rewritten
    /// whole, in place).
    pub fn set_snapshot_expiry(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
    ) -> Result<SnapshotInfo> {
        let m = self.where_files_are(
            || ops::set_expiry(self.env(), table, name, expire_micros),
            |m| decoded(m.set_snapshot_expiry(table, name, expire_micros)),
        )?;
        Ok(SnapshotInfo::from(&m))
    }

    /// [`Bigtable::take_snapshot`], stopping at `step` as a crash would.
    #[cfg(test)]
    pub(crate) fn take_snapshot_crashing(&self, table: &str, name: &str, step: Step) -> Result<()> {
        let t = self.table(table)?;
        take::take(self.env(), &t, name, (None, None), Some(step)).map(|_| ())
    }

    /// The snapshots of `table` (which may have been deleted since), by name.
    pub fn list_snapshots(&self, table: &str) -> Result<Vec<SnapshotInfo>> {
        let list = self.where_files_are(
            || ops::manifests(self.env(), table),
            |m| {
                m.snapshot_manifests(table)?
                    .iter()
                    .map(|b| Manifest::decode(b))
                    .collect()
            },
        )?;
        Ok(list.iter().map(SnapshotInfo::from).collect())
    }

    /// Every snapshot's manifest, of tables that exist or not (each read
    /// whole: for listings across tables, such as the API's backups).
    pub fn all_snapshot_manifests(&self) -> Result<Vec<Manifest>> {
        let files = &**self.snapshot_store()?;
        store::read_listed(files, store::all(files)?)
    }

    /// Snapshot `name` of `table`, whole.
    pub fn snapshot_manifest(&self, table: &str, name: &str) -> Result<Manifest> {
        self.where_files_are(
            || ops::manifest(self.env(), table, name),
            |m| decoded(m.snapshot_manifest(table, name)),
        )
    }

    /// When snapshot `name` of `table` was taken (µs since the epoch): from
    /// its view, opened once and kept, where the files are.
    pub fn snapshot_taken(&self, table: &str, name: &str) -> Result<u64> {
        if self.cluster().is_client_only() {
            return Ok(self.snapshot_manifest(table, name)?.taken_micros);
        }
        Ok(self.snapshot_view(table, name)?.manifest().taken_micros)
    }

    /// Snapshot `name` of `table`'s schema, as [`Bigtable::snapshot_taken`].
    pub fn snapshot_schema(&self, table: &str, name: &str) -> Result<Arc<TableSchema>> {
        if self.cluster().is_client_only() {
            return Ok(Arc::new(self.snapshot_manifest(table, name)?.schema));
        }
        Ok(self.snapshot_view(table, name)?.schema())
    }

    /// Snapshot `name` of `table`, opened for reading.
    pub fn snapshot_view(&self, table: &str, name: &str) -> Result<SnapshotView> {
        self.snapshot_views().get(table, name, || {
            // Its files are read here: not in a daemon that serves nothing.
            self.snapshot_store()?;
            let m = self.snapshot_manifest(table, name)?;
            Ok(SnapshotView::new(self.env().clone(), m))
        })
    }

    /// A new table `to` as snapshot `name` of `table` was: it shares the
    /// snapshot's files (none is copied); writes to either table never
    /// show in the other.
    pub fn clone_snapshot(&self, table: &str, name: &str, to: &str) -> Result<()> {
        self.master(|m| m.clone_snapshot(table, name, to))
    }

    /// Makes `table` what snapshot `name` holds, schema included. Writes
    /// not yet in the snapshot are gone, including any acknowledged while
    /// the restore runs: stop the writers first.
    pub fn restore_snapshot(&self, table: &str, name: &str) -> Result<()> {
        self.master(|m| m.restore_snapshot(table, name))
    }

    /// Deletes snapshot `name` of `table`. Its files go at the next
    /// collection unless the table or another snapshot still names them.
    pub fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        self.snapshot_views().forget(table, name);
        self.where_files_are(
            || ops::delete(self.env(), table, name),
            |m| m.delete_snapshot(table, name),
        )
    }
}

/// A manifest the master's daemon sent in its file's bytes.
fn decoded(bytes: Result<Vec<u8>>) -> Result<Manifest> {
    Manifest::decode(&bytes?)
}

#[cfg(test)]
pub(crate) mod tests;
