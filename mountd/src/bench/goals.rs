//! `bigtable-bench goals`: every figure the speed goals name, from one run.
//!
//! It runs the engine unsynced on both stores, the engine with `--sync` on
//! the local store, then mounts a fresh daemon and runs the mount's workloads
//! with the given number of threads and with one, each beside its peers
//! exactly as `engine` and `fs` do (their tables and JSON lines are printed
//! too). Then one table: each goal, its target, the figure measured, the
//! limit beside it (see [`goal_limits`]), and whether it is met, short of
//! it or out of reach; and a JSON line with all of it.

use super::common::TempDir;
use super::engine_bench::{self, EngineArgs, StoreKind};
use super::fs_bench::{self, FsArgs};
use super::goal_limits::{self, Limit, Target};
use super::scale_bench::{mountd_binary, Daemon};
use super::workloads::{Fig6, Plan};
use anyhow::Result;
use serde_json::{json, Value};
use std::path::PathBuf;

/// What `goals` needs besides the engine's arguments.
pub struct GoalsArgs {
    /// The unsynced engine run (its plan, stores and peers); the synced run
    /// and the mount runs are derived from it.
    pub engine: EngineArgs,
    /// The daemon to mount (see [`mountd_binary`]).
    pub mountd: Option<PathBuf>,
    /// Table sizes for the walk goals; the cost per cell of the last size is
    /// compared with the first's.
    pub scale_rows: Vec<u64>,
    /// What holding a VM's memory did before the run (`vm_memory.rs`).
    pub memory: Value,
}

/// The engine's data for the synced run: synced writes run near the disk's
/// fsync rate, so a quarter of the default keeps the run short.
const SYNC_SIZE: u64 = 64 << 20;
/// Data per table through the mount (the `fs` default).
const FS_SIZE: u64 = 16 << 20;
const VALUE_BYTES: u64 = super::common::VALUE_BYTES as u64;

/// One goal and what was measured for it (`None`: not measured, e.g. a
/// peer that did not run), with the limit beside it where one applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub goal: String,
    pub target: Target,
    pub value: Option<f64>,
    pub limit: Option<Limit>,
}

impl Check {
    pub fn met(&self) -> Option<bool> {
        self.value.map(|v| match self.target {
            Target::AtLeast(t) => v >= t,
            Target::AtMost(t) => v <= t,
        })
    }

    pub fn verdict(&self) -> String {
        goal_limits::verdict(self.target, self.value, self.limit.as_ref())
    }
}

/// The workloads the engine goals compare with the peers (the in-memory
/// read has no peer counterpart).
const ENGINE_WORKLOADS: [Fig6; 5] = [
    Fig6::SeqWrite,
    Fig6::RandWrite,
    Fig6::SeqRead,
    Fig6::RandRead,
    Fig6::Scan,
];

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

