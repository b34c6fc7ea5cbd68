//! Namespace operations on etcd: the same checks as the local cell, then
//! one transaction that compares what the checks read (a concurrent change
//! makes it fail, and the operation is tried again).

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, DeleteOptions, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse,
};

use super::node::{self, now_ns, NodeVal};
use super::EtcdCell;
use crate::acl::{self, Credentials, READ, SEARCH, WRITE};
use crate::error::{Error, Result};
use crate::path;
use crate::session::Handle;
use crate::types::{check_contents, DirEntry, NodeKind, NodeSpec, Stat, Target, ROOT_ID};

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
/// Attempts of an operation whose transaction lost a race.
const TRIES: usize = 20;

/// A node as read: where it is and what its key's revisions were.
#[derive(Clone, Debug)]
pub struct Found {
    pub path: String,
    pub key: String,
    pub val: NodeVal,
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: i64,
}

impl EtcdCell {
    fn found(&self, kv: &KeyValue) -> Result<Found> {
        let key = kv
            .key_str()
            .map_err(|_| Error::corruption("non-UTF-8 key"))?;
        let path = node::path_of_key(&self.prefix, key)
            .ok_or_else(|| Error::corruption(format!("{key} is not a node key")))?;
        Ok(Found {
            path: path.to_string(),
            key: key.to_string(),
            val: NodeVal::decode(key, kv.value())?,
            create_rev: kv.create_revision(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
        })
    }

    /// The node at a normalised path, without permission checks.
    pub(super) fn get_node(&self, path: &str) -> Result<Option<Found>> {
        let key = node::node_key(&self.prefix, path);
        let r = self.run("read a node", |mut c| async move { c.get(key, None).await })?;
        r.kvs().first().map(|kv| self.found(kv)).transpose()
    }

    /// Resolves a path as a POSIX lookup does: every directory on the way
    /// must exist and be searchable. One transaction reads them all.
    pub(super) fn lookup(&self, creds: &Credentials, p: &str) -> Result<Found> {
        let comps = path::components(p)?;
        let keys: Vec<String> = (0..=comps.len())
            .map(|i| node::node_key(&self.prefix, &node::normal(&comps[..i])))
            .collect();
        let ops: Vec<TxnOp> = keys.iter().map(|k| TxnOp::get(k.clone(), None)).collect();
        let r = self.txn("look up a path", Txn::new().and_then(ops))?;
        let mut found = None;
        for (i, op) in r.op_responses().into_iter().enumerate() {
            let here = node::normal(&comps[..i]);
            let TxnOpResponse::Get(g) = op else {
                return Err(Error::corruption("etcd answered a get with something else"));
            };
            let Some(kv) = g.kvs().first() else {
                return Err(Error::NotFound(p.to_string()));
            };
            let f = self.found(kv)?;
            if i < comps.len() {
                if f.val.kind != NodeKind::Dir {
                    return Err(Error::NotDir(here));
                }
                acl::check(creds, f.val.perm(), SEARCH, &here)?;
            }
            found = Some(f);
        }
        found.ok_or_else(|| Error::NotFound(p.to_string()))
    }

    /// The node a target names, and the handle if it came through one.
    pub(super) fn resolve_target(
        &self,
        creds: &Credentials,
        target: Target<'_>,
    ) -> Result<(Found, Option<Handle>)> {
        match target {
            Target::Path(p) => Ok((self.lookup(creds, p)?, None)),
            Target::Handle(h) => {
                let (handle, path) = {
                    let local = self.local.lock();
                    let handle = local.sessions.handle(h)?;
                    let path = local.paths.get(&h).cloned().unwrap_or_default();
                    (handle, path)
                };
                match self.get_node(&path)? {
                    Some(f) if f.val.id == handle.node => Ok((f, Some(handle))),
                    _ => Err(Error::NotFound(format!("node {} is gone", handle.node))),
                }
            }
        }
    }

    /// The directory that would hold `p`, and `p`'s last name.
    fn resolve_parent<'p>(&self, creds: &Credentials, p: &'p str) -> Result<(Found, &'p str)> {
        let (comps, name) = path::split_last(p)?;
        let parent = self.lookup(creds, &node::normal(&comps))?;
        if parent.val.kind != NodeKind::Dir {
            return Err(Error::NotDir(parent.path));
        }
        Ok((parent, name))
    }

