//! Which internal entries are visible: the tombstone and overwrite rules,
//! applied to a key-ordered stream one entry at a time. Shared by the reader
//! ([`crate::read::CellReader`]) and compactions
//! ([`crate::compaction_filter::CompactionFilter`]) so both apply the same rules.
//!
//! Key order makes the rules streamable: within a row the row tombstones come
//! first (empty family); within a family its tombstones come first (empty
//! qualifier, timestamp `TOMBSTONE_TS`); within a column its tombstones come
//! before its cells, and cells come newest timestamp first, highest sequence
//! number first. So by the time a cell is seen, every tombstone that could
//! hide it has been seen.

use crate::error::{Error, Result};
use crate::key::{self, Kind, SeqNo, Timestamp, TOMBSTONE_TS};
use crate::mutation::decode_range;
use crate::schema::CHANGES_FAMILY;

/// An internal key split into its encoded parts (borrowed, nothing decoded).
#[derive(Debug, Clone, Copy)]
pub struct EntryKey<'a> {
    /// `esc(row)`.
    pub row_enc: &'a [u8],
    /// `esc(row) esc(family)`.
    pub family_prefix: &'a [u8],
    /// `esc(row) esc(family) esc(qualifier)`.
    pub column_enc: &'a [u8],
    /// The version's timestamp.
    pub timestamp: Timestamp,
    /// The sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: Kind,
    /// No component escapes a zero (see [`key::KeyParts::plain`]).
    pub plain: bool,
}

/// The escaped form of the empty string.
const EMPTY_ENC: &[u8] = &[0x00, 0x01];

impl<'a> EntryKey<'a> {
    /// Splits `key`; a malformed key is corruption.
    pub fn parse(key: &'a [u8]) -> Result<EntryKey<'a>> {
        let bad = || Error::corruption(format!("malformed internal key {:02x?}", trunc(key)));
        let p = key::split(key).ok_or_else(bad)?;
        let fam_len = p.family_enc.len();
        Ok(EntryKey {
            row_enc: p.row_enc,
            family_prefix: &p.column_enc[..p.row_enc.len() + fam_len],
            column_enc: p.column_enc,
            timestamp: p.timestamp,
            seq: p.seq,
            kind: p.kind,
            plain: p.plain,
        })
    }

    /// `esc(family)`.
    pub fn family_enc(&self) -> &'a [u8] {
        &self.family_prefix[self.row_enc.len()..]
    }

    /// `esc(qualifier)`.
    pub fn qualifier_enc(&self) -> &'a [u8] {
        &self.column_enc[self.family_prefix.len()..]
    }

    /// Whether this is a row-level entry (empty family: a row tombstone).
    pub fn is_row_level(&self) -> bool {
        self.family_enc() == EMPTY_ENC
    }

    /// The decoded family name bytes.
    pub fn family(&self) -> Result<Vec<u8>> {
        key::decode_row(self.family_enc()).ok_or_else(|| Error::corruption("malformed family"))
    }

    /// Whether the family is `name`, without decoding it.
    pub fn family_is(&self, name: &[u8]) -> bool {
        let enc = self.family_enc();
        if name.contains(&0) {
            return key::decode_row(enc).as_deref() == Some(name);
        }
        enc.len() == name.len() + 2 && enc.starts_with(name) && enc.ends_with(&[0x00, 0x01])
    }

    /// The decoded qualifier.
    pub fn qualifier(&self) -> Result<Vec<u8>> {
        if self.plain {
            return Ok(key::plain_component(self.qualifier_enc()).to_vec());
        }
        key::decode_row(self.qualifier_enc())
            .ok_or_else(|| Error::corruption("malformed qualifier"))
    }

    /// As [`EntryKey::qualifier`], into `buf` (reusing its allocation).
    pub fn qualifier_into(&self, buf: &mut Vec<u8>) -> Result<()> {
        if self.plain {
            buf.clear();
            buf.extend_from_slice(key::plain_component(self.qualifier_enc()));
            return Ok(());
        }
        if key::decode_row_into(self.qualifier_enc(), buf) {
            Ok(())
        } else {
            Err(Error::corruption("malformed qualifier"))
        }
    }

    /// The decoded row key.
    pub fn row(&self) -> Result<Vec<u8>> {
        if self.plain {
            return Ok(key::plain_component(self.row_enc).to_vec());
        }
        key::decode_row(self.row_enc).ok_or_else(|| Error::corruption("malformed row"))
    }

    /// As [`EntryKey::row`], into `buf` (reusing its allocation).
    pub fn row_into(&self, buf: &mut Vec<u8>) -> Result<()> {
        if self.plain {
            buf.clear();
            buf.extend_from_slice(key::plain_component(self.row_enc));
            return Ok(());
        }
        if key::decode_row_into(self.row_enc, buf) {
            Ok(())
        } else {
            Err(Error::corruption("malformed row"))
        }
    }
}

