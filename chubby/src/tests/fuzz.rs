//! Property-based fuzzing of the cell's parsers of on-disk and outside input:
//! the write-ahead log's framing, its records, snapshots, sequencers and
//! paths; and whole cells reopened from damaged files, with checksums fixed up
//! so that the damage reaches the record and snapshot decoders and replay
//! (a damaged frame or snapshot with a bad checksum is refused before that).
//! Each must return an error or a value, never panic, and never allocate far
//! beyond its input.
//!
//! `FUZZ_CASES=n` runs n cases per target (CI default: 256; the whole-cell
//! targets a quarter of that).

use std::sync::Arc;

use proptest::prelude::*;
use testkit::alloc::{largest_alloc, Tracking, ALLOC_LIMIT};
use testkit::fuzz::{config, damage};

use crate::codec::Reader;
use crate::crash_disk::CrashDisk;
use crate::disk::Disk;
use crate::record::Record;
use crate::wal::{frame, scan};
use crate::{CellOptions, Credentials, LocalCell, LockMode, LockService, NodeSpec, Sequencer};

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// A cell with some history: its log (records not yet in a snapshot) and,
/// when `snapshot` is set, a snapshot holding most of it.
fn cell_files(snapshot: bool) -> (Option<Vec<u8>>, Vec<u8>) {
    let disk = CrashDisk::new();
    let opts = CellOptions {
        snapshot_after_bytes: if snapshot { 600 } else { 1 << 30 },
        ..CellOptions::default()
    };
    let cell = LocalCell::open_on(Arc::new(disk.clone()), opts).unwrap();
    let root = Credentials::root();
    cell.create(&root, "/d", &NodeSpec::dir(0o755)).unwrap();
    for i in 0..6 {
        let p = format!("/d/f{i}");
        cell.create(&root, &p, &NodeSpec::file(0o644)).unwrap();
        cell.set_contents(&root, p.as_str().into(), format!("data {i}").as_bytes())
            .unwrap();
        cell.try_lock(&root, 9, p.as_str().into(), LockMode::Exclusive)
            .unwrap();
        cell.unlock(9, p.as_str().into()).unwrap();
    }
    cell.rename(&root, "/d/f0", "/g").unwrap();
    cell.unlink(&root, "/d/f1").unwrap();
    cell.chmod(&root, "/d/f2".into(), 0o600).unwrap();
    drop(cell);
    (
        disk.read("snapshot").unwrap(),
        disk.read("wal").unwrap().unwrap_or_default(),
    )
}

/// Opens a cell from the given files; it may fail, but not panic.
fn open_from(snapshot: Option<&[u8]>, wal: &[u8]) {
    let disk = CrashDisk::new();
    for (name, bytes) in [("snapshot", snapshot), ("wal", Some(wal))] {
        if let Some(b) = bytes {
            disk.append(name, b).unwrap();
            disk.sync(name).unwrap();
        }
    }
    disk.sync_dir().unwrap();
    if let Ok(cell) = LocalCell::open_on(Arc::new(disk), CellOptions::default()) {
        let root = Credentials::root();
        let _ = cell.list(&root, "/");
        let _ = cell.list(&root, "/d");
        let _ = cell.read(&root, "/d/f3".into());
        let _ = cell.create(&root, "/new", &NodeSpec::file(0o644));
    }
}

