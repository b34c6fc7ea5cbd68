//! What three replicas cost a write, from alternated rounds: the engine's
//! two write workloads on one copy (the local store) and on the chunk
//! layer, round after round on fresh tables, the stores' order swapped each
//! round. One run of each store a minute apart moved the ratio between
//! 1.42x and 1.82x on this 2-core machine (whatever else it ran then); the
//! median of rounds that alternate is the figure a goal can be judged by.
//!
//! Each workload starts on a quiet store: the flushes and compactions the
//! one before it left are waited out first, and timed (its "drain"). Run
//! back to back, the chunk layer's random writes also paid for the
//! sequential table's merging compactions, which the local store had
//! mostly done within the sequential phase (84 MB against 18 MB compacted
//! while the random phase ran). Beside the rate, each workload's rate with
//! its drain counted (what a writer that never stops would sustain).

use super::common::{median_of, round3, Measured, TempDir};
use super::engine_bench::{open_store, options, place_tables, EngineArgs, EngineTable, StoreKind};
use super::workloads::{fill_random, fill_seq, Fig6};
use anyhow::{Context, Result};
use engine::Bigtable;
use std::path::Path;
use std::time::{Duration, Instant};

/// The write workloads the rounds run.
const WRITES: [Fig6; 2] = [Fig6::SeqWrite, Fig6::RandWrite];

/// Longest wait for a store's background work to finish; past it the
/// round goes on (with a warning) and the drain reads as this long.
const SETTLE_DEADLINE: Duration = Duration::from_secs(120);

/// Polls in a row that must find no background job: one finishing and
/// the next starting leave a gap between them.
const SETTLE_POLLS: u32 = 5;
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// One write workload on one store in one round.
#[derive(Debug, Clone, Copy)]
struct Phase {
    /// Writes per second while the writers ran.
    rate: f64,
    /// Seconds the background work the writes left took to finish.
    drain_secs: f64,
    /// Writes per second with the drain counted.
    sustained: f64,
}

impl Phase {
    fn of(m: &Measured, drain_secs: f64) -> Phase {
        let secs = m.secs + drain_secs;
        Phase {
            rate: m.rate(),
            drain_secs,
            sustained: if secs > 0.0 { m.ops as f64 / secs } else { 0.0 },
        }
    }
}

/// One store's write workloads in one round.
type Round = [Phase; 2];

/// After an engine run whose JSON line is `engine`: with both stores and
/// `write_rounds` asked for, runs them, prints their JSON line and adds it
/// to `engine` as `write_rounds` (where `goals` looks). A failure is
/// reported and leaves `engine` as it was.
pub fn after_engine(args: &EngineArgs, engine: &mut serde_json::Value) {
    let both = [StoreKind::Local, StoreKind::Chunks]
        .iter()
        .all(|k| args.stores.contains(k));
    if !both || args.write_rounds == 0 || engine.is_null() {
        return;
    }
    eprintln!(
        "running {} alternated rounds of the writes on each store ...",
        args.write_rounds
    );
    let rounds = TempDir::new_in(&args.work_base, "bigtable-bench-rounds")
        .and_then(|dir| run(dir.path(), args, args.write_rounds));
    attach_rounds(engine, "write_rounds", rounds);
}

/// Prints a rounds run's JSON line (`engine-write-rounds` for `write_rounds`)
/// and adds it to `engine` under `key`; a failure is reported and leaves
/// `engine` as it was.
pub(super) fn attach_rounds(
    engine: &mut serde_json::Value,
    key: &str,
    rounds: Result<serde_json::Value>,
) {
    match rounds {
        Ok(r) => {
            let bench = format!("engine-{}", key.replace('_', "-"));
            println!("{}", serde_json::json!({ "bench": bench, key: r }));
            engine[key] = r;
        }
        Err(e) => eprintln!("warning: the alternated rounds ({key}) did not run: {e:#}"),
    }
}

/// Runs `rounds` alternated rounds of the write workloads on both stores
/// in `dir`; the JSON holds, per workload, each store's rates and the
/// median over rounds of local/chunks (how many times slower the three
/// replicas are).
pub fn run(dir: &Path, args: &EngineArgs, rounds: usize) -> Result<serde_json::Value> {
    let kinds = [StoreKind::Local, StoreKind::Chunks];
    let dbs: Vec<Bigtable> = kinds
        .iter()
        .map(|&k| {
            let store = open_store(&dir.join(format!("rounds-{}", k.label())), args, k)?;
            Bigtable::open(store, options(args)).context("opening the engine")
        })
        .collect::<Result<_>>()?;
    let result = (|| {
        let mut rates: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Local first in even rounds, the chunk layer first in odd ones.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                rates[i].push(one_round(&dbs[i], args, round)?);
            }
            super::common::check_interrupted()?;
        }
        Ok::<_, anyhow::Error>(rates)
    })();
    for db in dbs {
        if let Err(e) = db.close() {
            eprintln!("warning: closing the engine: {e}");
        }
    }
    let [local, chunks] = result?;
    let mut json = serde_json::Map::new();
    json.insert("rounds".into(), serde_json::json!(rounds));
    for (k, w) in WRITES.iter().enumerate() {
        let of = |rounds: &[Round], f: fn(&Phase) -> f64| -> Vec<f64> {
            rounds.iter().map(|r| f(&r[k])).collect()
        };
        let (l, c) = (of(&local, |p| p.rate), of(&chunks, |p| p.rate));
        let ratios = ratios_of(&l, &c);
        let sustained = ratios_of(&of(&local, |p| p.sustained), &of(&chunks, |p| p.sustained));
        let (ratio, sustained_ratio) = (median_of(ratios.clone()), median_of(sustained));
        let (ld, cd) = (of(&local, |p| p.drain_secs), of(&chunks, |p| p.drain_secs));
        let times = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
        let list = |v: &[f64], f: &dyn Fn(f64) -> String| {
            v.iter().map(|&x| f(x)).collect::<Vec<_>>().join(" ")
        };
        println!(
            "{} over {rounds} alternated rounds: local {:.0}/s, chunks {:.0}/s (medians); local/chunks {} (rounds: {}); with the background work each left: {} (drains: local {} s, chunks {} s)",
            w.label(),
            median_of(l.clone()).unwrap_or(0.0),
            median_of(c.clone()).unwrap_or(0.0),
            times(ratio),
            list(&ratios, &|r| format!("{r:.2}x")),
            times(sustained_ratio),
            list(&ld, &|d| format!("{d:.2}")),
            list(&cd, &|d| format!("{d:.2}")),
        );
        let secs = |v: &[f64]| v.iter().map(|&x| round3(x)).collect::<Vec<_>>();
        json.insert(
            w.key().into(),
            serde_json::json!({
                "local_ops_per_sec": l.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "chunks_ops_per_sec": c.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "local_over_this": ratio.map(round3),
                "local_drain_secs": secs(&ld),
                "chunks_drain_secs": secs(&cd),
                "local_over_this_with_drains": sustained_ratio.map(round3),
            }),
        );
    }
    Ok(serde_json::Value::Object(json))
}

