//! What the filesystem needs from Bigtable, as a trait: the engine's client
//! implements it, and the tests implement it in memory (as mountpoint-s3 tests
//! its filesystem against a mock client), so every operation of the
//! filesystem can be tested without a mount.

use crate::names::split_snapshot_table;
use engine::schema::TableSchema;
use engine::snapshot::SnapshotView;
use engine::{
    Cell, Result, RowMutation, RowPeek, RowTxn, ScanSpec, TabletInfo, TxnOutcome, WriteOptions,
    Written,
};
use std::sync::Arc;

/// A stream of rows from a scan.
pub trait RowStream: Send {
    /// The next row with its selected cells, in row order.
    fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>>;

    /// The next row's key alone; a stream that can skip the row's cells
    /// does (a listing's scan, whose filter keeps each row's first cell).
    fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.next_row()?.map(|(row, _)| row))
    }
}

/// The client operations the filesystem uses.
pub trait Store: Send + Sync + 'static {
    /// Names of all tables, in order (the mount's root directory).
    fn list_tables(&self) -> Vec<String>;
    /// Creates a table with `schema` (mkdir at the root).
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()>;
    /// Deletes a table and all its data (rmdir at the root).
    fn delete_table(&self, name: &str) -> Result<()>;
    /// Reads the tables and schemas again from where they are kept, when
    /// this mount may have a stale copy (another machine's daemon changes
    /// them): a lookup does this before it says a family does not exist.
    fn refresh_tables(&self) -> Result<()> {
        Ok(())
    }
    /// A table's current schema (its families and their settings).
    fn schema(&self, table: &str) -> Result<Arc<TableSchema>>;
    /// Replaces a table's schema (writes to `.schema`, family mkdir and rmdir).
    fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()>;
    /// Applies one row's mutations atomically; returns what it wrote.
    fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<Written>;
    /// Applies several rows' transactions, each atomic on its row, in one
    /// commit (a `.mutate` batch); returns each one's outcome in order.
    fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>>;
    /// The cells of one row that `spec` selects.
    fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>>;
    /// [`Store::read_row`], and if the row has none of those cells, how
    /// far after it no row has one (see [`engine::Bigtable::peek_row`]).
    fn peek_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        Ok(RowPeek::of_row(row, self.read_row(table, row, spec)?))
    }
    /// The newest version of one cell, if any.
    fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>>;
    /// The rows `spec` selects, read as the stream is pulled.
    fn scan(&self, table: &str, spec: ScanSpec) -> Result<Box<dyn RowStream>>;
    /// The next changes of a table that keeps a change log (`.changes/`).
    fn read_changes(
        &self,
        table: &str,
        q: &engine::changes::ChangeQuery,
    ) -> Result<engine::changes::ChangeBatch> {
        let _ = q;
        Err(engine::Error::invalid(format!(
            "table {table} keeps no change log in this store"
        )))
    }
    /// Makes every write applied so far durable.
    fn sync(&self) -> Result<()>;
    /// A table's tablets and their servers (`.bigtable/tables`, `.bigtable/tablets`).
    fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>>;
    /// Human-readable lines about the store (`.bigtable/status`).
    fn status(&self) -> Vec<String>;
    /// One `key=value` line per tablet server (`.bigtable/servers`).
    fn servers_report(&self) -> Vec<String> {
        Vec::new()
    }
    /// The masters (`.bigtable/master`).
    fn master_report(&self) -> Vec<String> {
        Vec::new()
    }
    /// The deleted tables kept in the trash (`.bigtable/trash`).
    fn trash(&self) -> Result<Vec<(engine::TrashEntry, engine::TrashCost)>> {
        Ok(Vec::new())
    }
    /// `.bigtable/backups`: copies under way, and the backup stores' backups.
    fn backups_report(&self) -> Vec<String> {
        Vec::new()
    }
    /// Runs an operator command written to `.bigtable/control`.
    fn control(&self, command: &str) -> Result<()> {
        Err(engine::Error::invalid(format!(
            "this store takes no commands ({command:?})"
        )))
    }
    /// The snapshots of `table`, by name, with when each was taken (µs).
    fn snapshots(&self, table: &str) -> Result<Vec<(String, u64)>> {
        Err(engine::Error::invalid(format!(
            "this store keeps no snapshots ({table})"
        )))
    }
    /// Takes snapshot `name` of `table`.
    fn take_snapshot(&self, table: &str, name: &str) -> Result<()> {
        Err(engine::Error::invalid(format!(
            "this store keeps no snapshots ({table}/{name})"
        )))
    }
    /// Takes snapshot `name` of `table`, which the master collects once
    /// `expire_micros` (µs since the epoch) has passed.
    fn take_snapshot_expiring(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        let _ = expire_micros;
        Err(engine::Error::invalid(format!(
            "this store keeps no snapshots ({table}/{name})"
        )))
    }
    /// Sets snapshot `name` of `table` to expire at `expire_micros`.
    fn set_snapshot_expiry(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        let _ = expire_micros;
        Err(engine::Error::SnapshotNotFound(format!("{table}/{name}")))
    }
    /// Snapshot `name` of `table`'s manifest (its table's id, when it was
    /// taken, its expiry).
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<engine::snapshot::Manifest> {
        Err(engine::Error::SnapshotNotFound(format!("{table}/{name}")))
    }
    /// How long a deleted table stays in the trash (zero: no trash, and
    /// removals take no snapshot).
    fn trash_period(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Deletes snapshot `name` of `table`.
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        Err(engine::Error::invalid(format!(
            "this store keeps no snapshots ({table}/{name})"
        )))
    }
    /// When snapshot `name` of `table` was taken (µs since the epoch).
    fn snapshot_taken(&self, table: &str, name: &str) -> Result<u64> {
        Err(engine::Error::SnapshotNotFound(format!("{table}/{name}")))
    }
}

