//! `bigtable-bench gfs`: the file layer alone. Many writers append 1000-byte
//! records to one file, each waiting until its record is durable, through a
//! small group commit (one leader writes and fdatasyncs everyone's pending
//! records in one `append_sync`), as the commit log does; then random 64 KiB
//! block reads. Both run on `gfs::LocalStore` with io_uring and with plain
//! syscalls, and, when fio is installed, the same block sizes through fio
//! (one file per job, fdatasync after each write; it has no group commit).
//! Then one writer's unsynced log appends on the local store against the
//! chunk layer's three replicas, the per-append cost behind the engine's
//! three-replica writes, alternated in rounds.

use super::common::{
    check_interrupted, fmt_bytes, fmt_rate, fmt_ratio, json_ratio, median, run_ops, Deal, Measured,
    Table, TempDir, VALUE_BYTES,
};
use super::engine_bench::open_chunk_layer;
use anyhow::{anyhow, bail, Context, Result};
use gfs::{FileStore, GroupLog, IoMode, LocalStore};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What `gfs` was asked to do.
pub struct GfsArgs {
    pub work_base: PathBuf,
    /// Bytes appended (records = size / 1000) and size of the file read.
    pub size: u64,
    pub writers: usize,
    pub readers: usize,
    pub block: usize,
    pub reads: u64,
    pub time_cap: Duration,
    pub fio: bool,
}

/// One mode's results.
pub struct ModeRun {
    pub requested: IoMode,
    pub used: IoMode,
    pub append: Measured,
    pub batches: u64,
    pub read: Measured,
}

fn run_mode(dir: &Path, mode: IoMode, args: &GfsArgs) -> Result<ModeRun> {
    let store = LocalStore::open_with(dir, mode)?;
    let records = (args.size / VALUE_BYTES as u64).max(1);
    let log = GroupLog::new(store.create("append.log")?);
    let append = run_ops(
        args.writers,
        records,
        args.time_cap,
        Deal::Shares,
        |ctx, _| Ok(log.append(ctx.value().to_vec())?),
    )?;
    let batches = log.batches();
    drop(log);

    // The file read: `size` bytes of random data, written and synced untimed.
    let blocks = (args.size / args.block as u64).max(1);
    let mut w = store.create("read.dat")?;
    let mut rng = super::common::FastRng::new(super::common::time_seed());
    let mut chunk = vec![0u8; args.block];
    for _ in 0..blocks {
        rng.fill(&mut chunk);
        w.append(&chunk)?;
    }
    w.sync()?;
    drop(w);
    check_interrupted()?;
    let file = store.open("read.dat")?;
    let block = args.block;
    let read = run_ops(
        args.readers,
        args.reads,
        args.time_cap,
        Deal::Shares,
        |ctx, _| {
            let offset = ctx.rng.below(blocks) * block as u64;
            let got = file.read_at(offset, block)?;
            if got.len() != block {
                bail!("read {} bytes at {offset}, asked {block}", got.len());
            }
            Ok(())
        },
    )?;
    Ok(ModeRun {
        requested: mode,
        used: store.io_mode(),
        append,
        batches,
        read,
    })
}

/// Rounds of the log-append comparison, alternating the two stores: a
/// run's figure moves with whatever else the machine does at the time.
const LOG_ROUNDS: usize = 3;

/// One writer's unsynced appends of `VALUE_BYTES`-byte records to a log
/// file (`create_log`: zeros kept ahead, appends stored into mapped pages)
/// on `store`, as a tablet server's commit log makes them: the cost of one
/// copy against the chunk layer's three replicas, without the engine
/// around it.
fn log_appends(store: &dyn FileStore, args: &GfsArgs) -> Result<Measured> {
    let records = (args.size / VALUE_BYTES as u64).max(1);
    // One writer: the lock is only what lets the closure write.
    let w = std::sync::Mutex::new(store.create_log("log")?);
    let m = run_ops(1, records, args.time_cap, Deal::Shares, |ctx, _| {
        let mut w = w.lock().map_err(|_| anyhow!("the log's writer panicked"))?;
        w.append(ctx.value())?;
        Ok(())
    })?;
    drop(w);
    store.delete("log")?;
    Ok(m)
}

