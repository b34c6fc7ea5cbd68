//! The client API: a handle on the Bigtable running in this process.

use crate::data::*;
use crate::schema::TableSchema;
pub use crate::server::Scanner;
use crate::server::Server;
use crate::txn::RowOp;
use crate::txn::{RowTxn, TxnOutcome};
use crate::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Tuning of the engine. Defaults suit production; tests shrink the sizes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Largest cell value accepted (EFBIG above it in the mount).
    pub max_value_size: usize,
    /// A tablet's memtable is frozen and written out (minor compaction) past this size.
    pub memtable_bytes: usize,
    /// A tablet splits when its SSTables pass this size.
    pub split_bytes: u64,
    /// Block cache capacity.
    pub block_cache_bytes: u64,
    /// Scan cache capacity.
    pub scan_cache_bytes: u64,
    /// The commit log rolls to a new file past this size.
    pub log_file_bytes: u64,
    /// A log append slower than this switches to the other log writer.
    pub slow_log_threshold: Duration,
    /// Compaction output files are cut at about this size.
    pub sstable_target_bytes: u64,
    /// A locality group with more SSTables than this gets a merging compaction.
    pub merge_trigger: usize,
    /// Every this often, tablets with more than one SSTable per group get a major compaction.
    pub major_interval: Duration,
    /// Background compaction threads.
    pub background_threads: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_value_size: DEFAULT_MAX_VALUE,
            memtable_bytes: 64 << 20,
            split_bytes: 128 << 20,
            block_cache_bytes: 256 << 20,
            scan_cache_bytes: 32 << 20,
            log_file_bytes: 64 << 20,
            slow_log_threshold: Duration::from_millis(200),
            sstable_target_bytes: 32 << 20,
            merge_trigger: 6,
            major_interval: Duration::from_secs(3600),
            background_threads: 2,
        }
    }
}

