//! Writers whose cells were deleted another way than through their names
//! (a `.mutate` delete, `rm` of a version, a write past the mount).

use crate::ctx::Ctx;
use crate::node::Node;
use crate::open_files::handles::Handle;

/// Cells that `which` matches lost versions another way than through
/// their names (a `.mutate` delete, `rm` of a version, with `wait`; a
/// write past the mount, without: see `Handles::writers_where`): the
/// writers open on one left with none stop answering for its name (see
/// `CellHandle::deleted`).
pub(crate) fn writers_lost_cells(cx: &Ctx, which: impl Fn(&Node) -> bool, wait: bool) {
    for h in cx.open.handles().writers_where(which, wait) {
        let Some(g) = (if wait { Some(h.lock()) } else { h.try_lock() }) else {
            continue;
        };
        let col = match &*g {
            Handle::Cell(c) if c.writable && !c.unlinked && !c.created && !c.deleted => {
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
            let mut g = if wait { Some(h.lock()) } else { h.try_lock() };
            if let Some(Handle::Cell(c)) = g.as_deref_mut() {
                c.deleted = true;
            }
        }
    }
}
