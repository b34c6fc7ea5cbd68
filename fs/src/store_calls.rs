//! The calls the mount makes to the store, per method (`.bigtable/stats`):
//! what one `cat` or `echo x > cell` costs in tablet-server calls, beside
//! the FUSE requests `counts.rs` counts. [`Counted`] wraps the store and
//! counts each call with a relaxed atomic add; it also drops what the row
//! memo keeps of every row it writes (`row_memo.rs`).

use crate::row_memo::{CellSeen, RowMemo};
use crate::store::{RowStream, Store};
use engine::schema::TableSchema;
use engine::{
    Cell, Mutation, Result, RowMutation, RowPeek, RowTxn, ScanSpec, TabletInfo, TxnOutcome,
    WriteOptions, Written,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The store's methods that are counted, by their name in `.bigtable/stats`
/// (`store_<name>=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Apply,
    ApplyTxns,
    ReadRow,
    PeekRow,
    ReadCell,
    Scan,
    Sync,
    Schema,
    SetSchema,
    ListTables,
    CreateTable,
    DeleteTable,
    RefreshTables,
    Tablets,
}

impl Call {
    /// Every counted method, in `.bigtable/stats` order.
    pub const ALL: [Call; 14] = [
        Call::Apply,
        Call::ApplyTxns,
        Call::ReadRow,
        Call::PeekRow,
        Call::ReadCell,
        Call::Scan,
        Call::Sync,
        Call::Schema,
        Call::SetSchema,
        Call::ListTables,
        Call::CreateTable,
        Call::DeleteTable,
        Call::RefreshTables,
        Call::Tablets,
    ];

    /// The method's name.
    pub fn name(self) -> &'static str {
        match self {
            Call::Apply => "apply",
            Call::ApplyTxns => "apply_txns",
            Call::ReadRow => "read_row",
            Call::PeekRow => "peek_row",
            Call::ReadCell => "read_cell",
            Call::Scan => "scan",
            Call::Sync => "sync",
            Call::Schema => "schema",
            Call::SetSchema => "set_schema",
            Call::ListTables => "list_tables",
            Call::CreateTable => "create_table",
            Call::DeleteTable => "delete_table",
            Call::RefreshTables => "refresh_tables",
            Call::Tablets => "tablets",
        }
    }

    /// Whether the call goes to the tablet server of a row (the others
    /// are answered by the client's cached metadata or the master).
    pub fn reaches_tablet_server(self) -> bool {
        matches!(
            self,
            Call::Apply
                | Call::ApplyTxns
                | Call::ReadRow
                | Call::PeekRow
                | Call::ReadCell
                | Call::Scan
        )
    }
}

/// Calls made so far, per method.
#[derive(Default)]
pub struct StoreCalls {
    counts: [AtomicU64; Call::ALL.len()],
}

