//! The inodes of `.chubby/`, the lock service's namespace: part of the node
//! layer so that [`Node`] can hold them; everything else about them is in
//! `crate::lockdir`.

use super::Node;
use fuser::Errno;
use std::fmt;

/// The directory's name in the mount's root.
pub const DIR_NAME: &str = ".chubby";
/// In every directory: the stream of its events (not listed).
pub const EVENTS: &str = ".events";
/// In `.chubby/` itself: the service's status lines (not listed).
pub const STATUS: &str = ".status";

/// An inode under `.chubby/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockNode {
    /// A node of the cell by its path ("/" is `.chubby/` itself).
    Entry(String),
    /// `<dir>/.events`, by the directory's path.
    Events(String),
    /// `.chubby/.status`.
    Status,
}

impl LockNode {
    pub fn root() -> LockNode {
        LockNode::Entry("/".into())
    }

    /// The inode `name` stands for in this `.chubby/` directory (without
    /// asking the service whether it exists: its attributes do). A name
    /// must be UTF-8 for the lock service (NUL cannot reach us).
    pub fn child(&self, name: &[u8]) -> Result<LockNode, Errno> {
        let LockNode::Entry(dir) = self else {
            return Err(Errno::ENOTDIR);
        };
        if name == EVENTS.as_bytes() {
            return Ok(LockNode::Events(dir.clone()));
        }
        if dir == "/" && name == STATUS.as_bytes() {
            return Ok(LockNode::Status);
        }
        let name = std::str::from_utf8(name).map_err(|_| Errno::EINVAL)?;
        Ok(LockNode::Entry(join(dir, name)))
    }

    /// Input of the inode number hash (see `Node::ino`).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let (tag, s) = match self {
            LockNode::Entry(p) => (0, p.as_str()),
            LockNode::Events(p) => (1, p.as_str()),
            LockNode::Status => (2, ""),
        };
        out.push(tag);
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    /// The directory this inode lies in, and its name there.
    pub fn parent_and_name(&self) -> (Node, Vec<u8>) {
        match self {
            LockNode::Entry(p) if p == "/" => (Node::Root, DIR_NAME.as_bytes().to_vec()),
            LockNode::Entry(p) => {
                let (dir, name) = split(p);
                (
                    Node::Lock(LockNode::Entry(dir.to_string())),
                    name.as_bytes().to_vec(),
                )
            }
            LockNode::Events(d) => (
                Node::Lock(LockNode::Entry(d.clone())),
                EVENTS.as_bytes().to_vec(),
            ),
            LockNode::Status => (Node::Lock(LockNode::root()), STATUS.as_bytes().to_vec()),
        }
    }

    /// The inode number of the cell node at `path`.
    pub fn entry_ino(path: &str) -> u64 {
        Node::Lock(LockNode::Entry(path.to_string())).natural_ino()
    }
}

impl fmt::Display for LockNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockNode::Entry(p) if p == "/" => write!(f, "/{DIR_NAME}"),
            LockNode::Entry(p) => write!(f, "/{DIR_NAME}{p}"),
            LockNode::Events(d) if d == "/" => write!(f, "/{DIR_NAME}/{EVENTS}"),
            LockNode::Events(d) => write!(f, "/{DIR_NAME}{d}/{EVENTS}"),
            LockNode::Status => write!(f, "/{DIR_NAME}/{STATUS}"),
        }
    }
}

/// Splits a cell path into its directory and last name ("/a/b" → ("/a", "b")).
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) => ("/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("/", path),
    }
}

/// The path of `name` inside directory `dir`.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}
