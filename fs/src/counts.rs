//! FUSE requests answered, per operation (`.bigtable/stats` lists the ones
//! seen): what one `cat` or `echo x > cell` costs in round trips.

use std::sync::atomic::{AtomicU64, Ordering};

/// The operations counted, by the name `guard` is given.
const OPS: [&str; 32] = [
    "lookup",
    "getattr",
    "setattr",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "open",
    "create",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "copy_file_range",
    "statfs",
    "setxattr",
    "getxattr",
    "listxattr",
    "removexattr",
    "getlk",
    "setlk",
    "poll",
    "access",
    "forget",
    "other",
    "interrupt",
];

static COUNTS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];

/// Counts one request of `op`.
pub fn count(op: &str) {
    let i = OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 2);
    COUNTS[i].fetch_add(1, Ordering::Relaxed);
}

/// `(operation, requests)` for every operation seen so far.
pub fn seen() -> Vec<(&'static str, u64)> {
    OPS.iter()
        .zip(COUNTS.iter())
        .map(|(o, c)| (*o, c.load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_name() {
        count("getxattr");
        count("no such op");
        let s = seen();
        assert!(s.iter().any(|(o, n)| *o == "getxattr" && *n >= 1));
        assert!(s.iter().any(|(o, n)| *o == "other" && *n >= 1));
    }
}
