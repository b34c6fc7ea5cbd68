//! Snapshots: the whole namespace in one checksummed file, written to a
//! temporary name and renamed into place so a crash leaves the old or the new.
//!
//! File: `[magic: 8][payload len: u64][seahash(payload): u64][payload]`;
//! payload: `seq, next_id, lock_gen_max, count, node images in preorder`.

use crate::disk::Disk;
use std::collections::BTreeMap;

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::namespace::{Body, Meta, Namespace, Node};
use crate::record::{decode_kind, encode_kind};
use crate::types::NodeKind;

const MAGIC: &[u8; 8] = b"CHUBSNP1";

fn encode_node(w: &mut Writer, n: &Node) {
    w.u64(n.id);
    w.u64(n.parent);
    w.str(&n.name);
    encode_kind(w, n.kind());
    let m = &n.meta;
    w.u32(m.uid);
    w.u32(m.gid);
    w.u32(m.mode);
    w.u64(m.mtime_ns);
    w.u64(m.ctime_ns);
    w.u64(m.lock_delay_ms);
    w.bool(m.ephemeral);
    w.u64(m.content_gen);
    w.u64(m.lock_gen);
    if let Body::File(data) = &n.body {
        w.bytes(data);
    }
}

fn decode_node(r: &mut Reader<'_>) -> Result<Node> {
    let id = r.u64()?;
    let parent = r.u64()?;
    let name = r.string()?;
    let kind = decode_kind(r)?;
    let meta = Meta {
        uid: r.u32()?,
        gid: r.u32()?,
        mode: r.u32()?,
        mtime_ns: r.u64()?,
        ctime_ns: r.u64()?,
        lock_delay_ms: r.u64()?,
        ephemeral: r.bool()?,
        content_gen: r.u64()?,
        lock_gen: r.u64()?,
    };
    let body = match kind {
        NodeKind::File => Body::File(r.bytes()?.to_vec()),
        NodeKind::Dir => Body::Dir(BTreeMap::new()),
    };
    Ok(Node {
        id,
        parent,
        name,
        meta,
        body,
    })
}

/// Durably writes `ns` as of log sequence `seq` to the file `name`.
pub fn write(disk: &dyn Disk, name: &str, ns: &Namespace, seq: u64) -> Result<()> {
    let nodes = ns.preorder();
    let mut w = Writer::default();
    w.u64(seq);
    w.u64(ns.next_id());
    w.u64(ns.lock_gen_max());
    w.u64(nodes.len() as u64);
    for n in nodes {
        encode_node(&mut w, n);
    }
    let payload = w.buf;
    let mut file_bytes = Vec::with_capacity(payload.len() + 24);
    file_bytes.extend_from_slice(MAGIC);
    file_bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    file_bytes.extend_from_slice(&seahash::hash(&payload).to_le_bytes());
    file_bytes.extend_from_slice(&payload);

    let tmp = format!("{name}.tmp");
    let ctx = |n: &str| {
        let what = format!("{}/{n}", disk.describe());
        move |e| Error::io(what, e)
    };
    disk.create(&tmp).map_err(ctx(&tmp))?;
    disk.append(&tmp, &file_bytes).map_err(ctx(&tmp))?;
    disk.sync(&tmp).map_err(ctx(&tmp))?;
    disk.rename(&tmp, name).map_err(ctx(name))?;
    disk.sync_dir().map_err(ctx("."))
}

/// Reads a snapshot: `None` if there is none, `(seq, namespace)` otherwise.
/// Snapshots are renamed into place whole, so any damage is `Corruption`.
pub fn read(disk: &dyn Disk, name: &str) -> Result<Option<(u64, Namespace)>> {
    let bytes = match disk.read(name) {
        Ok(Some(b)) => b,
        Ok(None) => return Ok(None),
        Err(e) => return Err(Error::io(format!("{}/{name}", disk.describe()), e)),
    };
    decode(&bytes).map(Some).map_err(|e| match e {
        Error::Corruption(why) => {
            Error::corruption(format!("snapshot {}/{name}: {why}", disk.describe()))
        }
        other => other,
    })
}

/// Parses the bytes of a snapshot file; any damage is `Corruption`.
pub fn decode(bytes: &[u8]) -> Result<(u64, Namespace)> {
    let bad = |what: &str| Error::corruption(what.to_string());
    if bytes.len() < 24 || &bytes[..8] != MAGIC {
        return Err(bad("bad header"));
    }
    let mut hdr = Reader::new(&bytes[8..24]);
    let len = hdr.u64()? as usize;
    let sum = hdr.u64()?;
    let payload = &bytes[24..];
    if payload.len() != len || seahash::hash(payload) != sum {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader::new(payload);
    let seq = r.u64()?;
    let next_id = r.u64()?;
    let lock_gen_max = r.u64()?;
    let count = r.u64()?;
    let mut nodes = Vec::new();
    for _ in 0..count {
        nodes.push(decode_node(&mut r)?);
    }
    if !r.is_empty() {
        return Err(bad("trailing bytes"));
    }
    Ok((seq, Namespace::from_nodes(nodes, next_id, lock_gen_max)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{NewNode, Record};
    use crate::types::ROOT_ID;

    fn sample() -> Namespace {
        let mut ns = Namespace::with_root(Meta::test_root(5000));
        ns.apply(&Record::Create(NewNode {
            id: 2,
            parent: ROOT_ID,
            name: "f".into(),
            kind: NodeKind::File,
            uid: 7,
            gid: 8,
            mode: 0o640,
            ephemeral: false,
            lock_delay_ms: 300,
            lock_gen: 4,
            time_ns: 5,
        }))
        .unwrap();
        ns.apply(&Record::SetContents {
            id: 2,
            data: b"data".to_vec(),
            generation: 1,
            time_ns: 6,
        })
        .unwrap();
        ns
    }

    #[test]
    fn write_read_round_trip_and_damage_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot");
        let disk = crate::disk::LocalDisk::open(dir.path()).unwrap();
        assert!(read(&disk, "snapshot").unwrap().is_none());
        let ns = sample();
        write(&disk, "snapshot", &ns, 42).unwrap();
        let (seq, back) = read(&disk, "snapshot").unwrap().unwrap();
        assert_eq!(seq, 42);
        assert_eq!(back.get(2), ns.get(2));
        assert_eq!(back.path_of(2), "/f");
        assert_eq!(back.lock_gen_max(), 4);
        let mut bytes = std::fs::read(&path).unwrap();
        let n = bytes.len();
        bytes[n - 2] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(read(&disk, "snapshot"), Err(Error::Corruption(_))));
    }

    #[test]
    fn node_names_are_checked_as_replay_checks_them() {
        let dir = tempfile::tempdir().unwrap();
        let disk = crate::disk::LocalDisk::open(dir.path()).unwrap();
        write(&disk, "snapshot", &sample(), 1).unwrap();
        let good = std::fs::read(dir.path().join("snapshot")).unwrap();
        // The node "f": `u32 1` then the name.
        let at = good.windows(5).position(|w| w == b"\x01\0\0\0f").unwrap() + 4;
        for bad in [b'/', b'.', 0] {
            let mut bytes = good.clone();
            bytes[at] = bad;
            let sum = seahash::hash(&bytes[24..]);
            bytes[16..24].copy_from_slice(&sum.to_le_bytes());
            let err = decode(&bytes).err().unwrap();
            assert!(matches!(err, Error::Corruption(_)), "{err}");
        }
    }
}
