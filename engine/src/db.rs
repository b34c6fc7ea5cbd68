//! The client API: a handle on the Bigtable running in this process.

use crate::catalog::TableEntry;
use crate::client::Client;
pub use crate::client::Scanner;
use crate::cluster::Cluster;
use crate::data::*;
use crate::env::Env;
use crate::iterator::VecIterator;
use crate::mutation::{self, validate_txn};
pub use crate::options::{Options, TabletInfo};
use crate::protocol::{Dialer, MasterService, TabletService};
use crate::read::CellReader;
use crate::scan::ScanSpec;
use crate::schema::TableSchema;
use crate::txn::{Guard, RowOp};
use crate::txn::{RowTxn, TxnOutcome};
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A handle on the Bigtable this process runs; cheap to clone, shareable
/// between threads. The last handle dropped stops the cluster (data stays
/// recoverable from the commit logs; call [`Bigtable::flush`] first for a
/// fast restart).
#[derive(Clone)]
pub struct Bigtable {
    inner: Arc<Handle>,
}

struct Handle {
    cluster: Arc<Cluster>,
    closed: AtomicBool,
    /// Snapshot views opened lately (the mount reads one a cell at a time).
    snapshot_views: crate::snapshot::view::Views,
    /// Backup stores and the copies to and from them.
    backups: crate::backup::Backups,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let _ = self.cluster.stop();
        }
    }
}

impl Bigtable {
    /// Opens (recovering from the commit logs) or creates the store in
    /// `files`, with a private lock-service cell.
    pub fn open(files: Arc<dyn gfs::FileStore>, opts: Options) -> Result<Bigtable> {
        Self::open_with_lock_service(files, None, opts)
    }

    /// Opens the store and coordinates through `lock` (master election,
    /// servers directory, root tablet location, schemas and ACLs): starts
    /// the tablet servers and masters and returns once every tablet is
    /// served.
    pub fn open_with_lock_service(
        files: Arc<dyn gfs::FileStore>,
        lock: Option<Arc<dyn chubby::LockService>>,
        opts: Options,
    ) -> Result<Bigtable> {
        let bt = Self::launch(files, lock, opts)?;
        if let Err(e) = bt.wait_ready(std::time::Duration::from_secs(120)) {
            let _ = bt.close();
            return Err(e);
        }
        Ok(bt)
    }

    /// Like [`Bigtable::open_with_lock_service`], but returns before the
    /// tablets are assigned; [`Bigtable::wait_ready`] waits for them.
    pub fn launch(
        files: Arc<dyn gfs::FileStore>,
        lock: Option<Arc<dyn chubby::LockService>>,
        opts: Options,
    ) -> Result<Bigtable> {
        Ok(Bigtable {
            inner: Arc::new(Handle {
                cluster: Cluster::launch(files, lock, opts)?,
                closed: AtomicBool::new(false),
                snapshot_views: Default::default(),
                backups: Default::default(),
            }),
        })
    }

    /// Waits until every tablet is served (at most `limit`).
    pub fn wait_ready(&self, limit: std::time::Duration) -> Result<()> {
        self.inner.cluster.wait_ready(limit)
    }

