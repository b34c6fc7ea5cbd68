//! Power-loss test of the chunk layer: a workload of creates, appends,
//! syncs, renames and deletes runs on a cluster whose every file (replicas
//! and all copies of the master's log and checkpoints) is under a
//! [`PowerCut`]; the power goes off after the Nth write, sync or namespace
//! change, the machine "restarts" (unsynced writes are taken back, some torn)
//! and the cluster is reopened. Through many crash points it must always
//! reopen, lose nothing a sync acknowledged, show only whole records, keep
//! acknowledged renames and deletes, and find no corruption.
//!
//! `CRASH_POINTS` sets the number of crash points (default 24); `CRASH_AT=n`
//! runs only the round that cuts after operation n (as a failure names it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{options, parse, record};
use gfs::{Cluster, FileStore, PowerCut, WritableFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const SERVERS: usize = 3;
const STEPS: usize = 160;

/// A file's records (offset, bytes) and how many of them a sync covers.
type FileRecords = (Vec<(u64, Vec<u8>)>, usize);

/// What the workload was told had happened, and so what must survive.
#[derive(Default)]
struct Acked {
    files: BTreeMap<String, FileRecords>,
    /// Names renamed away or deleted: they must stay gone.
    gone: BTreeSet<String>,
    /// The rename (from, to) or delete (from, None) the power cut
    /// interrupted: it may have happened or not.
    in_flight: Option<(String, Option<String>)>,
    steps: usize,
}

/// Runs the workload until the power goes (the first error) or it ends.
fn workload(c: &Cluster, seed: u64) -> Acked {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked = Acked::default();
    let mut open: Vec<(String, Box<dyn WritableFile>)> = Vec::new();
    let mut closed: Vec<String> = Vec::new();
    let mut next = 0u64;
    let mut seq = 0u64;
    for step in 0..STEPS {
        acked.steps = step;
        let roll = rng.gen_range(0..100);
        let ok = if open.is_empty() || ((80..88).contains(&roll) && open.len() < 3) {
            next += 1;
            let name = format!("f/{next:04}");
            match c.create(&name) {
                Ok(w) => {
                    acked.files.insert(name.clone(), (Vec::new(), 0));
                    open.push((name, w));
                    true
                }
                Err(_) => false,
            }
        } else if roll < 80 {
            let i = rng.gen_range(0..open.len());
            let (name, w) = &mut open[i];
            seq += 1;
            let len = if rng.gen_bool(0.08) {
                rng.gen_range(40_000..90_000)
            } else {
                rng.gen_range(1..3000)
            };
            let r = record(seq, len);
            let sync = roll < 30;
            let res = if sync {
                w.append_sync(&[&r])
            } else {
                w.append(&r)
            };
            match res {
                Ok(off) => {
                    let f = acked.files.get_mut(name.as_str()).unwrap();
                    f.0.push((off, r));
                    if sync {
                        f.1 = f.0.len();
                    }
                    true
                }
                Err(_) => false,
            }
        } else if roll < 94 {
            // Seal a file and give it its final name, as a compaction does.
            let i = rng.gen_range(0..open.len());
            let (name, mut w) = open.swap_remove(i);
            let to = name.replace("f/", "sealed/");
            match w.sync().and_then(|()| {
                drop(w);
                c.rename(&name, &to)
            }) {
                Ok(()) => {
                    let (recs, _) = acked.files.remove(&name).unwrap();
                    let n = recs.len();
                    acked.files.insert(to.clone(), (recs, n));
                    acked.gone.insert(name);
                    closed.push(to);
                    true
                }
                Err(_) => {
                    acked.in_flight = Some((name, Some(to)));
                    false
                }
            }
        } else if let Some(name) = closed.pop() {
            match c.delete(&name) {
                Ok(()) => {
                    acked.files.remove(&name);
                    acked.gone.insert(name);
                    true
                }
                Err(_) => {
                    acked.in_flight = Some((name, None));
                    false
                }
            }
        } else {
            true
        };
        if !ok {
            break;
        }
    }
    acked
}

fn read_all(c: &Cluster, name: &str) -> gfs::Result<Vec<u8>> {
    let f = c.open(name)?;
    f.read_at(0, f.len()? as usize)
}

/// Checks the reopened cluster against what was acknowledged.
fn verify(c: &Cluster, acked: &Acked, what: &str) {
    let names: BTreeSet<String> = ["f/", "sealed/"]
        .iter()
        .flat_map(|p| c.list(p).unwrap())
        .collect();
    for gone in &acked.gone {
        assert!(!names.contains(gone), "{what}: {gone} came back");
    }
    for (name, (recs, synced)) in &acked.files {
        if *synced == 0 {
            continue;
        }
        // An interrupted rename or delete may have taken effect.
        let name = match &acked.in_flight {
            Some((from, to)) if from == name && !names.contains(name) => match to {
                Some(to) => to,
                None => continue,
            },
            _ => name,
        };
        assert!(names.contains(name), "{what}: synced file {name} lost");
        let data = read_all(c, name).unwrap_or_else(|e| panic!("{what}: reading {name}: {e}"));
        let found = parse(name, &data);
        for (i, (off, r)) in recs[..*synced].iter().enumerate() {
            assert!(
                found
                    .iter()
                    .any(|&(_, at, len)| at == *off && len == r.len()),
                "{what}: synced record {i} of {name} at {off} lost"
            );
        }
    }
    // Unsynced files may be there or not, but only with whole records.
    for name in &names {
        let data = read_all(c, name).unwrap_or_else(|e| panic!("{what}: reading {name}: {e}"));
        parse(name, &data);
    }
    assert_eq!(c.scrub(), 0, "{what}: corruption after power loss");
}

fn run(dir: &Path, seed: u64, cut_after: Option<u64>, torn: bool) -> (Acked, u64) {
    let cut = PowerCut::install(dir, seed).unwrap();
    cut.set_torn_writes(torn);
    if let Some(n) = cut_after {
        cut.power_off_after(n);
    }
    let acked = match Cluster::open(options(dir, SERVERS)) {
        Ok(c) => workload(&c, seed),
        Err(_) => Acked::default(),
    };
    let mutations = cut.mutations();
    let report = cut.crash();
    eprintln!(
        "cut {cut_after:?}: steps {} files {} {report:?}",
        acked.steps,
        acked.files.len()
    );
    drop(cut);
    (acked, mutations)
}

#[test]
fn synced_data_survives_power_loss_at_many_crash_points() {
    let rounds = testkit::fuzz::crash_points(24);
    let seed = 7;
    // A run without a cut counts the crash points of the workload.
    let dry = tempfile::tempdir().unwrap();
    let dir = dry.path().canonicalize().unwrap();
    let (acked, total) = run(&dir, seed, None, false);
    assert_eq!(acked.steps, STEPS - 1, "the workload fails without a cut");
    assert!(total > 100, "only {total} crash points");
    let c = Cluster::open(options(&dir, SERVERS)).unwrap();
    verify(&c, &acked, "no cut");
    drop(c);

    let mut rng = StdRng::seed_from_u64(rounds);
    let only: Option<u64> = std::env::var("CRASH_AT").ok().and_then(|v| v.parse().ok());
    for round in 0..rounds {
        // Spread the cuts over the whole workload, opening included.
        let lo = total * round / rounds;
        let hi = (total * (round + 1) / rounds).max(lo + 1);
        let at = rng.gen_range(lo..hi);
        let torn = round % 2 == 1;
        if only.is_some_and(|o| o != at) {
            continue;
        }
        let what = format!("round {round} (cut after {at} of {total}, torn {torn})");
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let (acked, _) = run(&dir, seed, Some(at), torn);
        let c = Cluster::open(options(&dir, SERVERS))
            .unwrap_or_else(|e| panic!("{what}: does not reopen: {e}"));
        verify(&c, &acked, &what);
        // And it keeps working: a new file can be written and read back.
        let mut w = c.create("after/one").unwrap();
        let r = record(1, 100);
        w.append_sync(&[&r]).unwrap();
        assert_eq!(c.open("after/one").unwrap().read_at(0, r.len()).unwrap(), r);
    }
}

/// A new cluster's directories (the master's, each chunkserver's with its
/// `chunks/` and its mirror of the master's files) are durable once it has
/// opened, and so is a `chunks/` made again under an existing marker.
#[test]
fn new_directories_survive_power_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let cut = PowerCut::install(&dir, 1).unwrap();
    let c = Cluster::open(options(&dir, SERVERS)).unwrap();
    c.create("f").unwrap().append_sync(&[b"synced"]).unwrap();
    drop(c);
    let report = cut.crash();
    assert_eq!(report.dirs_lost, 0, "{report:?}");
    // `chunks/` lost while the marker stayed: made again, durably.
    std::fs::remove_dir_all(dir.join("cs0/chunks")).unwrap();
    drop(Cluster::open(options(&dir, SERVERS)).unwrap());
    let report = cut.crash();
    assert_eq!(report.dirs_lost, 0, "{report:?}");
    assert!(dir.join("cs0/chunks").is_dir());
    let c = Cluster::open(options(&dir, SERVERS)).unwrap();
    assert_eq!(c.open("f").unwrap().read_at(0, 6).unwrap(), b"synced");
}
