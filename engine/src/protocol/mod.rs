//! The protocol between a cluster's parts: what clients and the master ask
//! of a tablet server, and what tablet servers and the `Bigtable` handle ask
//! of the master (paper §5). The client, the master and the registry in
//! [`crate::env::Env`] know only these traits; a tablet server in this
//! process answers them directly, one in another daemon answers them over
//! the network (the `grpc` crate's internal service), so the same client
//! code reaches both.

mod report;
mod snapshot;
mod wire;

pub use report::{ServedTablet, ServerReport};
pub use snapshot::{HeldTablet, TabletSnapshots, WriteHold};
pub use wire::WireError;

pub use crate::coordination::{
    daemon_address, daemon_addresses, known_daemons, known_servers, list_servers, master_address,
    server_address, Lease,
};
pub use crate::group_commit::GroupCommitStats;
pub use crate::metadata::{TableDef, TabletMeta};
pub use crate::options::TabletInfo;
pub use chubby::Sequencer;

use crate::data::{Cell, CellView, ColumnRead, RowMutation, RowPeek, Version, Written};
use crate::scan::ScanSpec;
use crate::schema::TableSchema;
use crate::txn::{RowTxn, TxnOutcome};
use crate::Result;

/// The cells of one tablet's part of a scan, in order, read as they are
/// asked for.
pub trait CellSource: Send {
    /// The next cell, or None at the end of the part.
    fn next_cell(&mut self) -> Result<Option<Cell>>;

    /// The row of the next cell; a source that can skip the rest of that
    /// row without reading it does (a listing of row keys). A caller that
    /// wants each row once drops repeats.
    fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.next_cell()?.map(|c| c.row))
    }

    /// Steps to the next cell as [`CellSource::next_cell`] does, keeping
    /// it for [`CellSource::current`]: false at the end of the part.
    fn advance_view(&mut self) -> Result<bool>;

    /// The cell the last [`CellSource::advance_view`] stopped at, borrowed.
    fn current(&self) -> Option<CellView<'_>>;
}

/// A tablet's part of a scan: its cells, and the tablet's end row (where
/// the scan goes on; None for the table's last tablet).
pub type ScanPart = (Box<dyn CellSource>, Option<Vec<u8>>);

/// A tablet server as its clients and the master see it. Every request
/// names a tablet; a server that does not serve it answers
/// [`crate::Error::NotServing`], and the caller looks the tablet up again.
///
/// Its requests come in seven traits by job, so that a tablet server
/// implements each in the file that does that job (no layer of forwarding
/// between the protocol and the work); one in another daemon implements
/// them over the network. Every type implementing all seven is a
/// `TabletService`.
pub trait TabletService: TabletData + TabletAdmin {}

impl<T: TabletData + TabletAdmin> TabletService for T {}

/// What clients ask of a tablet server: its state, writes and reads.
pub trait TabletData: TabletLifecycle + TabletWrites + TabletReads {}

impl<T: TabletLifecycle + TabletWrites + TabletReads> TabletData for T {}

/// What the master and operators ask of it.
pub trait TabletAdmin:
    TabletAssignment + TabletMaintenance + TabletStatus + TabletSnapshots
{
}

impl<T> TabletAdmin for T where
    T: TabletAssignment + TabletMaintenance + TabletStatus + TabletSnapshots
{
}

/// Who the server is, and whether it serves.
pub trait TabletLifecycle: Send + Sync {
    /// The server's name (its file in the lock service's servers directory).
    fn name(&self) -> &str;
    /// Whether it still holds its lock and takes requests.
    fn is_serving(&self) -> bool;
    /// fsyncs the commit log.
    fn sync(&self) -> Result<()>;
    /// Stops serving at once: the master has declared the server dead.
    fn fence(&self);
    /// Simulates the loss of the server's machine (operators' `kill`).
    fn kill(&self) -> Result<()>;
}

