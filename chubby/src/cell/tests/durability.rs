use std::fs;
use std::path::Path;

use rand::{Rng, SeedableRng};

use super::*;
use crate::{LockMode, NodeSpec};

/// Copies the cell's durable files (not its LOCK) into a fresh directory.
fn copy_cell(from: &Path, to: &Path) {
    for name in ["snapshot", "wal"] {
        fs::copy(from.join(name), to.join(name)).unwrap();
    }
}

/// Runs a varied sequence of operations, returning after each one the log
/// length and the state it acknowledged.
fn run_ops(cell: &LocalCell, dir: &Path) -> Vec<(u64, Vec<String>)> {
    let r = root();
    let wal_len = || fs::metadata(dir.join("wal")).unwrap().len();
    let mut seen = vec![(wal_len(), dump(cell))];
    let mut step = |f: &dyn Fn()| {
        f();
        seen.push((wal_len(), dump(cell)));
    };
    step(&|| {
        cell.create(&r, "/bigtable", &NodeSpec::dir(0o755)).unwrap();
    });
    step(&|| {
        cell.create(&r, "/bigtable/master", &NodeSpec::file(0o644))
            .unwrap();
    });
    for i in 0..6 {
        step(&|| {
            let v = format!("contents {i} {}", "x".repeat(i * 50));
            cell.set_contents(&r, "/bigtable/master".into(), v.as_bytes())
                .unwrap();
        });
    }
    step(&|| {
        cell.try_lock(&r, 1, "/bigtable/master".into(), LockMode::Exclusive)
            .unwrap();
    });
    step(&|| {
        cell.chmod(&r, "/bigtable".into(), 0o750).unwrap();
    });
    step(&|| {
        cell.chown(&r, "/bigtable/master".into(), Some(7), Some(8))
            .unwrap();
    });
    step(&|| {
        cell.set_lock_delay(&r, "/bigtable/master".into(), Duration::from_secs(2))
            .unwrap();
    });
    step(&|| {
        cell.create(&r, "/tmp", &NodeSpec::dir(0o1777)).unwrap();
    });
    step(&|| {
        cell.rename(&r, "/bigtable/master", "/tmp/m").unwrap();
    });
    step(&|| {
        cell.create(&r, "/tmp/n", &NodeSpec::file(0o600)).unwrap();
    });
    step(&|| {
        cell.unlink(&r, "/tmp/n").unwrap();
    });
    step(&|| {
        cell.rmdir(&r, "/bigtable").unwrap();
    });
    seen
}

#[test]
fn state_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let before = {
        let cell = open(dir.path());
        run_ops(&cell, dir.path());
        dump(&*cell)
    };
    let cell = open(dir.path());
    assert_eq!(dump(&*cell), before);
    assert!(before
        .iter()
        .any(|l| l.starts_with("/tmp/m File 644 7:8 cgen=6 lgen=3 delay=2s")));
}

#[test]
fn truncated_log_recovers_a_prefix_of_acknowledged_ops() {
    let dir = tempfile::tempdir().unwrap();
    let seen = {
        let cell = open(dir.path());
        run_ops(&cell, dir.path())
    };
    let full = seen.last().unwrap().0;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut cuts: Vec<u64> = (0..40).map(|_| rng.gen_range(0..=full)).collect();
    // Exactly at record boundaries too.
    cuts.extend(seen.iter().map(|s| s.0));
    for cut in cuts {
        let copy = tempfile::tempdir().unwrap();
        copy_cell(dir.path(), copy.path());
        fs::OpenOptions::new()
            .write(true)
            .open(copy.path().join("wal"))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let expected = &seen.iter().rev().find(|s| s.0 <= cut).unwrap().1;
        let cell = open(copy.path());
        assert_eq!(&dump(&*cell), expected, "cut at {cut} of {full}");
        // The recovered cell keeps working and stays durable.
        cell.create(&root(), "/after", &NodeSpec::file(0o644))
            .unwrap();
        drop(cell);
        let cell = open(copy.path());
        assert!(cell.stat(&root(), "/after".into()).is_ok());
    }
}

#[test]
fn garbage_tail_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let last = {
        let cell = open(dir.path());
        run_ops(&cell, dir.path()).pop().unwrap().1
    };
    let mut wal = fs::read(dir.path().join("wal")).unwrap();
    wal.extend((0..100u8).map(|b| b.wrapping_mul(37)));
    fs::write(dir.path().join("wal"), &wal).unwrap();
    assert_eq!(dump(&*open(dir.path())), last);
}

#[test]
fn snapshots_compact_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let small = CellOptions {
        snapshot_after_bytes: 300,
        ..opts()
    };
    let before = {
        let cell = LocalCell::open(dir.path(), small.clone()).unwrap();
        run_ops(&cell, dir.path());
        let written = cell
            .status()
            .into_iter()
            .find(|l| l.starts_with("snapshots_written"))
            .unwrap();
        assert_ne!(written, "snapshots_written 0");
        dump(&*cell)
    };
    assert!(fs::metadata(dir.path().join("wal")).unwrap().len() < 2000);
    let cell = LocalCell::open(dir.path(), small).unwrap();
    assert_eq!(dump(&*cell), before);
}

#[test]
fn damaged_snapshot_is_corruption_not_silence() {
    let dir = tempfile::tempdir().unwrap();
    {
        let cell = open(dir.path());
        cell.create(&root(), "/a", &NodeSpec::file(0o644)).unwrap();
    }
    let p = dir.path().join("snapshot");
    let mut bytes = fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x55;
    fs::write(&p, &bytes).unwrap();
    assert!(matches!(
        LocalCell::open(dir.path(), opts()),
        Err(crate::Error::Corruption(_))
    ));
}
