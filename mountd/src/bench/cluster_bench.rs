//! `bigtable-bench cluster`: the Figure 6 workloads on one Bigtable served
//! by one daemon and by three, all on one SeaweedFS bucket and one etcd
//! that this run starts on loopback.
//!
//! For each daemon count it mounts fresh daemons under a fresh prefix of
//! the bucket (each `--servers-per-daemon` tablet servers, internal RPC on
//! a free loopback port), waits until every server serves, makes the
//! benchmark tables and splits each into `--tablets-per-server` tablets
//! per server, placed round-robin over the servers (`.bigtable/control`).
//! The workloads run with `--threads` clients per mount, all mounts at
//! once: the key space is cut into one contiguous range per mount, so a
//! sequential writer goes through the mount of its range and a random
//! read through the mount its key falls in. Per workload it prints the
//! aggregate rate; per server the operations it served per second
//! (`writes=`, `reads=`, `scans=` of `.bigtable/servers`, before and
//! after); and the CPU time the daemons and this process spent per
//! operation (`/proc/PID/stat`), from which what more machines would do
//! can be estimated.
//!
//! The daemons run with `merge=0` and `no_balance`: the master would
//! otherwise merge the small pre-split tablets back together within
//! seconds, and move tablets after the load of each workload. The layout is
//! checked (and restored) before every workload, and the tablets each
//! server held after it are printed.

