//! The tablet server: tables and their tablets, the commit pipeline (one
//! commit log, group commit, sequence numbers), reads, and the background
//! work (minor, merging and major compactions, splits).

use crate::cache::{BlockCache, ScanCache};
use crate::compaction::{open_sst, sst_name, sst_number, write_outputs, OutputCtx, Router};
use crate::compaction_filter::CompactionFilter;
use crate::data::*;
use crate::db::{Options, TabletInfo};
use crate::group_commit::GroupCommit;
use crate::iterator::{InternalIterator, VecIterator};
use crate::key;
use crate::log::{CommitLog, CommitLogOptions, LogRecord};
use crate::manifest::{Edit, Manifest, TabletEntry};
use crate::memtable::Memtable;
use crate::merge::MergingIterator;
use crate::mutation;
use crate::read::CellReader;
use crate::schema::TableSchema;
use crate::tablet::{next_files_version, select_files, ClipIterator, Sst, Tablet, TabletVersion};
use crate::txn::{RowOp, RowTxn, TxnOutcome};
use crate::{Error, Result};
use crossbeam_channel::{Receiver, Sender};
use gfs::FileStore;
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const ROW_LOCK_STRIPES: usize = 1024;
/// Rows up to this size (of SSTable entries) are kept whole in the scan cache.
const SCAN_CACHE_ROW_BYTES: usize = 64 << 10;
/// Writers wait while a tablet has this many memtables waiting to be written out.
const MAX_IMMUTABLE: usize = 4;

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// One table: its schema and its tablets in row order.
pub struct TableState {
    pub id: u64,
    pub name: String,
    schema: RwLock<Arc<TableSchema>>,
    tablets: RwLock<Vec<Arc<Tablet>>>,
    /// Writers hold it shared from routing to commit; splits, schema changes
    /// and drops hold it exclusively, so no write lands in a retired tablet.
    gate: RwLock<()>,
}

impl TableState {
    pub fn schema(&self) -> Arc<TableSchema> {
        self.schema.read().clone()
    }

    pub fn tablets(&self) -> Vec<Arc<Tablet>> {
        self.tablets.read().clone()
    }

    fn tablet_for(&self, row: &[u8]) -> Result<Arc<Tablet>> {
        let tablets = self.tablets.read();
        let i = tablets.partition_point(|t| t.start.as_slice() <= row);
        i.checked_sub(1)
            .and_then(|i| tablets.get(i))
            .filter(|t| t.contains(row))
            .cloned()
            .ok_or_else(|| Error::corruption(format!("table {}: no tablet holds a row", self.name)))
    }
}

/// One row's part of a write: its tablet and its log record (entries encoded
/// with sequence numbers 0.. that the commit leader rebases).
struct Pending {
    tablet: Arc<Tablet>,
    record: LogRecord,
    ops: u64,
}

/// What one caller hands to group commit.
struct WriteGroup {
    rows: Vec<Pending>,
    bytes: usize,
}

/// What the group-commit leader needs: the log and the sequence counters.
struct CommitCore {
    log: CommitLog,
    /// Next sequence number to assign (touched only by the commit leader).
    next_seq: AtomicU64,
    /// Every entry up to here is in its memtable: reads use it as their snapshot.
    visible_seq: AtomicU64,
    memtable_bytes: usize,
    wake_tx: Sender<()>,
}

impl CommitCore {
    /// Run by the group-commit leader for one batch: assign sequence numbers,
    /// write the log once, fill the memtables, publish.
    fn lead(&self, groups: Vec<WriteGroup>, sync: bool) -> Result<Vec<()>> {
        let n = groups.len();
        let mut seq = self.next_seq.load(Ordering::Acquire);
        let mut tablets = Vec::new();
        let mut records = Vec::new();
        for g in groups {
            for mut p in g.rows {
                for (k, _) in p.record.entries.iter_mut() {
                    key::rebase_seq(k, seq)
                        .ok_or_else(|| Error::corruption("malformed key in a write"))?;
                }
                seq += p.ops;
                tablets.push(p.tablet);
                records.push(p.record);
            }
        }
        self.log.append(&records, sync)?;
        let mut touched: Vec<&Arc<Tablet>> = Vec::new();
        for (tablet, rec) in tablets.iter().zip(records) {
            let mem = tablet.version().mem.clone();
            for (k, v) in rec.entries {
                mem.insert(k, v);
            }
            if !touched.iter().any(|t| Arc::ptr_eq(t, tablet)) {
                touched.push(tablet);
            }
        }
        self.next_seq.store(seq, Ordering::Release);
        self.visible_seq.store(seq - 1, Ordering::Release);
        for t in touched {
            if t.version().mem.approximate_bytes() >= self.memtable_bytes {
                freeze(t, &self.wake_tx);
            }
        }
        Ok(vec![(); n])
    }
}

/// Freezes the tablet's memtable so a minor compaction writes it out.
fn freeze(t: &Tablet, wake: &Sender<()>) {
    t.update(|cur| {
        if cur.mem.is_empty() {
            return clone_version(cur);
        }
        let mut imm = cur.imm.clone();
        imm.push(cur.mem.clone());
        TabletVersion {
            files_version: cur.files_version,
            mem: Arc::new(Memtable::new()),
            imm,
            files: cur.files.clone(),
        }
    });
    let _ = wake.try_send(());
}

#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    reads: AtomicU64,
    scans: AtomicU64,
    flushes: AtomicU64,
    merges: AtomicU64,
    majors: AtomicU64,
    splits: AtomicU64,
    stalls: AtomicU64,
}

/// The tablet server (one per process in this scope).
pub struct Server {
    store: Arc<dyn FileStore>,
    opts: Options,
    manifest: Mutex<Manifest>,
    tables: RwLock<BTreeMap<String, Arc<TableState>>>,
    core: Arc<CommitCore>,
    commit: GroupCommit<WriteGroup>,
    last_ts: AtomicU64,
    row_locks: Vec<Mutex<()>>,
    block_cache: Arc<BlockCache>,
    scan_cache: ScanCache,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    stall_lock: Mutex<()>,
    stall_cv: Condvar,
    pub(crate) shutdown: AtomicBool,
    counters: Counters,
    /// The engine's session with the lock service (master lock, servers
    /// directory, schemas), when it runs with one.
    coord: Option<crate::coordination::Coordinator>,
    /// SSTables being written by running compactions: not yet in the manifest,
    /// and not garbage.
    in_flight: Mutex<std::collections::HashSet<u64>>,
}

