//! `opendir`, `readdir` and `readdirplus`: snapshots of small directories,
//! streamed rows of tables.
//!
//! A listing takes the pending placeholders (cells created and not yet
//! committed, rows, families and columns made empty) before it reads the
//! store: a placeholder goes only once what it stands for is stored (a
//! release commits its created cell, then drops it), so each name is in
//! one or the other. Read the other way round, a commit between the two
//! reads hid the name from the listing.

use super::{dir, MAX_ROW_BATCH, ROW_BASE, ROW_BATCH};
use crate::ctx::Ctx;
use crate::listing::LAST;
use crate::listing::{
    offset_of, row_bytes, Ahead, Fill, KeptListing, ListedRow, PlacedNames, Resume,
    KEPT_TABLE_BYTES,
};
use crate::names::{display_name, version_name};
use crate::node::parent_and_name;
use crate::node::{FamilyAddr, Key, Name, Node, StatusFile, View, MUTATE, SCHEMA, STATUS_DIR};
use crate::open_files::handles::Listed;
use crate::open_files::handles::{DirHandle, Handle};
use crate::options::{FsResult, Stats};
use crate::reply::DirOut;
use crate::store::RowStream;
use engine::schema::TableSchema;
use engine::{RowFilter, RowRange, ScanSpec};
use fuser::{Errno, FileType};
use std::collections::BTreeSet;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

/// FUSE `opendir`.
pub(crate) fn opendir(cx: &Ctx, ino: u64) -> FsResult<u64> {
    let node = cx.kernel.node(ino)?;
    if !node.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    Ok(cx.open.handles().insert(Handle::Dir(DirHandle {
        node: (*node).clone(),
        snapshot: None,
        cursors: Default::default(),
        next_offset: ROW_BASE,
        prev_batch: ROW_BASE,
    })))
}

/// FUSE `releasedir`.
pub(crate) fn releasedir(cx: &Ctx, fh: u64) {
    cx.open.handles().remove(fh);
}