    /// Stops the cluster and syncs the logs; memtables are recovered from
    /// the logs on reopen. Further calls on any clone fail with ShuttingDown.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.cluster.stop()
    }

    /// The cluster behind this handle (servers, masters, METADATA).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.inner.cluster
    }

    pub(crate) fn client(&self) -> Result<&Arc<Client>> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        Ok(&self.inner.cluster.client)
    }

    pub(crate) fn env(&self) -> &Arc<Env> {
        &self.inner.cluster.env
    }

    pub(crate) fn table(&self, name: &str) -> Result<Arc<TableEntry>> {
        self.client()?;
        let cluster = &self.inner.cluster;
        match self.env().catalog.get(name) {
            // A daemon without an active master learns of tables made
            // elsewhere by reading METADATA again.
            Err(Error::TableNotFound(_)) if cluster.learns_catalog() => {
                cluster.refresh_catalog(true)?;
                self.env().catalog.get(name)
            }
            found => {
                cluster.refresh_catalog(false)?;
                found
            }
        }
    }

    /// Runs `f`; when it fails on a family this daemon does not know and
    /// this daemon learns the tables from METADATA (another daemon's master
    /// may have just added it), reads them again and runs `f` once more.
    fn with_fresh_schema<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        match f() {
            Err(e) if e.is_unknown_family() && self.inner.cluster.learns_catalog() => {
                self.inner.cluster.refresh_catalog(true)?;
                f()
            }
            r => r,
        }
    }

    /// Reads the tables and schemas from METADATA again, now, when this
    /// daemon learns them from there (one whose master is not the active
    /// one): what a lookup of a name it does not know does before saying
    /// it does not exist.
    pub fn refresh_tables(&self) -> Result<()> {
        if self.inner.cluster.learns_catalog() {
            self.inner.cluster.refresh_catalog(true)?;
        }
        Ok(())
    }

    /// Runs `f` on the active master, waiting for one during a failover;
    /// a daemon without a master then reads the tables again, so that what
    /// it just changed is what it sees.
    pub(crate) fn master<T>(&self, f: impl Fn(&dyn MasterService) -> Result<T>) -> Result<T> {
        let r = self.ask_master(f);
        if r.is_ok() {
            self.inner.cluster.refresh_catalog(true)?;
        }
        r
    }

    /// Runs `f` on the active master, retried as the client retries (a
    /// failover elects another meanwhile); the catalog is left as it is.
    pub(crate) fn ask_master<T>(&self, f: impl Fn(&dyn MasterService) -> Result<T>) -> Result<T> {
        let client = self.client()?;
        client.retry("master", || match self.env().active_master() {
            Some(m) => f(&*m),
            None => Err(Error::Unavailable("no active master".into())),
        })
    }

    /// Live tablet servers.
    fn servers(&self) -> Vec<Arc<dyn TabletService>> {
        self.env()
            .servers()
            .into_iter()
            .filter(|s| s.is_serving())
            .collect()
    }

    /// Creates a table with this schema (Error::TableExists if it exists).
    pub fn create_table(&self, name: &str, mut schema: TableSchema) -> Result<()> {
        // As it reads back (the stored form keeps only the order).
        schema.renumber();
        let r = self.master(|m| m.create_table(name, schema.clone()));
        self.env().changed_table(name);
        r
    }
    /// Deletes a table and all its data.
    pub fn delete_table(&self, name: &str) -> Result<()> {
        let r = self.master(|m| m.delete_table(name));
        self.env().changed_table(name);
        r
    }
    /// The names of every table.
    pub fn list_tables(&self) -> Vec<String> {
        if let Err(e) = self.inner.cluster.refresh_catalog(false) {
            log::warn!("cannot read the tables from METADATA: {e}");
        }
        self.env().catalog.names()
    }
    /// The table's current schema.
    pub fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        Ok(self.table(table)?.schema())
    }
    /// The largest value a mutation may write (`Options::max_value_size`):
    /// what [`crate::mutation::validate`] takes to check one as a batch would.
    pub fn max_value_size(&self) -> usize {
        self.env().opts.max_value_size
    }
    /// Replaces a table's schema; a dropped family must hold no data (Error::FamilyNotEmpty).
    pub fn set_schema(&self, table: &str, mut schema: TableSchema) -> Result<()> {
        schema.renumber();
        let r = self.master(|m| m.set_schema(table, schema.clone()));
        self.env().changed_table(table);
        r
    }
    /// Applies one row's mutations atomically; returns what it wrote (its
    /// timestamp and size: no need to read it back).
    pub fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<Written> {
        self.apply_batch(table, std::slice::from_ref(m), opts)
            .map_err(unwrap_batch_error)
    }
    /// Validates every mutation first (nothing applied on error); then
    /// applies each row's atomically; returns what they wrote.
    pub fn apply_batch(
        &self,
        table: &str,
        ms: &[RowMutation],
        opts: WriteOptions,
    ) -> Result<Written> {
        self.with_fresh_schema(|| self.apply_batch_once(table, ms, opts))
    }
    fn apply_batch_once(
        &self,
        table: &str,
        ms: &[RowMutation],
        opts: WriteOptions,
    ) -> Result<Written> {
        let t = self.table(table)?;
        mutation::validate_batch(&t.schema(), ms, self.env().opts.max_value_size)
            .map_err(|e| e.in_table(&t.name))?;
        if ms.is_empty() {
            return Ok(Written::default());
        }
        let written = self.client()?.apply(t.id, ms, opts.sync);
        let rows: Vec<&[u8]> = ms.iter().map(|m| m.row.as_slice()).collect();
        self.env().wrote(&t.name, &rows);
        written
    }
    /// Validates every transaction first; then runs each atomically on its row.
    pub fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        self.with_fresh_schema(|| self.apply_txns_once(table, txns, opts))
    }
    fn apply_txns_once(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        let t = self.table(table)?;
        let schema = t.schema();
        for (i, x) in txns.iter().enumerate() {
            validate_txn(&t.name, &schema, x, self.env().opts.max_value_size).map_err(|e| {
                Error::BadBatchEntry {
                    index: i,
                    source: Box::new(e),
                }
            })?;
        }
        if txns.is_empty() {
            return Ok(Vec::new());
        }
        let outcomes = self.client()?.apply_txns(t.id, txns, opts.sync);
        let rows: Vec<&[u8]> = txns.iter().map(|x| x.row.as_slice()).collect();
        self.env().wrote(&t.name, &rows);
        outcomes
    }
    fn one_txn(&self, table: &str, txn: RowTxn, opts: WriteOptions) -> Result<TxnOutcome> {
        let mut out = self
            .apply_txns(table, std::slice::from_ref(&txn), opts)
            .map_err(unwrap_batch_error)?;
        out.pop()
            .ok_or_else(|| Error::corruption("transaction produced no outcome"))
    }
    /// Adds `delta` to a big-endian i64 counter; returns the new value.
    pub fn increment(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        delta: i64,
        opts: WriteOptions,
    ) -> Result<i64> {
        let txn = RowTxn::new(
            row,
            vec![RowOp::Increment {
                family: family.to_string(),
                qualifier: qualifier.to_vec(),
                delta,
            }],
        );
        let out = self.one_txn(table, txn, opts)?;
        let v = out
            .results
            .first()
            .ok_or_else(|| Error::corruption("increment produced no value"))?;
        let bytes: [u8; 8] = v
            .as_slice()
            .try_into()
            .map_err(|_| Error::NotACounter(v.len()))?;
        Ok(i64::from_be_bytes(bytes))
    }
    /// Appends to a cell's newest value; returns the new value.
    pub fn append(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        data: &[u8],
        opts: WriteOptions,
    ) -> Result<Vec<u8>> {
        let txn = RowTxn::new(
            row,
            vec![RowOp::Append {
                family: family.to_string(),
                qualifier: qualifier.to_vec(),
                data: data.to_vec(),
            }],
        );
        let mut out = self.one_txn(table, txn, opts)?;
        out.results
            .pop()
            .ok_or_else(|| Error::corruption("append produced no value"))
    }
    /// Applies `on_match` if the condition holds, else `on_no_match`; returns whether it held.
    pub fn check_and_mutate(
        &self,
        table: &str,
        row: &[u8],
        cond: &Condition,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
        opts: WriteOptions,
    ) -> Result<bool> {
        let guard = cond.clone().into();
        self.guarded(table, row, guard, on_match, on_no_match, opts)
    }
    /// Cloud Bigtable's `CheckAndMutateRow`: applies `on_match` if `predicate`
    /// outputs any cell of the row, else `on_no_match`, atomically; returns
    /// whether it matched.
    pub fn check_and_mutate_filter(
        &self,
        table: &str,
        row: &[u8],
        predicate: &crate::filter::RowFilter,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
        opts: WriteOptions,
    ) -> Result<bool> {
        let guard = predicate.clone().into();
        self.guarded(table, row, guard, on_match, on_no_match, opts)
    }
    /// Applies `on_match` if `guard` holds on the row, else `on_no_match`,
    /// atomically; returns whether it held.
    fn guarded(
        &self,
        table: &str,
        row: &[u8],
        guard: Guard,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
        opts: WriteOptions,
    ) -> Result<bool> {
        let txn = RowTxn {
            row: row.to_vec(),
            guard: Some(guard),
            ops: on_match.into_iter().map(RowOp::Mutate).collect(),
            otherwise: on_no_match.into_iter().map(RowOp::Mutate).collect(),
        };
        Ok(self.one_txn(table, txn, opts)?.guard_held)
    }
    /// The visible cells of one row selected by `spec` (its row range is ignored).
    pub fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let t = self.table(table)?;
        check_spec(spec)?;
        self.client()?.read_row(t.id, row, spec)
    }
    /// [`Bigtable::read_row`], in one call to the row's tablet server,
    /// and if the row has no cell `spec` selects, how far after it no row
    /// has one (up to the next row or the end of the row's tablet): what
    /// the mount's lookup of a new row learns for the new rows after it.
    pub fn peek_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        let t = self.table(table)?;
        check_spec(spec)?;
        self.client()?.peek_row(t.id, row, spec)
    }
    /// The newest visible version of one cell.
    pub fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        Ok(self
            .read_value(table, row, family, qualifier)?
            .map(|v| v.into_cell(row, family, qualifier)))
    }
    /// [`Bigtable::read_cell`]'s timestamp and value alone: what a caller
    /// that named the cell needs (no copy of its row, family or qualifier).
    pub fn read_value(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Version>> {
        Ok(self
            .read_versions(table, row, family, qualifier, Some(1))?
            .pop())
    }
    /// The newest `max_versions` visible versions of one column, newest first (all if None).
    pub fn read_column(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        max_versions: Option<u32>,
    ) -> Result<Vec<Cell>> {
        let versions = self.read_versions(table, row, family, qualifier, max_versions)?;
        Ok(versions
            .into_iter()
            .map(|v| v.into_cell(row, family, qualifier))
            .collect())
    }
    /// [`Bigtable::read_column`]'s timestamps and values alone.
    pub fn read_versions(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        max_versions: Option<u32>,
    ) -> Result<Vec<Version>> {
        self.with_fresh_schema(|| {
            let client = self.client()?;
            let catalog = &self.env().catalog;
            let id = catalog.id_of(table)?;
            if row.len() > MAX_ROW_KEY {
                return Err(Error::RowKeyTooLong(row.len()));
            }
            let column = ColumnRead {
                row,
                family,
                qualifier,
                max_versions,
            };
            let versions = client.read_column(id, column)?;
            // A family the server does not know reads as nothing: only then is
            // the family looked up here, to say so (a cell found needs no check,
            // which saved a schema load and a lookup per read).
            if versions.is_empty()
                && !catalog.with(table, |t| t.schema_now().families.contains_key(family))?
            {
                return Err(Error::UnknownFamily {
                    table: table.to_string(),
                    family: family.to_string(),
                });
            }
            Ok(versions)
        })
    }
    /// A streaming scan in row order; each tablet's part is a consistent
    /// snapshot taken when the scan reaches it.
    pub fn scan(&self, table: &str, spec: ScanSpec) -> Result<Scanner> {
        let t = self.table(table)?;
        // Validate the spec (regex) once up front.
        CellReader::new(
            Box::new(VecIterator::new(Arc::new(Vec::new()))),
            &spec,
            t.schema(),
            0,
            0,
        )?;
        Ok(Scanner::new(self.client()?.clone(), t.id, spec))
    }
    /// fsyncs every tablet server's commit log: everything applied so far
    /// survives power loss.
    pub fn sync(&self) -> Result<()> {
        self.client()?;
        for s in self.servers() {
            s.sync()?;
        }
        Ok(())
    }
    /// Writes every memtable out (minor compaction) and waits; every write
    /// acknowledged before the call is durable when it returns.
    pub fn flush(&self) -> Result<()> {
        self.client()?;
        for s in self.servers() {
            s.flush(None)?;
        }
        Ok(())
    }
    /// Compacts every tablet of a table (major: all SSTables into one per group) and waits.
    pub fn compact(&self, table: &str, major: bool) -> Result<()> {
        let t = self.table(table)?;
        for s in self.servers() {
            s.compact(t.id, major)?;
        }
        Ok(())
    }
    /// Splits tablets past the split threshold now (it also happens in the background).
    pub fn split_now(&self, table: &str) -> Result<()> {
        let t = self.table(table)?;
        for s in self.servers() {
            s.split_now(t.id)?;
        }
        Ok(())
    }
    /// Splits the table's tablets at `rows` (those inside a tablet; the
    /// master then spreads the tablets as it balances load).
    pub fn split_at_rows(&self, table: &str, rows: &[Vec<u8>]) -> Result<()> {
        let t = self.table(table)?;
        for s in self.servers() {
            s.split_at_rows(t.id, rows)?;
        }
        Ok(())
    }
    /// The served tablets of a table, in row order.
    pub fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        let t = self.table(table)?;
        let mut out: Vec<TabletInfo> = self
            .servers()
            .iter()
            .flat_map(|s| s.tablet_infos().unwrap_or_default())
            .filter(|i| i.table == t.name)
            .collect();
        out.sort_by(|a, b| a.start.cmp(&b.start));
        Ok(out)
    }
    /// Status lines (`key=value` words) for `.bigtable/status`.
    pub fn status(&self) -> Vec<String> {
        let env = self.env();
        let mut lines = vec![
            format!(
                "tables={} tablet_servers={} master={}",
                env.catalog.names().len(),
                self.servers().len(),
                crate::coordination::master_name(&*env.lock)
            ),
            self.inner.cluster.client.status_line(),
            crate::status::kv(&env.block_cache.stats(), "block_cache_"),
            crate::status::kv(&env.scan_cache.stats(), "scan_cache_"),
        ];
        for s in self.servers() {
            match s.commit_line() {
                Ok(l) => lines.push(l),
                Err(e) => lines.push(format!("server={} error={e:?}", s.name())),
            }
        }
        lines.extend(env.store.status());
        lines.extend(env.after_write_status());
        lines
    }
    /// Group-commit figures summed over the live tablet servers
    /// (`max_batch`: the largest batch any of them committed).
    pub fn group_commit_stats(&self) -> crate::group_commit::GroupCommitStats {
        let mut t = crate::group_commit::GroupCommitStats::default();
        for s in self.servers() {
            let Ok(g) = s.group_commit_stats() else {
                continue;
            };
            t.batches += g.batches;
            t.items += g.items;
            t.syncs += g.syncs;
            t.max_batch = t.max_batch.max(g.max_batch);
        }
        t
    }
    /// One line per tablet server (`.bigtable/servers`).
    pub fn servers_report(&self) -> Vec<String> {
        self.server_reports()
            .iter()
            .map(|r| {
                let line = r.line();
                // Where other daemons reach it, when they can.
                match crate::coordination::server_address(&*self.env().lock, &r.name) {
                    Some(a) => format!("{line} addr={a}"),
                    None => line,
                }
            })
            .collect()
    }
    /// Every tablet server's figures, with what its background threads are
    /// doing (the console's status page; `.bigtable/servers` prints them).
    /// One that cannot be reached is reported as `unreachable`.
    pub fn server_reports(&self) -> Vec<crate::ServerReport> {
        self.env()
            .servers()
            .iter()
            .map(|s| {
                s.report().unwrap_or_else(|e| {
                    log::debug!("no report from {}: {e}", s.name());
                    crate::ServerReport {
                        name: s.name().to_string(),
                        state: "unreachable".into(),
                        ..Default::default()
                    }
                })
            })
            .collect()
    }
    /// The masters (`.bigtable/master`).
    pub fn master_report(&self) -> Vec<String> {
        self.env()
            .masters()
            .iter()
            .flat_map(|m| m.report())
            .collect()
    }
    // ------------------------------------------------------------ cluster

    /// This daemon's live tablet server `name` (what the internal RPC
    /// service answers for).
    pub fn local_server(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        self.inner.cluster.local_server(name)
    }
    /// This daemon's master, if it is the active one.
    pub fn local_master(&self) -> Option<Arc<dyn MasterService>> {
        self.inner.cluster.local_master()
    }
    /// Installs how servers and masters of other daemons are reached; with
    /// `dial_local`, this daemon's own are reached that way too.
    pub fn set_dialer(&self, dialer: Box<dyn Dialer>, dial_local: bool) {
        self.env().set_dialer(dialer, dial_local);
    }
    /// Installs what is told of every write this daemon makes (cache
    /// coherence between daemons).
    pub fn set_after_write(&self, hook: Box<dyn crate::protocol::AfterWrite>) {
        self.env().set_after_write(hook);
    }
    /// The lock service the cluster coordinates through.
    pub fn lock_service(&self) -> Arc<dyn chubby::LockService> {
        self.env().lock.clone()
    }
    /// The snapshot views this handle opened lately.
    pub(crate) fn snapshot_views(&self) -> &crate::snapshot::view::Views {
        &self.inner.snapshot_views
    }
    /// The backup stores and copies of this handle.
    pub(crate) fn backups(&self) -> &crate::backup::Backups {
        &self.inner.backups
    }
    /// Runs an operator command: `kill <server>`, `kill-master`,
    /// `move <table> <row> <server>`, `split <table> <row>`,
    /// `delete <table>` (whole, into the trash), `undelete <id> [<name>]`,
    /// `purge <id>`, `gc` (a garbage collection now),
    /// `clone <table> <snapshot> <new table>`, `restore <table> <snapshot>`,
    /// `backup <table> <snapshot> <store>`, `copy-backup <store> <table>
    /// <backup> <to store>`, `restore-backup <store> <table> <backup> <new
    /// table>`, `delete-backup <store> <table> <backup>`.
    pub fn control(&self, command: &str) -> Result<()> {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["kill", server] => self.inner.cluster.kill_server(server),
            ["kill-master"] => self.master(|m| {
                m.kill();
                Ok(())
            }),
            ["move", table, row, server] => {
                self.master(|m| m.move_tablet(table, row.as_bytes(), server))
            }
            ["split", table, row] => self.split_at_rows(table, &[row.as_bytes().to_vec()]),
            ["undelete", id, name @ ..] if name.len() <= 1 => self
                .undelete_table(trash_id(id)?, name.first().copied())
                .map(|t| self.env().changed_table(&t)),
            ["purge", id] => self.purge_trash(trash_id(id)?),
            ["delete", table] => self.delete_table(table),
            ["gc"] => {
                self.inner.cluster.collect_garbage()?;
                self.collect_expired_backups().map(|_| ())
            }
            ["clone", table, snapshot, to] => self
                .clone_snapshot(table, snapshot, to)
                .map(|()| self.env().changed_table(to)),
            ["restore", table, snapshot] => self
                .restore_snapshot(table, snapshot)
                .map(|()| self.env().changed_table(table)),
            // Copies run in the background (`.bigtable/backups`).
            ["backup", table, snapshot, store] => {
                self.start_copy_backup(crate::backup::Source::Snapshot, table, snapshot, store)
            }
            ["copy-backup", store, table, name, to] => {
                self.start_copy_backup(crate::backup::Source::Store(store), table, name, to)
            }
            ["restore-backup", store, table, name, to] => {
                self.start_restore_backup(store, table, name, to)
            }
            ["delete-backup", store, table, name] => self.delete_backup(store, table, name),
            _ => Err(Error::invalid(format!(
                "unknown command {command:?}: use `kill <server>`, `kill-master`, \
                 `move <table> <row> <server>`, `split <table> <row>`, \
                 `delete <table>`, `undelete <id> [<name>]`, `purge <id>`, `gc`, \
                 `clone <table> <snapshot> <new table>`, `restore <table> <snapshot>`, \
                 `backup <table> <snapshot> <store>`, \
                 `copy-backup <store> <table> <backup> <to store>`, \
                 `restore-backup <store> <table> <backup> <new table>` or \
                 `delete-backup <store> <table> <backup>`"
            ))),
        }
    }
}

/// A trash entry's id as a `.bigtable/control` command gives it.
fn trash_id(s: &str) -> Result<u64> {
    s.parse().map_err(|_| {
        Error::invalid(format!(
            "{s:?} is not a trash entry's id (see .bigtable/trash)"
        ))
    })
}

/// A one-entry batch reports its error as itself, not as "batch entry 0".
fn unwrap_batch_error(e: Error) -> Error {
    match e {
        Error::BadBatchEntry { source, .. } => *source,
        e => e,
    }
}

/// Fails on a column regex or filter of `spec` that would not compile, here
/// rather than in the tablet server.
fn check_spec(spec: &ScanSpec) -> Result<()> {
    if let Some(r) = &spec.column_regex {
        crate::read::compile_column_regex(r)?;
    }
    if let Some(f) = &spec.filter {
        f.compile()?;
    }
    Ok(())
}
