//! FUSE requests answered, per operation (`.bigtable/stats` lists the ones
//! seen): what one `cat` or `echo x > cell` costs in round trips; and the
//! tablet-server calls each operation made (`calls_<op>=`), counted on the
//! thread that runs the request while it runs ([`during`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// Nanoseconds the daemon spent running requests ([`during`]), on the
/// FUSE threads and the commit workers.
static HANDLING_NS: AtomicU64 = AtomicU64::new(0);

/// Runs `f` (a request of `op`, or the part of it a commit worker runs)
/// with the tablet-server calls it makes counted as `op`'s, and its time
/// as the daemon's handling time; how long it ran.
pub fn during<R>(op: &str, f: impl FnOnce() -> R) -> (R, Duration) {
    let before = RUNNING.with(|r| r.replace(Some(index(op))));
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    // A commit run inline within its request's run counts once.
    if before.is_none() {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        HANDLING_NS.fetch_add(ns, Ordering::Relaxed);
    }
    RUNNING.with(|r| r.set(before));
    (out, took)
}

/// Microseconds spent running requests so far (`fuse_handling_us`): with
/// one caller, the part of its wait that is the daemon's own code.
pub fn handling_us() -> u64 {
    HANDLING_NS.load(Ordering::Relaxed) / 1000
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

    #[test]
    fn handling_time_adds_up() {
        let nap = || std::thread::sleep(std::time::Duration::from_millis(3));
        let before = handling_us();
        during("statfs", nap);
        assert!(handling_us() >= before + 3000);
        // Nested (a commit run within its request), the time counts once:
        // other tests' requests may add a little meanwhile.
        let before = handling_us();
        let took = std::thread::spawn(move || {
            let t = Instant::now();
            let (_, took) = during("flush", || during("flush", nap));
            assert!(took >= Duration::from_millis(3));
            t.elapsed().as_micros() as u64
        })
        .join()
        .unwrap_or_default();
        let added = handling_us() - before;
        assert!(added >= 3000 && added < took * 3 / 2, "{added} of {took}");
    }
}
