//! Power loss in the lock service: a cell runs on a [`chubby::CrashDisk`], the
//! power is cut after a random number of disk operations (in a log append, a
//! snapshot write, the rename of a snapshot or of a new log, the directory
//! sync...), everything not durable is dropped, and the cell must reopen with
//! exactly the acknowledged changes: every mutation of the cell is fsync'd
//! before it is acknowledged, so only the one in flight when the power went
//! may be there or not.
//!
//! `CRASH_POINTS=n` sets how many crash points are visited (CI default: 300).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chubby::{
    CellOptions, CrashDisk, Credentials, Disk, LocalCell, LockMode, LockService, NodeSpec,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::sync::Arc;

type State = BTreeMap<String, Vec<u8>>;

fn opts() -> CellOptions {
    CellOptions {
        // Small, so that snapshots and log resets happen often.
        snapshot_after_bytes: 1500,
        ..CellOptions::default()
    }
}

fn open(disk: &CrashDisk) -> chubby::Result<Arc<LocalCell>> {
    LocalCell::open_on(Arc::new(disk.clone()) as Arc<dyn Disk>, opts())
}

/// One step of the workload; applies it to `model` only if the cell
/// acknowledged it. Returns the state the step would have produced, and
/// whether it failed (the power is off).
fn step(cell: &LocalCell, rng: &mut StdRng, i: u32, model: &mut State) -> Option<State> {
    let root = Credentials::root();
    let mut next = model.clone();
    let name = format!("/f{}", rng.gen_range(0..12));
    let ok = match rng.gen_range(0..5) {
        0 if !model.contains_key(&name) => {
            next.insert(name.clone(), Vec::new());
            cell.create(&root, &name, &NodeSpec::file(0o644)).is_ok()
        }
        1 if model.contains_key(&name) => {
            next.remove(&name);
            cell.unlink(&root, &name).is_ok()
        }
        2 if model.contains_key(&name) => {
            // Writer locks bump the node's durable lock generation.
            let r = cell.try_lock(
                &root,
                u64::from(i),
                name.as_str().into(),
                LockMode::Exclusive,
            );
            r.is_ok() && cell.unlock(u64::from(i), name.as_str().into()).is_ok()
        }
        _ if model.contains_key(&name) => {
            let data = format!("{i}-").repeat(rng.gen_range(1..60)).into_bytes();
            next.insert(name.clone(), data.clone());
            cell.set_contents(&root, name.as_str().into(), &data)
                .is_ok()
        }
        // Nothing to do for this name: not a disk operation.
        _ => return None,
    };
    if ok {
        *model = next;
        None
    } else {
        Some(next)
    }
}

fn state(cell: &LocalCell) -> State {
    let root = Credentials::root();
    cell.list(&root, "/")
        .unwrap()
        .into_iter()
        .map(|e| {
            let path = format!("/{}", e.name);
            let (data, _) = cell.read(&root, path.as_str().into()).unwrap();
            (path, data)
        })
        .collect()
}

#[test]
fn acknowledged_changes_survive_power_loss_at_random_points() {
    const STEPS: u32 = 120;
    let cases = testkit::fuzz::crash_points(300);
    // How many disk operations the whole workload makes.
    let span = {
        let disk = CrashDisk::new();
        let cell = open(&disk).unwrap();
        let before = disk.mutations();
        let mut rng = StdRng::seed_from_u64(7);
        let mut model = State::new();
        for i in 0..STEPS {
            assert!(step(&cell, &mut rng, i, &mut model).is_none());
        }
        assert_eq!(state(&cell), model);
        disk.mutations() - before
    };
    assert!(span > 100, "the workload made only {span} disk operations");
    let base: u64 = rand::random();
    let mut in_flight_kept = 0;
    for case in 0..cases {
        let seed = base.wrapping_add(case);
        let disk = CrashDisk::with_seed(seed);
        disk.set_torn_writes(case % 2 == 0);
        let cell = open(&disk).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut model = State::new();
        let point = rng.gen_range(0..span);
        disk.power_off_after(point);
        let mut in_flight = None;
        for i in 0..STEPS {
            if let Some(next) = step(&cell, &mut rng, i, &mut model) {
                in_flight = Some(next);
                break;
            }
        }
        drop(cell);
        disk.crash();
        let what = format!("seed {seed}, power off after {point} of {span} disk operations");
        let cell = match open(&disk) {
            Ok(c) => c,
            Err(e) => panic!("{what}: reopen failed: {e}"),
        };
        let got = state(&cell);
        if in_flight.as_ref() == Some(&got) && got != model {
            in_flight_kept += 1;
        } else {
            assert_eq!(got, model, "{what}: recovered state differs");
        }
        // The recovered cell works and survives another power cut.
        let root = Credentials::root();
        cell.create(&root, "/after", &NodeSpec::file(0o600))
            .unwrap();
        drop(cell);
        disk.crash();
        let cell = open(&disk).unwrap();
        model = got;
        model.insert("/after".into(), Vec::new());
        assert_eq!(state(&cell), model, "{what}: second crash");
    }
    eprintln!("{cases} crash points over {span} disk operations; in-flight change kept {in_flight_kept} times");
}

#[test]
fn power_loss_while_creating_or_recovering_a_cell() {
    for n in 0..12 {
        let disk = CrashDisk::with_seed(n);
        disk.set_torn_writes(true);
        disk.power_off_after(n);
        if let Ok(cell) = open(&disk) {
            drop(cell);
        }
        disk.crash();
        let cell = open(&disk).unwrap_or_else(|e| panic!("power off after {n}: {e}"));
        assert!(state(&cell).is_empty());
        cell.create(&Credentials::root(), "/x", &NodeSpec::file(0o644))
            .unwrap();
        drop(cell);
        // And again in the middle of the recovery of a cell with contents.
        disk.power_off_after(n % 4);
        if let Ok(cell) = open(&disk) {
            drop(cell);
        }
        disk.crash();
        let cell = open(&disk).unwrap();
        assert_eq!(state(&cell).len(), 1, "power off after {n}");
    }
}
