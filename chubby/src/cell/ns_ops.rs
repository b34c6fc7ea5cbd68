//! Namespace operations: validation and permission checks as a POSIX
//! filesystem does them, then one logged record each.

use std::time::Duration;

use crate::acl::{self, Credentials, READ, SEARCH, WRITE};
use crate::error::{Error, Result};
use crate::namespace::{now_ns, Body};
use crate::record::{NewNode, Record};
use crate::types::{
    check_contents, DirEntry, Event, NodeId, NodeKind, NodeSpec, Stat, Target, ROOT_ID,
};

use super::state::State;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;

impl State {
    fn check_lock_delay(&self, delay: Duration) -> Result<u64> {
        crate::types::lock_delay_ms(delay, self.opts.max_lock_delay)
    }

    pub fn create_node(
        &mut self,
        creds: &Credentials,
        path: &str,
        spec: &NodeSpec,
        allow_ephemeral: bool,
    ) -> Result<NodeId> {
        if crate::path::components(path)?.is_empty() {
            return Err(Error::Exists(path.to_string()));
        }
        let (parent, name) = self.resolve_parent(creds, path)?;
        if self.ns.child(parent, name).is_some() {
            return Err(Error::Exists(path.to_string()));
        }
        self.check_access(creds, parent, WRITE | SEARCH)?;
        if spec.ephemeral && !allow_ephemeral {
            return Err(Error::invalid(
                "an ephemeral node needs a handle: create it with open_handle",
            ));
        }
        let lock_delay_ms =
            self.check_lock_delay(spec.lock_delay.unwrap_or(self.opts.default_lock_delay))?;
        if !creds.is_root() && self.ns.usage(creds.uid).nodes >= self.opts.quota_nodes {
            self.quota_refusals += 1;
            return Err(Error::QuotaExceeded(format!(
                "uid {} owns {} nodes (chubby_nodes)",
                creds.uid, self.opts.quota_nodes
            )));
        }
        let pmeta = &self.ns.node(parent)?.meta;
        // A set-group-ID directory hands its group (and, to directories, the bit) down.
        let (gid, mut mode) = if pmeta.mode & S_ISGID != 0 {
            (pmeta.gid, spec.mode & 0o7777)
        } else {
            (creds.gid, spec.mode & 0o7777)
        };
        if pmeta.mode & S_ISGID != 0 && spec.kind == NodeKind::Dir {
            mode |= S_ISGID;
        }
        let id = self.ns.next_id();
        self.commit(Record::Create(NewNode {
            id,
            parent,
            name: name.to_string(),
            kind: spec.kind,
            uid: creds.uid,
            gid,
            mode,
            ephemeral: spec.ephemeral,
            lock_delay_ms,
            lock_gen: self.ns.lock_gen_max() + 1,
            time_ns: now_ns(),
        }))?;
        self.emit(parent, Event::ChildAdded(name.to_string()));
        Ok(id)
    }

    pub fn read(&self, creds: &Credentials, target: Target<'_>) -> Result<(Vec<u8>, Stat)> {
        let (id, handle) = self.resolve_target(creds, target)?;
        match handle {
            Some(h) if !h.read => {
                return Err(Error::BadHandle("handle is not open for reading".into()))
            }
            Some(_) => {}
            None => self.check_access(creds, id, READ)?,
        }
        match &self.ns.node(id)?.body {
            Body::File(data) => Ok((data.clone(), self.ns.stat(id)?)),
            Body::Dir(_) => Err(Error::IsDir(self.ns.path_of(id))),
        }
    }

