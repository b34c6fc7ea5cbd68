//! `bigtable-bench engine --store s3` and `bigtable-bench fs --store s3`:
//! what keeping the tables in an object store costs. One run starts
//! SeaweedFS on loopback ([`S3Server`]) and runs the same workload on the
//! chunk layer (`store=cluster`, the default) and on S3, each in a fresh
//! data directory, through the engine API or through a mount of a fresh
//! daemon:
//!
//! - new rows written in order by 1, 4 and 16 writers (each its own range),
//!   with the latency of every write (the engine: `apply`; the mount: the
//!   close, which commits);
//! - the rows the 16 writers wrote, read in one fixed random order by a
//!   freshly opened engine or mount, twice: with a cold disk cache (S3: its
//!   cache of fetched ranges emptied; the chunk layer: the kernel's page
//!   cache dropped) and with the warm one the first pass left;
//! - per phase, S3 PUTs and GETs per 1,000 operations (the store's
//!   counters in its status lines) and the group-commit batches: S3 stores
//!   one log object per batch, so writes/s is about mean batch / PUT time.

use super::common::{
    check_interrupted, run_ops, Deal, Measured, RowKey, Table, TempDir, VALUE_BYTES,
};
use super::engine_bench::EngineTable;
use super::fs_bench::FsTable;
use super::s3_server::S3Server;
use super::scale_bench::{mountd_binary, Daemon};
use super::workloads::{check_found, KvStore, Plan, Written};
use anyhow::{Context, Result};
use engine::Bigtable;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The writer counts of the write phases (unless `--writers` names others).
pub const WRITERS: [usize; 3] = [1, 4, 16];
/// Goals: S3's write rate with 16 writers at least this share of the chunk
/// layer's; its warm reads at most this many times slower.
const WRITE_GOAL: f64 = 0.5;
const WARM_READ_GOAL: f64 = 1.2;

/// Where the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Through {
    /// The engine's client API in this process.
    Engine,
    /// A mount of a fresh daemon, one cell per file.
    Mount,
}

/// What `--store s3` was asked to do.
pub struct S3Args {
    pub through: Through,
    pub work_base: PathBuf,
    /// Rows per write phase; `threads` are the readers.
    pub plan: Plan,
    pub sync: bool,
    /// Mount options for both layers (`cache=64m,memtable=16m`).
    pub options: Option<String>,
    /// The daemon for `fs` (see [`mountd_binary`]).
    pub mountd: Option<PathBuf>,
    /// The writer counts of the write phases; the last one's rows are read.
    pub writers: Vec<usize>,
    /// Added to each direction between the engine and S3 by a delaying
    /// proxy (a store that far away; zero: none).
    pub s3_delay: Duration,
}

/// The two file layers compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layer {
    Chunks,
    S3,
}

impl Layer {
    fn label(self) -> &'static str {
        match self {
            Layer::Chunks => "chunks",
            Layer::S3 => "s3",
        }
    }
}

/// Counters from a store's status lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counters {
    puts: u64,
    gets: u64,
    batches: u64,
    items: u64,
}

impl Counters {
    /// From `s3 … requests put=N get=N …` and each tablet server's
    /// `group_commit_batches=N group_commit_items=N`.
    fn parse<S: AsRef<str>>(lines: &[S]) -> Counters {
        let mut c = Counters::default();
        for line in lines.iter().map(AsRef::as_ref) {
            let s3 = line.starts_with("s3 ") && line.contains(" requests ");
            for word in line.split_whitespace() {
                let Some((k, v)) = word.split_once('=') else {
                    continue;
                };
                let Ok(v) = v.parse::<u64>() else {
                    continue;
                };
                match k {
                    "put" if s3 => c.puts += v,
                    "get" if s3 => c.gets += v,
                    "group_commit_batches" => c.batches += v,
                    "group_commit_items" => c.items += v,
                    _ => {}
                }
            }
        }
        c
    }

