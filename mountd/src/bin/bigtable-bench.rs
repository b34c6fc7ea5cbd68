//! bigtable-bench: the Bigtable paper's Figure 6 workloads (sequential and
//! random writes and reads of 1000-byte values, random reads from an
//! in-memory locality group, and a scan) on the engine, through a mount, and
//! on the file layer, each beside peers measured in the same run.
//!
//! ```text
//! bigtable-bench [engine] [--size 256MiB] [--threads 4] [--sync] [--no-peers]
//! bigtable-bench fs MOUNTPOINT [--size 16MiB] [--no-peers]
//! bigtable-bench engine|fs --store s3 [--size 16MiB] [-o OPTIONS]   (built with --features bench-s3)
//! bigtable-bench rpc [--size 16MiB]   (in process vs over the internal RPC)
//! bigtable-bench gfs [--writers 16] [--block 64KiB] [--no-fio]
//! bigtable-bench scale [--rows 10000,100000,1000000] [--walks ls,find,...] [--mountd PATH] [-o OPTIONS]
//! bigtable-bench goals [--mountd PATH]
//! bigtable-bench cluster [--daemons 1,3 | --machines 1,3 [--cpus-per-machine 0.5]] [--size 8MiB] [--threads 2]   (built with --features bench-s3)
//! ```
//! Every workload stops at its op count or its time cap (`--time-cap`), and
//! every run removes its temp dirs and unmounts what it mounted, also on
//! error or Ctrl-C. Each prints a table, then one JSON line.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

#[path = "../bench/mod.rs"]
mod bench;

use anyhow::Result;
use bench::common::{
    default_base_dir, install_signal_handlers, interrupted, parse_secs, parse_size, VALUE_BYTES,
};
use bench::engine_bench::StoreKind;
use bench::workloads::Plan;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "bigtable-bench",
    version,
    about = "The Bigtable paper's Figure 6 workloads on the engine (default), a mount (fs) or the file layer (gfs)"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Args, Debug)]
struct Common {
    /// Client threads.
    #[arg(long, global = true, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// Data written per workload (values of 1000 bytes): e.g. 64MiB, 1GiB.
    /// Default: 256MiB for engine, 64MiB for gfs, 16MiB for fs.
    #[arg(long, global = true, value_parser = parse_size)]
    size: Option<u64>,
    /// fsync every write (engine: WriteOptions::sync; peers likewise; fs: fsync before close).
    #[arg(long, global = true)]
    sync: bool,
    /// Longest any one workload may run, in seconds.
    #[arg(long, global = true, value_parser = parse_secs, default_value = "20")]
    time_cap: Duration,
    /// Where temporary data goes (default /var/tmp): put it on the disk you mean to measure.
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// Skip the peers (RocksDB and fjall; bindfs and tmpfs).
    #[arg(long, global = true)]
    no_peers: bool,
    /// Leave a VM's free page reporting on and touch no memory first (by
    /// default a run holds reporting off until it ends and first touches
    /// three quarters of the memory, so that no store pays the host's
    /// faults for pages another store freed; docs/benchmarks.md).
    #[arg(long, global = true)]
    no_warm_memory: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Figure 6 on the engine API (the default), beside RocksDB and fjall with --features peers.
    Engine(EngineOpts),
    /// Figure 6 through a mounted filesystem, beside bindfs over tmpfs and tmpfs.
    Fs(FsOpts),
    /// Figure 6 through the Cloud Bigtable gRPC API, beside the engine API.
    Grpc,
    /// The internal RPC between daemons: the engine's calls in process vs over loopback gRPC.
    Rpc,
    /// The file layer: group-committed appends and random block reads, io_uring vs syscalls vs fio.
    Gfs(GfsOpts),
    /// Tables of growing size through a fresh daemon: import, walks beside
    /// bindfs over tmpfs, a scan, random reads, and the daemon's RSS (needs root).
    Scale(ScaleOpts),
    /// Every figure the speed goals name, in one run: the engine unsynced
    /// (both stores) and with --sync, a fresh mount with --threads and with
    /// one thread, then a table of goals met and missed (needs root).
    Goals(GoalsOpts),
    /// What a snapshot, a backup (full, then incremental) and a clone cost
    /// as a table grows, on the engine API and a local store.
    Snapshot(SnapshotOpts),
    /// Figure 6 on one Bigtable served by 1 and by 3 daemons (one SeaweedFS,
    /// one etcd), clients on every mount at once (needs root, --features bench-s3).
    Cluster(bench::cluster_bench::ClusterOpts),
    /// Two daemons' kernel caches kept coherent: what a write waits for the
    /// other daemon, stale reads after close, and reads with kernel caches
    /// of 300 s against 1 s (--features bench-s3, for etcd).
    Coherence(bench::coherence_bench::CoherenceOpts),
    /// Not a benchmark: makes a small CA (DIR/ca.pem, ca-key.pem; reused if
    /// there) and a certificate and key per daemon (DIR/NAME.pem,
    /// NAME-key.pem, keys 0600) for `cluster_ca`/`cluster_cert`/`cluster_key`.
    Certs(CertsOpts),
}

