//! Closing and syncing: a cell's whole value is committed as one new
//! version on close (or fsync); `.schema` is applied the same way.

use crate::ctx::Ctx;
use crate::doing::Doing;
use crate::node::{Node, SCHEMA};
use crate::open_files::handles::{CellHandle, Handle, SchemaHandle};
use crate::options::{FsResult, Stats};
use engine::{Mutation, RowMutation, RowOp, RowTxn};
use fuser::Errno;

/// FUSE `flush` (each `close`): commits what was written, so that when
/// `close` returns the value is in the commit log. A close by a
/// descriptor table (`closer`) that did not write through this open
/// file commits nothing (None: commit whoever closes).
pub(crate) fn flush(cx: &Ctx, fh: u64, closer: Option<u64>) -> FsResult<()> {
    let Some(h) = cx.open.handles().get(fh) else {
        return Ok(());
    };
    if closer.is_some_and(|c| !cx.open.handles().commits_on_close(fh, c)) {
        return Ok(());
    }
    let mut g = h.lock();
    match &mut *g {
        Handle::Cell(c) if c.failed.is_some() => {
            abandon_created(cx, c);
            Err(c.failed.unwrap_or(Errno::EIO))
        }
        Handle::Cell(c) if c.dirty && c.wrote => commit_cell(cx, c),
        Handle::Schema(s) if s.failed.is_some() => Err(s.failed.unwrap_or(Errno::EINVAL)),
        Handle::Schema(s) if s.dirty && s.wrote => commit_schema(cx, s),
        Handle::Schema(s) if s.dirty => super::schema_write::check_schema_truncation(cx, s),
        Handle::Control(buf) => super::control::run_control(cx, buf, true),
        Handle::Mutate(m) => {
            if let Some((code, _)) = m.failed.take() {
                m.parser.reset();
                return Err(code);
            }
            if m.parser.is_empty() {
                return Ok(());
            }
            super::batch::commit_batch(cx, m)
        }
        _ => Ok(()),
    }
}

/// Whether releasing `fh` may commit something (and so belongs on a
/// commit worker): what [`crate::files::commit::release`] commits or abandons. A reader's
/// release, or a writer's whose close committed, only drops its handle.
pub(crate) fn release_commits(cx: &Ctx, fh: u64) -> bool {
    let Some(h) = cx.open.handles().get(fh) else {
        return false;
    };
    let g = h.lock();
    match &*g {
        Handle::Cell(c) => (c.dirty && c.failed.is_none()) || c.created,
        Handle::Schema(s) => s.dirty,
        Handle::Mutate(m) => m.failed.is_none() && !m.parser.is_empty(),
        Handle::Control(_) => true,
        Handle::Scan(_) | Handle::Changes(_) | Handle::Content(_) | Handle::Dir(_) => false,
    }
}

/// FUSE `release` (last close): commits anything left (a truncation or
/// creation without writes) and drops the handle.
pub(crate) fn release(cx: &Ctx, fh: u64) -> FsResult<()> {
    let Some(h) = cx.open.handles().remove(fh) else {
        return Ok(());
    };
    let mut g = h.lock();
    let r = match &mut *g {
        Handle::Cell(c) => {
            if c.writable {
                cx.open.pages().writer_closed(c.ino);
            } else if !c.direct {
                cx.open.pages().reader_closed(c.ino);
            }
            let r = if c.dirty && c.failed.is_none() {
                commit_cell(cx, c)
            } else {
                Ok(())
            };
            if c.created {
                // Never committed (failed, or the commit failed).
                abandon_created(cx, c);
            }
            r
        }
        Handle::Schema(s) if s.dirty => commit_schema(cx, s),
        Handle::Mutate(m) if m.failed.is_none() && !m.parser.is_empty() => {
            super::batch::commit_batch(cx, m)
        }
        _ => Ok(()),
    };
    if let Err(e) = r {
        log::warn!("release: a commit at the last close failed: {e:?}");
    }
    r
}

/// FUSE `fsync`: commits and makes the commit log durable.
pub(crate) fn fsync(cx: &Ctx, fh: u64) -> FsResult<()> {
    if let Some(h) = cx.open.handles().get(fh) {
        let mut g = h.lock();
        match &mut *g {
            Handle::Cell(c) if c.failed.is_some() => return Err(c.failed.unwrap_or(Errno::EIO)),
            Handle::Cell(c) if c.dirty => commit_cell(cx, c)?,
            Handle::Schema(s) if s.dirty => commit_schema(cx, s)?,
            Handle::Mutate(m) => {
                if let Some((code, _)) = m.failed.take() {
                    m.parser.reset();
                    return Err(code);
                }
                if !m.parser.is_empty() {
                    super::batch::commit_batch(cx, m)?;
                }
            }
            _ => {}
        }
    }
    cx.data
        .store()
        .sync()
        .map_err(|e| cx.data.fail(&"fsync", &e))
}

/// A file this handle created will never be committed: it must vanish
/// from listings and from the kernel's cache of names.
pub(super) fn abandon_created(cx: &Ctx, c: &mut CellHandle) {
    if let Some((parent, name)) = forget_created(cx, c) {
        cx.kernel.invalidate_entry(&parent, name);
    }
}

/// Drops what this handle created from the pending listings; the
/// directory and name it was created under, if it was.
fn forget_created(cx: &Ctx, c: &mut CellHandle) -> Option<(Node, Vec<u8>)> {
    let created_as = c.created_as.take();
    if created_as.is_some() && c.created {
        if let Node::Cell(col) = &c.node {
            cx.data
                .pending()
                .drop_cell(&col.table, &col.row, &col.family, &col.qualifier);
        }
        c.created = false;
    }
    created_as
}

