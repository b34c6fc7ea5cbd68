//! Writers whose cells were deleted another way than through their names
//! (a `.mutate` delete, `rm` of a version, a write past the mount).

use crate::ctx::Ctx;
use crate::node::Node;
use crate::open_files::handles::Handle;
use parking_lot::{Mutex, MutexGuard};

/// Cells that `which` matches lost versions another way than through
/// their names: the writers open on one left with none stop answering for
/// its name (see `CellHandle::deleted`). With `wait` (a `.mutate` delete,
/// `rm` of a version) a writer's handle is waited for; without (a write
/// past the mount) one locked now is left out, since a commit holds its
/// handle while its write waits for other daemons, which may be waiting
/// for this one.
pub(crate) fn writers_lost_cells(cx: &Ctx, which: impl Fn(&Node) -> bool, wait: bool) {
    for h in cx.open.handles().writers() {
        let Some(g) = lock(&h, wait) else {
            continue;
        };
        let col = match &*g {
            Handle::Cell(c)
                if which(&c.node) && c.writable && !c.unlinked && !c.created && !c.deleted =>
            {
                match &c.node {
                    Node::Cell(col) => col.clone(),
                    _ => continue,
                }
            }
            _ => continue,
        };
        drop(g);
        // Read without the handle's lock. A commit in between leaves the
        // flag set on a cell that exists: its lookups then read the store,
        // which has it.
        if matches!(cx.data.newest(&col), Ok(None)) {
            if let Some(Handle::Cell(c)) = lock(&h, wait).as_deref_mut() {
                c.deleted = true;
            }
        }
    }
}

fn lock(h: &Mutex<Handle>, wait: bool) -> Option<MutexGuard<'_, Handle>> {
    if wait {
        Some(h.lock())
    } else {
        h.try_lock()
    }
}

/// Whether `node` is a live cell of `table`'s `row` (of `family`, if given).
pub(crate) fn cell_in(node: &Node, table: &str, row: &[u8], family: Option<&str>) -> bool {
    matches!(node, Node::Cell(c) if c.view.is_now() && *c.table == *table && *c.row == *row
        && family.is_none_or(|f| *c.family == *f))
}
