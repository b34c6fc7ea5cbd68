//! `bigtable-bench coherence`: what keeping two daemons' kernel caches
//! coherent costs (docs/coherence.md). On one etcd this run starts, daemon
//! A serves (its store in a local directory) and daemon B runs no tablet
//! server; both take the internal RPC on loopback and share a secret.
//!
//! - **Writes.** `--writes` cells rewritten through A (open, write, close)
//!   while A is alone, then again while B follows A's writes (B holds a
//!   lease at A and has read every cell): the time a write waits, and how
//!   long A waited for B's acknowledgement (`coherence_wait_us`).
//! - **Delay.** After each close on A, B reads the cell once: stale reads
//!   are counted (the protocol says none), so the delay that remains is
//!   the wait for B's acknowledgement, inside A's close.
//! - **Reads.** The same cells read again and again through B for
//!   `--read-secs`, a `stat` and a whole read of each cell every 1.2 s
//!   (a program rereading its files), once with the kernel keeping names
//!   and attributes 300 s and once 1 s (another client-only daemon B2):
//!   time, FUSE requests and the daemon's CPU per read.
//! - **Concurrent writes.** `--writers` threads rewriting cells through A
//!   while both B and B2 follow it: the time and A's CPU a write, and how
//!   many invalidation messages carried the writes' invalidations (A's
//!   sender batches concurrent writes to one daemon).

use super::cluster_bench::{wait_for, LockServer, Member};
use super::common::{check_interrupted, Table, TempDir};
use super::cpu::cpu_secs;
use super::scale_bench::{mountd_binary, Daemon};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `bigtable-bench coherence`'s own options.
#[derive(Args, Debug)]
pub struct CoherenceOpts {
    /// Cells written in each write phase.
    #[arg(long, default_value_t = 2000)]
    pub writes: usize,
    /// Distinct cells (rows) the writes and reads go over.
    #[arg(long, default_value_t = 100)]
    pub cells: usize,
    /// How long each read phase runs, in seconds.
    #[arg(long, default_value_t = 5)]
    pub read_secs: u64,
    /// The daemon binary (default: bigtable-mountd beside this program, else on the PATH).
    #[arg(long)]
    pub mountd: Option<PathBuf>,
    /// B does not replay A's writes for inotify watchers (`no_replay`).
    #[arg(long)]
    pub no_replay: bool,
    /// Threads writing at once through A in the last phase (two followers).
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
}

/// What `coherence` was asked to do.
pub struct CoherenceArgs {
    pub opts: CoherenceOpts,
    pub work_base: PathBuf,
}