#[derive(Args, Debug)]
struct SnapshotOpts {
    /// Table sizes in rows.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 100_000, 1_000_000])]
    rows: Vec<u64>,
}

#[derive(Args, Debug)]
struct CertsOpts {
    /// Where the files go.
    dir: PathBuf,
    /// Each daemon's name as the others dial it (its host name or IP).
    #[arg(long, value_delimiter = ',', required = true)]
    names: Vec<String>,
    /// Names or IPs every certificate also carries (e.g. 127.0.0.1).
    #[arg(long, value_delimiter = ',')]
    extra_san: Vec<String>,
}

#[derive(Args, Debug)]
struct GoalsOpts {
    /// The daemon binary (default: bigtable-mountd beside this program, else on the PATH).
    #[arg(long)]
    mountd: Option<PathBuf>,
    /// Table sizes for the walk goals (`scale`): the first is the base the
    /// cost per cell of the last is compared with.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 100_000])]
    scale_rows: Vec<u64>,
}

#[derive(Args, Debug)]
struct ScaleOpts {
    /// Table sizes in rows.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000u64, 100_000, 1_000_000])]
    rows: Vec<u64>,
    /// The daemon binary (default: bigtable-mountd beside this program, else on the PATH).
    #[arg(long)]
    mountd: Option<PathBuf>,
    /// Extra mount options for the daemon (e.g. `cache=64m,memtable=16m`).
    #[arg(short = 'o', long)]
    options: Option<String>,
    /// Only these walks (ls, find, du, tar, rsync, grep); default all.
    #[arg(long, value_delimiter = ',')]
    walks: Vec<String>,
}

#[derive(Args, Debug, Default)]
struct EngineOpts {
    /// File I/O path of the engine's store: io_uring or syscall.
    #[arg(long, default_value = "io_uring")]
    io: gfs::IoMode,
    /// Block cache size of the engine and of each peer (default: the engine's default).
    #[arg(long, value_parser = parse_size)]
    block_cache: Option<u64>,
    /// Engine memtable size (default: the engine's).
    #[arg(long, value_parser = parse_size)]
    memtable: Option<u64>,
    /// Also run the workloads with these numbers of tablet servers (the
    /// paper's scaling columns), e.g. `--scaling 1,2,3`.
    #[arg(long, value_delimiter = ',')]
    scaling: Vec<usize>,
    /// The engine's file store: local (one copy), chunks (the chunk layer,
    /// 3 replicas), or both (local is the one compared with the peers); s3:
    /// the chunk layer against S3 on a SeaweedFS this run starts (writes
    /// with 1, 4, 16 writers, cold and warm reads, requests per operation).
    #[arg(long, default_value = "both", value_parser = ["local", "chunks", "both", "s3"])]
    store: String,
    /// With --store s3: mount options for both stores' engines (`cache=8m`).
    #[arg(short = 'o', long)]
    options: Option<String>,
    /// With --store s3: the writer counts of the write phases (default 1,4,16).
    #[arg(long, value_delimiter = ',')]
    writers: Vec<usize>,
    /// With --store s3: make S3 look this far away, in milliseconds added to
    /// each direction by a delaying proxy (a request and its answer: twice).
    #[arg(long, default_value_t = 0)]
    s3_delay_ms: u64,
    /// The chunk layer writes every replica through the page cache (by
    /// default two of three take SSTable data around it, with O_DIRECT).
    #[arg(long)]
    buffered_replicas: bool,
    /// Replicas of each chunk on the chunk layer's three chunkservers, 1 to
    /// 3 (default 3, what the replication goal compares with one copy).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    replicas: Option<u8>,
    /// With both stores: after the main runs, this many rounds of the two
    /// write workloads on each store, alternated, for the median of what
    /// three replicas cost (goals runs 3)
    #[arg(long, default_value_t = 0)]
    write_rounds: usize,
    /// With the peers: after the main runs, this many rounds of the five
    /// workloads on fresh tables of the engine and each peer, alternated,
    /// for the median of each round's ratio (goals runs 3)
    #[arg(long, default_value_t = 0)]
    peer_rounds: usize,
}