/// `node` (a cell, or one of its versions) was unlinked: the handles
/// open on it keep their buffers but will commit nothing, and a cell
/// they created and never committed is gone from listings. Whether
/// such a created cell was there (its unlink succeeds).
pub(super) fn orphan_handles(cx: &Ctx, which: impl Fn(&Node) -> bool) -> bool {
    orphan(cx, cx.open.handles().cells_where(which))
}

/// [`crate::files::commit::orphan_handles`] of handles already looked up.
pub(super) fn orphan(cx: &Ctx, handles: Vec<std::sync::Arc<parking_lot::Mutex<Handle>>>) -> bool {
    let mut created = false;
    for h in handles {
        if let Handle::Cell(c) = &mut *h.lock() {
            c.unlinked = true;
            c.dirty = false;
            c.wrote = false;
            created |= c.created;
            // The kernel drops the name itself once the unlink is
            // answered (an invalidation now would wait for the
            // directory's lock, which the unlink holds).
            forget_created(cx, c);
        }
    }
    created
}

/// Commits a cell handle's value as one new version (or an atomic append).
pub(super) fn commit_cell(cx: &Ctx, c: &mut CellHandle) -> FsResult<()> {
    if c.unlinked {
        // As on any filesystem, the data of an unlinked file goes with it.
        c.dirty = false;
        c.wrote = false;
        return Ok(());
    }
    let what = Doing::node("commit", &c.node);
    let Some(col) = c.node.value_cell() else {
        return Err(Errno::EIO);
    };
    let ts = match &c.node {
        Node::Version { ts, .. } => Some(*ts),
        _ => c.mtime,
    };
    let (table, row, family, qualifier) = (&col.table, &col.row, &col.family, &col.qualifier);
    let opts = cx.write_options();
    let mut written = None;
    if c.append_only && !c.created && c.mtime.is_none() && c.data.len() > c.base_len {
        let txn = RowTxn::new(
            row.to_vec(),
            vec![RowOp::Append {
                family: family.to_string(),
                qualifier: qualifier.clone(),
                data: c.data[c.base_len..].to_vec(),
            }],
        );
        let out = cx
            .data
            .store()
            .apply_txns(table, &[txn], opts)
            .map_err(|e| cx.data.fail(&what, &e))?;
        if let Some(v) = out
            .into_iter()
            .next()
            .and_then(|o| o.results.into_iter().next())
        {
            c.data = v;
            if let Some(charge) = &mut c.charge {
                // Held in memory all the same; a refusal leaves the
                // old charge (the commit is done either way).
                let _ = charge.resize(c.data.len() as u64);
            }
        }
        c.base_len = c.data.len();
    } else {
        let m = RowMutation {
            row: row.to_vec(),
            mutations: vec![Mutation::SetCell {
                family: family.to_string(),
                qualifier: qualifier.clone(),
                timestamp: ts,
                value: c.data.clone(),
            }],
        };
        written = Some(
            cx.data
                .store()
                .apply(table, &m, opts)
                .map_err(|e| cx.data.fail(&what, &e))?,
        );
        c.append_only = false;
    }
    Stats::add(&cx.data.stats().commits, 1);
    c.mtime = None;
    c.dirty = false;
    c.wrote = false;
    c.created_as = None;
    c.deleted = false;
    if c.created {
        c.created = false;
        cx.data.pending().drop_cell(table, row, family, qualifier);
    }
    cx.data.pending().data_written(table, row, family);
    // Readers may have cached pages of an older version: forget them
    // before they are invalidated (see `open_files/pages.rs`).
    let paged = cx.open.pages().drop_ino(c.ino);
    if paged || c.append_only || ts.is_some() {
        // What the store holds may differ from what the kernel cached
        // (pages of an older version; concurrent appends merged; a
        // version behind the newest). The next open that finds its
        // size stale reads around the cache once.
        cx.kernel.invalidate(&c.node);
    } else if let Some(w) = written {
        // No pages are cached, and the kernel's size came from this
        // handle's writes, which are the committed value: remember the
        // version the commit reported (no read back) so that the next
        // open may use the page cache.
        cx.kernel.inodes().set_reported(c.ino, w.bytes, w.timestamp);
    }
    if ts.is_some() {
        // The newest value may have changed too.
        let newest = Node::Cell(col.live());
        cx.open.pages().drop_ino(cx.kernel.ino_of(&newest));
        cx.kernel.invalidate(&newest);
    }
    Ok(())
}

/// Applies written `.schema` text.
pub(super) fn commit_schema(cx: &Ctx, s: &mut SchemaHandle) -> FsResult<()> {
    let what = format!("write {}/{SCHEMA}", s.table);
    let cur = cx.data.schema(&s.table)?;
    let (text, replace_all) = if s.append_mode {
        (&s.data[s.base_len.min(s.data.len())..], false)
    } else {
        (&s.data[..], true)
    };
    let (new, dropped) =
        crate::schema_file::apply(&cur, text, replace_all).map_err(|e| cx.data.fail(&what, &e))?;
    super::schema_write::check_schema_change(cx, &s.caller, &cur, &new, &what, true)?;
    super::schema_write::set_schema(cx, &s.table, new, &dropped, &what)?;
    s.dirty = false;
    s.wrote = false;
    s.base_len = s.data.len();
    cx.kernel.invalidate_table(&s.table, None);
    cx.kernel.settle();
    Ok(())
}
