//! The in-memory tree of directories and small files. It changes only by
//! applying logged [`Record`]s, so live operation and replay share one code
//! path; callers validate permissions and arguments before logging.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::acl::{self, Credentials, Perm};
use crate::error::{Error, Result};
use crate::path;
use crate::record::{NewNode, Record};
use crate::types::{NodeId, NodeKind, Stat, ROOT_ID};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
    pub mtime_ns: u64,
    pub ctime_ns: u64,
    pub lock_delay_ms: u64,
    pub ephemeral: bool,
    pub content_gen: u64,
    pub lock_gen: u64,
}

impl Meta {
    /// A root directory (0755, root's) made at time 1 with this lock-delay:
    /// the tests' starting point.
    #[cfg(test)]
    pub fn test_root(lock_delay_ms: u64) -> Meta {
        Meta {
            uid: 0,
            gid: 0,
            mode: 0o755,
            mtime_ns: 1,
            ctime_ns: 1,
            lock_delay_ms,
            ephemeral: false,
            content_gen: 0,
            lock_gen: 0,
        }
    }

    pub fn perm(&self) -> Perm {
        Perm {
            uid: self.uid,
            gid: self.gid,
            mode: self.mode,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<String, NodeId>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    /// The root is its own parent.
    pub parent: NodeId,
    pub name: String,
    pub meta: Meta,
    pub body: Body,
}

impl Node {
    pub fn kind(&self) -> NodeKind {
        match self.body {
            Body::File(_) => NodeKind::File,
            Body::Dir(_) => NodeKind::Dir,
        }
    }

    pub fn children(&self) -> Option<&BTreeMap<String, NodeId>> {
        match &self.body {
            Body::Dir(c) => Some(c),
            Body::File(_) => None,
        }
    }
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

#[derive(Debug, Default)]
pub struct Namespace {
    nodes: HashMap<NodeId, Node>,
    /// Nodes and bytes of contents each uid owns (for quotas).
    usage: HashMap<u32, Usage>,
    next_id: NodeId,
    /// Highest lock generation ever handed out in the cell. Generations are
    /// drawn from this one counter (by node creation and writer-mode grants)
    /// so that a node deleted and recreated under the same path never repeats
    /// a generation: a stale sequencer stays stale.
    lock_gen_max: u64,
}

/// What one uid owns in the cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub nodes: u64,
    pub bytes: u64,
}

impl Namespace {
    /// What `uid` owns now.
    pub fn usage(&self, uid: u32) -> Usage {
        self.usage.get(&uid).copied().unwrap_or_default()
    }

    /// Adds (or with `sign` false takes away) a node of `uid` holding `bytes`.
    fn count(&mut self, uid: u32, bytes: usize, sign: bool) {
        let u = self.usage.entry(uid).or_default();
        if sign {
            u.nodes += 1;
            u.bytes += bytes as u64;
        } else {
            u.nodes = u.nodes.saturating_sub(1);
            u.bytes = u.bytes.saturating_sub(bytes as u64);
        }
        if *u == Usage::default() {
            self.usage.remove(&uid);
        }
    }

    fn count_node(&mut self, id: NodeId, sign: bool) {
        if let Some(n) = self.nodes.get(&id) {
            let bytes = match &n.body {
                Body::File(d) => d.len(),
                Body::Dir(_) => 0,
            };
            let uid = n.meta.uid;
            self.count(uid, bytes, sign);
        }
    }

    /// A namespace holding only the root directory.
    pub fn with_root(meta: Meta) -> Namespace {
        let mut ns = Namespace::default();
        ns.nodes.insert(
            ROOT_ID,
            Node {
                id: ROOT_ID,
                parent: ROOT_ID,
                name: String::new(),
                meta,
                body: Body::Dir(BTreeMap::new()),
            },
        );
        ns.next_id = ROOT_ID + 1;
        ns.lock_gen_max = ns.nodes.get(&ROOT_ID).map_or(0, |n| n.meta.lock_gen);
        ns.count_node(ROOT_ID, true);
        ns
    }

    /// Rebuilds a namespace from snapshot images (parents before children).
    pub fn from_nodes(nodes: Vec<Node>, next_id: NodeId, lock_gen_max: u64) -> Result<Namespace> {
        let mut ns = Namespace {
            nodes: HashMap::with_capacity(nodes.len()),
            usage: HashMap::new(),
            next_id,
            lock_gen_max,
        };
        for mut node in nodes {
            // Names are checked as replay checks a Create's or a Rename's.
            if node.id == ROOT_ID && !node.name.is_empty() {
                return Err(Error::corruption("the root has a name"));
            }
            if node.id != ROOT_ID {
                path::check_name(&node.name)
                    .map_err(|e| Error::corruption(format!("node {}: {e}", node.id)))?;
                let parent = ns
                    .nodes
                    .get_mut(&node.parent)
                    .ok_or_else(|| Error::corruption(format!("node {} has no parent", node.id)))?;
                match &mut parent.body {
                    Body::Dir(c) => {
                        if c.insert(node.name.clone(), node.id).is_some() {
                            return Err(Error::corruption(format!("duplicate name {}", node.name)));
                        }
                    }
                    Body::File(_) => return Err(Error::corruption("parent is a file")),
                }
            }
            // Children are re-linked from their own images.
            if let Body::Dir(c) = &mut node.body {
                c.clear();
            }
            ns.next_id = ns.next_id.max(node.id + 1);
            ns.lock_gen_max = ns.lock_gen_max.max(node.meta.lock_gen);
            let id = node.id;
            if ns.nodes.insert(node.id, node).is_some() {
                return Err(Error::corruption("duplicate node id"));
            }
            ns.count_node(id, true);
        }
        if !ns.nodes.contains_key(&ROOT_ID) {
            return Err(Error::corruption("snapshot has no root"));
        }
        Ok(ns)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn next_id(&self) -> NodeId {
        self.next_id
    }

    /// The next lock generation to hand out is this plus one.
    pub fn lock_gen_max(&self) -> u64 {
        self.lock_gen_max
    }

    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(&id)
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.nodes.contains_key(&id)
    }

    pub fn child(&self, dir: NodeId, name: &str) -> Option<NodeId> {
        self.get(dir)?.children()?.get(name).copied()
    }

    pub fn node(&self, id: NodeId) -> Result<&Node> {
        self.get(id)
            .ok_or_else(|| Error::NotFound(format!("node {id} (deleted)")))
    }

    /// Walks `comps` from the root, checking search permission on every
    /// directory passed through.
    pub fn resolve(&self, creds: &Credentials, comps: &[&str]) -> Result<NodeId> {
        let mut cur = ROOT_ID;
        for (i, name) in comps.iter().enumerate() {
            let node = self.node(cur)?;
            let here = || format!("/{}", comps[..=i].join("/"));
            let children = match &node.body {
                Body::Dir(c) => c,
                Body::File(_) => return Err(Error::NotDir(here())),
            };
            acl::check(creds, node.meta.perm(), acl::SEARCH, &here())?;
            cur = *children.get(*name).ok_or_else(|| Error::NotFound(here()))?;
        }
        Ok(cur)
    }

    /// The current path of a node.
    pub fn path_of(&self, id: NodeId) -> String {
        let mut names = Vec::new();
        let mut cur = id;
        while cur != ROOT_ID {
            match self.get(cur) {
                Some(n) => {
                    names.push(n.name.as_str());
                    cur = n.parent;
                }
                None => break,
            }
        }
        names.reverse();
        format!("/{}", names.join("/"))
    }

    /// Whether `a` is `b` or one of its ancestors.
    pub fn is_ancestor_or_self(&self, a: NodeId, b: NodeId) -> bool {
        let mut cur = b;
        loop {
            if cur == a {
                return true;
            }
            match self.get(cur) {
                Some(n) if n.id != ROOT_ID => cur = n.parent,
                _ => return false,
            }
        }
    }

    pub fn stat(&self, id: NodeId) -> Result<Stat> {
        let n = self.node(id)?;
        let (size, nlink) = match &n.body {
            Body::File(d) => (d.len() as u64, 1),
            Body::Dir(c) => {
                let subdirs = c
                    .values()
                    .filter(|id| matches!(self.get(**id).map(|n| &n.body), Some(Body::Dir(_))))
                    .count();
                (c.len() as u64, 2 + subdirs as u32)
            }
        };
        Ok(Stat {
            id,
            kind: n.kind(),
            mode: n.meta.mode,
            uid: n.meta.uid,
            gid: n.meta.gid,
            size,
            nlink,
            content_generation: n.meta.content_gen,
            lock_generation: n.meta.lock_gen,
            mtime: time(n.meta.mtime_ns),
            ctime: time(n.meta.ctime_ns),
            lock_delay: Duration::from_millis(n.meta.lock_delay_ms),
            ephemeral: n.meta.ephemeral,
        })
    }

    /// All nodes, parents before children (for snapshots).
    pub fn preorder(&self) -> Vec<&Node> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![ROOT_ID];
        while let Some(id) = stack.pop() {
            if let Some(n) = self.get(id) {
                out.push(n);
                if let Some(c) = n.children() {
                    stack.extend(c.values().rev());
                }
            }
        }
        out
    }

    /// All nodes in the subtree of `id`, children before parents.
    pub fn postorder(&self, id: NodeId) -> Vec<NodeId> {
        let mut pre = Vec::new();
        let mut stack = vec![id];
        while let Some(cur) = stack.pop() {
            if let Some(n) = self.get(cur) {
                pre.push(cur);
                if let Some(c) = n.children() {
                    stack.extend(c.values());
                }
            }
        }
        pre.reverse();
        pre
    }

    fn node_mut(&mut self, id: NodeId) -> Result<&mut Node> {
        self.nodes
            .get_mut(&id)
            .ok_or_else(|| Error::corruption(format!("record names missing node {id}")))
    }

    fn children_mut(&mut self, dir: NodeId) -> Result<&mut BTreeMap<String, NodeId>> {
        match &mut self.node_mut(dir)?.body {
            Body::Dir(c) => Ok(c),
            Body::File(_) => Err(Error::corruption(format!("node {dir} is not a directory"))),
        }
    }

    fn touch(&mut self, id: NodeId, time_ns: u64) -> Result<()> {
        let m = &mut self.node_mut(id)?.meta;
        m.mtime_ns = time_ns;
        m.ctime_ns = time_ns;
        Ok(())
    }

    /// Removes a file or empty directory from the tree.
    fn detach_and_drop(&mut self, id: NodeId) -> Result<()> {
        let node = self.node_mut(id)?;
        if matches!(&node.body, Body::Dir(c) if !c.is_empty()) {
            return Err(Error::corruption(format!(
                "removing non-empty directory {id}"
            )));
        }
        let (parent, name) = (node.parent, node.name.clone());
        self.children_mut(parent)?.remove(&name);
        self.count_node(id, false);
        self.nodes.remove(&id);
        Ok(())
    }

    /// Applies one logged mutation. An error means the log does not match
    /// the tree: corruption (or a bug in the caller's validation).
    pub fn apply(&mut self, rec: &Record) -> Result<()> {
        match rec {
            Record::Create(NewNode {
                id,
                parent,
                name,
                kind,
                uid,
                gid,
                mode,
                ephemeral,
                lock_delay_ms,
                lock_gen,
                time_ns,
            }) => {
                path::check_name(name)?;
                if self.nodes.contains_key(id) {
                    return Err(Error::corruption(format!("node id {id} reused")));
                }
                let children = self.children_mut(*parent)?;
                if children.contains_key(name) {
                    return Err(Error::corruption(format!("create over existing {name}")));
                }
                children.insert(name.clone(), *id);
                self.touch(*parent, *time_ns)?;
                let body = match kind {
                    NodeKind::File => Body::File(Vec::new()),
                    NodeKind::Dir => Body::Dir(BTreeMap::new()),
                };
                let meta = Meta {
                    uid: *uid,
                    gid: *gid,
                    mode: *mode,
                    mtime_ns: *time_ns,
                    ctime_ns: *time_ns,
                    lock_delay_ms: *lock_delay_ms,
                    ephemeral: *ephemeral,
                    content_gen: 0,
                    lock_gen: *lock_gen,
                };
                self.lock_gen_max = self.lock_gen_max.max(*lock_gen);
                self.nodes.insert(
                    *id,
                    Node {
                        id: *id,
                        parent: *parent,
                        name: name.clone(),
                        meta,
                        body,
                    },
                );
                self.count(*uid, 0, true);
                self.next_id = self.next_id.max(id + 1);
            }
            Record::SetContents {
                id,
                data,
                generation,
                time_ns,
            } => {
                self.count_node(*id, false);
                let node = self.node_mut(*id)?;
                match &mut node.body {
                    Body::File(d) => *d = data.clone(),
                    Body::Dir(_) => return Err(Error::corruption("contents on a directory")),
                }
                node.meta.content_gen = *generation;
                self.count_node(*id, true);
                self.touch(*id, *time_ns)?;
            }
            Record::Remove { id, time_ns } => {
                if *id == ROOT_ID {
                    return Err(Error::corruption("removing the root"));
                }
                let parent = self.node_mut(*id)?.parent;
                self.detach_and_drop(*id)?;
                self.touch(parent, *time_ns)?;
            }
            Record::Rename {
                id,
                new_parent,
                new_name,
                time_ns,
            } => {
                path::check_name(new_name)?;
                if *id == ROOT_ID || self.is_ancestor_or_self(*id, *new_parent) {
                    return Err(Error::corruption("rename into itself"));
                }
                if let Some(existing) = self.child(*new_parent, new_name) {
                    if existing == *id {
                        return Ok(());
                    }
                    self.detach_and_drop(existing)?;
                }
                let node = self.node_mut(*id)?;
                let (old_parent, old_name) = (node.parent, std::mem::take(&mut node.name));
                node.parent = *new_parent;
                node.name = new_name.clone();
                node.meta.ctime_ns = *time_ns;
                self.children_mut(old_parent)?.remove(&old_name);
                self.children_mut(*new_parent)?
                    .insert(new_name.clone(), *id);
                self.touch(old_parent, *time_ns)?;
                self.touch(*new_parent, *time_ns)?;
            }
            Record::SetAttr {
                id,
                uid,
                gid,
                mode,
                time_ns,
            } => {
                self.count_node(*id, false);
                let m = &mut self.node_mut(*id)?.meta;
                m.uid = *uid;
                m.gid = *gid;
                m.mode = *mode;
                m.ctime_ns = *time_ns;
                self.count_node(*id, true);
            }
            Record::SetLockDelay {
                id,
                lock_delay_ms,
                time_ns,
            } => {
                let m = &mut self.node_mut(*id)?.meta;
                m.lock_delay_ms = *lock_delay_ms;
                m.ctime_ns = *time_ns;
            }
            Record::SetEphemeral {
                id,
                ephemeral,
                time_ns,
            } => {
                let m = &mut self.node_mut(*id)?.meta;
                m.ephemeral = *ephemeral;
                m.ctime_ns = *time_ns;
            }
            Record::LockGeneration { id, generation } => {
                let m = &mut self.node_mut(*id)?.meta;
                m.lock_gen = m.lock_gen.max(*generation);
                self.lock_gen_max = self.lock_gen_max.max(*generation);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta::test_root(0)
    }

    fn create(id: NodeId, parent: NodeId, name: &str, kind: NodeKind) -> Record {
        Record::Create(NewNode {
            id,
            parent,
            name: name.into(),
            kind,
            uid: 0,
            gid: 0,
            mode: 0o755,
            ephemeral: false,
            lock_delay_ms: 0,
            lock_gen: id * 10,
            time_ns: 7,
        })
    }

    #[test]
    fn apply_builds_and_moves_tree() {
        let mut ns = Namespace::with_root(meta());
        ns.apply(&create(2, ROOT_ID, "a", NodeKind::Dir)).unwrap();
        ns.apply(&create(3, 2, "f", NodeKind::File)).unwrap();
        assert_eq!(ns.resolve(&Credentials::root(), &["a", "f"]).unwrap(), 3);
        assert_eq!(ns.path_of(3), "/a/f");
        ns.apply(&Record::Rename {
            id: 3,
            new_parent: ROOT_ID,
            new_name: "g".into(),
            time_ns: 8,
        })
        .unwrap();
        assert_eq!(ns.path_of(3), "/g");
        assert!(ns.child(2, "f").is_none());
        // A directory cannot move below itself.
        ns.apply(&create(4, 2, "sub", NodeKind::Dir)).unwrap();
        assert!(ns
            .apply(&Record::Rename {
                id: 2,
                new_parent: 4,
                new_name: "x".into(),
                time_ns: 9,
            })
            .is_err());
        // Removing a non-empty directory is refused.
        assert!(ns.apply(&Record::Remove { id: 2, time_ns: 9 }).is_err());
        ns.apply(&Record::Remove { id: 4, time_ns: 9 }).unwrap();
        ns.apply(&Record::Remove { id: 2, time_ns: 9 }).unwrap();
        assert_eq!(ns.len(), 2);
        assert_eq!(ns.postorder(ROOT_ID), vec![3, ROOT_ID]);
    }

    #[test]
    fn snapshot_images_rebuild_the_same_tree() {
        let mut ns = Namespace::with_root(meta());
        ns.apply(&create(2, ROOT_ID, "a", NodeKind::Dir)).unwrap();
        ns.apply(&create(3, 2, "f", NodeKind::File)).unwrap();
        let images: Vec<Node> = ns.preorder().into_iter().cloned().collect();
        let copy = Namespace::from_nodes(images, ns.next_id(), ns.lock_gen_max()).unwrap();
        assert_eq!(copy.path_of(3), "/a/f");
        assert_eq!(copy.stat(2).unwrap(), ns.stat(2).unwrap());
        assert_eq!(copy.next_id(), 4);
        assert_eq!(copy.lock_gen_max(), 30);
    }

    #[test]
    fn resolve_checks_search_permission() {
        let mut ns = Namespace::with_root(meta());
        ns.apply(&create(2, ROOT_ID, "a", NodeKind::Dir)).unwrap();
        ns.apply(&Record::SetAttr {
            id: 2,
            uid: 0,
            gid: 0,
            mode: 0o700,
            time_ns: 8,
        })
        .unwrap();
        ns.apply(&create(3, 2, "f", NodeKind::File)).unwrap();
        let user = Credentials::user(1000, 1000);
        assert!(matches!(
            ns.resolve(&user, &["a", "f"]),
            Err(Error::PermissionDenied(_))
        ));
        assert!(matches!(
            ns.resolve(&user, &["nope"]),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            ns.resolve(&Credentials::root(), &["a", "f", "g"]),
            Err(Error::NotDir(_))
        ));
    }
}
