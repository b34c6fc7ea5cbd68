//! `bigtable-bench grpc`: Figure 6 through the daemon's Cloud Bigtable gRPC
//! API (a local server on loopback, the generated client) beside the same
//! workloads on the engine API, each on a fresh engine, and through the same
//! client against Google's emulator (`cbtemulator`, in memory only).

use super::common::{
    fmt_bytes, fmt_rate, fmt_ratio, scan_should_stop, Table, TempDir, VALUE_BYTES,
};
use super::emulator_peer::EmulatorPeer;
use super::engine_bench::{bench_schema, run_engine, EngineArgs, StoreKind};
use super::workloads::{fig6_suite, Fig6, Fig6Results, KvStore, Plan};
use anyhow::{anyhow, Context, Result};
use engine::Bigtable;
use grpc::admin_v2::{self as a, bigtable_table_admin_client::BigtableTableAdminClient};
use grpc::v2::{self, bigtable_client::BigtableClient, row_filter::Filter};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tonic::transport::Channel;

const FAMILY: &str = "cf";
const QUALIFIER: &[u8] = b"0";

/// One table used as a key/value store through the API (row = key, one cell `cf:0`).
struct GrpcTable {
    rt: Arc<tokio::runtime::Runtime>,
    client: BigtableClient<Channel>,
    name: String,
    /// The daemon's engine, flushed between phases (the emulator has none).
    db: Option<Bigtable>,
}

impl GrpcTable {
    fn read(&self, rows: v2::RowSet, deadline: Option<Instant>) -> Result<(u64, usize)> {
        let req = v2::ReadRowsRequest {
            table_name: self.name.clone(),
            rows: Some(rows),
            filter: Some(v2::RowFilter {
                filter: Some(Filter::CellsPerColumnLimitFilter(1)),
            }),
            ..Default::default()
        };
        let mut client = self.client.clone();
        self.rt
            .block_on(async move {
                let mut stream = client.read_rows(req).await?.into_inner();
                let (mut rows, mut bytes) = (0u64, 0usize);
                while let Some(resp) = stream.message().await? {
                    for c in resp.chunks {
                        bytes += c.value.len();
                        if matches!(
                            c.row_status,
                            Some(v2::read_rows_response::cell_chunk::RowStatus::CommitRow(
                                true
                            ))
                        ) {
                            rows += 1;
                        }
                    }
                    if deadline.is_some_and(scan_should_stop) {
                        break;
                    }
                }
                Ok::<_, tonic::Status>((rows, bytes))
            })
            .map_err(|s| anyhow!("ReadRows: {s}"))
    }
}

impl KvStore for GrpcTable {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let req = v2::MutateRowRequest {
            table_name: self.name.clone(),
            row_key: key.to_vec(),
            mutations: vec![v2::Mutation {
                mutation: Some(v2::mutation::Mutation::SetCell(v2::mutation::SetCell {
                    family_name: FAMILY.into(),
                    column_qualifier: QUALIFIER.to_vec(),
                    timestamp_micros: -1,
                    value: value.to_vec(),
                })),
            }],
            ..Default::default()
        };
        let mut client = self.client.clone();
        self.rt
            .block_on(client.mutate_row(req))
            .map_err(|s| anyhow!("MutateRow: {s}"))?;
        Ok(())
    }
    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let rows = v2::RowSet {
            row_keys: vec![key.to_vec()],
            row_ranges: Vec::new(),
        };
        let (n, bytes) = self.read(rows, None)?;
        Ok((n > 0).then_some(bytes))
    }
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        use v2::row_range::{EndKey, StartKey};
        let rows = v2::RowSet {
            row_keys: Vec::new(),
            row_ranges: vec![v2::RowRange {
                start_key: Some(StartKey::StartKeyClosed(start.to_vec())),
                end_key: Some(EndKey::EndKeyOpen(end.to_vec())),
            }],
        };
        Ok(self.read(rows, Some(deadline))?.0)
    }
    fn flush(&self) -> Result<()> {
        match &self.db {
            Some(db) => Ok(db.flush()?),
            None => Ok(()),
        }
    }
}

/// The six workloads through a gRPC server on a fresh engine in `dir`.
fn run_grpc(dir: &Path, args: &EngineArgs) -> Result<Fig6Results> {
    let store = gfs::LocalStore::open_with(dir, args.io_mode)?;
    let db = Bigtable::open(Arc::new(store), engine::Options::default())
        .context("opening the engine")?;
    let result = (|| {
        let shared = grpc::Shared {
            bt: db.clone(),
            owner: 0,
            group: 0,
            changes: None,
            // The bench and its server are one process: trust it as root.
            auth: grpc::Auth {
                loopback: Some(engine::access::Identity::new(0, 0)),
                ..Default::default()
            },
            instance: grpc::DEFAULT_INSTANCE.to_string(),
        };
        let server = grpc::start(shared, "127.0.0.1:0".parse()?)?;
        let rt = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?,
        );
        let url = format!("http://{}", server.addr);
        let channel = rt.block_on(Channel::from_shared(url)?.connect())?;
        let table = |name: &str, in_memory: bool| -> Result<GrpcTable> {
            db.create_table(name, bench_schema(in_memory))?;
            Ok(GrpcTable {
                rt: rt.clone(),
                client: BigtableClient::new(channel.clone()),
                // The engine's table `name` is the default instance's.
                name: format!(
                    "projects/bench/instances/{}/tables/{name}",
                    grpc::DEFAULT_INSTANCE
                ),
                db: Some(db.clone()),
            })
        };
        let (seq, rand, mem) = (
            table("seq", false)?,
            table("rand", false)?,
            table("mem", true)?,
        );
        let r = fig6_suite(&seq, &rand, &mem, args.plan);
        server.stop();
        r
    })();
    if let Err(e) = db.close() {
        eprintln!("warning: closing the engine: {e}");
    }
    result
}

