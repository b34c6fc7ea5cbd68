//! Internal keys: how a cell's coordinates are laid out as bytes.
//!
//! Every entry in a memtable, commit log replay or SSTable is a key/value pair
//! whose key is
//!
//! ```text
//! esc(row) esc(family) esc(qualifier) BE64(!timestamp) BE64(!seq) kind
//! ```
//!
//! where `esc` writes a byte string so that byte order of the encodings equals
//! lexicographic order of the strings, and concatenations stay ordered
//! component by component: each 0x00 becomes 0x00 0xFF and the string ends with
//! 0x00 0x01. Timestamps and sequence numbers are stored inverted so that newer
//! versions and newer writes sort first. So every layer — skiplist, SSTable
//! block search, block index, merge — orders keys with a plain `memcmp`.
//!
//! Tombstones sort before the cells they cover: a row tombstone has an empty
//! family (real families are non-empty), family and column tombstones have
//! timestamp [`TOMBSTONE_TS`], which user timestamps never reach. A tombstone
//! hides only entries with a *lower* sequence number, so a write made after a
//! delete is visible whatever its timestamp (Cloud Bigtable's semantics, not
//! HBase's).

use std::cmp::Ordering;

/// Microseconds since the Unix epoch.
pub type Timestamp = u64;
/// Sequence number of one mutation op; assigned by the tablet server in commit order.
pub type SeqNo = u64;

/// The largest timestamp a user may write (Cloud Bigtable's i64 range).
pub const MAX_TIMESTAMP: Timestamp = i64::MAX as u64;
/// The timestamp slot used by family and column tombstones (sorts before every cell).
pub const TOMBSTONE_TS: Timestamp = u64::MAX;
/// The largest sequence number; seeking with it lands before every entry of a column/time.
pub const MAX_SEQ: SeqNo = u64::MAX;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// A cell value.
    Put = 1,
    /// Hides every cell of the row with a lower sequence number.
    DeleteRow = 2,
    /// Hides every cell of the family in this row with a lower sequence number.
    DeleteFamily = 3,
    /// Hides cells of one column whose timestamp lies in the range held in the
    /// value (two BE64: start inclusive, end exclusive), with a lower sequence number.
    DeleteColumn = 4,
}

impl Kind {
    /// The kind stored as byte `b`; `None` for an unknown byte.
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Put),
            2 => Some(Kind::DeleteRow),
            3 => Some(Kind::DeleteFamily),
            4 => Some(Kind::DeleteColumn),
            _ => None,
        }
    }
    /// Whether the entry hides others rather than holding a value.
    pub fn is_tombstone(self) -> bool {
        self != Kind::Put
    }
}

/// Appends the order-preserving escaped form of `s` to `out`.
pub fn escape_into(s: &[u8], out: &mut Vec<u8>) {
    out.reserve(s.len() + 2);
    // Runs without zeros are copied whole: most keys have none.
    let mut runs = s.split(|&b| b == 0);
    if let Some(first) = runs.next() {
        out.extend_from_slice(first);
    }
    for run in runs {
        out.extend_from_slice(&[0x00, 0xFF]);
        out.extend_from_slice(run);
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Decodes one escaped component from the front of `buf`; returns it and the rest.
fn unescape(buf: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    // Most components hold no zero byte: one exact copy.
    let pos = buf.iter().position(|&b| b == 0)?;
    if *buf.get(pos + 1)? == 0x01 {
        return Some((buf[..pos].to_vec(), &buf[pos + 2..]));
    }
    let mut out = Vec::with_capacity(buf.len());
    let rest = unescape_into(buf, &mut out)?;
    Some((out, rest))
}

/// As [`unescape`], appending the component to `out`: the runs between
/// escaped zeros are copied whole.
fn unescape_into<'a>(buf: &'a [u8], out: &mut Vec<u8>) -> Option<&'a [u8]> {
    let mut rest = buf;
    loop {
        let pos = rest.iter().position(|&b| b == 0)?;
        out.extend_from_slice(&rest[..pos]);
        match *rest.get(pos + 1)? {
            0xFF => {
                out.push(0);
                rest = &rest[pos + 2..];
            }
            0x01 => return Some(&rest[pos + 2..]),
            _ => return None,
        }
    }
}

