//! The open files component: the handles of open data-path files and
//! directories (`handles.rs`), the versions whose pages the kernel may
//! cache with the gate between cached readers and writers (`pages.rs`),
//! and the write budget that open cells' buffers are charged to. Its state
//! is private; operations reach the handle table and the page gate through
//! it.

pub mod handles;
pub mod pages;

use crate::node::Node;
use crate::write_budget::{Charge, WriteBudget};
use handles::{Handle, Handles};
use pages::PageVersions;
use std::sync::Arc;

/// Open handles, page versions and the write budget (see the module comment).
pub struct OpenFiles {
    handles: Handles,
    /// The versions whose pages the kernel may cache.
    pages: PageVersions,
    /// Bytes of uncommitted write buffers, per uid and in total.
    budget: Arc<WriteBudget>,
}

impl OpenFiles {
    /// No open files; buffers limited to `per_uid` bytes per uid and
    /// `total` in all.
    pub fn new(per_uid: u64, total: u64) -> OpenFiles {
        OpenFiles {
            handles: Handles::default(),
            pages: PageVersions::default(),
            budget: WriteBudget::new(per_uid, total),
        }
    }

    /// The table of open handles.
    pub fn handles(&self) -> &Handles {
        &self.handles
    }

    /// Which versions the kernel's page cache holds, and who has them open.
    pub fn pages(&self) -> &PageVersions {
        &self.pages
    }

    /// A charge against `uid`'s write budget, for a new write buffer.
    pub fn charge(&self, uid: u32) -> Charge {
        self.budget.charge(uid)
    }

    /// Bytes held by uncommitted write buffers, and writes refused for them.
    pub fn budget_figures(&self) -> (u64, u64) {
        (self.budget.used(), self.budget.refusals())
    }

    /// The size of `node` (inode number `ino`) as an open writer of it sees
    /// it (the kernel's view while it is written), if one has uncommitted
    /// changes. One that wrote since its last commit comes first: a created
    /// file's first handle, still empty, may be released (and commit) after
    /// the next open of the file has written.
    pub fn writer_size(&self, ino: u64, node: &Node) -> Option<u64> {
        let mut merely_open = None;
        for h in self.handles.writers_of(ino) {
            if let Handle::Cell(c) = &*h.lock() {
                if c.node != *node || c.unlinked || c.deleted || !(c.dirty || c.created) {
                    continue;
                }
                if c.wrote {
                    return Some(c.data.len() as u64);
                }
                merely_open.get_or_insert(c.data.len() as u64);
            }
        }
        merely_open
    }
}
