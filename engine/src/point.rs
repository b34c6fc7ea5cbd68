//! Point reads: the newest versions of one column of one row, looked up in
//! each source (memtables, SSTables) on its own instead of through a merged
//! stream.
//!
//! "First source wins" would be wrong: cells carry explicit timestamps, so
//! the newest version may sit in an older SSTable, and a tombstone in one
//! source hides cells in another. So from each source this takes every entry
//! that can decide the column (the row's tombstones, the family's tombstones
//! and every entry of the column, all within the snapshot), then sorts them
//! into key order and applies exactly the rules the general reader applies
//! ([`crate::visibility::Tracker`] and [`crate::read::take_version`]). Key
//! order puts all of them close together: row tombstones first in the row,
//! family tombstones first in the family (in its empty-qualifier column, at
//! [`key::TOMBSTONE_TS`]), then the column.
//!
//! A source holding more than [`MAX_PER_SOURCE`] such entries (a column with
//! many versions) makes [`ColumnLookup::gather`] give up, and the caller reads
//! through the general [`crate::read::CellReader`], which stops early instead.

use crate::data::{TimeRange, Version};
use crate::error::Result;
use crate::iterator::InternalIterator;
use crate::key::{self, Kind, SeqNo, Timestamp, TOMBSTONE_TS, TRAILER_LEN};
use crate::read::{take_version, Take};
use crate::schema::GcRule;
use crate::value::Value;
use crate::visibility::{EntryKey, Tracker, Verdict};
use smallvec::SmallVec;
use std::ops::Range;

/// Entries one source may contribute before the lookup gives up.
pub const MAX_PER_SOURCE: usize = 64;

/// The encoded keys one column lookup needs, in one buffer:
/// `esc(row) esc(family) esc(qualifier)`, then the column's end, then the
/// family tombstones' column `esc(row) esc(family) esc("")`, then the row
/// tombstones' column `esc(row) esc("") esc("")`. The keys of the entries
/// gathered follow them (room for one is reserved: one allocation per read).
struct ColumnKeys {
    buf: Vec<u8>,
    /// End of `esc(row)`.
    row: usize,
    /// End of `esc(row) esc(family)`.
    family: usize,
    /// End of the column prefix; the column end follows it.
    column: usize,
    /// End of the family tombstones' column; the row tombstones' follows.
    family_tombs: usize,
    /// End of the row tombstones' column: the gathered keys follow.
    gathered: usize,
}

/// `esc("")`.
const EMPTY_ENC: [u8; 2] = [0x00, 0x01];

impl ColumnKeys {
    fn new(row: &[u8], family: &[u8], qualifier: &[u8]) -> ColumnKeys {
        let esc_len = |s: &[u8]| s.len() + s.iter().filter(|&&b| b == 0).count() + 2;
        let (r, f, q) = (esc_len(row), esc_len(family), esc_len(qualifier));
        let mut buf = Vec::with_capacity(3 * r + 3 * (r + f + q) + f + 4 + TRAILER_LEN);
        key::escape_into(row, &mut buf);
        key::escape_into(family, &mut buf);
        key::escape_into(qualifier, &mut buf);
        let column = buf.len();
        buf.extend_from_within(..column);
        if let Some(last) = buf.last_mut() {
            *last = 0x02; // see key::prefix_end
        }
        buf.extend_from_within(..r + f);
        buf.extend_from_slice(&EMPTY_ENC);
        let family_tombs = buf.len();
        buf.extend_from_within(..r);
        buf.extend_from_slice(&EMPTY_ENC);
        buf.extend_from_slice(&EMPTY_ENC);
        ColumnKeys {
            gathered: buf.len(),
            buf,
            row: r,
            family: r + f,
            column,
            family_tombs,
        }
    }

    fn row_enc(&self) -> &[u8] {
        &self.buf[..self.row]
    }

    fn family_prefix(&self) -> &[u8] {
        &self.buf[..self.family]
    }

    fn column(&self) -> &[u8] {
        &self.buf[..self.column]
    }

    fn column_end(&self) -> &[u8] {
        &self.buf[self.column..2 * self.column]
    }

    fn family_tombs(&self) -> &[u8] {
        &self.buf[2 * self.column..self.family_tombs]
    }

    fn row_tombs(&self) -> &[u8] {
        &self.buf[self.family_tombs..self.gathered]
    }

