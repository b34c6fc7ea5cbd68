//! Attributes of open files, `setattr` (chmod/chown of tables and
//! families) and truncation.

use crate::attr::make_attr;
use crate::ctx::Ctx;
use crate::node::{FamilyAddr, Node};
use crate::open_files::handles::Handle;
use crate::options::FsResult;
use crate::perms::Caller;
use crate::reply::SetAttr;
use engine::{Mutation, RowMutation, TimeRange};
use fuser::{Errno, FileAttr};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// Attributes of an open file as its handle sees it.
pub(crate) fn handle_attr(cx: &Ctx, fh: u64, node: &Node) -> Option<FileAttr> {
    cell_handle_attr(cx, &cx.open.handles().get(fh)?, node)
}

/// Attributes of `node`, gone from the store, as a handle that was
/// open on it when it was unlinked sees it (st_nlink 0).
/// A writer's view first: the kernel keeps one size per inode, and it
/// is the one the writes moved.
pub(crate) fn unlinked_attr(cx: &Ctx, node: &Node) -> Option<FileAttr> {
    let mut handles = cx.open.handles().cells_where(|n| n == node);
    handles.sort_by_key(|h| !matches!(&*h.lock(), Handle::Cell(c) if c.writable));
    handles
        .iter()
        .find_map(|h| cell_handle_attr(cx, h, node).filter(|a| a.nlink == 0))
}

/// Attributes of inode `ino`, a file that a rename replaced while the
/// kernel held it (its name, `node`, is another file's now): as an
/// unlinked file's, from a handle open on it, else what the kernel was
/// last told of it (a reader of the page cache keeps no handle).
pub(crate) fn replaced_attr(cx: &Ctx, ino: u64, node: &Node) -> Option<FileAttr> {
    let mut a = match unlinked_attr(cx, node) {
        Some(a) => a,
        None => {
            let (size, ts) = cx.kernel.inodes().reported(ino)?;
            let (mode, owner, group) = open_file_perms(cx, node)?;
            make_attr(
                ino,
                fuser::FileType::RegularFile,
                mode,
                owner,
                group,
                size,
                crate::options::micros_to_time(ts),
            )
        }
    };
    a.ino = fuser::INodeNo(ino);
    a.nlink = 0;
    Some(a)
}

/// The mode, owner and group an open file of cell `node` shows: its
/// family's; the mount's defaults once the family was dropped (the file
/// was unlinked first: a family holding data cannot be dropped).
fn open_file_perms(cx: &Ctx, node: &Node) -> Option<(u32, u32, u32)> {
    let table = node.table()?;
    let family = node.family()?;
    Some(match cx.data.family_schema(table, family) {
        Ok(f) => (f.mode & 0o666, f.owner, f.group),
        Err(_) => (0o644, cx.opts.uid, cx.opts.gid),
    })
}

fn cell_handle_attr(cx: &Ctx, h: &Arc<Mutex<Handle>>, node: &Node) -> Option<FileAttr> {
    let (len, dirty, cached_ts, unlinked) = {
        let g = h.lock();
        let Handle::Cell(c) = &*g else { return None };
        if c.node != *node {
            return None;
        }
        let cached = !c.direct && !c.writable && c.ts != 0 && !c.unlinked;
        (
            c.value_len(),
            c.dirty || c.unlinked,
            cached.then_some(c.ts),
            c.unlinked,
        )
    };
    let (mode, owner, group) = open_file_perms(cx, node)?;
    let mut a = make_attr(
        cx.kernel.ino_of(node),
        fuser::FileType::RegularFile,
        mode,
        owner,
        group,
        len,
        std::time::SystemTime::now(),
    );
    if unlinked {
        a.nlink = 0;
    }
    if let Some(ts) = cached_ts {
        // A cached reader's page-in asks for the size of the version it
        // reads (a newer one may have been committed since its open).
        let t = crate::options::micros_to_time(ts);
        (a.mtime, a.ctime, a.atime) = (t, t, t);
        cx.kernel
            .inodes()
            .set_reported(cx.kernel.ino_of(node), len, ts);
    } else if !dirty {
        if let Ok(cur) = cx.node_attr(node) {
            a.mtime = cur.mtime;
            a.ctime = cur.ctime;
            a.atime = cur.atime;
        }
    }
    Some(a)
}

