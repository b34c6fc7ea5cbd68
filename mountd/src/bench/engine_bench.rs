//! `bigtable-bench engine` (the default): Figure 6 on the engine's client API,
//! with the data on disk through `gfs::LocalStore`, and (feature `peers`) the
//! same key/value workloads on RocksDB and fjall.

use super::common::{
    fmt_bytes, fmt_rate, fmt_ratio, json_ratio, round3, row_key, scan_should_stop, Measured, Table,
    TempDir, VALUE_BYTES,
};
use super::workloads::{
    fig6_suite_marked, fill_random, Fig6, Fig6Results, KvResults, KvStore, Plan, ENGINE_MIN_READ,
};
use anyhow::{Context, Result};
use engine::schema::{FamilySchema, TableSchema};
use engine::{Bigtable, RowMutation, RowRange, ScanSpec, WriteOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const FAMILY: &str = "cf";
const QUALIFIER: &[u8] = b"0";

/// The one place that builds a benchmark table's schema: one family `cf`
/// with default settings, or, for the in-memory workload, `cf` alone in a
/// locality group marked in-memory.
pub fn bench_schema(in_memory: bool) -> TableSchema {
    let mut family = FamilySchema::new(FAMILY);
    if in_memory {
        family.locality_group = "mem".to_string();
        family.in_memory = true;
    }
    TableSchema::with_families([family])
}

/// One engine table used as a key/value store (row = key, one cell `cf:0`).
pub struct EngineTable {
    db: Bigtable,
    table: String,
    write: WriteOptions,
}

impl EngineTable {
    pub fn create(db: &Bigtable, table: &str, in_memory: bool, sync: bool) -> Result<EngineTable> {
        db.create_table(table, bench_schema(in_memory))
            .with_context(|| format!("creating table {table}"))?;
        Ok(EngineTable {
            db: db.clone(),
            table: table.to_string(),
            write: WriteOptions { sync },
        })
    }

    /// A table an earlier run made (e.g. before the engine was reopened).
    pub fn open(db: &Bigtable, table: &str, sync: bool) -> EngineTable {
        EngineTable {
            db: db.clone(),
            table: table.to_string(),
            write: WriteOptions { sync },
        }
    }
}

impl KvStore for EngineTable {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let m = RowMutation::new(key).set(FAMILY, QUALIFIER, value);
        self.db.apply(&self.table, &m, self.write)?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        // The value alone, as the peers' gets return theirs.
        Ok(self
            .db
            .read_value(&self.table, key, FAMILY, QUALIFIER)?
            .map(|v| v.value.len()))
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        let spec = ScanSpec {
            rows: RowRange::between(start, end),
            ..Default::default()
        };
        let mut n = 0u64;
        // Each cell borrowed, as the peers' iterators hand out theirs.
        let mut scan = self.db.scan(&self.table, spec)?;
        while scan.next_view()?.is_some() {
            n += 1;
            if n & 255 == 0 && scan_should_stop(deadline) {
                break;
            }
        }
        Ok(n)
    }
    fn flush(&self) -> Result<()> {
        Ok(self.db.flush()?)
    }
    fn put_unsynced(&self, key: &[u8], value: &[u8]) -> Option<Result<()>> {
        let m = RowMutation::new(key).set(FAMILY, QUALIFIER, value);
        let unsynced = WriteOptions { sync: false };
        Some(
            self.db
                .apply(&self.table, &m, unsynced)
                .map(|_| ())
                .map_err(Into::into),
        )
    }
    fn background_idle(&self) -> Result<bool> {
        // Any table's: the servers' jobs share the machine.
        Ok(!background_busy(&self.db))
    }
    fn files(&self) -> Result<Option<usize>> {
        let tablets = self.db.tablets(&self.table)?;
        Ok(Some(tablets.iter().map(|t| t.sstables).sum()))
    }
}

/// Whether a tablet server of `db` runs a background job (a flush, a
/// compaction, a split).
pub(super) fn background_busy(db: &Bigtable) -> bool {
    db.server_reports().iter().any(|r| !r.activity.is_empty())
}

/// Which file store the engine runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// `gfs::LocalStore`: one copy in a local directory (the fair comparison).
    Local,
    /// The chunk layer (`gfs::Cluster`) with three chunkservers, 3 replicas
    /// unless `--replicas` says otherwise.
    Chunks,
}

impl StoreKind {
    /// Copies of every byte the store writes.
    pub fn copies(self) -> usize {
        match self {
            StoreKind::Local => 1,
            StoreKind::Chunks => 3,
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            StoreKind::Local => "local",
            StoreKind::Chunks => "chunks",
        }
    }
}

