//! `bigtable-bench engine` (the default): Figure 6 on the engine's client API,
//! with the data on disk through `gfs::LocalStore`, and (feature `peers`) the
//! same key/value workloads on RocksDB and fjall.

use super::common::{
    fmt_bytes, fmt_rate, fmt_ratio, json_ratio, round3, scan_should_stop, Measured, Table, TempDir,
    VALUE_BYTES,
};
use super::workloads::{fig6_suite, Fig6, Fig6Results, KvResults, KvStore, Plan};
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
}

impl KvStore for EngineTable {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let m = RowMutation::new(key).set(FAMILY, QUALIFIER, value);
        Ok(self.db.apply(&self.table, &m, self.write)?)
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self
            .db
            .read_cell(&self.table, key, FAMILY, QUALIFIER)?
            .map(|c| c.value.len()))
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        let spec = ScanSpec {
            rows: RowRange::between(start, end),
            ..Default::default()
        };
        let mut n = 0u64;
        for cell in self.db.scan(&self.table, spec)? {
            cell?;
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
}

/// What `engine` was asked to do.
pub struct EngineArgs {
    pub work_base: PathBuf,
    pub plan: Plan,
    pub sync: bool,
    pub peers: bool,
    pub io_mode: gfs::IoMode,
    pub block_cache: Option<u64>,
    pub memtable: Option<u64>,
    /// Tablet-server counts for the scaling columns (paper Figure 6, right).
    pub scaling: Vec<usize>,
}

fn options(args: &EngineArgs) -> engine::Options {
    let mut opts = engine::Options::default();
    if let Some(b) = args.block_cache {
        opts.block_cache_bytes = b;
    }
    if let Some(m) = args.memtable {
        opts.memtable_bytes = m as usize;
    }
    opts
}

/// Runs the six workloads on a fresh engine in `dir`; returns them and the engine's status lines.
pub fn run_engine(dir: &Path, args: &EngineArgs) -> Result<(Fig6Results, Vec<String>)> {
    run_engine_with(dir, args, options(args))
}

fn run_engine_with(
    dir: &Path,
    args: &EngineArgs,
    opts: engine::Options,
) -> Result<(Fig6Results, Vec<String>)> {
    let store = gfs::LocalStore::open_with(dir, args.io_mode)?;
    let db = Bigtable::open(Arc::new(store), opts).context("opening the engine")?;
    let result = (|| {
        let seq = EngineTable::create(&db, "seq", false, args.sync)?;
        let rand = EngineTable::create(&db, "rand", false, args.sync)?;
        let mem = EngineTable::create(&db, "mem", true, args.sync)?;
        fig6_suite(&seq, &rand, &mem, args.plan)
    })();
    let status = db.status();
    if let Err(e) = db.close() {
        eprintln!("warning: closing the engine: {e}");
    }
    Ok((result?, status))
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
    let rocksdb = Some(super::peers::run_rocksdb(dir, args.sync, cache, args.plan));
    eprintln!("running fjall ...");
    let fjall = Some(super::peers::run_fjall(dir, args.sync, cache, args.plan));
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

pub fn run(args: &EngineArgs) -> Result<()> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench")?;
    let plan = args.plan;
    eprintln!(
        "bigtable-bench engine: {} rows of {VALUE_BYTES} B ({}), {} threads, sync={}, io={}, block cache {} (peers too), time cap {:.0}s per workload, data in {}",
        plan.n,
        fmt_bytes(plan.n * VALUE_BYTES as u64),
        plan.threads,
        if args.sync { "on" } else { "off" },
        args.io_mode,
        fmt_bytes(options(args).block_cache_bytes),
        plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    eprintln!("running the engine ...");
    let engine_dir = work.path().join("engine");
    let (ours, status) = run_engine(&engine_dir, args)?;
    let _ = std::fs::remove_dir_all(&engine_dir);
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
    ]);
    let mut workloads = serde_json::Map::new();
    for w in Fig6::ALL {
        let m = ours.get(w);
        let ours_rate = Some(m.rate());
        let (rk, fj) = (peer_rate(&peers.rocksdb, w), peer_rate(&peers.fjall, w));
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
        ]);
        let mut j = m.json();
        if let serde_json::Value::Object(o) = &mut j {
            o.insert("paper".into(), serde_json::json!(w.paper()));
            o.insert("vs_paper".into(), json_ratio(ours_rate, Some(w.paper())));
            o.insert("rocksdb".into(), peer_json(&peers.rocksdb, w));
            o.insert("vs_rocksdb".into(), json_ratio(ours_rate, rk));
            o.insert("fjall".into(), peer_json(&peers.fjall, w));
            o.insert("vs_fjall".into(), json_ratio(ours_rate, fj));
        }
        workloads.insert(w.key().into(), j);
    }
    println!("{}", table.render());
    println!(
        "(* = stopped at the time cap; paper = Figure 6, one tablet server, 1000-byte values/s)"
    );
    println!(
        "flush before reads: ours {:.2}s; mem table fill {:.0} ops/s",
        ours.kv.flush_secs,
        ours.mem_fill.rate()
    );
    if let Some(n) = &peers.note {
        println!("{n}");
    }
    for line in status.iter().take(12) {
        eprintln!("engine status: {line}");
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
        "block_cache_bytes": options(args).block_cache_bytes,
        "time_cap_secs": plan.time_cap.as_secs_f64(),
        "workloads": workloads,
        "mem_fill": ours.mem_fill.json(),
        "flush_secs": { "ours": round3(ours.kv.flush_secs), "rocksdb": flush(&peers.rocksdb), "fjall": flush(&peers.fjall) },
        "peer_errors": { "rocksdb": err(&peers.rocksdb), "fjall": err(&peers.fjall) },
    });
    println!("{line}");
    if !args.scaling.is_empty() {
        scaling(work.path(), args)?;
    }
    Ok(())
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
        let (r, _) = run_engine_with(&dir, args, opts)?;
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
        let args = EngineArgs {
            work_base: dir.path().to_path_buf(),
            plan: Plan {
                n: 300,
                threads: 2,
                time_cap: std::time::Duration::from_secs(20),
            },
            sync: false,
            peers: false,
            io_mode: gfs::IoMode::Uring,
            block_cache: None,
            // Small, so that the writes reach SSTables before the reads.
            memtable: Some(64 << 10),
            scaling: Vec::new(),
        };
        let (r, _status) = run_engine(&dir.path().join("engine"), &args).unwrap();
        for w in Fig6::ALL {
            assert_eq!(r.get(w).ops, 300, "{w:?}");
            assert!(!r.get(w).capped, "{w:?}");
        }
    }
}