#[derive(Args, Debug)]
struct FsOpts {
    /// A mounted bigtable filesystem (any directory works, for comparison).
    #[arg(required_unless_present = "store")]
    mountpoint: Option<PathBuf>,
    /// s3: mount fresh daemons on the chunk layer and on S3 (a SeaweedFS
    /// this run starts) and compare them instead (needs root).
    #[arg(long, value_parser = ["s3"], conflicts_with = "mountpoint")]
    store: Option<String>,
    /// With --store s3: the daemon binary (default: beside this program, else on the PATH).
    #[arg(long)]
    mountd: Option<PathBuf>,
    /// With --store s3: extra mount options for both daemons.
    #[arg(short = 'o', long)]
    options: Option<String>,
    /// With --store s3: the writer counts of the write phases (default 1,4,16).
    #[arg(long, value_delimiter = ',')]
    writers: Vec<usize>,
    /// With --store s3: make S3 look this far away, in milliseconds added to
    /// each direction by a delaying proxy (a request and its answer: twice).
    #[arg(long, default_value_t = 0)]
    s3_delay_ms: u64,
}

#[derive(Args, Debug)]
struct GfsOpts {
    /// Appending threads (each waits for its record's fdatasync).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=1024))]
    writers: u16,
    /// Block size of the random reads.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    block: u64,
    /// Random reads per mode.
    #[arg(long, default_value_t = 100_000)]
    reads: u64,
    /// Do not run fio even if it is installed.
    #[arg(long)]
    no_fio: bool,
}