/// What `engine` was asked to do.
#[derive(Clone)]
pub struct EngineArgs {
    /// The stores to run on; the first is the one compared with the peers.
    pub stores: Vec<StoreKind>,
    pub work_base: PathBuf,
    pub plan: Plan,
    pub sync: bool,
    pub peers: bool,
    pub io_mode: gfs::IoMode,
    pub block_cache: Option<u64>,
    pub memtable: Option<u64>,
    /// Tablet-server counts for the scaling columns (paper Figure 6, right).
    pub scaling: Vec<usize>,
    /// The chunk layer's `direct_writes` (two replicas around the page cache).
    pub direct_writes: bool,
    /// Replicas of each chunk on the chunk layer (of its three chunkservers).
    pub replicas: usize,
    /// With both stores: alternated rounds of the write workloads on each
    /// after the main runs (`write_rounds::after_engine`); 0 for none.
    pub write_rounds: usize,
    /// With the peers: alternated rounds of the workloads on the engine
    /// and each peer (`peer_rounds::after_engine`); 0 for none.
    pub peer_rounds: usize,
}

pub(super) fn options(args: &EngineArgs) -> engine::Options {
    let mut opts = engine::Options {
        // The tables stay where `place_tables` puts them (see there).
        balance: false,
        ..Default::default()
    };
    if let Some(b) = args.block_cache {
        opts.block_cache_bytes = b;
    }
    if let Some(m) = args.memtable {
        opts.memtable_bytes = m as usize;
    }
    opts
}

/// One engine run: the six workloads, the group-commit probe, the status lines.
pub struct EngineRun {
    pub fig6: Fig6Results,
    pub group_commit: GroupCommitProbe,
    pub status: Vec<String>,
    /// What each write workload wrote to the store while it ran.
    pub written: Vec<(Fig6, StoreWrites)>,
}

impl EngineRun {
    /// What workload `w` wrote per operation (`{"log", "sstables"}`), if
    /// it is a write workload.
    fn written_json(&self, w: Fig6) -> Option<serde_json::Value> {
        let (_, b) = self.written.iter().find(|(x, _)| *x == w)?;
        Some(b.json(self.fig6.get(w)))
    }
}

/// Bytes the tablet servers wrote to their commit logs and to SSTables
/// (minor, merging and major compactions), summed over the servers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StoreWrites {
    pub log: u64,
    pub sstables: u64,
}

impl StoreWrites {
    fn now(db: &Bigtable) -> StoreWrites {
        db.server_reports()
            .iter()
            .fold(StoreWrites::default(), |t, r| StoreWrites {
                log: t.log + r.log_bytes,
                sstables: t.sstables + r.flushed_bytes + r.compacted_bytes,
            })
    }

    fn since(self, before: StoreWrites) -> StoreWrites {
        StoreWrites {
            log: self.log.saturating_sub(before.log),
            sstables: self.sstables.saturating_sub(before.sstables),
        }
    }

    /// Bytes of log and of SSTables per operation of `m` (None if it ran
    /// none).
    fn per_op(self, m: &Measured) -> Option<(f64, f64)> {
        let ops = (m.ops > 0).then_some(m.ops as f64)?;
        Some((self.log as f64 / ops, self.sstables as f64 / ops))
    }

    /// [`StoreWrites::per_op`] as JSON fields of the workload.
    fn json(self, m: &Measured) -> serde_json::Value {
        match self.per_op(m) {
            Some((log, sstables)) => {
                serde_json::json!({ "log": log.round(), "sstables": sstables.round() })
            }
            None => serde_json::json!({ "log": null, "sstables": null }),
        }
    }
}

/// Runs the six workloads on a fresh engine in `dir` over `kind`.
pub fn run_engine(dir: &Path, args: &EngineArgs, kind: StoreKind) -> Result<EngineRun> {
    run_engine_with(dir, args, options(args), kind)
}

pub(super) fn open_store(
    dir: &Path,
    args: &EngineArgs,
    kind: StoreKind,
) -> Result<Arc<dyn gfs::FileStore>> {
    Ok(match kind {
        StoreKind::Local => Arc::new(gfs::LocalStore::open_with(dir, args.io_mode)?),
        StoreKind::Chunks => {
            open_chunk_layer(dir, args.replicas, args.io_mode, args.direct_writes)?
        }
    })
}

/// The chunk layer the benchmarks run on in `dir`: three chunkservers,
/// `replicas` copies of each chunk.
pub fn open_chunk_layer(
    dir: &Path,
    replicas: usize,
    io_mode: gfs::IoMode,
    direct_writes: bool,
) -> Result<Arc<gfs::Cluster>> {
    let servers = (0..3)
        .map(|i| dir.join(format!("chunkserver-{i}")))
        .collect();
    let mut o = gfs::ClusterOptions::new(dir.join("master"), servers);
    o.replication = replicas;
    o.io_mode = io_mode;
    o.min_free_bytes = 32 << 20;
    o.direct_writes = direct_writes;
    gfs::Cluster::open(o).context("opening the chunk layer")
}

/// The plan every store's Figure 6 suite runs: read phases of at least
/// [`ENGINE_MIN_READ`].
pub(super) fn reading(plan: Plan) -> Plan {
    plan.reading_at_least(ENGINE_MIN_READ)
}