/// The entries of a small directory (everything but a table's rows).
/// `first`: the listing's first request, whose cells (a family's, or a
/// row's) are kept for the listings and opens that follow
/// (`listed_values.rs`); the requests that go on with a long listing list
/// it again, and keep nothing more.
pub(super) fn list_small(cx: &Ctx, node: &Node, first: bool) -> FsResult<Vec<Listed>> {
    let mut out = Vec::new();
    match node {
        Node::Root => {
            cx.data.check_changed_tables();
            out.push(dir(STATUS_DIR.into(), Node::StatusDir, None));
            // lockdir hook
            if cx.has_lockdir() {
                out.push(dir(
                    crate::node::lock::DIR_NAME.into(),
                    Node::Lock(crate::node::LockNode::root()),
                    None,
                ));
            }
            let mut tables = cx.data.store().list_tables();
            tables.sort();
            out.extend(
                tables
                    .into_iter()
                    .map(|t| dir(t.clone().into_bytes(), Node::Table(Name::from(t)), None)),
            );
        }
        Node::StatusDir => {
            for f in StatusFile::ALL {
                out.push(Listed {
                    name: f.name().into(),
                    node: Node::Status(f),
                    kind: FileType::RegularFile,
                    attr: None,
                    version: None,
                });
            }
        }
        Node::ScanDir(_) | Node::ChangesDir(_) | Node::AtDir(_) => {}
        Node::SnapDir(t) => out.extend(super::snapshots::list(cx, t)?),
        Node::Row { table, view, row } => {
            cx.listing.entered(table);
            let schema = cx.data.schema(table)?;
            // Placeholders first (see the module's note).
            let pending = if view.is_now() {
                cx.data.pending().families_of(table, row)
            } else {
                Vec::new()
            };
            let mut fams = if first {
                cx.data.listed_row_families(table, *view, row)?
            } else {
                cx.data.row_families(table, *view, row)?
            };
            fams.extend(pending);
            for f in fams.into_iter().filter(|f| schema.families.contains_key(f)) {
                let node = Node::Family(FamilyAddr {
                    table: table.clone(),
                    view: *view,
                    row: row.clone(),
                    family: Name::from(f.as_str()),
                });
                let fs = &schema.families[&f];
                let attr = cx.dir_attr(cx.kernel.ino_of(&node), fs.mode, fs.owner, fs.group);
                out.push(dir(f.into_bytes(), node, Some(attr)));
            }
        }
        Node::Family(f) => {
            let fam = cx.data.family_schema(&f.table, &f.family)?;
            // Created cells first (see the module's note).
            let mut created = if f.view.is_now() {
                cx.data.pending().cells_of(&f.table, &f.row, &f.family)
            } else {
                Vec::new()
            };
            let mut cells = if first {
                cx.data.listed_family_cells(f)?
            } else {
                cx.data.family_cells(f)?
            };
            let have: BTreeSet<Vec<u8>> = cells.iter().map(|c| c.qualifier.clone()).collect();
            created.retain(|q| !have.contains(q));
            let mut entries: Vec<(Vec<u8>, Option<engine::Cell>)> = cells
                .drain(..)
                .map(|c| (c.qualifier.clone(), Some(c)))
                .collect();
            entries.extend(created.into_iter().map(|q| (q, None)));
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (q, cell) in entries {
                let node = Node::Cell(f.column(q.clone()));
                let attr = cx.value_attr(cx.kernel.ino_of(&node), &fam, cell.as_ref());
                out.push(Listed {
                    name: display_name(&q),
                    node,
                    kind: FileType::RegularFile,
                    attr: Some(attr),
                    version: cell.map(|c| (c.value.len() as u64, c.timestamp)),
                });
            }
        }
        Node::VersionsDir(f) => {
            let fam = cx.data.family_schema(&f.table, &f.family)?;
            // Placeholders first (see the module's note).
            let pending = if f.view.is_now() {
                cx.data.pending().columns_of(&f.table, &f.row, &f.family)
            } else {
                Vec::new()
            };
            let mut cols = cx.data.family_columns(f)?;
            cols.extend(pending);
            for q in cols {
                let node = Node::VersionsColumn(f.column(q.clone()));
                let attr = cx.dir_attr(cx.kernel.ino_of(&node), fam.mode, fam.owner, fam.group);
                out.push(dir(display_name(&q), node, Some(attr)));
            }
        }
        Node::VersionsColumn(col) => {
            let fam = cx.data.family_schema(&col.table, &col.family)?;
            let mut versions = cx.data.versions(col)?;
            versions.reverse(); // oldest first, as ls sorts them
            for c in versions {
                let node = Node::Version {
                    cell: col.clone(),
                    ts: c.timestamp,
                };
                let attr = cx.value_attr(cx.kernel.ino_of(&node), &fam, Some(&c));
                out.push(Listed {
                    name: version_name(c.timestamp).into_bytes(),
                    node,
                    kind: FileType::RegularFile,
                    attr: Some(attr),
                    version: Some((c.value.len() as u64, c.timestamp)),
                });
            }
        }
        _ => return Err(Errno::ENOTDIR),
    }
    Ok(out)
}

/// Up to `limit` rows after `after`, from the store and (live view) the
/// pending directories, merged in key order.
pub(super) fn row_batch(
    cx: &Ctx,
    table: &str,
    view: View,
    after: Option<&[u8]>,
    limit: u64,
) -> FsResult<Vec<Vec<u8>>> {
    // Placeholders first (see the module's note).
    let pending = if view.is_now() {
        cx.data.pending().rows_after(table, after, limit as usize)
    } else {
        Vec::new()
    };
    let what = format!("listing of {table}");
    let mut stream = row_scan(cx, table, view, after, Some(limit))?;
    // In key order, as the scan returns them.
    let mut rows = Vec::new();
    while let Some(row) = stream.next_row_key().map_err(|e| cx.data.fail(&what, &e))? {
        rows.push(row);
    }
    if !pending.is_empty() {
        rows.extend(pending);
        rows.sort_unstable();
        rows.dedup();
    }
    rows.truncate(limit as usize);
    Ok(rows)
}

/// A keys-only scan of `table`'s rows after `after` (up to `limit`).
fn row_scan(
    cx: &Ctx,
    table: &str,
    view: View,
    after: Option<&[u8]>,
    limit: Option<u64>,
) -> FsResult<Box<dyn RowStream>> {
    let spec = ScanSpec {
        rows: RowRange {
            start: after.map_or(Bound::Unbounded, |a| Bound::Excluded(a.to_vec())),
            end: Bound::Unbounded,
        },
        time_range: crate::view::view_range(view),
        max_versions: Some(1),
        row_limit: limit,
        // A row's name is all a listing needs: one cell, no value.
        filter: Some(RowFilter::Chain(vec![
            RowFilter::CellsPerRowLimit(1),
            RowFilter::StripValue,
        ])),
        ..Default::default()
    };
    cx.data
        .store()
        .scan(table, spec)
        .map_err(|e| cx.data.fail(&format!("listing of {table}"), &e))
}