fn plan(common: &Common, default_size: u64) -> Plan {
    let size = common.size.unwrap_or(default_size);
    Plan {
        n: (size / VALUE_BYTES as u64).max(1),
        threads: common.threads as usize,
        time_cap: common.time_cap,
        min_read: Duration::ZERO,
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    install_signal_handlers();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bigtable-bench: {e:#}");
            // 128 + SIGINT, as a shell reports a run stopped with Ctrl-C.
            ExitCode::from(if interrupted() { 130 } else { 1 })
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let c = &cli.common;
    let work_base = c.dir.clone().unwrap_or_else(default_base_dir);
    // Every run that measures holds the memory until it returns.
    let measures = !matches!(cli.command, Some(Cmd::Certs(_)));
    let (_held, memory) = match measures {
        true => warm_memory(c),
        false => (None, serde_json::Value::Null),
    };
    match cli.command {
        None => run_engine(c, work_base, EngineOpts::default()),
        Some(Cmd::Engine(o)) => run_engine(c, work_base, o),
        Some(Cmd::Grpc) => {
            bench::grpc_bench::run(&engine_args(c, work_base, EngineOpts::default()))
        }
        Some(Cmd::Certs(o)) => {
            for f in mountd::certs::make(&o.dir, &o.names, &o.extra_san)? {
                println!("{}", f.display());
            }
            Ok(())
        }
        Some(Cmd::Rpc) => bench::rpc_bench::run(&engine_args(c, work_base, EngineOpts::default())),
        Some(Cmd::Goals(o)) => bench::goals::run(&bench::goals::GoalsArgs {
            engine: engine_args(
                c,
                work_base,
                EngineOpts {
                    write_rounds: bench::goals::WRITE_ROUNDS,
                    peer_rounds: bench::goals::PEER_ROUNDS,
                    ..EngineOpts::default()
                },
            ),
            mountd: o.mountd,
            scale_rows: o.scale_rows,
            memory,
        }),
        Some(Cmd::Fs(o)) => match o.mountpoint {
            Some(mountpoint) => bench::fs_bench::run(&bench::fs_bench::FsArgs {
                mountpoint,
                plan: plan(c, 16 << 20),
                sync: c.sync,
                work_base,
                peers: !c.no_peers,
            })
            .map(drop),
            None => bench::s3_bench::run(&bench::s3_bench::S3Args {
                through: bench::s3_bench::Through::Mount,
                work_base,
                plan: plan(c, 16 << 20),
                sync: c.sync,
                options: o.options,
                mountd: o.mountd,
                writers: s3_writers(&o.writers),
                s3_delay: Duration::from_millis(o.s3_delay_ms),
            })
            .map(drop),
        },
        Some(Cmd::Cluster(opts)) => bench::cluster_bench::run(&bench::cluster_bench::ClusterArgs {
            opts,
            plan: plan(c, 8 << 20),
            sync: c.sync,
            work_base,
        })
        .map(drop),
        Some(Cmd::Coherence(opts)) => {
            bench::coherence_bench::run(&bench::coherence_bench::CoherenceArgs { opts, work_base })
                .map(drop)
        }
        Some(Cmd::Scale(o)) => bench::scale_bench::run(&bench::scale_bench::ScaleArgs {
            rows: o.rows,
            work_base,
            mountd: o.mountd,
            options: o.options,
            peers: !c.no_peers,
            walks: o.walks,
        })
        .map(drop),
        Some(Cmd::Snapshot(o)) => {
            bench::snapshot_bench::run(&bench::snapshot_bench::SnapshotArgs {
                rows: o.rows,
                work_base,
            })
        }
        Some(Cmd::Gfs(o)) => bench::gfs_bench::run(&bench::gfs_bench::GfsArgs {
            work_base,
            size: c.size.unwrap_or(64 << 20),
            writers: o.writers as usize,
            readers: c.threads as usize,
            block: o.block.clamp(512, 64 << 20) as usize,
            reads: o.reads.max(1),
            time_cap: c.time_cap,
            fio: !o.no_fio && !c.no_peers,
        }),
    }
}

fn engine_args(c: &Common, work_base: PathBuf, o: EngineOpts) -> bench::engine_bench::EngineArgs {
    bench::engine_bench::EngineArgs {
        work_base,
        plan: plan(c, 256 << 20),
        sync: c.sync,
        peers: !c.no_peers,
        io_mode: o.io,
        block_cache: o.block_cache,
        memtable: o.memtable,
        scaling: o.scaling,
        direct_writes: !o.buffered_replicas,
        replicas: o.replicas.map_or(3, usize::from),
        write_rounds: o.write_rounds,
        peer_rounds: o.peer_rounds,
        stores: match o.store.as_str() {
            "local" => vec![StoreKind::Local],
            "chunks" => vec![StoreKind::Chunks],
            _ => vec![StoreKind::Local, StoreKind::Chunks],
        },
    }
}

/// `--writers`, or the default phases.
fn s3_writers(asked: &[usize]) -> Vec<usize> {
    if asked.is_empty() {
        bench::s3_bench::WRITERS.to_vec()
    } else {
        asked.to_vec()
    }
}

/// Holds a VM's free page reporting off until the hold is dropped and
/// touches the memory the run will use, unless `--no-warm-memory`.
fn warm_memory(c: &Common) -> (Option<bench::vm_memory::Held>, serde_json::Value) {
    if c.no_warm_memory {
        return (None, serde_json::Value::Null);
    }
    bench::vm_memory::hold_and_warm(bench::vm_memory::auto_bytes())
}

fn run_engine(c: &Common, work_base: PathBuf, o: EngineOpts) -> Result<()> {
    if o.store == "s3" {
        // The engine's sizes as the mount options that set them.
        let mut opts: Vec<String> = o.options.into_iter().collect();
        opts.extend(o.block_cache.map(|b| format!("cache={b}")));
        opts.extend(o.memtable.map(|m| format!("memtable={m}")));
        return bench::s3_bench::run(&bench::s3_bench::S3Args {
            through: bench::s3_bench::Through::Engine,
            work_base,
            plan: plan(c, 16 << 20),
            sync: c.sync,
            options: (!opts.is_empty()).then(|| opts.join(",")),
            mountd: None,
            writers: s3_writers(&o.writers),
            s3_delay: Duration::from_millis(o.s3_delay_ms),
        })
        .map(drop);
    }
    let args = engine_args(c, work_base, o);
    let mut line = bench::engine_bench::run(&args)?;
    bench::write_rounds::after_engine(&args, &mut line);
    bench::peer_rounds::after_engine(&args, &mut line);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("bigtable-bench").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn scale_takes_sizes() {
        match parse(&["scale", "--rows", "10,20"]).command {
            Some(Cmd::Scale(o)) => assert_eq!(o.rows, vec![10, 20]),
            other => panic!("{other:?}"),
        }
        match parse(&["scale"]).command {
            Some(Cmd::Scale(o)) => assert_eq!(o.rows, vec![10_000, 100_000, 1_000_000]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_subcommand_means_engine_with_defaults() {
        let cli = parse(&[]);
        assert!(cli.command.is_none());
        assert_eq!(cli.common.threads, 4);
        assert!(!cli.common.sync);
        assert_eq!(plan(&cli.common, 256 << 20).n, (256 << 20) / 1000);
        assert_eq!(cli.common.time_cap, Duration::from_secs(20));
    }

    #[test]
    fn global_flags_work_before_and_after_the_subcommand() {
        let cli = parse(&[
            "--size",
            "1GiB",
            "engine",
            "--threads",
            "8",
            "--sync",
            "--io",
            "syscall",
        ]);
        assert_eq!(cli.common.size, Some(1 << 30));
        assert_eq!(cli.common.threads, 8);
        assert!(cli.common.sync);
        match cli.command {
            Some(Cmd::Engine(o)) => assert_eq!(o.io, gfs::IoMode::Syscall),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fs_takes_a_mountpoint() {
        let cli = parse(&["fs", "/mnt/bt", "--no-peers", "--time-cap", "5"]);
        match cli.command {
            Some(Cmd::Fs(o)) => assert_eq!(o.mountpoint, Some(PathBuf::from("/mnt/bt"))),
            other => panic!("{other:?}"),
        }
        assert!(cli.common.no_peers);
        assert!(Cli::try_parse_from(["bigtable-bench", "fs"]).is_err());
    }

    #[test]
    fn store_s3_needs_no_mountpoint() {
        match parse(&["fs", "--store", "s3", "-o", "cache=8m"]).command {
            Some(Cmd::Fs(o)) => {
                assert_eq!(o.mountpoint, None);
                assert_eq!(o.options.as_deref(), Some("cache=8m"));
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["bigtable-bench", "fs", "/mnt/bt", "--store", "s3"]).is_err());
        assert!(Cli::try_parse_from(["bigtable-bench", "fs", "--store", "gcs"]).is_err());
        match parse(&["engine", "--store", "s3"]).command {
            Some(Cmd::Engine(o)) => assert_eq!(o.store, "s3"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn goals_takes_a_daemon() {
        match parse(&["goals", "--mountd", "/usr/bin/x", "--time-cap", "5"]).command {
            Some(Cmd::Goals(o)) => assert_eq!(o.mountd, Some(PathBuf::from("/usr/bin/x"))),
            other => panic!("{other:?}"),
        }
        match parse(&["goals"]).command {
            Some(Cmd::Goals(o)) => assert_eq!(o.mountd, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cluster_defaults_to_one_and_three_daemons() {
        match parse(&["cluster", "--threads", "2"]).command {
            Some(Cmd::Cluster(o)) => {
                assert_eq!(o.daemons, vec![1, 3]);
                assert_eq!(o.servers_per_daemon, 1);
            }
            other => panic!("{other:?}"),
        }
        match parse(&["cluster", "--daemons", "2", "--servers-per-daemon", "3"]).command {
            Some(Cmd::Cluster(o)) => assert_eq!((o.daemons, o.servers_per_daemon), (vec![2], 3)),
            other => panic!("{other:?}"),
        }
        match parse(&["cluster", "--machines", "1,3", "--cpus-per-machine", "0.5"]).command {
            Some(Cmd::Cluster(o)) => {
                assert_eq!(o.machines, vec![1, 3]);
                assert_eq!(o.cpus_per_machine, Some(0.5));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn gfs_defaults_and_bad_values() {
        match parse(&["gfs"]).command {
            Some(Cmd::Gfs(o)) => {
                assert_eq!(o.writers, 16);
                assert_eq!(o.block, 64 << 10);
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["bigtable-bench", "--threads", "0"]).is_err());
        assert!(Cli::try_parse_from(["bigtable-bench", "--size", "lots"]).is_err());
    }
}