    pub fn set_contents(
        &mut self,
        creds: &Credentials,
        target: Target<'_>,
        data: &[u8],
    ) -> Result<Stat> {
        check_contents(data)?;
        let (id, handle) = self.resolve_target(creds, target)?;
        match handle {
            Some(h) if !h.write => {
                return Err(Error::BadHandle("handle is not open for writing".into()))
            }
            Some(_) => {}
            None => self.check_access(creds, id, WRITE)?,
        }
        let node = self.ns.node(id)?;
        if node.children().is_some() {
            return Err(Error::IsDir(self.ns.path_of(id)));
        }
        // Contents count against the file's owner (root's are not counted).
        if let Body::File(old) = &node.body {
            let owner = node.meta.uid;
            let after =
                (self.ns.usage(owner).bytes + data.len() as u64).saturating_sub(old.len() as u64);
            if owner != 0 && data.len() > old.len() && after > self.opts.quota_bytes {
                self.quota_refusals += 1;
                return Err(Error::QuotaExceeded(format!(
                    "uid {owner}'s files would hold {after} bytes; the limit is {} (chubby_bytes)",
                    self.opts.quota_bytes
                )));
            }
        }
        let generation = node.meta.content_gen + 1;
        self.commit(Record::SetContents {
            id,
            data: data.to_vec(),
            generation,
            time_ns: now_ns(),
        })?;
        self.emit(id, Event::ContentsChanged);
        self.ns.stat(id)
    }

    /// Finds the entry `path` names for removal or renaming away, checking
    /// write permission on its directory and the sticky bit.
    fn removable_entry(&self, creds: &Credentials, path: &str) -> Result<(NodeId, NodeId)> {
        let (parent, name) = self.resolve_parent(creds, path)?;
        let id = self
            .ns
            .child(parent, name)
            .ok_or_else(|| Error::NotFound(path.to_string()))?;
        self.check_access(creds, parent, WRITE | SEARCH)?;
        let pperm = self.ns.node(parent)?.meta.perm();
        if !acl::may_delete(creds, pperm, self.ns.node(id)?.meta.uid) {
            return Err(Error::PermissionDenied(path.to_string()));
        }
        Ok((parent, id))
    }

    pub fn unlink(&mut self, creds: &Credentials, path: &str) -> Result<()> {
        let (parent, id) = self.removable_entry(creds, path)?;
        if self.kind(id)? == NodeKind::Dir {
            return Err(Error::IsDir(path.to_string()));
        }
        self.remove_node(id)?;
        self.reap(parent)
    }

    pub fn rmdir(&mut self, creds: &Credentials, path: &str) -> Result<()> {
        if self.resolve_path(creds, path)? == ROOT_ID {
            return Err(Error::invalid("cannot remove the root"));
        }
        let (parent, id) = self.removable_entry(creds, path)?;
        match self.ns.node(id)?.children() {
            None => return Err(Error::NotDir(path.to_string())),
            Some(c) if !c.is_empty() => return Err(Error::NotEmpty(path.to_string())),
            Some(_) => {}
        }
        self.remove_node(id)?;
        self.reap(parent)
    }

    pub fn rename(&mut self, creds: &Credentials, from: &str, to: &str) -> Result<()> {
        let (sp, src) = self.removable_entry(creds, from)?;
        let (dp, dname) = self.resolve_parent(creds, to)?;
        self.check_access(creds, dp, WRITE | SEARCH)?;
        if self.ns.is_ancestor_or_self(src, dp) {
            return Err(Error::invalid(format!("cannot move {from} below itself")));
        }
        let src_kind = self.kind(src)?;
        let replaced = self.ns.child(dp, dname);
        if let Some(dst) = replaced {
            if dst == src {
                return Ok(());
            }
            let dst_node = self.ns.node(dst)?;
            match (src_kind, &dst_node.body) {
                (NodeKind::Dir, Body::File(_)) => return Err(Error::NotDir(to.to_string())),
                (NodeKind::File, Body::Dir(_)) => return Err(Error::IsDir(to.to_string())),
                (_, Body::Dir(c)) if !c.is_empty() => return Err(Error::NotEmpty(to.to_string())),
                _ => {}
            }
            let dperm = self.ns.node(dp)?.meta.perm();
            if !acl::may_delete(creds, dperm, dst_node.meta.uid) {
                return Err(Error::PermissionDenied(to.to_string()));
            }
        }
        // Moving a directory rewrites its "..": that needs write permission on it.
        if src_kind == NodeKind::Dir && sp != dp {
            self.check_access(creds, src, WRITE)?;
        }
        let old_name = self.ns.node(src)?.name.clone();
        let replaced_path = replaced.map(|d| self.ns.path_of(d));
        self.commit(Record::Rename {
            id: src,
            new_parent: dp,
            new_name: dname.to_string(),
            time_ns: now_ns(),
        })?;
        if let (Some(dst), Some(p)) = (replaced, replaced_path) {
            self.forget_removed(dst, &p);
            self.emit(dp, Event::ChildRemoved(dname.to_string()));
        }
        self.emit(sp, Event::ChildRemoved(old_name));
        self.emit(dp, Event::ChildAdded(dname.to_string()));
        self.reap(sp)
    }