fn run_engine_with(
    dir: &Path,
    args: &EngineArgs,
    opts: engine::Options,
    kind: StoreKind,
) -> Result<EngineRun> {
    let store = open_store(dir, args, kind)?;
    let db = Bigtable::open(store, opts).context("opening the engine")?;
    let result = (|| {
        // First, so that the largest batch it reports is its own.
        let mut group_commit = group_commit_probe(&db, dir, args.plan, kind.copies())?;
        let seq = EngineTable::create(&db, "seq", false, args.sync)?;
        let rand = EngineTable::create(&db, "rand", false, args.sync)?;
        let mem = EngineTable::create(&db, "mem", true, args.sync)?;
        place_tables(&db, &["seq", "rand", "mem"])?;
        let before = db.group_commit_stats();
        let mut written = Vec::new();
        let mut last = StoreWrites::now(&db);
        let fig6 = fig6_suite_marked(&seq, &rand, &mem, reading(args.plan), &mut |w| {
            let now = StoreWrites::now(&db);
            if let Some(w @ (Fig6::SeqWrite | Fig6::RandWrite)) = w {
                written.push((w, now.since(last)));
            }
            last = now;
        })?;
        let after = db.group_commit_stats();
        let batches = after.batches.saturating_sub(before.batches);
        if batches > 0 {
            group_commit.workload_mean_batch =
                after.items.saturating_sub(before.items) as f64 / batches as f64;
        }
        Ok::<_, anyhow::Error>((fig6, group_commit, written))
    })();
    let status = db.status();
    if let Err(e) = db.close() {
        eprintln!("warning: closing the engine: {e}");
    }
    let (fig6, group_commit, written) = result?;
    Ok(EngineRun {
        fig6,
        group_commit,
        status,
        written,
    })
}

/// Puts each of `tables` (one tablet each) on a tablet server of its own,
/// in the order of the servers' names, where the balancer (off in the
/// bench) leaves them. Placed by the master alone, two of them sometimes
/// shared a server, or one moved in the middle of a workload, and the
/// chunk layer's random writes ran at 74k/s in one run and 125k in the
/// next: the stores must be compared with the same placement.
pub(super) fn place_tables(db: &Bigtable, tables: &[&str]) -> Result<()> {
    let mut servers: Vec<String> = db.server_reports().into_iter().map(|r| r.name).collect();
    servers.sort();
    for (table, server) in tables.iter().zip(servers.iter().cycle()) {
        db.control(&format!("move {table} {} {server}", row_key(0)))
            .with_context(|| format!("moving table {table} to {server}"))?;
    }
    Ok(())
}

/// Writers of the group-commit probe.
const PROBE_WRITERS: usize = 16;

/// Synced writes by 16 threads, against what the disk's fsync rate allows.
#[derive(Debug, Clone)]
pub struct GroupCommitProbe {
    pub writes: Measured,
    pub batches: u64,
    pub items: u64,
    pub max_batch: u64,
    /// Single-threaded 1000-byte write + fdatasync per second on the same
    /// disk, overwriting a file already written and synced (`fsync_rounds`).
    pub fsync_rate: f64,
    /// The store's copies (3 for the chunk layer), and rounds per second of
    /// that many threads each writing 1000 bytes + fdatasync to its own
    /// file on the same disk (in place, like the fsync rate): what one synced batch costs the disk there.
    pub copies: usize,
    pub copies_fsync_rate: f64,
    /// The mean batch of the workloads' own writes (`--threads` writers; 0
    /// before they ran): synced, their bound is the fsync rate times this.
    pub workload_mean_batch: f64,
    /// Rounds per second of [`PROBE_WRITERS`] threads in which one writes
    /// their records in one write and fdatasyncs while the others wait,
    /// then all are woken (`group_rounds`): the fsync and the wake-ups of a
    /// perfect group commit on this machine, without the engine.
    pub group_rounds_rate: f64,
    /// The same rounds with each batch written and fdatasynced to `copies`
    /// files at once (equal to `group_rounds_rate` for one copy).
    pub copies_group_rounds_rate: f64,
}

