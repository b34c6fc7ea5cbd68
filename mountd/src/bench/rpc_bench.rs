//! `bigtable-bench rpc`: what the internal RPC between daemons costs. The
//! key/value workloads on one engine whose client and master call its
//! tablet servers in process, then on one whose every call crosses the
//! internal gRPC service on loopback (`cluster_dial_self`), each fresh on
//! local disk; per operation: the time, the CPU the whole process used
//! (both ends of every call, in one process) and the internal calls it
//! made.

use super::common::{fmt_bytes, Measured, Table, TempDir, VALUE_BYTES};
use super::engine_bench::{EngineArgs, EngineTable};
use super::workloads::{
    fill_random, fill_seq, read_random, read_seq, scan_all, KvStore, Plan, Written,
};
use anyhow::{Context, Result};
use engine::Bigtable;
use grpc::internal::Node;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The workloads, in the order they run.
const WORKLOADS: [&str; 5] = [
    "sequential write",
    "random write",
    "sequential read",
    "random read",
    "scan",
];

/// One workload's figures on one engine.
struct Figure {
    m: Measured,
    /// Internal calls served during it (0 in process).
    calls: u64,
    /// CPU seconds the process used during it (caller and callee).
    cpu: f64,
}

impl Figure {
    /// Microseconds per operation per thread (what one caller waits).
    fn micros(&self, threads: usize) -> f64 {
        if self.m.ops == 0 {
            return 0.0;
        }
        self.m.secs * 1e6 * threads as f64 / self.m.ops as f64
    }

    /// CPU microseconds per operation, both ends together.
    fn cpu_micros(&self) -> f64 {
        self.cpu * 1e6 / self.m.ops.max(1) as f64
    }
}

/// An engine on `dir`, its calls in process or (with `rpc`) over the
/// internal service, and the node serving that.
fn open(dir: &Path, rpc: bool) -> Result<(Bigtable, Option<Node>)> {
    let store = Arc::new(gfs::LocalStore::open(dir)?);
    if !rpc {
        return Ok((Bigtable::open(store, engine::Options::default())?, None));
    }
    let node = Node::start("127.0.0.1:0".parse()?, None)?;
    let opts = engine::Options {
        advertise: Some(node.addr.to_string()),
        ..engine::Options::default()
    };
    let bt = Bigtable::launch(store, None, opts)?;
    node.attach(&bt, true);
    bt.wait_ready(Duration::from_secs(120))
        .context("waiting for the engine")?;
    Ok((bt, Some(node)))
}

/// The five workloads on a fresh engine in `dir`.
fn run_one(dir: &Path, plan: Plan, rpc: bool) -> Result<Vec<Figure>> {
    let (db, node) = open(dir, rpc)?;
    let calls = || node.as_ref().map_or(0, |n| n.calls_served());
    let result = (|| {
        let seq = EngineTable::create(&db, "seq", false, false)?;
        let rand = EngineTable::create(&db, "rand", false, false)?;
        let mut out = Vec::new();
        let measure = |out: &mut Vec<Figure>, f: &dyn Fn() -> Result<Measured>| -> Result<()> {
            let before = calls();
            let cpu = super::cpu::cpu_secs("self");
            let m = f()?;
            out.push(Figure {
                m,
                calls: calls() - before,
                cpu: super::cpu::cpu_secs("self") - cpu,
            });
            Ok(())
        };
        measure(&mut out, &|| fill_seq(&seq, plan))?;
        measure(&mut out, &|| fill_random(&rand, plan))?;
        seq.flush()?;
        let written = Written::from_fill(plan.n, &out[0].m);
        measure(&mut out, &|| read_seq(&seq, &written, plan))?;
        measure(&mut out, &|| read_random(&seq, &written, plan))?;
        measure(&mut out, &|| scan_all(&seq, &written, plan))?;
        Ok::<_, anyhow::Error>(out)
    })();
    if let Err(e) = db.close() {
        eprintln!("warning: closing the engine: {e}");
    }
    if let Some(n) = node {
        n.stop();
    }
    result
}

pub fn run(args: &EngineArgs) -> Result<()> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench")?;
    let plan = args.plan;
    eprintln!(
        "bigtable-bench rpc: {} rows of {VALUE_BYTES} B ({}), {} threads, time cap {:.0}s per workload, data in {}",
        plan.n,
        fmt_bytes(plan.n * VALUE_BYTES as u64),
        plan.threads,
        plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    eprintln!("running in process ...");
    let local = run_one(&work.path().join("local"), plan, false)?;
    eprintln!("running over the internal RPC ...");
    let remote = run_one(&work.path().join("rpc"), plan, true)?;
    let mut table = Table::new(&[
        "workload",
        "in process (ops/s)",
        "µs/op",
        "over the RPC (ops/s)",
        "µs/op",
        "calls/op",
        "ratio",
        "CPU µs/op: in process",
        "over the RPC",
        "CPU ratio",
    ]);
    let mut workloads = serde_json::Map::new();
    for ((name, l), r) in WORKLOADS.iter().zip(&local).zip(&remote) {
        let ratio = if l.m.rate() > 0.0 {
            r.m.rate() / l.m.rate()
        } else {
            0.0
        };
        let per_op = r.calls as f64 / r.m.ops.max(1) as f64;
        table.row(vec![
            name.to_string(),
            format!("{:.0}", l.m.rate()),
            format!("{:.1}", l.micros(plan.threads)),
            format!("{:.0}", r.m.rate()),
            format!("{:.1}", r.micros(plan.threads)),
            format!("{per_op:.2}"),
            format!("{ratio:.2}×"),
            format!("{:.1}", l.cpu_micros()),
            format!("{:.1}", r.cpu_micros()),
            // Below a few clock ticks (10 ms each) there is no ratio.
            if l.cpu >= 0.05 {
                format!("{:.1}×", r.cpu_micros() / l.cpu_micros())
            } else {
                "-".to_string()
            },
        ]);
        workloads.insert(
            name.replace(' ', "_"),
            serde_json::json!({
                "in_process": l.m.json(),
                "rpc": r.m.json(),
                "rpc_calls": r.calls,
                "ratio": ratio,
                "cpu_us_per_op": { "in_process": l.cpu_micros(), "rpc": r.cpu_micros() },
            }),
        );
    }
    println!("{}", table.render());
    println!("(µs/op: what one of the {} threads waits per operation; calls/op: internal calls served per operation; CPU: the whole process's, both ends of each call, per operation; scan: cells)", plan.threads);
    let line = serde_json::json!({
        "bench": "rpc",
        "rows": plan.n,
        "value_bytes": VALUE_BYTES,
        "threads": plan.threads,
        "workloads": workloads,
    });
    println!("{line}");
    Ok(())
}