/// Length of the escaped component at the front of `buf` (terminator
/// included), and whether it escapes no zero (its bytes before the
/// terminator are then the component itself).
fn escaped_len(buf: &[u8]) -> Option<(usize, bool)> {
    let mut i = 0;
    loop {
        let pos = i + buf.get(i..)?.iter().position(|&b| b == 0)?;
        match *buf.get(pos + 1)? {
            0xFF => i = pos + 2,
            0x01 => return Some((pos + 2, i == 0)),
            _ => return None,
        }
    }
}

/// The encoded prefix shared by every key of a row: `esc(row)`.
pub fn row_prefix(row: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(row.len() + 2);
    escape_into(row, &mut v);
    v
}

/// The encoded prefix shared by every key of one column: `esc(row) esc(family) esc(qualifier)`.
pub fn column_prefix(row: &[u8], family: &[u8], qualifier: &[u8]) -> Vec<u8> {
    column_prefix_with_room(row, family, qualifier, 0)
}

/// [`column_prefix`] in a buffer with room for `more` bytes after it.
fn column_prefix_with_room(row: &[u8], family: &[u8], qualifier: &[u8], more: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(row.len() + family.len() + qualifier.len() + 6 + more);
    escape_into(row, &mut v);
    escape_into(family, &mut v);
    escape_into(qualifier, &mut v);
    v
}

/// The encoded prefix shared by every key of one family in a row.
pub fn family_prefix(row: &[u8], family: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(row.len() + family.len() + 4);
    escape_into(row, &mut v);
    escape_into(family, &mut v);
    v
}

/// Encodes a full internal key.
pub fn encode(
    row: &[u8],
    family: &[u8],
    qualifier: &[u8],
    ts: Timestamp,
    seq: SeqNo,
    kind: Kind,
) -> Vec<u8> {
    // Room for the trailer too: growing the buffer for it had been a
    // reallocation per write (about 1% of a sequential fill's samples).
    let mut v = column_prefix_with_room(row, family, qualifier, TRAILER_LEN);
    v.extend_from_slice(&(!ts).to_be_bytes());
    v.extend_from_slice(&(!seq).to_be_bytes());
    v.push(kind as u8);
    v
}

/// The smallest key of a row: seek here to read the row from its start.
pub fn row_start(row: &[u8]) -> Vec<u8> {
    row_prefix(row)
}

/// The smallest key strictly after every key of `row` (for exclusive bounds and skipping).
pub fn row_end(row: &[u8]) -> Vec<u8> {
    prefix_end(&row_prefix(row))
}

/// The smallest key after every key that starts with the escaped prefix
/// `enc` (which ends in the terminator `00 01`). Every such key continues with
/// `00 01 <more>`, so replacing the final 01 by 02 gives a key above them all
/// and below the next prefix (whose escaped form differs before that point or
/// is longer).
pub fn prefix_end(enc: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    prefix_end_into(enc, &mut v);
    v
}

/// [`prefix_end`] into `out` (its old contents dropped, its buffer kept).
pub fn prefix_end_into(enc: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(enc);
    if let Some(last) = out.last_mut() {
        *last = 0x02;
    }
}

/// The smallest key strictly after every key of one column.
pub fn column_end(row: &[u8], family: &[u8], qualifier: &[u8]) -> Vec<u8> {
    prefix_end(&column_prefix(row, family, qualifier))
}

/// A decoded view of an internal key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    /// The row key.
    pub row: Vec<u8>,
    /// The column family (empty for a row tombstone).
    pub family: Vec<u8>,
    /// The column qualifier.
    pub qualifier: Vec<u8>,
    /// The version's timestamp.
    pub timestamp: Timestamp,
    /// The sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: Kind,
}