/// The rows of a live table listing kept whole ([`crate::listing::Listing::kept`]),
/// if they may answer its next reply; `first`: the listing's first reply.
/// A listing kept at its second reading is read here, whole, at once.
fn kept_rows(cx: &Ctx, table: &Name, first: bool) -> FsResult<Option<Arc<[ListedRow]>>> {
    // What the store does not hold, and what no write's invalidation
    // reaches (another daemon's writes while its lease is not known to
    // hold), a kept listing would miss. Pending rows are looked at before
    // the epoch is taken: a commit of one moves the epoch before the
    // placeholder goes.
    if !cx.data.pending().rows_after(table, None, 1).is_empty()
        || !cx.open.pages().writes_reported_now()
    {
        return Ok(None);
    }
    let epoch = cx.data.table_epoch(table);
    let ttl = cx.opts.dir_timeout;
    match cx.listing.kept(table, epoch, first, ttl) {
        KeptListing::Rows(rows) => Ok(Some(rows)),
        KeptListing::Scan => Ok(None),
        KeptListing::Keep => {
            // Nor what expires with no write: a family whose newest
            // versions its age may collect.
            let schema = cx.data.schema(table)?;
            if !schema
                .families
                .values()
                .all(crate::view::family_newest_lasts)
            {
                cx.listing.not_kept(table, epoch);
                return Ok(None);
            }
            let what = format!("listing of {table}");
            let mut stream = row_scan(cx, table, View::Now, None, None)?;
            let (mut rows, mut bytes) = (Vec::new(), 0);
            while let Some(row) = stream.next_row_key().map_err(|e| cx.data.fail(&what, &e))? {
                let ino = cx.kernel.row_ino(table, View::Now, &row);
                let r = ListedRow::new(row, ino);
                bytes += row_bytes(&r);
                if bytes > KEPT_TABLE_BYTES {
                    cx.listing.not_kept(table, epoch);
                    return Ok(None);
                }
                rows.push(r);
            }
            let rows: Arc<[ListedRow]> = rows.into();
            cx.listing.keep_listing(table, epoch, rows.clone(), bytes);
            Ok(Some(rows))
        }
    }
}