use super::common::{
    check_interrupted, fmt_bytes, interrupted, row_key, Measured, Table, TempDir, VALUE_BYTES,
};
use super::cpu::cpu_secs;
use super::fs_bench::{Cost, FsTable};
use super::machines::{Machine, Net};
use super::s3_server::S3Server;
use super::scale_bench::{mountd_binary, Daemon};
use super::workloads::{
    fill_random, fill_seq, read_random, read_seq, scan_all, Fig6, KvStore, Plan, Written,
};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The workloads run, in this order (Figure 6's six; reads from memory
/// read a third table, whose family is in memory, filled unmeasured
/// before them).
const WORKLOADS: [Fig6; 6] = [
    Fig6::SeqWrite,
    Fig6::RandWrite,
    Fig6::SeqRead,
    Fig6::RandRead,
    Fig6::RandReadMem,
    Fig6::Scan,
];

/// `bigtable-bench cluster`'s own options.
#[derive(Args, Debug)]
pub struct ClusterOpts {
    /// Daemon counts to measure, each on a fresh prefix of one bucket.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 3])]
    pub daemons: Vec<usize>,
    /// Tablet servers each daemon runs (`tablet_servers=`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub servers_per_daemon: u16,
    /// Tablets per server each benchmark table is split into.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub tablets_per_server: u16,
    /// The daemon binary (default: bigtable-mountd beside this program, else on the PATH).
    #[arg(long)]
    pub mountd: Option<PathBuf>,
    /// Extra mount options for every daemon (e.g. `cache=64m`).
    #[arg(short = 'o', long)]
    pub options: Option<String>,
    /// Daemon counts to measure with each daemon on a simulated machine
    /// of its own (network namespace and CPU cgroup; root only); replaces
    /// `--daemons`.
    #[arg(long, value_delimiter = ',')]
    pub machines: Vec<usize>,
    /// CPU cores each machine may use (its cgroup's quota; default none).
    #[arg(long)]
    pub cpus_per_machine: Option<f64>,
}

/// The paper's per-server efficiency at 50 tablet servers (Figure 6:
/// aggregate rate over 50 times one server's).
fn paper_efficiency(w: Fig6) -> f64 {
    match w {
        Fig6::SeqWrite | Fig6::RandWrite => 0.42,
        Fig6::SeqRead => 0.56,
        Fig6::RandRead => 0.49,
        Fig6::Scan => 0.68,
        _ => 0.79,
    }
}

/// What `cluster` was asked to do; `plan.threads` are per mount.
pub struct ClusterArgs {
    pub opts: ClusterOpts,
    pub plan: Plan,
    pub sync: bool,
    pub work_base: PathBuf,
}

/// etcd on loopback, on free ports, in a fresh directory (the launcher the
/// tests use, feature `bench-s3`). Dropping it kills the server by pid.
#[cfg_attr(not(feature = "bench-s3"), allow(dead_code))]
pub(super) struct LockServer {
    #[cfg(feature = "bench-s3")]
    _etcd: testkit::etcd::Etcd,
    pub(super) endpoint: String,
}

impl LockServer {
    /// etcd listening on address `host` of this machine.
    #[cfg(feature = "bench-s3")]
    pub(super) fn start_on(host: &str) -> Result<LockServer> {
        // The launcher panics, saying why, when the server does not come up.
        let etcd =
            std::panic::catch_unwind(|| testkit::etcd::Etcd::start_on(host)).map_err(|_| {
                anyhow::anyhow!("etcd did not start (why is above; BIGTABLE_ETCD names `etcd`)")
            })?;
        Ok(LockServer {
            endpoint: etcd.endpoint.clone(),
            _etcd: etcd,
        })
    }

    #[cfg(not(feature = "bench-s3"))]
    pub(super) fn start_on(_: &str) -> Result<LockServer> {
        bail!(
            "cluster needs the bench built with the server launchers: \
             cargo build --release -p mountd --features bench-s3"
        )
    }
}

/// A daemon of the cluster: unmounted on drop, then killed by pid if it
/// has not exited by itself.
pub(super) struct Member {
    pub(super) daemon: Option<Daemon>,
    pub(super) pid: u32,
    pub(super) mnt: PathBuf,
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_gone(pid: u32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

impl Drop for Member {
    fn drop(&mut self) {
        drop(self.daemon.take());
        if wait_gone(self.pid, Duration::from_secs(20)) {
            return;
        }
        eprintln!(
            "warning: daemon pid {} still runs after its unmount; killing it",
            self.pid
        );
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        if !wait_gone(self.pid, Duration::from_secs(10)) {
            eprintln!("warning: daemon pid {} survived SIGKILL", self.pid);
        }
    }
}

/// Waits until `check` holds, polling, giving up at `within` or Ctrl-C.
pub(super) fn wait_for(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if check()? {
            return Ok(());
        }
        check_interrupted()?;
        if Instant::now() >= deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One line of `.bigtable/servers`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerLine {
    name: String,
    serving: bool,
    /// Writes, reads and scans served (server-wide counters, unlike
    /// `requests=`, which sums the tablets it holds now).
    ops: u64,
}

fn parse_servers(text: &str) -> Vec<ServerLine> {
    text.lines()
        .filter_map(|l| {
            let field = |k: &str| l.split_whitespace().find_map(|w| w.strip_prefix(k));
            let count = |k: &str| field(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            Some(ServerLine {
                name: field("server=")?.to_string(),
                serving: field("state=") == Some("serving"),
                ops: count("writes=") + count("reads=") + count("scans="),
            })
        })
        .collect()
}

fn servers(mnt: &Path) -> Result<Vec<ServerLine>> {
    let path = mnt.join(".bigtable/servers");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_servers(&text))
}

/// The serving servers' names, sorted.
fn serving(mnt: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = servers(mnt)?
        .into_iter()
        .filter(|s| s.serving)
        .map(|s| s.name)
        .collect();
    names.sort();
    Ok(names)
}

/// The server of each tablet of `table` in row order, from `.bigtable/tablets`
/// (`table id start end … server`; the server is the last field).
fn parse_tablets(text: &str, table: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&table)).then(|| f.last().map(|s| s.to_string()))?
        })
        .collect()
}

fn tablets(mnt: &Path, table: &str) -> Result<Vec<String>> {
    let path = mnt.join(".bigtable/tablets");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_tablets(&text, table))
}

