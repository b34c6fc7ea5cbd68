//! Ranges of rows the mount saw empty a moment ago: a lookup that finds a
//! row missing (the failed `open` before a new row's `mkdir`) learns from
//! the same call how far after it no row exists (up to the next row, or the
//! end of the row's tablet: `engine::Bigtable::peek_row`), so that the
//! lookups of the new rows that follow it (a writer filling a table in key
//! order) answer ENOENT without a call.
//!
//! Coherence is the row memo's ([`crate::row_memo`], which owns this):
//! a gap lasts as long as the memo's entries, every write to a row (through
//! the mount, a `.mutate` batch, gRPC, or another daemon's invalidation)
//! cuts that row out of the gap holding it before the write is
//! acknowledged, a table-wide change drops every gap, and a read that a
//! write overtook keeps its gap without the rows written since it began.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::time::{Duration, Instant};

/// At most this many gaps are kept (past it, expired ones go, then all).
const MAX_GAPS: usize = 1024;

/// The rows written last that a read's gap is cut by: a read that more
/// writes overtook keeps no gap.
const RECENT: u64 = 64;

/// Rows absent from `from` (the key it is filed under, included or not)
/// up to `until` (excluded; None: the table's end).
struct Gap {
    from_included: bool,
    until: Option<Vec<u8>>,
    at: Instant,
}

impl Gap {
    fn holds(&self, from: &[u8], row: &[u8]) -> bool {
        (row > from || (row == from && self.from_included))
            && self.until.as_deref().is_none_or(|u| row < u)
    }
}

#[derive(Default)]
struct Inner {
    /// Per table, by the key each gap starts at; the gaps are disjoint.
    tables: HashMap<String, BTreeMap<Vec<u8>, Gap>>,
    gaps: usize,
    /// Rows written so far (and table-wide changes, which count more).
    writes: u64,
    /// The last [`RECENT`] rows written: their write's number, table, row.
    recent: VecDeque<(u64, String, Vec<u8>)>,
}

impl Inner {
    /// Cuts `row` out of the gap of `table` holding it.
    fn cut(&mut self, table: &str, row: &[u8]) {
        let Some(gaps) = self.tables.get_mut(table) else {
            return;
        };
        let Some((from, gap)) = gaps
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(row)))
            .next_back()
        else {
            return;
        };
        if !gap.holds(from, row) {
            return;
        }
        let from = from.clone();
        let Some(gap) = gaps.remove(&from) else {
            return;
        };
        self.gaps -= 1;
        let after = Gap {
            from_included: false,
            until: gap.until.clone(),
            at: gap.at,
        };
        if from.as_slice() < row {
            let before = Gap {
                until: Some(row.to_vec()),
                ..gap
            };
            gaps.insert(from, before);
            self.gaps += 1;
        }
        if after.until.as_deref().is_none_or(|u| row < u) {
            gaps.insert(row.to_vec(), after);
            self.gaps += 1;
        }
    }
}

/// Ranges of rows seen empty a moment ago (see the module doc).
pub struct RowGaps {
    inner: Mutex<Inner>,
    ttl: Duration,
}

impl RowGaps {
    /// Gaps kept for `ttl`.
    pub(crate) fn new(ttl: Duration) -> RowGaps {
        RowGaps {
            inner: Mutex::default(),
            ttl,
        }
    }

    /// What a read passes to [`RowGaps::keep`]: taken before it.
    pub(crate) fn writes(&self) -> u64 {
        self.inner.lock().writes
    }

    /// Keeps that no row of `table` from `from` up to `until` (excluded;
    /// None: the table's end) exists, as a read begun at `writes` found,
    /// less the rows written since.
    pub(crate) fn keep(&self, table: &str, from: &[u8], until: Option<Vec<u8>>, writes: u64) {
        if until.as_deref().is_some_and(|u| u <= from) {
            return;
        }
        let now = Instant::now();
        let mut g = self.inner.lock();
        if g.writes - writes > RECENT {
            return;
        }
        if g.gaps >= MAX_GAPS {
            let ttl = self.ttl;
            for gaps in g.tables.values_mut() {
                gaps.retain(|_, x| now.duration_since(x.at) < ttl);
            }
            g.tables.retain(|_, gaps| !gaps.is_empty());
            g.gaps = g.tables.values().map(BTreeMap::len).sum();
            if g.gaps >= MAX_GAPS {
                g.tables.clear();
                g.gaps = 0;
            }
        }
        let gaps = g.tables.entry(table.to_string()).or_default();
        // The gaps it overlaps go: what is kept stays disjoint.
        let overlapping: Vec<Vec<u8>> = gaps
            .range::<[u8], _>((
                Bound::Unbounded,
                match until.as_deref() {
                    Some(u) => Bound::Excluded(u),
                    None => Bound::Unbounded,
                },
            ))
            .rev()
            .take_while(|(_, x)| x.until.as_deref().is_none_or(|u| u > from))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &overlapping {
            gaps.remove(k);
        }
        gaps.insert(
            from.to_vec(),
            Gap {
                from_included: true,
                until,
                at: now,
            },
        );
        g.gaps = g.gaps + 1 - overlapping.len();
        // The rows written since the read began.
        let since: Vec<(String, Vec<u8>)> = g
            .recent
            .iter()
            .filter(|(n, t, _)| *n > writes && t == table)
            .map(|(_, t, r)| (t.clone(), r.clone()))
            .collect();
        for (t, r) in since {
            g.cut(&t, &r);
        }
    }