/// The checks, from the JSON lines of the runs (`Value::Null` for a run that
/// failed or did not happen) and the machine's limits ([`goal_limits::machine`]).
pub fn checks(
    machine: &Value,
    engine: &Value,
    engine_sync: &Value,
    mounts: &[(usize, Value)],
    scale: &[Value],
) -> Vec<Check> {
    let mut out = Vec::new();
    for (run, label, synced) in [(engine, "unsynced", false), (engine_sync, "--sync", true)] {
        for w in ENGINE_WORKLOADS {
            out.push(Check {
                goal: format!("engine {label}: {} ours/best peer", w.label()),
                target: Target::AtLeast(1.2),
                // The median of alternated rounds where the run made them.
                value: num(run, &["peer_rounds", w.key(), "ours_over_best"])
                    .or_else(|| num(run, &["workloads", w.key(), "vs_best_peer"])),
                limit: goal_limits::engine(run, machine, w, synced),
            });
        }
    }
    for w in [Fig6::SeqWrite, Fig6::RandWrite] {
        out.push(Check {
            goal: format!("engine: {} on 3 replicas, times one copy", w.label()),
            target: Target::AtMost(1.5),
            // The median of alternated rounds where the run made them.
            value: num(engine, &["write_rounds", w.key(), "local_over_this"]).or_else(|| {
                num(
                    engine,
                    &["other_stores", "chunks", w.key(), "local_over_this"],
                )
            }),
            limit: goal_limits::replicas(engine, machine, w),
        });
    }
    for (store, bound, share, what) in [
        (
            "local",
            "vs_fsync_times_batch",
            "rounds_share_of_fsync_bound",
            "the fsync bound",
        ),
        (
            "chunks",
            "vs_copies_fsync_times_batch",
            "copies_rounds_share_of_bound",
            "the 3-copy fsync bound",
        ),
    ] {
        let probe = &engine["group_commit"][store];
        let batch = match (num(probe, &["mean_batch"]), num(probe, &["max_batch"])) {
            (Some(mean), Some(max)) => format!("batch mean {mean:.1} max {max:.0}"),
            _ => "batch not measured".to_string(),
        };
        // The figure is already a share of the bound, which is also capped
        // by what 16 threads' rounds of a write, an fsync (on every copy at
        // once) and the wake-ups do on this machine without the engine.
        let rounds = num(probe, &[share]).filter(|&r| r < 1.0);
        let limit = match rounds {
            Some(r) => Limit {
                value: r,
                what: format!(
                    "{what} as far as 16 threads' rounds of one write, one fsync and \
                     the wake-ups allow here"
                ),
            },
            None => Limit {
                value: 1.0,
                what: format!("{what} itself"),
            },
        };
        out.push(Check {
            goal: format!("group commit, {store}, 16 synced writers, {batch}: of {what}"),
            target: Target::AtLeast(0.5),
            value: num(probe, &[bound]),
            limit: Some(limit),
        });
    }
    for (threads, run) in mounts {
        let t = if *threads == 1 { "thread" } else { "threads" };
        for w in Fig6::ALL {
            out.push(Check {
                goal: format!("mount, {threads} {t}: {} ours/bindfs", w.label()),
                target: Target::AtLeast(1.0),
                value: num(run, &["workloads", w.key(), "vs_passthrough"]),
                limit: goal_limits::mount(run, w, "bindfs"),
            });
        }
        for w in Fig6::ALL {
            out.push(Check {
                goal: format!("mount, {threads} {t}: {} ours/paper", w.label()),
                target: Target::AtLeast(1.0),
                value: num(run, &["workloads", w.key(), "vs_paper"]),
                limit: goal_limits::mount(run, w, "paper"),
            });
        }
        out.push(Check {
            goal: format!("mount, {threads} {t}: warm re-read / cold read"),
            target: Target::AtLeast(3.0),
            value: num(run, &["warm_over_cold"]),
            limit: goal_limits::warm_over_cold(run),
        });
    }
    out.extend(scale_checks(scale));
    out
}

/// The walk goals, from `scale`'s lines (one per size, smallest first):
/// `ls` at least as fast as bindfs and the other walks twice as fast, at
/// every size; and each walk's cost per cell at the largest size within
/// 1.3× of the smallest's.
fn scale_checks(sizes: &[Value]) -> Vec<Check> {
    let mut out = Vec::new();
    let walks = |v: &Value| v["walks"].as_array().cloned().unwrap_or_default();
    for size in sizes {
        let rows = size["rows"].as_u64().unwrap_or(0);
        for w in walks(size) {
            let name = w["walk"].as_str().unwrap_or("?").to_string();
            let target = if name == "ls" { 1.0 } else { 2.0 };
            out.push(Check {
                goal: format!("walk, {rows} rows: {name} ours/bindfs"),
                target: Target::AtLeast(target),
                value: num(&w, &["speedup"]),
                limit: goal_limits::walk(&w),
            });
        }
    }
    if let (Some(small), Some(large)) = (sizes.first(), sizes.last()) {
        let rows = (small["rows"].as_f64(), large["rows"].as_f64());
        if let (Some(a), Some(b)) = rows.0.zip(rows.1).filter(|(a, b)| b > a).unzip() {
            for w in walks(large) {
                let name = w["walk"].as_str().unwrap_or("?");
                let base = walks(small).into_iter().find(|s| s["walk"] == w["walk"]);
                let value = base
                    .as_ref()
                    .and_then(|s| goal_limits::per_cell_growth(s, &w, (a, b), "secs"));
                out.push(Check {
                    goal: format!("walk: {name} cost per cell, {b} rows / {a} rows"),
                    target: Target::AtMost(1.3),
                    value,
                    limit: base.and_then(|s| goal_limits::walk_growth(&s, &w, (a, b))),
                });
            }
        }
    }
    out
}