fn trunc(key: &[u8]) -> &[u8] {
    &key[..key.len().min(64)]
}

pub use crate::key::prefix_end;

/// How an entry's position relates to the previous entry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// Same column as before.
    Same,
    /// A new column in the same family.
    Column,
    /// A new family in the same row.
    Family,
    /// A new row.
    Row,
}

/// What an entry means once the tombstones before it are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A tombstone that may still hide entries (later in the stream or elsewhere).
    Tombstone,
    /// A tombstone that hides nothing a newer tombstone of the same or wider
    /// scope, already seen, does not hide too (safe to drop when that one is kept).
    RedundantTombstone,
    /// A cell hidden by a tombstone, or overwritten by a higher-sequence cell
    /// at the same timestamp.
    Hidden,
    /// A visible cell: the `index`-th visible version of its column, newest first.
    Visible { index: usize },
    /// In an aggregate family, a visible operand at the timestamp of the
    /// visible cell just before it (the `index`-th version): its value
    /// folds into that cell's ([`crate::aggregate`]).
    Fold { index: usize },
}

/// Tracks the tombstones in force at the current position of a key-ordered
/// stream. Callers drop entries above their snapshot before showing them here.
#[derive(Debug, Default)]
pub struct Tracker {
    /// The current column's `esc(row) esc(family) esc(qualifier)`; the row
    /// and family are its prefixes of `row_len` and `family_len` bytes.
    column_enc: Vec<u8>,
    row_len: usize,
    family_len: usize,
    /// Highest sequence of a row tombstone in this row (0: none; hides seq < it).
    row_tomb: SeqNo,
    family_tomb: SeqNo,
    /// (seq, start, end) of this column's column tombstones.
    column_tombs: Vec<(SeqNo, Timestamp, Timestamp)>,
    /// Timestamp of the previous cell of this column: a cell with the same
    /// timestamp is overwritten by it (cells come highest sequence first).
    last_put_ts: Option<Timestamp>,
    visible: usize,
    started: bool,
    /// Whether cells at one timestamp fold (an aggregate family) rather than
    /// the highest sequence winning. Set by the caller for the current family.
    aggregate: bool,
    /// Whether the cell at `last_put_ts` was visible.
    last_visible: bool,
    /// Whether the current family is the hidden change log: its records
    /// outlive the deletes they record (docs/changes.md).
    change_log: bool,
}

impl Tracker {
    pub fn new() -> Self {
        Tracker::default()
    }

    /// Says whether the family of the entries classified next is an
    /// aggregate family (it stays so until changed).
    pub fn set_aggregate(&mut self, aggregate: bool) {
        self.aggregate = aggregate;
    }

    /// The current row's `esc(row)`.
    pub fn row_enc(&self) -> &[u8] {
        &self.column_enc[..self.row_len]
    }

