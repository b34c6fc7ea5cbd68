//! A backup's record in its store: the snapshot's manifest, as taken, and
//! for each SSTable it names the object holding its bytes there, with their
//! size and checksum. The bytes are in docs/formats/backup.md. A record is
//! written last, whole: a backup whose record is absent is not there.

use crate::coding::{frame, put_bytes, put_str, put_varint, unframe, Decoder};
use crate::metadata::SstMeta;
use crate::snapshot::Manifest;
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"btback1\n";
const VERSION: u8 = 1;
/// The most a record may weigh (as a manifest, plus a line per file).
pub const MAX_BYTES: u64 = 512 << 20;

/// One SSTable as the backup store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFile {
    /// Its number in the table's store (the manifest names it so).
    pub number: u64,
    /// The object holding its bytes in the backup store.
    pub key: String,
    /// Its bytes.
    pub size: u64,
    /// XXH3-64 of its bytes, checked when it is copied back.
    pub xxh3: u64,
}

/// A backup: the snapshot and where its files are.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The snapshot, as its table's store had it (file numbers included).
    pub manifest: Manifest,
    /// Where each file it names is, one per file.
    pub files: Vec<BackupFile>,
}

/// The object a file is kept under in a backup store. The number is unique
/// in its table's store; the hash of what METADATA knows of it (size,
/// entries, keys, sequence) tells apart files of two stores that back up
/// to one place, and two backups of one file share the object.
pub fn file_key(f: &SstMeta) -> String {
    let mut b = Vec::new();
    put_varint(&mut b, f.number);
    put_varint(&mut b, f.size);
    put_varint(&mut b, f.entries);
    put_varint(&mut b, f.max_seq);
    put_bytes(&mut b, &f.smallest);
    put_bytes(&mut b, &f.largest);
    format!(
        "files/{:016}.{:016x}.sst",
        f.number,
        xxhash_rust::xxh3::xxh3_64(&b)
    )
}

impl Record {
    /// The record's bytes: magic, the body's checksum, the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = vec![VERSION];
        put_bytes(&mut body, &self.manifest.encode());
        put_varint(&mut body, self.files.len() as u64);
        for f in &self.files {
            put_varint(&mut body, f.number);
            put_str(&mut body, &f.key);
            put_varint(&mut body, f.size);
            body.extend_from_slice(&f.xxh3.to_le_bytes());
        }
        frame(MAGIC, &body)
    }

    /// Parses a record (Error::Corruption if damaged).
    pub fn decode(buf: &[u8]) -> Result<Record> {
        let bad = |why: &str| Error::corruption(format!("backup record: {why}"));
        let body = unframe(buf, MAGIC, "backup record")?;
        let mut d = Decoder::new(body, "backup record");
        let version = d.u8()?;
        if version != VERSION {
            return Err(bad(&format!("unknown format {version}")));
        }
        let manifest = Manifest::decode(d.bytes()?)?;
        let n = d.varint()?;
        let mut files = Vec::new();
        for _ in 0..n {
            if d.is_empty() {
                return Err(bad("truncated file list"));
            }
            let number = d.varint()?;
            let key = d.string()?;
            let size = d.varint()?;
            let mut h = [0u8; 8];
            for b in &mut h {
                *b = d.u8()?;
            }
            files.push(BackupFile {
                number,
                key,
                size,
                xxh3: u64::from_le_bytes(h),
            });
        }
        // Anything after the files is a later field: skipped.
        let named: std::collections::HashSet<u64> = files.iter().map(|f| f.number).collect();
        if manifest.files().iter().any(|n| !named.contains(n)) {
            return Err(bad("a file of the snapshot has no copy"));
        }
        Ok(Record { manifest, files })
    }

    /// Bytes of the files it names.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::TabletMeta;
    use crate::schema::TableSchema;
    use crate::snapshot::SnapTablet;

    fn record() -> Record {
        let f = SstMeta {
            number: 7,
            size: 100,
            ..Default::default()
        };
        let manifest = Manifest {
            name: "b".into(),
            table: "t".into(),
            table_id: 3,
            taken_micros: 5,
            schema: TableSchema::default(),
            tablets: vec![SnapTablet {
                cut: 9,
                meta: TabletMeta {
                    id: 1,
                    table: 3,
                    start: vec![],
                    end: None,
                    files: vec![f.clone()],
                    redo: None,
                },
            }],
            expire_micros: None,
            cluster: None,
        };
        Record {
            manifest,
            files: vec![BackupFile {
                number: 7,
                key: file_key(&f),
                size: 100,
                xxh3: 42,
            }],
        }
    }

    #[test]
    fn round_trips_and_refuses_damage() {
        let r = record();
        let b = r.encode();
        assert_eq!(Record::decode(&b).unwrap(), r);
        for cut in [0, 8, 20, b.len() - 1] {
            assert!(Record::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut flipped = b.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(Record::decode(&flipped).is_err());
        // A record that leaves a file of its snapshot out is refused.
        let mut short = r.clone();
        short.files.clear();
        assert!(Record::decode(&short.encode()).is_err());
    }
}