/// (goals met, goals measured).
fn tally(checks: &[Check]) -> (usize, usize) {
    let met = checks.iter().filter(|c| c.met() == Some(true)).count();
    let measured = checks.iter().filter(|c| c.met().is_some()).count();
    (met, measured)
}

/// The table of checks.
pub fn render(checks: &[Check]) -> String {
    let width = checks
        .iter()
        .map(|c| c.goal.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut s = format!(
        "{:<width$}  {:>9}  {:>8}  {:>8}  met\n{}\n",
        "goal",
        "target",
        "measured",
        "limit",
        "-".repeat(width + 60)
    );
    for c in checks {
        let value = c.value.map_or("-".to_string(), |v| format!("{v:.2}x"));
        let limit = c
            .limit
            .as_ref()
            .map_or("-".to_string(), |l| format!("{:.2}x", l.value));
        s.push_str(&format!(
            "{:<width$}  {:>9}  {:>8}  {:>8}  {}\n",
            c.goal,
            c.target.text(),
            value,
            limit,
            c.verdict()
        ));
    }
    s.push_str("limits:\n");
    for c in checks {
        if let Some(l) = &c.limit {
            s.push_str(&format!("  {}: {}\n", c.goal, l.what));
        }
    }
    let (met, measured) = tally(checks);
    s.push_str(&format!(
        "{met} of {measured} measured goals met ({} in all)\n",
        checks.len()
    ));
    s
}

/// A run that failed is reported and counted as not measured.
fn or_null(what: &str, r: Result<Value>) -> Value {
    r.unwrap_or_else(|e| {
        eprintln!("bigtable-bench goals: {what} did not run: {e:#}");
        Value::Null
    })
}

/// Alternated rounds of the writes on one copy and three replicas that
/// the three-replica goals are judged by (see `write_rounds.rs`).
pub const WRITE_ROUNDS: usize = 3;

/// Alternated rounds of the workloads on the engine and its peers that
/// the engine's goals against the peers are judged by (see `peer_rounds.rs`).
pub const PEER_ROUNDS: usize = 3;

pub fn run(args: &GoalsArgs) -> Result<()> {
    let e = &args.engine;
    eprintln!("== limits");
    let machine = goal_limits::machine(&e.work_base, e.plan.threads);
    eprintln!("== engine, unsynced");
    let unsynced = EngineArgs {
        stores: vec![StoreKind::Local, StoreKind::Chunks],
        sync: false,
        ..e.clone()
    };
    let mut engine = or_null("the unsynced engine run", engine_bench::run(&unsynced));
    super::write_rounds::after_engine(&unsynced, &mut engine);
    super::peer_rounds::after_engine(&unsynced, &mut engine);
    super::common::check_interrupted()?;
    eprintln!("== engine, --sync");
    let synced = EngineArgs {
        stores: vec![StoreKind::Local],
        sync: true,
        plan: Plan {
            n: e.plan.n.clamp(1, SYNC_SIZE / VALUE_BYTES),
            ..e.plan
        },
        scaling: Vec::new(),
        ..e.clone()
    };
    let mut engine_sync = or_null("the synced engine run", engine_bench::run(&synced));
    super::peer_rounds::after_engine(&synced, &mut engine_sync);
    super::common::check_interrupted()?;
    let mut thread_counts = vec![e.plan.threads, 1];
    thread_counts.dedup();
    let mounts = or_null("the mount runs", run_mounts(args, &thread_counts));
    let mounts: Vec<(usize, Value)> = thread_counts
        .iter()
        .map(|t| (*t, mounts[t.to_string()].clone()))
        .collect();
    super::common::check_interrupted()?;
    eprintln!("== walks as a table grows");
    let scale = super::scale_bench::run(&super::scale_bench::ScaleArgs {
        rows: args.scale_rows.clone(),
        work_base: e.work_base.clone(),
        mountd: args.mountd.clone(),
        options: None,
        peers: e.peers,
        walks: Vec::new(),
    })
    .unwrap_or_else(|err| {
        eprintln!("bigtable-bench goals: the walks did not run: {err:#}");
        Vec::new()
    });
    let checks = checks(&machine, &engine, &engine_sync, &mounts, &scale);
    let (met, measured) = tally(&checks);
    eprintln!();
    eprint!("{}", render(&checks));
    let line = json!({
        "bench": "goals",
        "checks": checks.iter().map(|c| json!({
            "goal": c.goal,
            "target": c.target.text(),
            "value": c.value,
            "met": c.met(),
            "limit": c.limit.as_ref().map(|l| l.value),
            "limit_from": c.limit.as_ref().map(|l| l.what.clone()),
            "verdict": c.verdict(),
        })).collect::<Vec<_>>(),
        "limits": machine,
        "memory": args.memory,
        "met": met,
        "measured": measured,
        "runs": {
            "engine": engine,
            "engine_sync": engine_sync,
            "mount": mounts.iter().map(|(t, v)| (t.to_string(), v.clone())).collect::<serde_json::Map<_, _>>(),
            "scale": scale,
        },
    });
    println!("{line}");
    Ok(())
}

/// Mounts a fresh daemon (every part local, its defaults) and runs the
/// mount's workloads with each thread count; the JSON lines by thread count.
fn run_mounts(args: &GoalsArgs, thread_counts: &[usize]) -> Result<Value> {
    let work = TempDir::new_in(&args.engine.work_base, "bigtable-bench-goals")?;
    let (data, mnt) = (work.path().join("data"), work.path().join("mnt"));
    std::fs::create_dir_all(&data)?;
    std::fs::create_dir_all(&mnt)?;
    let daemon = Daemon::start(&mountd_binary(&args.mountd), &data, &mnt, &None)?;
    let mut out = serde_json::Map::new();
    for &threads in thread_counts {
        eprintln!("== mount, {threads} thread(s)");
        let line = fs_bench::run(&FsArgs {
            mountpoint: mnt.clone(),
            plan: Plan {
                n: FS_SIZE / VALUE_BYTES,
                threads,
                time_cap: args.engine.plan.time_cap,
                min_read: std::time::Duration::ZERO,
            },
            sync: false,
            work_base: args.engine.work_base.clone(),
            peers: args.engine.peers,
        });
        out.insert(threads.to_string(), or_null("a mount run", line));
        super::common::check_interrupted()?;
    }
    drop(daemon);
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_line(seq_write: f64, chunks_over: f64) -> Value {
        json!({
            "workloads": {
                "seq_write": {"vs_best_peer": seq_write},
                "rand_write": {"vs_best_peer": 1.3},
                "seq_read": {"vs_best_peer": 1.5},
                "rand_read": {"vs_best_peer": null},
                "scan": {"vs_best_peer": 1.2},
            },
            "other_stores": {"chunks": {
                "seq_write": {"local_over_this": chunks_over},
                "rand_write": {"local_over_this": 1.4},
            }},
            "group_commit": {
                "local": {"mean_batch": 8.3, "max_batch": 16, "vs_fsync_times_batch": 0.6},
                "chunks": {"mean_batch": 8.0, "max_batch": 16, "vs_copies_fsync_times_batch": 0.4},
            },
        })
    }

    #[test]
    fn every_goal_is_checked_against_its_target() {
        let mount = json!({
            "workloads": {
                "seq_write": {"vs_passthrough": 2.0, "vs_paper": 0.9},
                "rand_write": {"vs_passthrough": 2.0, "vs_paper": 1.1},
                "seq_read": {"vs_passthrough": 3.0, "vs_paper": 9.0},
                "rand_read": {"vs_passthrough": 5.0, "vs_paper": 60.0},
                "rand_read_mem": {"vs_passthrough": 4.0, "vs_paper": 5.0},
                "scan": {"vs_passthrough": 0.9, "vs_paper": 2.0},
            },
            "warm_over_cold": 2.2,
        });
        let c = checks(
            &Value::Null,
            &engine_line(0.8, 2.5),
            &Value::Null,
            &[(4, mount.clone()), (1, Value::Null)],
            &[],
        );
        // 5 + 5 engine, 2 replicated writes, 2 group commit, 13 per mount run.
        assert_eq!(c.len(), 5 + 5 + 2 + 2 + 13 + 13);
        let find = |goal: &str| c.iter().find(|c| c.goal == goal).unwrap();
        let expected = [
            (
                "engine unsynced: sequential write ours/best peer",
                Some(false),
            ),
            ("engine unsynced: scan ours/best peer", Some(true)),
            ("engine unsynced: random read ours/best peer", None),
            ("engine --sync: scan ours/best peer", None),
            (
                "engine: sequential write on 3 replicas, times one copy",
                Some(false),
            ),
            (
                "engine: random write on 3 replicas, times one copy",
                Some(true),
            ),
            ("mount, 4 threads: scan ours/bindfs", Some(false)),
            ("mount, 4 threads: sequential write ours/paper", Some(false)),
            ("mount, 4 threads: random write ours/paper", Some(true)),
            ("mount, 4 threads: warm re-read / cold read", Some(false)),
            ("mount, 1 thread: scan ours/bindfs", None),
        ];
        for (goal, met) in expected {
            assert_eq!(find(goal).met(), met, "{goal}");
        }
        let gc: Vec<_> = c
            .iter()
            .filter(|c| c.goal.starts_with("group commit"))
            .collect();
        assert!(
            gc[0].goal.contains("batch mean 8.3 max 16"),
            "{}",
            gc[0].goal
        );
        assert_eq!((gc[0].met(), gc[1].met()), (Some(true), Some(false)));
        let limit = |c: &Check| c.limit.as_ref().map(|l| l.value);
        assert_eq!(
            limit(gc[0]),
            Some(1.0),
            "no rounds measured: the bound itself"
        );
        // Where 16 threads' rounds of a write, an fsync and the wake-ups
        // reach only part of the fsync bound, that part is the limit.
        let mut engine = engine_line(0.8, 2.5);
        engine["group_commit"]["local"]["rounds_share_of_fsync_bound"] = json!(0.42);
        engine["group_commit"]["local"]["vs_fsync_times_batch"] = json!(0.3);
        // On the chunk layer, the rounds that write and sync every copy.
        engine["group_commit"]["chunks"]["copies_rounds_share_of_bound"] = json!(0.33);
        let c = checks(&Value::Null, &engine, &Value::Null, &[], &[]);
        let store = |name: &str| {
            c.iter()
                .find(|c| c.goal.starts_with(&format!("group commit, {name}")))
                .unwrap()
        };
        let local = store("local");
        assert_eq!(limit(local), Some(0.42));
        assert!(local.limit.as_ref().unwrap().what.contains("wake-ups"));
        assert_eq!(local.met(), Some(false));
        assert_eq!(limit(store("chunks")), Some(0.33));
        let table = render(&c);
        assert!(table.contains(">= 1.20x"), "{table}");
        assert!(table.contains("<= 1.50x"), "{table}");
        assert!(table.contains("not measured"), "{table}");
        let measured = c.iter().filter(|c| c.met().is_some()).count();
        let met = c.iter().filter(|c| c.met() == Some(true)).count();
        assert!(
            table.contains(&format!("{met} of {measured} measured goals met")),
            "{table}"
        );
    }

    #[test]
    fn three_replicas_are_judged_by_the_alternated_rounds_where_they_ran() {
        let goal = "engine: sequential write on 3 replicas, times one copy";
        let value = |engine: &Value| {
            let c = checks(&Value::Null, engine, &Value::Null, &[], &[]);
            c.into_iter().find(|c| c.goal == goal).and_then(|c| c.value)
        };
        let mut engine = engine_line(0.8, 1.7);
        assert_eq!(value(&engine), Some(1.7), "no rounds: the main runs");
        engine["write_rounds"] = json!({"rounds": 3, "seq_write": {"local_over_this": 1.45}});
        assert_eq!(value(&engine), Some(1.45));
    }

    #[test]
    fn engine_goals_are_judged_by_the_alternated_rounds_where_they_ran() {
        let value = |engine: &Value, synced: &Value, goal: &str| {
            let c = checks(&Value::Null, engine, synced, &[], &[]);
            c.into_iter().find(|c| c.goal == goal).and_then(|c| c.value)
        };
        let (unsynced, sync) = (
            "engine unsynced: random read ours/best peer",
            "engine --sync: scan ours/best peer",
        );
        let mut engine = engine_line(0.8, 1.7);
        engine["workloads"]["rand_read"]["vs_best_peer"] = json!(0.9);
        let mut synced = engine_line(0.8, 1.7);
        assert_eq!(value(&engine, &synced, unsynced), Some(0.9), "no rounds");
        assert_eq!(value(&engine, &synced, sync), Some(1.2), "no rounds");
        engine["peer_rounds"] = json!({"rounds": 3, "rand_read": {"ours_over_best": 1.3}});
        synced["peer_rounds"] = json!({"rounds": 3, "scan": {"ours_over_best": 1.1}});
        assert_eq!(value(&engine, &synced, unsynced), Some(1.3));
        assert_eq!(value(&engine, &synced, sync), Some(1.1));
        // A workload the rounds did not give: the main run's.
        let write = "engine unsynced: sequential write ours/best peer";
        assert_eq!(value(&engine, &synced, write), Some(0.8));
        engine["peer_rounds"]["seq_write"] = json!({"ours_over_best": 1.25});
        assert_eq!(value(&engine, &synced, write), Some(1.25));
    }

    #[test]
    fn walks_are_checked_against_bindfs_and_their_cost_per_cell() {
        let size = |rows: u64, find: f64, ls_speedup: Option<f64>| {
            json!({"rows": rows, "walks": [
                {"walk": "ls", "secs": 0.1, "speedup": ls_speedup},
                {"walk": "find -type f", "secs": find, "speedup": 2.5},
            ]})
        };
        let c = scale_checks(&[size(10_000, 1.0, Some(0.9)), size(100_000, 12.0, None)]);
        let find = |goal: &str| c.iter().find(|c| c.goal == goal).unwrap().clone();
        assert_eq!(find("walk, 10000 rows: ls ours/bindfs").met(), Some(false));
        assert_eq!(
            find("walk, 10000 rows: find -type f ours/bindfs").met(),
            Some(true)
        );
        assert_eq!(find("walk, 100000 rows: ls ours/bindfs").met(), None);
        // 12 s for 10x the cells: 1.2x the cost per cell, within 1.3x.
        let per_cell = find("walk: find -type f cost per cell, 100000 rows / 10000 rows");
        assert!((per_cell.value.unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(per_cell.met(), Some(true));
        // ls at 10x the rows in the same time: cheaper per cell.
        assert_eq!(
            find("walk: ls cost per cell, 100000 rows / 10000 rows").met(),
            Some(true)
        );
        // One size: no growth to check.
        assert_eq!(scale_checks(&[size(10, 1.0, None)]).len(), 2);
    }
}
