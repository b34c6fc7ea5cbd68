//! What a served tablet's load is made of, for the master's load balancing
//! and load splits: the bytes its requests moved, and a sample of the rows
//! they touched, from which the row that halves its load is picked.
//!
//! One request in [`EVERY`] records its row in a ring of the last
//! [`RING`] sampled rows, so the sample follows the recent load (at a
//! hundred requests a second it spans a few seconds) and costs one
//! random draw per request, a short lock and a copy into a reused buffer
//! per sampled one. (CockroachDB's load-based splitter samples keys the
//! same way.) The draw is a per-thread xorshift step ([`crate::xorshift`]):
//! `thread_rng`'s ChaCha cost 2% of a cached point read. A sample whose
//! ring another thread holds is dropped rather than waited for: under that
//! much load the next one comes at once.

use crate::counter::Counter;
use parking_lot::Mutex;

/// One request in this many is sampled.
const EVERY: u32 = 8;
/// Sampled rows kept.
const RING: usize = 32;
/// A sampled row is kept up to this many bytes (a prefix of a row is as
/// good a split point): two cache lines.
const KEY_BYTES: usize = 128;
/// Fewer sampled rows than this give no split row.
const MIN_SAMPLES: usize = 16;

/// A tablet's recent load: bytes moved and sampled rows.
#[derive(Default)]
pub struct LoadSample {
    /// Bytes written and read by its requests since it was loaded.
    pub bytes: Counter,
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    rows: Vec<Vec<u8>>,
    next: usize,
}

/// Whether this request is sampled: one in [`EVERY`].
fn drawn() -> bool {
    crate::xorshift::with(|rng| (rng.next_u64() >> 32) % u64::from(EVERY) == 0)
}

impl LoadSample {
    /// Notes a request touching `row` (sampled).
    pub fn touch(&self, row: &[u8]) {
        if !drawn() {
            return;
        }
        let row = &row[..row.len().min(KEY_BYTES)];
        let Some(mut r) = self.ring.try_lock() else {
            return;
        };
        if r.rows.len() < RING {
            // Room for the longest sample: the slot is never reallocated,
            // and, a whole number of cache lines, it shares none with data
            // other cores read (see `crate::own_lines`).
            let mut slot = Vec::with_capacity(KEY_BYTES);
            slot.extend_from_slice(row);
            r.rows.push(slot);
            return;
        }
        let i = r.next;
        r.next = (i + 1) % RING;
        let slot = &mut r.rows[i];
        slot.clear();
        slot.extend_from_slice(row);
    }

    /// The row that best halves the sampled load of the tablet
    /// `[start, end)` (see [`halving_row`]).
    pub fn split_row(&self, start: &[u8], end: Option<&[u8]>) -> Option<Vec<u8>> {
        let rows = self.ring.lock().rows.clone();
        halving_row(rows, start, end)
    }
}

/// The row strictly inside `[start, end)` with as many sampled requests
/// below it as at or above it, or None if there are too few samples or no
/// row leaves at least a quarter of them on each side (one hot row cannot
/// be split apart: a split at it would move no load).
pub fn halving_row(mut rows: Vec<Vec<u8>>, start: &[u8], end: Option<&[u8]>) -> Option<Vec<u8>> {
    rows.retain(|r| r.as_slice() > start && end.is_none_or(|e| r.as_slice() < e));
    if rows.len() < MIN_SAMPLES {
        return None;
    }
    rows.sort_unstable();
    let n = rows.len();
    // A candidate is the first of a run of equal rows: `i` rows lie below it.
    let best = (1..n)
        .filter(|&i| rows[i] != rows[i - 1])
        .min_by_key(|&i| (2 * i).abs_diff(n))?;
    (best.min(n - best) * 4 >= n).then(|| rows.swap_remove(best))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(keys: &[&str]) -> Vec<Vec<u8>> {
        keys.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_median_row_splits_an_even_load() {
        let mut keys: Vec<String> = (0..20).map(|i| format!("r{i:02}")).collect();
        keys.reverse();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        assert_eq!(halving_row(rows(&refs), b"", None), Some(b"r10".to_vec()));
    }

    #[test]
    fn a_skewed_load_splits_at_its_own_median_not_the_key_range() {
        // Three quarters of the requests on rows a.., the rest spread.
        let mut keys = vec!["a1"; 6];
        keys.extend(["a2"; 6]);
        keys.extend(["m", "n", "o", "p", "q", "x"]);
        let r = halving_row(rows(&keys), b"", None).unwrap();
        assert_eq!(r, b"a2".to_vec());
    }

    #[test]
    fn one_hot_row_or_too_few_samples_give_no_split() {
        assert_eq!(halving_row(rows(&["k"; 30]), b"", None), None);
        assert_eq!(halving_row(rows(&["a", "b", "c"]), b"", None), None);
        // 28 on one row, 2 elsewhere: no row leaves a quarter on each side.
        let mut keys = vec!["k"; 28];
        keys.extend(["a", "z"]);
        assert_eq!(halving_row(rows(&keys), b"", None), None);
    }

    #[test]
    fn the_row_lies_strictly_inside_the_tablet() {
        let keys: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let r = halving_row(rows(&refs), b"r05", Some(b"r25")).unwrap();
        assert!(r.as_slice() > b"r05".as_slice() && r.as_slice() < b"r25".as_slice());
        assert_eq!(r, b"r15".to_vec());
    }

    #[test]
    fn the_ring_keeps_the_recent_rows() {
        let s = LoadSample::default();
        for i in 0..20_000u32 {
            s.touch(format!("old{}", i % 50).as_bytes());
        }
        for i in 0..20_000u32 {
            s.touch(format!("new{}", i % 50).as_bytes());
        }
        let ring = s.ring.lock();
        assert_eq!(ring.rows.len(), RING);
        assert!(ring.rows.iter().all(|r| r.starts_with(b"new")));
    }

    #[test]
    fn about_one_request_in_every_is_drawn() {
        let n = 80_000;
        let drawn = (0..n).filter(|_| drawn()).count();
        let expected = n / EVERY as usize;
        assert!(
            drawn > expected * 9 / 10 && drawn < expected * 11 / 10,
            "{drawn} of {n} drawn, expected about {expected}"
        );
    }
}
