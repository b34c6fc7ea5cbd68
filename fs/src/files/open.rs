//! Opening and creating files: cells, versions, `.schema`, `.mutate`,
//! scans and status files.

use super::acc_writable;
use crate::ctx::Ctx;
use crate::doing::Doing;
use crate::mutate::BatchParser;
use crate::names::{parse_lenient, parse_version_name, KeyName};
use crate::node::{Node, MUTATE, SCHEMA, VERSIONS};
use crate::open_files::handles::{CellHandle, Handle, MutateHandle, ScanHandle, SchemaHandle};
use crate::options::{Entry, FsResult, Stats};
use crate::perms::{Caller, R};
use crate::reply::Opened;
use fuser::Errno;
use std::time::Duration;

/// The largest value an open hands the kernel as pages: a reader may want
/// only the start of a larger one, which READs then fetch as it goes.
const STORE_MAX: usize = 128 << 10;

/// FUSE `open`.
pub(crate) fn open(cx: &Ctx, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
    let mut o = open_handle(cx, caller, ino, flags)?;
    if !acc_writable(flags) {
        o.noflush = true;
    }
    Ok(o)
}

pub(super) fn open_handle(cx: &Ctx, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
    let node = cx.kernel.node(ino)?;
    let writable = acc_writable(flags);
    // Named only when refused (an open of a cell never is).
    let what = || format!("open {node}");
    if writable && node.read_only() {
        return Err(cx.data.refuse(&what(), Errno::EROFS, "read-only view"));
    }
    let trunc = flags & libc::O_TRUNC != 0;
    let append = flags & libc::O_APPEND != 0;
    match &*node {
        // `>` over a cell the lookup found (O_TRUNC without O_APPEND):
        // its value is replaced whole, so it need not be read; unless
        // readers hold its pages (the gate waits with the version it read)
        // or it is a created cell not committed yet (then it is not dirty).
        Node::Cell(c)
            if writable
                && trunc
                && !append
                && !cx.data.is_pending_cell(c)
                && !cx.open.pages().has_readers(ino) =>
        {
            let o = open_value(cx, caller, &node, None, true, true, false);
            // As over a value read: the close commits the (empty) value.
            if let Some(h) = cx.open.handles().get(o.fh) {
                if let Handle::Cell(h) = &mut *h.lock() {
                    h.dirty = true;
                }
            }
            Ok(o)
        }
        Node::Cell(c) => {
            if !writable {
                if let Some(o) = reopen_on_pages(cx, ino, &node, c) {
                    return Ok(o);
                }
            }
            // Taken before the value is read (or taken from a listing's
            // read, which a write since would have dropped).
            let stamp = cx.data.row_stamp(c);
            // Before the store's read (see `is_pending_cell`).
            let pending = cx.data.is_pending_cell(c);
            // A reader takes the value its family's listing read a moment
            // ago (a scan: list, then open each), if one did.
            let listed = if writable {
                None
            } else {
                cx.data.listed_value(c)
            };
            let cur = match listed {
                Some(cell) => Some(cell),
                None => cx.data.newest(c)?,
            };
            if cur.is_none() && !pending {
                return Err(Errno::ENOENT);
            }
            let version = cur.as_ref().map(|v| (v.timestamp, v.value.len() as u64));
            let o = open_value(cx, caller, &node, cur, writable, trunc, append);
            // A reader through the cache: the next one may open on the
            // pages alone while nothing changes the row.
            if let (true, Some((ts, len))) = (o.keep_cache, version) {
                cx.open
                    .pages()
                    .confirm(cx.kernel.ino_of(&node), ts, len, stamp);
            }
            Ok(o)
        }
        Node::Version { cell, ts } => {
            let cur = cx.data.version(cell, *ts)?;
            if cur.is_none() {
                return Err(Errno::ENOENT);
            }
            Ok(open_value(cx, caller, &node, cur, writable, trunc, false))
        }
        Node::Schema(t) => {
            let s = cx.data.schema(t)?;
            let text = if trunc {
                Vec::new()
            } else {
                crate::schema_file::render(&s)
            };
            let fh = cx.open.handles().insert(Handle::Schema(SchemaHandle {
                table: t.to_string(),
                caller: caller.clone().with_groups(),
                append_mode: append,
                base_len: text.len(),
                dirty: trunc && writable,
                wrote: false,
                failed: None,
                data: text,
            }));
            Ok(Opened {
                fh,
                direct_io: true,
                ..Default::default()
            })
        }
        Node::Mutate(t) => {
            cx.data.schema(t)?;
            let fh = cx.open.handles().insert(Handle::Mutate(MutateHandle {
                table: t.to_string(),
                caller: caller.clone().with_groups(),
                parser: BatchParser::with_limits(
                    cx.opts.spool_dir.as_deref(),
                    cx.opts.limits.mutate_max_line,
                    cx.opts.limits.mutate_max_group,
                ),
                charge: cx.open.charge(caller.uid),
                failed: None,
                results: Vec::new(),
                // Only a reader can read them: a write-only batch of a
                // million rows need not keep a million result lines.
                keep_results: flags & libc::O_ACCMODE != libc::O_WRONLY,
                read_pos: 0,
            }));
            Ok(Opened {
                fh,
                direct_io: true,
                ..Default::default()
            })
        }
        Node::Changes { table, query } => {
            super::changes::open_changes(cx, caller, ino, table, query, &what())
        }
        Node::Scan { table, query } => {
            let mut q = crate::query::parse(query)
                .map_err(|why| cx.data.refuse(&what(), Errno::EINVAL, &why))?;
            let schema = cx.data.schema(table)?;
            let caller = caller.clone().with_groups();
            let mut readable: Option<Vec<String>> = None;
            if let Some(fams) = &q.spec.families {
                for f in fams {
                    let fs = schema.families.get(f).ok_or_else(|| {
                        cx.data
                            .refuse(&what(), Errno::ENOENT, &format!("no column family {f:?}"))
                    })?;
                    if !caller.may(fs.owner, fs.group, fs.mode, R) {
                        return Err(cx.data.refuse(
                            &what(),
                            Errno::EACCES,
                            &format!("family {f} is not readable"),
                        ));
                    }
                }
            } else if schema
                .families
                .values()
                .any(|f| !caller.may(f.owner, f.group, f.mode, R))
            {
                // Families the caller may not read are left out of the output.
                readable = Some(
                    schema
                        .families
                        .values()
                        .filter(|f| caller.may(f.owner, f.group, f.mode, R))
                        .map(|f| f.name.clone())
                        .collect(),
                );
            }
            // No part of the query may see what the caller may not read:
            // a filter's condition, `column=` or `limit=` over an
            // unreadable family would answer yes or no about its cells.
            // The engine reads the readable families only.
            if let Some(r) = &readable {
                let mut fams: Vec<String> = r.clone();
                fams.sort();
                q.spec.families = Some(fams);
            }
            Stats::add(&cx.data.stats().scans, 1);
            let fh = cx.open.handles().insert(Handle::Scan(ScanHandle {
                table: table.to_string(),
                query: q,
                readable,
                aggregates: schema
                    .families
                    .values()
                    .filter(|f| f.aggregate.is_some())
                    .map(|f| f.name.clone())
                    .collect(),
                stream: None,
                buf: Vec::new(),
                start: 0,
                done: false,
            }));
            Ok(Opened {
                fh,
                direct_io: true,
                ..Default::default()
            })
        }
        Node::Status(f) if writable => {
            if caller.uid != 0 {
                return Err(cx.data.refuse(
                    &what(),
                    Errno::EACCES,
                    "only root may command the cluster",
                ));
            }
            let _ = f;
            let fh = cx.open.handles().insert(Handle::Control(Vec::new()));
            Ok(Opened {
                fh,
                direct_io: true,
                ..Default::default()
            })
        }
        Node::Status(f) => {
            let fh = cx.open.handles().insert(Handle::Content(
                cx.status_content(*f, Some(&caller.clone().with_groups())),
            ));
            Ok(Opened {
                fh,
                direct_io: true,
                ..Default::default()
            })
        }
        n if n.is_dir() => Err(Errno::EISDIR),
        _ => Err(Errno::EINVAL),
    }
}