/// Re-frames a snapshot after its payload was damaged, so the checksum passes.
fn fix_snapshot(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 24 {
        let payload = bytes[24..].to_vec();
        bytes[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes[16..24].copy_from_slice(&seahash::hash(&payload).to_le_bytes());
    }
    bytes
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn wal_framing(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let ((payloads, valid), big) = largest_alloc(|| {
            let (p, v) = scan(&bytes);
            (p.len(), v)
        });
        prop_assert!(valid <= bytes.len());
        prop_assert!(payloads <= bytes.len() / 13 + 1);
        prop_assert!(big < ALLOC_LIMIT, "allocated {big} bytes");
    }

    #[test]
    fn records(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
        let (_, big) = largest_alloc(|| Record::decode(&mut Reader::new(&bytes)));
        prop_assert!(big < ALLOC_LIMIT, "allocated {big} bytes");
    }

    #[test]
    fn snapshots(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut with_magic = b"CHUBSNP1".to_vec();
        with_magic.extend_from_slice(&bytes);
        let with_magic = fix_snapshot(with_magic);
        let (_, big) = largest_alloc(|| {
            let _ = crate::snapshot::decode(&bytes);
            crate::snapshot::decode(&with_magic)
        });
        prop_assert!(big < ALLOC_LIMIT, "allocated {big} bytes");
    }

    #[test]
    fn sequencers_and_paths(s in prop_oneof![
        "[ -~]{0,40}",
        "(/[a-z.:]{0,5}){0,4}:(exclusive|shared|[a-z]{0,4}):[0-9]{0,22}",
    ]) {
        if let Ok(seq) = s.parse::<Sequencer>() {
            let again: Sequencer = seq.to_string().parse().unwrap();
            prop_assert_eq!(again.to_string(), seq.to_string());
        }
        let _ = crate::path::components(&s);
        let _ = crate::path::split_last(&s);
        let _ = crate::path::check_name(&s);
    }
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn cell_with_damaged_log_records(
        hits in prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
    ) {
        let (snapshot, wal) = cell_files(false);
        let mut payloads: Vec<Vec<u8>> = scan(&wal).0.into_iter().map(<[u8]>::to_vec).collect();
        prop_assume!(!payloads.is_empty());
        for (which, how, at, b) in hits {
            let n = payloads.len();
            damage(&mut payloads[which % n], how, at, b);
        }
        // Valid frames around damaged payloads: the damage reaches the decoder.
        let wal: Vec<u8> = payloads.iter().filter(|p| !p.is_empty()).flat_map(|p| frame(p)).collect();
        let ((), big) = largest_alloc(|| open_from(snapshot.as_deref(), &wal));
        prop_assert!(big < ALLOC_LIMIT, "allocated {big} bytes");
    }

    #[test]
    fn cell_with_damaged_snapshot(
        hits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
        fix in any::<bool>(),
    ) {
        let (snapshot, wal) = cell_files(true);
        let mut snap = snapshot.unwrap();
        for (how, at, b) in hits {
            damage(&mut snap, how, at, b);
        }
        if fix {
            snap = fix_snapshot(snap);
        }
        let ((), big) = largest_alloc(|| open_from(Some(&snap), &wal));
        prop_assert!(big < ALLOC_LIMIT, "allocated {big} bytes");
    }

    #[test]
    fn cell_with_damaged_log_bytes(
        hits in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
    ) {
        let (snapshot, mut wal) = cell_files(false);
        for (how, at, b) in hits {
            damage(&mut wal, how, at, b);
        }
        open_from(snapshot.as_deref(), &wal);
    }
}

#[test]
fn undamaged_files_reopen_whole() {
    for snap in [false, true] {
        let (snapshot, wal) = cell_files(snap);
        let disk = CrashDisk::new();
        if let Some(s) = &snapshot {
            disk.append("snapshot", s).unwrap();
        }
        disk.append("wal", &wal).unwrap();
        let cell = LocalCell::open_on(Arc::new(disk), CellOptions::default()).unwrap();
        let names: Vec<String> = cell
            .list(&Credentials::root(), "/d")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["f2", "f3", "f4", "f5"]);
    }
}

#[test]
fn a_huge_length_is_refused_without_allocating_it() {
    // A log frame claiming 4 GiB, and a record whose name claims 4 GiB.
    let mut log = vec![0xF0, 0xFF, 0xFF, 0xFF];
    log.extend_from_slice(&[0; 64]);
    let ((p, v), big) = largest_alloc(|| scan(&log));
    assert!(p.is_empty() && v == 0);
    assert!(big < 4096, "allocated {big} bytes");
    let mut rec = vec![1u8];
    rec.extend_from_slice(&[0; 16]);
    rec.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    let (r, big) = largest_alloc(|| Record::decode(&mut Reader::new(&rec)));
    assert!(r.is_err());
    assert!(big < 4096, "allocated {big} bytes");
}
