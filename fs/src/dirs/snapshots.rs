//! `<table>/.snapshots/`: `mkdir` takes a snapshot, `rmdir` deletes one, a
//! listing shows them (each directory's mtime is when it was taken), and
//! each is the table as it was, read-only, under its name (an `.at/`-like
//! view of the [`crate::names::snapshot_table`] name). Who may write the
//! table may take and delete its snapshots: `.snapshots/` has the table's
//! owner, group and mode, which the kernel checks.

use super::{dir, Listed};
use crate::ctx::Ctx;
use crate::names::snapshot_table;
use crate::node::{Name, Node, SNAPSHOT_TS};
use crate::options::FsResult;
use fuser::Errno;

/// The node of snapshot `snap` of `table`.
pub(crate) fn node(table: &str, snap: &str) -> Node {
    Node::AtRoot {
        table: Name::from(snapshot_table(table, snap)),
        ts: SNAPSHOT_TS,
    }
}

fn name(raw: &[u8]) -> FsResult<&str> {
    std::str::from_utf8(raw).map_err(|_| Errno::EINVAL)
}

/// The snapshots of `table`.
pub(super) fn list(cx: &Ctx, table: &str) -> FsResult<Vec<Listed>> {
    let snaps = cx
        .data
        .store()
        .snapshots(table)
        .map_err(|e| cx.data.fail(&format!("list the snapshots of {table}"), &e))?;
    Ok(snaps
        .into_iter()
        .map(|(snap, _)| {
            let n = node(table, &snap);
            dir(snap.into_bytes(), n, None)
        })
        .collect())
}

/// `mkdir <table>/.snapshots/<name>`: takes the snapshot.
pub(super) fn make(
    cx: &Ctx,
    what: &dyn std::fmt::Display,
    table: &str,
    raw: &[u8],
) -> FsResult<Node> {
    let snap = name(raw)?;
    cx.data
        .store()
        .take_snapshot(table, snap)
        .map_err(|e| cx.data.fail(what, &e))?;
    log::info!("took snapshot {snap} of {table}");
    Ok(node(table, snap))
}

/// `rmdir <table>/.snapshots/<name>`: deletes the snapshot.
pub(super) fn remove(
    cx: &Ctx,
    what: &dyn std::fmt::Display,
    table: &str,
    raw: &[u8],
) -> FsResult<()> {
    let snap = name(raw)?;
    cx.data
        .store()
        .delete_snapshot(table, snap)
        .map_err(|e| cx.data.fail(what, &e))?;
    cx.kernel
        .invalidate_table(&snapshot_table(table, snap), None);
    log::info!("deleted snapshot {snap} of {table}");
    Ok(())
}