/// FUSE `setattr`: chmod/chown of tables and families, truncation of
/// cells, the mtime of cells (see [`crate::files::attrs::set_mtime`]); other times are
/// accepted and ignored.
pub(crate) fn setattr(
    cx: &Ctx,
    caller: &Caller,
    ino: u64,
    fh: Option<u64>,
    set: SetAttr,
) -> FsResult<(FileAttr, Duration)> {
    let node = cx.kernel.node(ino)?;
    let what = format!("setattr {node}");
    let perms = set.mode.is_some() || set.uid.is_some() || set.gid.is_some();
    if node.read_only() && (perms || set.size.is_some() || set.times) {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    if let Some(size) = set.size {
        truncate(cx, caller, &node, fh, size)?;
    }
    if let Some(t) = set.mtime {
        set_mtime(cx, &node, t)?;
    }
    if perms {
        match &*node {
            // A table's permissions, or a family's, live in its schema.
            Node::Table(table)
            | Node::Family(FamilyAddr { table, .. })
            | Node::VersionsDir(FamilyAddr { table, .. }) => {
                let family = node.family();
                let cur = cx.data.schema(table)?;
                let mut s = (*cur).clone();
                match family {
                    None => set_perms(&set, &mut s.mode, &mut s.owner, &mut s.group),
                    Some(family) => {
                        let f = s.families.get_mut(family).ok_or(Errno::ENOENT)?;
                        set_perms(&set, &mut f.mode, &mut f.owner, &mut f.group);
                    }
                }
                // tar and cp -p chmod every family directory they make: only
                // a real change touches the schema.
                if s != *cur {
                    cx.data
                        .store()
                        .set_schema(table, s)
                        .map_err(|e| cx.data.fail(&what, &e))?;
                    cx.kernel.invalidate_table(table, family);
                }
            }
            Node::Root | Node::StatusDir => {
                return Err(cx.data.refuse(
                    &what,
                    Errno::EPERM,
                    "the root and status directories have fixed permissions",
                ))
            }
            n => {
                // Rows, cells and the rest have no permissions of their own
                // (they show their table's or family's). Like vfat's `quiet`
                // option, chmod/chown on them succeed and change nothing, so
                // that tar, cp -p and rsync -a can copy trees in.
                if fh.is_none() {
                    cx.node_attr(n)?;
                }
                log::debug!("{what}: ignored (permissions belong to tables and families)");
            }
        }
    }
    if let Some(fh) = fh {
        if let Some(a) = handle_attr(cx, fh, &node) {
            return Ok((a, cx.attr_ttl(&node)));
        }
    }
    Ok((cx.node_attr(&node)?, cx.attr_ttl(&node)))
}

/// Sets the mtime of a cell: its newest version's timestamp, which is
/// what a cell's mtime shows. A value not yet committed (an open
/// writer's, as `cp -p` sets times before it closes) is committed at
/// that time; a committed one moves there (the version at its old
/// timestamp is deleted and the value set at the new one, in one row
/// mutation). A time that is not after every older version's would
/// make an older value the newest: EINVAL. Other nodes' times are not
/// kept (accepted and ignored).
pub(super) fn set_mtime(cx: &Ctx, node: &Node, t: std::time::SystemTime) -> FsResult<()> {
    let Some(col) = node
        .value_cell()
        .filter(|c| c.view.is_now() && matches!(node, Node::Cell(_)))
    else {
        return Ok(());
    };
    let what = format!("set the mtime of {node}");
    let ts = t
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_micros()).ok())
        .filter(|&ts| ts > 0)
        .ok_or_else(|| {
            cx.data
                .refuse(&what, Errno::EINVAL, "a cell's time is after 1970")
        })?;
    // Before the store's read (see `is_pending_cell`).
    let created = cx.data.is_pending_cell(col);
    let versions = cx.data.versions(col)?;
    let newest = versions.iter().map(|v| v.timestamp).max();
    // An open writer's uncommitted value: committed at `ts` later.
    let mut pending = false;
    for h in cx.open.handles().writers_of(cx.kernel.ino_of(node)) {
        if let Handle::Cell(c) = &mut *h.lock() {
            if c.node == *node && !c.unlinked && (c.dirty || c.created) {
                if newest.is_some_and(|n| n >= ts) {
                    return Err(refuse_mtime(cx, &what, ts));
                }
                c.mtime = Some(ts);
                c.dirty = true;
                c.wrote = true;
                pending = true;
            }
        }
    }
    if pending {
        return Ok(());
    }
    let Some(cur) = versions.iter().max_by_key(|v| v.timestamp) else {
        return if created { Ok(()) } else { Err(Errno::ENOENT) };
    };
    if cur.timestamp == ts {
        return Ok(());
    }
    if versions
        .iter()
        .any(|v| v.timestamp != cur.timestamp && v.timestamp >= ts)
    {
        return Err(refuse_mtime(cx, &what, ts));
    }
    let m = RowMutation::new(col.row.to_vec())
        .delete_cells(
            &col.family,
            col.qualifier.clone(),
            TimeRange::exactly(cur.timestamp),
        )
        .set_at(&col.family, col.qualifier.clone(), ts, cur.value.clone());
    cx.data
        .store()
        .apply(&col.table, &m, cx.write_options())
        .map_err(|e| cx.data.fail(&what, &e))?;
    cx.open.pages().drop_ino(cx.kernel.ino_of(node));
    cx.kernel.invalidate(node);
    Ok(())
}