/// The largest value a re-read opens on the kernel's pages alone. Its
/// first READ, should the kernel have dropped the pages, reads the newest
/// version if a write has hidden the opened one since: a value of one page
/// then comes whole from one version, where a longer one could mix the
/// pages the kernel kept with the newer version's.
const ONE_PAGE: u64 = 4096;

/// A reader's open of a live cell answered without a call: the kernel's
/// pages are of the version an open found newest under the row stamp the
/// row still has (so no write to the row was acknowledged since, through
/// this mount, another way in, or another daemon: each drops the row's
/// stamp before it is acknowledged), the kernel was told that version's
/// size, and no collection by age can have removed it (see
/// `open_files/pages.rs`). The handle reads the value only if a READ comes
/// (the kernel dropped pages meanwhile). None: open as usual.
fn reopen_on_pages(cx: &Ctx, ino: u64, node: &Node, c: &crate::node::CellAddr) -> Option<Opened> {
    let (ts, len) = cx.open.pages().confirmed(ino, cx.data.row_stamp(c))?;
    if len > ONE_PAGE
        || !cx.kernel.inodes().reported_is(ino, len, ts)
        || cx.data.is_pending_cell(c)
        || !cx.data.newest_lasts(c)
        || !cx.open.pages().reader_opened(ino)
    {
        return None;
    }
    cx.open.pages().reopened();
    let fh = cx.open.handles().insert(Handle::Cell(CellHandle {
        node: node.clone(),
        ino,
        writable: false,
        append_mode: false,
        base_len: 0,
        append_only: false,
        data: Vec::new(),
        dirty: false,
        wrote: false,
        created: false,
        direct: false,
        ts,
        unread: Some(len),
        failed: None,
        created_as: None,
        unlinked: false,
        deleted: false,
        mtime: None,
        charge: None,
    }));
    Some(Opened {
        fh,
        direct_io: false,
        keep_cache: true,
        ..Default::default()
    })
}