impl StoreCalls {
    fn add(&self, c: Call) {
        self.counts[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Calls of `c` so far.
    pub fn get(&self, c: Call) -> u64 {
        self.counts[c as usize].load(Ordering::Relaxed)
    }

    /// Calls that reached a tablet server so far (reads, writes, scans).
    pub fn tablet_calls(&self) -> u64 {
        Call::ALL
            .into_iter()
            .filter(|c| c.reaches_tablet_server())
            .map(|c| self.get(c))
            .sum()
    }
}

/// A store whose calls are counted, and whose writes drop what the row
/// memo keeps of the rows written.
pub struct Counted {
    inner: Arc<dyn Store>,
    calls: StoreCalls,
    memo: RowMemo,
}

impl Counted {
    pub fn new(inner: Arc<dyn Store>) -> Counted {
        Counted {
            inner,
            calls: StoreCalls::default(),
            memo: RowMemo::default(),
        }
    }

    /// The calls made so far.
    pub fn calls(&self) -> &StoreCalls {
        &self.calls
    }

    /// The cells lookups read lately, dropped as their rows are written.
    pub fn memo(&self) -> &RowMemo {
        &self.memo
    }

    fn count(&self, c: Call) -> &dyn Store {
        self.calls.add(c);
        if c.reaches_tablet_server() {
            crate::counts::call_made();
        }
        self.inner.as_ref()
    }
}

impl Store for Counted {
    fn list_tables(&self) -> Vec<String> {
        self.count(Call::ListTables).list_tables()
    }
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        let r = self.count(Call::CreateTable).create_table(name, schema);
        self.memo.forget_all();
        r
    }
    fn delete_table(&self, name: &str) -> Result<()> {
        let r = self.count(Call::DeleteTable).delete_table(name);
        self.memo.forget_all();
        r
    }
    fn refresh_tables(&self) -> Result<()> {
        self.count(Call::RefreshTables).refresh_tables()
    }
    fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        self.count(Call::Schema).schema(table)
    }
    fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()> {
        let r = self.count(Call::SetSchema).set_schema(table, schema);
        self.memo.forget_all();
        r
    }
    fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<Written> {
        let before = self.memo.epoch(table, &m.row);
        let r = self.count(Call::Apply).apply(table, m, opts);
        let after = self.memo.forget_row(table, &m.row);
        // Cells set at the server's time, with no other write to the row's
        // stripe meanwhile: their row and families exist now.
        if r.is_ok() && after == before + 1 {
            let fams: Option<Vec<String>> = m
                .mutations
                .iter()
                .map(|x| match x {
                    // A version of its own time may be one GC hides at once.
                    Mutation::SetCell {
                        family,
                        timestamp: None,
                        ..
                    } => Some(family.clone()),
                    _ => None,
                })
                .collect();
            if let (Some(fams), Ok(w)) = (fams.filter(|f| !f.is_empty()), &r) {
                // One cell set: the reply says its version and size.
                let cell = match m.mutations.as_slice() {
                    [Mutation::SetCell {
                        family,
                        qualifier,
                        value,
                        ..
                    }] => Some(CellSeen {
                        family: family.clone(),
                        qualifier: qualifier.clone(),
                        timestamp: w.timestamp,
                        len: value.len() as u64,
                    }),
                    _ => None,
                };
                self.memo.keep_written(table, &m.row, fams, cell, after);
            }
        }
        r
    }
    fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        let r = self.count(Call::ApplyTxns).apply_txns(table, txns, opts);
        for t in txns {
            let _ = self.memo.forget_row(table, &t.row);
        }
        r
    }
    fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        self.count(Call::ReadRow).read_row(table, row, spec)
    }
    fn peek_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        self.count(Call::PeekRow).peek_row(table, row, spec)
    }
    fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        self.count(Call::ReadCell)
            .read_cell(table, row, family, qualifier)
    }
    fn scan(&self, table: &str, spec: ScanSpec) -> Result<Box<dyn RowStream>> {
        self.count(Call::Scan).scan(table, spec)
    }
    fn read_changes(
        &self,
        table: &str,
        q: &engine::changes::ChangeQuery,
    ) -> Result<engine::changes::ChangeBatch> {
        self.count(Call::Scan).read_changes(table, q)
    }
    fn sync(&self) -> Result<()> {
        self.count(Call::Sync).sync()
    }
    fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        self.count(Call::Tablets).tablets(table)
    }
    fn status(&self) -> Vec<String> {
        self.inner.status()
    }
    fn servers_report(&self) -> Vec<String> {
        self.inner.servers_report()
    }
    fn master_report(&self) -> Vec<String> {
        self.inner.master_report()
    }
    fn control(&self, command: &str) -> Result<()> {
        let r = self.inner.control(command);
        // A command may change data (`restore`, `undelete`): nothing read
        // before it answers for after.
        self.memo.forget_all();
        r
    }
    fn backups_report(&self) -> Vec<String> {
        self.inner.backups_report()
    }
    fn trash(&self) -> Result<Vec<(engine::TrashEntry, engine::TrashCost)>> {
        self.inner.trash()
    }
    fn snapshots(&self, table: &str) -> Result<Vec<(String, u64)>> {
        self.inner.snapshots(table)
    }
    fn take_snapshot(&self, table: &str, name: &str) -> Result<()> {
        self.inner.take_snapshot(table, name)
    }
    fn take_snapshot_expiring(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        self.inner
            .take_snapshot_expiring(table, name, expire_micros)
    }
    fn trash_period(&self) -> std::time::Duration {
        self.inner.trash_period()
    }
    fn set_snapshot_expiry(&self, table: &str, name: &str, expire_micros: u64) -> Result<()> {
        self.inner.set_snapshot_expiry(table, name, expire_micros)
    }
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<engine::snapshot::Manifest> {
        self.inner.snapshot_manifest(table, name)
    }
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        self.inner.delete_snapshot(table, name)
    }
    fn snapshot_taken(&self, table: &str, name: &str) -> Result<u64> {
        self.inner.snapshot_taken(table, name)
    }
}
