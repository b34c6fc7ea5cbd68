//! The namespace mutations that are logged. Each record carries every value
//! its effect depends on (ids, generations, times) so that replay is exact.

use crate::codec::{Reader, Writer};
use crate::error::{Error, Result};
use crate::types::{NodeId, NodeKind};

/// A node made by `Record::Create`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewNode {
    pub id: NodeId,
    pub parent: NodeId,
    pub name: String,
    pub kind: NodeKind,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub ephemeral: bool,
    pub lock_delay_ms: u64,
    /// A fresh generation, so a recreated node never repeats an old one.
    pub lock_gen: u64,
    pub time_ns: u64,
}

impl NewNode {
    fn encode(&self, w: &mut Writer) {
        w.u64(self.id);
        w.u64(self.parent);
        w.str(&self.name);
        encode_kind(w, self.kind);
        w.u32(self.uid);
        w.u32(self.gid);
        w.u32(self.mode);
        w.bool(self.ephemeral);
        w.u64(self.lock_delay_ms);
        w.u64(self.lock_gen);
        w.u64(self.time_ns);
    }

    fn decode(r: &mut Reader<'_>) -> Result<NewNode> {
        Ok(NewNode {
            id: r.u64()?,
            parent: r.u64()?,
            name: r.string()?,
            kind: decode_kind(r)?,
            uid: r.u32()?,
            gid: r.u32()?,
            mode: r.u32()?,
            ephemeral: r.bool()?,
            lock_delay_ms: r.u64()?,
            lock_gen: r.u64()?,
            time_ns: r.u64()?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Create(NewNode),
    SetContents {
        id: NodeId,
        data: Vec<u8>,
        generation: u64,
        time_ns: u64,
    },
    /// Unlink or rmdir.
    Remove {
        id: NodeId,
        time_ns: u64,
    },
    /// Moves a node, replacing whatever `new_parent/new_name` held.
    Rename {
        id: NodeId,
        new_parent: NodeId,
        new_name: String,
        time_ns: u64,
    },
    SetAttr {
        id: NodeId,
        uid: u32,
        gid: u32,
        mode: u32,
        time_ns: u64,
    },
    SetLockDelay {
        id: NodeId,
        lock_delay_ms: u64,
        time_ns: u64,
    },
    SetEphemeral {
        id: NodeId,
        ephemeral: bool,
        time_ns: u64,
    },
    /// A writer-mode acquisition: generations must never go backwards.
    LockGeneration {
        id: NodeId,
        generation: u64,
    },
}

pub fn encode_kind(w: &mut Writer, kind: NodeKind) {
    w.u8(match kind {
        NodeKind::File => 0,
        NodeKind::Dir => 1,
    });
}

pub fn decode_kind(r: &mut Reader<'_>) -> Result<NodeKind> {
    match r.u8()? {
        0 => Ok(NodeKind::File),
        1 => Ok(NodeKind::Dir),
        k => Err(Error::corruption(format!("bad node kind {k}"))),
    }
}

impl Record {
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Record::Create(n) => {
                w.u8(1);
                n.encode(w);
            }
            Record::SetContents {
                id,
                data,
                generation,
                time_ns,
            } => {
                w.u8(2);
                w.u64(*id);
                w.bytes(data);
                w.u64(*generation);
                w.u64(*time_ns);
            }
            Record::Remove { id, time_ns } => {
                w.u8(3);
                w.u64(*id);
                w.u64(*time_ns);
            }
            Record::Rename {
                id,
                new_parent,
                new_name,
                time_ns,
            } => {
                w.u8(4);
                w.u64(*id);
                w.u64(*new_parent);
                w.str(new_name);
                w.u64(*time_ns);
            }
            Record::SetAttr {
                id,
                uid,
                gid,
                mode,
                time_ns,
            } => {
                w.u8(5);
                w.u64(*id);
                w.u32(*uid);
                w.u32(*gid);
                w.u32(*mode);
                w.u64(*time_ns);
            }
            Record::SetLockDelay {
                id,
                lock_delay_ms,
                time_ns,
            } => {
                w.u8(6);
                w.u64(*id);
                w.u64(*lock_delay_ms);
                w.u64(*time_ns);
            }
            Record::SetEphemeral {
                id,
                ephemeral,
                time_ns,
            } => {
                w.u8(7);
                w.u64(*id);
                w.bool(*ephemeral);
                w.u64(*time_ns);
            }
            Record::LockGeneration { id, generation } => {
                w.u8(8);
                w.u64(*id);
                w.u64(*generation);
            }
        }
    }

    pub fn decode(r: &mut Reader<'_>) -> Result<Record> {
        let rec = match r.u8()? {
            1 => Record::Create(NewNode::decode(r)?),
            2 => Record::SetContents {
                id: r.u64()?,
                data: r.bytes()?.to_vec(),
                generation: r.u64()?,
                time_ns: r.u64()?,
            },
            3 => Record::Remove {
                id: r.u64()?,
                time_ns: r.u64()?,
            },
            4 => Record::Rename {
                id: r.u64()?,
                new_parent: r.u64()?,
                new_name: r.string()?,
                time_ns: r.u64()?,
            },
            5 => Record::SetAttr {
                id: r.u64()?,
                uid: r.u32()?,
                gid: r.u32()?,
                mode: r.u32()?,
                time_ns: r.u64()?,
            },
            6 => Record::SetLockDelay {
                id: r.u64()?,
                lock_delay_ms: r.u64()?,
                time_ns: r.u64()?,
            },
            7 => Record::SetEphemeral {
                id: r.u64()?,
                ephemeral: r.bool()?,
                time_ns: r.u64()?,
            },
            8 => Record::LockGeneration {
                id: r.u64()?,
                generation: r.u64()?,
            },
            t => return Err(Error::corruption(format!("unknown record type {t}"))),
        };
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_round_trips() {
        let recs = vec![
            Record::Create(NewNode {
                id: 5,
                parent: 1,
                name: "master".into(),
                kind: NodeKind::Dir,
                uid: 1000,
                gid: 100,
                mode: 0o1755,
                ephemeral: true,
                lock_delay_ms: 5000,
                lock_gen: 12,
                time_ns: 42,
            }),
            Record::SetContents {
                id: 5,
                data: b"hello".to_vec(),
                generation: 3,
                time_ns: 43,
            },
            Record::Remove { id: 5, time_ns: 44 },
            Record::Rename {
                id: 6,
                new_parent: 1,
                new_name: "x".into(),
                time_ns: 45,
            },
            Record::SetAttr {
                id: 6,
                uid: 1,
                gid: 2,
                mode: 0o600,
                time_ns: 46,
            },
            Record::SetLockDelay {
                id: 6,
                lock_delay_ms: 300,
                time_ns: 47,
            },
            Record::SetEphemeral {
                id: 6,
                ephemeral: false,
                time_ns: 48,
            },
            Record::LockGeneration {
                id: 6,
                generation: 9,
            },
        ];
        for rec in recs {
            let mut w = Writer::default();
            rec.encode(&mut w);
            let mut r = Reader::new(&w.buf);
            assert_eq!(Record::decode(&mut r).unwrap(), rec);
            assert!(r.is_empty());
        }
        assert!(Record::decode(&mut Reader::new(&[99])).is_err());
    }
}