/// FUSE `readdir`/`readdirplus`. `add` returns true when the reply is full
/// (the entry was not taken).
pub(crate) fn readdir(
    cx: &Ctx,
    fh: u64,
    offset: u64,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<()> {
    Stats::add(&cx.data.stats().readdirs, 1);
    let h = cx.open.handles().get(fh).ok_or(Errno::EBADF)?;
    let mut g = h.lock();
    let Handle::Dir(d) = &mut *g else {
        return Err(Errno::EBADF);
    };
    let node = d.node.clone();
    if !emit_dots(cx, &node, offset, add) {
        return Ok(());
    }
    match &node {
        Node::Table(t) => {
            let t = t.clone();
            readdir_rows(cx, d, &t, View::Now, true, offset, plus, add)
        }
        Node::AtRoot { table, ts } => {
            let t = table.clone();
            readdir_rows(cx, d, &t, View::At(*ts), false, offset, plus, add)
        }
        _ => {
            if offset <= 2 || d.snapshot.is_none() {
                d.snapshot = Some(list_small(cx, &node, true)?);
            }
            let entries = d.snapshot.as_deref().unwrap_or_default();
            for (i, e) in entries.iter().enumerate() {
                let off = i as u64 + 3;
                if off <= offset {
                    continue;
                }
                if !emit(cx, e, off, plus, add)? {
                    return Ok(());
                }
            }
            Ok(())
        }
    }
}

/// Sends "." and ".." (offsets 1 and 2) where `offset` is before them;
/// false when the reply is full. The kernel ignores the attributes of
/// these two in a readdirplus reply, so they go as names only.
fn emit_dots(cx: &Ctx, node: &Node, offset: u64, add: &mut dyn FnMut(&DirOut<'_>) -> bool) -> bool {
    if offset >= 2 {
        return true;
    }
    let parent = parent_and_name(node).map_or(Node::Root, |(p, _)| p);
    for (off, name, n) in [(1u64, &b"."[..], node), (2, &b".."[..], &parent)] {
        if offset < off
            && add(&DirOut {
                ino: cx.kernel.ino_of(n),
                offset: off,
                kind: FileType::Directory,
                name,
                attr: None,
                ttl: cx.entry_ttl(n),
            })
        {
            return false;
        }
    }
    true
}

/// FUSE `readdir`/`readdirplus` of a directory that was not opened (the
/// kernel sends no OPENDIR when we decline it): the place in the
/// listing comes from the offset (see [`crate::listing`]).
pub(crate) fn readdir_unopened(
    cx: &Ctx,
    ino: u64,
    offset: u64,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<()> {
    if offset & LAST != 0 {
        return Ok(());
    }
    Stats::add(&cx.data.stats().readdirs, 1);
    let node = cx.kernel.node(ino)?;
    if !node.is_dir() {
        return Err(Errno::ENOTDIR);
    }
    let resume = cx.listing.resume(ino, offset);
    if !emit_dots(cx, &node, offset, add) {
        return Ok(());
    }
    match &*node {
        Node::Table(t) => rows_unopened(cx, ino, t, View::Now, true, offset, resume, plus, add),
        Node::AtRoot { table, ts } => rows_unopened(
            cx,
            ino,
            table,
            View::At(*ts),
            false,
            offset,
            resume,
            plus,
            add,
        ),
        _ => {
            let entries = list_small(cx, &node, resume.is_none())?;
            let start = match resume {
                None => 0,
                // After the entry named; if it went away, after where it would sort.
                Some(Resume {
                    name: Some(name), ..
                }) => entries
                    .iter()
                    .position(|e| e.name == name)
                    .map(|p| p + 1)
                    .or_else(|| entries.iter().position(|e| e.name > name))
                    .unwrap_or(entries.len()),
                // A forgotten offset: after the entry with its number.
                Some(Resume {
                    ordinal,
                    name: None,
                }) => usize::try_from(ordinal)
                    .map_or(entries.len(), |o| o.saturating_add(1).min(entries.len())),
            };
            let n = entries.len();
            for (i, e) in entries.iter().enumerate().skip(start) {
                let off = cx.listing.place(ino, i as u64, &e.name, i + 1 == n);
                if !emit(cx, e, off, plus, add)? {
                    return Ok(());
                }
            }
            Ok(())
        }
    }
}

/// A table's rows for [`readdir_unopened`]: after the fixed
/// entries, rows after `after` in key order, fetched about a reply at a time.
#[allow(clippy::too_many_arguments)]
fn rows_unopened(
    cx: &Ctx,
    ino: u64,
    table: &str,
    view: View,
    specials: bool,
    offset: u64,
    resume: Option<Resume>,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<()> {
    // The row to go on after, and the number of the next one.
    let (mut after, mut next) = match resume {
        None => (None, 0),
        Some(Resume {
            ordinal,
            name: Some(name),
        }) => (Some(name), ordinal + 1),
        Some(Resume {
            ordinal,
            name: None,
        }) => {
            log::info!(
                "listing of {table}: the offset of row {ordinal} was forgotten; counting rows from the start"
            );
            match nth_row(cx, table, view, ordinal)? {
                Some(row) => (Some(row), ordinal + 1),
                // Fewer rows now than when it was listed: nothing follows.
                None => return Ok(()),
            }
        }
    };
    if after.is_none() && specials && !emit_specials(cx, table, offset, plus, add)? {
        return Ok(());
    }
    // One shared name for every row node of the listing.
    let table_name = Name::from(table);
    // Rows of this reply that carry attributes (the rest: names only).
    let mut attrs = if plus {
        cx.listing.reply_attrs(&table_name, after.is_none())
    } else {
        0
    };
    let schema = if attrs > 0 {
        Some(cx.data.schema(table)?)
    } else {
        None
    };
    // Sends a row at an offset; false when the reply is full.
    let mut send = |r: &ListedRow, off: u64| {
        send_row(
            cx,
            &table_name,
            view,
            schema.as_deref(),
            &mut attrs,
            r,
            off,
            add,
        )
    };
    let kept = if view.is_now() && specials {
        kept_rows(cx, &table_name, after.is_none())?
    } else {
        None
    };
    if let Some(kept) = kept {
        // The rows after `after`, in key order as the scan's.
        let start = after
            .as_deref()
            .map_or(0, |a| kept.partition_point(|r| r.row.as_slice() <= a));
        let first = next;
        let mut sent = PlacedNames::default();
        for (i, r) in kept.iter().enumerate().skip(start) {
            let last = i + 1 == kept.len();
            let off = offset_of(next, last);
            if !send(r, off)? {
                break;
            }
            next += 1;
            if !last {
                sent.push(&r.row);
            }
        }
        cx.listing.place_run(ino, first, sent);
        return Ok(());
    }
    let mut ahead = match after {
        Some(_) => cx.listing.take_ahead(ino, next),
        None => None,
    };
    // A listing that goes on is a long one: scan in large batches at once.
    let mut limit = if ahead.is_some() {
        MAX_ROW_BATCH
    } else {
        ROW_BATCH
    };
    // The rows this reply sent (but a last one), their names kept for the
    // offsets once the reply is built: one lock for them all.
    let first = next;
    let mut sent = PlacedNames::default();
    let place = |sent: PlacedNames| cx.listing.place_run(ino, first, sent);
    loop {
        let (mut rows, exhausted) = match ahead.take() {
            Some(a) => (a.rows, a.exhausted),
            None => {
                if let Some(k) = sent.last() {
                    after = Some(k.to_vec());
                }
                let rows = row_batch(cx, table, view, after.as_deref(), limit)?;
                let exhausted = (rows.len() as u64) < limit;
                limit = (limit * 4).min(MAX_ROW_BATCH);
                (listed_rows(cx, table, view, rows), exhausted)
            }
        };
        while let Some(r) = rows.pop_front() {
            let last = exhausted && rows.is_empty();
            let off = offset_of(next, last);
            if !send(&r, off)? {
                // The reply is full: this row and the rest wait for the
                // next, whose rows are read meanwhile (a fill).
                let want = sent.len() + 1;
                place(sent);
                rows.push_front(r);
                let ahead = Ahead::new(next, rows, exhausted).with_fill(table_name, view, want);
                cx.listing.put_ahead(ino, ahead);
                return Ok(());
            }
            next += 1;
            if !last {
                sent.push(&r.row);
            }
        }
        if exhausted {
            place(sent);
            return Ok(());
        }
    }
}

/// Sends row `r` of a listing of `table` at offset `off`, with its
/// attributes while `attrs` lasts (`schema` the table's, given when any
/// row of the reply carries them); false when the reply is full.
#[allow(clippy::too_many_arguments)]
fn send_row(
    cx: &Ctx,
    table: &Name,
    view: View,
    schema: Option<&TableSchema>,
    attrs: &mut u64,
    r: &ListedRow,
    off: u64,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<bool> {
    match schema.filter(|_| *attrs > 0) {
        Some(s) => {
            *attrs -= 1;
            let node = Node::Row {
                table: table.clone(),
                view,
                row: Key::from(r.row.as_slice()),
            };
            let attr = cx.dir_attr(r.ino, s.mode, s.owner, s.group);
            emit(
                cx,
                &dir(r.name().to_vec(), node, Some(attr)),
                off,
                true,
                add,
            )
        }
        // A name only: nothing to build.
        None => Ok(!add(&DirOut {
            ino: r.ino,
            offset: off,
            kind: FileType::Directory,
            name: r.name(),
            attr: None,
            ttl: Duration::ZERO,
        })),
    }
}

/// Rows as a listing sends them (see [`ListedRow`]).
fn listed_rows(cx: &Ctx, table: &str, view: View, rows: Vec<Vec<u8>>) -> VecDeque<ListedRow> {
    rows.into_iter()
        .map(|row| {
            let ino = cx.kernel.row_ino(table, view, &row);
            ListedRow::new(row, ino)
        })
        .collect()
}

/// Reads the rows the next reply of directory `ino`'s listing will send, if
/// the last reply asked for them (`fill`, from [`Listing::start_fill`]):
/// run beside the reader, after that reply went (see `listing/readahead.rs`).
///
/// [`Listing::start_fill`]: crate::listing::Listing::start_fill
pub(crate) fn fill_ahead(cx: &Ctx, ino: u64, fill: Fill) {
    // A failure leaves the waiting rows as they were: the reply scans
    // again itself (and reports what it meets).
    let rows = row_batch(
        cx,
        &fill.table,
        fill.view,
        Some(&fill.after),
        fill.want as u64,
    )
    .ok()
    .map(|rows| {
        let exhausted = rows.len() < fill.want;
        (listed_rows(cx, &fill.table, fill.view, rows), exhausted)
    });
    cx.listing.finish_fill(ino, &fill, rows);
}

/// Row number `ordinal` (from 0) of a table's listing, counted from the
/// start; `None` if it has fewer rows.
fn nth_row(cx: &Ctx, table: &str, view: View, ordinal: u64) -> FsResult<Option<Vec<u8>>> {
    let mut after: Option<Vec<u8>> = None;
    let mut left = ordinal + 1;
    while left > 0 {
        let rows = row_batch(cx, table, view, after.as_deref(), left.min(4096))?;
        let Some(last) = rows.last() else {
            return Ok(None);
        };
        left -= rows.len() as u64;
        after = Some(last.clone());
    }
    Ok(after)
}

/// A table's `.schema` and `.mutate` (offsets 3 and 4) where `offset`
/// is before them; false when the reply is full.
fn emit_specials(
    cx: &Ctx,
    table: &str,
    offset: u64,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<bool> {
    for (i, name) in [SCHEMA, MUTATE].iter().enumerate() {
        let off = i as u64 + 3;
        if off <= offset || cx.data.pending().is_hidden(table, name) {
            continue;
        }
        let node = if i == 0 {
            Node::Schema(table.into())
        } else {
            Node::Mutate(table.into())
        };
        let e = Listed {
            name: name.as_bytes().to_vec(),
            node,
            kind: FileType::RegularFile,
            attr: None,
            version: None,
        };
        if !emit(cx, &e, off, plus, add)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Sends one entry; false when the reply is full.
pub(super) fn emit(
    cx: &Ctx,
    e: &Listed,
    off: u64,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<bool> {
    let attr = if plus {
        match e.attr {
            Some(a) => Some(a),
            None => match cx.node_attr(&e.node) {
                Ok(a) => Some(a),
                // Gone since it was listed: skip it.
                Err(Errno::ENOENT) => return Ok(true),
                Err(err) => return Err(err),
            },
        }
    } else {
        None
    };
    if add(&DirOut {
        ino: cx.kernel.ino_of(&e.node),
        offset: off,
        kind: e.kind,
        name: &e.name,
        attr,
        ttl: cx.entry_ttl(&e.node),
    }) {
        return Ok(false);
    }
    if plus {
        // readdirplus entries count as lookups.
        let ino = crate::lookup::register(cx, &e.node)?;
        if let Some((size, ts)) = e.version {
            cx.kernel.inodes().set_reported(ino, size, ts);
        }
    }
    Ok(true)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn readdir_rows(
    cx: &Ctx,
    d: &mut DirHandle,
    table: &str,
    view: View,
    specials: bool,
    offset: u64,
    plus: bool,
    add: &mut dyn FnMut(&DirOut<'_>) -> bool,
) -> FsResult<()> {
    let mut after: Option<Vec<u8>> = None;
    if offset < ROW_BASE {
        if specials && !emit_specials(cx, table, offset, plus, add)? {
            return Ok(());
        }
    } else {
        match d.cursors.get(&offset) {
            Some(k) => after = Some(k.clone()),
            None => {
                log::info!("readdir of {table}: offset {offset} is no longer known");
                return Err(Errno::EINVAL);
            }
        }
    }
    // Keep the cursors of this call and the previous one only.
    let first = d.next_offset;
    let keep_from = d.prev_batch;
    d.cursors = d.cursors.split_off(&keep_from);
    d.prev_batch = first;
    let table_name = Name::from(table);
    let mut attrs = if plus {
        cx.listing.reply_attrs(&table_name, offset < ROW_BASE)
    } else {
        0
    };
    let schema = if attrs > 0 {
        Some(cx.data.schema(table)?)
    } else {
        None
    };
    loop {
        let rows = row_batch(cx, table, view, after.as_deref(), ROW_BATCH)?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in rows {
            let off = d.next_offset;
            d.next_offset += 1;
            d.cursors.insert(off, row.clone());
            let name = display_name(&row);
            let node = Node::Row {
                table: table_name.clone(),
                view,
                row: Key::from(row.as_slice()),
            };
            let attr = schema.as_ref().filter(|_| attrs > 0).map(|s| {
                attrs -= 1;
                cx.dir_attr(cx.kernel.ino_of(&node), s.mode, s.owner, s.group)
            });
            let e = dir(name, node, attr);
            if !emit(cx, &e, off, attr.is_some(), add)? {
                return Ok(());
            }
            after = Some(row);
        }
    }
}
