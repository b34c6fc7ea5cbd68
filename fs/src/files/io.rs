//! `read`, `write` and `copy_file_range` on open files.

use super::MAX_SCHEMA_TEXT;
use crate::ctx::Ctx;
use crate::node::Node;
use crate::offsets::{slice_at, write_at};
use crate::open_files::handles::{CellHandle, Handle};
use crate::options::{FsResult, Stats};
use fuser::Errno;

/// `read` of an open file.
pub(crate) fn read(cx: &Ctx, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
    read_for(cx, fh, offset, size, false)
}

/// FUSE `read`; `page_fill` when the kernel reads into its page cache
/// (the READ names no lock owner: a map's fault or readahead), not for
/// a `read(2)` of a descriptor that bypasses the cache.
pub(crate) fn read_for(
    cx: &Ctx,
    fh: u64,
    offset: u64,
    size: u32,
    page_fill: bool,
) -> FsResult<Vec<u8>> {
    Stats::add(&cx.data.stats().reads, 1);
    let h = cx.open.handles().get(fh).ok_or(Errno::EBADF)?;
    let mut g = h.lock();
    let out = match &mut *g {
        // A writer's map faults pages into the inode's one page cache.
        // Readers that read through that cache and outlasted the
        // writer's wait for them (`reader_wait`) are still open: the
        // pages get the committed value, never the writer's buffer,
        // and the writer's map shows that until they close. (Readers
        // opened since bypass the cache; the writer's own read(2)
        // bypasses it too and reads its buffer.)
        Handle::Cell(c) if page_fill && c.writable && cx.open.pages().has_readers(c.ino) => {
            match cx.data.value_of(&c.node) {
                Some(Ok(Some(cur))) => slice_at(&cur.value, offset, size),
                Some(Err(e)) => return Err(e),
                _ => Vec::new(),
            }
        }
        Handle::Cell(c) if !c.direct => {
            read_unread(cx, c)?;
            follow_reported(cx, c);
            slice_at(&c.data, offset, size)
        }
        Handle::Cell(c) => slice_at(&c.data, offset, size),
        Handle::Schema(s) => slice_at(&s.data, offset, size),
        Handle::Content(c) => slice_at(c, offset, size),
        Handle::Control(_) => Vec::new(),
        Handle::Mutate(m) => {
            // Reading commits what was written, then returns the results as a stream.
            if !m.parser.is_empty() {
                let _ = super::batch::commit_batch(cx, m);
            }
            let start = m.read_pos.min(m.results.len());
            let end = start.saturating_add(size as usize).min(m.results.len());
            m.read_pos = end;
            m.results[start..end].to_vec()
        }
        Handle::Scan(s) => super::scan::read_scan(cx, s, offset, size)?,
        Handle::Changes(c) => super::changes::read_changes(cx, c, offset, size)?,
        Handle::Dir(_) => return Err(Errno::EISDIR),
    };
    Stats::add(&cx.data.stats().read_bytes, out.len() as u64);
    Ok(out)
}

/// The value of a handle opened on the kernel's pages alone
/// (`open.rs`), read at its first READ: the version it opened (taken from
/// a listing's read a moment ago if one kept it); if that is gone (a
/// write since, whose collection hid it) the newest, which
/// `follow_reported` then tells apart from what the kernel was told.
fn read_unread(cx: &Ctx, c: &mut CellHandle) -> FsResult<()> {
    if c.unread.is_none() {
        return Ok(());
    }
    let Node::Cell(addr) = &c.node else {
        c.unread = None;
        return Ok(());
    };
    // The kernel dropped the pages the open counted on (memory pressure,
    // `drop_caches`): the value a listing or a lookup read a moment ago
    // serves, if it is the version opened (a scan's open).
    let listed = cx.data.listed_value(addr).filter(|v| v.timestamp == c.ts);
    let cur = match listed {
        Some(v) => Some(v),
        None => match cx.data.version(addr, c.ts)? {
            Some(v) => Some(v),
            None => cx.data.newest(addr)?,
        },
    };
    match cur {
        Some(v) => {
            c.ts = v.timestamp;
            c.data = v.value.into_vec();
        }
        None => c.data.clear(),
    }
    c.unread = None;
    Ok(())
}

/// A READ through the page cache is clamped to the size the kernel was
/// last told, which a stat after a commit may have made the new value's:
/// the reply must be the version of that size, or the reader would get
/// the old value cut short (or padded). So a cached handle serves its
/// own version while that is what the kernel was told, and otherwise
/// moves to the committed one if that is.
fn follow_reported(cx: &Ctx, c: &mut CellHandle) {
    let ino = c.ino;
    let told = cx.kernel.inodes().reported(ino);
    if told == Some((c.data.len() as u64, c.ts)) {
        return;
    }
    let Some(cur) = cx.data.value_of(&c.node) else {
        return;
    };
    match cur {
        Ok(Some(cur))
            if cx
                .kernel
                .inodes()
                .reported_is(ino, cur.value.len() as u64, cur.timestamp) =>
        {
            // Pinned: a size a commit told alone now names this version.
            cx.kernel
                .inodes()
                .set_reported(ino, cur.value.len() as u64, cur.timestamp);
            c.data = cur.value.into_vec();
            c.ts = cur.timestamp;
        }
        // Neither: what the kernel holds is unknown; drop it soon.
        _ => {
            cx.open.pages().drop_ino(ino);
            cx.kernel.invalidate(&c.node);
        }
    }
}

