//! What one filter may cost: the cells its evaluation may hold for a row,
//! the bytes of values it may copy for a row, and the size of its compiled
//! regexes. Set once per process (mountd's `filter_max_cells=`,
//! `filter_max_bytes=`, `filter_regex_bytes=`); a filter over a limit
//! fails with [`crate::Error::FilterTooLarge`] (E2BIG through the mount).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Bounds on one filter's evaluation and compilation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterLimits {
    /// Cells a row's evaluation may produce beyond its input, summed over
    /// the whole tree: every cell an `interleave` outputs, and every label
    /// added (each costs about one cell).
    pub max_cells: usize,
    /// Bytes of values a row's output may copy (a cell output twice copies
    /// its value once).
    pub max_bytes: u64,
    /// Size of every compiled regex of one filter together (their programs,
    /// and as much again for their lazy DFA caches).
    pub regex_bytes: usize,
}

impl FilterLimits {
    /// 256 Ki cells (about 10 MiB of bookkeeping), 64 MiB of copied values,
    /// 2 MiB of regex programs.
    pub const DEFAULT: FilterLimits = FilterLimits {
        max_cells: 256 * 1024,
        max_bytes: 64 << 20,
        regex_bytes: 2 << 20,
    };
}

impl Default for FilterLimits {
    fn default() -> Self {
        FilterLimits::DEFAULT
    }
}

/// One regex may take at most this much (the regex crate's own default is
/// 10 MiB; a filter's regexes share [`FilterLimits::regex_bytes`]).
pub(crate) const MAX_ONE_REGEX: usize = 1 << 20;

static MAX_CELLS: AtomicUsize = AtomicUsize::new(FilterLimits::DEFAULT.max_cells);
static MAX_BYTES: AtomicU64 = AtomicU64::new(FilterLimits::DEFAULT.max_bytes);
static REGEX_BYTES: AtomicUsize = AtomicUsize::new(FilterLimits::DEFAULT.regex_bytes);
static HITS: AtomicU64 = AtomicU64::new(0);

/// Sets the limits filters compiled from now on get.
pub fn set_limits(l: FilterLimits) {
    MAX_CELLS.store(l.max_cells, Ordering::Relaxed);
    MAX_BYTES.store(l.max_bytes, Ordering::Relaxed);
    REGEX_BYTES.store(l.regex_bytes, Ordering::Relaxed);
}

/// The limits in force.
pub fn limits() -> FilterLimits {
    FilterLimits {
        max_cells: MAX_CELLS.load(Ordering::Relaxed),
        max_bytes: MAX_BYTES.load(Ordering::Relaxed),
        regex_bytes: REGEX_BYTES.load(Ordering::Relaxed),
    }
}

/// How many evaluations were stopped by a limit in this process
/// (`filter_limit_hits` in `.bigtable/status`).
pub fn limit_hits() -> u64 {
    HITS.load(Ordering::Relaxed)
}

pub(crate) fn note_hit() {
    HITS.fetch_add(1, Ordering::Relaxed);
}
