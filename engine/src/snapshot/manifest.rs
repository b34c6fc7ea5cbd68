//! A snapshot's manifest: the table's tablets at the cut, each with its
//! range, its cut and its SSTables, and the table's schema. The bytes are
//! in docs/formats/snapshot.md; a manifest is written whole, then renamed
//! into place (see [`super::store`]).

use crate::coding::{frame, put_bytes, put_str, put_varint, unframe, Decoder};
use crate::metadata::TabletMeta;
use crate::schema::TableSchema;
use crate::{Error, Result};

/// The manifest's first bytes.
const MAGIC: &[u8; 8] = b"btsnap1\n";
/// The body's format.
const VERSION: u8 = 1;
/// Optional fields after the tablets: a tag, then the value as bytes, so
/// a reader skips a tag it does not know.
const FIELD_EXPIRE: u64 = 1;
const FIELD_CLUSTER: u64 = 2;
/// The most a manifest may weigh (a table of about 100k tablets).
pub const MAX_BYTES: u64 = 256 << 20;

/// One tablet as the snapshot keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapTablet {
    /// Its entries committed before the cut are those with a sequence
    /// number up to this (informative: its files hold no later one).
    pub cut: u64,
    /// Its range and files (no redo point: nothing is in a log).
    pub meta: TabletMeta,
}

/// A snapshot of one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Its name, unique within its table.
    pub name: String,
    /// The table's name when the snapshot was taken.
    pub table: String,
    /// The table's id then.
    pub table_id: u64,
    /// When the cut was taken (µs since the epoch, the daemon's clock).
    pub taken_micros: u64,
    /// The table's schema at the cut.
    pub schema: TableSchema,
    /// The tablets, in row order, covering every row once.
    pub tablets: Vec<SnapTablet>,
    /// When the collection deletes it (µs since the epoch); None: never.
    pub expire_micros: Option<u64>,
    /// The cluster a backup was made in, as the gRPC API names it (the
    /// engine does not use it).
    pub cluster: Option<String>,
}

impl Manifest {
    /// Every SSTable number it names (a file shared by split tablets once).
    pub fn files(&self) -> Vec<u64> {
        let mut n: Vec<u64> = self
            .tablets
            .iter()
            .flat_map(|t| t.meta.files.iter().map(|f| f.number))
            .collect();
        n.sort_unstable();
        n.dedup();
        n
    }

    /// Bytes of the SSTables it names, each counted once.
    pub fn bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        self.tablets
            .iter()
            .flat_map(|t| &t.meta.files)
            .filter(|f| seen.insert(f.number))
            .map(|f| f.size)
            .sum()
    }

    /// The file's bytes: magic, the body's checksum, the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = vec![VERSION];
        put_str(&mut body, &self.name);
        put_str(&mut body, &self.table);
        put_varint(&mut body, self.table_id);
        put_varint(&mut body, self.taken_micros);
        put_bytes(&mut body, &self.schema.encode());
        put_varint(&mut body, self.tablets.len() as u64);
        for t in &self.tablets {
            put_varint(&mut body, t.cut);
            put_bytes(&mut body, &t.meta.encode());
        }
        // Absent fields are not written, so a manifest without them has
        // the bytes it had before they existed.
        if let Some(e) = self.expire_micros {
            let mut v = Vec::new();
            put_varint(&mut v, e);
            put_varint(&mut body, FIELD_EXPIRE);
            put_bytes(&mut body, &v);
        }
        if let Some(c) = &self.cluster {
            put_varint(&mut body, FIELD_CLUSTER);
            put_str(&mut body, c);
        }
        frame(MAGIC, &body)
    }

    /// Parses a manifest file (Error::Corruption if damaged).
    pub fn decode(buf: &[u8]) -> Result<Manifest> {
        let bad = |why: &str| Error::corruption(format!("snapshot manifest: {why}"));
        let body = unframe(buf, MAGIC, "snapshot manifest")?;
        let mut d = Decoder::new(body, "snapshot manifest");
        let version = d.u8()?;
        if version != VERSION {
            return Err(bad(&format!("unknown format {version}")));
        }
        let name = d.string()?;
        let table = d.string()?;
        let table_id = d.varint()?;
        let taken_micros = d.varint()?;
        let schema = TableSchema::decode(d.bytes()?)?;
        let n = d.varint()?;
        let mut tablets = Vec::new();
        for _ in 0..n {
            if d.is_empty() {
                return Err(bad("truncated tablet list"));
            }
            let cut = d.varint()?;
            let meta = TabletMeta::decode(d.bytes()?)?;
            tablets.push(SnapTablet { cut, meta });
        }
        let (mut expire_micros, mut cluster) = (None, None);
        while !d.is_empty() {
            let tag = d.varint()?;
            let value = d.bytes()?;
            if tag == FIELD_EXPIRE {
                let mut v = Decoder::new(value, "snapshot manifest expiry");
                expire_micros = Some(v.varint()?);
            } else if tag == FIELD_CLUSTER {
                let c = std::str::from_utf8(value).map_err(|_| bad("cluster is not UTF-8"))?;
                cluster = Some(c.to_string());
            }
        }
        check_cover(tablets.iter().map(|t| &t.meta)).map_err(|e| bad(&e))?;
        Ok(Manifest {
            name,
            table,
            table_id,
            taken_micros,
            schema,
            tablets,
            expire_micros,
            cluster,
        })
    }
}

