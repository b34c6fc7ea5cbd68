//! Binary forms of METADATA's values: the SSTables of a tablet and its
//! descriptor. Decoding never trusts a length: every count is checked
//! against the bytes left before anything is allocated.

use crate::coding::{put_bytes, put_str, put_varint, Decoder};
use crate::sstable::TimeRange;
use crate::{Error, Result};

/// The descriptor format written. Version 1 (still read) lacks each file's
/// cell timestamps.
const DESCRIPTOR_VERSION: u8 = 2;

/// What METADATA knows of one SSTable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SstMeta {
    pub number: u64,
    /// Locality group the file belongs to.
    pub group: String,
    pub size: u64,
    pub entries: u64,
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    pub max_seq: u64,
    /// Families with entries (cells or tombstones) in the file.
    pub families: Vec<String>,
    /// Whether the file holds row tombstones.
    pub row_tombstones: bool,
    /// The timestamps of the file's cells. `None` when it has none, or when
    /// the row was written before METADATA recorded them (the file's own
    /// properties may then know them).
    pub timestamps: Option<TimeRange>,
}

/// Where a tablet's unflushed writes are: entries of this tablet with a
/// sequence number above `seq` in the commit log directory `log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redo {
    pub log: String,
    pub seq: u64,
}

/// A tablet's descriptor, the `tablet:info` cell of its METADATA row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabletMeta {
    /// The tablet's id.
    pub id: u64,
    /// Its table's id.
    pub table: u64,
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None` = end of table.
    pub end: Option<Vec<u8>>,
    /// Its SSTables.
    pub files: Vec<SstMeta>,
    /// Set while the tablet may have writes only in a commit log.
    pub redo: Option<Redo>,
}

impl TabletMeta {
    /// Whether `row` falls in the tablet's range.
    pub fn contains(&self, row: &[u8]) -> bool {
        row >= self.start.as_slice() && self.end.as_deref().is_none_or(|e| row < e)
    }

    /// The highest sequence number the tablet's files or redo point know:
    /// a server loading it must assign higher ones.
    pub fn max_seq(&self) -> u64 {
        let files = self.files.iter().map(|f| f.max_seq).max().unwrap_or(0);
        files.max(self.redo.as_ref().map_or(0, |r| r.seq))
    }

    /// The METADATA cell's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![DESCRIPTOR_VERSION];
        put_varint(&mut out, self.id);
        put_varint(&mut out, self.table);
        put_bytes(&mut out, &self.start);
        encode_opt(&mut out, &self.end);
        put_varint(&mut out, self.files.len() as u64);
        for f in &self.files {
            encode_sst(&mut out, f);
        }
        match &self.redo {
            None => out.push(0),
            Some(r) => {
                out.push(1);
                put_str(&mut out, &r.log);
                put_varint(&mut out, r.seq);
            }
        }
        out
    }

    /// Parses a METADATA cell (Error::Corruption if damaged).
    pub fn decode(buf: &[u8]) -> Result<TabletMeta> {
        let mut d = Decoder::new(buf, "METADATA tablet descriptor");
        let version = d.u8()?;
        if !(1..=DESCRIPTOR_VERSION).contains(&version) {
            return Err(Error::corruption(format!(
                "METADATA tablet descriptor: unknown format {version}"
            )));
        }
        let id = d.varint()?;
        let table = d.varint()?;
        let start = d.bytes()?.to_vec();
        let end = decode_opt(&mut d)?;
        let n = d.varint()?;
        let mut files = Vec::new();
        for _ in 0..n {
            if d.is_empty() {
                return Err(Error::corruption(
                    "METADATA tablet descriptor: truncated file list",
                ));
            }
            files.push(decode_sst(&mut d, version)?);
        }
        let redo = if d.bool()? {
            Some(Redo {
                log: d.string()?,
                seq: d.varint()?,
            })
        } else {
            None
        };
        if !d.is_empty() {
            return Err(Error::corruption(
                "METADATA tablet descriptor: trailing bytes",
            ));
        }
        Ok(TabletMeta {
            id,
            table,
            start,
            end,
            files,
            redo,
        })
    }
}

pub(crate) fn encode_sst(out: &mut Vec<u8>, f: &SstMeta) {
    put_varint(out, f.number);
    put_str(out, &f.group);
    put_varint(out, f.size);
    put_varint(out, f.entries);
    put_bytes(out, &f.smallest);
    put_bytes(out, &f.largest);
    put_varint(out, f.max_seq);
    put_varint(out, f.families.len() as u64);
    for fam in &f.families {
        put_str(out, fam);
    }
    out.push(u8::from(f.row_tombstones));
    match f.timestamps {
        None => out.push(0),
        Some(t) => {
            out.push(1);
            put_varint(out, t.min);
            put_varint(out, t.max);
        }
    }
}

/// One file's entry in a descriptor of format `version`.
pub(crate) fn decode_sst(d: &mut Decoder<'_>, version: u8) -> Result<SstMeta> {
    let mut f = SstMeta {
        number: d.varint()?,
        group: d.string()?,
        size: d.varint()?,
        entries: d.varint()?,
        smallest: d.bytes()?.to_vec(),
        largest: d.bytes()?.to_vec(),
        max_seq: d.varint()?,
        families: {
            let n = d.varint()?;
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(d.string()?);
            }
            v
        },
        row_tombstones: d.bool()?,
        timestamps: None,
    };
    if version >= 2 && d.bool()? {
        let (min, max) = (d.varint()?, d.varint()?);
        if min > max {
            return Err(Error::corruption(
                "METADATA tablet descriptor: a file's timestamps are out of order",
            ));
        }
        f.timestamps = Some(TimeRange { min, max });
    }
    Ok(f)
}

fn encode_opt(out: &mut Vec<u8>, b: &Option<Vec<u8>>) {
    match b {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            put_bytes(out, b);
        }
    }
}

fn decode_opt(d: &mut Decoder<'_>) -> Result<Option<Vec<u8>>> {
    Ok(if d.bool()? {
        Some(d.bytes()?.to_vec())
    } else {
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TabletMeta {
        TabletMeta {
            id: 9,
            table: 3,
            start: b"a".to_vec(),
            end: Some(b"m".to_vec()),
            files: vec![
                SstMeta {
                    number: 12,
                    group: "default".into(),
                    size: 100,
                    entries: 4,
                    smallest: b"a".to_vec(),
                    largest: b"l".to_vec(),
                    max_seq: 77,
                    families: vec!["anchor".into()],
                    row_tombstones: false,
                    timestamps: Some(TimeRange {
                        min: 3,
                        max: u64::MAX >> 1,
                    }),
                },
                SstMeta {
                    number: 13,
                    group: "default".into(),
                    row_tombstones: true,
                    ..SstMeta::default()
                },
            ],
            redo: Some(Redo {
                log: "logs/ts-0.1".into(),
                seq: 80,
            }),
        }
    }

    #[test]
    fn descriptors_roundtrip_and_reject_damage() {
        let m = sample();
        let enc = m.encode();
        assert_eq!(TabletMeta::decode(&enc).unwrap(), m);
        assert_eq!(m.max_seq(), 80);
        for cut in 0..enc.len() {
            assert!(TabletMeta::decode(&enc[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = enc.clone();
        long.push(0);
        assert!(TabletMeta::decode(&long).is_err());
        // A file count claiming billions is refused without allocating.
        let mut huge = vec![1u8];
        put_varint(&mut huge, 1);
        put_varint(&mut huge, 1);
        put_bytes(&mut huge, b"");
        huge.push(0);
        put_varint(&mut huge, u64::MAX >> 1);
        assert!(TabletMeta::decode(&huge).is_err());
    }

    /// A descriptor as written before files recorded their timestamps
    /// (format 1), frozen here.
    fn encode_v1(m: &TabletMeta) -> Vec<u8> {
        let mut out = vec![1u8];
        put_varint(&mut out, m.id);
        put_varint(&mut out, m.table);
        put_bytes(&mut out, &m.start);
        encode_opt(&mut out, &m.end);
        put_varint(&mut out, m.files.len() as u64);
        for f in &m.files {
            put_varint(&mut out, f.number);
            put_str(&mut out, &f.group);
            put_varint(&mut out, f.size);
            put_varint(&mut out, f.entries);
            put_bytes(&mut out, &f.smallest);
            put_bytes(&mut out, &f.largest);
            put_varint(&mut out, f.max_seq);
            put_varint(&mut out, f.families.len() as u64);
            for fam in &f.families {
                put_str(&mut out, fam);
            }
            out.push(u8::from(f.row_tombstones));
        }
        out.push(0);
        out
    }

    #[test]
    fn descriptors_written_before_timestamps_still_load_with_them_unknown() {
        let mut m = sample();
        m.redo = None;
        let old = encode_v1(&m);
        let got = TabletMeta::decode(&old).unwrap();
        for f in &mut m.files {
            f.timestamps = None;
        }
        assert_eq!(got, m);
        for cut in 0..old.len() {
            assert!(TabletMeta::decode(&old[..cut]).is_err(), "cut at {cut}");
        }
        // Rewritten, it is the current format.
        assert_eq!(got.encode()[0], DESCRIPTOR_VERSION);
        assert_eq!(TabletMeta::decode(&got.encode()).unwrap(), got);
        // A future format is refused, not misread.
        let mut future = got.encode();
        future[0] = DESCRIPTOR_VERSION + 1;
        assert!(TabletMeta::decode(&future).is_err());
    }
}