    /// Every node strictly below a directory.
    fn subtree(&self, dir: &str) -> Result<Vec<Found>> {
        let key = node::children_prefix(&self.prefix, dir);
        let r = self.run("list a directory", |mut c| async move {
            c.get(key, Some(GetOptions::new().with_prefix())).await
        })?;
        r.kvs()
            .iter()
            .map(|kv| self.found(kv))
            .filter(|f| f.as_ref().map_or(true, |f| f.path != "/"))
            .collect()
    }

    fn children(&self, dir: &str) -> Result<Vec<Found>> {
        let base = if dir == "/" { 1 } else { dir.len() + 1 };
        Ok(self
            .subtree(dir)?
            .into_iter()
            .filter(|f| !f.path[base..].contains('/'))
            .collect())
    }

    pub(super) fn stat_of(&self, f: &Found) -> Result<Stat> {
        if f.val.kind == NodeKind::File {
            return Ok(f.val.stat(0, 0));
        }
        let kids = self.children(&f.path)?;
        let subdirs = kids.iter().filter(|k| k.val.kind == NodeKind::Dir).count();
        Ok(f.val.stat(kids.len() as u64, subdirs as u32))
    }

    fn check_lock_delay(&self, delay: Duration) -> Result<u64> {
        crate::types::lock_delay_ms(delay, self.opts.max_lock_delay)
    }

    pub(super) fn create_node(
        &self,
        creds: &Credentials,
        p: &str,
        spec: &NodeSpec,
        allow_ephemeral: bool,
    ) -> Result<Found> {
        let comps = path::components(p)?;
        if comps.is_empty() {
            return Err(Error::Exists(p.to_string()));
        }
        let norm = node::normal(&comps);
        let (parent, _) = self.resolve_parent(creds, &norm)?;
        if self.get_node(&norm)?.is_some() {
            return Err(Error::Exists(p.to_string()));
        }
        acl::check(creds, parent.val.perm(), WRITE | SEARCH, &parent.path)?;
        if spec.ephemeral && !allow_ephemeral {
            return Err(Error::invalid(
                "an ephemeral node needs a handle: create it with open_handle",
            ));
        }
        let lock_delay_ms =
            self.check_lock_delay(spec.lock_delay.unwrap_or(self.opts.default_lock_delay))?;
        let pm = &parent.val;
        let mut mode = spec.mode & 0o7777;
        let gid = if pm.mode & S_ISGID != 0 {
            if spec.kind == NodeKind::Dir {
                mode |= S_ISGID;
            }
            pm.gid
        } else {
            creds.gid
        };
        let id = self.next_id()?;
        let t = now_ns();
        let val = NodeVal {
            id,
            kind: spec.kind,
            mode,
            uid: creds.uid,
            gid,
            content_gen: 0,
            lock_gen: id,
            lock_delay_ms,
            ephemeral: spec.ephemeral,
            mtime_ns: t,
            ctime_ns: t,
            data: Vec::new(),
        };
        let key = node::node_key(&self.prefix, &norm);
        let lease = if spec.ephemeral { self.lease.id() } else { 0 };
        let txn = Txn::new()
            .when([
                Compare::version(key.clone(), CompareOp::Equal, 0),
                Compare::create_revision(parent.key.clone(), CompareOp::Equal, parent.create_rev),
            ])
            .and_then([TxnOp::put(
                key.clone(),
                val.encode(),
                Self::lease_opts(lease),
            )]);
        let r = self.txn("create a node", txn)?;
        if !r.succeeded() {
            return match self.get_node(&norm)? {
                Some(_) => Err(Error::Exists(p.to_string())),
                None => Err(Error::NotFound(parent.path)),
            };
        }
        let rev = Self::rev_of(r.header());
        self.settle(rev);
        Ok(Found {
            path: norm,
            key,
            val,
            create_rev: rev,
            mod_rev: rev,
            lease,
        })
    }

    /// Rewrites a node's value if it did not change since `f` was read.
    pub(super) fn replace_node(&self, f: &Found, val: &NodeVal) -> Result<bool> {
        self.replace(f, val, f.lease)
    }

    fn replace(&self, f: &Found, val: &NodeVal, lease: i64) -> Result<bool> {
        let txn = Txn::new()
            .when([Compare::mod_revision(
                f.key.clone(),
                CompareOp::Equal,
                f.mod_rev,
            )])
            .and_then([TxnOp::put(
                f.key.clone(),
                val.encode(),
                Self::lease_opts(lease),
            )]);
        let r = self.txn("update a node", txn)?;
        if r.succeeded() {
            self.settle(Self::rev_of(r.header()));
        }
        Ok(r.succeeded())
    }