    fn since(self, before: Counters) -> Counters {
        Counters {
            puts: self.puts.saturating_sub(before.puts),
            gets: self.gets.saturating_sub(before.gets),
            batches: self.batches.saturating_sub(before.batches),
            items: self.items.saturating_sub(before.items),
        }
    }
}

/// Per-operation latencies, in microseconds.
#[derive(Default)]
struct Latencies(Mutex<Vec<u64>>);

impl Latencies {
    fn record(&self, d: Duration) {
        if let Ok(mut v) = self.0.lock() {
            v.push(d.as_micros() as u64);
        }
    }
    fn into_sorted(self) -> Vec<u64> {
        let mut v = self.0.into_inner().unwrap_or_default();
        v.sort_unstable();
        v
    }
}

/// The `q` quantile of sorted values, in milliseconds.
fn quantile_ms(sorted: &[u64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let i = ((last as f64) * q).round() as usize;
    sorted.get(i.min(last)).map(|us| *us as f64 / 1000.0)
}

/// One phase on one layer.
#[derive(Debug, Clone)]
struct Phase {
    m: Measured,
    /// Latencies (writes only), sorted.
    lat: Vec<u64>,
    c: Counters,
}

impl Phase {
    fn per_1000(&self, x: u64) -> f64 {
        if self.m.ops == 0 {
            0.0
        } else {
            x as f64 * 1000.0 / self.m.ops as f64
        }
    }
    fn mean_batch(&self) -> f64 {
        if self.c.batches == 0 {
            0.0
        } else {
            self.c.items as f64 / self.c.batches as f64
        }
    }
    fn json(&self) -> Value {
        let mut j = self.m.json();
        if let Value::Object(o) = &mut j {
            o.insert("p50_ms".into(), json!(quantile_ms(&self.lat, 0.5)));
            o.insert("p99_ms".into(), json!(quantile_ms(&self.lat, 0.99)));
            o.insert("puts_per_1000".into(), json!(self.per_1000(self.c.puts)));
            o.insert("gets_per_1000".into(), json!(self.per_1000(self.c.gets)));
            o.insert("batches".into(), json!(self.c.batches));
            o.insert("mean_batch".into(), json!(self.mean_batch()));
        }
        j
    }
}

/// Everything measured on one layer.
struct LayerRun {
    writes: Vec<(usize, Phase)>,
    cold: Phase,
    warm: Phase,
    /// The store's status lines at the end (S3's request latencies).
    status: Vec<String>,
}

/// A fixed permutation of `0..n`: the same scattered order in both passes,
/// so the warm pass reads only what the cold one fetched.
fn scatter(k: u64, n: u64) -> u64 {
    // A prime above any n here, so coprime with it: a bijection mod n.
    const P: u128 = 2_654_435_761;
    ((k as u128 * P) % n.max(1) as u128) as u64
}

/// Writes one row (key, value) and returns the part of it to time.
type TimedPut<'a> = dyn Fn(&[u8], &[u8]) -> Result<Duration> + Sync + 'a;

/// Writes `plan.n` new rows in order with `writers` threads, timing each
/// write with `put`.
fn write_phase(
    writers: usize,
    plan: Plan,
    status: &dyn Fn() -> Vec<String>,
    put: &TimedPut,
) -> Result<Phase> {
    let lat = Latencies::default();
    let before = Counters::parse(&status());
    let m = run_ops(writers, plan.n, plan.time_cap, Deal::Shares, |ctx, i| {
        lat.record(put(RowKey::new(i).as_bytes(), ctx.value())?);
        Ok(())
    })?;
    let c = Counters::parse(&status()).since(before);
    Ok(Phase {
        m,
        lat: lat.into_sorted(),
        c,
    })
}

/// Reads every written row once, in [`scatter`] order.
fn read_phase(
    table: &dyn KvStore,
    written: &Written,
    plan: Plan,
    status: &dyn Fn() -> Vec<String>,
) -> Result<Phase> {
    let total = written.total();
    let before = Counters::parse(&status());
    let m = run_ops(plan.threads, total, plan.time_cap, Deal::Shares, |_, k| {
        let key = RowKey::new(written.nth(scatter(k, total)));
        check_found(key.as_bytes(), table.get(key.as_bytes())?)
    })?;
    let c = Counters::parse(&status()).since(before);
    Ok(Phase {
        m,
        lat: Vec::new(),
        c,
    })
}

/// Empties the disk cache before a cold pass: S3's cache of fetched ranges
/// (`cache_dir`), or for the chunk layer the kernel's page cache (root).
fn make_cold(layer: Layer, data_dir: &Path) {
    match layer {
        Layer::S3 => {
            let _ = std::fs::remove_dir_all(data_dir.join("s3-cache"));
        }
        Layer::Chunks => {
            if !super::common::drop_page_cache() {
                eprintln!("warning: cannot drop the page cache (not root): the chunk layer's cold read is warm");
            }
        }
    }
}

/// The name of the table the `writers` phase writes.
fn table_name(writers: usize) -> String {
    format!("w{writers}")
}

/// The engine on `layer`'s store in `dir`, opened from mount options as
/// the daemon opens it.
fn open_engine(dir: &Path, options: &str) -> Result<Bigtable> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    let mut cfg = mountd::mountopts::MountConfig::new(dir.to_path_buf(), dir.join("mnt"));
    cfg.apply_list(options).map_err(anyhow::Error::msg)?;
    let store = cfg.file_store().map_err(anyhow::Error::msg)?;
    Bigtable::open(store, cfg.engine_options()).context("opening the engine")
}