/// The inode and version a READ on `fh` may fill the kernel's pages
/// with, if it is a cell handle. A handle that bypasses the cache still
/// fills them when it is mapped (mmap faults read through the one page
/// cache of the inode, with the mapping file's handle): a reader's with
/// the version it opened, a writer's with bytes nobody committed, which
/// no later open may trust (see `open_files/pages.rs`).
pub(crate) fn page_source(cx: &Ctx, fh: u64) -> Option<(u64, u64)> {
    let h = cx.open.handles().get(fh)?;
    let g = h.lock();
    match &*g {
        Handle::Cell(c) if c.writable => Some((c.ino, crate::open_files::pages::UNCOMMITTED)),
        Handle::Cell(c) => Some((c.ino, c.ts)),
        _ => None,
    }
}

/// FUSE `write`, by the descriptor table `owner` (see
/// [`crate::open_files::handles::Handles::commits_on_close`]).
pub(crate) fn write(
    cx: &Ctx,
    fh: u64,
    offset: u64,
    data: &[u8],
    owner: Option<u64>,
) -> FsResult<u32> {
    Stats::add(&cx.data.stats().writes, 1);
    Stats::add(&cx.data.stats().write_bytes, data.len() as u64);
    let h = cx.open.handles().get(fh).ok_or(Errno::EBADF)?;
    cx.open.handles().wrote(fh, owner);
    let mut g = h.lock();
    match &mut *g {
        Handle::Cell(c) => {
            if !c.writable {
                return Err(Errno::EBADF);
            }
            let off = if c.append_mode {
                c.data.len()
            } else {
                offset as usize
            };
            if let Some(e) = c.failed {
                return Err(e);
            }
            let end = off.saturating_add(data.len());
            if end > cx.opts.max_value_size {
                c.failed = Some(Errno::EFBIG);
                return Err(cx.data.refuse(
                    &format!("write {}", c.node),
                    Errno::EFBIG,
                    &format!(
                        "a value is at most {} bytes; nothing of this file will be committed",
                        cx.opts.max_value_size
                    ),
                ));
            }
            // The buffer holds the whole value up to `end`: that much is
            // charged to the writer's uid and the daemon before it grows.
            let len = c.data.len().max(end) as u64;
            if let Some(charge) = &mut c.charge {
                if let Err(e) = charge.resize(len) {
                    return Err(buffer_refused(cx, &c.node, e));
                }
            }
            if !c.append_mode {
                c.append_only = false;
            }
            write_at(&mut c.data, off, data);
            c.dirty = true;
            c.wrote = true;
        }
        Handle::Schema(s) => {
            let off = if s.append_mode {
                s.data.len()
            } else {
                offset as usize
            };
            if off + data.len() > MAX_SCHEMA_TEXT {
                return Err(Errno::EFBIG);
            }
            if let Some(e) = s.failed {
                return Err(e);
            }
            write_at(&mut s.data, off, data);
            s.dirty = true;
            s.wrote = true;
            super::schema_write::check_schema_write(cx, s)?;
        }
        Handle::Mutate(m) => super::batch::feed_batch(cx, m, data)?,
        Handle::Control(buf) => {
            buf.extend_from_slice(data);
            super::control::run_control(cx, buf, false)?;
        }
        Handle::Scan(_) | Handle::Changes(_) | Handle::Content(_) => return Err(Errno::EROFS),
        Handle::Dir(_) => return Err(Errno::EISDIR),
    }
    u32::try_from(data.len()).map_err(|_| Errno::EINVAL)
}

/// A write refused by the write-buffer budget (EDQUOT: the uid's share;
/// ENOSPC: the daemon's), logged as other refusals are.
pub(super) fn buffer_refused(cx: &Ctx, node: &Node, e: Errno) -> Errno {
    let which = if e == Errno::EDQUOT {
        format!(
            "this user's open files hold {} bytes not yet committed (write_buffer_uid)",
            cx.opts.limits.buffer_per_uid
        )
    } else {
        format!(
            "open files hold {} bytes not yet committed (write_buffer_total)",
            cx.opts.limits.buffer_total
        )
    };
    cx.data.refuse(
        &format!("write {node}"),
        e,
        &format!("{which}; close some first"),
    )
}

/// FUSE `copy_file_range` (cp, mv across rows): a read from one handle
/// and a write to the other, without the data crossing to the caller.
pub(crate) fn copy_file_range(
    cx: &Ctx,
    fh_in: u64,
    off_in: u64,
    fh_out: u64,
    off_out: u64,
    len: u64,
) -> FsResult<u32> {
    let len = u32::try_from(len.min(crate::options::MAX_WRITE as u64))
        .unwrap_or(crate::options::MAX_WRITE);
    let data = read(cx, fh_in, off_in, len)?;
    if data.is_empty() {
        return Ok(0);
    }
    // The kernel names no owner for a copy: any close commits it.
    write(cx, fh_out, off_out, &data, None)
}