impl ParsedKey {
    /// The internal key these parts make (see [`encode`]).
    pub fn encode(&self) -> Vec<u8> {
        encode(
            &self.row,
            &self.family,
            &self.qualifier,
            self.timestamp,
            self.seq,
            self.kind,
        )
    }
}

/// Decodes an internal key; `None` if the bytes are not a well-formed key.
pub fn decode(key: &[u8]) -> Option<ParsedKey> {
    let (row, rest) = unescape(key)?;
    let (family, rest) = unescape(rest)?;
    let (qualifier, rest) = unescape(rest)?;
    let (ts, seq, kind) = decode_trailer(rest)?;
    Some(ParsedKey {
        row,
        family,
        qualifier,
        timestamp: ts,
        seq,
        kind,
    })
}

/// Borrowed split of an internal key into its encoded parts, without copying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyParts<'a> {
    /// `esc(row)`: equal rows have equal `row_enc`.
    pub row_enc: &'a [u8],
    /// `esc(family)`: the family component alone (`esc("")` for row tombstones).
    pub family_enc: &'a [u8],
    /// `esc(row) esc(family) esc(qualifier)`: equal columns have equal `column_enc`.
    pub column_enc: &'a [u8],
    /// The version's timestamp.
    pub timestamp: Timestamp,
    /// The sequence number of the write.
    pub seq: SeqNo,
    /// What the entry is.
    pub kind: Kind,
    /// No component escapes a zero: each decodes to its bytes before the
    /// terminator (see [`plain_component`]), with no second look.
    pub plain: bool,
}

/// Splits an internal key without decoding its strings.
pub fn split(key: &[u8]) -> Option<KeyParts<'_>> {
    let (r, row_plain) = escaped_len(key)?;
    let (f, family_plain) = escaped_len(&key[r..])?;
    let f = r + f;
    let (q, qualifier_plain) = escaped_len(&key[f..])?;
    let q = f + q;
    let (timestamp, seq, kind) = decode_trailer(&key[q..])?;
    Some(KeyParts {
        row_enc: &key[..r],
        family_enc: &key[r..f],
        column_enc: &key[..q],
        timestamp,
        seq,
        kind,
        plain: row_plain && family_plain && qualifier_plain,
    })
}

/// The component `enc` (one whole escaped component, terminator included)
/// of a key whose components escape no zero ([`KeyParts::plain`]): its
/// bytes before the terminator, with no decoding.
pub fn plain_component(enc: &[u8]) -> &[u8] {
    &enc[..enc.len().saturating_sub(2)]
}

/// Bytes after a key's column: timestamp, sequence, kind.
pub const TRAILER_LEN: usize = 17;

/// Decodes the [`TRAILER_LEN`] bytes that follow a key's column:
/// (timestamp, sequence, kind). `None` if `rest` is not exactly such a trailer.
pub fn decode_trailer(rest: &[u8]) -> Option<(Timestamp, SeqNo, Kind)> {
    let t: &[u8; TRAILER_LEN] = rest.try_into().ok()?;
    let ts = !u64::from_be_bytes(t[0..8].try_into().ok()?);
    let seq = !u64::from_be_bytes(t[8..16].try_into().ok()?);
    Some((ts, seq, Kind::from_u8(t[16])?))
}

/// Decodes an escaped row prefix (as returned in [`KeyParts::row_enc`]).
pub fn decode_row(row_enc: &[u8]) -> Option<Vec<u8>> {
    unescape(row_enc).map(|(r, _)| r)
}

/// As [`decode_row`], into `out` (cleared first): no allocation once `out`
/// has room.
pub fn decode_row_into(row_enc: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    unescape_into(row_enc, out).is_some()
}

