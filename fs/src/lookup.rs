//! Names to nodes: `lookup` and the resolution every name-taking operation uses.

use crate::ctx::Ctx;
use crate::names::{
    parse_lenient, parse_strict, parse_version_name, snapshot_table, table_name, KeyName,
};
use crate::node::{
    FamilyAddr, Key, Name, Node, StatusFile, View, AT, CHANGES, MUTATE, SCAN, SCHEMA, SNAPSHOTS,
    SNAPSHOT_TS, STATUS_DIR, VERSIONS,
};
use crate::options::{Entry, FsResult, Stats};
use fuser::{Errno, FileAttr};

fn family_name(name: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(name).ok()?;
    (!s.starts_with('.')).then_some(s)
}

/// Parses `.at/<ts>`: decimal microseconds (zero padding allowed only in the
/// 16-digit form that `.versions` uses, so each time has one name).
pub fn parse_at_name(name: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(name).ok()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ts: u64 = s.parse().ok()?;
    (ts.to_string() == s || format!("{ts:016}") == s).then_some(ts)
}

/// The node `name` stands for under `parent`, with its attributes (a
/// lookup's: answered from the row memo where it can, see `row_memo.rs`).
/// ENOENT if there is nothing by that name.
pub(crate) fn resolve(cx: &Ctx, parent: &Node, name: &[u8]) -> FsResult<(Node, FileAttr)> {
    let node = child_node(cx, parent, name)?;
    let attr = cx.lookup_attr(&node)?;
    Ok((node, attr))
}

/// The node a name would be (existence of data aside, except where the
/// name must be resolved against data: hashed names).
pub(crate) fn child_node(cx: &Ctx, parent: &Node, name: &[u8]) -> FsResult<Node> {
    let n = name;
    match parent {
        Node::Root => {
            if n == STATUS_DIR.as_bytes() {
                return Ok(Node::StatusDir);
            }
            // lockdir hook
            if n == crate::node::lock::DIR_NAME.as_bytes() && cx.has_lockdir() {
                return Ok(Node::Lock(crate::node::LockNode::root()));
            }
            let t = table_name(n).ok_or(Errno::ENOENT)?;
            cx.data.check_changed_tables();
            Ok(Node::Table(Name::from(t)))
        }
        Node::StatusDir => StatusFile::from_name(n)
            .map(Node::Status)
            .ok_or(Errno::ENOENT),
        Node::Table(t) => {
            let t = t.clone();
            match n {
                _ if (n == SCHEMA.as_bytes() || n == MUTATE.as_bytes())
                    && cx.data.pending().is_hidden(&t, &String::from_utf8_lossy(n)) =>
                {
                    Err(Errno::ENOENT)
                }
                _ if n == SCHEMA.as_bytes() => Ok(Node::Schema(t)),
                _ if n == MUTATE.as_bytes() => Ok(Node::Mutate(t)),
                _ if n == SCAN.as_bytes() => Ok(Node::ScanDir(t)),
                _ if n == CHANGES.as_bytes() => Ok(Node::ChangesDir(t)),
                _ if n == AT.as_bytes() => Ok(Node::AtDir(t)),
                _ if n == SNAPSHOTS.as_bytes() => Ok(Node::SnapDir(t)),
                _ => row_node(cx, &t, View::Now, n),
            }
        }
        Node::ScanDir(t) => {
            crate::query::parse(n).map_err(|why| {
                cx.data.refuse(
                    &format!("{parent}/{}", String::from_utf8_lossy(n)),
                    Errno::EINVAL,
                    &why,
                )
            })?;
            Ok(Node::Scan {
                table: t.clone(),
                query: n.to_vec(),
            })
        }
        Node::ChangesDir(t) => {
            crate::change_query::parse(n).map_err(|why| {
                cx.data.refuse(
                    &format!("{parent}/{}", String::from_utf8_lossy(n)),
                    Errno::EINVAL,
                    &why,
                )
            })?;
            Ok(Node::Changes {
                table: t.clone(),
                query: n.to_vec(),
            })
        }
        Node::AtDir(t) => {
            let ts = parse_at_name(n).ok_or(Errno::ENOENT)?;
            Ok(Node::AtRoot {
                table: t.clone(),
                ts,
            })
        }
        Node::SnapDir(t) => {
            let snap = std::str::from_utf8(n).map_err(|_| Errno::ENOENT)?;
            Ok(Node::AtRoot {
                table: Name::from(snapshot_table(t, snap)),
                ts: SNAPSHOT_TS,
            })
        }
        // A snapshot's `.scan/`.
        Node::AtRoot { table, .. } if n == SCAN.as_bytes() && table.contains('/') => {
            Ok(Node::ScanDir(table.clone()))
        }
        Node::AtRoot { table, ts } => row_node(cx, table, View::At(*ts), n),
        Node::Row { table, view, row } => {
            let f = family_name(n).ok_or(Errno::ENOENT)?;
            Ok(Node::Family(FamilyAddr {
                table: table.clone(),
                view: *view,
                row: row.clone(),
                family: Name::from(f),
            }))
        }
        Node::Family(f) => {
            if n == VERSIONS.as_bytes() {
                return Ok(Node::VersionsDir(f.clone()));
            }
            let kn = parse_lenient(n).ok_or(Errno::ENOENT)?;
            let q = cx.data.resolve_qualifier(f, &kn)?.ok_or(Errno::ENOENT)?;
            Ok(Node::Cell(f.column(q)))
        }
        Node::VersionsDir(f) => {
            let kn = parse_strict(n).ok_or(Errno::ENOENT)?;
            let q = cx.data.resolve_qualifier(f, &kn)?.ok_or(Errno::ENOENT)?;
            Ok(Node::VersionsColumn(f.column(q)))
        }
        Node::VersionsColumn(c) => {
            let ts = parse_version_name(n).ok_or(Errno::ENOENT)?;
            Ok(Node::Version {
                cell: c.clone(),
                ts,
            })
        }
        Node::Lock(l) => Ok(Node::Lock(l.child(n)?)),
        _ => Err(Errno::ENOTDIR),
    }
}