/// A handle on a cell or version holding `cur` (or nothing yet).
pub(super) fn open_value(
    cx: &Ctx,
    caller: &Caller,
    node: &Node,
    cur: Option<engine::Cell>,
    writable: bool,
    trunc: bool,
    append: bool,
) -> Opened {
    let ino = cx.kernel.ino_of(node);
    let (value, ts) = cur.map_or((Vec::new(), 0), |c| (c.value.into_vec(), c.timestamp));
    // Writers bypass the page cache: their unclosed bytes (and an O_TRUNC
    // open) would otherwise land in pages that readers share, and readers
    // must only ever see committed values. A reader uses the cache unless
    // a writer has the cell open (see `open_files/pages.rs`).
    if writable && !cx.open.pages().writer_opened(ino, cx.opts.reader_wait) {
        log::info!(
            "{node}: a reader kept the cell open through the page cache for {:?} \
             (reader_wait); the writer goes on",
            cx.opts.reader_wait
        );
    }
    let reader = !writable;
    // Cached pages and size are this very version's: keep them.
    let agree = cx.kernel.inodes().reported_is(ino, value.len() as u64, ts)
        && cx.open.pages().agree(ino, ts);
    if agree {
        // Pin the version (a commit may have told the size alone).
        cx.kernel.inodes().set_reported(ino, value.len() as u64, ts);
    }
    let fresh = reader && agree && cx.open.pages().reader_opened(ino);
    let direct = !fresh;
    if reader && !agree {
        // The kernel's size or pages are of another version: this open
        // reads around them, and they are dropped for the next one.
        cx.open.pages().drop_ino(ino);
        cx.kernel.invalidate(node);
    }
    if fresh {
        store_pages(cx, ino, ts, &value);
    }
    let truncated = trunc && writable;
    let data = if truncated { Vec::new() } else { value };
    let dirty = truncated && (ts != 0 || !data.is_empty());
    let handle = Handle::Cell(CellHandle {
        node: node.clone(),
        ino,
        writable,
        append_mode: append && writable,
        base_len: data.len(),
        append_only: append && writable && !truncated && matches!(node, Node::Cell(_)),
        data,
        dirty,
        wrote: false,
        created: false,
        direct,
        ts,
        unread: None,
        failed: None,
        created_as: None,
        unlinked: false,
        deleted: false,
        mtime: None,
        charge: writable.then(|| cx.open.charge(caller.uid)),
    });
    let fh = if writable {
        cx.open.handles().insert_writer(handle, ino)
    } else {
        cx.open.handles().insert(handle)
    };
    Opened {
        fh,
        direct_io: direct,
        keep_cache: fresh,
        ..Default::default()
    }
}

/// Hands the kernel the pages of a cell a reader just opened through the
/// cache, so that its reads need no READ (see `open_files/pages.rs`).
fn store_pages(cx: &Ctx, ino: u64, ts: u64, value: &[u8]) {
    let Some(kernel) = cx.kernel.notifier() else {
        return;
    };
    if value.is_empty() || value.len() > STORE_MAX || !cx.open.pages().begin_store(ino) {
        return;
    }
    let stored = match kernel.store(fuser::INodeNo(ino), 0, value) {
        Ok(()) => Some(ts),
        Err(e) => {
            log::debug!("storing the pages of inode {ino}: {e}");
            None
        }
    };
    cx.open.pages().end_store(ino, stored);
}