/// Adds `base` to the sequence number stored in an encoded key, in place.
///
/// Writers encode their entries before they know where the commit order will
/// put them (sequence numbers 0, 1, … per op); the group-commit leader shifts
/// them to their final numbers without re-encoding.
pub fn rebase_seq(key: &mut [u8], base: SeqNo) -> Option<SeqNo> {
    let n = key.len();
    let slot: &mut [u8] = key.get_mut(n.checked_sub(9)?..n - 1)?;
    let seq = (!u64::from_be_bytes((&*slot).try_into().ok()?)).checked_add(base)?;
    slot.copy_from_slice(&(!seq).to_be_bytes());
    Some(seq)
}

/// Byte order of two keys (or rows), as `a.cmp(b)`, eight bytes at a time
/// and inline. The checks every point read makes of short keys (a row
/// against its tablet's and location's bounds, a lookup's key against a
/// file's range, the index and the entries it meets) went through the C
/// library's `memcmp`, whose vector path for a dozen bytes cost more than
/// the comparison: on a 2-core AMD EPYC VM the tablet's bounds check alone
/// was 8% of a cached sequential point read. A long key (a row may reach
/// 64 KiB, though rows are mostly tens of bytes) compares slower than with
/// `memcmp`'s vectors, never wrongly.
#[inline]
pub fn compare(a: &[u8], b: &[u8]) -> Ordering {
    let (mut x, mut y) = (a, b);
    while let (Some((p, xs)), Some((q, ys))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        if p != q {
            return u64::from_be_bytes(*p).cmp(&u64::from_be_bytes(*q));
        }
        (x, y) = (xs, ys);
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    x.len().cmp(&y.len())
}

/// `a == b`, compared as [`compare`] does.
#[inline]
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && compare(a, b) == Ordering::Equal
}