    /// Whether `row` of `table` was seen absent a moment ago.
    pub(crate) fn holds(&self, table: &str, row: &[u8]) -> bool {
        let g = self.inner.lock();
        let Some(gaps) = g.tables.get(table) else {
            return false;
        };
        gaps.range::<[u8], _>((Bound::Unbounded, Bound::Included(row)))
            .next_back()
            .is_some_and(|(from, gap)| gap.at.elapsed() < self.ttl && gap.holds(from, row))
    }

    /// `row` of `table` was just written: it leaves its gap.
    pub(crate) fn written(&self, table: &str, row: &[u8]) {
        let mut g = self.inner.lock();
        g.writes += 1;
        let n = g.writes;
        if g.recent.len() as u64 >= RECENT {
            g.recent.pop_front();
        }
        g.recent.push_back((n, table.to_string(), row.to_vec()));
        g.cut(table, row);
    }

    /// Drops every gap (a table or schema changed); a read begun before
    /// keeps none.
    pub(crate) fn clear(&self) {
        let mut g = self.inner.lock();
        g.tables.clear();
        g.gaps = 0;
        g.recent.clear();
        g.writes += RECENT + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::RowGaps;
    use std::time::Duration;

    fn gaps() -> RowGaps {
        RowGaps::new(Duration::from_secs(60))
    }

    #[test]
    fn a_gap_holds_its_rows_until_one_is_written() {
        let g = gaps();
        g.keep("t", b"b", Some(b"m".to_vec()), g.writes());
        assert!(!g.holds("t", b"a"));
        assert!(g.holds("t", b"b") && g.holds("t", b"c") && g.holds("t", b"l\xff"));
        assert!(!g.holds("t", b"m"), "the next row exists");
        assert!(!g.holds("u", b"c"), "another table");
        g.written("t", b"c");
        assert!(!g.holds("t", b"c"), "written");
        assert!(g.holds("t", b"b") && g.holds("t", b"c\0") && g.holds("t", b"d"));
        g.written("t", b"b");
        assert!(!g.holds("t", b"b") && g.holds("t", b"bb"));
        g.keep("t", b"x", None, g.writes());
        assert!(g.holds("t", b"zzzz"), "to the table's end");
        g.clear();
        assert!(!g.holds("t", b"d") && !g.holds("t", b"zzzz"));
    }

    #[test]
    fn a_read_overtaken_by_writes_keeps_its_gap_without_their_rows() {
        let g = gaps();
        let before = g.writes();
        g.written("t", b"d");
        g.written("u", b"e");
        g.keep("t", b"a", Some(b"z".to_vec()), before);
        assert!(!g.holds("t", b"d"), "written while the read ran");
        assert!(g.holds("t", b"c") && g.holds("t", b"e"));
        // Too many writes since: nothing kept.
        let before = g.writes();
        for i in 0..=super::RECENT {
            g.written("v", format!("{i}").as_bytes());
        }
        g.keep("t", b"0", Some(b"1".to_vec()), before);
        assert!(!g.holds("t", b"0"));
        // Nor after a table-wide change.
        let before = g.writes();
        g.clear();
        g.keep("t", b"0", Some(b"1".to_vec()), before);
        assert!(!g.holds("t", b"0"));
    }

    #[test]
    fn an_overlapping_gap_replaces_those_it_overlaps() {
        let g = gaps();
        g.keep("t", b"a", Some(b"c".to_vec()), g.writes());
        g.keep("t", b"e", Some(b"g".to_vec()), g.writes());
        g.keep("t", b"b", Some(b"f".to_vec()), g.writes());
        assert!(!g.holds("t", b"a"), "dropped with its overlap");
        assert!(g.holds("t", b"b") && g.holds("t", b"e"));
        assert!(!g.holds("t", b"f"));
        // A write cuts the one gap holding it, whichever it is.
        g.written("t", b"d");
        assert!(!g.holds("t", b"d") && g.holds("t", b"c") && g.holds("t", b"e"));
    }
}
