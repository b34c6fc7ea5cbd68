//! Self-checking records shared by the crash tests: each names its sequence
//! number and length and ends in a hash of itself, so a reader can tell a
//! whole record from a torn or misplaced one.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use gfs::ClusterOptions;
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAGIC: u32 = 0x5245_4344;

/// `[magic][seq][payload len][payload][seahash of all before]`.
pub fn record(seq: u64, len: usize) -> Vec<u8> {
    let mut r = Vec::with_capacity(len + 24);
    r.extend_from_slice(&MAGIC.to_le_bytes());
    r.extend_from_slice(&seq.to_le_bytes());
    r.extend_from_slice(&(len as u32).to_le_bytes());
    r.extend((0..len).map(|i| (seq as usize * 31 + i) as u8));
    let h = seahash::hash(&r);
    r.extend_from_slice(&h.to_le_bytes());
    r
}

/// Parses a whole file into records; panics on anything that is not one.
pub fn parse(name: &str, data: &[u8]) -> Vec<(u64, u64, usize)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let rest = &data[pos..];
        assert!(rest.len() >= 16, "{name}: torn record at {pos}");
        assert_eq!(rest[..4], MAGIC.to_le_bytes(), "{name}: garbage at {pos}");
        let seq = u64::from_le_bytes(rest[4..12].try_into().unwrap());
        let len = u32::from_le_bytes(rest[12..16].try_into().unwrap()) as usize;
        let total = 16 + len + 8;
        assert!(rest.len() >= total, "{name}: torn record {seq} at {pos}");
        assert_eq!(
            rest[..total],
            record(seq, len)[..],
            "{name}: bad record {seq} at {pos}"
        );
        out.push((seq, pos as u64, total));
        pos += total;
    }
    out
}

/// A small cluster under `dir`: `servers` chunkservers, three replicas,
/// 128 KiB chunks (so tests cross chunk boundaries) and frequent checkpoints.
pub fn options(dir: &Path, servers: usize) -> ClusterOptions {
    let mut o = ClusterOptions::new(
        dir.join("master"),
        (0..servers)
            .map(|i| dir.join(format!("cs{i}")))
            .collect::<Vec<PathBuf>>(),
    );
    o.replication = 3;
    o.chunk_size = 128 << 10;
    o.heartbeat = Duration::from_millis(10);
    o.min_free_bytes = 0;
    o.checkpoint_bytes = 8 << 10;
    o
}