/// Whether `tablets`, in order, cover every row once: the first starts at
/// the empty row, each starts where the one before ends, the last has no end.
pub fn check_cover<'a>(
    tablets: impl IntoIterator<Item = &'a TabletMeta>,
) -> std::result::Result<(), String> {
    let mut expect: Option<&[u8]> = Some(b"");
    for t in tablets {
        match expect {
            Some(e) if e == t.start.as_slice() => expect = t.end.as_deref(),
            Some(e) => {
                return Err(format!(
                    "tablet {} starts at {:?}, expected {:?}",
                    t.id,
                    String::from_utf8_lossy(&t.start),
                    String::from_utf8_lossy(e)
                ))
            }
            None => return Err(format!("tablet {} lies past the end", t.id)),
        }
    }
    match expect {
        None => Ok(()),
        Some(e) => Err(format!(
            "no tablet from {:?} on",
            String::from_utf8_lossy(e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::SstMeta;
    use crate::schema::FamilySchema;

    fn tablet(id: u64, start: &str, end: Option<&str>, files: &[u64]) -> SnapTablet {
        SnapTablet {
            cut: id * 10,
            meta: TabletMeta {
                id,
                table: 7,
                start: start.as_bytes().to_vec(),
                end: end.map(|e| e.as_bytes().to_vec()),
                files: files
                    .iter()
                    .map(|&number| SstMeta {
                        number,
                        size: 100,
                        group: "default".into(),
                        ..SstMeta::default()
                    })
                    .collect(),
                redo: None,
            },
        }
    }

    fn manifest() -> Manifest {
        Manifest {
            name: "before-upgrade".into(),
            table: "web".into(),
            table_id: 7,
            taken_micros: 1_700_000_000_000_000,
            schema: TableSchema::with_families([FamilySchema::new("f")]),
            tablets: vec![
                tablet(1, "", Some("m"), &[4, 5]),
                tablet(2, "m", None, &[5, 6]),
            ],
            expire_micros: None,
            cluster: None,
        }
    }

    #[test]
    fn expiry_round_trips_and_unknown_fields_are_skipped() {
        let mut m = manifest();
        let plain = m.encode();
        m.expire_micros = Some(1_800_000_000_000_000);
        m.cluster = Some("c1".into());
        let with = m.encode();
        // Without an expiry, the bytes are those of the first format.
        assert_eq!(&with[..plain.len()][16..], &plain[16..]);
        assert_eq!(Manifest::decode(&with).unwrap(), m);
        // A field a later version adds is skipped.
        let mut body = with[16..].to_vec();
        put_varint(&mut body, 99);
        put_bytes(&mut body, b"later");
        let mut later = MAGIC.to_vec();
        later.extend_from_slice(&seahash::hash(&body).to_le_bytes());
        later.extend_from_slice(&body);
        assert_eq!(Manifest::decode(&later).unwrap(), m);
    }

    #[test]
    fn round_trips_and_counts_shared_files_once() {
        let m = manifest();
        let back = Manifest::decode(&m.encode()).unwrap();
        assert_eq!(back, m);
        assert_eq!(m.files(), vec![4, 5, 6]);
        assert_eq!(m.bytes(), 300);
    }

    #[test]
    fn refuses_damage_and_gaps() {
        let bytes = manifest().encode();
        for cut in [0, 8, 16, bytes.len() - 1] {
            assert!(Manifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            Manifest::decode(&flipped),
            Err(Error::Corruption(_))
        ));
        let mut gap = manifest();
        gap.tablets[1].meta.start = b"n".to_vec();
        assert!(Manifest::decode(&gap.encode()).is_err());
        let mut open = manifest();
        open.tablets[1].meta.end = Some(b"z".to_vec());
        assert!(Manifest::decode(&open.encode()).is_err());
    }
}
