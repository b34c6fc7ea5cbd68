//! The kernel cache component: the inodes the kernel holds
//! ([`inodes::InodeTable`]) and the invalidations that tell it what changed,
//! sent through the mounted session's notifier. Its state is private:
//! operations name nodes and rows, and this decides what the kernel is told.

pub mod inodes;
pub mod replay;

use crate::node::{Name, Node, View};
use crate::notify::{Inval, Invalidator};
use crate::options::FsResult;
use fuser::Errno;
use inodes::InodeTable;
use replay::{Replayer, RowReplay};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The inodes the kernel knows and invalidation of what it caches.
pub struct KernelCache {
    inodes: Arc<InodeTable>,
    inval: Invalidator,
    /// The mounted session, for handing the kernel a cell's pages at open
    /// (see `open_files/pages.rs`).
    notifier: OnceLock<fuser::Notifier>,
    /// Replays other daemons' writes for inotify (`replay.rs`).
    replayer: Replayer,
}

impl Default for KernelCache {
    fn default() -> Self {
        KernelCache {
            inodes: Arc::new(InodeTable::new()),
            inval: Invalidator::default(),
            notifier: OnceLock::new(),
            replayer: Replayer::default(),
        }
    }
}

impl KernelCache {
    /// Starts cache invalidation through a mounted session's notifier.
    pub fn start(&self, notifier: fuser::Notifier) {
        let _ = self.notifier.set(notifier.clone());
        self.inval.start(notifier);
        // Mounted: hand back the memory of inodes the kernel forgets.
        inodes::start_idle_trim(&self.inodes);
    }

    /// Replays other daemons' writes through the mount at `mountpoint`, so
    /// that inotify watchers see them (`replay.rs`).
    pub fn start_replay(&self, mountpoint: PathBuf) {
        self.replayer.start(mountpoint);
    }

    /// What a replay of writes to `rows` of `table` touches: the live
    /// cells and family directories of those rows the kernel knows (taken
    /// before they are invalidated).
    pub fn row_replays(&self, table: &str, rows: &[&[u8]]) -> Vec<RowReplay> {
        rows.iter()
            .map(|row| {
                let mut r = RowReplay::default();
                for (_, node) in self.inodes.in_row(table, row) {
                    match &*node {
                        Node::Cell(c) if c.view.is_now() => r.cells.extend(rel_path(&node)),
                        Node::Family(f) if f.view.is_now() => r.families.extend(rel_path(&node)),
                        _ => {}
                    }
                }
                r
            })
            .collect()
    }

    /// Queues replays (after the invalidations were sent).
    pub fn replay(&self, replays: Vec<RowReplay>) {
        for r in replays {
            self.replayer.send(r);
        }
    }

    /// Cells replayed for inotify, and rows dropped for a full queue.
    pub fn replay_counts(&self) -> (u64, u64) {
        self.replayer.counts()
    }

    /// The inode table: numbers, reference counts, what was reported.
    pub fn inodes(&self) -> &InodeTable {
        &self.inodes
    }

    /// The mounted session's notifier (None in tests and until mounted).
    pub fn notifier(&self) -> Option<&fuser::Notifier> {
        self.notifier.get()
    }

    /// Invalidations sent so far (`.bigtable/stats`).
    pub fn invalidations_sent(&self) -> u64 {
        self.inval.sent()
    }

    /// The inode number the kernel knows `node` by (see
    /// [`InodeTable::ino_of`]): every attribute and entry is built with it.
    pub fn ino_of(&self, node: &Node) -> u64 {
        self.inodes.ino_of(node)
    }

    /// [`KernelCache::ino_of`] a row, without building its node (only cells
    /// are renamed, so a row's number is always its natural one).
    pub fn row_ino(&self, table: &str, view: View, row: &[u8]) -> u64 {
        Node::row_ino(table, view, row)
    }

    /// The node behind an inode number the kernel holds; ENOENT if it holds
    /// none by that number.
    pub fn node(&self, ino: u64) -> FsResult<Arc<Node>> {
        self.inodes.get(ino).ok_or(Errno::ENOENT)
    }

    /// Whether the kernel holds this inode number.
    pub fn knows(&self, ino: u64) -> bool {
        self.inodes.get(ino).is_some()
    }

    /// Waits briefly until the invalidations this request queued reached the
    /// kernel (called before replying to requests that change data).
    pub fn settle(&self) {
        self.inval.settle();
    }

    /// The kernel may cache `node`: tell it the node changed.
    pub fn invalidate(&self, node: &Node) {
        if self.inodes.is_known(node) {
            self.inval.send(Inval::Inode(self.ino_of(node)));
        }
    }

    /// A name under `parent` went away or changed.
    pub fn invalidate_entry(&self, parent: &Node, name: Vec<u8>) {
        if self.inodes.is_known(parent) {
            self.inval.send(Inval::Entry {
                parent: self.ino_of(parent),
                name,
            });
        }
    }

    /// Everything the kernel caches in a row may have changed (deleterow,
    /// deletefamily, a batch): drop the names and attributes.
    pub fn invalidate_row(&self, table: &str, row: &[u8], family: Option<&str>) {
        for (ino, node) in self.inodes.in_row(table, row) {
            if family.is_some() && node.family() != family {
                continue;
            }
            self.inval.send(Inval::Inode(ino));
            if let Some((parent, name)) = node.parent_and_name() {
                self.invalidate_entry(&parent, name);
            }
        }
    }

    /// Rows that a writer other than the mount (the gRPC API) changed: drop
    /// what the kernel caches of them, and the table's listing, before the
    /// writer is answered.
    pub fn rows_changed_elsewhere(&self, table: &str, rows: &[&[u8]]) {
        for row in rows {
            // Known inodes of the row: the row, its families and cells.
            self.invalidate_row(table, row, None);
        }
        self.invalidate(&Node::Table(Name::from(table)));
        self.settle();
    }

    /// A table that a writer other than the mount created, deleted, or
    /// changed the families or dropped rows of.
    pub fn table_changed_elsewhere(&self, table: &str) {
        for (ino, node) in self.inodes.in_table(table) {
            self.inval.send(Inval::Inode(ino));
            if let Some((parent, name)) = node.parent_and_name() {
                self.invalidate_entry(&parent, name);
            }
        }
        self.invalidate_entry(&Node::Root, table.as_bytes().to_vec());
        self.invalidate(&Node::Root);
        self.settle();
    }

    /// The cached inodes of a table whose attributes a schema or permission
    /// change may alter: with `family`, only that family's; without, all.
    pub fn invalidate_table(&self, table: &str, family: Option<&str>) {
        for (ino, node) in self.inodes.in_table(table) {
            if family.is_none() || node.family() == family {
                self.inval.send(Inval::Inode(ino));
            }
        }
    }
}

/// `node`'s path below the mount point (None for the root).
fn rel_path(node: &Node) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut names = Vec::new();
    let mut at = node.clone();
    while let Some((parent, name)) = at.parent_and_name() {
        names.push(name);
        at = parent;
    }
    if names.is_empty() {
        return None;
    }
    Some(
        names
            .iter()
            .rev()
            .map(|n| std::ffi::OsStr::from_bytes(n))
            .collect(),
    )
}