    pub fn list(&self, creds: &Credentials, path: &str) -> Result<Vec<DirEntry>> {
        let id = self.resolve_path(creds, path)?;
        let children = self
            .ns
            .node(id)?
            .children()
            .ok_or_else(|| Error::NotDir(path.to_string()))?;
        self.check_access(creds, id, READ)?;
        Ok(children
            .iter()
            .filter_map(|(name, cid)| {
                self.ns.get(*cid).map(|n| DirEntry {
                    name: name.clone(),
                    id: *cid,
                    kind: n.kind(),
                })
            })
            .collect())
    }

    pub fn stat(&self, creds: &Credentials, target: Target<'_>) -> Result<Stat> {
        let (id, _) = self.resolve_target(creds, target)?;
        self.ns.stat(id)
    }

    fn set_attr(&mut self, id: NodeId, uid: u32, gid: u32, mode: u32) -> Result<Stat> {
        self.commit(Record::SetAttr {
            id,
            uid,
            gid,
            mode,
            time_ns: now_ns(),
        })?;
        self.ns.stat(id)
    }

    pub fn chmod(&mut self, creds: &Credentials, target: Target<'_>, mode: u32) -> Result<Stat> {
        let (id, _) = self.resolve_target(creds, target)?;
        let m = self.ns.node(id)?.meta.clone();
        if !acl::is_owner(creds, m.perm()) {
            return Err(Error::NotPermitted(self.ns.path_of(id)));
        }
        let mut mode = mode & 0o7777;
        // As chmod(2): a non-member cannot set the group's set-group-ID bit.
        if !creds.is_root() && !creds.in_group(m.gid) {
            mode &= !S_ISGID;
        }
        self.set_attr(id, m.uid, m.gid, mode)
    }

    pub fn chown(
        &mut self,
        creds: &Credentials,
        target: Target<'_>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Stat> {
        let (id, _) = self.resolve_target(creds, target)?;
        let m = self.ns.node(id)?.meta.clone();
        let new_uid = uid.unwrap_or(m.uid);
        let new_gid = gid.unwrap_or(m.gid);
        let denied = || Error::NotPermitted(self.ns.path_of(id));
        if !creds.is_root() {
            if new_uid != m.uid {
                return Err(denied());
            }
            if new_gid != m.gid && (creds.uid != m.uid || !creds.in_group(new_gid)) {
                return Err(denied());
            }
        }
        let mut mode = m.mode;
        if (new_uid, new_gid) != (m.uid, m.gid) && self.kind(id)? == NodeKind::File {
            // As chown(2): a change of owner drops set-ID bits on files.
            mode &= !(S_ISUID | S_ISGID);
        }
        self.set_attr(id, new_uid, new_gid, mode)
    }

    pub fn set_lock_delay(
        &mut self,
        creds: &Credentials,
        target: Target<'_>,
        delay: Duration,
    ) -> Result<Stat> {
        let lock_delay_ms = self.check_lock_delay(delay)?;
        let (id, _) = self.resolve_target(creds, target)?;
        self.check_access(creds, id, WRITE)?;
        self.commit(Record::SetLockDelay {
            id,
            lock_delay_ms,
            time_ns: now_ns(),
        })?;
        self.ns.stat(id)
    }

    pub fn set_ephemeral(
        &mut self,
        creds: &Credentials,
        target: Target<'_>,
        ephemeral: bool,
    ) -> Result<Stat> {
        let (id, _) = self.resolve_target(creds, target)?;
        if id == ROOT_ID {
            return Err(Error::invalid("the root cannot be ephemeral"));
        }
        self.check_access(creds, id, WRITE)?;
        self.commit(Record::SetEphemeral {
            id,
            ephemeral,
            time_ns: now_ns(),
        })?;
        let stat = self.ns.stat(id)?;
        self.reap(id)?;
        Ok(stat)
    }
}