/// Runs an operator command through `.bigtable/control`.
fn control(mnt: &Path, command: &str) -> Result<()> {
    let path = mnt.join(".bigtable/control");
    std::fs::write(&path, format!("{command}\n")).with_context(|| format!("{command:?}"))
}

/// The first row of tablet `k` of `count` over keys `0..n`.
fn boundary(n: u64, count: usize, k: usize) -> String {
    row_key(n * k as u64 / count.max(1) as u64)
}

/// How many tablets each table is cut into: at least `per_server` per
/// server, and a multiple of the client threads, so that every thread's
/// share of the keys starts a tablet.
fn tablet_count(servers: usize, per_server: usize, threads: usize) -> usize {
    let threads = threads.max(1);
    (servers * per_server).div_ceil(threads).max(1) * threads
}

/// The server (index) of tablet `k` of `count` with `threads` clients: the
/// tablets of client thread `t`'s share go to server `t % servers`, so a
/// capped sequential fill (each thread writes the start of its share)
/// loads every server alike, and so do the reads of what it wrote.
fn placement(k: usize, count: usize, threads: usize, servers: usize) -> usize {
    (k * threads.max(1) / count.max(1)) % servers.max(1)
}

/// Splits `table` into `count` tablets of equal key ranges over `0..n`
/// and places them by [`placement`], then waits until the layout holds.
/// A split or move the master has already made (or merged away
/// meanwhile) is simply asked for again.
fn lay_out(mnt: &Path, table: &str, n: u64, count: usize, threads: usize) -> Result<()> {
    let names = serving(mnt)?;
    if names.is_empty() {
        bail!("no serving tablet server");
    }
    let want = |k: usize| names[placement(k, count, threads, names.len())].clone();
    let settled = || -> Result<bool> {
        let now = tablets(mnt, table)?;
        Ok(now.len() == count && now.iter().enumerate().all(|(k, s)| *s == want(k)))
    };
    for _ in 0..10 {
        if settled()? {
            return Ok(());
        }
        check_interrupted()?;
        if tablets(mnt, table)?.len() < count {
            for k in 1..count {
                // Refused when the row already starts a tablet: fine.
                let _ = control(mnt, &format!("split {table} {}", boundary(n, count, k)));
            }
        }
        let _ = wait_for("the splits", Duration::from_secs(5), || {
            Ok(tablets(mnt, table)?.len() >= count)
        });
        let now = tablets(mnt, table)?;
        if now.len() == count {
            for (k, server) in now.iter().enumerate() {
                if *server != want(k) {
                    let cmd = format!("move {table} {} {}", boundary(n, count, k), want(k));
                    if let Err(e) = control(mnt, &cmd) {
                        eprintln!("  warning: {e:#}");
                    }
                }
            }
        }
        let _ = wait_for("the moves", Duration::from_secs(5), settled);
    }
    bail!(
        "{table}: could not lay out {count} tablets over {names:?}; now {:?}",
        tablets(mnt, table)?
    )
}