impl Server {
    /// Opens the store: loads the manifest, opens SSTables, replays the commit log.
    pub fn open(
        store: Arc<dyn FileStore>,
        lock: Option<Arc<dyn chubby::LockService>>,
        opts: Options,
    ) -> Result<Arc<Server>> {
        // Become the master first: a second process on the same cell stops here.
        let coord = lock
            .map(|l| crate::coordination::Coordinator::start(l, "tablet-server-0"))
            .transpose()?;
        let manifest = Manifest::open(store.clone())?;
        let block_cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
        let scan_cache = ScanCache::new(opts.scan_cache_bytes);
        let mut tables = BTreeMap::new();
        let mut by_id: HashMap<u64, Arc<TableState>> = HashMap::new();
        let mut max_seq = manifest.state().last_seq;
        let mut min_flushed = u64::MAX;
        for entry in manifest.state().tables.values() {
            let mut schema = Arc::new(TableSchema::decode(&entry.schema)?);
            if let Some(c) = &coord {
                // The lock service is the authority on schemas and ACLs.
                match c.load_schema(&entry.name)? {
                    Some(s) => {
                        if s != *schema {
                            log::info!("table {}: schema taken from the lock service", entry.name);
                        }
                        schema = Arc::new(s);
                    }
                    None => c.store_schema(&entry.name, &schema)?,
                }
            }
            let groups = schema.locality_groups();
            let mut tablets = Vec::new();
            for te in entry.tablets.values() {
                let mut files = Vec::new();
                for f in &te.files {
                    let in_memory = groups.iter().any(|g| g.name == f.group && g.in_memory);
                    max_seq = max_seq.max(f.max_seq);
                    files.push(open_sst(&store, &block_cache, f.clone(), in_memory)?);
                }
                files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
                min_flushed = min_flushed.min(te.flushed_seq);
                tablets.push(Arc::new(Tablet::new(
                    te.id,
                    entry.id,
                    te.start.clone(),
                    te.end.clone(),
                    te.flushed_seq,
                    TabletVersion {
                        files_version: next_files_version(),
                        mem: Arc::new(Memtable::new()),
                        imm: Vec::new(),
                        files,
                    },
                )));
            }
            tablets.sort_by(|a, b| a.start.cmp(&b.start));
            let t = Arc::new(TableState {
                id: entry.id,
                name: entry.name.clone(),
                schema: RwLock::new(schema),
                tablets: RwLock::new(tablets),
                gate: RwLock::new(()),
            });
            by_id.insert(entry.id, t.clone());
            tables.insert(entry.name.clone(), t);
        }

        let log = CommitLog::open(
            store.clone(),
            "log",
            CommitLogOptions {
                roll_size: opts.log_file_bytes,
                slow_threshold: opts.slow_log_threshold,
            },
        )?;
        // Replay: each tablet takes the entries above its redo point.
        let replay_from = if min_flushed == u64::MAX {
            0
        } else {
            min_flushed
        };
        let report = log.replay(replay_from, |rec: LogRecord| {
            let Some(table) = rec.table.parse::<u64>().ok().and_then(|id| by_id.get(&id)) else {
                return Ok(()); // a dropped table
            };
            let Some((first, _)) = rec.entries.first() else {
                return Ok(());
            };
            let row = key::decode(first)
                .ok_or_else(|| Error::corruption("commit log entry holds a malformed key"))?
                .row;
            let tablet = table.tablet_for(&row)?;
            let flushed = tablet.flushed_seq.load(Ordering::Relaxed);
            let v = tablet.version();
            for (k, val) in rec.entries {
                let seq = key::split(&k)
                    .ok_or_else(|| Error::corruption("commit log entry holds a malformed key"))?
                    .seq;
                max_seq = max_seq.max(seq);
                if seq > flushed {
                    v.mem.insert(k, val);
                }
            }
            Ok(())
        })?;
        if report.bytes_dropped > 0 || report.corrupt_regions > 0 {
            log::warn!("commit log recovery: {report:?}");
        }
        max_seq = max_seq.max(report.max_seq);

        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let core = Arc::new(CommitCore {
            log,
            next_seq: AtomicU64::new(max_seq + 1),
            visible_seq: AtomicU64::new(max_seq),
            memtable_bytes: opts.memtable_bytes,
            wake_tx: wake_tx.clone(),
        });
        let leader = core.clone();
        let commit = GroupCommit::new(
            8 << 20,
            |g: &WriteGroup| g.bytes,
            Box::new(move |groups, sync| leader.lead(groups, sync)),
        );
        let server = Arc::new(Server {
            store,
            manifest: Mutex::new(manifest),
            tables: RwLock::new(tables),
            core,
            commit,
            last_ts: AtomicU64::new(0),
            row_locks: (0..ROW_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            block_cache,
            scan_cache,
            wake_tx,
            wake_rx,
            stall_lock: Mutex::new(()),
            stall_cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
            counters: Counters::default(),
            in_flight: Mutex::new(Default::default()),
            coord,
            opts,
        });
        // Recovered memtables past the threshold are frozen for writing out.
        for t in server.all_tablets() {
            if t.version().mem.approximate_bytes() >= server.opts.memtable_bytes {
                server.freeze(&t);
            }
        }
        server.sweep_files()?;
        Ok(server)
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    fn all_tablets(&self) -> Vec<Arc<Tablet>> {
        self.tables
            .read()
            .values()
            .flat_map(|t| t.tablets())
            .collect()
    }

    pub fn table(&self, name: &str) -> Result<Arc<TableState>> {
        self.tables
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    fn table_by_id(&self, id: u64) -> Option<Arc<TableState>> {
        self.tables.read().values().find(|t| t.id == id).cloned()
    }

    pub fn list_tables(&self) -> Vec<String> {
        self.tables.read().keys().cloned().collect()
    }

    fn last_seq(&self) -> u64 {
        self.core.visible_seq.load(Ordering::Acquire)
    }

    fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }

    // ---------------------------------------------------------------- tables

    pub fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        validate_table_name(name)?;
        schema.validate()?;
        let mut tables = self.tables.write();
        if tables.contains_key(name) {
            return Err(Error::TableExists(name.to_string()));
        }
        let mut m = self.manifest.lock();
        let id = m.next_id();
        let tablet_id = m.next_id();
        let entry = TabletEntry {
            id: tablet_id,
            start: Vec::new(),
            end: None,
            flushed_seq: self.last_seq(),
            files: Vec::new(),
        };
        m.log(
            vec![
                Edit::CreateTable {
                    id,
                    name: name.to_string(),
                    schema: schema.encode(),
                },
                Edit::AddTablet {
                    table: id,
                    tablet: entry,
                },
            ],
            self.last_seq(),
        )?;
        if let Some(c) = &self.coord {
            c.store_schema(name, &schema)?;
        }
        let tablet = Arc::new(Tablet::new(
            tablet_id,
            id,
            Vec::new(),
            None,
            self.last_seq(),
            TabletVersion {
                files_version: next_files_version(),
                mem: Arc::new(Memtable::new()),
                imm: Vec::new(),
                files: Vec::new(),
            },
        ));
        tables.insert(
            name.to_string(),
            Arc::new(TableState {
                id,
                name: name.to_string(),
                schema: RwLock::new(Arc::new(schema)),
                tablets: RwLock::new(vec![tablet]),
                gate: RwLock::new(()),
            }),
        );
        Ok(())
    }

    pub fn delete_table(&self, name: &str) -> Result<()> {
        let table = self.table(name)?;
        let _gate = table.gate.write();
        for t in table.tablets() {
            let _claim = t.claim();
            t.retired.store(true, Ordering::Release);
        }
        self.manifest
            .lock()
            .log(vec![Edit::DropTable { id: table.id }], self.last_seq())?;
        self.tables.write().remove(name);
        if let Some(c) = &self.coord {
            c.drop_table(name)?;
        }
        self.sweep_files()?;
        Ok(())
    }

    pub fn set_schema(&self, name: &str, schema: TableSchema) -> Result<()> {
        schema.validate()?;
        let table = self.table(name)?;
        let _gate = table.gate.write();
        let old = table.schema();
        for fam in old.families.keys() {
            if !schema.families.contains_key(fam) {
                let spec = ScanSpec {
                    families: Some(vec![fam.clone()]),
                    cell_limit: Some(1),
                    ..ScanSpec::default()
                };
                if self.scan(&table, spec)?.next().transpose()?.is_some() {
                    return Err(Error::FamilyNotEmpty(fam.clone()));
                }
            }
        }
        if let Some(c) = &self.coord {
            c.store_schema(name, &schema)?;
        }
        self.manifest.lock().log(
            vec![Edit::SetSchema {
                id: table.id,
                schema: schema.encode(),
            }],
            self.last_seq(),
        )?;
        *table.schema.write() = Arc::new(schema);
        Ok(())
    }

    // ---------------------------------------------------------------- writes

    fn next_timestamp(&self) -> u64 {
        let now = now_micros();
        let prev = self
            .last_ts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(0);
        now.max(prev + 1)
    }

    fn stripe(&self, table: &TableState, row: &[u8]) -> usize {
        let h = seahash::hash(row) ^ table.id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h % ROW_LOCK_STRIPES as u64) as usize
    }