/// A table name that stands for a snapshot, opened.
fn snapshot_of(bt: &engine::Bigtable, table: &str) -> Result<Option<SnapshotView>> {
    match split_snapshot_table(table) {
        Some((t, s)) => Ok(Some(bt.snapshot_view(t, s)?)),
        None => Ok(None),
    }
}

impl RowStream for engine::Scanner {
    fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        engine::Scanner::next_row(self)
    }
    fn next_row_key(&mut self) -> Result<Option<Vec<u8>>> {
        engine::Scanner::next_row_key(self)
    }
}

impl Store for engine::Bigtable {
    fn list_tables(&self) -> Vec<String> {
        engine::Bigtable::list_tables(self)
    }
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        engine::Bigtable::create_table(self, name, schema)
    }
    fn refresh_tables(&self) -> Result<()> {
        engine::Bigtable::refresh_tables(self)
    }
    fn delete_table(&self, name: &str) -> Result<()> {
        engine::Bigtable::delete_table(self, name)
    }
    fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        match split_snapshot_table(table) {
            Some((t, s)) => self.snapshot_schema(t, s),
            None => engine::Bigtable::schema(self, table),
        }
    }
    fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()> {
        engine::Bigtable::set_schema(self, table, schema)
    }
    fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<Written> {
        engine::Bigtable::apply(self, table, m, opts)
    }
    fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        engine::Bigtable::apply_txns(self, table, txns, opts)
    }
    fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        match snapshot_of(self, table)? {
            Some(v) => v.read_row(row, spec),
            None => engine::Bigtable::read_row(self, table, row, spec),
        }
    }
    fn peek_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        match snapshot_of(self, table)? {
            Some(v) => Ok(RowPeek::of_row(row, v.read_row(row, spec)?)),
            None => engine::Bigtable::peek_row(self, table, row, spec),
        }
    }
    fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        match snapshot_of(self, table)? {
            Some(v) => {
                let spec = ScanSpec {
                    families: Some(vec![family.to_string()]),
                    max_versions: Some(1),
                    ..ScanSpec::default()
                };
                let cells = v.read_row(row, &spec)?;
                Ok(cells.into_iter().find(|c| c.qualifier == qualifier))
            }
            None => engine::Bigtable::read_cell(self, table, row, family, qualifier),
        }
    }
    fn read_changes(
        &self,
        table: &str,
        q: &engine::changes::ChangeQuery,
    ) -> Result<engine::changes::ChangeBatch> {
        engine::Bigtable::read_changes(self, table, q)
    }
    fn scan(&self, table: &str, spec: ScanSpec) -> Result<Box<dyn RowStream>> {
        match snapshot_of(self, table)? {
            Some(v) => Ok(Box::new(v.scan(spec)?)),
            None => Ok(Box::new(engine::Bigtable::scan(self, table, spec)?)),
        }
    }
    fn sync(&self) -> Result<()> {
        engine::Bigtable::sync(self)
    }
    fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        engine::Bigtable::tablets(self, table)
    }
    fn status(&self) -> Vec<String> {
        engine::Bigtable::status(self)
    }
    fn trash(&self) -> Result<Vec<(engine::TrashEntry, engine::TrashCost)>> {
        engine::Bigtable::trash(self)
    }
    fn servers_report(&self) -> Vec<String> {
        engine::Bigtable::servers_report(self)
    }
    fn master_report(&self) -> Vec<String> {
        engine::Bigtable::master_report(self)
    }
    fn control(&self, command: &str) -> Result<()> {
        engine::Bigtable::control(self, command)
    }
    fn backups_report(&self) -> Vec<String> {
        engine::Bigtable::backups_report(self)
    }
    fn snapshots(&self, table: &str) -> Result<Vec<(String, u64)>> {
        let list = engine::Bigtable::list_snapshots(self, table)?;
        Ok(list.into_iter().map(|s| (s.name, s.taken_micros)).collect())
    }
    fn take_snapshot(&self, table: &str, name: &str) -> Result<()> {
        engine::Bigtable::take_snapshot(self, table, name).map(|_| ())
    }
    fn take_snapshot_expiring(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        engine::Bigtable::take_snapshot_expiring(self, table, name, Some(expire_micros), None)
            .map(|_| ())
    }
    fn trash_period(&self) -> std::time::Duration {
        engine::Bigtable::trash_period(self)
    }
    fn set_snapshot_expiry(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        engine::Bigtable::set_snapshot_expiry(self, table, name, Some(expire_micros)).map(|_| ())
    }
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<engine::snapshot::Manifest> {
        engine::Bigtable::snapshot_manifest(self, table, name)
    }
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        engine::Bigtable::delete_snapshot(self, table, name)
    }
    fn snapshot_taken(&self, table: &str, name: &str) -> Result<u64> {
        engine::Bigtable::snapshot_taken(self, table, name)
    }
}