fn close_engine(db: Bigtable) {
    if let Err(e) = db.close() {
        eprintln!("warning: closing the engine: {e}");
    }
}

fn run_engine_layer(layer: Layer, dir: &Path, options: &str, args: &S3Args) -> Result<LayerRun> {
    let plan = args.plan;
    let db = open_engine(dir, options)?;
    let status = || db.status();
    let mut writes = Vec::new();
    let done = (|| {
        for &w in &args.writers {
            eprintln!("  {}: {w} writer(s) ...", layer.label());
            let t = EngineTable::create(&db, &table_name(w), false, args.sync)?;
            let put = |k: &[u8], v: &[u8]| {
                let start = Instant::now();
                t.put(k, v)?;
                Ok(start.elapsed())
            };
            writes.push((w, write_phase(w, plan, &status, &put)?));
            check_interrupted()?;
        }
        Ok::<_, anyhow::Error>(db.flush()?)
    })();
    close_engine(db);
    done?;
    let written = last_written(&writes, plan)?;
    let mut reads = Vec::new();
    for warm in [false, true] {
        if !warm {
            make_cold(layer, dir);
        }
        eprintln!(
            "  {}: reads, {} disk cache ...",
            layer.label(),
            if warm { "warm" } else { "cold" }
        );
        let db = open_engine(dir, options)?;
        let t = EngineTable::open(&db, &table_name(last_writers(args)), args.sync);
        let r = read_phase(&t, &written, plan, &|| db.status());
        let status = db.status();
        close_engine(db);
        reads.push((r?, status));
    }
    finish(writes, reads)
}

/// The writer count whose rows the read phases read.
fn last_writers(args: &S3Args) -> usize {
    args.writers.last().copied().unwrap_or(1)
}

fn last_written(writes: &[(usize, Phase)], plan: Plan) -> Result<Written> {
    let (_, last) = writes.last().context("no write phase ran")?;
    Ok(Written::from_fill(plan.n, &last.m))
}

fn finish(writes: Vec<(usize, Phase)>, reads: Vec<(Phase, Vec<String>)>) -> Result<LayerRun> {
    let mut reads = reads.into_iter();
    let (Some((cold, _)), Some((warm, status))) = (reads.next(), reads.next()) else {
        anyhow::bail!("a read pass is missing");
    };
    Ok(LayerRun {
        writes,
        cold,
        warm,
        status,
    })
}

