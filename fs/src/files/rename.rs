//! `unlink` and `rename` of cells, versions and rows.

use crate::ctx::Ctx;
use crate::doing::Doing;
use crate::names::{parse_lenient, parse_version_name, KeyName};
use crate::node::{CellAddr, Node, MUTATE, SCHEMA, VERSIONS};
use crate::open_files::handles::{CellHandle, Handle};
use crate::options::FsResult;
use crate::perms::Caller;
use engine::{RowMutation, TimeRange};
use fuser::Errno;

/// How long a rename waits for the release of the descriptor that created
/// its source, which `close` does not wait for, to commit it.
const CREATOR_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a source found neither stored nor pending is looked for again
/// (a release may be committing it) before the rename answers ENOENT.
const ABSENT_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// FUSE `unlink`.
pub(crate) fn unlink(cx: &Ctx, _caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
    let p = cx.kernel.node(parent)?;
    let what = Doing::entry("unlink", &p, name);
    if p.read_only() {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    match &*p {
        // The file hides until created again (see Pending::hide).
        Node::Table(t) if name == SCHEMA.as_bytes() || name == MUTATE.as_bytes() => {
            if cx.data.pending().hide(t, &String::from_utf8_lossy(name)) {
                cx.kernel.invalidate_entry(&p, name.to_vec());
                Ok(())
            } else {
                Err(Errno::ENOENT)
            }
        }
        Node::Family(_) if name == VERSIONS.as_bytes() => Err(Errno::EISDIR),
        // A live family (the view is not read-only).
        Node::Family(fa) => {
            let (table, row, family) = (&fa.table, &fa.row, &fa.family);
            cx.data.check_removal(table, &what)?;
            let kn = parse_lenient(name).ok_or(Errno::ENOENT)?;
            let q = cx.data.resolve_qualifier(fa, &kn)?.ok_or(Errno::ENOENT)?;
            let col = fa.column(q);
            // Before the store's read (see `is_pending_cell`).
            let pending = cx.data.is_pending_cell(&col);
            // Nothing to remove answers ENOENT and changes nothing: a
            // writer open on a cell whose versions went another way
            // (`.mutate`, `rm` of its versions) still commits.
            if !pending && cx.data.newest(&col)?.is_none() {
                return Err(Errno::ENOENT);
            }
            // Open handles on the cell or its versions commit nothing
            // from now on (a created, uncommitted cell goes with them).
            let created = super::commit::orphan_handles(cx, |n| {
                n.is_column_of(table, row, family, &col.qualifier)
            });
            // A created cell is read once its handles can commit no more.
            if pending && cx.data.newest(&col)?.is_none() {
                return if created {
                    cx.data.pending().add_row(table, row);
                    cx.data.pending().add_family(table, row, family);
                    Ok(())
                } else {
                    Err(Errno::ENOENT)
                };
            }
            delete_versions(cx, &col, TimeRange::ALL, &what)?;
            cx.kernel.invalidate(&Node::VersionsColumn(col));
            Ok(())
        }
        // A live column (the view is not read-only).
        Node::VersionsColumn(col) => {
            let ts = parse_version_name(name).ok_or(Errno::ENOENT)?;
            let (table, row, family) = (&col.table, &col.row, &col.family);
            cx.data.check_removal(table, &what)?;
            super::commit::orphan_handles(cx, |n| {
                n.is_column_of(table, row, family, &col.qualifier)
                    && matches!(n, Node::Version { ts: t, .. } if *t == ts)
            });
            if cx.data.version(col, ts)?.is_none() {
                return Err(Errno::ENOENT);
            }
            delete_versions(cx, col, TimeRange::exactly(ts), &what)?;
            super::lost_cells::writers_lost_cells(
                cx,
                |n| matches!(n, Node::Cell(c) if c == col),
                true,
            );
            cx.data
                .pending()
                .add_column(table, row, family, &col.qualifier);
            cx.kernel.invalidate(&Node::Cell(col.clone()));
            Ok(())
        }
        n if !n.is_dir() => Err(Errno::ENOTDIR),
        _ => Err(cx.data.refuse(&what, Errno::EPERM, "not a cell or version")),
    }
}

/// Deletes the versions of a live column in `range`; its row and family
/// directories stay until rmdir, as on any filesystem.
fn delete_versions(
    cx: &Ctx,
    col: &CellAddr,
    range: TimeRange,
    what: &dyn std::fmt::Display,
) -> FsResult<()> {
    let m =
        RowMutation::new(col.row.to_vec()).delete_cells(&col.family, col.qualifier.clone(), range);
    cx.data
        .store()
        .apply(&col.table, &m, cx.write_options())
        .map_err(|e| cx.data.fail(what, &e))?;
    cx.data.pending().add_row(&col.table, &col.row);
    cx.data
        .pending()
        .add_family(&col.table, &col.row, &col.family);
    Ok(())
}

/// `renameat2(RENAME_EXCHANGE)` of two cells of one row: one row
/// mutation swaps every version of both; their descriptors and inode
/// numbers are swapped with them.
fn exchange(cx: &Ctx, a: &Node, b: &Node, what: &str) -> FsResult<()> {
    let (Node::Cell(ca), Node::Cell(cb)) = (a, b) else {
        return Err(Errno::EINVAL);
    };
    let (table, row) = (&ca.table, &ca.row);
    let (fa, qa, fb, qb) = (&ca.family, &ca.qualifier, &cb.family, &cb.qualifier);
    let deadline = std::time::Instant::now() + CREATOR_WAIT;
    loop {
        let handles = cx.open.handles().cells_where(|n| n == a || n == b);
        let mut guards: Vec<_> = handles.iter().map(|h| h.lock()).collect();
        let va = cx.data.versions(ca)?;
        let vb = cx.data.versions(cb)?;
        if va.is_empty() || vb.is_empty() {
            // Both must exist; one just created waits for its commit.
            let pending = (va.is_empty() && cx.data.is_pending_cell(ca))
                || (vb.is_empty() && cx.data.is_pending_cell(cb));
            drop(guards);
            if !pending {
                return Err(Errno::ENOENT);
            }
            if std::time::Instant::now() > deadline {
                return Err(Errno::EBUSY);
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            continue;
        }
        let mut m = RowMutation::new(row.to_vec())
            .delete_cells(fa, qa.clone(), TimeRange::ALL)
            .delete_cells(fb, qb.clone(), TimeRange::ALL);
        for v in vb.iter().rev() {
            m = m.set_at(fa, qa.clone(), v.timestamp, v.value.clone());
        }
        for v in va.iter().rev() {
            m = m.set_at(fb, qb.clone(), v.timestamp, v.value.clone());
        }
        cx.data
            .store()
            .apply(table, &m, cx.write_options())
            .map_err(|e| cx.data.fail(&what, &e))?;
        for g in guards.iter_mut() {
            if let Handle::Cell(c) = &mut **g {
                c.node = if c.node == *a { b.clone() } else { a.clone() };
            }
        }
        break;
    }
    cx.kernel.inodes().exchange(a, b);
    cx.data.pending().data_written(table, row, fa);
    cx.data.pending().data_written(table, row, fb);
    cx.kernel.invalidate(a);
    cx.kernel.invalidate(b);
    Ok(())
}

/// A descriptor open on a renamed cell follows it to `to`, as a
/// file's does: what it writes is committed under the new name (and a
/// creation not yet committed is listed there).
fn move_handle(cx: &Ctx, c: &mut CellHandle, to: &Node, parent: &Node, name: &[u8]) {
    if c.created && c.created_as.is_some() {
        if let (Node::Cell(from), Node::Cell(to)) = (&c.node, to) {
            let pending = cx.data.pending();
            pending.drop_cell(&from.table, &from.row, &from.family, &from.qualifier);
            pending.add_cell(&from.table, &from.row, &to.family, &to.qualifier);
        }
        c.created_as = Some((parent.clone(), name.to_vec()));
    }
    c.node = to.clone();
}

/// FUSE `rename`: a cell moves within its row (all versions, atomically);
/// anything else is EXDEV, so mv(1) copies and deletes instead.
pub(crate) fn rename(
    cx: &Ctx,
    _caller: &Caller,
    parent: u64,
    name: &[u8],
    newparent: u64,
    newname: &[u8],
    flags: u32,
) -> FsResult<()> {
    let p = cx.kernel.node(parent)?;
    let np = cx.kernel.node(newparent)?;
    let what = format!(
        "rename {p}/{} to {np}/{}",
        String::from_utf8_lossy(name),
        String::from_utf8_lossy(newname)
    );
    if p.read_only() || np.read_only() {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    let (Node::Family(fa), Node::Family(fb)) = (&*p, &*np) else {
        return Err(cx.data.refuse(
            &what,
            Errno::EXDEV,
            "only a cell can be renamed, within its row",
        ));
    };
    let (table, row, family, f2) = (&fa.table, &fa.row, &fa.family, &fb.family);
    if *table != fb.table || *row != fb.row {
        return Err(cx.data.refuse(
            &what,
            Errno::EXDEV,
            "a cell can be renamed only within its row",
        ));
    }
    if name == VERSIONS.as_bytes() || newname == VERSIONS.as_bytes() {
        return Err(Errno::EBUSY);
    }
    let src = cx
        .data
        .resolve_qualifier(fa, &parse_lenient(name).ok_or(Errno::ENOENT)?)?
        .ok_or(Errno::ENOENT)?;
    let dst = match parse_lenient(newname).ok_or(Errno::EINVAL)? {
        KeyName::Key(k) => k,
        kn => cx.data.resolve_qualifier(fb, &kn)?.ok_or(Errno::EINVAL)?,
    };
    if family == f2 && src == dst {
        return Ok(());
    }
    let src = fa.column(src);
    let dst = fb.column(dst);
    let from = Node::Cell(src.clone());
    let to = Node::Cell(dst.clone());
    if flags & libc::RENAME_EXCHANGE != 0 {
        return exchange(cx, &from, &to, &what);
    }
    // The descriptors open on `from` are held, so that none commits
    // under the old name while the cell moves.
    let deadline = std::time::Instant::now() + CREATOR_WAIT;
    let absent_deadline = std::time::Instant::now() + ABSENT_WAIT;
    loop {
        // Looked up before any is held: the lookup locks every handle.
        let replaced = cx.open.handles().cells_where(|n| *n == to);
        let handles = cx.open.handles().cells_where(|n| *n == from);
        let mut guards: Vec<_> = handles.iter().map(|h| h.lock()).collect();
        let versions = cx.data.versions(&src)?;
        if versions.is_empty() {
            if !cx.data.is_pending_cell(&src) {
                // Neither stored nor pending: gone, unless a release
                // committed it between the two looks (its value then
                // shows on a second look, once its commit is done).
                drop(guards);
                if std::time::Instant::now() > absent_deadline {
                    return Err(Errno::ENOENT);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            // Created and not committed yet: it moves with its creating
            // descriptor, unless that one's release (which `close` does
            // not wait for) is committing it right now.
            let creator = guards
                .iter()
                .any(|g| matches!(&**g, Handle::Cell(c) if c.created && c.created_as.is_some()));
            if !creator {
                drop(guards);
                if std::time::Instant::now() > deadline {
                    return Err(Errno::EBUSY);
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
        }
        if flags & libc::RENAME_NOREPLACE != 0
            && (cx.data.newest(&dst)?.is_some() || cx.data.is_pending_cell(&dst))
        {
            return Err(Errno::EEXIST);
        }
        let mut m =
            RowMutation::new(row.to_vec()).delete_cells(f2, dst.qualifier.clone(), TimeRange::ALL);
        for v in versions.iter().rev() {
            m = m.set_at(f2, dst.qualifier.clone(), v.timestamp, v.value.clone());
        }
        m = m.delete_cells(family, src.qualifier.clone(), TimeRange::ALL);
        cx.data
            .store()
            .apply(table, &m, cx.write_options())
            .map_err(|e| cx.data.fail(&what, &e))?;
        // The file `to` named is gone: its descriptors commit nothing more.
        super::commit::orphan(cx, replaced);
        for g in guards.iter_mut() {
            if let Handle::Cell(c) = &mut **g {
                move_handle(cx, c, &to, &np, newname);
            }
        }
        break;
    }
    cx.kernel.inodes().rebind(&from, &to);
    cx.data.pending().add_family(table, row, family);
    cx.data.pending().data_written(table, row, f2);
    if family != f2 {
        cx.data.pending().add_row(table, row);
    }
    cx.kernel.invalidate(&to);
    Ok(())
}