/// Per round, how many times slower the chunk layer's rate is.
fn ratios_of(local: &[f64], chunks: &[f64]) -> Vec<f64> {
    local
        .iter()
        .zip(chunks)
        .filter(|(_, c)| **c > 0.0)
        .map(|(l, c)| l / c)
        .collect()
}

/// Waits until no tablet server of `db` runs a background job (a flush,
/// a compaction, a split); returns how long that took, up to the first
/// of the quiet polls that confirmed it.
fn settle(db: &Bigtable) -> f64 {
    settle_while(&|| super::engine_bench::background_busy(db))
}

/// Waits until `busy` says no for [`SETTLE_POLLS`] polls in a row (or
/// [`SETTLE_DEADLINE`] passed); returns how long that took, up to the
/// first of the quiet polls.
pub(super) fn settle_while(busy: &dyn Fn() -> bool) -> f64 {
    let start = Instant::now();
    let (mut quiet, mut quiet_since) = (0, start);
    while quiet < SETTLE_POLLS {
        if start.elapsed() >= SETTLE_DEADLINE {
            eprintln!(
                "warning: background work still running after {}s; the round goes on",
                SETTLE_DEADLINE.as_secs()
            );
            return SETTLE_DEADLINE.as_secs_f64();
        }
        if busy() {
            quiet = 0;
        } else {
            if quiet == 0 {
                quiet_since = Instant::now();
            }
            quiet += 1;
        }
        std::thread::sleep(SETTLE_POLL);
    }
    quiet_since.duration_since(start).as_secs_f64()
}

/// One round on `db`: both write workloads on fresh tables (placed as the
/// main run places them), each from a quiet store, deleted after.
fn one_round(db: &Bigtable, args: &EngineArgs, round: usize) -> Result<Round> {
    let (seq_name, rand_name) = (format!("seq{round}"), format!("rand{round}"));
    let seq = EngineTable::create(db, &seq_name, false, args.sync)?;
    let rand = EngineTable::create(db, &rand_name, false, args.sync)?;
    place_tables(db, &[&seq_name, &rand_name])?;
    let measured: Result<Round> = (|| {
        settle(db);
        let s = fill_seq(&seq, args.plan)?;
        let s = Phase::of(&s, settle(db));
        let r = fill_random(&rand, args.plan)?;
        Ok([s, Phase::of(&r, settle(db))])
    })();
    for t in [&seq_name, &rand_name] {
        if let Err(e) = db.delete_table(t) {
            eprintln!("warning: deleting table {t}: {e}");
        }
    }
    measured
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_give_every_rate_and_the_ratio_and_land_in_the_engine_line() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "write-rounds-test").unwrap();
        let args = EngineArgs {
            write_rounds: 2,
            ..super::super::engine_bench::small_args(dir.path())
        };
        let mut line = serde_json::json!({ "bench": "engine" });
        after_engine(&args, &mut line);
        let rounds = &line["write_rounds"];
        assert_eq!(rounds["rounds"], 2);
        for w in ["seq_write", "rand_write"] {
            for store in ["local_ops_per_sec", "chunks_ops_per_sec"] {
                let rates = rounds[w][store].as_array().unwrap();
                assert_eq!(rates.len(), 2, "{w} {store}");
                assert!(rates.iter().all(|r| r.as_f64() > Some(0.0)), "{w} {store}");
            }
            assert!(rounds[w]["local_over_this"].as_f64() > Some(0.0), "{w}");
            let with_drains = rounds[w]["local_over_this_with_drains"].as_f64();
            assert!(with_drains > Some(0.0), "{w}");
            for store in ["local_drain_secs", "chunks_drain_secs"] {
                let drains = rounds[w][store].as_array().unwrap();
                assert_eq!(drains.len(), 2, "{w} {store}");
                assert!(
                    drains.iter().all(|d| d.as_f64() >= Some(0.0)),
                    "{w} {store}"
                );
            }
        }
        // One store only: nothing to compare, nothing run.
        let mut line = serde_json::json!({ "bench": "engine" });
        after_engine(
            &EngineArgs {
                stores: vec![StoreKind::Local],
                ..args
            },
            &mut line,
        );
        assert!(line.get("write_rounds").is_none());
    }
}