    /// Locks the stripes of all `rows`, in index order so lockers never deadlock.
    fn lock_rows<'a, 'r>(
        &'a self,
        table: &TableState,
        rows: impl Iterator<Item = &'r [u8]>,
    ) -> Vec<MutexGuard<'a, ()>> {
        let mut idx: Vec<usize> = rows.map(|r| self.stripe(table, r)).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.row_locks[i].lock()).collect()
    }

    /// Commits validated row mutations. The caller holds the table's gate
    /// (shared) and the rows' locks.
    fn commit_rows(&self, table: &TableState, ms: &[&RowMutation], sync: bool) -> Result<()> {
        let mut rows = Vec::with_capacity(ms.len());
        for m in ms {
            let tablet = table.tablet_for(&m.row)?;
            let ts = self.next_timestamp();
            let entries = mutation::to_entries(m, 0, ts);
            rows.push(Pending {
                tablet,
                record: LogRecord {
                    table: table.id.to_string(),
                    entries,
                },
                ops: m.mutations.len() as u64,
            });
        }
        self.wait_for_room(&rows);
        let bytes = rows
            .iter()
            .flat_map(|p| p.record.entries.iter())
            .map(|(k, v)| k.len() + v.len())
            .sum();
        self.commit.submit(WriteGroup { rows, bytes }, sync)?;
        self.counters
            .writes
            .fetch_add(ms.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Back-pressure: wait while a target tablet has too many frozen memtables.
    fn wait_for_room(&self, rows: &[Pending]) {
        let full = |rows: &[Pending]| {
            rows.iter()
                .any(|p| p.tablet.version().imm.len() >= MAX_IMMUTABLE)
        };
        if !full(rows) {
            return;
        }
        self.counters.stalls.fetch_add(1, Ordering::Relaxed);
        self.wake();
        let mut g = self.stall_lock.lock();
        while full(rows) && !self.shutdown.load(Ordering::Acquire) {
            self.stall_cv.wait_for(&mut g, Duration::from_millis(50));
        }
    }

    fn freeze(&self, t: &Tablet) {
        freeze(t, &self.wake_tx);
    }

    pub fn apply_batch(
        &self,
        table_name: &str,
        ms: &[RowMutation],
        opts: WriteOptions,
    ) -> Result<()> {
        let table = self.table(table_name)?;
        let schema = table.schema();
        mutation::validate_batch(&schema, ms, self.opts.max_value_size)?;
        if ms.is_empty() {
            return Ok(());
        }
        let _gate = table.gate.read();
        let _locks = self.lock_rows(&table, ms.iter().map(|m| m.row.as_slice()));
        let refs: Vec<&RowMutation> = ms.iter().collect();
        self.commit_rows(&table, &refs, opts.sync)
    }

    pub fn apply_txns(
        &self,
        table_name: &str,
        txns: &[RowTxn],
        opts: WriteOptions,
    ) -> Result<Vec<TxnOutcome>> {
        let table = self.table(table_name)?;
        let schema = table.schema();
        for (i, t) in txns.iter().enumerate() {
            validate_txn(&table.name, &schema, t, self.opts.max_value_size).map_err(|e| {
                Error::BadBatchEntry {
                    index: i,
                    source: Box::new(e),
                }
            })?;
        }
        let _gate = table.gate.read();
        let mut out = Vec::with_capacity(txns.len());
        // Plain transactions are committed together; one that reads the row
        // first flushes what is pending so it sees earlier ones.
        let mut plain: Vec<RowMutation> = Vec::new();
        for t in txns {
            let simple = t.guard.is_none() && t.ops.iter().all(|o| matches!(o, RowOp::Mutate(_)));
            if simple {
                plain.push(RowMutation {
                    row: t.row.clone(),
                    mutations: t
                        .ops
                        .iter()
                        .filter_map(|o| match o {
                            RowOp::Mutate(m) => Some(m.clone()),
                            _ => None,
                        })
                        .collect(),
                });
                out.push(TxnOutcome {
                    guard_held: true,
                    results: Vec::new(),
                });
                continue;
            }
            self.flush_plain(&table, &mut plain, opts.sync)?;
            let _lock = self.lock_rows(&table, std::iter::once(t.row.as_slice()));
            let (m, outcome) = self.resolve_txn(&table, t)?;
            if !m.mutations.is_empty() {
                self.commit_rows(&table, &[&m], opts.sync)?;
            }
            out.push(outcome);
        }
        self.flush_plain(&table, &mut plain, opts.sync)?;
        Ok(out)
    }

    fn flush_plain(
        &self,
        table: &TableState,
        plain: &mut Vec<RowMutation>,
        sync: bool,
    ) -> Result<()> {
        if plain.is_empty() {
            return Ok(());
        }
        let _locks = self.lock_rows(table, plain.iter().map(|m| m.row.as_slice()));
        let refs: Vec<&RowMutation> = plain.iter().collect();
        self.commit_rows(table, &refs, sync)?;
        plain.clear();
        Ok(())
    }

    /// Evaluates a transaction's guard and read-modify-write ops against the
    /// row as it is now (the caller holds the row lock), giving the plain
    /// mutation to commit.
    fn resolve_txn(&self, table: &TableState, t: &RowTxn) -> Result<(RowMutation, TxnOutcome)> {
        let mut m = RowMutation::new(t.row.clone());
        let held = match &t.guard {
            None => true,
            Some(c) => {
                let cur = self.read_cell(table, &t.row, &c.family, &c.qualifier)?;
                mutation::check(c, cur.as_ref().map(|c| c.value.as_slice()))
            }
        };
        let ops = if held { &t.ops } else { &t.otherwise };
        // Values this transaction has written so far, for later ops of the same column.
        let mut overlay: HashMap<(String, Vec<u8>), Option<Vec<u8>>> = HashMap::new();
        let mut results = Vec::new();
        for op in ops {
            let (family, qualifier, new) = match op {
                RowOp::Mutate(mu) => {
                    match mu {
                        Mutation::SetCell {
                            family,
                            qualifier,
                            value,
                            ..
                        } => {
                            overlay
                                .insert((family.clone(), qualifier.clone()), Some(value.clone()));
                        }
                        Mutation::DeleteCells {
                            family, qualifier, ..
                        } => {
                            overlay.remove(&(family.clone(), qualifier.clone()));
                        }
                        Mutation::DeleteFamily { family } => {
                            overlay.retain(|(f, _), _| f != family)
                        }
                        Mutation::DeleteRow => overlay.clear(),
                    }
                    m.mutations.push(mu.clone());
                    continue;
                }
                RowOp::Increment {
                    family,
                    qualifier,
                    delta,
                } => {
                    let old = self.current_value(table, t, &m, &overlay, family, qualifier)?;
                    (
                        family,
                        qualifier,
                        mutation::increment(old.as_deref(), *delta)?,
                    )
                }
                RowOp::Append {
                    family,
                    qualifier,
                    data,
                } => {
                    let old = self.current_value(table, t, &m, &overlay, family, qualifier)?;
                    let new = mutation::append(old.as_deref(), data, self.opts.max_value_size)?;
                    (family, qualifier, new)
                }
            };
            overlay.insert((family.clone(), qualifier.clone()), Some(new.clone()));
            m.mutations.push(Mutation::SetCell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp: None,
                value: new.clone(),
            });
            results.push(new);
        }
        Ok((
            m,
            TxnOutcome {
                guard_held: held,
                results,
            },
        ))
    }

    /// The value a read-modify-write op starts from: what this transaction
    /// wrote to the column, else what is stored (unless this transaction
    /// deleted it).
    fn current_value(
        &self,
        table: &TableState,
        t: &RowTxn,
        pending: &RowMutation,
        overlay: &HashMap<(String, Vec<u8>), Option<Vec<u8>>>,
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(v) = overlay.get(&(family.to_string(), qualifier.to_vec())) {
            return Ok(v.clone());
        }
        let deleted = pending.mutations.iter().any(|m| match m {
            Mutation::DeleteRow => true,
            Mutation::DeleteFamily { family: f } => f == family,
            Mutation::DeleteCells {
                family: f,
                qualifier: q,
                range,
            } => f == family && q == qualifier && *range == TimeRange::ALL,
            Mutation::SetCell { .. } => false,
        });
        if deleted {
            return Ok(None);
        }
        Ok(self
            .read_cell(table, &t.row, family, qualifier)?
            .map(|c| c.value))
    }

    // ---------------------------------------------------------------- reads

    /// Sources of one row in a tablet: memtables plus the row's SSTable
    /// entries, served from the scan cache when possible.
    fn row_sources(
        &self,
        v: &TabletVersion,
        schema: &TableSchema,
        row: &[u8],
        families: Option<&[String]>,
        column: Option<(&str, &[u8])>,
    ) -> Result<Vec<Box<dyn InternalIterator>>> {
        let mut sources: Vec<Box<dyn InternalIterator>> = Vec::with_capacity(2 + v.imm.len());
        sources.push(Box::new(v.mem.iter()));
        for m in v.imm.iter().rev() {
            sources.push(Box::new(m.iter()));
        }
        // files_version is unique to this tablet's SSTable set, so entries
        // cached for an older set are never found again (they age out).
        let cache_id = match families {
            None => v.files_version,
            Some(f) => seahash::hash(format!("{}\0{}", v.files_version, f.join("\0")).as_bytes()),
        };
        if column.is_none() {
            if let Some(hit) = self.scan_cache.get(cache_id, row) {
                sources.push(Box::new(VecIterator::new(hit)));
                return Ok(sources);
            }
        }
        let files = select_files(&v.files, families, schema);
        let mut iters: Vec<Box<dyn InternalIterator>> = Vec::new();
        for f in files {
            let wanted = match column {
                // The cell itself, or a family or row tombstone covering it.
                Some((fam, q)) => {
                    f.table.may_contain_column(row, fam.as_bytes(), q)
                        || f.table.may_contain_column(row, fam.as_bytes(), b"")
                        || f.table.may_contain_column(row, b"", b"")
                }
                None => f.table.may_contain_row(row),
            };
            if wanted {
                iters.push(Box::new(f.table.iter()));
            }
        }
        if column.is_some() {
            // One column: the reader seeks straight to it in each source.
            sources.extend(iters);
            return Ok(sources);
        }
        // Small rows are read once into the scan cache; a wide row is read
        // straight from its SSTables (copying it whole would cost more than
        // the cache saves).
        let mut merged = MergingIterator::new(iters);
        let end = key::row_end(row);
        merged.seek(&key::row_start(row))?;
        let mut entries = Vec::new();
        let mut bytes = 0;
        while merged.valid() && merged.key() < end.as_slice() {
            if bytes > SCAN_CACHE_ROW_BYTES {
                for f in select_files(&v.files, families, schema) {
                    if f.table.may_contain_row(row) {
                        sources.push(Box::new(f.table.iter()));
                    }
                }
                return Ok(sources);
            }
            bytes += merged.key().len() + merged.value().len();
            entries.push((merged.key().to_vec(), merged.value().to_vec()));
            merged.next()?;
        }
        let entries = Arc::new(entries);
        self.scan_cache.insert(cache_id, row, entries.clone());
        sources.push(Box::new(VecIterator::new(entries)));
        Ok(sources)
    }

    pub fn read_row(&self, table: &TableState, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        check_row(row)?;
        let snapshot = spec.snapshot.unwrap_or_else(|| self.last_seq());
        let t = table.tablet_for(row)?;
        let v = t.version();
        let schema = table.schema();
        let sources = self.row_sources(&v, &schema, row, spec.families.as_deref(), None)?;
        let mut s = spec.clone();
        s.rows = RowRange {
            start: Bound::Included(row.to_vec()),
            end: Bound::Included(row.to_vec()),
        };
        let reader = CellReader::new(
            Box::new(MergingIterator::new(sources)),
            &s,
            schema,
            snapshot,
            now_micros(),
        )?;
        reader.collect()
    }

    /// The newest `max_versions` visible versions of one column (all if None).
    pub fn read_column(
        &self,
        table: &TableState,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        max_versions: Option<u32>,
    ) -> Result<Vec<Cell>> {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        check_row(row)?;
        let snapshot = self.last_seq();
        let t = table.tablet_for(row)?;
        let v = t.version();
        let schema = table.schema();
        let fams = [family.to_string()];
        let sources = self.row_sources(&v, &schema, row, Some(&fams), Some((family, qualifier)))?;
        let reader = CellReader::column(
            Box::new(MergingIterator::new(sources)),
            schema,
            row,
            family,
            qualifier,
            TimeRange::ALL,
            max_versions,
            snapshot,
            now_micros(),
        )?;
        reader.collect()
    }

    pub fn read_cell(
        &self,
        table: &TableState,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Cell>> {
        Ok(self
            .read_column(table, row, family, qualifier, Some(1))?
            .pop())
    }

    pub fn scan(&self, table: &Arc<TableState>, mut spec: ScanSpec) -> Result<Scanner> {
        self.counters.scans.fetch_add(1, Ordering::Relaxed);
        let snapshot = spec.snapshot.unwrap_or_else(|| self.last_seq());
        spec.snapshot = Some(snapshot);
        // Validate the spec (regex) once up front.
        CellReader::new(
            Box::new(VecIterator::new(Arc::new(Vec::new()))),
            &spec,
            table.schema(),
            snapshot,
            0,
        )?;
        Ok(Scanner {
            table: table.clone(),
            resume: Some(spec.rows.start.clone()),
            spec,
            reader: None,
            rows: 0,
            cells: 0,
            last_row: None,
            pending: None,
        })
    }

    // ---------------------------------------------------------------- background

    /// One background worker: runs the most urgent job it can claim.
    pub fn background_loop(self: Arc<Self>) {
        let mut last_error: Option<Instant> = None;
        while !self.shutdown.load(Ordering::Acquire) {
            match self.run_one_job() {
                Ok(true) => continue,
                Ok(false) => {
                    let _ = self.wake_rx.recv_timeout(Duration::from_millis(500));
                }
                Err(e) => {
                    if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                        log::error!("background compaction failed: {e}");
                    }
                    last_error = Some(Instant::now());
                    let _ = self.wake_rx.recv_timeout(Duration::from_millis(200));
                }
            }
        }
    }

    fn tablets_with_tables(&self) -> Vec<(Arc<TableState>, Arc<Tablet>)> {
        self.tables
            .read()
            .values()
            .flat_map(|t| t.tablets().into_iter().map(move |x| (t.clone(), x)))
            .collect()
    }

    fn run_one_job(&self) -> Result<bool> {
        let all = self.tablets_with_tables();
        // 1. Frozen memtables first: they hold writes back and pin the log.
        for (table, t) in &all {
            if !t.version().imm.is_empty() {
                if let Some(_c) = t.try_claim() {
                    self.flush_imm(table, t)?;
                    return Ok(true);
                }
            }
        }
        // 2. Splits.
        for (table, t) in &all {
            let v = t.version();
            if t.sstable_bytes(&v) > self.opts.split_bytes {
                if let Some(_c) = t.try_claim() {
                    if self.split(table, t)? {
                        return Ok(true);
                    }
                }
            }
        }
        // 3. Merging compactions of groups with too many files.
        for (table, t) in &all {
            let v = t.version();
            let mut per_group: BTreeMap<&str, usize> = BTreeMap::new();
            for f in &v.files {
                *per_group.entry(f.meta.group.as_str()).or_default() += 1;
            }
            if let Some((g, _)) = per_group.iter().find(|(_, &n)| n > self.opts.merge_trigger) {
                let g = g.to_string();
                if let Some(_c) = t.try_claim() {
                    self.merge_group(table, t, &g)?;
                    return Ok(true);
                }
            }
        }
        // 4. Major compactions: children holding a parent's files, and periodic ones.
        for (table, t) in &all {
            let v = t.version();
            let groups = v
                .files
                .iter()
                .map(|f| f.meta.group.as_str())
                .collect::<std::collections::HashSet<_>>()
                .len();
            let due =
                t.last_major.lock().elapsed() > self.opts.major_interval && v.files.len() > groups;
            if t.has_foreign_files(&v) || due {
                if let Some(_c) = t.try_claim() {
                    self.major_compact(table, t)?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    fn output_ctx<'a>(&'a self, new_number: &'a dyn Fn() -> u64) -> OutputCtx<'a> {
        OutputCtx {
            store: &self.store,
            cache: &self.block_cache,
            target_bytes: self.opts.sstable_target_bytes,
            new_number,
        }
    }

    /// Minor compaction: the oldest frozen memtable becomes SSTables. The
    /// caller holds the tablet's claim.
    fn flush_imm(&self, table: &TableState, t: &Tablet) -> Result<()> {
        let v = t.version();
        let Some(m) = v.imm.first().cloned() else {
            return Ok(());
        };
        let schema = table.schema();
        let (lo, hi) = t.key_bounds();
        let clipped = ClipIterator::new(m.iter(), lo, hi);
        let mut filter =
            CompactionFilter::new(Box::new(clipped), false, schema.clone(), now_micros())?;
        let new_number = || self.new_output_number();
        let outputs = write_outputs(
            &self.output_ctx(&new_number),
            &Router::by_schema(&schema),
            || filter.next_entry(),
        )?;
        let flushed = m.max_seq().max(t.flushed_seq.load(Ordering::Acquire));
        self.install(table, t, &[], outputs, flushed, |cur, files| {
            TabletVersion {
                files_version: next_files_version(),
                mem: cur.mem.clone(),
                imm: cur
                    .imm
                    .iter()
                    .filter(|x| !Arc::ptr_eq(x, &m))
                    .cloned()
                    .collect(),
                files,
            }
        })?;
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        {
            let _g = self.stall_lock.lock();
            self.stall_cv.notify_all();
        }
        self.delete_obsolete_logs()
    }

    /// Records a compaction's result in the manifest and installs the new version.
    fn install(
        &self,
        table: &TableState,
        t: &Tablet,
        inputs: &[Arc<Sst>],
        outputs: Vec<Arc<Sst>>,
        flushed_seq: u64,
        make: impl FnOnce(&TabletVersion, Vec<Arc<Sst>>) -> TabletVersion,
    ) -> Result<()> {
        if t.retired.load(Ordering::Acquire) {
            // Dropped while we worked: the output is garbage.
            self.release_outputs(&outputs);
            for o in &outputs {
                let _ = self.store.delete(&sst_name(o.meta.number));
            }
            return Ok(());
        }
        let removed: Vec<u64> = inputs.iter().map(|f| f.meta.number).collect();
        let logged = self.manifest.lock().log(
            vec![Edit::Files {
                table: table.id,
                tablet: t.id,
                add: outputs.iter().map(|o| o.meta.clone()).collect(),
                remove: removed.clone(),
                flushed_seq,
            }],
            self.last_seq(),
        );
        self.release_outputs(&outputs);
        logged?;
        t.update(|cur| {
            let mut files: Vec<Arc<Sst>> = cur
                .files
                .iter()
                .filter(|f| !removed.contains(&f.meta.number))
                .cloned()
                .chain(outputs)
                .collect();
            files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
            make(cur, files)
        });
        t.flushed_seq.fetch_max(flushed_seq, Ordering::AcqRel);
        if !removed.is_empty() {
            self.sweep_files()?;
        }
        Ok(())
    }

    /// Deletes SSTables no tablet references any more (mark and sweep over the manifest).
    fn sweep_files(&self) -> Result<()> {
        // Order matters. A file in the listing was created after its number
        // went in flight; it leaves the in-flight set only after the manifest
        // made it live. So list, then snapshot in-flight, then live: every
        // file in use shows up in one of the two snapshots.
        let names = self.store.list("sst/")?;
        let in_flight = self.in_flight.lock().clone();
        let live = self.manifest.lock().state().live_files();
        for name in names {
            match sst_number(&name) {
                Some(n) if live.contains(&n) || in_flight.contains(&n) => {}
                _ => match self.store.delete(&name) {
                    // Another sweep got there first.
                    Ok(()) | Err(gfs::Error::NotFound(_)) => {}
                    Err(e) => log::warn!("could not delete unused {name}: {e}"),
                },
            }
        }
        Ok(())
    }

    /// Allocates an output file number that sweeps leave alone until released.
    fn new_output_number(&self) -> u64 {
        let n = self.manifest.lock().next_id();
        self.in_flight.lock().insert(n);
        n
    }

    fn release_outputs(&self, outputs: &[Arc<Sst>]) {
        let mut f = self.in_flight.lock();
        for o in outputs {
            f.remove(&o.meta.number);
        }
    }

    fn delete_obsolete_logs(&self) -> Result<()> {
        // Entries up to `visible` are all in memtables; a tablet with unflushed
        // data still needs the log from its redo point on.
        let visible = self.last_seq();
        let mut min_live = visible;
        for t in self.all_tablets() {
            let v = t.version();
            if t.has_unflushed(&v) {
                min_live = min_live.min(t.flushed_seq.load(Ordering::Acquire));
            }
        }
        self.core.log.delete_obsolete(min_live)?;
        Ok(())
    }

    /// Merging compaction of the newest files of one locality group.
    fn merge_group(&self, table: &TableState, t: &Tablet, group: &str) -> Result<()> {
        let v = t.version();
        let take = self.opts.merge_trigger / 2 + 1;
        let in_group: Vec<Arc<Sst>> = v
            .files
            .iter()
            .filter(|f| f.meta.group == group)
            .cloned()
            .collect();
        if in_group.len() <= take || in_group.len() == v.files.len() {
            // Merging every file is a major compaction: do that instead.
            return self.major_compact(table, t);
        }
        let inputs: Vec<Arc<Sst>> = in_group.into_iter().take(take).collect();
        let schema = table.schema();
        let iters: Vec<Box<dyn InternalIterator>> = inputs
            .iter()
            .map(|f| Box::new(f.table.iter()) as Box<dyn InternalIterator>)
            .collect();
        let (lo, hi) = t.key_bounds();
        let clipped = ClipIterator::new(MergingIterator::new(iters), lo, hi);
        let mut filter =
            CompactionFilter::new(Box::new(clipped), false, schema.clone(), now_micros())?;
        let new_number = || self.new_output_number();
        let outputs = write_outputs(
            &self.output_ctx(&new_number),
            &Router::fixed(&schema, group),
            || filter.next_entry(),
        )?;
        self.install(
            table,
            t,
            &inputs,
            outputs,
            t.flushed_seq.load(Ordering::Acquire),
            |cur, files| TabletVersion {
                files_version: next_files_version(),
                mem: cur.mem.clone(),
                imm: cur.imm.clone(),
                files,
            },
        )?;
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Major compaction: every SSTable of the tablet into one set per group;
    /// deleted and collected data is dropped. The caller holds the claim.
    fn major_compact(&self, table: &TableState, t: &Tablet) -> Result<()> {
        let v = t.version();
        *t.last_major.lock() = Instant::now();
        if v.files.is_empty() {
            return Ok(());
        }
        let inputs = v.files.clone();
        let schema = table.schema();
        let iters: Vec<Box<dyn InternalIterator>> = inputs
            .iter()
            .map(|f| Box::new(f.table.iter()) as Box<dyn InternalIterator>)
            .collect();
        let (lo, hi) = t.key_bounds();
        let clipped = ClipIterator::new(MergingIterator::new(iters), lo, hi);
        let mut filter =
            CompactionFilter::new(Box::new(clipped), true, schema.clone(), now_micros())?;
        let new_number = || self.new_output_number();
        let outputs = write_outputs(
            &self.output_ctx(&new_number),
            &Router::by_schema(&schema),
            || filter.next_entry(),
        )?;
        self.install(
            table,
            t,
            &inputs,
            outputs,
            t.flushed_seq.load(Ordering::Acquire),
            |cur, files| TabletVersion {
                files_version: next_files_version(),
                mem: cur.mem.clone(),
                imm: cur.imm.clone(),
                files,
            },
        )?;
        self.counters.majors.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Splits a tablet at the middle of its largest SSTable. The caller holds
    /// the claim. Returns false when no good split row exists.
    fn split(&self, table: &TableState, t: &Arc<Tablet>) -> Result<bool> {
        let v = t.version();
        let Some(biggest) = v.files.iter().max_by_key(|f| f.meta.size) else {
            return Ok(false);
        };
        let Some(mid) = biggest.table.mid_key() else {
            return Ok(false);
        };
        let Some(row) = key::split(&mid).and_then(|p| key::decode_row(p.row_enc)) else {
            return Ok(false);
        };
        if row <= t.start || t.end.as_ref().is_some_and(|e| row >= *e) {
            return Ok(false);
        }
        let _gate = table.gate.write();
        self.freeze(t);
        let v = t.version();
        let flushed = t.flushed_seq.load(Ordering::Acquire);
        let (a_id, b_id) = {
            let mut m = self.manifest.lock();
            (m.next_id(), m.next_id())
        };
        let make = |id: u64, start: Vec<u8>, end: Option<Vec<u8>>| {
            Arc::new(Tablet::new(
                id,
                table.id,
                start,
                end,
                flushed,
                TabletVersion {
                    files_version: next_files_version(),
                    mem: Arc::new(Memtable::new()),
                    imm: v.imm.clone(),
                    files: v.files.clone(),
                },
            ))
        };
        let a = make(a_id, t.start.clone(), Some(row.clone()));
        let b = make(b_id, row, t.end.clone());
        let entry = |x: &Tablet| TabletEntry {
            id: x.id,
            start: x.start.clone(),
            end: x.end.clone(),
            flushed_seq: flushed,
            files: v.files.iter().map(|f| f.meta.clone()).collect(),
        };
        self.manifest.lock().log(
            vec![
                Edit::RemoveTablet {
                    table: table.id,
                    id: t.id,
                },
                Edit::AddTablet {
                    table: table.id,
                    tablet: entry(&a),
                },
                Edit::AddTablet {
                    table: table.id,
                    tablet: entry(&b),
                },
            ],
            self.last_seq(),
        )?;
        {
            let mut tablets = table.tablets.write();
            tablets.retain(|x| !Arc::ptr_eq(x, t));
            tablets.push(a);
            tablets.push(b);
            tablets.sort_by(|x, y| x.start.cmp(&y.start));
        }
        t.retired.store(true, Ordering::Release);
        self.counters.splits.fetch_add(1, Ordering::Relaxed);
        self.wake();
        Ok(true)
    }

    // ---------------------------------------------------------------- admin

    pub fn sync(&self) -> Result<()> {
        self.core.log.append(&[], true)
    }

    /// Freezes and writes out every memtable of `table` (all tables if None).
    pub fn flush(&self, table: Option<&str>) -> Result<()> {
        for (ts, t) in self.tablets_with_tables() {
            if table.is_some_and(|n| n != ts.name) {
                continue;
            }
            let _c = t.claim();
            if t.retired.load(Ordering::Acquire) {
                continue;
            }
            self.freeze(&t);
            while !t.version().imm.is_empty() {
                self.flush_imm(&ts, &t)?;
            }
        }
        Ok(())
    }

    pub fn compact(&self, table: &str, major: bool) -> Result<()> {
        self.flush(Some(table))?;
        let ts = self.table(table)?;
        for t in ts.tablets() {
            let _c = t.claim();
            if t.retired.load(Ordering::Acquire) {
                continue;
            }
            if major {
                self.major_compact(&ts, &t)?;
            } else {
                let groups: Vec<String> = t
                    .version()
                    .files
                    .iter()
                    .map(|f| f.meta.group.clone())
                    .collect();
                if let Some(g) = groups.first() {
                    self.merge_group(&ts, &t, g)?;
                }
            }
        }
        Ok(())
    }

    pub fn split_now(&self, table: &str) -> Result<()> {
        let ts = self.table(table)?;
        loop {
            let mut did = false;
            for t in ts.tablets() {
                let v = t.version();
                if t.sstable_bytes(&v) > self.opts.split_bytes {
                    let _c = t.claim();
                    if !t.retired.load(Ordering::Acquire) && self.split(&ts, &t)? {
                        did = true;
                    }
                }
            }
            if !did {
                return Ok(());
            }
        }
    }

    pub fn tablets(&self, table: &str) -> Result<Vec<TabletInfo>> {
        let ts = self.table(table)?;
        Ok(ts
            .tablets()
            .iter()
            .map(|t| {
                let v = t.version();
                TabletInfo {
                    id: t.id,
                    table: ts.name.clone(),
                    start: t.start.clone(),
                    end: t.end.clone(),
                    memtable_bytes: (v.mem.approximate_bytes()
                        + v.imm.iter().map(|m| m.approximate_bytes()).sum::<usize>())
                        as u64,
                    sstable_bytes: t.sstable_bytes(&v),
                    sstables: v.files.len(),
                }
            })
            .collect())
    }

    pub fn status(&self) -> Vec<String> {
        let c = &self.counters;
        let bc = self.block_cache.stats();
        let sc = self.scan_cache.stats();
        let gc = self.commit.stats();
        let mut lines = vec![
            format!("last_seq {}", self.last_seq()),
            format!(
                "ops writes={} reads={} scans={} stalls={}",
                c.writes.load(Ordering::Relaxed),
                c.reads.load(Ordering::Relaxed),
                c.scans.load(Ordering::Relaxed),
                c.stalls.load(Ordering::Relaxed)
            ),
            format!(
                "compactions minor={} merging={} major={} splits={}",
                c.flushes.load(Ordering::Relaxed),
                c.merges.load(Ordering::Relaxed),
                c.majors.load(Ordering::Relaxed),
                c.splits.load(Ordering::Relaxed)
            ),
            format!("group_commit {gc:?}"),
            format!("block_cache {bc:?}"),
            format!("scan_cache {sc:?}"),
        ];
        for (ts, t) in self.tablets_with_tables() {
            let v = t.version();
            lines.push(format!(
                "tablet {} table={} start={:?} end={:?} mem={} imm={} sstables={} bytes={}",
                t.id,
                ts.name,
                String::from_utf8_lossy(&t.start),
                t.end
                    .as_ref()
                    .map(|e| String::from_utf8_lossy(e).into_owned()),
                v.mem.approximate_bytes(),
                v.imm.len(),
                v.files.len(),
                t.sstable_bytes(&v)
            ));
        }
        if let Some(c) = &self.coord {
            lines.extend(c.status());
        }
        lines.extend(self.store.status());
        lines
    }

    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::Release);
        for _ in 0..64 {
            self.wake();
        }
        let _g = self.stall_lock.lock();
        self.stall_cv.notify_all();
    }
}

fn clone_version(v: &TabletVersion) -> TabletVersion {
    TabletVersion {
        files_version: v.files_version,
        mem: v.mem.clone(),
        imm: v.imm.clone(),
        files: v.files.clone(),
    }
}

fn check_row(row: &[u8]) -> Result<()> {
    if row.len() > MAX_ROW_KEY {
        return Err(Error::RowKeyTooLong(row.len()));
    }
    Ok(())
}

/// Table names: what a directory name may be, minus the reserved leading dot.
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "table name {name:?}: use 1-255 of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

fn validate_txn(table: &str, schema: &TableSchema, t: &RowTxn, max_value: usize) -> Result<()> {
    let check_family = |f: &str| {
        if schema.families.contains_key(f) {
            Ok(())
        } else {
            Err(Error::UnknownFamily {
                table: table.to_string(),
                family: f.to_string(),
            })
        }
    };
    if t.row.len() > MAX_ROW_KEY {
        return Err(Error::RowKeyTooLong(t.row.len()));
    }
    if t.ops.is_empty() && t.otherwise.is_empty() {
        return Err(Error::invalid(
            "a row transaction needs at least one operation",
        ));
    }
    if let Some(c) = &t.guard {
        check_family(&c.family)?;
    }
    let mut plain = RowMutation::new(t.row.clone());
    for op in t.ops.iter().chain(&t.otherwise) {
        match op {
            RowOp::Mutate(m) => plain.mutations.push(m.clone()),
            RowOp::Increment {
                family, qualifier, ..
            }
            | RowOp::Append {
                family, qualifier, ..
            } => {
                check_family(family)?;
                if qualifier.len() > MAX_QUALIFIER {
                    return Err(Error::invalid(format!(
                        "qualifier is {} bytes; the limit is {MAX_QUALIFIER}",
                        qualifier.len()
                    )));
                }
            }
        }
    }
    if !plain.mutations.is_empty() {
        mutation::validate(schema, &plain, max_value)?;
    }
    Ok(())
}

/// A consistent scan over a table's tablets, in row order.
pub struct Scanner {
    table: Arc<TableState>,
    spec: ScanSpec,
    /// Where the next tablet's part starts (None: done).
    resume: Option<Bound<Vec<u8>>>,
    reader: Option<CellReader>,
    rows: u64,
    cells: u64,
    last_row: Option<Vec<u8>>,
    /// A cell read ahead by next_row.
    pending: Option<Cell>,
}

impl Scanner {
    fn open_next_tablet(&mut self) -> Result<bool> {
        let Some(resume) = self.resume.take() else {
            return Ok(false);
        };
        let t = match &resume {
            Bound::Included(k) | Bound::Excluded(k) => self.table.tablet_for(k)?,
            Bound::Unbounded => self.table.tablet_for(b"")?,
        };
        let v = t.version();
        let schema = self.table.schema();
        let files = select_files(&v.files, self.spec.families.as_deref(), &schema);
        let mut sources: Vec<Box<dyn InternalIterator>> = Vec::new();
        sources.push(Box::new(v.mem.iter()));
        for m in v.imm.iter().rev() {
            sources.push(Box::new(m.iter()));
        }
        for f in files {
            sources.push(Box::new(f.table.iter()));
        }
        let mut spec = self.spec.clone();
        spec.row_limit = None;
        spec.cell_limit = None;
        spec.rows.start = resume;
        // This tablet's part ends at its end row or the scan's end, whichever is first.
        if let Some(end) = &t.end {
            let tablet_end_first = match &self.spec.rows.end {
                Bound::Unbounded => true,
                Bound::Included(e) => end.as_slice() <= e.as_slice(),
                Bound::Excluded(e) => end.as_slice() < e.as_slice(),
            };
            if tablet_end_first {
                spec.rows.end = Bound::Excluded(end.clone());
                self.resume = Some(Bound::Included(end.clone()));
            }
        }
        self.reader = Some(CellReader::new(
            Box::new(MergingIterator::new(sources)),
            &spec,
            schema,
            spec.snapshot.unwrap_or(u64::MAX),
            now_micros(),
        )?);
        Ok(true)
    }

    fn next_cell(&mut self) -> Result<Option<Cell>> {
        if let Some(c) = self.pending.take() {
            return Ok(Some(c));
        }
        loop {
            if self.spec.cell_limit.is_some_and(|l| self.cells >= l) {
                return Ok(None);
            }
            if let Some(r) = &mut self.reader {
                if let Some(c) = r.next_cell()? {
                    if self.last_row.as_deref() != Some(c.row.as_slice()) {
                        if self.spec.row_limit.is_some_and(|l| self.rows >= l) {
                            self.resume = None;
                            self.reader = None;
                            return Ok(None);
                        }
                        self.rows += 1;
                        self.last_row = Some(c.row.clone());
                    }
                    self.cells += 1;
                    return Ok(Some(c));
                }
                self.reader = None;
            }
            if !self.open_next_tablet()? {
                return Ok(None);
            }
        }
    }

    /// The next row with every selected cell of it.
    pub fn next_row(&mut self) -> Result<Option<(Vec<u8>, Vec<Cell>)>> {
        let Some(first) = self.next_cell()? else {
            return Ok(None);
        };
        let row = first.row.clone();
        let mut cells = vec![first];
        while let Some(c) = self.next_cell()? {
            if c.row != row {
                self.pending = Some(c);
                break;
            }
            cells.push(c);
        }
        Ok(Some((row, cells)))
    }
}

impl Iterator for Scanner {
    type Item = Result<Cell>;
    fn next(&mut self) -> Option<Result<Cell>> {
        self.next_cell().transpose()
    }
}

/// The id of the table a tablet belongs to, resolved for status.
#[allow(dead_code)]
fn table_name(server: &Server, id: u64) -> Option<String> {
    server.table_by_id(id).map(|t| t.name.clone())
}