impl GroupCommitProbe {
    pub fn mean_batch(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.items as f64 / self.batches as f64
        }
    }
    /// Throughput over fsync rate × mean batch (the goal: at least 0.5).
    pub fn efficiency(&self) -> f64 {
        self.vs_bound(self.writes.rate(), self.fsync_rate)
    }
    /// Throughput over (fsync rounds of all copies at once) × mean batch.
    pub fn copies_efficiency(&self) -> f64 {
        self.vs_bound(self.writes.rate(), self.copies_fsync_rate)
    }
    /// What a perfect group commit of [`PROBE_WRITERS`] writers does on
    /// this machine (one fsync and the wake-ups a round), as a share of
    /// the fsync bound (capped at 1): the limit of [`Self::efficiency`].
    pub fn rounds_share(&self) -> f64 {
        self.vs_bound(
            self.group_rounds_rate * PROBE_WRITERS as f64,
            self.fsync_rate,
        )
        .min(1.0)
    }
    /// [`Self::rounds_share`] over all copies: what a perfect group commit
    /// whose batch is written and synced to every copy at once does here,
    /// as a share of the copies' fsync bound: the limit of
    /// [`Self::copies_efficiency`].
    pub fn copies_rounds_share(&self) -> f64 {
        self.vs_bound(
            self.copies_group_rounds_rate * PROBE_WRITERS as f64,
            self.copies_fsync_rate,
        )
        .min(1.0)
    }
    /// `writes_per_sec` over `syncs_per_sec` × mean batch (0 unmeasured).
    fn vs_bound(&self, writes_per_sec: f64, syncs_per_sec: f64) -> f64 {
        let bound = syncs_per_sec * self.mean_batch();
        if bound > 0.0 {
            writes_per_sec / bound
        } else {
            0.0
        }
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "copies": self.copies,
            "copies_fsync_rounds_per_sec": self.copies_fsync_rate.round(),
            "vs_copies_fsync_times_batch": round3(self.copies_efficiency()),
            "writers": PROBE_WRITERS,
            "writes": self.writes.json(),
            "batches": self.batches,
            "mean_batch": round3(self.mean_batch()),
            "max_batch": self.max_batch,
            "fsync_per_sec": self.fsync_rate.round(),
            "vs_fsync_times_batch": round3(self.efficiency()),
            "workload_mean_batch": round3(self.workload_mean_batch),
            "group_rounds_per_sec": self.group_rounds_rate.round(),
            "rounds_share_of_fsync_bound": round3(self.rounds_share()),
            "copies_group_rounds_per_sec": self.copies_group_rounds_rate.round(),
            "copies_rounds_share_of_bound": round3(self.copies_rounds_share()),
        })
    }
    pub fn line(&self) -> String {
        format!(
            "group commit, {PROBE_WRITERS} writers, synced: {} writes/s, batch mean {:.1} max {}; fsync {:.0}/s; writes / (fsync rate x mean batch) = {:.2} (goal >= 0.5)",
            fmt_rate(&self.writes),
            self.mean_batch(),
            self.max_batch,
            self.fsync_rate,
            self.efficiency()
        ) + &format!(
            "; {PROBE_WRITERS} threads' rounds of one write + fsync + wake-ups {:.0}/s, {:.2} of that bound",
            self.group_rounds_rate,
            self.rounds_share()
        ) + &if self.copies > 1 {
            format!(
                "; {} copies' fsyncs at once {:.0} rounds/s; writes / (that x mean batch) = {:.2}; {PROBE_WRITERS} threads' rounds of it + wake-ups {:.0}/s, {:.2} of that bound",
                self.copies,
                self.copies_fsync_rate,
                self.copies_efficiency(),
                self.copies_group_rounds_rate,
                self.copies_rounds_share()
            )
        } else {
            String::new()
        }
    }
}

/// Bytes of each fsync probe file, written and synced before the clock
/// starts; the probe's writes wrap around inside them.
const PROBE_FILE_BYTES: u64 = 4 << 20;

/// Rounds per second in which each of `files` threads writes 1000 bytes to
/// its own file in `dir` and fdatasyncs it, a round ending when all have
/// (one thread: the disk's fsync rate). Each file is first written whole
/// and synced, and the rounds overwrite it in place, one record after the
/// other: the best case of a commit log, whose syncs then write only data
/// (an append that grows the file also commits its new size and blocks to
/// the journal: 306/s here against several thousand in place).
fn fsync_rounds(dir: &Path, files: usize) -> Result<f64> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;
    let paths: Vec<_> = (0..files)
        .map(|i| dir.join(format!("fsync-probe-{i}")))
        .collect();
    let result = (|| {
        let mut handles = Vec::new();
        for p in &paths {
            handles.push(preallocated(p, PROBE_FILE_BYTES).context("fsync probe")?);
        }
        let buf = [7u8; VALUE_BYTES];
        let barrier = Barrier::new(files);
        let stop = AtomicBool::new(false);
        let start = Instant::now();
        let rounds = std::thread::scope(|s| {
            let threads: Vec<_> = handles
                .iter()
                .map(|f| {
                    let (barrier, stop, buf) = (&barrier, &stop, &buf);
                    s.spawn(move || -> std::io::Result<u32> {
                        let mut n = 0u32;
                        loop {
                            let at = (u64::from(n) * buf.len() as u64)
                                % (PROBE_FILE_BYTES - buf.len() as u64);
                            // A failed thread still meets the others at the
                            // barriers (they would wait for it forever), and
                            // stops them.
                            let done = f.write_all_at(buf, at).and_then(|()| f.sync_data());
                            if done.is_err() {
                                stop.store(true, Ordering::Release);
                            }
                            n += 1;
                            if barrier.wait().is_leader()
                                && (n >= 4000 || start.elapsed().as_secs_f64() >= 1.0)
                            {
                                stop.store(true, Ordering::Release);
                            }
                            barrier.wait();
                            done?;
                            if stop.load(Ordering::Acquire) {
                                return Ok(n);
                            }
                        }
                    })
                })
                .collect();
            let mut rounds = 0;
            for t in threads {
                rounds = t
                    .join()
                    .map_err(|_| anyhow::anyhow!("fsync probe thread panicked"))??;
            }
            Ok::<u32, anyhow::Error>(rounds)
        })?;
        Ok(rounds as f64 / start.elapsed().as_secs_f64().max(1e-9))
    })();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    result
}