/// fio's IOPS for one job description, or why there is none.
fn fio_iops(args: &[String], direction: &str) -> Result<f64> {
    let out = Command::new("fio")
        .args(args)
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!(
            "fio failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_fio_iops(&String::from_utf8_lossy(&out.stdout), direction)
}

/// `jobs[0].<direction>.iops` from fio's JSON (which may follow warning lines).
pub fn parse_fio_iops(stdout: &str, direction: &str) -> Result<f64> {
    let start = stdout
        .find('{')
        .ok_or_else(|| anyhow!("no JSON in fio's output"))?;
    let v: serde_json::Value =
        serde_json::from_str(&stdout[start..]).context("parsing fio's JSON")?;
    v["jobs"][0][direction]["iops"]
        .as_f64()
        .ok_or_else(|| anyhow!("fio's JSON has no jobs[0].{direction}.iops"))
}

/// The fio run equivalent to `run_mode`, with `engine` psync or io_uring.
fn run_fio(dir: &Path, engine: &str, args: &GfsArgs) -> Result<(f64, f64)> {
    std::fs::create_dir_all(dir)?;
    let cap = format!("--runtime={}", args.time_cap.as_secs().max(1));
    let common = |name: &str| {
        vec![
            format!("--name={name}"),
            format!("--ioengine={engine}"),
            "--group_reporting".to_string(),
            "--output-format=json".to_string(),
            cap.clone(),
        ]
    };
    let per_job =
        (args.size / args.writers.max(1) as u64 / VALUE_BYTES as u64).max(1) * VALUE_BYTES as u64;
    let mut append = common("append");
    append.extend([
        format!("--directory={}", dir.display()),
        "--rw=write".to_string(),
        format!("--bs={VALUE_BYTES}"),
        format!("--size={per_job}"),
        format!("--numjobs={}", args.writers),
        "--fdatasync=1".to_string(),
        // Grow the file as the log does, rather than overwrite preallocated blocks.
        "--fallocate=none".to_string(),
    ]);
    let write_iops = fio_iops(&append, "write")?;
    check_interrupted()?;
    // The file read is written here, buffered, as ours is by the store: fio's
    // own layout leaves it out of the page cache, which would not be a like
    // comparison.
    let blocks = (args.size / args.block as u64).max(1);
    let path = dir.join("read.dat");
    let mut data = vec![0u8; (blocks * args.block as u64) as usize];
    super::common::FastRng::new(super::common::time_seed()).fill(&mut data);
    std::fs::write(&path, &data).with_context(|| format!("writing {}", path.display()))?;
    drop(data);
    let per_reader = (args.reads / args.readers.max(1) as u64).max(1);
    let mut read = common("randread");
    read.extend([
        format!("--filename={}", path.display()),
        "--rw=randread".to_string(),
        format!("--bs={}", args.block),
        format!("--size={}", blocks * args.block as u64),
        format!("--io_size={}", per_reader * args.block as u64),
        format!("--numjobs={}", args.readers),
        "--invalidate=0".to_string(),
    ]);
    let read_iops = fio_iops(&read, "read")?;
    let _ = std::fs::remove_dir_all(dir);
    Ok((write_iops, read_iops))
}

fn have_fio() -> bool {
    Command::new("fio")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn run(args: &GfsArgs) -> Result<()> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench-gfs")?;
    eprintln!(
        "bigtable-bench gfs: {} appended as {VALUE_BYTES}-byte synced records by {} writers; {} random {}-byte reads by {} readers; in {}",
        fmt_bytes(args.size),
        args.writers,
        args.reads,
        args.block,
        args.readers,
        work.path().display()
    );
    let mut runs = Vec::new();
    for mode in [IoMode::Uring, IoMode::Syscall] {
        eprintln!("running LocalStore with {mode} ...");
        let r = run_mode(&work.path().join(mode.to_string()), mode, args)?;
        if r.used != r.requested {
            eprintln!("note: asked for {}, the store used {}", r.requested, r.used);
        }
        runs.push(r);
        let _ = std::fs::remove_dir_all(work.path().join(mode.to_string()));
    }
    // Unsynced log appends, one copy against three replicas.
    let (mut local_logs, mut chunk_logs) = (Vec::new(), Vec::new());
    {
        eprintln!("running unsynced log appends: LocalStore against the chunk layer, {LOG_ROUNDS} rounds ...");
        let local = LocalStore::open_with(work.path().join("log-local"), IoMode::Uring)?;
        // As the engine's benchmark opens it: three replicas.
        let chunks = open_chunk_layer(&work.path().join("log-chunks"), 3, IoMode::Uring, true)?;
        for _ in 0..LOG_ROUNDS {
            local_logs.push(log_appends(&local, args)?);
            chunk_logs.push(log_appends(&*chunks, args)?);
            check_interrupted()?;
        }
    }
    let rates = |runs: &[Measured]| median(runs.iter().map(Measured::rate).collect());
    let (local_log, chunk_log) = (rates(&local_logs), rates(&chunk_logs));
    let mut fio: Vec<(&str, Option<(f64, f64)>)> = Vec::new();
    let mut notes = Vec::new();
    if args.fio && have_fio() {
        for engine in ["io_uring", "psync"] {
            eprintln!("running fio --ioengine={engine} ...");
            match run_fio(&work.path().join(format!("fio-{engine}")), engine, args) {
                Ok(r) => fio.push((engine, Some(r))),
                Err(e) => {
                    notes.push(format!("fio {engine}: {e:#}"));
                    fio.push((engine, None));
                }
            }
        }
    } else if args.fio {
        notes.push("fio: not installed (apt-get install fio), skipped".to_string());
    }
    let fio_rate = |engine: &str, write: bool| {
        fio.iter()
            .find(|(e, _)| *e == engine)
            .and_then(|(_, r)| *r)
            .map(|(w, r)| if write { w } else { r })
    };

    let (uring, sys) = (&runs[0], &runs[1]);
    let mut table = Table::new(&[
        "workload (ops/s)",
        "io_uring",
        "syscall",
        "uring/syscall",
        "fio io_uring",
        "ours/fio",
        "fio psync",
        "syscall/fio",
    ]);
    let mut json_rows = serde_json::Map::new();
    for (name, key, write) in [
        (
            format!("append {VALUE_BYTES} B + fdatasync"),
            "append",
            true,
        ),
        (
            format!("random read {}", fmt_bytes(args.block as u64)),
            "randread",
            false,
        ),
    ] {
        let (u, s) = if write {
            (&uring.append, &sys.append)
        } else {
            (&uring.read, &sys.read)
        };
        let (fu, fs) = (fio_rate("io_uring", write), fio_rate("psync", write));
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
        table.row(vec![
            name,
            fmt_rate(u),
            fmt_rate(s),
            fmt_ratio(Some(u.rate()), Some(s.rate())),
            opt(fu),
            fmt_ratio(Some(u.rate()), fu),
            opt(fs),
            fmt_ratio(Some(s.rate()), fs),
        ]);
        json_rows.insert(
            key.into(),
            serde_json::json!({
                "io_uring": u.json(),
                "syscall": s.json(),
                "uring_vs_syscall": json_ratio(Some(u.rate()), Some(s.rate())),
                "fio_io_uring": fu.map(f64::round),
                "fio_psync": fs.map(f64::round),
                "uring_vs_fio": json_ratio(Some(u.rate()), fu),
                "syscall_vs_fio": json_ratio(Some(s.rate()), fs),
            }),
        );
    }
    println!("{}", table.render());
    for r in &runs {
        println!(
            "{}: {} appends in {} write+fdatasync batches ({:.1} records per batch)",
            r.used,
            r.append.ops,
            r.batches,
            r.append.ops as f64 / r.batches.max(1) as f64
        );
    }
    let ns = |rate: f64| if rate > 0.0 { 1e9 / rate } else { 0.0 };
    println!(
        "log appends, unsynced, one writer, {VALUE_BYTES} B (median of {LOG_ROUNDS} alternated rounds): LocalStore {local_log:.0}/s ({:.0} ns each), chunk layer with 3 replicas {chunk_log:.0}/s ({:.0} ns each): {} the time of one copy",
        ns(local_log),
        ns(chunk_log),
        fmt_ratio(Some(local_log), Some(chunk_log)),
    );
    json_rows.insert(
        "log_append".into(),
        serde_json::json!({
            "local_ops_per_sec": local_log.round(),
            "chunks_ops_per_sec": chunk_log.round(),
            "chunks_time_vs_local": json_ratio(Some(local_log), Some(chunk_log)),
        }),
    );
    for n in &notes {
        println!("{n}");
    }
    let line = serde_json::json!({
        "bench": "gfs",
        "size_bytes": args.size,
        "record_bytes": VALUE_BYTES,
        "block_bytes": args.block,
        "writers": args.writers,
        "readers": args.readers,
        "uring_used": uring.used.to_string(),
        "uring_batches": uring.batches,
        "syscall_batches": sys.batches,
        "workloads": json_rows,
    });
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn group_log_makes_every_record_durable_in_order_of_batches() {
        let store = gfs::MemStore::new();
        let log = Arc::new(GroupLog::new(store.create("log").unwrap()));
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let log = log.clone();
                s.spawn(move || {
                    for _ in 0..50 {
                        log.append(vec![t; 10]).unwrap();
                    }
                });
            }
        });
        assert_eq!(store.size("log").unwrap(), 8 * 50 * 10);
        let b = log.batches();
        assert!((1..=400).contains(&b), "{b}");
    }

    #[test]
    fn fio_json_is_parsed_past_warnings() {
        let out =
            "fio: some warning\n{\"jobs\":[{\"read\":{\"iops\":1234.5},\"write\":{\"iops\":0}}]}";
        assert_eq!(parse_fio_iops(out, "read").unwrap(), 1234.5);
        assert!(parse_fio_iops("no json", "read").is_err());
        assert!(parse_fio_iops("{\"jobs\":[]}", "read").is_err());
    }

    #[test]
    fn both_modes_run_on_disk() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "gfs-bench-test").unwrap();
        let args = GfsArgs {
            work_base: dir.path().to_path_buf(),
            size: 200_000,
            writers: 4,
            readers: 2,
            block: 64 << 10,
            reads: 100,
            time_cap: Duration::from_secs(20),
            fio: false,
        };
        for mode in [IoMode::Uring, IoMode::Syscall] {
            let r = run_mode(&dir.path().join(mode.to_string()), mode, &args).unwrap();
            assert_eq!(r.append.ops, 200);
            assert_eq!(r.read.ops, 100);
            assert!(r.batches >= 1 && r.batches <= 200);
        }
    }
}
