//! The namespace side of `.chubby/`: names, attributes, mkdir, unlink,
//! rmdir, rename, chmod/chown/truncate and directory listings. The lock
//! service checks permissions itself (owner/group/mode, sticky directories)
//! besides the kernel's `default_permissions`, so both agree for every user
//! of an `allow_other` mount.

use super::files::{DirHandle, LockHandle};
use super::{creds, errno, join, LockDir, LockNode, EVENTS, STATUS};
use crate::attr::make_attr;
use crate::ctx::Ctx;
use crate::node::Node;
use crate::options::{Entry, FsResult};
use crate::perms::Caller;
use crate::reply::{DirOut, SetAttr};
use chubby::{Credentials, NodeKind, NodeSpec, Stat, Target, MAX_CONTENTS};
use fuser::{Errno, FileAttr, FileType};
use std::time::Duration;

/// A name as the lock service takes it: UTF-8 without '/' (NUL cannot reach us).
fn name_str(name: &[u8]) -> FsResult<&str> {
    std::str::from_utf8(name).map_err(|_| Errno::EINVAL)
}

/// Names the mount itself provides in a directory.
fn reserved(dir: &str, name: &[u8]) -> bool {
    name == EVENTS.as_bytes() || (dir == "/" && name == STATUS.as_bytes())
}

impl LockDir {
    /// A lock-service node's attributes as the kernel sees them.
    pub(crate) fn stat_attr(&self, ino: u64, st: &Stat) -> FileAttr {
        let kind = match st.kind {
            NodeKind::Dir => FileType::Directory,
            NodeKind::File => FileType::RegularFile,
        };
        let mut a = make_attr(ino, kind, st.mode, st.uid, st.gid, st.size, st.mtime);
        a.ctime = st.ctime;
        a.nlink = st.nlink;
        a
    }

    /// Fresh attributes of a `.chubby/` inode; ENOENT if it is gone.
    pub(crate) fn attr(&self, cx: &Ctx, node: &LockNode) -> FsResult<FileAttr> {
        let ld = self;
        let ino = Node::Lock(node.clone()).natural_ino();
        let root = Credentials::root();
        match node {
            LockNode::Entry(path) => {
                let st = ld
                    .svc
                    .stat(&root, Target::Path(path))
                    .map_err(|e| errno(&format!("stat {node}"), &e))?;
                Ok(self.stat_attr(ino, &st))
            }
            LockNode::Events(dir) => {
                let st = ld
                    .svc
                    .stat(&root, Target::Path(dir))
                    .map_err(|e| errno(&format!("stat {node}"), &e))?;
                if st.kind != NodeKind::Dir {
                    return Err(Errno::ENOTDIR);
                }
                // Readable by whoever may list the directory.
                Ok(make_attr(
                    ino,
                    FileType::RegularFile,
                    st.mode & 0o444,
                    st.uid,
                    st.gid,
                    0,
                    st.mtime,
                ))
            }
            LockNode::Status => Ok(make_attr(
                ino,
                FileType::RegularFile,
                0o444,
                cx.opts.uid,
                cx.opts.gid,
                ld.status_text().len() as u64,
                std::time::SystemTime::now(),
            )),
        }
    }

