//! What three replicas cost a write, from alternated rounds: the engine's
//! two write workloads on one copy (the local store) and on the chunk
//! layer, round after round on fresh tables, the stores' order swapped each
//! round. One run of each store a minute apart moved the ratio between
//! 1.42x and 1.82x on this 2-core machine (whatever else it ran then); the
//! median of rounds that alternate is the figure a goal can be judged by.

use super::common::{median_of, round3, Measured, TempDir};
use super::engine_bench::{open_store, options, place_tables, EngineArgs, EngineTable, StoreKind};
use super::workloads::{fill_random, fill_seq, Fig6};
use anyhow::{Context, Result};
use engine::Bigtable;
use std::path::Path;

/// The write workloads the rounds run.
const WRITES: [Fig6; 2] = [Fig6::SeqWrite, Fig6::RandWrite];

/// Rates of one store's write workloads in one round.
type RoundRates = [f64; 2];

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
    match rounds {
        Ok(r) => {
            println!(
                "{}",
                serde_json::json!({ "bench": "engine-write-rounds", "write_rounds": r })
            );
            engine["write_rounds"] = r;
        }
        Err(e) => eprintln!("warning: the alternated write rounds did not run: {e:#}"),
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
        let mut rates: [Vec<RoundRates>; 2] = [Vec::new(), Vec::new()];
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
        let l: Vec<f64> = local.iter().map(|r| r[k]).collect();
        let c: Vec<f64> = chunks.iter().map(|r| r[k]).collect();
        let ratios: Vec<f64> = l
            .iter()
            .zip(&c)
            .filter(|(_, c)| **c > 0.0)
            .map(|(l, c)| l / c)
            .collect();
        let ratio = median_of(ratios.clone());
        println!(
            "{} over {rounds} alternated rounds: local {:.0}/s, chunks {:.0}/s (medians); local/chunks {} (rounds: {})",
            w.label(),
            median_of(l.clone()).unwrap_or(0.0),
            median_of(c.clone()).unwrap_or(0.0),
            ratio.map_or("-".to_string(), |r| format!("{r:.2}x")),
            ratios
                .iter()
                .map(|r| format!("{r:.2}x"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        json.insert(
            w.key().into(),
            serde_json::json!({
                "local_ops_per_sec": l.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "chunks_ops_per_sec": c.iter().map(|x| x.round()).collect::<Vec<_>>(),
                "local_over_this": ratio.map(round3),
            }),
        );
    }
    Ok(serde_json::Value::Object(json))
}

/// One round on `db`: both write workloads on fresh tables (placed as the
/// main run places them), deleted after.
fn one_round(db: &Bigtable, args: &EngineArgs, round: usize) -> Result<RoundRates> {
    let (seq_name, rand_name) = (format!("seq{round}"), format!("rand{round}"));
    let seq = EngineTable::create(db, &seq_name, false, args.sync)?;
    let rand = EngineTable::create(db, &rand_name, false, args.sync)?;
    place_tables(db, &[&seq_name, &rand_name])?;
    let measured: Result<[Measured; 2]> =
        (|| Ok([fill_seq(&seq, args.plan)?, fill_random(&rand, args.plan)?]))();
    for t in [&seq_name, &rand_name] {
        if let Err(e) = db.delete_table(t) {
            eprintln!("warning: deleting table {t}: {e}");
        }
    }
    let [s, r] = measured?;
    Ok([s.rate(), r.rate()])
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
