//! Extended attributes: a cell's row key and qualifier in full, its
//! timestamp, and (for an 8-byte value) the value read as a counter.

use crate::ctx::Ctx;
use crate::node::Node;
use crate::options::FsResult;
use fuser::Errno;

pub(super) fn xattrs(cx: &Ctx, node: &Node) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    match node {
        Node::Row { row, .. } => out.push(("user.bigtable.key", row.to_vec())),
        Node::Cell(col) => {
            out.push(("user.bigtable.key", col.qualifier.clone()));
            if let Ok(Some(c)) = cx.data.newest(col) {
                out.push((
                    "user.bigtable.timestamp",
                    c.timestamp.to_string().into_bytes(),
                ));
                // `increment` writes 64-bit big-endian counters; the
                // file keeps the bytes, this shows the number.
                if let Some(d) = crate::output::counter_decimal(&c.value) {
                    out.push(("user.bigtable.counter", d.into_bytes()));
                }
            }
        }
        Node::VersionsColumn(col) => out.push(("user.bigtable.key", col.qualifier.clone())),
        Node::Version { cell, ts } => {
            out.push(("user.bigtable.key", cell.qualifier.clone()));
            out.push(("user.bigtable.timestamp", ts.to_string().into_bytes()));
        }
        _ => {}
    }
    out
}

/// FUSE `getxattr`: `user.bigtable.key` (the full row key or qualifier),
/// `user.bigtable.timestamp` and `user.bigtable.counter`.
pub(crate) fn getxattr(cx: &Ctx, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
    let node = cx.kernel.node(ino)?;
    // Other names (the kernel asks for `security.capability` before a
    // write) are answered without reading the cell.
    if !name.starts_with(b"user.bigtable.") {
        return Err(Errno::NO_XATTR);
    }
    xattrs(cx, &node)
        .into_iter()
        .find(|(n, _)| n.as_bytes() == name)
        .map(|(_, v)| v)
        .ok_or(Errno::NO_XATTR)
}

/// FUSE `listxattr`: NUL-terminated names.
pub(crate) fn listxattr(cx: &Ctx, ino: u64) -> FsResult<Vec<u8>> {
    let node = cx.kernel.node(ino)?;
    let mut out = Vec::new();
    for (n, _) in xattrs(cx, &node) {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    Ok(out)
}
