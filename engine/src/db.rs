//! The client API: a handle on the Bigtable running in this process.

use crate::data::*;
use crate::schema::TableSchema;
use crate::txn::{RowTxn, TxnOutcome};
use crate::Result;
use std::sync::Arc;
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

/// A handle on the engine; cheap to clone, shareable between threads.
#[derive(Clone)]
pub struct Bigtable {
    inner: Arc<()>,
}

/// Streams cells of a scan in order.
pub struct Scanner {
    _p: (),
}

impl Scanner {
    /// The next row with every selected cell of it.
    pub fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        unimplemented!()
    }
}

impl Iterator for Scanner {
    type Item = Result<Cell>;
    fn next(&mut self) -> Option<Self::Item> {
        unimplemented!()
    }
}

impl Bigtable {
    /// Opens (recovering from the commit log) or creates the store in `files`.
    pub fn open(files: Arc<dyn gfs::FileStore>, opts: Options) -> Result<Bigtable> {
        let _ = (files, opts);
        unimplemented!()
    }
    /// Flushes nothing but stops background work; memtables are recovered from the log on reopen.
    pub fn close(&self) -> Result<()> {
        unimplemented!()
    }
    pub fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        let _ = (name, schema);
        unimplemented!()
    }
    /// Deletes a table and all its data.
    pub fn delete_table(&self, name: &str) -> Result<()> {
        let _ = name;
        unimplemented!()
    }
    pub fn list_tables(&self) -> Vec<String> {
        unimplemented!()
    }
    pub fn schema(&self, table: &str) -> Result<Arc<TableSchema>> {
        let _ = table;
        unimplemented!()
    }
    /// Replaces a table's schema; a dropped family must hold no data (Error::FamilyNotEmpty).
    pub fn set_schema(&self, table: &str, schema: TableSchema) -> Result<()> {
        let _ = (table, schema);
        unimplemented!()
    }
    /// Applies one row's mutations atomically.
    pub fn apply(&self, table: &str, m: &RowMutation, opts: WriteOptions) -> Result<()> {
        let _ = (table, m, opts);
        unimplemented!()
    }
    /// Validates every mutation first (nothing applied on error); then applies each row's atomically.
    pub fn apply_batch(&self, table: &str, ms: &[RowMutation], opts: WriteOptions) -> Result<()> {
        let _ = (table, ms, opts);
        unimplemented!()
    }
    /// Validates every transaction first; then runs each atomically on its row.
    pub fn apply_txns(
        &self,
        table: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        let _ = (table, txns, opts);
        unimplemented!()
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
        let _ = (table, row, family, qualifier, delta, opts);
        unimplemented!()
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
        let _ = (table, row, family, qualifier, data, opts);
        unimplemented!()
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
        let _ = (table, row, cond, on_match, on_no_match, opts);
        unimplemented!()
    }
    /// The visible cells of one row selected by `spec` (its row range is ignored).
    pub fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let _ = (table, row, spec);
        unimplemented!()
    }
    /// The newest visible version of one cell.
    pub fn read_cell(
        &self,
        table: &str,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        let _ = (table, row, family, qualifier);
        unimplemented!()
    }
    /// A consistent streaming scan (a snapshot taken now).
    pub fn scan(&self, table: &str, spec: ScanSpec) -> Result<Scanner> {
        let _ = (table, spec);
        unimplemented!()
    }
    /// fsyncs the commit log: everything applied so far survives power loss.
    pub fn sync(&self) -> Result<()> {
        unimplemented!()
    }
    /// Writes every memtable out (minor compaction) and waits.
    pub fn flush(&self) -> Result<()> {
        unimplemented!()
    }
    /// Compacts every tablet of a table (major: all SSTables into one per group) and waits.
    pub fn compact(&self, table: &str, major: bool) -> Result<()> {
        let _ = (table, major);
        unimplemented!()
    }
    /// Splits tablets past the split threshold now (it also happens in the background).
    pub fn split_now(&self, table: &str) -> Result<()> {
        let _ = table;
        unimplemented!()
    }
    pub fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        let _ = table;
        unimplemented!()
    }
    /// Human-readable status lines (for `.bigtable/`).
    pub fn status(&self) -> Vec<String> {
        unimplemented!()
    }
}