/// The six workloads through the same client against a fresh emulator.
fn run_emulator(args: &EngineArgs) -> Result<(Fig6Results, Option<u64>)> {
    let peer = EmulatorPeer::start()?;
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?,
    );
    let channel = rt.block_on(Channel::from_shared(format!("http://{}", peer.addr))?.connect())?;
    let parent = "projects/bench/instances/bench";
    let table = |name: &str| -> Result<GrpcTable> {
        let family = a::ColumnFamily {
            gc_rule: Some(a::GcRule {
                rule: Some(a::gc_rule::Rule::MaxNumVersions(1)),
            }),
            value_type: None,
        };
        let req = a::CreateTableRequest {
            parent: parent.into(),
            table_id: name.into(),
            table: Some(a::Table {
                column_families: [(FAMILY.to_string(), family)].into_iter().collect(),
                ..Default::default()
            }),
            initial_splits: vec![],
        };
        let mut admin = BigtableTableAdminClient::new(channel.clone());
        rt.block_on(admin.create_table(req))
            .map_err(|s| anyhow!("CreateTable on the emulator: {s}"))?;
        Ok(GrpcTable {
            rt: rt.clone(),
            client: BigtableClient::new(channel.clone()),
            name: format!("{parent}/tables/{name}"),
            db: None,
        })
    };
    // The emulator has no locality groups: "mem" is a plain table there.
    let (seq, rand, mem) = (table("seq")?, table("rand")?, table("mem")?);
    let r = fig6_suite(&seq, &rand, &mem, args.plan)?;
    Ok((r, peer.rss_bytes()))
}

pub fn run(args: &EngineArgs) -> Result<()> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench")?;
    let plan: Plan = args.plan;
    eprintln!(
        "bigtable-bench grpc: {} rows of {VALUE_BYTES} B ({}), {} threads, time cap {:.0}s per workload, data in {}",
        plan.n,
        fmt_bytes(plan.n * VALUE_BYTES as u64),
        plan.threads,
        plan.time_cap.as_secs_f64(),
        work.path().display()
    );
    eprintln!("running the engine API ...");
    // The same store as the gRPC run below: one local copy.
    let direct = run_engine(&work.path().join("engine"), args, StoreKind::Local)?.fig6;
    eprintln!("running the gRPC API ...");
    let through = run_grpc(&work.path().join("grpc"), args)?;
    eprintln!("running Google's emulator (cbtemulator) ...");
    let emulator = match run_emulator(args) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("the emulator column is left out: {e:#}");
            None
        }
    };
    let mut table = Table::new(&[
        "workload (ops/s)",
        "engine",
        "grpc",
        "emulator",
        "grpc/engine",
        "grpc/emulator",
        "paper",
    ]);
    let mut workloads = serde_json::Map::new();
    for w in Fig6::ALL {
        let (e, g) = (direct.get(w), through.get(w));
        let emu = emulator.as_ref().map(|(r, _)| r.get(w));
        table.row(vec![
            w.label().into(),
            fmt_rate(e),
            fmt_rate(g),
            emu.map_or_else(|| "-".into(), fmt_rate),
            fmt_ratio(Some(g.rate()), Some(e.rate())),
            fmt_ratio(Some(g.rate()), emu.map(|m| m.rate())),
            format!("{:.0}", w.paper()),
        ]);
        workloads.insert(
            w.key().into(),
            serde_json::json!({
                "engine": e.json(),
                "grpc": g.json(),
                "emulator": emu.map(|m| m.json()),
                "paper": w.paper(),
            }),
        );
    }
    println!("{}", table.render());
    println!("(* = stopped at the time cap; grpc = one MutateRow / ReadRows call per operation over loopback)");
    println!(
        "(grpc: every write goes to the commit log on disk before it is acknowledged; \
         emulator: Google's cbtemulator, memory only{})",
        emulator
            .as_ref()
            .and_then(|(_, rss)| *rss)
            .map_or_else(String::new, |b| format!(
                ", {} resident at the end",
                fmt_bytes(b)
            ))
    );
    let line = serde_json::json!({
        "bench": "grpc",
        "rows": plan.n,
        "value_bytes": VALUE_BYTES,
        "threads": plan.threads,
        "workloads": workloads,
    });
    println!("{line}");
    Ok(())
}
