//! Benchmark of the replicated chunk layer, for `bigtable-bench gfs`.
//!
//! Two workloads on a fresh [`Cluster`] under a work directory:
//! - **append**: many writers append records to one file through a group
//!   commit (whoever finds the log free writes everyone's pending records
//!   with one `append_sync`), as the commit log does: every record is
//!   acknowledged only once durable on every replica;
//! - **read**: random block-aligned reads of `block_bytes` from a file,
//!   `batch` blocks per `read_many` (one io_uring submission), by several
//!   readers; every block is verified against its checksums.
//!
//! Run it once per [`IoMode`] to see what io_uring buys over pread/pwrite.

use crate::{Cluster, ClusterOptions, FileStore, GroupLog, IoMode, IoStats, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Work directory; the cluster is created in `dir/gfs-bench` and removed after.
    pub dir: PathBuf,
    pub chunkservers: usize,
    /// 0: the default (chunkservers, at most 3).
    pub replication: usize,
    pub chunk_size: u64,
    pub io_mode: IoMode,
    /// Concurrent appenders sharing the group commit.
    pub writers: usize,
    pub record_bytes: usize,
    /// Bytes to append in total (stops early at `time_cap`).
    pub append_bytes: u64,
    /// Size of the file read.
    pub read_file_bytes: u64,
    pub block_bytes: usize,
    pub readers: usize,
    /// Blocks read in total (stops early at `time_cap`).
    pub reads: u64,
    /// Blocks per `read_many` call (1: `read_at`).
    pub batch: usize,
    /// Longest time per workload.
    pub time_cap: Duration,
}

impl BenchOptions {
    /// Defaults for a quick run in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BenchOptions {
            dir: dir.into(),
            chunkservers: 3,
            replication: 0,
            chunk_size: crate::DEFAULT_CHUNK_SIZE,
            io_mode: IoMode::Uring,
            writers: 16,
            record_bytes: 1000,
            append_bytes: 32 << 20,
            read_file_bytes: 256 << 20,
            block_bytes: 64 << 10,
            readers: 4,
            reads: 20_000,
            batch: 1,
            time_cap: Duration::from_secs(20),
        }
    }
}

/// Throughput and latency of one workload.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub ops: u64,
    pub bytes: u64,
    pub secs: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Figures {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
    pub fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / (1 << 20) as f64 / self.secs.max(1e-9)
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// The I/O path actually used.
    pub io_mode: IoMode,
    pub replication: usize,
    pub append: Figures,
    /// Group commits (append_sync calls) the appends took.
    pub commits: u64,
    pub read: Figures,
    /// io_uring submissions and syscalls over the whole run.
    pub io: IoStats,
}

impl BenchReport {
    /// A human-readable summary.
    pub fn lines(&self) -> Vec<String> {
        let f = |name: &str, x: &Figures| {
            format!(
                "gfs {name:<6} io={} replication={}: {:>10.0} ops/s {:>8.1} MiB/s p50 {:>8.1} us p99 {:>8.1} us ({} ops in {:.2} s)",
                self.io_mode,
                self.replication,
                x.ops_per_sec(),
                x.mib_per_sec(),
                x.p50_us,
                x.p99_us,
                x.ops,
                x.secs
            )
        };
        vec![
            f("append", &self.append),
            format!(
                "gfs append: {} records in {} group commits ({:.1} per commit)",
                self.append.ops,
                self.commits,
                self.append.ops as f64 / self.commits.max(1) as f64
            ),
            f("read", &self.read),
            format!(
                "gfs io: uring_batches={} uring_ops={} syscall_ops={}",
                self.io.uring_batches, self.io.uring_ops, self.io.syscall_ops
            ),
        ]
    }
}

fn percentiles(mut lat: Vec<Duration>) -> (f64, f64) {
    if lat.is_empty() {
        return (0.0, 0.0);
    }
    lat.sort_unstable();
    let at = |q: f64| {
        let i = ((lat.len() - 1) as f64 * q).round() as usize;
        lat[i].as_secs_f64() * 1e6
    };
    (at(0.5), at(0.99))
}

/// Runs `threads` workers, each taking ops from a shared counter until
/// `total` or the deadline; returns the figures.
fn drive(
    threads: usize,
    total: u64,
    cap: Duration,
    bytes_per_op: u64,
    op: impl Fn(u64, &mut SmallRng) -> Result<()> + Sync,
) -> Result<Figures> {
    let next = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + cap;
    let results: Vec<Result<Vec<Duration>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|t| {
                let next = &next;
                let op = &op;
                s.spawn(move || {
                    let mut rng = SmallRng::new(0x9e37_79b9 ^ t as u64);
                    let mut lat = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total || Instant::now() >= deadline {
                            return Ok(lat);
                        }
                        let t0 = Instant::now();
                        op(i, &mut rng)?;
                        lat.push(t0.elapsed());
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::Error::io(
                        "bench",
                        std::io::Error::other("worker panicked"),
                    ))
                })
            })
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    for r in results {
        lat.extend(r?);
    }
    let ops = lat.len() as u64;
    let (p50, p99) = percentiles(lat);
    Ok(Figures {
        ops,
        bytes: ops * bytes_per_op,
        secs,
        p50_us: p50,
        p99_us: p99,
    })
}