/// Rounds per second in which `writers` threads meet, one of them writes
/// `writers` records of 1000 bytes in one write (in place, as
/// `fsync_rounds`) and fdatasyncs while the others wait, and all are woken:
/// a group commit with nothing but its fsync and its wake-ups. With
/// `copies` above one, as many more threads each write the same batch to
/// a file of their own and fdatasync it in the same round (the replicas of
/// a synced append on the chunk layer, whose fsyncs run at once).
fn group_rounds(dir: &Path, writers: usize, copies: usize) -> Result<f64> {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Barrier;
    let copies = copies.max(1);
    let paths: Vec<_> = (0..copies)
        .map(|i| dir.join(format!("group-rounds-probe-{i}")))
        .collect();
    let result = (|| {
        let mut files = Vec::new();
        for p in &paths {
            files.push(preallocated(p, PROBE_FILE_BYTES).context("group rounds probe")?);
        }
        let batch = vec![7u8; VALUE_BYTES * writers];
        let barrier = Barrier::new(writers + copies - 1);
        let (stop, failed) = (AtomicBool::new(false), AtomicBool::new(false));
        let round = AtomicU64::new(0);
        let write = |f: &std::fs::File| {
            let n = round.load(Ordering::Acquire);
            let at = (n * batch.len() as u64) % (PROBE_FILE_BYTES - batch.len() as u64);
            if f.write_all_at(&batch, at)
                .and_then(|()| f.sync_data())
                .is_err()
            {
                failed.store(true, Ordering::Release);
            }
        };
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 1..writers {
                let (barrier, stop) = (&barrier, &stop);
                s.spawn(move || loop {
                    barrier.wait(); // submitted
                    barrier.wait(); // woken by the leader
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                });
            }
            for f in &files[1..] {
                let (barrier, stop, write) = (&barrier, &stop, &write);
                s.spawn(move || loop {
                    barrier.wait();
                    write(f);
                    barrier.wait();
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                });
            }
            loop {
                barrier.wait();
                write(&files[0]);
                // The round's copies are written by the next barrier (one
                // that starts late writes at the next round's offset: the
                // same cost).
                let rounds = round.fetch_add(1, Ordering::AcqRel) + 1;
                let done = failed.load(Ordering::Acquire)
                    || rounds >= 4000
                    || start.elapsed().as_secs_f64() >= 1.0;
                if done {
                    stop.store(true, Ordering::Release);
                }
                barrier.wait();
                if done {
                    return;
                }
            }
        });
        if failed.load(Ordering::Acquire) {
            anyhow::bail!("group rounds probe: a write or fdatasync failed");
        }
        let rounds = round.load(Ordering::Acquire);
        Ok(rounds as f64 / start.elapsed().as_secs_f64().max(1e-9))
    })();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    result
}

/// A new file at `path` of `len` bytes, written (zeros, 1 MiB at a time)
/// and synced: its blocks and size are on disk.
fn preallocated(path: &Path, len: u64) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(f)
}

fn group_commit_probe(
    db: &Bigtable,
    dir: &Path,
    plan: Plan,
    copies: usize,
) -> Result<GroupCommitProbe> {
    let table = EngineTable::create(db, "group_commit", false, true)?;
    let fsync_rate = fsync_rounds(dir, 1)?;
    let copies_fsync_rate = if copies > 1 {
        fsync_rounds(dir, copies)?
    } else {
        fsync_rate
    };
    let group_rounds_rate = group_rounds(dir, PROBE_WRITERS, 1)?;
    let copies_group_rounds_rate = if copies > 1 {
        group_rounds(dir, PROBE_WRITERS, copies)?
    } else {
        group_rounds_rate
    };
    let probe = Plan {
        n: plan.n.min(8000),
        threads: PROBE_WRITERS,
        time_cap: plan.time_cap.min(std::time::Duration::from_secs(10)),
        min_read: std::time::Duration::ZERO,
    };
    let before = db.group_commit_stats();
    let writes = fill_random(&table, probe)?;
    let after = db.group_commit_stats();
    Ok(GroupCommitProbe {
        writes,
        batches: after.batches - before.batches,
        items: after.items - before.items,
        max_batch: after.max_batch,
        fsync_rate,
        copies,
        copies_fsync_rate,
        workload_mean_batch: 0.0,
        group_rounds_rate,
        copies_group_rounds_rate,
    })
}