/// How many of `table`'s tablets each server holds, e.g. `ts0:3 ts1:3`.
fn spread(mnt: &Path, table: &str) -> String {
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for s in tablets(mnt, table).unwrap_or_default() {
        *by.entry(s).or_default() += 1;
    }
    by.iter()
        .map(|(s, c)| format!("{s}:{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One table reached through every mount: row `i` of `0..n` goes through
/// mount `i * mounts / n`, so each mount serves one contiguous key range.
struct Spread {
    tables: Vec<FsTable>,
    n: u64,
}

impl Spread {
    fn pick(&self, key: &[u8]) -> &FsTable {
        let i: u64 = std::str::from_utf8(key)
            .ok()
            .and_then(|k| k.parse().ok())
            .unwrap_or(0);
        let m = self.tables.len() as u64;
        let idx = (i.min(self.n.saturating_sub(1)) * m / self.n.max(1)) as usize;
        &self.tables[idx.min(self.tables.len() - 1)]
    }
}

impl KvStore for Spread {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.pick(key).put(key, value)
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        self.pick(key).get(key)
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        self.pick(start).scan(start, end, deadline)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn forget_cached(&self) -> Result<()> {
        for t in &self.tables {
            t.forget_cached()?;
        }
        Ok(())
    }
}

/// One workload on one cluster.
struct Run {
    m: Measured,
    /// Requests each server answered per second during it.
    per_server: Vec<(String, f64)>,
    /// Tablets of the workload's table per server, after it.
    spread: String,
    /// CPU milliseconds per operation: all daemons (less what they burn
    /// idle), and this process.
    daemon_cpu_ms: f64,
    bench_cpu_ms: f64,
    /// With machines: each machine's CPU milliseconds per operation
    /// (its cgroup's, idle included).
    machine_cpu_ms: Vec<f64>,
    /// Tablet-server calls per operation, over all mounts.
    calls_per_op: Option<f64>,
}

impl Run {
    fn json(&self) -> Value {
        let per: serde_json::Map<String, Value> = self
            .per_server
            .iter()
            .map(|(s, r)| (s.clone(), json!(r.round())))
            .collect();
        json!({
            "result": self.m.json(),
            "server_ops_per_sec": per,
            "tablets": self.spread,
            "daemon_cpu_ms_per_op": super::common::round3(self.daemon_cpu_ms),
            "bench_cpu_ms_per_op": super::common::round3(self.bench_cpu_ms),
            "machine_cpu_ms_per_op": self.machine_cpu_ms.iter().map(|v| super::common::round3(*v)).collect::<Vec<_>>(),
            "calls_per_op": self.calls_per_op.map(super::common::round3),
        })
    }
}

/// The workloads on one cluster of `daemons` daemons.
struct ClusterRun {
    daemons: usize,
    servers: usize,
    /// Tablets per table.
    tablets: usize,
    /// CPU cores the daemons used while idle.
    idle_cores: f64,
    runs: Vec<(Fig6, Run)>,
}

fn server_ops(mnt: &Path) -> Result<BTreeMap<String, u64>> {
    Ok(servers(mnt)?.into_iter().map(|s| (s.name, s.ops)).collect())
}

/// Mounts `count` daemons under `prefix`, lays out the tables, runs the
/// workloads, and stops the daemons (also on error).
fn run_cluster(
    args: &ClusterArgs,
    count: usize,
    s3: &S3Server,
    lock: &LockServer,
    work: &Path,
    net: Option<&Net>,
) -> Result<ClusterRun> {
    let o = &args.opts;
    let prefix = format!("daemons{count}");
    let per = o.servers_per_daemon as usize;
    // Daemons that share an etcd share a secret (a private file).
    let secret = work.join(format!("{prefix}-secret"));
    std::fs::write(&secret, format!("bench-{:032x}\n", rand::random::<u128>()))?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    // Dropped after the daemons (declared before them).
    let machines: Vec<Machine> = match net {
        Some(n) => (0..count)
            .map(|i| n.machine(i as u8, o.cpus_per_machine))
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    let mut opts = format!(
        "{},lock=etcd://{}/{prefix},tablet_servers={per},cluster_secret_file={},merge=0,no_balance",
        s3.mount_options(&prefix),
        lock.endpoint,
        secret.display()
    );
    if let Some(extra) = &o.options {
        opts.push(',');
        opts.push_str(extra);
    }
    let bin = mountd_binary(&o.mountd);
    let mut members: Vec<Member> = Vec::new();
    for i in 0..count {
        let data = work.join(format!("{prefix}-data{i}"));
        let mnt = work.join(format!("{prefix}-mnt{i}"));
        std::fs::create_dir_all(&data)?;
        std::fs::create_dir_all(&mnt)?;
        eprintln!("  mounting daemon {i} at {} ...", mnt.display());
        // Its internal RPC on its machine's address, else on loopback.
        let listen = machines.get(i).map_or("127.0.0.1".into(), Machine::ip);
        let opts = Some(format!("{opts},cluster_listen={listen}:0"));
        let daemon = Daemon::start_with(&bin, &data, &mnt, &opts, |cmd| match machines.get(i) {
            Some(m) => m.enter(cmd),
            None => Ok(()),
        })?;
        members.push(Member {
            pid: daemon.pid(),
            daemon: Some(daemon),
            mnt,
        });
        check_interrupted()?;
    }
    let mnt0 = members[0].mnt.clone();
    let servers = count * per;
    wait_for(
        &format!("{servers} serving tablet servers"),
        Duration::from_secs(120),
        || {
            Ok(members
                .iter()
                .all(|m| serving(&m.mnt).ok().map(|s| s.len()) == Some(servers)))
        },
    )?;
    let plan = Plan {
        threads: args.plan.threads * count,
        ..args.plan
    };
    let n_tablets = tablet_count(servers, o.tablets_per_server as usize, plan.threads);
    let mut spreads = Vec::new();
    for (name, schema) in [
        ("seq", "cf\n"),
        ("rand", "cf\n"),
        ("mem", "cf in_memory=true\n"),
    ] {
        FsTable::create(&mnt0, name, schema, args.sync)?;
        wait_for(
            &format!("every mount to list table {name}"),
            Duration::from_secs(30),
            || Ok(members.iter().all(|m| m.mnt.join(name).is_dir())),
        )?;
        lay_out(&mnt0, name, plan.n, n_tablets, plan.threads)?;
        eprintln!("  {name}: {n_tablets} tablets, {}", spread(&mnt0, name));
        spreads.push(Spread {
            tables: members
                .iter()
                .map(|m| FsTable::open(&m.mnt, name, args.sync))
                .collect(),
            n: plan.n,
        });
    }
    // What the daemons burn doing nothing (heartbeats, lock sessions,
    // balancing rounds), so that it can be told from the cost per operation.
    let pids: Vec<String> = members.iter().map(|m| m.pid.to_string()).collect();
    let daemons_cpu = || pids.iter().map(|p| cpu_secs(p)).sum::<f64>();
    let (idle_from, idle_t) = (daemons_cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    let idle_cores = (daemons_cpu() - idle_from) / idle_t.elapsed().as_secs_f64();
    eprintln!("  idle daemons use {:.2} cores", idle_cores);
    let (seq, rand, mem) = (&spreads[0], &spreads[1], &spreads[2]);
    let mut runs = Vec::new();
    let mut written: Option<Written> = None;
    let mut mem_written: Option<Written> = None;
    for w in WORKLOADS {
        let (table, name) = match w {
            Fig6::RandWrite => (rand, "rand"),
            Fig6::RandReadMem => (mem, "mem"),
            _ => (seq, "seq"),
        };
        lay_out(&mnt0, name, plan.n, n_tablets, plan.threads)?;
        if w == Fig6::RandReadMem {
            eprintln!("  filling the in-memory table ...");
            mem_written = Some(Written::from_fill(plan.n, &fill_seq(mem, plan)?));
        }
        if matches!(w, Fig6::RandRead | Fig6::RandReadMem) {
            // As in every suite: random reads of the store, not of the
            // pages the reads or writes before left in the kernel.
            table.forget_cached()?;
        }
        eprintln!("  {} ...", w.label());
        let before = server_ops(&mnt0)?;
        let cpu_before = (daemons_cpu(), cpu_secs("self"));
        let machines_before: Vec<Duration> = machines.iter().map(Machine::cpu_used).collect();
        let costs_before: Vec<Option<Cost>> = members.iter().map(|m| Cost::read(&m.mnt)).collect();
        let m = match (w, &written) {
            (Fig6::SeqWrite, _) => fill_seq(table, plan)?,
            (Fig6::RandWrite, _) => fill_random(table, plan)?,
            (Fig6::SeqRead, Some(wr)) => read_seq(table, wr, plan)?,
            (Fig6::RandRead, Some(wr)) => read_random(table, wr, plan)?,
            (Fig6::RandReadMem, _) => match &mem_written {
                Some(wr) => read_random(table, wr, plan)?,
                None => bail!("reads from memory before their table's fill"),
            },
            (Fig6::Scan, Some(wr)) => scan_all(table, wr, plan)?,
            _ => bail!("{} before the sequential write", w.label()),
        };
        let cpu = (
            daemons_cpu() - cpu_before.0,
            cpu_secs("self") - cpu_before.1,
        );
        let after = server_ops(&mnt0)?;
        let per_op = |secs: f64| secs * 1000.0 / m.ops.max(1) as f64;
        let machine_cpu_ms = machines
            .iter()
            .zip(&machines_before)
            .map(|(x, b)| per_op(x.cpu_used().saturating_sub(*b).as_secs_f64()))
            .collect();
        let calls: Option<u64> = members
            .iter()
            .zip(&costs_before)
            .map(|(x, b)| Some(Cost::read(&x.mnt)?.since((*b)?).store_calls))
            .sum();
        let calls_per_op = calls.map(|c| c as f64 / m.ops.max(1) as f64);
        if w == Fig6::SeqWrite {
            written = Some(Written::from_fill(plan.n, &m));
        }
        let per_server = after
            .iter()
            .map(|(s, r)| {
                let d = r.saturating_sub(before.get(s).copied().unwrap_or(0));
                (s.clone(), d as f64 / m.secs.max(1e-9))
            })
            .collect();
        runs.push((
            w,
            Run {
                per_server,
                spread: spread(&mnt0, name),
                daemon_cpu_ms: per_op((cpu.0 - idle_cores * m.secs).max(0.0)),
                bench_cpu_ms: per_op(cpu.1),
                machine_cpu_ms,
                calls_per_op,
                m,
            },
        ));
    }
    eprintln!("  stopping {count} daemon(s) ...");
    drop(members);
    drop(machines);
    Ok(ClusterRun {
        daemons: count,
        servers,
        tablets: n_tablets,
        idle_cores,
        runs,
    })
}

fn fmt_per_server(r: &Run) -> String {
    r.per_server
        .iter()
        .map(|(s, v)| format!("{s}:{v:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints the table and returns the JSON line.
fn report(args: &ClusterArgs, clusters: &[ClusterRun]) -> Value {
    let first = clusters.first();
    let last = clusters.last().filter(|_| clusters.len() > 1);
    let mut header: Vec<String> = vec!["workload (files/s)".into()];
    for c in clusters {
        header.push(format!(
            "{} daemon{}",
            c.daemons,
            if c.daemons == 1 { "" } else { "s" }
        ));
    }
    if let (Some(a), Some(b)) = (first, last) {
        header.push(format!("{}/{}", b.daemons, a.daemons));
        header.push("per server".into());
        header.push("paper @50".into());
    }
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut t = Table::new(&hdr);
    for (i, w) in WORKLOADS.iter().enumerate() {
        let mut row = vec![w.label().to_string()];
        for c in clusters {
            row.push(
                c.runs
                    .get(i)
                    .map_or("-".into(), |(_, r)| super::common::fmt_rate(&r.m)),
            );
        }
        if let (Some(a), Some(b)) = (first, last) {
            let rate = |c: &ClusterRun| c.runs.get(i).map(|(_, r)| r.m.rate());
            row.push(super::common::fmt_ratio(rate(b), rate(a)));
            // Per-server efficiency: the scaling factor over the growth
            // in servers, as the paper's Figure 6 reports it.
            let grow = b.servers as f64 / a.servers.max(1) as f64;
            let eff = rate(b).zip(rate(a)).map(|(x, y)| x / y.max(1e-9) / grow);
            row.push(eff.map_or("-".into(), |e| format!("{e:.2}")));
            row.push(format!("{:.2}", paper_efficiency(*w)));
        }
        t.row(row);
    }
    println!(
        "cluster: Figure 6 through {} thread(s) per mount, {} cells of {VALUE_BYTES} B per table ({}), sync={}, {} tablet server(s) per daemon, {} tablets per server, one SeaweedFS and one etcd on loopback",
        args.plan.threads,
        args.plan.n,
        fmt_bytes(args.plan.n * VALUE_BYTES as u64),
        if args.sync { "on" } else { "off" },
        args.opts.servers_per_daemon,
        args.opts.tablets_per_server
    );
    println!("{}", t.render());
    println!("(* = stopped at the time cap; rates are cells (files) per second over all mounts)");
    if !args.opts.machines.is_empty() {
        println!(
            "each daemon on a machine of its own: network namespace on a bridge, CPU quota {}",
            args.opts
                .cpus_per_machine
                .map_or("none".into(), |c| format!("{c} core(s)"))
        );
    }
    for c in clusters {
        println!(
            "{} daemon(s), {} tablets per table, idle daemons {:.2} cores; per workload: CPU ms per operation (daemons net of idle + bench), ops/s per tablet server [its tablets after]:",
            c.daemons, c.tablets, c.idle_cores
        );
        for (w, r) in &c.runs {
            println!(
                "  {:<17} {:.2} + {:.2}  {}  [{}]",
                w.label(),
                r.daemon_cpu_ms,
                r.bench_cpu_ms,
                fmt_per_server(r),
                r.spread
            );
            let machines: Vec<String> = r
                .machine_cpu_ms
                .iter()
                .enumerate()
                .map(|(i, v)| format!("m{i}:{v:.3}"))
                .collect();
            println!(
                "  {:<17} calls/file {}  CPU ms per file per machine {}",
                "",
                r.calls_per_op.map_or("-".into(), |c| format!("{c:.2}")),
                if machines.is_empty() {
                    "-".into()
                } else {
                    machines.join(" ")
                }
            );
        }
    }
    let runs: Vec<Value> = clusters
        .iter()
        .map(|c| {
            let w: serde_json::Map<String, Value> = c
                .runs
                .iter()
                .map(|(w, r)| (w.key().into(), r.json()))
                .collect();
            json!({
                "daemons": c.daemons,
                "servers": c.servers,
                "tablets": c.tablets,
                "idle_cores": super::common::round3(c.idle_cores),
                "workloads": w,
            })
        })
        .collect();
    json!({
        "bench": "cluster",
        "threads_per_mount": args.plan.threads,
        "cells_per_table": args.plan.n,
        "value_bytes": VALUE_BYTES,
        "sync": args.sync,
        "time_cap_secs": args.plan.time_cap.as_secs_f64(),
        "servers_per_daemon": args.opts.servers_per_daemon,
        "tablets_per_server": args.opts.tablets_per_server,
        "machines": !args.opts.machines.is_empty(),
        "cpus_per_machine": args.opts.cpus_per_machine,
        "clusters": runs,
    })
}

/// Starts SeaweedFS and etcd, measures each daemon count, prints the
/// table and the JSON line, and stops every server it started.
pub fn run(args: &ClusterArgs) -> Result<Value> {
    let counts = if args.opts.machines.is_empty() {
        &args.opts.daemons
    } else {
        &args.opts.machines
    };
    if counts.contains(&0) || counts.iter().any(|&c| c > 200) {
        bail!("--daemons/--machines: every count must be 1 to 200");
    }
    let work = TempDir::new_in(&args.work_base, "bigtable-bench-cluster")?;
    eprintln!(
        "bigtable-bench cluster: daemons {counts:?}{}, {} cells per table, {} thread(s) per mount, time cap {:.0}s per workload, data in {}",
        if args.opts.machines.is_empty() { "" } else { " on machines of their own" },
        args.plan.n,
        args.plan.threads,
        args.plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    // The machines' bridge first: SeaweedFS and etcd listen on it.
    let net = if args.opts.machines.is_empty() {
        None
    } else {
        Some(Net::create()?)
    };
    let host = net.as_ref().map_or("127.0.0.1".into(), Net::host_ip);
    eprintln!("starting SeaweedFS and etcd on {host} ...");
    let s3 = S3Server::start_on(work.path(), &host)?;
    let lock = LockServer::start_on(&host)?;
    let mut clusters = Vec::new();
    for &count in counts {
        if interrupted() {
            break;
        }
        eprintln!("{count} daemon(s):");
        clusters.push(
            run_cluster(args, count, &s3, &lock, work.path(), net.as_ref())
                .with_context(|| format!("with {count} daemon(s)"))?,
        );
    }
    check_interrupted()?;
    let line = report(args, &clusters);
    // The machine is shared: say how busy it was.
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!(
            "load average at the end: {}",
            l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        );
    }
    println!("{line}");
    drop(lock);
    drop(s3);
    // The bridge goes last (at the end of scope).
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_lines_parse() {
        let text =
            "server=ts0 state=serving tablets=3 requests=42 writes=1 reads=5 scans=2 addr=x\n\
                    server=d1-ts0 state=dead tablets=0 requests=7\n\
                    garbage\n";
        let s = parse_servers(text);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[0],
            ServerLine {
                name: "ts0".into(),
                serving: true,
                ops: 8
            }
        );
        assert!(!s[1].serving);
    }

    #[test]
    fn tablets_of_one_table_in_row_order() {
        let text = "# table id start end memtable_bytes sstable_bytes sstables server\n\
                    seq 4 0000 0003 0 0 0 ts0\n\
                    seqx 5 0000 0003 0 0 0 ts9\n\
                    seq 6 0003 0006 0 0 0 ts1\n";
        assert_eq!(parse_tablets(text, "seq"), vec!["ts0", "ts1"]);
        assert!(parse_tablets(text, "none").is_empty());
    }

    #[test]
    fn every_thread_starts_a_tablet_and_servers_share_the_threads() {
        assert_eq!(tablet_count(3, 3, 6), 12);
        assert_eq!(tablet_count(1, 3, 2), 4);
        assert_eq!(tablet_count(3, 3, 12), 12);
        let (count, threads, servers) = (12, 6, 3);
        // Thread t's share starts at tablet 2t, on server t % 3.
        for t in 0..threads {
            assert_eq!(placement(2 * t, count, threads, servers), t % servers);
            assert_eq!(placement(2 * t + 1, count, threads, servers), t % servers);
        }
        let mut per = [0; 3];
        for k in 0..count {
            per[placement(k, count, threads, servers)] += 1;
        }
        assert_eq!(per, [4, 4, 4]);
    }

    #[test]
    fn boundaries_cut_equal_ranges() {
        assert_eq!(boundary(900, 9, 0), row_key(0));
        assert_eq!(boundary(900, 9, 1), row_key(100));
        assert_eq!(boundary(900, 9, 8), row_key(800));
    }

    #[test]
    fn spread_sends_each_range_to_its_mount() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "cluster-bench-test").unwrap();
        let s = Spread {
            tables: (0..3)
                .map(|i| FsTable::open(&dir.path().join(format!("m{i}")), "t", false))
                .collect(),
            n: 300,
        };
        let mount_of = |i: u64| {
            let picked = s.pick(row_key(i).as_bytes()) as *const FsTable;
            s.tables
                .iter()
                .position(|t| std::ptr::eq(t, picked))
                .unwrap()
        };
        assert_eq!(mount_of(0), 0);
        assert_eq!(mount_of(99), 0);
        assert_eq!(mount_of(100), 1);
        assert_eq!(mount_of(299), 2);
        assert_eq!(mount_of(10_000), 2);
    }
}