/// Applies a `setattr`'s mode, owner and group (those it sets) to a
/// table's or family's permissions.
fn set_perms(set: &SetAttr, mode: &mut u32, owner: &mut u32, group: &mut u32) {
    if let Some(m) = set.mode {
        *mode = m & 0o7777;
    }
    *owner = set.uid.unwrap_or(*owner);
    *group = set.gid.unwrap_or(*group);
}

fn refuse_mtime(cx: &Ctx, what: &str, ts: u64) -> Errno {
    cx.data.refuse(
        &what,
        Errno::EINVAL,
        &format!(
            "a cell's mtime is its newest version's timestamp, and {ts} µs is not \
             after an older version's (see .versions/)"
        ),
    )
}

pub(super) fn truncate(
    cx: &Ctx,
    caller: &Caller,
    node: &Node,
    fh: Option<u64>,
    size: u64,
) -> FsResult<()> {
    let what = format!("truncate {node}");
    if size as usize > cx.opts.max_value_size {
        return Err(cx.data.refuse(&what, Errno::EFBIG, "above the value limit"));
    }
    if let Some(h) = fh.and_then(|fh| cx.open.handles().get(fh)) {
        let mut g = h.lock();
        match &mut *g {
            Handle::Cell(c) if c.node == *node => {
                if !c.writable {
                    return Err(Errno::EBADF);
                }
                if let Some(charge) = &mut c.charge {
                    if let Err(e) = charge.resize(size) {
                        return Err(super::io::buffer_refused(cx, &c.node, e));
                    }
                }
                c.data.resize(size as usize, 0);
                c.append_only = false;
                c.dirty = true;
                c.wrote = true;
                return Ok(());
            }
            Handle::Schema(s) => {
                s.data.resize(size as usize, 0);
                s.base_len = s.base_len.min(s.data.len());
                s.dirty = true;
                s.wrote = true;
                return Ok(());
            }
            Handle::Mutate(m) => {
                if size == 0 {
                    m.parser.reset();
                    m.failed = None;
                }
                return Ok(());
            }
            _ => {}
        }
    }
    match node {
        Node::Cell(col) | Node::Version { cell: col, .. } if col.view.is_now() => {
            let ts = if let Node::Version { ts, .. } = node {
                Some(*ts)
            } else {
                None
            };
            // Before the store's read (see `is_pending_cell`).
            let created = cx.data.is_pending_cell(col);
            let cur = match ts {
                Some(t) => cx.data.version(col, t)?,
                None => cx.data.newest(col)?,
            };
            let mut value = match cur {
                Some(c) => c.value.into_vec(),
                None if created => Vec::new(),
                None => return Err(Errno::ENOENT),
            };
            if value.len() as u64 == size {
                return Ok(());
            }
            value.resize(size as usize, 0);
            let m = RowMutation {
                row: col.row.to_vec(),
                mutations: vec![Mutation::SetCell {
                    family: col.family.to_string(),
                    qualifier: col.qualifier.clone(),
                    timestamp: ts,
                    value,
                }],
            };
            cx.data
                .store()
                .apply(&col.table, &m, cx.write_options())
                .map_err(|e| cx.data.fail(&what, &e))?;
            cx.data
                .pending()
                .data_written(&col.table, &col.row, &col.family);
            Ok(())
        }
        Node::Mutate(_) => Ok(()),
        Node::Schema(t) => {
            let cur = cx.data.schema(t)?;
            let mut text = crate::schema_file::render(&cur);
            text.resize(size as usize, b'\n');
            let (new, dropped) = crate::schema_file::apply(&cur, &text, true)
                .map_err(|e| cx.data.fail(&what, &e))?;
            super::schema_write::check_schema_change(cx, caller, &cur, &new, &what, true)?;
            super::schema_write::set_schema(cx, t, new, &dropped, &what)
        }
        n if n.is_dir() => Err(Errno::EISDIR),
        _ => Err(Errno::EPERM),
    }
}
