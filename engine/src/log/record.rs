//! The logical record of the commit log: one row mutation of one table.
//!
//! ```text
//! tag: u8 = 1                  (room for other record kinds later)
//! varint table_len, table (UTF-8)
//! varint n
//! n × { varint key_len, key, varint value_len, value }
//! ```
//!
//! Keys are internal keys ([`crate::key`]) already carrying their sequence
//! numbers, so replay needs nothing else to rebuild the memtable.

use crate::key::{self, SeqNo};
use crate::{Error, Result};

const TAG_ROW_MUTATION: u8 = 1;

/// One row mutation: applied atomically on replay.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogRecord {
    /// The table the mutation belongs to.
    pub table: String,
    /// Internal key / value pairs.
    pub entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl LogRecord {
    /// The record's bytes as the log stores them.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_noting(&mut Vec::new())
    }

    /// Encodes the record while its keys carry sequence numbers counted from
    /// 0; [`Encoded::rebase`] later turns them into the batch's numbers, so
    /// the commit lock covers no encoding. Fails like [`LogRecord::seq_range`].
    pub fn encode_ahead(&self) -> Result<Encoded> {
        if self.seq_range().is_none() {
            return Err(Error::invalid(format!(
                "log record for table {:?} has no entries or a malformed key",
                self.table
            )));
        }
        let mut key_ends = Vec::with_capacity(self.entries.len());
        let payload = self.encode_noting(&mut key_ends);
        Ok(Encoded { payload, key_ends })
    }

    /// Encodes, noting where each key ends in the output.
    fn encode_noting(&self, key_ends: &mut Vec<usize>) -> Vec<u8> {
        let size = 1
            + 10
            + self.table.len()
            + 10
            + self
                .entries
                .iter()
                .map(|(k, v)| k.len() + v.len() + 20)
                .sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.push(TAG_ROW_MUTATION);
        put_bytes(&mut out, self.table.as_bytes());
        put_varint(&mut out, self.entries.len() as u64);
        for (k, v) in &self.entries {
            put_bytes(&mut out, k);
            key_ends.push(out.len());
            put_bytes(&mut out, v);
        }
        out
    }

    /// Decodes a payload; any malformation is [`Error::Corruption`].
    pub fn decode(buf: &[u8]) -> Result<LogRecord> {
        let mut r = Cursor { buf };
        let tag = r.byte()?;
        if tag != TAG_ROW_MUTATION {
            return Err(Error::corruption(format!("log record: unknown tag {tag}")));
        }
        let table = String::from_utf8(r.bytes()?.to_vec())
            .map_err(|_| Error::corruption("log record: table name is not UTF-8"))?;
        let n = r.varint()?;
        // Each entry takes at least two bytes: never trust `n` for allocation.
        let cap = usize::try_from(n)
            .unwrap_or(usize::MAX)
            .min(r.buf.len() / 2);
        let mut entries = Vec::with_capacity(cap);
        for _ in 0..n {
            let k = r.bytes()?.to_vec();
            let v = r.bytes()?.to_vec();
            entries.push((k, v));
        }
        if !r.buf.is_empty() {
            return Err(Error::corruption(format!(
                "log record: {} trailing bytes",
                r.buf.len()
            )));
        }
        Ok(LogRecord { table, entries })
    }

    /// The lowest and highest sequence numbers of the entries, or `None` if
    /// there are no entries or a key is not a well-formed internal key.
    pub fn seq_range(&self) -> Option<(SeqNo, SeqNo)> {
        let mut range: Option<(SeqNo, SeqNo)> = None;
        for (k, _) in &self.entries {
            let s = key::split(k)?.seq;
            range = Some(match range {
                None => (s, s),
                Some((lo, hi)) => (lo.min(s), hi.max(s)),
            });
        }
        range
    }
}

/// A record's payload encoded ahead of its sequence numbers (see
/// [`LogRecord::encode_ahead`]).
#[derive(Debug, Clone)]
pub struct Encoded {
    payload: Vec<u8>,
    /// Where each key ends in `payload`: its sequence number is the 8
    /// bytes before its last.
    key_ends: Vec<usize>,
}

