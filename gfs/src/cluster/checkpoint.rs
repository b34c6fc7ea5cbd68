//! The master's checkpoint: its whole persistent state in one file, so a
//! restart replays only the log written since.
//!
//! `[magic][seq][next file id][next handle][files...][u64 seahash of all before]`.
//! Written as `checkpoint-<seq>.tmp`, synced, then renamed, so a checkpoint
//! file is always complete; the log written after it is `oplog-<seq>`.

use super::coding::{Decoder, Encoder};

const MAGIC: &[u8; 8] = b"GFSCKPT1";

/// One chunk of a file: handle, version, and its length once sealed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ChunkImage {
    pub(crate) handle: u64,
    pub(crate) version: u64,
    pub(crate) sealed_len: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FileImage {
    pub(crate) id: u64,
    /// `None` for a file in the trash.
    pub(crate) name: Option<String>,
    /// When it was deleted (microseconds since the epoch), for the trash.
    pub(crate) deleted_at: u64,
    pub(crate) chunks: Vec<ChunkImage>,
}

/// The persistent part of the master's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Image {
    pub(crate) seq: u64,
    pub(crate) next_file: u64,
    pub(crate) next_handle: u64,
    pub(crate) files: Vec<FileImage>,
}

pub(crate) fn name(seq: u64) -> String {
    format!("checkpoint-{seq:020}")
}

pub(crate) fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix("checkpoint-")?.parse().ok()
}

pub(crate) fn encode(img: &Image) -> Vec<u8> {
    let mut e = Encoder::default();
    e.buf.extend_from_slice(MAGIC);
    e.u64(img.seq).u64(img.next_file).u64(img.next_handle);
    e.u64(img.files.len() as u64);
    for f in &img.files {
        e.u64(f.id);
        match &f.name {
            Some(n) => e.u8(0).str(n),
            None => e.u8(1).u64(f.deleted_at),
        };
        e.u64(f.chunks.len() as u64);
        for c in &f.chunks {
            e.u64(c.handle)
                .u64(c.version)
                .u64(c.sealed_len.unwrap_or(u64::MAX));
        }
    }
    let h = seahash::hash(&e.buf);
    e.u64(h);
    e.buf
}

pub(crate) fn decode(buf: &[u8]) -> Result<Image, String> {
    if buf.len() < MAGIC.len() + 8 || &buf[..8] != MAGIC {
        return Err("not a checkpoint".into());
    }
    let (body, sum) = buf.split_at(buf.len() - 8);
    let mut h = [0u8; 8];
    h.copy_from_slice(sum);
    if seahash::hash(body) != u64::from_le_bytes(h) {
        return Err("checkpoint checksum mismatch".into());
    }
    let mut d = Decoder::new(&body[8..]);
    let mut img = Image {
        seq: d.u64()?,
        next_file: d.u64()?,
        next_handle: d.u64()?,
        files: Vec::new(),
    };
    let n = d.u64()?;
    for _ in 0..n {
        // Each file takes at least 17 bytes: refuse counts the input cannot hold.
        if d.remaining() < 17 {
            return Err("file count exceeds checkpoint".into());
        }
        let id = d.u64()?;
        let (name, deleted_at) = match d.u8()? {
            0 => (Some(d.str()?), 0),
            1 => (None, d.u64()?),
            t => return Err(format!("bad file kind {t}")),
        };
        let nc = d.u64()?;
        let mut chunks = Vec::new();
        for _ in 0..nc {
            if d.remaining() < 24 {
                return Err("chunk count exceeds checkpoint".into());
            }
            let handle = d.u64()?;
            let version = d.u64()?;
            let sealed = d.u64()?;
            chunks.push(ChunkImage {
                handle,
                version,
                sealed_len: (sealed != u64::MAX).then_some(sealed),
            });
        }
        img.files.push(FileImage {
            id,
            name,
            deleted_at,
            chunks,
        });
    }
    d.done()?;
    Ok(img)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage_detected() {
        let img = Image {
            seq: 4,
            next_file: 10,
            next_handle: 99,
            files: vec![
                FileImage {
                    id: 3,
                    name: Some("sst/000003.sst".into()),
                    deleted_at: 0,
                    chunks: vec![
                        ChunkImage {
                            handle: 5,
                            version: 2,
                            sealed_len: Some(1000),
                        },
                        ChunkImage {
                            handle: 6,
                            version: 1,
                            sealed_len: None,
                        },
                    ],
                },
                FileImage {
                    id: 4,
                    name: None,
                    deleted_at: 123,
                    chunks: vec![],
                },
            ],
        };
        let b = encode(&img);
        assert_eq!(decode(&b).unwrap(), img);
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x20;
            assert!(decode(&c).is_err(), "flip at {i}");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
        assert_eq!(parse_name(&name(7)), Some(7));
    }
}