/// The peers' results, each `None` when not run and an error text when failed.
#[derive(Default)]
struct Peers {
    rocksdb: Option<Result<KvResults>>,
    fjall: Option<Result<KvResults>>,
    note: Option<String>,
}

#[cfg(feature = "peers")]
fn run_peers(dir: &Path, args: &EngineArgs) -> Peers {
    eprintln!("running RocksDB ...");
    let cache = options(args).block_cache_bytes;
    let rocksdb = Some(super::peers::run_rocksdb(
        dir,
        args.sync,
        cache,
        reading(args.plan),
    ));
    eprintln!("running fjall ...");
    let fjall = Some(super::peers::run_fjall(
        dir,
        args.sync,
        cache,
        reading(args.plan),
    ));
    Peers {
        rocksdb,
        fjall,
        note: None,
    }
}

#[cfg(not(feature = "peers"))]
fn run_peers(_: &Path, _: &EngineArgs) -> Peers {
    Peers {
        note: Some(
            "peers: not built in (cargo build -p mountd --features peers; see .ci/bench-deps.sh)"
                .into(),
        ),
        ..Default::default()
    }
}

fn peer_rate(r: &Option<Result<KvResults>>, w: Fig6) -> Option<f64> {
    match r {
        Some(Ok(r)) => r.get(w).map(Measured::rate),
        _ => None,
    }
}

fn peer_json(r: &Option<Result<KvResults>>, w: Fig6) -> serde_json::Value {
    match r {
        Some(Ok(r)) => r.get(w).map_or(serde_json::Value::Null, |m| m.json()),
        _ => serde_json::Value::Null,
    }
}