/// `key=value` word `key` of `.bigtable/status` (or `stats`) at `mnt`.
fn figure(mnt: &Path, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(mnt.join(".bigtable").join(file)).unwrap_or_default();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cell(mnt: &Path, i: usize) -> PathBuf {
    mnt.join(format!("t/r{i:05}/cf/q"))
}

/// Mounts a daemon with `opts` in `work` under `name`.
fn mount(bin: &Path, work: &Path, name: &str, opts: String) -> Result<Member> {
    let data = work.join(format!("{name}-data"));
    let mnt = work.join(format!("{name}-mnt"));
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(&mnt)?;
    eprintln!("  mounting {name} at {} ...", mnt.display());
    let daemon = Daemon::start(bin, &data, &mnt, &Some(opts))?;
    Ok(Member {
        pid: daemon.pid(),
        daemon: Some(daemon),
        mnt,
    })
}

/// One write phase through `a`: per write the time it took; with a
/// reader `b`, each value is read back through it at once.
struct Writes {
    per_write_us: f64,
    waited_us: f64,
    stale: usize,
}

fn write_phase(
    a: &Path,
    b: Option<&Path>,
    writes: usize,
    cells: usize,
    tag: &str,
) -> Result<Writes> {
    let waited0 = figure(a, "status", "coherence_wait_us");
    let started = Instant::now();
    let mut stale = 0;
    for n in 0..writes {
        let value = format!("{tag} {n} {}", "v".repeat(n % 40));
        let i = n % cells;
        std::fs::write(cell(a, i), &value).with_context(|| format!("writing cell {i}"))?;
        if let Some(b) = b {
            if std::fs::read_to_string(cell(b, i)).ok().as_deref() != Some(value.as_str()) {
                stale += 1;
            }
        }
        if n % 256 == 0 {
            check_interrupted()?;
        }
    }
    let took = started.elapsed();
    let waited = figure(a, "status", "coherence_wait_us").saturating_sub(waited0);
    Ok(Writes {
        // With a reader, its reads are inside the time: report the waits
        // apart (A's own count of them).
        per_write_us: took.as_secs_f64() * 1e6 / writes as f64,
        waited_us: waited as f64 / writes as f64,
        stale,
    })
}

/// The last phase: `writers` threads rewrite `writes` cells through `a`
/// (each its own cells) while two daemons follow it.
struct Concurrent {
    per_write_us: f64,
    cpu_us: f64,
    waited_us: f64,
    /// Invalidations (one per write and follower) and the messages that
    /// carried them.
    sent: u64,
    messages: u64,
}

fn concurrent_phase(a: &Member, writes: usize, cells: usize, writers: usize) -> Result<Concurrent> {
    let fig = |k: &str| figure(&a.mnt, "status", k);
    let (waited0, sent0, messages0) = (
        fig("coherence_wait_us"),
        fig("coherence_sent"),
        fig("coherence_messages"),
    );
    let pid = a.pid.to_string();
    let cpu0 = cpu_secs(&pid);
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let threads: Vec<_> = (0..writers)
            .map(|t| {
                let mnt = &a.mnt;
                s.spawn(move || -> Result<()> {
                    for n in (t..writes).step_by(writers) {
                        let i = n % cells;
                        std::fs::write(cell(mnt, i), format!("concurrent {n}"))
                            .with_context(|| format!("writing cell {i}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join()
                .map_err(|_| anyhow::anyhow!("a writer panicked"))??;
        }
        Ok(())
    })?;
    let took = started.elapsed();
    let cpu = cpu_secs(&pid) - cpu0;
    Ok(Concurrent {
        per_write_us: took.as_secs_f64() * 1e6 / writes as f64,
        cpu_us: cpu * 1e6 / writes as f64,
        waited_us: fig("coherence_wait_us").saturating_sub(waited0) as f64 / writes as f64,
        sent: fig("coherence_sent").saturating_sub(sent0),
        messages: fig("coherence_messages").saturating_sub(messages0),
    })
}

/// How often a read phase walks the cells: longer than a 1 s kernel
/// cache, as a program that rereads its files now and then.
const PASS: Duration = Duration::from_millis(1200);

/// Reads every cell through `m` once per [`PASS`] for `secs`: µs a read
/// (the pauses left out), FUSE requests and daemon CPU µs per read.
fn read_phase(m: &Member, cells: usize, secs: u64) -> Result<(f64, f64, f64)> {
    for i in 0..cells {
        std::fs::read(cell(&m.mnt, i))?;
    }
    let fuse0 = figure(&m.mnt, "stats", "fuse_requests");
    let pid = m.pid.to_string();
    let cpu0 = cpu_secs(&pid);
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut busy = Duration::ZERO;
    let mut reads = 0u64;
    while Instant::now() < deadline {
        let pass = Instant::now();
        for i in 0..cells {
            std::fs::metadata(cell(&m.mnt, i))?;
            std::fs::read(cell(&m.mnt, i))?;
            reads += 1;
        }
        busy += pass.elapsed();
        check_interrupted()?;
        std::thread::sleep(PASS.saturating_sub(pass.elapsed()));
    }
    let cpu = cpu_secs(&pid) - cpu0;
    // The status reads themselves are two requests or so: negligible.
    let fuse = figure(&m.mnt, "stats", "fuse_requests").saturating_sub(fuse0);
    Ok((
        busy.as_secs_f64() * 1e6 / reads as f64,
        fuse as f64 / reads as f64,
        cpu * 1e6 / reads as f64,
    ))
}

pub fn run(args: &CoherenceArgs) -> Result<Value> {
    let o = &args.opts;
    if o.cells == 0 || o.writes == 0 || o.writers == 0 {
        bail!("--cells, --writes and --writers must be at least 1");
    }
    let bin = mountd_binary(&o.mountd);
    let etcd = LockServer::start_on("127.0.0.1")?;
    let work = TempDir::new_in(&args.work_base, "coherence")?;
    let secret = work.path().join("secret");
    std::fs::write(&secret, "a-benchmark-secret-of-32-bytes-x\n")?;
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let common = format!(
        "lock=etcd://{}/bt,etcd_lease=2,cluster_listen=127.0.0.1:0,cluster_secret_file={}",
        etcd.endpoint,
        secret.display()
    );
    let long = "attr_timeout=300,entry_timeout=300,dir_timeout=300";
    let a = mount(&bin, work.path(), "a", format!("{common},{long}"))?;
    std::fs::create_dir(a.mnt.join("t"))?;
    std::fs::write(a.mnt.join("t/.schema"), "cf\n")?;
    for i in 0..o.cells {
        std::fs::create_dir_all(cell(&a.mnt, i).parent().context("a cell's family")?)?;
        std::fs::write(cell(&a.mnt, i), b"first")?;
    }
    eprintln!("  writes through A alone ...");
    let alone = write_phase(&a.mnt, None, o.writes, o.cells, "alone")?;
    let b = mount(
        &bin,
        work.path(),
        "b",
        format!(
            "{common},{long},tablet_servers=0{}",
            if o.no_replay { ",no_replay" } else { "" }
        ),
    )?;
    wait_for("B to follow A", Duration::from_secs(30), || {
        Ok(figure(&b.mnt, "status", "coherence_leases") >= 1
            && figure(&a.mnt, "status", "coherence_watchers") >= 1)
    })?;
    wait_for("B to see the table", Duration::from_secs(30), || {
        Ok(std::fs::read(cell(&b.mnt, 0)).is_ok())
    })?;
    for i in 0..o.cells {
        std::fs::read(cell(&b.mnt, i))?;
    }
    eprintln!("  writes through A, B following ...");
    let followed = write_phase(&a.mnt, None, o.writes, o.cells, "followed")?;
    eprintln!("  writes through A, B following and reading each after its close ...");
    let checked = write_phase(&a.mnt, Some(&b.mnt), o.writes, o.cells, "checked")?;
    eprintln!("  reads through B (kernel keeps names and attributes 300 s) ...");
    let long_reads = read_phase(&b, o.cells, o.read_secs)?;
    let b2 = mount(
        &bin,
        work.path(),
        "b2",
        format!("{common},attr_timeout=1,entry_timeout=1,dir_timeout=1,tablet_servers=0"),
    )?;
    wait_for("B2 to see the table", Duration::from_secs(30), || {
        Ok(std::fs::read(cell(&b2.mnt, 0)).is_ok())
    })?;
    eprintln!("  reads through B2 (1 s) ...");
    let short_reads = read_phase(&b2, o.cells, o.read_secs)?;
    wait_for("A to have two followers", Duration::from_secs(30), || {
        Ok(figure(&a.mnt, "status", "coherence_watchers") >= 2)
    })?;
    eprintln!(
        "  writes by {} threads through A, B and B2 following ...",
        o.writers
    );
    let conc = concurrent_phase(&a, o.writes, o.cells, o.writers)?;
    drop((b2, b, a));

    let mut t = Table::new(&["phase", "µs a write", "µs waited for B", "stale reads"]);
    for (name, w) in [
        ("A alone", &alone),
        ("B following", &followed),
        ("B following, reading each", &checked),
    ] {
        t.row(vec![
            name.into(),
            format!("{:.0}", w.per_write_us),
            format!("{:.0}", w.waited_us),
            format!("{}", w.stale),
        ]);
    }
    println!("{}", t.render());
    let mut r = Table::new(&[
        "kernel cache",
        "µs a stat+read",
        "FUSE requests a read",
        "daemon CPU µs a read",
    ]);
    for (name, (us, fuse, cpu)) in [("300 s", long_reads), ("1 s", short_reads)] {
        r.row(vec![
            name.into(),
            format!("{us:.0}"),
            format!("{fuse:.2}"),
            format!("{cpu:.1}"),
        ]);
    }
    println!("{}", r.render());
    println!(
        "coherence: close on A to B's invalidation: inside the close ({:.0} µs waited a write, {} stale reads of {} through B); writes {:.0} µs with B following vs {:.0} µs alone",
        followed.waited_us, checked.stale, o.writes, followed.per_write_us, alone.per_write_us
    );
    println!(
        "{} writers through A, B and B2 following: {:.0} µs a write (wall / writes), {:.0} µs of A's CPU a write, {:.0} µs waited for the followers; {} invalidations in {} messages",
        o.writers, conc.per_write_us, conc.cpu_us, conc.waited_us, conc.sent, conc.messages
    );
    Ok(json!({
        "concurrent": {"writers": o.writers, "us_per_write": conc.per_write_us, "a_cpu_us_per_write": conc.cpu_us, "wait_us_per_write": conc.waited_us, "invalidations": conc.sent, "messages": conc.messages},
        "writes": o.writes,
        "cells": o.cells,
        "alone_us_per_write": alone.per_write_us,
        "followed_us_per_write": followed.per_write_us,
        "followed_wait_us_per_write": followed.waited_us,
        "checked_us_per_write_and_read": checked.per_write_us,
        "stale_reads": checked.stale,
        "reads_long_ttl": {"us_per_read": long_reads.0, "fuse_per_read": long_reads.1, "cpu_us_per_read": long_reads.2},
        "reads_short_ttl": {"us_per_read": short_reads.0, "fuse_per_read": short_reads.1, "cpu_us_per_read": short_reads.2},
    }))
}
