//! What the store has asked of the object store: requests by kind, errors,
//! bytes and latency percentiles, for `.bigtable/status` (what a user pays
//! the store for, and how fast it answers).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Kinds of request, in the order the status line shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Put,
    Get,
    Head,
    List,
    Delete,
}

const KINDS: [(Kind, &str); 5] = [
    (Kind::Put, "put"),
    (Kind::Get, "get"),
    (Kind::Head, "head"),
    (Kind::List, "list"),
    (Kind::Delete, "delete"),
];

/// The name a kind of request has in the status line and the metrics.
fn kind_name(kind: Kind) -> &'static str {
    KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("other", |(_, n)| n)
}

/// Latency buckets: bucket `i` counts requests under 2^i µs.
const BUCKETS: usize = 32;

#[derive(Default)]
struct PerKind {
    requests: AtomicU64,
    errors: AtomicU64,
    bytes: AtomicU64,
}

/// Counters shared by every request of one store.
pub(crate) struct Stats {
    kinds: [PerKind; 5],
    latency: [AtomicU64; BUCKETS],
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) cache_corrupt: AtomicU64,
}

impl Stats {
    pub(crate) fn new() -> Stats {
        Stats {
            kinds: Default::default(),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            cache_corrupt: AtomicU64::new(0),
        }
    }

    fn slot(&self, kind: Kind) -> &PerKind {
        let i = KINDS.iter().position(|(k, _)| *k == kind).unwrap_or(0);
        &self.kinds[i]
    }

    /// Counts one request of `kind` that moved `bytes` and took `took`.
    pub(crate) fn record(&self, kind: Kind, ok: bool, bytes: u64, took: Duration) {
        let s = self.slot(kind);
        telemetry::observe(telemetry::Latency::ObjectStore, kind_name(kind), took);
        s.requests.fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        if !ok {
            s.errors.fetch_add(1, Ordering::Relaxed);
        }
        let us = took.as_micros().max(1) as u64;
        let b = (64 - us.leading_zeros() as usize).min(BUCKETS - 1);
        self.latency[b].fetch_add(1, Ordering::Relaxed);
    }

    /// Requests of `kind` so far.
    #[cfg(test)]
    pub(crate) fn requests(&self, kind: Kind) -> u64 {
        self.slot(kind).requests.load(Ordering::Relaxed)
    }

    /// The latency under which `q` (0..1) of all requests finished, in µs
    /// (the upper bound of its power-of-two bucket).
    fn percentile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = ((total as f64) * q).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return 1u64 << i;
            }
        }
        1u64 << (BUCKETS - 1)
    }

    /// One status line: `s3_requests put=.. get=.. ...`, then errors, bytes,
    /// latency percentiles.
    pub(crate) fn lines(&self, location: &str, cache: Option<(u64, u64)>) -> Vec<String> {
        let mut req = format!("s3 {location} requests");
        let mut err = String::from("s3_errors");
        let mut bytes = String::from("s3_bytes");
        for (k, name) in KINDS {
            let s = self.slot(k);
            let _ = write!(req, " {name}={}", s.requests.load(Ordering::Relaxed));
            let _ = write!(err, " {name}={}", s.errors.load(Ordering::Relaxed));
            let _ = write!(bytes, " {name}={}", s.bytes.load(Ordering::Relaxed));
        }
        let lat = format!(
            "s3_latency_us p50={} p99={} p999={}",
            self.percentile(0.5),
            self.percentile(0.99),
            self.percentile(0.999)
        );
        let mut out = vec![req, err, bytes, lat];
        if let Some((size, limit)) = cache {
            let (h, m) = (
                self.cache_hits.load(Ordering::Relaxed),
                self.cache_misses.load(Ordering::Relaxed),
            );
            let rate = if h + m == 0 {
                0.0
            } else {
                h as f64 / (h + m) as f64
            };
            out.push(format!(
                "s3_disk_cache bytes={size} limit={limit} hits={h} misses={m} hit_rate={rate:.3} corrupt={}",
                self.cache_corrupt.load(Ordering::Relaxed)
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percentiles() {
        let s = Stats::new();
        for _ in 0..99 {
            s.record(Kind::Get, true, 10, Duration::from_micros(100));
        }
        s.record(Kind::Put, false, 5, Duration::from_millis(50));
        assert_eq!(s.requests(Kind::Get), 99);
        assert_eq!(s.percentile(0.5), 128);
        assert!(s.percentile(0.999) >= 50_000);
        let lines = s.lines("s3://b", Some((1, 2)));
        assert!(lines[0].contains("put=1 get=99"), "{lines:?}");
        assert!(lines[1].contains("put=1 get=0"), "{lines:?}");
        assert!(lines[4].contains("hit_rate=0.000"), "{lines:?}");
    }
}