/// `a < b` in byte order ([`compare`]).
#[inline]
pub fn less(a: &[u8], b: &[u8]) -> bool {
    compare(a, b) == Ordering::Less
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_orders_as_slices_do() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let pick = |rng: &mut rand::rngs::StdRng| -> Vec<u8> {
            let len = rng.gen_range(0..40);
            (0..len)
                .map(|_| [0u8, 1, b'a', 0x7f, 0x80, 0xff][rng.gen_range(0..6)])
                .collect()
        };
        for _ in 0..20_000 {
            let a = pick(&mut rng);
            // Often a prefix of `a` or `a` with one byte changed: ties
            // through whole words, then a difference in the tail.
            let mut b = match rng.gen_range(0..3) {
                0 => pick(&mut rng),
                1 => a[..rng.gen_range(0..=a.len())].to_vec(),
                _ => a.clone(),
            };
            if !b.is_empty() && rng.gen_bool(0.5) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            assert_eq!(compare(&a, &b), a.cmp(&b), "{a:?} {b:?}");
            assert_eq!(less(&a, &b), a < b, "{a:?} {b:?}");
            assert_eq!(equal(&a, &b), a == b, "{a:?} {b:?}");
        }
    }

    #[test]
    fn encode_allocates_once() {
        // A key without zero bytes fills exactly the buffer it was given:
        // the trailer did not make it grow (a reallocation per write).
        let k = encode(b"row00000000001", b"cf", b"0", 42, 7, Kind::Put);
        assert_eq!(k.len(), 14 + 2 + 2 + 2 + 1 + 2 + TRAILER_LEN);
        assert_eq!(k.capacity(), k.len());
    }

    #[test]
    fn roundtrip() {
        let k = encode(b"r\0w", b"fam", b"q\0", 42, 7, Kind::Put);
        let p = decode(&k).unwrap();
        assert_eq!(p.row, b"r\0w");
        assert_eq!(p.family, b"fam");
        assert_eq!(p.qualifier, b"q\0");
        assert_eq!(p.timestamp, 42);
        assert_eq!(p.seq, 7);
        assert_eq!(p.kind, Kind::Put);
        let s = split(&k).unwrap();
        assert_eq!(decode_row(s.row_enc).unwrap(), b"r\0w");
        assert_eq!(s.seq, 7);
        assert_eq!(s.family_enc, row_prefix(b"fam").as_slice());
    }

    #[test]
    fn components_with_zeros_anywhere_decode() {
        for row in [
            &b""[..],
            b"\0",
            b"\0\0",
            b"a\0",
            b"\0a",
            b"a\0\0b\0",
            b"plain",
        ] {
            let k = encode(row, b"f\0", row, 1, 1, Kind::Put);
            let p = decode(&k).unwrap();
            assert_eq!(p.row, row);
            assert_eq!(p.family, b"f\0");
            assert_eq!(p.qualifier, row);
            let s = split(&k).unwrap();
            let mut out = b"junk".to_vec();
            assert!(decode_row_into(s.row_enc, &mut out));
            assert_eq!(out, row);
        }
        // A key is plain only when no component escapes a zero; then each
        // component is its bytes before the terminator.
        for (row, family, qualifier) in [
            (&b"r"[..], &b"f"[..], &b""[..]),
            (b"", b"f", b"q"),
            (b"r\0", b"f", b"q"),
            (b"r", b"f", b"\0q"),
            (b"r", b"\0", b"q"),
        ] {
            let k = encode(row, family, qualifier, 1, 1, Kind::Put);
            let s = split(&k).unwrap();
            let zeros = [row, family, qualifier].iter().any(|c| c.contains(&0));
            assert_eq!(s.plain, !zeros, "{row:?} {family:?} {qualifier:?}");
            if s.plain {
                assert_eq!(plain_component(s.row_enc), row);
                assert_eq!(plain_component(s.family_enc), family);
                let q = &s.column_enc[s.row_enc.len() + s.family_enc.len()..];
                assert_eq!(plain_component(q), qualifier);
            }
        }
        // A zero followed by neither escape nor terminator is refused.
        assert_eq!(decode_row(b"a\0\x02"), None);
        assert_eq!(decode_row(b"a\0"), None);
    }

    #[test]
    fn order_matches_model() {
        let rows: Vec<&[u8]> = vec![
            b"", b"\0", b"\0\0", b"\0a", b"a", b"a\0", b"ab", b"b", b"\xff",
        ];
        for a in &rows {
            for b in &rows {
                let ka = encode(a, b"f", b"q", 1, 1, Kind::Put);
                let kb = encode(b, b"f", b"q", 1, 1, Kind::Put);
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
                assert!(row_end(a) > ka);
                if a < b {
                    assert!(row_end(a) <= row_start(b), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn newer_first_and_tombstones_first() {
        let old = encode(b"r", b"f", b"q", 1, 1, Kind::Put);
        let new = encode(b"r", b"f", b"q", 2, 1, Kind::Put);
        assert!(new < old);
        let later_write = encode(b"r", b"f", b"q", 1, 2, Kind::Put);
        assert!(later_write < old);
        let col_tomb = encode(b"r", b"f", b"q", TOMBSTONE_TS, 0, Kind::DeleteColumn);
        assert!(col_tomb < new);
        let fam_tomb = encode(b"r", b"f", b"", TOMBSTONE_TS, 0, Kind::DeleteFamily);
        assert!(fam_tomb < col_tomb);
        let row_tomb = encode(b"r", b"", b"", TOMBSTONE_TS, 0, Kind::DeleteRow);
        assert!(row_tomb < fam_tomb);
        assert!(row_tomb >= row_start(b"r"));
    }

    #[test]
    fn rebase() {
        let mut k = encode(b"r", b"f", b"q", 5, 3, Kind::Put);
        assert_eq!(rebase_seq(&mut k, 100), Some(103));
        let p = decode(&k).unwrap();
        assert_eq!((p.timestamp, p.seq, p.kind), (5, 103, Kind::Put));
        assert_eq!(rebase_seq(&mut [1, 2], 1), None);
    }

    #[test]
    fn malformed_keys_rejected() {
        assert!(decode(b"").is_none());
        assert!(decode(b"abc").is_none());
        let mut k = encode(b"r", b"f", b"q", 1, 1, Kind::Put);
        k.push(0);
        assert!(decode(&k).is_none());
        assert!(split(&k).is_none());
    }
}