/// Runs the engine's workloads (and the peers'), prints the table and the
/// JSON line, and returns that line.
pub fn run(args: &EngineArgs) -> Result<serde_json::Value> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench")?;
    let plan = args.plan;
    let labels: Vec<&str> = args.stores.iter().map(|k| k.label()).collect();
    eprintln!(
        "bigtable-bench engine: {} rows of {VALUE_BYTES} B ({}), {} threads, sync={}, io={}, stores={}, block cache {} (peers too), time cap {:.0}s per workload, data in {}",
        plan.n,
        fmt_bytes(plan.n * VALUE_BYTES as u64),
        plan.threads,
        if args.sync { "on" } else { "off" },
        args.io_mode,
        labels.join(","),
        fmt_bytes(options(args).block_cache_bytes),
        plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    let mut runs: Vec<(StoreKind, EngineRun)> = Vec::new();
    for &kind in &args.stores {
        eprintln!("running the engine on {} ...", kind.label());
        let dir = work.path().join(format!("engine-{}", kind.label()));
        let r = run_engine(&dir, args, kind)?;
        let _ = std::fs::remove_dir_all(&dir);
        runs.push((kind, r));
    }
    let Some((first_kind, first)) = runs.first() else {
        anyhow::bail!("no store to run the engine on");
    };
    let ours = &first.fig6;
    let peers = if args.peers {
        run_peers(work.path(), args)
    } else {
        Peers {
            note: Some("peers: skipped (--no-peers)".into()),
            ..Default::default()
        }
    };
    for (name, r) in [("rocksdb", &peers.rocksdb), ("fjall", &peers.fjall)] {
        if let Some(Err(e)) = r {
            eprintln!("warning: {name} failed: {e:#}");
        }
    }

    let mut table = Table::new(&[
        "workload (ops/s)",
        "ours",
        "paper",
        "ours/paper",
        "rocksdb",
        "ours/rocksdb",
        "fjall",
        "ours/fjall",
        "ours/best",
    ]);
    let mut workloads = serde_json::Map::new();
    for w in Fig6::ALL {
        let m = ours.get(w);
        let ours_rate = Some(m.rate());
        let (rk, fj) = (peer_rate(&peers.rocksdb, w), peer_rate(&peers.fjall, w));
        let best = best_peer(rk, fj);
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
        table.row(vec![
            w.label().into(),
            fmt_rate(m),
            format!("{:.0}", w.paper()),
            fmt_ratio(ours_rate, Some(w.paper())),
            opt(rk),
            fmt_ratio(ours_rate, rk),
            opt(fj),
            fmt_ratio(ours_rate, fj),
            fmt_ratio(ours_rate, best),
        ]);
        let mut j = m.json();
        if let serde_json::Value::Object(o) = &mut j {
            o.insert("paper".into(), serde_json::json!(w.paper()));
            o.insert("vs_paper".into(), json_ratio(ours_rate, Some(w.paper())));
            o.insert("rocksdb".into(), peer_json(&peers.rocksdb, w));
            o.insert("vs_rocksdb".into(), json_ratio(ours_rate, rk));
            o.insert("fjall".into(), peer_json(&peers.fjall, w));
            o.insert("vs_fjall".into(), json_ratio(ours_rate, fj));
            o.insert("vs_best_peer".into(), json_ratio(ours_rate, best));
            if let Some(b) = first.written_json(w) {
                o.insert("written_per_op".into(), b);
            }
        }
        workloads.insert(w.key().into(), j);
    }
    println!(
        "engine on {} ({})",
        first_kind.label(),
        store_text(*first_kind, args)
    );
    println!("{}", table.render());
    println!(
        "(* = stopped at the time cap; paper = Figure 6, one tablet server, 1000-byte values/s; best = the better peer)"
    );
    println!(
        "flush before reads: ours {:.2}s; mem table fill {:.0} ops/s",
        ours.kv.flush_secs,
        ours.mem_fill.rate()
    );
    // The other stores against the first (what replication costs) and the peers.
    let mut stores_json = serde_json::Map::new();
    for (kind, r) in runs.iter().skip(1) {
        let first_label = first_kind.label();
        let cost = format!("{first_label}/{}", kind.label());
        let mut t = Table::new(&[
            "workload (ops/s)",
            kind.label(),
            first_label,
            cost.as_str(),
            "ours/rocksdb",
            "ours/fjall",
            "ours/best",
        ]);
        let mut per = serde_json::Map::new();
        for w in Fig6::ALL {
            let m = r.fig6.get(w);
            let rate = Some(m.rate());
            let base = Some(ours.get(w).rate());
            let (rk, fj) = (peer_rate(&peers.rocksdb, w), peer_rate(&peers.fjall, w));
            let best = best_peer(rk, fj);
            t.row(vec![
                w.label().into(),
                fmt_rate(m),
                fmt_rate(ours.get(w)),
                fmt_ratio(base, rate),
                fmt_ratio(rate, rk),
                fmt_ratio(rate, fj),
                fmt_ratio(rate, best),
            ]);
            let mut j = m.json();
            if let serde_json::Value::Object(o) = &mut j {
                o.insert(format!("{first_label}_over_this"), json_ratio(base, rate));
                o.insert("vs_rocksdb".into(), json_ratio(rate, rk));
                o.insert("vs_fjall".into(), json_ratio(rate, fj));
                o.insert("vs_best_peer".into(), json_ratio(rate, best));
                if let Some(b) = r.written_json(w) {
                    o.insert("written_per_op".into(), b);
                }
            }
            per.insert(w.key().into(), j);
        }
        println!("engine on {} ({})", kind.label(), store_text(*kind, args));
        println!("{}", t.render());
        println!("({cost}: how many times slower this store is; goal for writes <= 1.5x)");
        stores_json.insert(kind.label().into(), serde_json::Value::Object(per));
    }
    let mut probes = serde_json::Map::new();
    for (kind, r) in &runs {
        let per_write: Vec<String> = r
            .written
            .iter()
            .filter_map(|(w, b)| {
                let (log, sstables) = b.per_op(r.fig6.get(*w))?;
                Some(format!(
                    "{} log {log:.0} B, SSTables {sstables:.0} B",
                    w.label()
                ))
            })
            .collect();
        println!(
            "{}: written to the store per write: {}",
            kind.label(),
            per_write.join("; ")
        );
        println!("{}: {}", kind.label(), r.group_commit.line());
        probes.insert(kind.label().into(), r.group_commit.json());
    }
    if let Some(n) = &peers.note {
        println!("{n}");
    }
    for (kind, r) in &runs {
        for line in r.status.iter().take(12) {
            eprintln!("engine status ({}): {line}", kind.label());
        }
    }
    let flush = |r: &Option<Result<KvResults>>| match r {
        Some(Ok(r)) => serde_json::json!(round3(r.flush_secs)),
        _ => serde_json::Value::Null,
    };
    let err = |r: &Option<Result<KvResults>>| match r {
        Some(Err(e)) => serde_json::json!(format!("{e:#}")),
        _ => serde_json::Value::Null,
    };
    let line = serde_json::json!({
        "bench": "engine",
        "rows": plan.n,
        "value_bytes": VALUE_BYTES,
        "size_bytes": plan.n * VALUE_BYTES as u64,
        "threads": plan.threads,
        "sync": args.sync,
        "io_mode": args.io_mode.to_string(),
        "direct_writes": args.direct_writes,
        "replicas": args.replicas,
        "store": first_kind.label(),
        "block_cache_bytes": options(args).block_cache_bytes,
        "time_cap_secs": plan.time_cap.as_secs_f64(),
        "workloads": workloads,
        "other_stores": stores_json,
        "group_commit": probes,
        "mem_fill": ours.mem_fill.json(),
        "flush_secs": { "ours": round3(ours.kv.flush_secs), "rocksdb": flush(&peers.rocksdb), "fjall": flush(&peers.fjall) },
        "peer_errors": { "rocksdb": err(&peers.rocksdb), "fjall": err(&peers.fjall) },
    });
    println!("{line}");
    if !args.scaling.is_empty() {
        scaling(work.path(), args)?;
    }
    Ok(line)
}