/// A small xorshift generator: the benchmark's random offsets and bytes.
pub(crate) struct SmallRng(u64);

impl SmallRng {
    fn new(seed: u64) -> Self {
        SmallRng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// Runs both workloads on a fresh cluster and removes it afterwards.
pub fn run(opts: &BenchOptions) -> Result<BenchReport> {
    let root = opts.dir.join("gfs-bench");
    if root.exists() {
        std::fs::remove_dir_all(&root).map_err(|e| crate::Error::io("gfs-bench", e))?;
    }
    let res = run_in(opts, &root);
    let _ = std::fs::remove_dir_all(&root);
    res
}

fn run_in(opts: &BenchOptions, root: &std::path::Path) -> Result<BenchReport> {
    let mut co = ClusterOptions::new(
        root.join("master"),
        (0..opts.chunkservers.max(1))
            .map(|i| root.join(format!("chunkserver-{i}")))
            .collect(),
    );
    co.replication = opts.replication;
    co.chunk_size = opts.chunk_size;
    co.io_mode = opts.io_mode;
    co.min_free_bytes = 0;
    let cluster = Cluster::open(co)?;

    // Appends through a group commit.
    let log = Arc::new(GroupLog::new(cluster.create("append.log")?));
    let records = (opts.append_bytes / opts.record_bytes.max(1) as u64).max(1);
    let rb = opts.record_bytes;
    let append = drive(opts.writers, records, opts.time_cap, rb as u64, |_, rng| {
        let mut r = vec![0u8; rb];
        rng.fill(&mut r);
        log.append(r)
    })?;
    let commits = log.batches();

    // The file read: random data, written and synced untimed.
    let block = opts.block_bytes.max(1);
    let blocks = (opts.read_file_bytes / block as u64).max(1);
    let mut w = cluster.create("read.dat")?;
    let mut rng = SmallRng::new(42);
    let mut buf = vec![0u8; block];
    for _ in 0..blocks {
        rng.fill(&mut buf);
        w.append(&buf)?;
    }
    w.sync()?;
    drop(w);
    let file = cluster.open("read.dat")?;
    let batch = opts.batch.max(1);
    let mut read = drive(
        opts.readers,
        opts.reads.div_ceil(batch as u64),
        opts.time_cap,
        (block * batch) as u64,
        |_, rng| {
            if batch == 1 {
                file.read_at(rng.below(blocks) * block as u64, block)?;
            } else {
                let ranges: Vec<(u64, usize)> = (0..batch)
                    .map(|_| (rng.below(blocks) * block as u64, block))
                    .collect();
                file.read_many(&ranges)?;
            }
            Ok(())
        },
    )?;
    // Figures per block, not per call.
    read.ops *= batch as u64;
    Ok(BenchReport {
        io_mode: cluster.io_mode(),
        replication: cluster.replication(),
        append,
        commits,
        read,
        io: cluster.io_stats(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reports_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = BenchOptions::new(dir.path());
        o.chunk_size = 1 << 20;
        o.writers = 4;
        o.append_bytes = 200_000;
        o.read_file_bytes = 2 << 20;
        o.reads = 200;
        o.batch = 4;
        o.time_cap = Duration::from_secs(5);
        let r = run(&o).unwrap();
        assert_eq!(r.append.ops, 200);
        assert!(r.commits >= 1 && r.commits <= 200);
        assert_eq!(r.read.ops, 200);
        assert_eq!(r.read.bytes, 200 * 65536);
        assert!(r.append.p99_us >= r.append.p50_us);
        assert_eq!(r.lines().len(), 4);
        assert!(!dir.path().join("gfs-bench").exists());
    }

    /// Prints figures in both I/O modes: `cargo test -p gfs --lib
    /// bench::tests::figures -- --ignored --nocapture` (GFS_BENCH_DIR picks
    /// the disk; default: a temporary directory).
    #[test]
    #[ignore]
    fn figures() {
        let tmp = tempfile::tempdir().unwrap();
        let dir =
            std::env::var("GFS_BENCH_DIR").map_or_else(|_| tmp.path().to_path_buf(), PathBuf::from);
        for mode in [IoMode::Uring, IoMode::Syscall] {
            for batch in [1, 8] {
                let mut o = BenchOptions::new(&dir);
                o.io_mode = mode;
                o.batch = batch;
                o.append_bytes = 16 << 20;
                o.read_file_bytes = 128 << 20;
                o.reads = 20_000;
                o.time_cap = Duration::from_secs(10);
                let r = run(&o).unwrap();
                println!("--- batch {batch}");
                for l in r.lines() {
                    println!("{l}");
                }
            }
        }
    }
}