/// Where one tablet is and how big.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabletInfo {
    pub id: u64,
    pub table: String,
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None` = end of table.
    pub end: Option<Vec<u8>>,
    pub memtable_bytes: u64,
    pub sstable_bytes: u64,
    pub sstables: usize,
}

/// A handle on the engine; cheap to clone, shareable between threads. The
/// last handle dropped stops the background threads (data stays recoverable
/// from the commit log; call [`Bigtable::flush`] first for a fast restart).
#[derive(Clone)]
pub struct Bigtable {
    inner: Arc<Handle>,
}

struct Handle {
    server: Arc<Server>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.server.stop();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Bigtable {
    /// Opens (recovering from the commit log) or creates the store in `files`.
    pub fn open(files: Arc<dyn gfs::FileStore>, opts: Options) -> Result<Bigtable> {
        Self::open_with_lock_service(files, None, opts)
    }

    /// Opens the store and coordinates through `lock` (master lock, servers
    /// directory, root tablet location; schemas and ACLs live there).
    pub fn open_with_lock_service(
        files: Arc<dyn gfs::FileStore>,
        lock: Option<Arc<dyn chubby::LockService>>,
        opts: Options,
    ) -> Result<Bigtable> {
        let n = opts.background_threads.max(1);
        let server = Server::open(files, lock, opts)?;
        let mut threads = Vec::new();
        for i in 0..n {
            let s = server.clone();
            let t = std::thread::Builder::new()
                .name(format!("bt-compact-{i}"))
                .spawn(move || s.background_loop())
                .map_err(|e| Error::invalid(format!("cannot start a background thread: {e}")))?;
            threads.push(t);
        }
        Ok(Bigtable {
            inner: Arc::new(Handle {
                server,
                threads: Mutex::new(threads),
            }),
        })
    }

    fn s(&self) -> &Server {
        &self.inner.server
    }

    /// Stops background work and syncs the log; memtables are recovered from
    /// the log on reopen. Further calls on any clone fail with ShuttingDown.
    pub fn close(&self) -> Result<()> {
        let r = self.s().sync();
        self.s().stop();
        for t in self.inner.threads.lock().drain(..) {
            let _ = t.join();
        }
        r
    }

    fn live(&self) -> Result<&Server> {
        let s = self.s();
        if s.shutdown.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        Ok(s)
    }

    pub fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        self.live()?.create_table(name, schema)
    }
    /// Deletes a table and all its data.
    pub fn delete_table(&self, name: &str) -> Result<()> {
        self.live()?.delete_table(name)
    }
    pub fn list_tables(&self) -> Vec<String> {
        self.s().list_tables()
    }
    pub fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        Ok(self.live()?.table(table)?.schema())
    }
    /// Replaces a table's schema; a dropped family must hold no data (Error::FamilyNotEmpty).
    pub fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()> {
        self.live()?.set_schema(table, schema)
    }
    /// Applies one row's mutations atomically.
    pub fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<()> {
        self.live()?
            .apply_batch(table, std::slice::from_ref(m), opts)
            .map_err(unwrap_batch_error)
    }
    /// Validates every mutation first (nothing applied on error); then applies each row's atomically.
    pub fn apply_batch(&self, table: &str, ms: &[RowMutation], opts: WriteOptions) -> Result<()> {
        self.live()?.apply_batch(table, ms, opts)
    }
    /// Validates every transaction first; then runs each atomically on its row.
    pub fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        self.live()?.apply_txns(table, txns, opts)
    }
    fn one_txn(&self, table: &str, txn: RowTxn, opts: WriteOptions) -> Result<TxnOutcome> {
        let mut out = self
            .live()?
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
        let txn = RowTxn {
            row: row.to_vec(),
            guard: Some(cond.clone()),
            ops: on_match.into_iter().map(RowOp::Mutate).collect(),
            otherwise: on_no_match.into_iter().map(RowOp::Mutate).collect(),
        };
        Ok(self.one_txn(table, txn, opts)?.guard_held)
    }
    /// The visible cells of one row selected by `spec` (its row range is ignored).
    pub fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let s = self.live()?;
        s.read_row(&*s.table(table)?, row, spec)
    }
    /// The newest visible version of one cell.
    pub fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        let s = self.live()?;
        let t = s.table(table)?;
        if !t.schema().families.contains_key(family) {
            return Err(Error::UnknownFamily {
                table: table.to_string(),
                family: family.to_string(),
            });
        }
        s.read_cell(&t, row, family, qualifier)
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
        let s = self.live()?;
        let t = s.table(table)?;
        if !t.schema().families.contains_key(family) {
            return Err(Error::UnknownFamily {
                table: table.to_string(),
                family: family.to_string(),
            });
        }
        s.read_column(&t, row, family, qualifier, max_versions)
    }
    /// A consistent streaming scan (a snapshot taken now).
    pub fn scan(&self, table: &str, spec: ScanSpec) -> Result<Scanner> {
        let s = self.live()?;
        s.scan(&s.table(table)?, spec)
    }
    /// fsyncs the commit log: everything applied so far survives power loss.
    pub fn sync(&self) -> Result<()> {
        self.live()?.sync()
    }
    /// Writes every memtable out (minor compaction) and waits.
    pub fn flush(&self) -> Result<()> {
        self.live()?.flush(None)
    }
    /// Compacts every tablet of a table (major: all SSTables into one per group) and waits.
    pub fn compact(&self, table: &str, major: bool) -> Result<()> {
        self.live()?.compact(table, major)
    }
    /// Splits tablets past the split threshold now (it also happens in the background).
    pub fn split_now(&self, table: &str) -> Result<()> {
        self.live()?.split_now(table)
    }
    pub fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        self.live()?.tablets(table)
    }
    /// Human-readable status lines (for `.bigtable/`).
    pub fn status(&self) -> Vec<String> {
        self.s().status()
    }
}

/// A one-entry batch reports its error as itself, not as "batch entry 0".
fn unwrap_batch_error(e: Error) -> Error {
    match e {
        Error::BadBatchEntry { source, .. } => *source,
        e => e,
    }
}