    /// Moves to `k`'s position, resetting what a new row/family/column resets.
    pub fn position(&mut self, k: &EntryKey<'_>) -> Change {
        let change = if !self.started || k.row_enc != self.row_enc() {
            Change::Row
        } else if k.family_prefix != &self.column_enc[..self.family_len] {
            Change::Family
        } else if k.column_enc != self.column_enc.as_slice() {
            Change::Column
        } else {
            Change::Same
        };
        self.started = true;
        if change >= Change::Row {
            self.row_tomb = 0;
        }
        if change >= Change::Family {
            self.family_tomb = 0;
            self.change_log = k.family_is(CHANGES_FAMILY.as_bytes());
        }
        if change >= Change::Column {
            self.column_enc.clear();
            self.column_enc.extend_from_slice(k.column_enc);
            self.row_len = k.row_enc.len();
            self.family_len = k.family_prefix.len();
            self.column_tombs.clear();
            self.last_put_ts = None;
            self.visible = 0;
        }
        change
    }

    /// Classifies the entry at the current position (call [`Self::position`]
    /// first). Entries whose shape breaks the key layout's rules are corruption.
    pub fn classify(&mut self, k: &EntryKey<'_>, value: &[u8]) -> Result<Verdict> {
        let shape = |what: &str| {
            Error::corruption(format!(
                "{what} (kind {:?}, timestamp {}, seq {})",
                k.kind, k.timestamp, k.seq
            ))
        };
        if k.is_row_level() {
            if k.kind != Kind::DeleteRow
                || k.qualifier_enc() != EMPTY_ENC
                || k.timestamp != TOMBSTONE_TS
            {
                return Err(shape("entry with an empty family is not a row tombstone"));
            }
            let redundant = k.seq <= self.row_tomb;
            self.row_tomb = self.row_tomb.max(k.seq);
            return Ok(tomb(redundant));
        }
        match k.kind {
            Kind::DeleteRow => Err(shape("row tombstone with a family")),
            Kind::DeleteFamily => {
                if k.qualifier_enc() != EMPTY_ENC || k.timestamp != TOMBSTONE_TS {
                    return Err(shape("malformed family tombstone"));
                }
                let redundant = k.seq < self.row_tomb || k.seq <= self.family_tomb;
                self.family_tomb = self.family_tomb.max(k.seq);
                Ok(tomb(redundant))
            }
            Kind::DeleteColumn => {
                if k.timestamp != TOMBSTONE_TS {
                    return Err(shape("column tombstone with a cell timestamp"));
                }
                let (start, end) =
                    decode_range(value).ok_or_else(|| shape("column tombstone without a range"))?;
                let redundant = k.seq < self.row_tomb.max(self.family_tomb)
                    || start >= end
                    || self
                        .column_tombs
                        .iter()
                        .any(|&(s, st, en)| s >= k.seq && st <= start && end <= en);
                if !redundant {
                    self.column_tombs.push((k.seq, start, end));
                }
                Ok(tomb(redundant))
            }
            Kind::Put => {
                if k.timestamp == TOMBSTONE_TS {
                    return Err(shape("cell at the tombstone timestamp"));
                }
                if self.change_log {
                    // Every change record stands: no delete hides it, and
                    // two at one timestamp are two changes.
                    let index = self.visible;
                    self.visible += 1;
                    return Ok(Verdict::Visible { index });
                }
                let ts = k.timestamp;
                let twin = self.last_put_ts == Some(ts);
                if twin && !(self.aggregate && self.last_visible) {
                    return Ok(Verdict::Hidden);
                }
                self.last_put_ts = Some(ts);
                let hidden = k.seq < self.row_tomb
                    || k.seq < self.family_tomb
                    || self
                        .column_tombs
                        .iter()
                        .any(|&(s, st, en)| k.seq < s && st <= ts && ts < en);
                self.last_visible = !hidden;
                if hidden {
                    return Ok(Verdict::Hidden);
                }
                if twin {
                    // Only an aggregate family's visible twin gets here.
                    return Ok(Verdict::Fold {
                        index: self.visible.saturating_sub(1),
                    });
                }
                let index = self.visible;
                self.visible += 1;
                Ok(Verdict::Visible { index })
            }
        }
    }
}

