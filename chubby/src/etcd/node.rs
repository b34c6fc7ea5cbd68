//! How the cell lies in etcd: the key of each node, lock waiter and
//! dead-holder marker under the prefix, and the value of a node key (one
//! text line of metadata, then the contents).
//!
//! ```text
//! P/n/a/b            node /a/b ("P/n/" is the root)
//! P/idgen            put to draw node ids (its revision is the id)
//! P/l/<id>/<name>    a lock waiter or holder, bound to its daemon's lease
//! P/d/<id>/<name>    a holder's marker, not leased: once its waiter key
//!                    (P/l/<id>/<name>) is gone, the holder died
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::acl::Perm;
use crate::error::{Error, Result};
use crate::types::{LockMode, NodeId, NodeKind, Stat};

/// The key of the node at `path` (absolute, normalised).
pub fn node_key(prefix: &str, path: &str) -> String {
    if path == "/" {
        format!("{prefix}/n/")
    } else {
        format!("{prefix}/n{path}")
    }
}

/// The key prefix of every node strictly below the directory at `path`.
pub fn children_prefix(prefix: &str, path: &str) -> String {
    if path == "/" {
        format!("{prefix}/n/")
    } else {
        format!("{prefix}/n{path}/")
    }
}

/// The path of a node key, if it is one.
pub fn path_of_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?.strip_prefix("/n")?;
    Some(if rest == "/" { "/" } else { rest })
}

/// Joins a normalised directory path and a name.
pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Normalises a validated path ("/a//b/" → "/a/b").
pub fn normal(comps: &[&str]) -> String {
    if comps.is_empty() {
        "/".to_string()
    } else {
        format!("/{}", comps.join("/"))
    }
}

pub fn lock_prefix(prefix: &str, id: NodeId) -> String {
    format!("{prefix}/l/{id}/")
}

pub fn marker_prefix(prefix: &str, id: NodeId) -> String {
    format!("{prefix}/d/{id}/")
}

/// A node as stored: metadata and, for a file, its contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVal {
    pub id: NodeId,
    pub kind: NodeKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub content_gen: u64,
    pub lock_gen: u64,
    pub lock_delay_ms: u64,
    pub ephemeral: bool,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub data: Vec<u8>,
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl NodeVal {
    pub fn perm(&self) -> Perm {
        Perm {
            uid: self.uid,
            gid: self.gid,
            mode: self.mode,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let kind = match self.kind {
            NodeKind::File => 'f',
            NodeKind::Dir => 'd',
        };
        let mut out = format!(
            "{kind} {} {:o} {} {} {} {} {} {} {} {}\n",
            self.id,
            self.mode,
            self.uid,
            self.gid,
            self.content_gen,
            self.lock_gen,
            self.lock_delay_ms,
            u8::from(self.ephemeral),
            self.mtime_ns,
            self.ctime_ns
        )
        .into_bytes();
        out.extend_from_slice(&self.data);
        out
    }

    pub fn decode(key: &str, v: &[u8]) -> Result<NodeVal> {
        let bad = || Error::corruption(format!("etcd key {key} is not a node"));
        let nl = v.iter().position(|&b| b == b'\n').ok_or_else(bad)?;
        let head = std::str::from_utf8(&v[..nl]).map_err(|_| bad())?;
        let f: Vec<&str> = head.split(' ').collect();
        if f.len() != 11 {
            return Err(bad());
        }
        let n = |i: usize| f[i].parse::<u64>().map_err(|_| bad());
        let kind = match f[0] {
            "f" => NodeKind::File,
            "d" => NodeKind::Dir,
            _ => return Err(bad()),
        };
        Ok(NodeVal {
            kind,
            id: n(1)?,
            mode: u32::from_str_radix(f[2], 8).map_err(|_| bad())?,
            uid: n(3)? as u32,
            gid: n(4)? as u32,
            content_gen: n(5)?,
            lock_gen: n(6)?,
            lock_delay_ms: n(7)?,
            ephemeral: n(8)? != 0,
            mtime_ns: n(9)?,
            ctime_ns: n(10)?,
            data: v[nl + 1..].to_vec(),
        })
    }

    /// The node's attributes; `entries`/`subdirs` count a directory's children.
    pub fn stat(&self, entries: u64, subdirs: u32) -> Stat {
        let t = |ns| UNIX_EPOCH + Duration::from_nanos(ns);
        let (size, nlink) = match self.kind {
            NodeKind::File => (self.data.len() as u64, 1),
            NodeKind::Dir => (entries, 2 + subdirs),
        };
        Stat {
            id: self.id,
            kind: self.kind,
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            size,
            nlink,
            content_generation: self.content_gen,
            lock_generation: self.lock_gen,
            mtime: t(self.mtime_ns),
            ctime: t(self.ctime_ns),
            lock_delay: Duration::from_millis(self.lock_delay_ms),
            ephemeral: self.ephemeral,
        }
    }
}

/// A lock waiter key's value: who waits or holds, in which mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub owner: u64,
    pub mode: LockMode,
    pub granted: bool,
}

impl Waiter {
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.owner, self.mode, u8::from(self.granted))
    }

    pub fn decode(v: &[u8]) -> Option<Waiter> {
        let s = std::str::from_utf8(v).ok()?;
        let mut f = s.split(' ');
        let owner = f.next()?.parse().ok()?;
        let mode = match f.next()? {
            "exclusive" => LockMode::Exclusive,
            "shared" => LockMode::Shared,
            _ => return None,
        };
        let granted = f.next()? == "1";
        Some(Waiter {
            owner,
            mode,
            granted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_value_round_trips() {
        let v = NodeVal {
            id: 9,
            kind: NodeKind::File,
            mode: 0o1644,
            uid: 10,
            gid: 20,
            content_gen: 3,
            lock_gen: 4,
            lock_delay_ms: 500,
            ephemeral: true,
            mtime_ns: 1,
            ctime_ns: 2,
            data: b"a\nb c".to_vec(),
        };
        assert_eq!(NodeVal::decode("k", &v.encode()).unwrap(), v);
        assert!(NodeVal::decode("k", b"garbage").is_err());
        assert_eq!(node_key("/p", "/"), "/p/n/");
        assert_eq!(path_of_key("/p", "/p/n/a/b"), Some("/a/b"));
        assert_eq!(path_of_key("/p", "/p/n/"), Some("/"));
        let w = Waiter {
            owner: 7,
            mode: LockMode::Shared,
            granted: true,
        };
        assert_eq!(Waiter::decode(w.encode().as_bytes()), Some(w));
    }
}