/// A row directory's node: strict names only (a directory has one name).
fn row_node(cx: &Ctx, table: &str, view: View, name: &[u8]) -> FsResult<Node> {
    let kn = parse_strict(name).ok_or(Errno::ENOENT)?;
    let row = match &kn {
        KeyName::Key(k) => k.clone(),
        KeyName::Hashed { .. } => cx
            .data
            .resolve_row(table, view, &kn)?
            .ok_or(Errno::ENOENT)?,
    };
    Ok(Node::Row {
        table: Name::from(table),
        view,
        row: Key::from(row),
    })
}

/// FUSE `lookup`: resolves and takes a kernel reference.
pub(crate) fn lookup(cx: &Ctx, parent: u64, name: &[u8]) -> FsResult<Entry> {
    Stats::add(&cx.data.stats().lookups, 1);
    let p = cx.kernel.node(parent)?;
    let (node, mut attr) = resolve(cx, &p, name)?;
    if let Node::Row { table, .. } = &node {
        cx.listing.entered(table);
    }
    let ino = register(cx, &node)?;
    attr.ino = fuser::INodeNo(ino);
    if node.value_cell().is_some() && cx.kernel.inodes().reported(ino).is_none() {
        // A file the kernel had no inode for: the attributes were made
        // before the inode was (so they could not note what the kernel
        // is told); note them now, so that the open after this lookup
        // may use the page cache instead of reading around it.
        let ts = attr
            .mtime
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        cx.kernel.inodes().set_reported(ino, attr.size, ts);
    }
    Ok(cx.entry(&node, attr))
}

/// Takes a kernel reference on `node`.
pub(crate) fn register(cx: &Ctx, node: &Node) -> FsResult<u64> {
    cx.kernel.inodes().register(node).map_err(|_| {
        log::error!("inode number collision for {node}");
        Errno::EIO
    })
}

/// FUSE `getattr`.
pub(crate) fn getattr(
    cx: &Ctx,
    ino: u64,
    fh: Option<u64>,
) -> FsResult<(FileAttr, std::time::Duration)> {
    Stats::add(&cx.data.stats().getattrs, 1);
    let node = cx.kernel.node(ino)?;
    // An open file is described by its handle (it may be uncommitted or unlinked).
    if let Some(attr) = fh.and_then(|fh| crate::files::attrs::handle_attr(cx, fh, &node)) {
        return Ok((attr, cx.attr_ttl(&node)));
    }
    // A file a rename replaced, held open: its name is another file's now,
    // so its descriptors answer for it (as an unlinked file's do).
    if cx.kernel.inodes().is_replaced(ino) {
        let attr = crate::files::attrs::replaced_attr(cx, ino, &node).ok_or(Errno::ENOENT)?;
        return Ok((attr, cx.attr_ttl(&node)));
    }
    // Answered from the row memo where it can, as a lookup is: the kernel
    // asks again after its own write or create.
    match cx.lookup_attr(&node) {
        // fstat of a descriptor whose file was unlinked (the kernel
        // names no handle in a GETATTR from fstat): its handle answers.
        Err(e) if e == Errno::ENOENT => crate::files::attrs::unlinked_attr(cx, &node)
            .map(|a| (a, cx.attr_ttl(&node)))
            .ok_or(e),
        r => Ok((r?, cx.attr_ttl(&node))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_names() {
        assert_eq!(parse_at_name(b"42"), Some(42));
        assert_eq!(parse_at_name(b"0000000000000042"), Some(42));
        assert_eq!(parse_at_name(b"042"), None);
        assert_eq!(parse_at_name(b"x"), None);
        assert_eq!(parse_at_name(b""), None);
    }

    #[test]
    fn table_names() {
        assert_eq!(table_name(b"webtable"), Some("webtable"));
        assert_eq!(table_name(b".x"), None);
        assert_eq!(table_name(b"\xff"), None);
    }
}