    /// Reads the target, lets `change` check and edit it, and writes it back,
    /// again until no one changed it in between.
    fn update(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        mut change: impl FnMut(&Found, Option<&Handle>, &mut NodeVal, &mut i64) -> Result<()>,
    ) -> Result<Found> {
        for _ in 0..TRIES {
            let (f, h) = self.resolve_target(creds, target)?;
            let mut val = f.val.clone();
            let mut lease = f.lease;
            change(&f, h.as_ref(), &mut val, &mut lease)?;
            if self.replace(&f, &val, lease)? {
                return Ok(Found { val, lease, ..f });
            }
        }
        Err(etcd_busy())
    }

    pub(super) fn read_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
    ) -> Result<(Vec<u8>, Stat)> {
        let (f, handle) = self.resolve_target(creds, target)?;
        match handle {
            Some(h) if !h.read => {
                return Err(Error::BadHandle("handle is not open for reading".into()))
            }
            Some(_) => {}
            None => acl::check(creds, f.val.perm(), READ, &f.path)?,
        }
        if f.val.kind == NodeKind::Dir {
            return Err(Error::IsDir(f.path));
        }
        let stat = f.val.stat(0, 0);
        Ok((f.val.data, stat))
    }

    pub(super) fn set_contents_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        data: &[u8],
    ) -> Result<Stat> {
        check_contents(data)?;
        let f = self.update(creds, target, |f, h, v, _| {
            match h {
                Some(h) if !h.write => {
                    return Err(Error::BadHandle("handle is not open for writing".into()))
                }
                Some(_) => {}
                None => acl::check(creds, f.val.perm(), WRITE, &f.path)?,
            }
            if f.val.kind == NodeKind::Dir {
                return Err(Error::IsDir(f.path.clone()));
            }
            v.data = data.to_vec();
            v.content_gen += 1;
            v.mtime_ns = now_ns();
            v.ctime_ns = v.mtime_ns;
            Ok(())
        })?;
        Ok(f.val.stat(0, 0))
    }

    /// Finds the entry `p` names for removal or renaming away, checking
    /// write permission on its directory and the sticky bit.
    fn removable_entry(&self, creds: &Credentials, p: &str) -> Result<(Found, Found)> {
        let (parent, name) = self.resolve_parent(creds, p)?;
        let child = self
            .get_node(&node::join(&parent.path, name))?
            .ok_or_else(|| Error::NotFound(p.to_string()))?;
        acl::check(creds, parent.val.perm(), WRITE | SEARCH, &parent.path)?;
        if !acl::may_delete(creds, parent.val.perm(), child.val.uid) {
            return Err(Error::PermissionDenied(p.to_string()));
        }
        Ok((parent, child))
    }

    /// Deletes a node (a directory only if still empty) with its lock keys.
    fn remove_node(&self, f: &Found) -> Result<bool> {
        let mut when = vec![Compare::mod_revision(
            f.key.clone(),
            CompareOp::Equal,
            f.mod_rev,
        )];
        if f.val.kind == NodeKind::Dir {
            when.push(
                Compare::version(
                    node::children_prefix(&self.prefix, &f.path),
                    CompareOp::Equal,
                    0,
                )
                .with_prefix(),
            );
        }
        let pre = Some(DeleteOptions::new().with_prefix());
        let txn = Txn::new().when(when).and_then([
            TxnOp::delete(f.key.clone(), None),
            TxnOp::delete(node::lock_prefix(&self.prefix, f.val.id), pre.clone()),
            TxnOp::delete(node::marker_prefix(&self.prefix, f.val.id), pre),
        ]);
        let r = self.txn("remove a node", txn)?;
        if r.succeeded() {
            let id = f.val.id;
            self.local.lock().held.retain(|h| h.node != id);
            self.watch.poke();
            self.settle(Self::rev_of(r.header()));
        }
        Ok(r.succeeded())
    }

    pub(super) fn unlink_impl(&self, creds: &Credentials, p: &str) -> Result<()> {
        for _ in 0..TRIES {
            let (parent, child) = self.removable_entry(creds, p)?;
            if child.val.kind == NodeKind::Dir {
                return Err(Error::IsDir(p.to_string()));
            }
            if self.remove_node(&child)? {
                return self.reap(&parent.path);
            }
        }
        Err(etcd_busy())
    }

    pub(super) fn rmdir_impl(&self, creds: &Credentials, p: &str) -> Result<()> {
        for _ in 0..TRIES {
            if self.lookup(creds, p)?.val.id == ROOT_ID {
                return Err(Error::invalid("cannot remove the root"));
            }
            let (parent, child) = self.removable_entry(creds, p)?;
            if child.val.kind != NodeKind::Dir {
                return Err(Error::NotDir(p.to_string()));
            }
            if !self.children(&child.path)?.is_empty() {
                return Err(Error::NotEmpty(p.to_string()));
            }
            if self.remove_node(&child)? {
                return self.reap(&parent.path);
            }
        }
        Err(etcd_busy())
    }

    pub(super) fn rename_impl(&self, creds: &Credentials, from: &str, to: &str) -> Result<()> {
        for _ in 0..TRIES {
            if self.try_rename(creds, from, to)? {
                return Ok(());
            }
        }
        Err(etcd_busy())
    }

    fn try_rename(&self, creds: &Credentials, from: &str, to: &str) -> Result<bool> {
        let (sp, src) = self.removable_entry(creds, from)?;
        let (dp, dname) = self.resolve_parent(creds, to)?;
        acl::check(creds, dp.val.perm(), WRITE | SEARCH, &dp.path)?;
        if dp.path == src.path || dp.path.starts_with(&format!("{}/", src.path)) {
            return Err(Error::invalid(format!("cannot move {from} below itself")));
        }
        let dst_path = node::join(&dp.path, dname);
        let replaced = self.get_node(&dst_path)?;
        let mut when = vec![
            Compare::mod_revision(src.key.clone(), CompareOp::Equal, src.mod_rev),
            Compare::create_revision(dp.key.clone(), CompareOp::Equal, dp.create_rev),
        ];
        let mut ops = Vec::new();
        match &replaced {
            Some(dst) if dst.val.id == src.val.id => return Ok(true),
            Some(dst) => {
                match (src.val.kind, dst.val.kind) {
                    (NodeKind::Dir, NodeKind::File) => return Err(Error::NotDir(to.to_string())),
                    (NodeKind::File, NodeKind::Dir) => return Err(Error::IsDir(to.to_string())),
                    (_, NodeKind::Dir) if !self.children(&dst.path)?.is_empty() => {
                        return Err(Error::NotEmpty(to.to_string()))
                    }
                    _ => {}
                }
                if !acl::may_delete(creds, dp.val.perm(), dst.val.uid) {
                    return Err(Error::PermissionDenied(to.to_string()));
                }
                when.push(Compare::mod_revision(
                    dst.key.clone(),
                    CompareOp::Equal,
                    dst.mod_rev,
                ));
                let pre = Some(DeleteOptions::new().with_prefix());
                ops.push(TxnOp::delete(
                    node::lock_prefix(&self.prefix, dst.val.id),
                    pre.clone(),
                ));
                ops.push(TxnOp::delete(
                    node::marker_prefix(&self.prefix, dst.val.id),
                    pre,
                ));
            }
            None => when.push(Compare::version(
                node::node_key(&self.prefix, &dst_path),
                CompareOp::Equal,
                0,
            )),
        }
        if src.val.kind == NodeKind::Dir && sp.path != dp.path {
            acl::check(creds, src.val.perm(), WRITE, &src.path)?;
        }
        // The node and its subtree move to the new path, parents first.
        let mut moving = vec![src.clone()];
        if src.val.kind == NodeKind::Dir {
            moving.extend(self.subtree(&src.path)?);
        }
        let dst_key = node::node_key(&self.prefix, &dst_path);
        for f in &moving {
            when.push(Compare::mod_revision(
                f.key.clone(),
                CompareOp::Equal,
                f.mod_rev,
            ));
            if f.key != dst_key {
                ops.push(TxnOp::delete(f.key.clone(), None));
            }
        }
        let t = now_ns();
        for f in &moving {
            let new_path = format!("{dst_path}{}", &f.path[src.path.len()..]);
            let mut v = f.val.clone();
            if f.val.id == src.val.id {
                v.ctime_ns = t;
            }
            let key = node::node_key(&self.prefix, &new_path);
            ops.push(TxnOp::put(key, v.encode(), Self::lease_opts(f.lease)));
        }
        let r = self.txn("rename", Txn::new().when(when).and_then(ops))?;
        if !r.succeeded() {
            return Ok(false);
        }
        {
            let mut local = self.local.lock();
            let old = src.path.clone();
            for p in local.paths.values_mut() {
                if *p == old || p.starts_with(&format!("{old}/")) {
                    *p = format!("{dst_path}{}", &p[old.len()..]);
                }
            }
            if let Some(dst) = &replaced {
                let id = dst.val.id;
                local.held.retain(|h| h.node != id);
            }
        }
        self.settle(Self::rev_of(r.header()));
        self.reap(&sp.path)?;
        Ok(true)
    }

    pub(super) fn list_impl(&self, creds: &Credentials, p: &str) -> Result<Vec<DirEntry>> {
        let f = self.lookup(creds, p)?;
        if f.val.kind != NodeKind::Dir {
            return Err(Error::NotDir(p.to_string()));
        }
        acl::check(creds, f.val.perm(), READ, &f.path)?;
        let base = if f.path == "/" { 1 } else { f.path.len() + 1 };
        let mut out: Vec<DirEntry> = self
            .children(&f.path)?
            .into_iter()
            .map(|c| DirEntry {
                name: c.path[base..].to_string(),
                id: c.val.id,
                kind: c.val.kind,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub(super) fn chmod_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        mode: u32,
    ) -> Result<Stat> {
        let f = self.update(creds, target, |f, _, v, _| {
            if !acl::is_owner(creds, f.val.perm()) {
                return Err(Error::NotPermitted(f.path.clone()));
            }
            let mut mode = mode & 0o7777;
            if !creds.is_root() && !creds.in_group(f.val.gid) {
                mode &= !S_ISGID;
            }
            v.mode = mode;
            v.ctime_ns = now_ns();
            Ok(())
        })?;
        self.stat_of(&f)
    }

    pub(super) fn chown_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Stat> {
        let f = self.update(creds, target, |f, _, v, _| {
            let m = &f.val;
            let new_uid = uid.unwrap_or(m.uid);
            let new_gid = gid.unwrap_or(m.gid);
            if !creds.is_root()
                && (new_uid != m.uid
                    || (new_gid != m.gid && (creds.uid != m.uid || !creds.in_group(new_gid))))
            {
                return Err(Error::NotPermitted(f.path.clone()));
            }
            if (new_uid, new_gid) != (m.uid, m.gid) && m.kind == NodeKind::File {
                v.mode &= !(S_ISUID | S_ISGID);
            }
            v.uid = new_uid;
            v.gid = new_gid;
            v.ctime_ns = now_ns();
            Ok(())
        })?;
        self.stat_of(&f)
    }

    pub(super) fn set_lock_delay_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        delay: Duration,
    ) -> Result<Stat> {
        let ms = self.check_lock_delay(delay)?;
        let f = self.update(creds, target, |f, _, v, _| {
            acl::check(creds, f.val.perm(), WRITE, &f.path)?;
            v.lock_delay_ms = ms;
            v.ctime_ns = now_ns();
            Ok(())
        })?;
        self.stat_of(&f)
    }

    pub(super) fn set_ephemeral_impl(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        ephemeral: bool,
    ) -> Result<Stat> {
        let session_lease = self.lease.id();
        let f = self.update(creds, target, |f, _, v, lease| {
            if f.val.id == ROOT_ID {
                return Err(Error::invalid("the root cannot be ephemeral"));
            }
            acl::check(creds, f.val.perm(), WRITE, &f.path)?;
            v.ephemeral = ephemeral;
            v.ctime_ns = now_ns();
            // An ephemeral node lives no longer than this daemon's session.
            *lease = if ephemeral { session_lease } else { 0 };
            Ok(())
        })?;
        let stat = self.stat_of(&f)?;
        self.reap(&f.path)?;
        Ok(stat)
    }

    /// Removes the node at `path` if it is ephemeral, unopened here and (a
    /// directory) empty, then its parent likewise.
    pub(super) fn reap(&self, path: &str) -> Result<()> {
        let mut path = path.to_string();
        while path != "/" {
            let Some(f) = self.get_node(&path)? else {
                return Ok(());
            };
            let open = self.local.lock().sessions.open_count(f.val.id) > 0;
            if !f.val.ephemeral || open {
                return Ok(());
            }
            if f.val.kind == NodeKind::Dir && !self.children(&path)?.is_empty() {
                return Ok(());
            }
            if !self.remove_node(&f)? {
                return Ok(());
            }
            log::debug!("chubby: ephemeral {path} vanishes");
            path = match path.rfind('/') {
                Some(0) | None => "/".to_string(),
                Some(i) => path[..i].to_string(),
            };
        }
        Ok(())
    }
}

/// An operation that kept losing races to other writers.
pub(super) fn etcd_busy() -> Error {
    Error::io(
        "etcd: the node kept changing under the operation",
        std::io::Error::from_raw_os_error(libc::EAGAIN),
    )
}
