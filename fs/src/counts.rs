//! FUSE requests answered, per operation (`.bigtable/stats` lists the ones
//! seen): what one `cat` or `echo x > cell` costs in round trips; and the
//! tablet-server calls each operation made (`calls_<op>=`), counted on the
//! thread that runs the request while it runs ([`during`]).

use std::cell::Cell;
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
/// Tablet-server calls made while a request of each operation ran.
static CALLS: [AtomicU64; OPS.len()] = [const { AtomicU64::new(0) }; OPS.len()];

thread_local! {
    /// The operation this thread is running a request of, if any.
    static RUNNING: Cell<Option<usize>> = const { Cell::new(None) };
}

fn index(op: &str) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 2)
}

/// Counts one request of `op`.
pub fn count(op: &str) {
    COUNTS[index(op)].fetch_add(1, Ordering::Relaxed);
}

/// Runs `f` (a request of `op`, or the part of it a commit worker runs)
/// with the tablet-server calls it makes counted as `op`'s.
pub fn during<R>(op: &str, f: impl FnOnce() -> R) -> R {
    let before = RUNNING.with(|r| r.replace(Some(index(op))));
    let out = f();
    RUNNING.with(|r| r.set(before));
    out
}

/// A tablet-server call made: counted for the request this thread runs
/// (none: a call outside any request, such as a gRPC call's).
pub fn call_made() {
    if let Some(i) = RUNNING.with(Cell::get) {
        CALLS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// `(operation, count)` for every operation whose count in `counts` is not 0.
fn nonzero(counts: &[AtomicU64; OPS.len()]) -> Vec<(&'static str, u64)> {
    OPS.iter()
        .zip(counts.iter())
        .map(|(o, c)| (*o, c.load(Ordering::Relaxed)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// `(operation, tablet-server calls)` for every operation that made one.
pub fn calls_seen() -> Vec<(&'static str, u64)> {
    nonzero(&CALLS)
}

/// `(operation, requests)` for every operation seen so far.
pub fn seen() -> Vec<(&'static str, u64)> {
    nonzero(&COUNTS)
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

    #[test]
    fn calls_count_for_the_running_request() {
        let of = |op: &str| {
            calls_seen()
                .into_iter()
                .find(|(o, _)| *o == op)
                .map_or(0, |(_, n)| n)
        };
        let before = of("listxattr");
        call_made();
        during("listxattr", || {
            call_made();
            during("removexattr", call_made);
            call_made();
        });
        call_made();
        assert_eq!(of("listxattr"), before + 2);
    }
}