    /// The `.chubby/` directory under parent inode `parent`.
    fn dir_of(&self, cx: &Ctx, parent: u64) -> FsResult<String> {
        match cx.lock_node(parent) {
            Some(LockNode::Entry(p)) => Ok(p),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    /// Takes a kernel reference on a new or found node and builds its entry.
    pub(crate) fn entry(&self, cx: &Ctx, node: LockNode, st: &Stat) -> FsResult<Entry> {
        let node = Node::Lock(node);
        let attr = self.stat_attr(node.natural_ino(), st);
        crate::lookup::register(cx, &node)?;
        Ok(cx.entry(&node, attr))
    }

    /// FUSE `mkdir` in `.chubby/`.
    pub fn mkdir(
        &self,
        cx: &Ctx,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> FsResult<Entry> {
        let ld = self;
        let dir = self.dir_of(cx, parent)?;
        if reserved(&dir, name) {
            return Err(Errno::EEXIST);
        }
        let path = join(&dir, name_str(name)?);
        let spec = NodeSpec::dir(mode & !umask & 0o7777);
        let st = ld
            .svc
            .create(&creds(caller), &path, &spec)
            .map_err(|e| errno(&format!("mkdir {path}"), &e))?;
        self.entry(cx, LockNode::Entry(path), &st)
    }

    /// FUSE `unlink` in `.chubby/`.
    pub fn unlink(&self, cx: &Ctx, caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
        let ld = self;
        let dir = self.dir_of(cx, parent)?;
        if reserved(&dir, name) {
            return Err(Errno::EPERM);
        }
        let path = join(&dir, name_str(name)?);
        ld.svc
            .unlink(&creds(caller), &path)
            .map_err(|e| errno(&format!("unlink {path}"), &e))
    }

    /// FUSE `rmdir` in `.chubby/`.
    pub fn rmdir(&self, cx: &Ctx, caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
        let ld = self;
        let dir = self.dir_of(cx, parent)?;
        if reserved(&dir, name) {
            return Err(Errno::ENOTDIR);
        }
        let path = join(&dir, name_str(name)?);
        ld.svc
            .rmdir(&creds(caller), &path)
            .map_err(|e| errno(&format!("rmdir {path}"), &e))
    }

    /// FUSE `rename` with either end in `.chubby/` (EXDEV across the boundary).
    #[allow(clippy::too_many_arguments)]
    pub fn rename(
        &self,
        cx: &Ctx,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        let ld = self;
        let (from_dir, to_dir) = match (self.dir_of(cx, parent), self.dir_of(cx, newparent)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(Errno::ENOENT), _) | (_, Err(Errno::ENOENT)) => return Err(Errno::EXDEV),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        if reserved(&from_dir, name) || reserved(&to_dir, newname) {
            return Err(Errno::EPERM);
        }
        if flags & !libc::RENAME_NOREPLACE != 0 {
            return Err(Errno::EINVAL);
        }
        let from = join(&from_dir, name_str(name)?);
        let to = join(&to_dir, name_str(newname)?);
        let c = creds(caller);
        if flags & libc::RENAME_NOREPLACE != 0 && ld.svc.stat(&c, Target::Path(&to)).is_ok() {
            return Err(Errno::EEXIST);
        }
        ld.svc
            .rename(&c, &from, &to)
            .map_err(|e| errno(&format!("rename {from} to {to}"), &e))?;
        // The kernel keeps the moved inodes (and those below a moved
        // directory) under their new names: make their nodes follow.
        let under = |p: &str| -> Option<String> {
            if p == from {
                Some(to.clone())
            } else {
                p.strip_prefix(from.as_str())
                    .filter(|rest| rest.starts_with('/'))
                    .map(|rest| format!("{to}{rest}"))
            }
        };
        cx.kernel.inodes().rebind_with(|n| match n {
            Node::Lock(LockNode::Entry(p)) => under(p).map(|p| Node::Lock(LockNode::Entry(p))),
            Node::Lock(LockNode::Events(p)) => under(p).map(|p| Node::Lock(LockNode::Events(p))),
            _ => None,
        });
        Ok(())
    }

    /// FUSE `setattr` in `.chubby/`: chmod, chown, truncation (through the
    /// open handle if given, else at once); times are accepted and ignored.
    pub fn setattr(
        &self,
        cx: &Ctx,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        set: SetAttr,
    ) -> FsResult<(FileAttr, Duration)> {
        let ld = self;
        let node = cx.lock_node(ino).ok_or(Errno::ENOENT)?;
        let LockNode::Entry(path) = &node else {
            if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() || set.size.is_some() {
                return Err(Errno::EPERM);
            }
            return Ok((self.attr(cx, &node)?, cx.opts.attr_timeout));
        };
        let c = creds(caller);
        let what = format!("setattr {node}");
        if let Some(size) = set.size {
            if size > MAX_CONTENTS as u64 {
                return Err(Errno::EFBIG);
            }
            let own = fh.filter(|f| super::is_lock_fh(*f));
            match own {
                Some(f) => self.truncate_handle(f, size as usize)?,
                None => {
                    let (mut data, _) = ld
                        .svc
                        .read(&Credentials::root(), Target::Path(path))
                        .map_err(|e| errno(&what, &e))?;
                    data.resize(size as usize, 0);
                    ld.svc
                        .set_contents(&c, Target::Path(path), &data)
                        .map_err(|e| errno(&what, &e))?;
                }
            }
        }
        if let Some(m) = set.mode {
            ld.svc
                .chmod(&c, Target::Path(path), m & 0o7777)
                .map_err(|e| errno(&what, &e))?;
        }
        if set.uid.is_some() || set.gid.is_some() {
            let cur = ld
                .svc
                .stat(&Credentials::root(), Target::Path(path))
                .map_err(|e| errno(&what, &e))?;
            // chown to the owner it already has is no change (not root-only).
            let uid = set.uid.filter(|u| *u != cur.uid);
            let gid = set.gid.filter(|g| *g != cur.gid);
            if uid.is_some() || gid.is_some() {
                ld.svc
                    .chown(&c, Target::Path(path), uid, gid)
                    .map_err(|e| errno(&what, &e))?;
            }
        }
        let mut attr = self.attr(cx, &node)?;
        if let Some(a) = fh.and_then(|f| self.handle_attr(cx, f)) {
            attr.size = a.size;
        }
        Ok((attr, cx.opts.attr_timeout))
    }

    /// FUSE `opendir` of a `.chubby/` directory.
    pub fn opendir(&self, cx: &Ctx, caller: &Caller, ino: u64) -> FsResult<u64> {
        let ld = self;
        let path = match cx.lock_node(ino) {
            Some(LockNode::Entry(p)) => p,
            Some(_) => return Err(Errno::ENOTDIR),
            None => return Err(Errno::ENOENT),
        };
        Ok(ld.insert(LockHandle::Dir(DirHandle {
            path,
            creds: creds(caller),
            entries: None,
        })))
    }

    /// The entries of a `.chubby/` directory: ".", ".." and its children
    /// (the virtual `.events` and `.status` are not listed).
    fn list(&self, path: &str, c: &Credentials) -> FsResult<Vec<(Vec<u8>, Node, FileType)>> {
        let ld = self;
        let list = ld
            .svc
            .list(c, path)
            .map_err(|e| errno(&format!("list {path}"), &e))?;
        let me = Node::Lock(LockNode::Entry(path.to_string()));
        let parent = if path == "/" {
            Node::Root
        } else {
            Node::Lock(LockNode::Entry(super::split(path).0.to_string()))
        };
        let mut out = vec![
            (b".".to_vec(), me, FileType::Directory),
            (b"..".to_vec(), parent, FileType::Directory),
        ];
        for e in list {
            let kind = match e.kind {
                NodeKind::Dir => FileType::Directory,
                NodeKind::File => FileType::RegularFile,
            };
            let node = Node::Lock(LockNode::Entry(join(path, &e.name)));
            out.push((e.name.into_bytes(), node, kind));
        }
        Ok(out)
    }

    /// FUSE `readdir`/`readdirplus` of a `.chubby/` directory; `add` returns
    /// true when the reply is full.
    pub fn readdir(
        &self,
        cx: &Ctx,
        fh: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirOut<'_>) -> bool,
    ) -> FsResult<()> {
        let h = self.handle(fh)?;
        let mut g = h.lock();
        let LockHandle::Dir(d) = &mut *g else {
            return Err(Errno::EBADF);
        };
        if offset == 0 || d.entries.is_none() {
            d.entries = Some(self.list(&d.path, &d.creds)?);
        }
        let entries = d.entries.as_deref().unwrap_or_default();
        Self::emit_listing(cx, entries, offset, plus, add)
    }

    /// `readdir` of a `.chubby/` directory that was not opened: listed
    /// afresh for each call, as the caller may see it.
    pub fn readdir_unopened(
        &self,
        cx: &Ctx,
        caller: &Caller,
        ino: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirOut<'_>) -> bool,
    ) -> FsResult<()> {
        let path = match cx.lock_node(ino) {
            Some(LockNode::Entry(p)) => p,
            Some(_) => return Err(Errno::ENOTDIR),
            None => return Err(Errno::ENOENT),
        };
        let entries = self.list(&path, &creds(caller))?;
        Self::emit_listing(cx, &entries, offset, plus, add)
    }

    /// Sends the entries after `offset` (entry `i` has offset `i + 1`).
    fn emit_listing(
        cx: &Ctx,
        entries: &[(Vec<u8>, Node, FileType)],
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirOut<'_>) -> bool,
    ) -> FsResult<()> {
        for (i, (name, node, kind)) in entries.iter().enumerate() {
            let off = i as u64 + 1;
            if off <= offset {
                continue;
            }
            let attr = if plus {
                match cx.node_attr(node) {
                    Ok(a) => Some(a),
                    // Gone since it was listed.
                    Err(_) if i >= 2 => continue,
                    Err(_) => Some(cx.dir_attr(node.natural_ino(), 0o755, 0, 0)),
                }
            } else {
                None
            };
            if add(&DirOut {
                ino: node.natural_ino(),
                offset: off,
                kind: *kind,
                name,
                attr,
                ttl: cx.entry_ttl(node),
            }) {
                return Ok(());
            }
            if plus && i >= 2 {
                // readdirplus entries (but "." and "..") count as lookups.
                crate::lookup::register(cx, node)?;
            }
        }
        Ok(())
    }
}
