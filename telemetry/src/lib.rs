//! Latency histograms, one family per kind of work, labelled by operation.
//! Every layer (FUSE, commits, gRPC, compactions, the chunk layer, the
//! object store) records here; the console (`-o http=`) serves them at
//! `/metrics`. A crate of its own, below every other, so that `gfs` and
//! `objstore` can record without depending on the engine.

pub use prometheus;

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts};
use std::cell::RefCell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What a latency is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    /// A FUSE request, by operation (`lookup`, `read`, ...).
    Fuse,
    /// A commit: `wait` (for the group commit to take the write) and
    /// `log_write` (the commit log's append and sync).
    Commit,
    /// A gRPC call, by method.
    Grpc,
    /// A compaction, by kind (`minor`, `merging`, `major`).
    Compaction,
    /// A request to the chunk layer, by operation.
    Chunk,
    /// A request to the object store, by operation.
    ObjectStore,
}

impl Latency {
    pub const ALL: [Latency; 6] = [
        Latency::Fuse,
        Latency::Commit,
        Latency::Grpc,
        Latency::Compaction,
        Latency::Chunk,
        Latency::ObjectStore,
    ];

    /// The metric's name (Prometheus conventions: unit last).
    pub fn name(self) -> &'static str {
        match self {
            Latency::Fuse => "bigtable_fuse_request_duration_seconds",
            Latency::Commit => "bigtable_commit_duration_seconds",
            Latency::Grpc => "bigtable_grpc_request_duration_seconds",
            Latency::Compaction => "bigtable_compaction_duration_seconds",
            Latency::Chunk => "bigtable_chunk_request_duration_seconds",
            Latency::ObjectStore => "bigtable_object_store_request_duration_seconds",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Latency::Fuse => "FUSE requests by operation",
            Latency::Commit => "Commits: group-commit wait and commit-log write",
            Latency::Grpc => "Cloud Bigtable gRPC calls by method",
            Latency::Compaction => "Compactions by kind (minor, merging, major)",
            Latency::Chunk => "Chunk-layer requests by operation",
            Latency::ObjectStore => "Object-store requests by operation",
        }
    }

    fn known_operations(self) -> &'static [&'static str] {
        match self {
            Latency::Commit => &["wait", "log_write"],
            Latency::Compaction => &["minor", "merging", "major"],
            _ => &[],
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

fn families() -> &'static [HistogramVec] {
    static F: OnceLock<Vec<HistogramVec>> = OnceLock::new();
    F.get_or_init(|| {
        // 10 µs to about 10 s, by fours.
        let buckets = prometheus::exponential_buckets(1e-5, 4.0, 11).unwrap_or_default();
        Latency::ALL
            .iter()
            .filter_map(|k| {
                let opts = HistogramOpts::new(k.name(), k.help()).buckets(buckets.clone());
                let h = HistogramVec::new(opts, &["operation"]).ok()?;
                // Operations known ahead are listed from the start (at zero).
                for op in k.known_operations() {
                    let _ = h.get_metric_with_label_values(&[op]);
                }
                Some(h)
            })
            .collect()
    })
}

/// How many (kind, operation) histograms each thread keeps at hand; past
/// that, an operation's histogram is looked up by its label every time.
const HANDLES_PER_THREAD: usize = 64;

thread_local! {
    /// The histograms this thread recorded into, by kind and operation: a
    /// FUSE thread records every request, and finding a histogram by its
    /// label (hash the label, take the family's lock, look it up) cost
    /// more than the observation itself.
    static HANDLES: RefCell<Vec<(Latency, Box<str>, Histogram)>> = const { RefCell::new(Vec::new()) };
}

/// Records that one `operation` of `kind` took `d`.
pub fn observe(kind: Latency, operation: &str, d: Duration) {
    let secs = d.as_secs_f64();
    // `try_with`: a timer dropped while the thread's locals go records too.
    let kept = HANDLES
        .try_with(|h| {
            let h = h.borrow();
            let found = h.iter().find(|(k, op, _)| *k == kind && **op == *operation);
            found.map(|(_, _, hist)| hist.observe(secs)).is_some()
        })
        .unwrap_or(false);
    if kept {
        return;
    }
    let Some(Ok(hist)) = families()
        .get(kind.index())
        .map(|f| f.get_metric_with_label_values(&[operation]))
    else {
        return;
    };
    hist.observe(secs);
    let _ = HANDLES.try_with(|h| {
        let mut h = h.borrow_mut();
        if h.len() < HANDLES_PER_THREAD {
            h.push((kind, operation.into(), hist));
        }
    });
}

/// Runs `f`, recording how long it took.
pub fn time<T>(kind: Latency, operation: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let r = f();
    observe(kind, operation, start.elapsed());
    r
}

/// Records on drop how long since it was made (for code with many exits).
pub struct Timer {
    kind: Latency,
    operation: &'static str,
    start: Instant,
}

/// A timer of one `operation` of `kind`.
pub fn timer(kind: Latency, operation: &'static str) -> Timer {
    Timer {
        kind,
        operation,
        start: Instant::now(),
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        observe(self.kind, self.operation, self.start.elapsed());
    }
}

/// Calls the network ports refused, by port and reason.
fn refusals() -> Option<&'static IntCounterVec> {
    static R: OnceLock<Option<IntCounterVec>> = OnceLock::new();
    R.get_or_init(|| {
        let opts = Opts::new(
            "bigtable_refused_calls_total",
            "Calls and connections refused by the gRPC servers and the console, by port and reason",
        );
        let c = IntCounterVec::new(opts, &["port", "reason"]).ok()?;
        // Listed from the start (at zero).
        for (port, reason) in REFUSALS {
            let _ = c.get_metric_with_label_values(&[port, reason]);
        }
        Some(c)
    })
    .as_ref()
}

