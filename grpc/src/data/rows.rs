//! Which rows a request names: its `RowSet` as sorted, disjoint engine ranges.

use crate::v2;
use engine::RowRange;
use std::cmp::Ordering;
use std::ops::Bound;
use tonic::Status;

/// Start bounds in key order: unbounded first; at one key, included first.
fn cmp_start(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x), Bound::Excluded(y)) if x == y => Ordering::Less,
        (Bound::Excluded(x), Bound::Included(y)) if x == y => Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            x.cmp(y)
        }
    }
}

/// End bounds in key order: unbounded last; at one key, excluded first.
fn cmp_end(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Greater,
        (_, Bound::Unbounded) => Ordering::Less,
        (Bound::Excluded(x), Bound::Included(y)) if x == y => Ordering::Less,
        (Bound::Included(x), Bound::Excluded(y)) if x == y => Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            x.cmp(y)
        }
    }
}

/// Whether a range starting at `start` overlaps or touches one ending at `end`.
fn joins(end: &Bound<Vec<u8>>, start: &Bound<Vec<u8>>) -> bool {
    match (end, start) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        // (.., k) and (k, ..) both leave out k.
        (Bound::Excluded(e), Bound::Excluded(s)) => s < e,
        (Bound::Included(e) | Bound::Excluded(e), Bound::Included(s) | Bound::Excluded(s)) => {
            s <= e
        }
    }
}

fn empty(r: &RowRange) -> bool {
    match (&r.start, &r.end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
            s >= e
        }
        _ => false,
    }
}

fn range(r: &v2::RowRange) -> Result<RowRange, Status> {
    use v2::row_range::{EndKey, StartKey};
    // An empty key means "no bound" on either side.
    let start = match &r.start_key {
        Some(StartKey::StartKeyClosed(k)) if !k.is_empty() => Bound::Included(k.clone()),
        Some(StartKey::StartKeyOpen(k)) if !k.is_empty() => Bound::Excluded(k.clone()),
        _ => Bound::Unbounded,
    };
    let end = match &r.end_key {
        Some(EndKey::EndKeyOpen(k)) if !k.is_empty() => Bound::Excluded(k.clone()),
        Some(EndKey::EndKeyClosed(k)) if !k.is_empty() => Bound::Included(k.clone()),
        _ => Bound::Unbounded,
    };
    let out = RowRange { start, end };
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (&out.start, &out.end)
    {
        if s > e {
            return Err(Status::invalid_argument(
                "a row range ends before it starts",
            ));
        }
    }
    Ok(out)
}

/// Longest row key Cloud Bigtable takes.
pub const MAX_ROW_KEY: usize = 4096;

/// A row key as Cloud Bigtable takes it: 1 to 4,096 bytes (the messages are
/// the service's, which clients match on).
pub fn check_row_key(key: &[u8]) -> Result<(), Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument("Row keys must be non-empty"));
    }
    if key.len() > MAX_ROW_KEY {
        return Err(Status::invalid_argument(format!(
            "Row keys must be at most {MAX_ROW_KEY} bytes, got {}",
            key.len()
        )));
    }
    Ok(())
}

/// The rows of a request in key order, as disjoint ranges (no set: every row).
pub fn ranges(set: Option<&v2::RowSet>) -> Result<Vec<RowRange>, Status> {
    let Some(set) = set.filter(|s| !s.row_keys.is_empty() || !s.row_ranges.is_empty()) else {
        return Ok(vec![RowRange::all()]);
    };
    let mut all: Vec<RowRange> = set
        .row_keys
        .iter()
        .map(|k| {
            check_row_key(k)?;
            Ok(RowRange {
                start: Bound::Included(k.clone()),
                end: Bound::Included(k.clone()),
            })
        })
        .collect::<Result<_, Status>>()?;
    for r in &set.row_ranges {
        all.push(range(r)?);
    }
    all.retain(|r| !empty(r));
    all.sort_by(|a, b| cmp_start(&a.start, &b.start));
    let mut out: Vec<RowRange> = Vec::with_capacity(all.len());
    for r in all {
        match out.last_mut() {
            Some(last) if joins(&last.end, &r.start) => {
                if cmp_end(&r.end, &last.end) == Ordering::Greater {
                    last.end = r.end;
                }
            }
            _ => out.push(r),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use v2::row_range::{EndKey, StartKey};

    fn rr(s: StartKey, e: EndKey) -> v2::RowRange {
        v2::RowRange {
            start_key: Some(s),
            end_key: Some(e),
        }
    }

    #[test]
    fn merges_keys_and_ranges() {
        let set = v2::RowSet {
            row_keys: vec![b"m".to_vec(), b"b".to_vec(), b"z".to_vec()],
            row_ranges: vec![
                rr(
                    StartKey::StartKeyClosed(b"a".to_vec()),
                    EndKey::EndKeyOpen(b"c".to_vec()),
                ),
                rr(
                    StartKey::StartKeyOpen(b"x".to_vec()),
                    EndKey::EndKeyOpen(b"y".to_vec()),
                ),
            ],
        };
        let r = ranges(Some(&set)).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[0], RowRange::between(b"a", b"c"));
        assert_eq!(r[1].start, Bound::Included(b"m".to_vec()));
        assert_eq!(r[3].end, Bound::Included(b"z".to_vec()));
        assert_eq!(ranges(None).unwrap(), vec![RowRange::all()]);
        let bad = v2::RowSet {
            row_keys: vec![],
            row_ranges: vec![rr(
                StartKey::StartKeyClosed(b"b".to_vec()),
                EndKey::EndKeyOpen(b"a".to_vec()),
            )],
        };
        assert!(ranges(Some(&bad)).is_err());
    }

    #[test]
    fn open_bounds_at_one_key_do_not_join() {
        let set = v2::RowSet {
            row_keys: vec![],
            row_ranges: vec![
                rr(
                    StartKey::StartKeyClosed(b"a".to_vec()),
                    EndKey::EndKeyOpen(b"k".to_vec()),
                ),
                rr(
                    StartKey::StartKeyOpen(b"k".to_vec()),
                    EndKey::EndKeyOpen(b"p".to_vec()),
                ),
                rr(
                    StartKey::StartKeyClosed(b"p".to_vec()),
                    EndKey::EndKeyOpen(b"q".to_vec()),
                ),
            ],
        };
        let r = ranges(Some(&set)).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].end, Bound::Excluded(b"q".to_vec()));
    }
}