/// FUSE `create`: a new cell (or exact version) file, committed on close.
pub(crate) fn create(
    cx: &Ctx,
    caller: &Caller,
    parent: u64,
    name: &[u8],
    flags: i32,
) -> FsResult<(Entry, Opened)> {
    let p = cx.kernel.node(parent)?;
    let what = Doing::entry("create", &p, name);
    if p.read_only() {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    let excl = flags & libc::O_EXCL != 0;
    let node = match &*p {
        // A live family (the view is not read-only).
        Node::Family(fa) => {
            if name == VERSIONS.as_bytes() {
                return Err(Errno::EEXIST);
            }
            let kn = parse_lenient(name).ok_or(Errno::EINVAL)?;
            let q = match &kn {
                KeyName::Key(k) => k.clone(),
                KeyName::Hashed { .. } => cx.data.resolve_qualifier(fa, &kn)?.ok_or_else(|| {
                    cx.data.refuse(
                        &what,
                        Errno::EINVAL,
                        "a hashed name can only name an existing cell",
                    )
                })?,
            };
            if q.len() > engine::MAX_QUALIFIER {
                return Err(cx
                    .data
                    .refuse(&what, Errno::ENAMETOOLONG, "qualifier too long"));
            }
            Node::Cell(fa.column(q))
        }
        Node::VersionsColumn(c) => {
            let ts = parse_version_name(name).ok_or_else(|| {
                cx.data.refuse(
                    &what,
                    Errno::EINVAL,
                    "a version file is named by its timestamp: 16 or more decimal digits",
                )
            })?;
            Node::Version { cell: c.live(), ts }
        }
        Node::Table(t) if name == SCHEMA.as_bytes() || name == MUTATE.as_bytes() => {
            let name = String::from_utf8_lossy(name).into_owned();
            if excl && !cx.data.pending().is_hidden(t, &name) {
                return Err(Errno::EEXIST);
            }
            cx.data.pending().unhide(t, &name);
            let node = if name == SCHEMA {
                Node::Schema(t.clone())
            } else {
                Node::Mutate(t.clone())
            };
            let attr = cx.node_attr(&node)?;
            crate::lookup::register(cx, &node)?;
            let opened = open(cx, caller, cx.kernel.ino_of(&node), flags | libc::O_TRUNC)?;
            return Ok((cx.entry(&node, attr), opened));
        }
        n if !n.is_dir() => return Err(Errno::ENOTDIR),
        _ => {
            return Err(cx
                .data
                .refuse(&what, Errno::EPERM, "only cells and versions are files"))
        }
    };
    let col = node.value_cell().ok_or(Errno::EIO)?;
    // `>` of a cell (O_TRUNC, neither O_EXCL nor O_APPEND) replaces
    // whatever value it has: it needs no read of it, unless readers hold
    // its pages (then the open path below waits for them).
    let replaces = matches!(node, Node::Cell(_))
        && flags & libc::O_TRUNC != 0
        && flags & libc::O_APPEND == 0
        && !excl
        && !cx.open.pages().has_readers(cx.kernel.ino_of(&node));
    // It may exist after all (a racing creator, or a name the kernel had
    // not cached); its placeholder is asked first (see `is_pending_cell`).
    let pending = cx.data.is_pending_cell(col);
    let existing = match &node {
        _ if replaces => None,
        Node::Version { ts, .. } => cx.data.version(col, *ts)?,
        _ => cx.data.newest(col)?,
    };
    if excl && (existing.is_some() || pending) {
        return Err(Errno::EEXIST);
    }
    let fam = cx.data.family_schema(&col.table, &col.family)?;
    let ino = crate::lookup::register(cx, &node)?;
    let opened = match existing {
        Some(cur) => {
            let attr = cx.value_attr(ino, &fam, Some(&cur));
            let trunc = flags & libc::O_TRUNC != 0;
            let o = open_value(
                cx,
                caller,
                &node,
                Some(cur),
                true,
                trunc,
                flags & libc::O_APPEND != 0,
            );
            return Ok((cx.entry(&node, attr), o));
        }
        None => {
            // A new name in the directory: its mtime moves.
            cx.kernel.inodes().dir_changed(parent);
            if matches!(node, Node::Cell(_)) {
                cx.data
                    .pending()
                    .add_cell(&col.table, &col.row, &col.family, &col.qualifier);
            }
            // Nothing is committed (or, replaced, no reader held its
            // pages a moment ago); the writer is registered so that none
            // does until it closes.
            let wait = if replaces {
                cx.opts.reader_wait
            } else {
                Duration::ZERO
            };
            cx.open.pages().writer_opened(ino, wait);
            let fh = cx.open.handles().insert_writer(
                Handle::Cell(CellHandle {
                    node: node.clone(),
                    ino,
                    writable: true,
                    append_mode: flags & libc::O_APPEND != 0,
                    base_len: 0,
                    append_only: false,
                    data: Vec::new(),
                    dirty: true,
                    wrote: false,
                    created: matches!(node, Node::Cell(_)),
                    created_as: Some(((*p).clone(), name.to_vec())),
                    direct: true,
                    ts: 0,
                    unread: None,
                    failed: None,
                    unlinked: false,
                    deleted: false,
                    mtime: None,
                    charge: Some(cx.open.charge(caller.uid)),
                }),
                ino,
            );
            Opened {
                fh,
                direct_io: true,
                ..Default::default()
            }
        }
    };
    let attr = cx.value_attr(ino, &fam, None);
    Ok((cx.entry(&node, attr), opened))
}