/// The (port, reason) pairs counted: on the public API and the console,
/// no credentials or an unknown token, a permission the caller lacks, a
/// foreign `Host:`; on the internal RPC, a call without a valid token or
/// a replayed one; on both gRPC servers (`rpc`), a request over its size
/// or the byte budget, a body or connection too slow, a connection over
/// the limit; a failed TLS handshake on any port.
const REFUSALS: [(&str, &str); 11] = [
    ("grpc", "unauthenticated"),
    ("grpc", "permission"),
    ("console", "unauthenticated"),
    ("console", "host"),
    ("cluster", "unauthenticated"),
    ("cluster", "replayed"),
    ("rpc", "too_large"),
    ("rpc", "over_budget"),
    ("rpc", "too_slow"),
    ("rpc", "connections"),
    ("tls", "handshake"),
];

/// Counts a call `port` refused for `reason` (see `REFUSALS`).
pub fn refused(port: &str, reason: &str) {
    if let Some(c) = refusals() {
        if let Ok(m) = c.get_metric_with_label_values(&[port, reason]) {
            m.inc();
        }
    }
}

/// Every histogram family and the refusal counters, for the exposition
/// format (families with no observation yet are listed empty, so that
/// every metric is always there).
pub fn gather() -> Vec<MetricFamily> {
    let mut out: Vec<MetricFamily> = families().iter().flat_map(|f| f.collect()).collect();
    if let Some(r) = refusals() {
        out.extend(r.collect());
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_observation_lands_in_its_family_and_label() {
        observe(Latency::Chunk, "test_read", Duration::from_millis(3));
        time(Latency::Chunk, "test_read", || ());
        let fams = gather();
        assert_eq!(fams.len(), Latency::ALL.len() + 1);
        let chunk = fams
            .iter()
            .find(|f| f.name() == Latency::Chunk.name())
            .unwrap();
        let m = chunk
            .get_metric()
            .iter()
            .find(|m| m.get_label().iter().any(|l| l.value() == "test_read"))
            .unwrap();
        assert_eq!(m.get_histogram().get_sample_count(), 2);
        assert!(m.get_histogram().get_sample_sum() >= 0.003);
    }

    #[test]
    fn a_thread_keeps_its_handles_apart_by_kind_and_operation() {
        let count = |kind: Latency, op: &str| {
            gather()
                .iter()
                .find(|f| f.name() == kind.name())
                .and_then(|f| {
                    f.get_metric()
                        .iter()
                        .find(|m| m.get_label().iter().any(|l| l.value() == op))
                        .map(|m| m.get_histogram().get_sample_count())
                })
                .unwrap_or(0)
        };
        std::thread::spawn(|| {
            for _ in 0..3 {
                observe(Latency::Grpc, "handles_a", Duration::from_micros(5));
                observe(Latency::ObjectStore, "handles_a", Duration::from_micros(5));
            }
            observe(Latency::Grpc, "handles_b", Duration::from_micros(5));
            // Past the handles a thread keeps, observations still land.
            for i in 0..HANDLES_PER_THREAD + 2 {
                observe(Latency::Chunk, &format!("handles_many_{i}"), Duration::ZERO);
            }
        })
        .join()
        .unwrap();
        assert_eq!(count(Latency::Grpc, "handles_a"), 3);
        assert_eq!(count(Latency::ObjectStore, "handles_a"), 3);
        assert_eq!(count(Latency::Grpc, "handles_b"), 1);
        let last = format!("handles_many_{}", HANDLES_PER_THREAD + 1);
        assert_eq!(count(Latency::Chunk, &last), 1);
    }
}
