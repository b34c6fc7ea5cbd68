//! Writers whose cells were deleted another way than through their names
//! (a `.mutate` delete, `rm` of a version, a write past the mount).

use crate::ctx::Ctx;
use crate::node::Node;
use crate::open_files::handles::Handle;

/// Cells that `which` matches lost versions another way than through
/// their names (a `.mutate` delete, `rm` of a version): the writers open
/// on one left with none stop answering for its name (see
/// `CellHandle::deleted`).
pub(crate) fn writers_lost_cells(cx: &Ctx, which: impl Fn(&Node) -> bool) {
    for h in cx.open.handles().writers_where(which) {
        let col = match &*h.lock() {
            Handle::Cell(c) if c.writable && !c.unlinked && !c.created && !c.deleted => {
                match &c.node {
                    Node::Cell(col) => col.clone(),
                    _ => continue,
                }
            }
            _ => continue,
        };
        // Read without the handle's lock. A commit in between leaves the
        // flag set on a cell that exists: its lookups then read the store,
        // which has it.
        if matches!(cx.data.newest(&col), Ok(None)) {
            if let Handle::Cell(c) = &mut *h.lock() {
                c.deleted = true;
            }
        }
    }
}