    /// The trailer (timestamp, sequence, kind) of `k` if `k` is an entry of
    /// the column itself: its shape is then known, no split needed.
    fn column_entry(&self, k: &[u8]) -> Option<(Timestamp, SeqNo, Kind)> {
        let column = self.column();
        let at = k.get(..column.len()).filter(|p| key::equal(p, column))?;
        key::decode_trailer(&k[at.len()..])
    }
}

/// One entry a source holds for the column: its key (a range of
/// [`ColumnKeys::buf`]), its value, and for an entry of the column itself
/// its timestamp and kind (decoded once, by [`ColumnLookup::gather`]).
struct Gathered {
    key: Range<usize>,
    value: Value,
    column: Option<(Timestamp, Kind)>,
}

/// Whether `key` is a tombstone stored at [`TOMBSTONE_TS`] (a family or
/// column tombstone; malformed keys are left to the parse that follows).
fn is_tombstone_at_tombstone_ts(key: &[u8]) -> bool {
    let n = key.len();
    n >= TRAILER_LEN
        && key[n - TRAILER_LEN..n - 9] == (!TOMBSTONE_TS).to_be_bytes()
        && key[n - 1] != Kind::Put as u8
}

/// One point read in progress: what the sources hold for the column.
pub struct ColumnLookup {
    keys: ColumnKeys,
    snapshot: SeqNo,
    entries: SmallVec<[Gathered; 2]>,
}

impl ColumnLookup {
    /// A lookup of column `family:qualifier` of `row` as of `snapshot`.
    pub fn new(row: &[u8], family: &str, qualifier: &[u8], snapshot: SeqNo) -> ColumnLookup {
        ColumnLookup {
            keys: ColumnKeys::new(row, family.as_bytes(), qualifier),
            snapshot,
            entries: SmallVec::new(),
        }
    }

    /// `esc(row)`, for a Bloom filter's row test.
    pub fn row_enc(&self) -> &[u8] {
        self.keys.row_enc()
    }

    /// The smallest key after the column's: sources need not be read beyond it.
    pub fn end(&self) -> &[u8] {
        self.keys.column_end()
    }

    /// The columns whose entries decide the read (the column itself, the
    /// family tombstones' and the row tombstones'), for a Bloom filter's
    /// column test.
    pub fn bloom_columns(&self) -> [&[u8]; 3] {
        [
            self.keys.column(),
            self.keys.family_tombs(),
            self.keys.row_tombs(),
        ]
    }

    /// Adds what one source holds for the column. Returns false, having
    /// added part of it, if the source holds more than [`MAX_PER_SOURCE`]
    /// entries: the caller must then read another way.
    pub fn gather<I: InternalIterator + ?Sized>(&mut self, it: &mut I) -> Result<bool> {
        let mut taken = 0;
        it.seek(self.keys.row_enc())?;
        while it.valid() {
            let k = it.key();
            let keys = &self.keys;
            if !key::less(k, keys.column_end()) {
                break;
            }
            // Before the family only row tombstones matter, and inside it,
            // before the column, only the family's tombstones: seek past
            // the rest (other families, other columns).
            if key::less(k, keys.family_prefix()) {
                if !k.get(keys.row..).is_some_and(|t| t.starts_with(&EMPTY_ENC)) {
                    it.seek(keys.family_prefix())?;
                    continue;
                }
            } else if key::less(k, keys.column())
                && !(k.starts_with(keys.family_tombs()) && is_tombstone_at_tombstone_ts(k))
            {
                it.seek(keys.column())?;
                continue;
            }
            let trailer = keys.column_entry(k);
            let seq = match trailer {
                Some((_, seq, _)) => seq,
                None => EntryKey::parse(k)?.seq,
            };
            if seq <= self.snapshot {
                if taken == MAX_PER_SOURCE {
                    return Ok(false);
                }
                taken += 1;
                let start = self.keys.buf.len();
                self.keys.buf.extend_from_slice(k);
                self.entries.push(Gathered {
                    key: start..self.keys.buf.len(),
                    value: it.shared_value(),
                    column: trailer.map(|(ts, _, kind)| (ts, kind)),
                });
            }
            it.next()?;
        }
        Ok(true)
    }