fn tomb(redundant: bool) -> Verdict {
    if redundant {
        Verdict::RedundantTombstone
    } else {
        Verdict::Tombstone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::encode;

    fn see(t: &mut Tracker, key: &[u8], value: &[u8]) -> (Change, Verdict) {
        let k = EntryKey::parse(key).unwrap();
        let c = t.position(&k);
        (c, t.classify(&k, value).unwrap())
    }

    #[test]
    fn parts_and_ends() {
        let key = encode(b"r\0", b"fam", b"q", 5, 9, Kind::Put);
        let k = EntryKey::parse(&key).unwrap();
        assert_eq!(k.row().unwrap(), b"r\0");
        assert_eq!(k.family().unwrap(), b"fam");
        assert_eq!(k.qualifier().unwrap(), b"q");
        assert!(k.family_is(b"fam"));
        assert!(!k.family_is(b"fa") && !k.family_is(b"famm") && !k.family_is(b""));
        let nul = encode(b"r", b"f\0g", b"q", 5, 9, Kind::Put);
        let n = EntryKey::parse(&nul).unwrap();
        assert!(n.family_is(b"f\0g") && !n.family_is(b"f"));
        assert!(!k.is_row_level());
        assert!(prefix_end(k.family_prefix) > key);
        assert!(prefix_end(k.column_enc) > key);
        assert!(prefix_end(k.family_prefix) < encode(b"r\0", b"fam\0", b"", 1, 1, Kind::Put));
        assert!(prefix_end(k.family_prefix) < encode(b"r\0", b"famz", b"", 1, 1, Kind::Put));
        assert!(EntryKey::parse(b"junk").is_err());
    }

    #[test]
    fn tombstones_hide_lower_sequences_only() {
        let mut t = Tracker::new();
        let row = encode(b"r", b"", b"", TOMBSTONE_TS, 10, Kind::DeleteRow);
        assert_eq!(see(&mut t, &row, b""), (Change::Row, Verdict::Tombstone));
        let row2 = encode(b"r", b"", b"", TOMBSTONE_TS, 4, Kind::DeleteRow);
        assert_eq!(see(&mut t, &row2, b"").1, Verdict::RedundantTombstone);
        let fam = encode(b"r", b"f", b"", TOMBSTONE_TS, 8, Kind::DeleteFamily);
        assert_eq!(see(&mut t, &fam, b"").1, Verdict::RedundantTombstone);
        let col = encode(b"r", b"f", b"q", TOMBSTONE_TS, 20, Kind::DeleteColumn);
        let range = crate::mutation::encode_range(5, 7);
        assert_eq!(
            see(&mut t, &col, &range),
            (Change::Column, Verdict::Tombstone)
        );
        let newer = encode(b"r", b"f", b"q", 9, 11, Kind::Put);
        assert_eq!(
            see(&mut t, &newer, b""),
            (Change::Same, Verdict::Visible { index: 0 })
        );
        let older = encode(b"r", b"f", b"q", 8, 9, Kind::Put);
        assert_eq!(see(&mut t, &older, b"").1, Verdict::Hidden);
        let in_range = encode(b"r", b"f", b"q", 6, 15, Kind::Put);
        assert_eq!(see(&mut t, &in_range, b"").1, Verdict::Hidden);
        let overwritten_twin = encode(b"r", b"f", b"q", 6, 14, Kind::Put);
        assert_eq!(see(&mut t, &overwritten_twin, b"").1, Verdict::Hidden);
        let below_range = encode(b"r", b"f", b"q", 4, 12, Kind::Put);
        assert_eq!(
            see(&mut t, &below_range, b"").1,
            Verdict::Visible { index: 1 }
        );
        let next_row = encode(b"s", b"f", b"q", 4, 1, Kind::Put);
        assert_eq!(
            see(&mut t, &next_row, b""),
            (Change::Row, Verdict::Visible { index: 0 })
        );
    }

    #[test]
    fn same_timestamp_highest_sequence_wins() {
        let mut t = Tracker::new();
        let a = encode(b"r", b"f", b"q", 5, 3, Kind::Put);
        let b = encode(b"r", b"f", b"q", 5, 2, Kind::Put);
        assert!(a < b);
        assert_eq!(see(&mut t, &a, b"").1, Verdict::Visible { index: 0 });
        assert_eq!(see(&mut t, &b, b"").1, Verdict::Hidden);
    }

    #[test]
    fn aggregate_twins_fold_until_a_tombstone_hides_them() {
        let mut t = Tracker::new();
        t.set_aggregate(true);
        let del = encode(b"r", b"f", b"q", TOMBSTONE_TS, 5, Kind::DeleteColumn);
        let range = crate::mutation::encode_range(0, 100);
        assert_eq!(see(&mut t, &del, &range).1, Verdict::Tombstone);
        let newest = encode(b"r", b"f", b"q", 9, 8, Kind::Put);
        let a = encode(b"r", b"f", b"q", 7, 9, Kind::Put);
        let b = encode(b"r", b"f", b"q", 7, 6, Kind::Put);
        let hidden = encode(b"r", b"f", b"q", 7, 4, Kind::Put);
        let hidden2 = encode(b"r", b"f", b"q", 7, 2, Kind::Put);
        assert_eq!(see(&mut t, &newest, b"").1, Verdict::Visible { index: 0 });
        assert_eq!(see(&mut t, &a, b"").1, Verdict::Visible { index: 1 });
        assert_eq!(see(&mut t, &b, b"").1, Verdict::Fold { index: 1 });
        assert_eq!(see(&mut t, &hidden, b"").1, Verdict::Hidden);
        assert_eq!(see(&mut t, &hidden2, b"").1, Verdict::Hidden);
        // A plain family keeps only the highest sequence.
        let mut p = Tracker::new();
        assert_eq!(see(&mut p, &a, b"").1, Verdict::Visible { index: 0 });
        assert_eq!(see(&mut p, &b, b"").1, Verdict::Hidden);
    }

    #[test]
    fn malformed_shapes_are_corruption() {
        let cases = [
            (encode(b"r", b"", b"", TOMBSTONE_TS, 1, Kind::Put), vec![]),
            (
                encode(b"r", b"", b"q", TOMBSTONE_TS, 1, Kind::DeleteRow),
                vec![],
            ),
            (
                encode(b"r", b"f", b"", TOMBSTONE_TS, 1, Kind::DeleteRow),
                vec![],
            ),
            (
                encode(b"r", b"f", b"q", TOMBSTONE_TS, 1, Kind::DeleteFamily),
                vec![],
            ),
            (encode(b"r", b"f", b"", 5, 1, Kind::DeleteFamily), vec![]),
            (
                encode(b"r", b"f", b"q", 5, 1, Kind::DeleteColumn),
                vec![0; 16],
            ),
            (
                encode(b"r", b"f", b"q", TOMBSTONE_TS, 1, Kind::DeleteColumn),
                vec![0; 3],
            ),
            (encode(b"r", b"f", b"q", TOMBSTONE_TS, 1, Kind::Put), vec![]),
        ];
        for (key, value) in cases {
            let mut t = Tracker::new();
            let k = EntryKey::parse(&key).unwrap();
            t.position(&k);
            assert!(
                matches!(t.classify(&k, &value), Err(Error::Corruption(_))),
                "{:?}",
                key::decode(&key)
            );
        }
    }
}