impl Encoded {
    /// Adds `base` to every key's sequence number, as
    /// [`key::rebase_seq`] does to the keys themselves. Returns the
    /// highest number, or None on overflow.
    pub fn rebase(&mut self, base: SeqNo) -> Option<SeqNo> {
        let mut hi = None;
        for &end in &self.key_ends {
            let seq = key::rebase_seq(self.payload.get_mut(..end)?, base)?;
            hi = hi.max(Some(seq));
        }
        hi
    }

    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }
}

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

struct Cursor<'a> {
    buf: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn byte(&mut self) -> Result<u8> {
        let (&b, rest) = self
            .buf
            .split_first()
            .ok_or_else(|| Error::corruption("log record: truncated"))?;
        self.buf = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7F);
            if shift == 63 && bits > 1 {
                return Err(Error::corruption("log record: varint overflows 64 bits"));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corruption("log record: varint too long"))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.varint()?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or_else(|| Error::corruption("log record: length past end"))?;
        let (b, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::Kind;

    fn sample() -> LogRecord {
        LogRecord {
            table: "webtable".into(),
            entries: vec![
                (
                    key::encode(b"row", b"f", b"q", 5, 9, Kind::Put),
                    b"v".to_vec(),
                ),
                (
                    key::encode(b"row", b"", b"", u64::MAX, 7, Kind::DeleteRow),
                    Vec::new(),
                ),
                (
                    key::encode(b"row", b"f", b"big", 1, 8, Kind::Put),
                    vec![0xAB; 300],
                ),
            ],
        }
    }

    #[test]
    fn a_record_encoded_ahead_and_rebased_is_the_rebased_record_encoded() {
        let r = sample();
        let mut ahead = r.encode_ahead().unwrap();
        assert_eq!(ahead.clone().into_payload(), r.encode());
        assert_eq!(ahead.rebase(1000), Some(1009));
        let mut rebased = r.clone();
        for (k, _) in rebased.entries.iter_mut() {
            key::rebase_seq(k, 1000).unwrap();
        }
        assert_eq!(ahead.into_payload(), rebased.encode());
        // What the log would refuse is refused before any lock is taken.
        assert!(LogRecord::default().encode_ahead().is_err());
        let bad = LogRecord {
            table: "t".into(),
            entries: vec![(b"not a key".to_vec(), vec![])],
        };
        assert!(bad.encode_ahead().is_err());
    }

    #[test]
    fn roundtrip_and_seq_range() {
        let r = sample();
        let enc = r.encode();
        assert_eq!(LogRecord::decode(&enc).unwrap(), r);
        assert_eq!(r.seq_range(), Some((7, 9)));
        assert_eq!(LogRecord::default().seq_range(), None);
        let bad = LogRecord {
            table: "t".into(),
            entries: vec![(b"not a key".to_vec(), vec![])],
        };
        assert_eq!(bad.seq_range(), None);
    }

    #[test]
    fn varint_edges() {
        for v in [0, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Cursor { buf: &b }.varint().unwrap(), v);
        }
        // 10 bytes whose last carries more than the 64th bit.
        let over = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F];
        assert!(Cursor { buf: &over }.varint().is_err());
        assert!(Cursor { buf: &[0x80; 11] }.varint().is_err());
    }

    #[test]
    fn garbage_is_corruption_never_panic() {
        let enc = sample().encode();
        for cut in 0..enc.len() {
            assert!(matches!(
                LogRecord::decode(&enc[..cut]),
                Err(Error::Corruption(_))
            ));
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(LogRecord::decode(&extra).is_err());
        // Huge entry count with no data must not allocate or panic.
        let mut b = vec![TAG_ROW_MUTATION, 1, b't'];
        put_varint(&mut b, u64::MAX);
        assert!(LogRecord::decode(&b).is_err());
        // Invalid UTF-8 table name.
        assert!(LogRecord::decode(&[TAG_ROW_MUTATION, 1, 0xFF, 0]).is_err());
        // Pseudo-random garbage.
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in 0..200 {
            let g: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = LogRecord::decode(&g);
        }
    }
}