    /// The column's visible versions, newest first, as
    /// [`crate::read::CellReader::column`] returns them: `gc` is the
    /// family's rule (None: keep all), then `time_range` and `max_versions`
    /// select. Plain families only: an aggregate family's cells fold, which
    /// the reader does.
    pub fn resolve(
        mut self,
        gc: Option<&GcRule>,
        time_range: TimeRange,
        max_versions: Option<u32>,
        now_micros: u64,
    ) -> Result<Vec<Version>> {
        let cell = |timestamp, value| Version { timestamp, value };
        // The usual read: one version and no tombstone. A put alone is its
        // column's newest visible version (what the Tracker would say).
        if let [only] = self.entries.as_mut_slice() {
            if let Some((ts, Kind::Put)) = only.column.filter(|&(ts, _)| ts != TOMBSTONE_TS) {
                let take = take_version(gc, 0, ts, now_micros, time_range, max_versions, 0);
                return Ok(match take {
                    Take::Emit => vec![cell(ts, std::mem::take(&mut only.value))],
                    Take::EndColumn | Take::Skip => Vec::new(),
                });
            }
        }
        // Each source's entries are sorted already; a stable sort keeps a
        // duplicate (one entry in two sources) next to its twin, as a merge does.
        let buf = &self.keys.buf;
        self.entries
            .sort_by(|a, b| buf[a.key.clone()].cmp(&buf[b.key.clone()]));
        let mut tracker = Tracker::new();
        let mut cells = Vec::new();
        for e in &mut self.entries {
            let k = EntryKey::parse(&buf[e.key.clone()])?;
            let value = &mut e.value;
            tracker.position(&k);
            let Verdict::Visible { index } = tracker.classify(&k, value)? else {
                continue;
            };
            let emitted = u32::try_from(cells.len()).unwrap_or(u32::MAX);
            match take_version(
                gc,
                index,
                k.timestamp,
                now_micros,
                time_range,
                max_versions,
                emitted,
            ) {
                Take::EndColumn => break,
                Take::Skip => {}
                Take::Emit => cells.push(cell(k.timestamp, std::mem::take(value))),
            }
        }
        Ok(cells)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::VecIterator;
    use crate::mutation::encode_range;
    use std::sync::Arc;

    fn put(row: &[u8], fam: &[u8], q: &[u8], ts: u64, seq: u64) -> (Vec<u8>, Vec<u8>) {
        let k = key::encode(row, fam, q, ts, seq, Kind::Put);
        (k, format!("{ts}@{seq}").into_bytes())
    }

    fn source(mut v: Vec<(Vec<u8>, Vec<u8>)>) -> VecIterator {
        v.sort();
        VecIterator::new(Arc::new(v))
    }

    fn lookup(sources: Vec<VecIterator>, q: &[u8], mv: Option<u32>) -> Vec<(u64, String)> {
        let mut l = ColumnLookup::new(b"r", "f", q, u64::MAX);
        for mut s in sources {
            assert!(l.gather(&mut s).unwrap());
        }
        l.resolve(None, TimeRange::ALL, mv, 0)
            .unwrap()
            .into_iter()
            .map(|c| (c.timestamp, String::from_utf8(c.value.into_vec()).unwrap()))
            .collect()
    }

    #[test]
    fn keys_are_the_encodings() {
        let k = ColumnKeys::new(b"r\0", b"fam", b"q");
        assert_eq!(k.row_enc(), key::row_prefix(b"r\0"));
        assert_eq!(k.family_prefix(), key::family_prefix(b"r\0", b"fam"));
        assert_eq!(k.column(), key::column_prefix(b"r\0", b"fam", b"q"));
        assert_eq!(k.column_end(), key::column_end(b"r\0", b"fam", b"q"));
        assert_eq!(k.family_tombs(), key::column_prefix(b"r\0", b"fam", b""));
        assert_eq!(k.row_tombs(), key::column_prefix(b"r\0", b"", b""));
    }

    #[test]
    fn newest_version_may_sit_in_an_older_source() {
        let newer = source(vec![put(b"r", b"f", b"q", 5, 9)]);
        let older = source(vec![
            put(b"r", b"f", b"q", 7, 2),
            put(b"r", b"f", b"q", 1, 1),
        ]);
        assert_eq!(
            lookup(vec![newer, older], b"q", Some(1)),
            vec![(7, "7@2".to_string())]
        );
    }

    #[test]
    fn tombstones_in_one_source_hide_cells_in_another() {
        let cells = vec![
            put(b"r", b"f", b"q", 5, 1),
            put(b"r", b"f", b"q", 3, 2),
            put(b"r", b"f", b"q", 2, 3),
        ];
        let col = key::encode(b"r", b"f", b"q", TOMBSTONE_TS, 10, Kind::DeleteColumn);
        let tombs = vec![(col, encode_range(4, 6).to_vec())];
        let got = lookup(vec![source(cells.clone()), source(tombs)], b"q", None);
        assert_eq!(got, vec![(3, "3@2".into()), (2, "2@3".into())]);
        let fam = key::encode(b"r", b"f", b"", TOMBSTONE_TS, 3, Kind::DeleteFamily);
        let tombs = vec![(fam, Vec::new()), put(b"r", b"f", b"", 1, 4)];
        let got = lookup(vec![source(cells.clone()), source(tombs)], b"q", None);
        assert_eq!(got, vec![(2, "2@3".into())]);
        let row = key::encode(b"r", b"", b"", TOMBSTONE_TS, 4, Kind::DeleteRow);
        let got = lookup(
            vec![source(cells), source(vec![(row, Vec::new())])],
            b"q",
            None,
        );
        assert!(got.is_empty());
    }

    #[test]
    fn other_rows_families_and_columns_are_skipped() {
        let s = source(vec![
            put(b"q", b"f", b"q", 1, 1),
            put(b"r", b"e", b"q", 2, 2),
            put(b"r", b"f", b"", 3, 3),
            put(b"r", b"f", b"p", 4, 4),
            put(b"r", b"f", b"q", 5, 5),
            put(b"r", b"f", b"qq", 6, 6),
            put(b"r", b"g", b"q", 7, 7),
            put(b"r\0", b"f", b"q", 8, 8),
            put(b"s", b"f", b"q", 9, 9),
        ]);
        let mut l = ColumnLookup::new(b"r", "f", b"q", u64::MAX);
        assert!(l.gather(&mut { s }).unwrap());
        assert_eq!(l.entries.len(), 1);
        let s = source(vec![
            put(b"r", b"f", b"", 3, 3),
            put(b"r", b"f", b"q", 5, 5),
        ]);
        assert_eq!(lookup(vec![s], b"", None), vec![(3, "3@3".into())]);
    }

    #[test]
    fn a_lone_entry_resolves_as_the_tracker_says() {
        // A lone put, selected by time range and version limit.
        let one = || source(vec![put(b"r", b"f", b"q", 5, 1)]);
        assert_eq!(lookup(vec![one()], b"q", Some(1)), vec![(5, "5@1".into())]);
        assert!(lookup(vec![one()], b"q", Some(0)).is_empty());
        let mut l = ColumnLookup::new(b"r", "f", b"q", u64::MAX);
        assert!(l.gather(&mut one()).unwrap());
        let late = TimeRange { start: 6, end: 9 };
        assert!(l.resolve(None, late, None, 0).unwrap().is_empty());
        // A lone tombstone hides nothing and shows nothing.
        let col = key::encode(b"r", b"f", b"q", TOMBSTONE_TS, 10, Kind::DeleteColumn);
        let tomb = source(vec![(col, encode_range(0, 9).to_vec())]);
        assert!(lookup(vec![tomb], b"q", None).is_empty());
        // A put at the tombstone timestamp is corruption, alone too.
        let bad = key::encode(b"r", b"f", b"q", TOMBSTONE_TS, 1, Kind::Put);
        let mut l = ColumnLookup::new(b"r", "f", b"q", u64::MAX);
        assert!(l.gather(&mut source(vec![(bad, Vec::new())])).unwrap());
        assert!(l.resolve(None, TimeRange::ALL, None, 0).is_err());
    }

    #[test]
    fn snapshot_and_limit() {
        let s = source(vec![
            put(b"r", b"f", b"q", 5, 9),
            put(b"r", b"f", b"q", 4, 3),
        ]);
        let mut l = ColumnLookup::new(b"r", "f", b"q", 8);
        assert!(l.gather(&mut { s }).unwrap());
        let got = l.resolve(None, TimeRange::ALL, None, 0).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].timestamp, 4);
        let many = (0..=MAX_PER_SOURCE as u64)
            .map(|i| put(b"r", b"f", b"q", i + 1, i + 1))
            .collect();
        let mut l = ColumnLookup::new(b"r", "f", b"q", u64::MAX);
        assert!(!l.gather(&mut source(many)).unwrap());
    }
}