/// Writes to one tablet.
pub trait TabletWrites: Send + Sync {
    /// Applies validated row mutations, all in tablet `tablet`, each row
    /// atomically; returns what they wrote. With a `fence`, the write is
    /// refused unless that lock is still held.
    fn apply(
        &self,
        tablet: u64,
        ms: &[RowMutation],
        sync: bool,
        fence: Option<&Sequencer>,
    ) -> Result<Written>;
    /// Runs validated row transactions (check-and-mutate,
    /// read-modify-write), all in tablet `tablet`, in order.
    fn apply_txns(&self, tablet: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>>;
}

/// Reads of one tablet.
pub trait TabletReads: Send + Sync {
    /// One row's cells as `spec` selects them.
    fn read_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>>;
    /// [`TabletReads::read_row`], and if the row has no cell `spec`
    /// selects, how far in the tablet no row has one (the next row that
    /// does, or the tablet's end). A server that cannot tell says only
    /// that the row is absent.
    fn peek_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        Ok(RowPeek::of_row(row, self.read_row(tablet, row, spec)?))
    }
    /// The versions of one column of one row, newest first.
    fn read_column(&self, tablet: u64, column: ColumnRead<'_>) -> Result<Vec<Version>>;
    /// Tablet `tablet`'s part of a scan, from a snapshot taken now, and the
    /// tablet's end row (None for the table's last tablet).
    fn scan_part(&self, tablet: u64, spec: &ScanSpec) -> Result<ScanPart>;
}

/// What the master asks: which tablets the server serves.
pub trait TabletAssignment: Send + Sync {
    /// Starts serving a tablet (recovering its log if it has one to redo),
    /// unless `master`, the assigning master's lock, is no longer held: a
    /// deposed master's load would have a second server serve a tablet
    /// the next master assigns.
    fn load(&self, meta: TabletMeta, master: &Sequencer) -> Result<()>;
    /// Stops serving a tablet after a minor compaction; returns its state.
    fn unload(&self, id: u64) -> Result<TabletMeta>;
    /// Stops serving a tablet at once (its table was dropped).
    fn drop_tablet(&self, id: u64) -> Result<()>;
    /// A table was made or its schema replaced: its tablets are served
    /// with this definition from now on (a server in another daemon than
    /// the master's has no other way to learn it at once).
    fn learn_table(&self, def: &TableDef) -> Result<()>;
}

/// Compactions and splits asked for now (they also happen in the background).
pub trait TabletMaintenance: Send + Sync {
    /// Writes out the memtables of `table`'s tablets (all if None).
    fn flush(&self, table: Option<u64>) -> Result<()>;
    /// Compacts every served tablet of `table`.
    fn compact(&self, table: u64, major: bool) -> Result<()>;
    /// Splits served tablets of `table` past the split threshold.
    fn split_now(&self, table: u64) -> Result<()>;
    /// Splits served tablets of `table` at those of `rows` inside them.
    fn split_at_rows(&self, table: u64, rows: &[Vec<u8>]) -> Result<()>;
}

/// Figures for the master's balancing and for operators.
pub trait TabletStatus: Send + Sync {
    /// The tablets served now.
    fn tablet_ids(&self) -> Result<Vec<u64>>;
    /// The tablets served now with their loads and files.
    fn served(&self) -> Result<Vec<ServedTablet>>;
    /// SSTables its daemon is writing that METADATA does not name yet, and
    /// those a snapshot being taken has pinned.
    fn files_in_flight(&self) -> Result<Vec<u64>>;
    /// Figures for balancing and status.
    fn report(&self) -> Result<ServerReport>;
    /// The served tablets with their sizes.
    fn tablet_infos(&self) -> Result<Vec<TabletInfo>>;
    /// Requests served by tablet `id` since it was loaded.
    fn tablet_requests(&self, id: u64) -> Result<u64>;
    /// Group-commit figures of the server's log.
    fn group_commit_stats(&self) -> Result<GroupCommitStats>;
    /// Group-commit and log figures as `key=value` words.
    fn commit_line(&self) -> Result<String>;
}

/// The master as tablet servers and the `Bigtable` handle see it.
pub trait MasterService: Send + Sync {
    /// The master's name.
    fn name(&self) -> &str;
    /// Whether it holds the master lock and acts.
    fn is_active(&self) -> bool;
    /// Creates a table.
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()>;
    /// Deletes a table and all its data.
    fn delete_table(&self, name: &str) -> Result<()>;
    /// Replaces a table's schema.
    fn set_schema(&self, name: &str, schema: TableSchema) -> Result<()>;
    /// Brings a trashed table back (under `name`, or its old name);
    /// returns the name.
    fn undelete_table(&self, id: u64, name: Option<&str>) -> Result<String>;
    /// Deletes a trashed table for good.
    fn purge_trash(&self, id: u64) -> Result<()>;
    /// Makes new table `to` from snapshot `snapshot` of `table`.
    fn clone_snapshot(&self, table: &str, snapshot: &str, to: &str) -> Result<()>;
    /// Makes table `table` what its snapshot `snapshot` holds.
    fn restore_snapshot(&self, table: &str, snapshot: &str) -> Result<()>;
    /// Takes snapshot `name` of `table` (for a daemon that serves nothing
    /// and cannot reach the files: `crate::snapshot`'s operations); a
    /// manifest comes in its file's bytes (`Manifest::encode`).
    fn take_snapshot(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
        cluster: Option<&str>,
    ) -> Result<Vec<u8>>;
    /// Sets or clears snapshot `name`'s expiry; its manifest.
    fn set_snapshot_expiry(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
    ) -> Result<Vec<u8>>;
    /// The manifests of `table`'s snapshots.
    fn snapshot_manifests(&self, table: &str) -> Result<Vec<Vec<u8>>>;
    /// Snapshot `name` of `table`'s manifest.
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<Vec<u8>>;
    /// Deletes snapshot `name` of `table`.
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()>;
    /// Moves the tablet holding `row` of `table` to server `to`.
    fn move_tablet(&self, table: &str, row: &[u8], to: &str) -> Result<()>;
    /// A tablet server split `parent` into `children`.
    fn tablet_split(&self, server: &str, parent: u64, children: &[u64]);
    /// Wakes the master for a round now (a server joined).
    fn wake(&self);
    /// Simulates the loss of the master's machine.
    fn kill(&self);
    /// Status lines (`.bigtable/master`).
    fn report(&self) -> Vec<String>;
}

/// What a daemon does once its client wrote rows (installed by the daemon
/// that keeps other daemons' kernel caches coherent, docs/coherence.md).
pub trait AfterWrite: Send + Sync {
    /// Rows `rows` of table `table` were written through this daemon (or a
    /// write to them failed after it may have applied): returns once every
    /// other daemon that watches them has dropped what it caches of them,
    /// or its lease ran out.
    fn wrote(&self, table: &str, rows: &[&[u8]]);
    /// Table `table` was made, deleted, restored or its schema changed
    /// through this daemon: as [`AfterWrite::wrote`], for every row.
    fn changed_table(&self, table: &str);
    /// Its figures as `key=value` words, for `.bigtable/status`.
    fn status_line(&self) -> String;
}

/// How a daemon reaches tablet servers and masters that run in other
/// daemons (installed by the daemon that serves the internal RPC).
pub trait Dialer: Send + Sync {
    /// The tablet server `name`, wherever it runs; None if it is not
    /// registered or cannot be reached.
    fn server(&self, name: &str) -> Option<std::sync::Arc<dyn TabletService>>;
    /// Every registered tablet server's name.
    fn server_names(&self) -> Vec<String>;
    /// The master holding the master lock, wherever it runs.
    fn active_master(&self) -> Option<std::sync::Arc<dyn MasterService>>;
}
