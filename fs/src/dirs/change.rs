//! `mkdir` and `rmdir`: tables, rows, families and `.versions` columns.

use crate::ctx::Ctx;
use crate::doing::Doing;
use crate::names::{parse_strict, table_name, KeyName};
use crate::node::{
    FamilyAddr, Key, Name, Node, View, AT, CHANGES, MUTATE, SCAN, SCHEMA, SNAPSHOTS, STATUS_DIR,
    VERSIONS,
};
use crate::options::FsResult;
use crate::perms::{Caller, W};
use engine::schema::TableSchema;
use engine::ScanSpec;
use fuser::Errno;

/// FUSE `mkdir`.
pub(crate) fn mkdir(
    cx: &Ctx,
    caller: &Caller,
    parent: u64,
    name: &[u8],
    mode: u32,
    umask: u32,
) -> FsResult<crate::options::Entry> {
    let p = cx.kernel.node(parent)?;
    cx.listing.forget_ahead(parent);
    let what = Doing::entry("mkdir", &p, name);
    if p.read_only() {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    let node = match &*p {
        Node::Root => {
            if name == STATUS_DIR.as_bytes() {
                return Err(cx.data.refuse(&what, Errno::EEXIST, "reserved name"));
            }
            let t = table_name(name).ok_or_else(|| {
                cx.data.refuse(
                    &what,
                    Errno::EINVAL,
                    "a table name is UTF-8 and does not start with '.'",
                )
            })?;
            let schema = TableSchema {
                owner: caller.uid,
                group: caller.gid,
                mode: mode & !umask & 0o7777,
                ..Default::default()
            };
            cx.data
                .store()
                .create_table(t, schema)
                .map_err(|e| cx.data.fail(&what, &e))?;
            // Directories left of a table of that name that another
            // daemon deleted are not this one's.
            cx.data.pending().drop_table(t);
            log::info!("created table {t}");
            Node::Table(Name::from(t))
        }
        Node::SnapDir(t) => super::snapshots::make(cx, &what, t, name)?,
        Node::Table(t) => {
            if [SCHEMA, MUTATE, SCAN, CHANGES, AT, SNAPSHOTS]
                .iter()
                .any(|r| r.as_bytes() == name)
            {
                return Err(cx.data.refuse(&what, Errno::EEXIST, "reserved name"));
            }
            let key = match parse_strict(name) {
                Some(KeyName::Key(k)) => k,
                Some(h @ KeyName::Hashed { .. }) => {
                    return Err(match cx.data.resolve_row(t, View::Now, &h)? {
                        Some(_) => cx.data.refuse(&what, Errno::EEXIST, "row exists"),
                        None => cx.data.refuse(
                            &what,
                            Errno::EINVAL,
                            "a hashed name can only name an existing row",
                        ),
                    })
                }
                None => {
                    return Err(cx.data.refuse(
                        &what,
                        Errno::EINVAL,
                        "not a canonical row name (escape %, / and a leading . as %XX)",
                    ))
                }
            };
            cx.data.schema(t)?;
            // The kernel's lookup before the mkdir read the row empty a
            // moment ago: no second read (a row made meanwhile elsewhere
            // gets a mkdir that succeeds instead of EEXIST).
            let exists = cx.data.pending().has_row(t, &key)
                || (!cx.data.row_read_empty(t, &key)
                    && cx.data.row_exists(t, View::Now, &key, false)?);
            if exists {
                return Err(cx.data.refuse(&what, Errno::EEXIST, "row exists"));
            }
            cx.data.pending().add_row(t, &key);
            Node::Row {
                table: t.clone(),
                view: View::Now,
                row: Key::from(key),
            }
        }
        Node::Row { table, row, .. } => {
            let f = std::str::from_utf8(name).map_err(|_| Errno::ENOENT)?;
            let fam = cx.data.family_schema(table, f).map_err(|e| {
                cx.data
                    .refuse(&what, e, "no such column family in the schema")
            })?;
            if !caller.may(fam.owner, fam.group, fam.mode, W) {
                return Err(cx.data.refuse(&what, Errno::EACCES, "family not writable"));
            }
            let made = FamilyAddr {
                table: table.clone(),
                view: View::Now,
                row: row.clone(),
                family: Name::from(f),
            };
            let exists = cx.data.pending().has_family(table, row, f)
                || (!cx.data.row_read_empty(table, row) && cx.data.family_exists(&made, false)?);
            if exists {
                return Err(cx
                    .data
                    .refuse(&what, Errno::EEXIST, "family exists in this row"));
            }
            cx.data.pending().add_family(table, row, f);
            Node::Family(made)
        }
        Node::Family(_) if name == VERSIONS.as_bytes() => {
            return Err(cx.data.refuse(&what, Errno::EEXIST, "reserved name"))
        }
        Node::Family(_) | Node::VersionsColumn(_) => {
            return Err(cx
                .data
                .refuse(&what, Errno::EPERM, "cells are files, not directories"))
        }
        // A live family (the view is not read-only).
        Node::VersionsDir(fa) => {
            let q = match parse_strict(name) {
                Some(KeyName::Key(k)) => k,
                Some(h) => cx.data.resolve_qualifier(fa, &h)?.ok_or_else(|| {
                    cx.data.refuse(
                        &what,
                        Errno::EINVAL,
                        "a hashed name can only name an existing column",
                    )
                })?,
                None => {
                    return Err(cx.data.refuse(
                        &what,
                        Errno::EINVAL,
                        "not a canonical qualifier name",
                    ))
                }
            };
            let col = fa.column(q);
            if cx.data.column_exists(&col)? {
                return Err(cx.data.refuse(&what, Errno::EEXIST, "column exists"));
            }
            cx.data
                .pending()
                .add_column(&col.table, &col.row, &col.family, &col.qualifier);
            Node::VersionsColumn(col)
        }
        n if !n.is_dir() => return Err(Errno::ENOTDIR),
        _ => {
            return Err(cx
                .data
                .refuse(&what, Errno::EPERM, "cannot make a directory here"))
        }
    };
    let attr = cx.node_attr(&node)?;
    crate::lookup::register(cx, &node)?;
    Ok(cx.entry(&node, attr))
}

/// FUSE `rmdir`.
pub(crate) fn rmdir(cx: &Ctx, _caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
    let p = cx.kernel.node(parent)?;
    cx.listing.forget_ahead(parent);
    let what = Doing::entry("rmdir", &p, name);
    if p.read_only() {
        return Err(cx.data.refuse(&what, Errno::EROFS, "read-only view"));
    }
    match &*p {
        Node::Root => {
            if name == STATUS_DIR.as_bytes() {
                return Err(cx.data.refuse(&what, Errno::EBUSY, "the status directory"));
            }
            let t = table_name(name).ok_or(Errno::ENOENT)?;
            cx.data.check_unprotected(t, &what)?;
            let spec = ScanSpec {
                row_limit: Some(1),
                max_versions: Some(1),
                ..Default::default()
            };
            let mut rows = cx
                .data
                .store()
                .scan(t, spec)
                .map_err(|e| cx.data.fail(&what, &e))?;
            if rows
                .next_row()
                .map_err(|e| cx.data.fail(&what, &e))?
                .is_some()
                || !cx.data.pending().rows_after(t, None, 1).is_empty()
            {
                return Err(cx
                    .data
                    .refuse(&what, Errno::ENOTEMPTY, "the table has rows"));
            }
            cx.data
                .store()
                .delete_table(t)
                .map_err(|e| cx.data.fail(&what, &e))?;
            cx.data.pending().drop_table(t);
            cx.data.table_deleted(t);
            cx.kernel.invalidate_table(t, None);
            log::info!("deleted table {t}");
            Ok(())
        }
        Node::SnapDir(t) => super::snapshots::remove(cx, &what, t, name),
        Node::Table(t) => {
            if [SCAN, CHANGES, AT, SNAPSHOTS]
                .iter()
                .any(|r| r.as_bytes() == name)
            {
                return Err(cx.data.refuse(&what, Errno::EBUSY, "a virtual directory"));
            }
            if name == SCHEMA.as_bytes() || name == MUTATE.as_bytes() {
                return Err(Errno::ENOTDIR);
            }
            cx.data.check_removal(t, &what)?;
            let kn = parse_strict(name).ok_or(Errno::ENOENT)?;
            let row = match &kn {
                KeyName::Key(k) => k.clone(),
                KeyName::Hashed { .. } => cx
                    .data
                    .resolve_row(t, View::Now, &kn)?
                    .ok_or(Errno::ENOENT)?,
            };
            let spec = ScanSpec {
                cell_limit: Some(1),
                max_versions: Some(1),
                ..Default::default()
            };
            if !cx.data.read_row(t, &row, &spec)?.is_empty() {
                return Err(cx.data.refuse(&what, Errno::ENOTEMPTY, "the row has cells"));
            }
            if cx.data.pending().remove_row(t, &row) {
                Ok(())
            } else {
                Err(Errno::ENOENT)
            }
        }
        Node::Row { table, row, .. } => {
            let f = std::str::from_utf8(name).map_err(|_| Errno::ENOENT)?;
            cx.data.family_schema(table, f)?;
            cx.data.check_removal(table, &what)?;
            let spec = ScanSpec {
                families: Some(vec![f.to_string()]),
                cell_limit: Some(1),
                max_versions: Some(1),
                ..Default::default()
            };
            if !cx.data.read_row(table, row, &spec)?.is_empty() {
                return Err(cx.data.refuse(
                    &what,
                    Errno::ENOTEMPTY,
                    "the family has cells in this row",
                ));
            }
            if cx.data.pending().remove_family(table, row, f) {
                // The row directory stays until it is removed itself.
                cx.data.pending().add_row(table, row);
                Ok(())
            } else {
                Err(Errno::ENOENT)
            }
        }
        Node::Family(_) if name == VERSIONS.as_bytes() => {
            Err(cx.data.refuse(&what, Errno::EBUSY, "a virtual directory"))
        }
        Node::Family(_) | Node::VersionsColumn(_) => Err(Errno::ENOTDIR),
        // A live family (the view is not read-only).
        Node::VersionsDir(fa) => {
            let (table, row, family) = (&fa.table, &fa.row, &fa.family);
            cx.data.check_removal(table, &what)?;
            let kn = parse_strict(name).ok_or(Errno::ENOENT)?;
            let q = cx.data.resolve_qualifier(fa, &kn)?.ok_or(Errno::ENOENT)?;
            let spec = crate::view::StoreView::column_spec(View::Now, family, &q, Some(1));
            if cx
                .data
                .read_row(table, row, &spec)?
                .iter()
                .any(|c| c.qualifier == q)
            {
                return Err(cx
                    .data
                    .refuse(&what, Errno::ENOTEMPTY, "the column has versions"));
            }
            if cx.data.pending().remove_column(table, row, family, &q) {
                cx.data.pending().add_row(table, row);
                cx.data.pending().add_family(table, row, family);
                Ok(())
            } else {
                Err(Errno::ENOENT)
            }
        }
        _ => Err(Errno::ENOTDIR),
    }
}
