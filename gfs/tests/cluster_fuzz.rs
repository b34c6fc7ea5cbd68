//! Fuzzing of the chunk master's on-disk state through the public API: a
//! cluster writes files (operation log records and checkpoints), then one of
//! the master's files or a replica is damaged (byte flips, a length field
//! overwritten with a huge value, a cut, inserted bytes) and the cluster is
//! reopened. Opening may fail with an error; it must not panic, and a cluster
//! that opens must answer reads with data or errors.
//!
//! The op-log and checkpoint decoders are private to the cluster module and
//! checksummed, so most damage to whole files stops at a checksum; the second
//! target therefore damages the payload of one op-log record or checkpoint and
//! puts a valid checksum back (the formats are in the headers of
//! `cluster/oplog.rs` and `cluster/checkpoint.rs`), so the damage reaches the
//! decoders and the replay.
//!
//! `FUZZ_CASES=n` runs n cases (CI default: 24; each opens a cluster).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gfs::{Cluster, ClusterOptions, FileStore};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn options(dir: &Path) -> ClusterOptions {
    let mut o = ClusterOptions::new(
        dir.join("master"),
        (0..3)
            .map(|i| dir.join(format!("cs{i}")))
            .collect::<Vec<PathBuf>>(),
    );
    o.replication = 2;
    o.chunk_size = 128 << 10;
    o.heartbeat = Duration::from_millis(50);
    o.min_free_bytes = 0;
    o.checkpoint_bytes = 2 << 10;
    o
}

/// Each case starts a cluster: `FUZZ_CASES / 16` cases.
fn config(default: u32) -> ProptestConfig {
    testkit::fuzz::config_scaled(default, 16)
}

fn all_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            all_files(&p, out);
        } else if !p.ends_with("LOCK") {
            out.push(p);
        }
    }
}

fn populate(dir: &Path) {
    let c = Cluster::open(options(dir)).unwrap();
    for i in 0..12 {
        let mut w = c.create(&format!("d/f{i}")).unwrap();
        w.append(&vec![i as u8; 3000 + i * 500]).unwrap();
        w.sync().unwrap();
        if i % 4 == 3 {
            c.rename(&format!("d/f{i}"), &format!("e/g{i}")).unwrap();
        }
        if i == 6 {
            c.checkpoint().unwrap();
        }
    }
    c.delete("d/f1").unwrap();
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn cluster_reopens_or_fails_cleanly_after_damage(
        master_only in any::<bool>(),
        pick in any::<usize>(),
        how in 0u8..4,
        at in any::<usize>(),
        b in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        let mut files = Vec::new();
        all_files(&dir.path().join(if master_only { "master" } else { "" }), &mut files);
        files.sort();
        prop_assume!(!files.is_empty());
        let path = &files[pick % files.len()];
        let mut bytes = std::fs::read(path).unwrap();
        if !bytes.is_empty() {
            testkit::fuzz::damage(&mut bytes, how, at, b);
            std::fs::write(path, &bytes).unwrap();
        }
        if let Ok(c) = Cluster::open(options(dir.path())) {
            for name in c.list("").unwrap_or_default() {
                if let Ok(f) = c.open(&name) {
                    if let Ok(len) = f.len() {
                        let _ = f.read_at(0, len.min(1 << 20) as usize);
                    }
                }
            }
        }
    }
}

/// `[u32 len][u64 seahash(payload)][payload]` records of an op log.
fn oplog_records(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while bytes.len() - pos >= 12 {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        if bytes.len() - pos - 12 < len {
            break;
        }
        out.push(bytes[pos + 12..pos + 12 + len].to_vec());
        pos += 12 + len;
    }
    out
}

fn oplog_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&seahash::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn master_decoders_see_damage_behind_valid_checksums(
        pick in any::<usize>(),
        which in any::<usize>(),
        how in 0u8..4,
        at in any::<usize>(),
        b in 1u8..=255,
    ) {
        let dir = tempfile::tempdir().unwrap();
        populate(dir.path());
        let master = dir.path().join("master");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&master)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.file_name().unwrap().to_string_lossy();
                (n.starts_with("oplog-") || n.starts_with("checkpoint-")) && !n.ends_with(".tmp")
            })
            .collect();
        files.sort();
        prop_assume!(!files.is_empty());
        let path = &files[pick % files.len()];
        let bytes = std::fs::read(path).unwrap();
        let hit = |v: &mut Vec<u8>| testkit::fuzz::damage(v, how, at, b);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let out = if name.starts_with("oplog-") {
            let mut recs = oplog_records(&bytes);
            prop_assume!(!recs.is_empty());
            let i = which % recs.len();
            hit(&mut recs[i]);
            recs.iter().flat_map(|r| oplog_frame(r)).collect::<Vec<u8>>()
        } else {
            prop_assume!(bytes.len() > 16);
            let mut body = bytes[8..bytes.len() - 8].to_vec();
            hit(&mut body);
            let mut out = bytes[..8].to_vec();
            out.extend_from_slice(&body);
            let h = seahash::hash(&out);
            out.extend_from_slice(&h.to_le_bytes());
            out
        };
        std::fs::write(path, &out).unwrap();
        if let Ok(c) = Cluster::open(options(dir.path())) {
            for name in c.list("").unwrap_or_default() {
                if let Ok(f) = c.open(&name) {
                    if let Ok(len) = f.len() {
                        let _ = f.read_at(0, len.min(1 << 20) as usize);
                    }
                }
            }
        }
    }
}

#[test]
fn the_master_has_an_oplog_and_a_checkpoint_to_damage() {
    let dir = tempfile::tempdir().unwrap();
    populate(dir.path());
    let names: Vec<String> = std::fs::read_dir(dir.path().join("master"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().any(|n| n.starts_with("checkpoint-")),
        "{names:?}"
    );
    let logs: Vec<&String> = names.iter().filter(|n| n.starts_with("oplog-")).collect();
    assert!(!logs.is_empty(), "{names:?}");
    let recs: usize = logs
        .iter()
        .map(|n| oplog_records(&std::fs::read(dir.path().join("master").join(n)).unwrap()).len())
        .sum();
    assert!(recs > 0, "no op-log records in {logs:?}");
}