fn store_text(kind: StoreKind, args: &EngineArgs) -> String {
    match kind {
        StoreKind::Local => "gfs::LocalStore, one copy".into(),
        StoreKind::Chunks => format!(
            "the chunk layer, 3 chunkservers, {} replicas",
            args.replicas
        ),
    }
}

/// The better (faster) of the two peers' rates.
fn best_peer(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The six workloads with 1, 2, 3… tablet servers in one daemon. Tables are
/// split small (data/16) so that the master spreads their tablets over the
/// servers, as the paper's benchmark spread its tablets.
fn scaling(work: &Path, args: &EngineArgs) -> Result<()> {
    let mut header = vec!["workload (ops/s)".to_string()];
    let mut columns = Vec::new();
    for &n in &args.scaling {
        eprintln!("running the engine with {n} tablet servers ...");
        let mut opts = options(args);
        opts.tablet_servers = n;
        opts.split_bytes = (args.plan.n * VALUE_BYTES as u64 / 16).max(1 << 20);
        opts.memtable_bytes = opts.memtable_bytes.min((opts.split_bytes / 2) as usize);
        let dir = work.join(format!("scaling-{n}"));
        let r = run_engine_with(&dir, args, opts, StoreKind::Local)?.fig6;
        let _ = std::fs::remove_dir_all(&dir);
        header.push(format!("{n} servers"));
        header.push("per server".into());
        columns.push((n, r));
    }
    let refs: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&refs);
    let mut json = serde_json::Map::new();
    for w in Fig6::ALL {
        let mut row = vec![w.label().to_string()];
        let mut per = serde_json::Map::new();
        for (n, r) in &columns {
            let rate = r.get(w).rate();
            row.push(fmt_rate(r.get(w)));
            row.push(format!("{:.0}", rate / *n as f64));
            per.insert(n.to_string(), serde_json::json!(rate.round()));
        }
        table.row(row);
        json.insert(w.key().into(), serde_json::Value::Object(per));
    }
    println!("{}", table.render());
    println!(
        "(aggregate ops/s and ops/s per tablet server, all servers in one process on this machine)"
    );
    println!(
        "{}",
        serde_json::json!({ "bench": "engine-scaling", "workloads": json })
    );
    Ok(())
}

/// The tests' runs: 300 rows by two threads on both stores in `dir`.
#[cfg(test)]
pub(super) fn small_args(dir: &Path) -> EngineArgs {
    EngineArgs {
        work_base: dir.to_path_buf(),
        plan: Plan {
            n: 300,
            threads: 2,
            time_cap: std::time::Duration::from_secs(20),
            min_read: std::time::Duration::ZERO,
        },
        sync: false,
        peers: false,
        io_mode: gfs::IoMode::Uring,
        block_cache: None,
        // Small, so that the writes reach SSTables before the reads.
        memtable: Some(64 << 10),
        scaling: Vec::new(),
        direct_writes: true,
        replicas: 3,
        stores: vec![StoreKind::Local, StoreKind::Chunks],
        write_rounds: 0,
        peer_rounds: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_marks_only_the_mem_family_in_memory() {
        let plain = bench_schema(false);
        let mem = bench_schema(true);
        assert!(!plain.family(FAMILY).unwrap().in_memory);
        let f = mem.family(FAMILY).unwrap();
        assert!(f.in_memory);
        assert_eq!(f.locality_group, "mem");
    }

    #[test]
    fn engine_runs_all_six_workloads_on_disk() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "engine-bench-test").unwrap();
        let args = small_args(dir.path());
        for kind in [StoreKind::Local, StoreKind::Chunks] {
            let dir = dir.path().join(kind.label());
            let r = run_engine(&dir, &args, kind).unwrap();
            for w in Fig6::ALL {
                let ops = r.fig6.get(w).ops;
                // Read phases run whole passes until they took ENGINE_MIN_READ.
                match w {
                    Fig6::SeqWrite | Fig6::RandWrite => assert_eq!(ops, 300, "{kind:?} {w:?}"),
                    _ => assert!(
                        ops >= 300 && ops.is_multiple_of(300),
                        "{kind:?} {w:?}: {ops}"
                    ),
                }
                assert!(!r.fig6.get(w).capped, "{kind:?} {w:?}");
            }
            let g = &r.group_commit;
            assert_eq!(g.writes.ops, 300);
            // METADATA writes of the cluster may share the counters.
            assert!(g.items >= 300, "{g:?}");
            assert!(
                g.batches >= 1 && g.batches <= g.items && g.max_batch >= 1,
                "{g:?}"
            );
            assert!(g.fsync_rate > 0.0);
        }
    }
}