fn mount_status(mnt: &Path) -> Vec<String> {
    std::fs::read_to_string(mnt.join(".bigtable/status"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn run_mount_layer(layer: Layer, dir: &Path, options: &str, args: &S3Args) -> Result<LayerRun> {
    let plan = args.plan;
    let (data, mnt) = (dir.join("data"), dir.join("mnt"));
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(&mnt)?;
    let bin = mountd_binary(&args.mountd);
    let opts = Some(options.to_string());
    let status = || mount_status(&mnt);
    let daemon = Daemon::start(&bin, &data, &mnt, &opts)?;
    let mut writes = Vec::new();
    let done = (|| {
        for &w in &args.writers {
            eprintln!("  {}: {w} writer(s) ...", layer.label());
            let t = FsTable::create(&mnt, &table_name(w), "cf\n", args.sync)?;
            let put = |k: &[u8], v: &[u8]| t.put_timed(k, v);
            writes.push((w, write_phase(w, plan, &status, &put)?));
            check_interrupted()?;
        }
        Ok::<_, anyhow::Error>(())
    })();
    daemon.stop()?;
    done?;
    let written = last_written(&writes, plan)?;
    let mut reads = Vec::new();
    for warm in [false, true] {
        if !warm {
            make_cold(layer, &data);
        }
        eprintln!(
            "  {}: reads, {} disk cache ...",
            layer.label(),
            if warm { "warm" } else { "cold" }
        );
        let daemon = Daemon::start(&bin, &data, &mnt, &opts)?;
        let t = FsTable::open(&mnt, &table_name(last_writers(args)), args.sync);
        let r = read_phase(&t, &written, plan, &status);
        let s = status();
        daemon.stop()?;
        reads.push((r?, s));
    }
    finish(writes, reads)
}

/// Runs both layers, prints the table, the goals and a JSON line, and
/// returns that line.
pub fn run(args: &S3Args) -> Result<Value> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench-s3")?;
    let what = match args.through {
        Through::Engine => "engine",
        Through::Mount => "fs",
    };
    eprintln!(
        "bigtable-bench {what} --store s3: {} rows of {VALUE_BYTES} B per write phase, writers {:?}, {} readers, sync={}, S3 {} ms away each way, time cap {:.0}s per phase, data in {}",
        args.plan.n,
        args.writers,
        args.plan.threads,
        if args.sync { "on" } else { "off" },
        args.s3_delay.as_millis(),
        args.plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    eprintln!("starting SeaweedFS ...");
    let mut server = S3Server::start(work.path())?;
    if !args.s3_delay.is_zero() {
        server.delay(args.s3_delay)?;
    }
    let extra = args
        .options
        .as_deref()
        .map_or(String::new(), |o| format!(",{o}"));
    let mut runs = Vec::new();
    for layer in [Layer::Chunks, Layer::S3] {
        let options = match layer {
            Layer::Chunks => format!("store=cluster{extra}"),
            Layer::S3 => format!("{}{extra}", server.mount_options(what)),
        };
        eprintln!("running on {} ({options}) ...", layer.label());
        let dir = work.path().join(layer.label());
        let r = match args.through {
            Through::Engine => run_engine_layer(layer, &dir, &options, args),
            Through::Mount => run_mount_layer(layer, &dir, &options, args),
        }
        .with_context(|| format!("on {}", layer.label()))?;
        let _ = std::fs::remove_dir_all(&dir);
        runs.push(r);
    }
    drop(server);
    let [chunks, s3] =
        <[LayerRun; 2]>::try_from(runs).map_err(|_| anyhow::anyhow!("a layer did not run"))?;
    let line = report(args, what, &chunks, &s3);
    println!("{line}");
    Ok(line)
}

fn fmt_f(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.digits$}"))
}

/// `1.23x`, or `-`.
fn fmt_x(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".to_string(), |v| format!("{v:.digits$}x"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn rate_cell(p: &Phase) -> String {
    format!("{:.0}{}", p.m.rate(), if p.m.capped { "*" } else { "" })
}

/// Prints the tables and returns the JSON line.
fn report(args: &S3Args, what: &str, chunks: &LayerRun, s3: &LayerRun) -> Value {
    let lat_name = match args.through {
        Through::Engine => "write latency",
        Through::Mount => "close latency",
    };
    let mut t = Table::new(&[
        "figure",
        "chunks",
        "s3",
        "s3/chunks",
        "s3 PUTs/1k ops",
        "s3 GETs/1k ops",
    ]);
    let mut rows = serde_json::Map::new();
    let mut phase_row = |name: String, c: &Phase, s: &Phase, t: &mut Table| {
        let r = ratio(Some(s.m.rate()), Some(c.m.rate()));
        t.row(vec![
            name.clone(),
            rate_cell(c),
            rate_cell(s),
            fmt_x(r, 2),
            format!("{:.1}", s.per_1000(s.c.puts)),
            format!("{:.1}", s.per_1000(s.c.gets)),
        ]);
        rows.insert(
            name,
            json!({ "chunks": c.json(), "s3": s.json(), "s3_over_chunks": r }),
        );
    };
    for ((w, c), (_, s)) in chunks.writes.iter().zip(&s3.writes) {
        let name = format!("writes/s, {w} writer{}", if *w == 1 { "" } else { "s" });
        phase_row(name, c, s, &mut t);
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            let (a, b) = (quantile_ms(&c.lat, q), quantile_ms(&s.lat, q));
            t.row(vec![
                format!("  {lat_name} {label} (ms)"),
                fmt_f(a, 3),
                fmt_f(b, 3),
                fmt_x(ratio(b, a), 1),
                String::new(),
                String::new(),
            ]);
        }
    }
    phase_row(
        "reads/s, cold disk cache".into(),
        &chunks.cold,
        &s3.cold,
        &mut t,
    );
    phase_row(
        "reads/s, warm disk cache".into(),
        &chunks.warm,
        &s3.warm,
        &mut t,
    );
    println!(
        "{what}: the chunk layer (store=cluster) against S3 (SeaweedFS on loopback, {} ms away each way), {} rows per write phase, sync={}",
        args.s3_delay.as_millis(),
        args.plan.n,
        if args.sync { "on" } else { "off" }
    );
    println!("{}", t.render());
    println!("(* = stopped at the time cap; reads: the last write phase's rows, once each in a fixed random order, by a freshly opened {})", if args.through == Through::Engine { "engine" } else { "mount" });

    let w16 = chunks
        .writes
        .last()
        .zip(s3.writes.last())
        .and_then(|((_, c), (_, s))| ratio(Some(s.m.rate()), Some(c.m.rate())));
    let warm = ratio(Some(chunks.warm.m.rate()), Some(s3.warm.m.rate()));
    let verdict = |met: Option<bool>| match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    };
    println!(
        "goal: 16 writers, s3/chunks >= {WRITE_GOAL}: {} ({})",
        fmt_f(w16, 2),
        verdict(w16.map(|r| r >= WRITE_GOAL))
    );
    println!(
        "goal: warm reads, chunks/s3 <= {WARM_READ_GOAL}: {} ({})",
        fmt_f(warm, 2),
        verdict(warm.map(|r| r <= WARM_READ_GOAL))
    );
    // Where S3's write time goes: one PUT per group-commit batch.
    for ((w, c), (_, s)) in chunks.writes.iter().zip(&s3.writes) {
        let per_batch = (s.c.batches > 0).then(|| s.m.secs * 1000.0 / s.c.batches as f64);
        println!(
            "group commit, {w} writer(s): s3 {} batches, mean {:.1} writes, {} ms per batch, {:.2} PUTs per batch; chunks mean batch {:.1}",
            s.c.batches,
            s.mean_batch(),
            fmt_f(per_batch, 2),
            if s.c.batches == 0 { 0.0 } else { s.c.puts as f64 / s.c.batches as f64 },
            c.mean_batch()
        );
    }
    for l in s3.status.iter().filter(|l| l.starts_with("s3")) {
        println!("s3 status at the end: {l}");
    }
    json!({
        "bench": "s3",
        "through": what,
        "rows_per_phase": args.plan.n,
        "readers": args.plan.threads,
        "sync": args.sync,
        "s3_delay_ms": args.s3_delay.as_millis() as u64,
        "time_cap_secs": args.plan.time_cap.as_secs_f64(),
        "options": args.options,
        "figures": rows,
        "goals": {
            "writes_16_s3_over_chunks": w16,
            "writes_16_goal": WRITE_GOAL,
            "warm_reads_chunks_over_s3": warm,
            "warm_reads_goal": WARM_READ_GOAL,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_come_from_status_lines() {
        let lines = [
            "tables=3 tablet_servers=1 master=m",
            "server=ts0 group_commit_batches=10 group_commit_items=40 group_commit_syncs=0 group_commit_max_batch=9 log_bytes=5",
            "server=ts1 group_commit_batches=2 group_commit_items=2 group_commit_syncs=0 group_commit_max_batch=1",
            "s3 s3://bench/x requests put=12 get=7 head=3 list=1 delete=0",
            "s3_errors put=99 get=99 head=0 list=0 delete=0",
            "s3_bytes put=4567 get=123 head=0 list=0 delete=0",
        ];
        let c = Counters::parse(&lines);
        assert_eq!(
            c,
            Counters {
                puts: 12,
                gets: 7,
                batches: 12,
                items: 42
            }
        );
        let later = Counters { puts: 20, ..c };
        assert_eq!(later.since(c).puts, 8);
        assert_eq!(c.since(later).puts, 0);
        assert_eq!(Counters::parse::<&str>(&[]), Counters::default());
    }

    #[test]
    fn scatter_is_a_permutation() {
        for n in [1u64, 2, 7, 1000, 4096] {
            let mut seen: Vec<u64> = (0..n).map(|k| scatter(k, n)).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n={n}");
        }
        // Scattered, not in order.
        assert_ne!(scatter(1, 1000), 1);
    }

    #[test]
    fn quantiles() {
        let v: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        assert_eq!(quantile_ms(&v, 0.5), Some(51.0));
        assert_eq!(quantile_ms(&v, 0.99), Some(99.0));
        assert_eq!(quantile_ms(&[], 0.5), None);
    }

    #[test]
    fn engine_layer_runs_every_phase_on_the_chunk_layer() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "s3-bench-test").unwrap();
        let args = S3Args {
            through: Through::Engine,
            work_base: dir.path().to_path_buf(),
            plan: Plan {
                n: 200,
                threads: 2,
                time_cap: Duration::from_secs(20),
                min_read: Duration::ZERO,
            },
            // Synced, so that every write goes through group commit and
            // the batch counters must see it.
            sync: true,
            options: None,
            mountd: None,
            writers: WRITERS.to_vec(),
            s3_delay: Duration::ZERO,
        };
        let r =
            run_engine_layer(Layer::Chunks, &dir.path().join("c"), "store=cluster", &args).unwrap();
        assert_eq!(r.writes.len(), 3);
        for (w, p) in &r.writes {
            assert_eq!(p.m.ops, 200, "{w} writers");
            assert_eq!(p.lat.len(), 200);
            assert_eq!(p.c.puts, 0);
            assert!(p.c.items >= 200, "{:?}", p.c);
        }
        assert_eq!(r.cold.m.ops, 200);
        assert_eq!(r.warm.m.ops, 200);
    }
}
