//! The context every data-path operation works in: the components, each
//! owning its state (the store view, the kernel cache, the open files, the
//! listing state), the mount's options, and what the operations share
//! across components (attributes of any node, the status files' text).
//!
//! The operations themselves are functions over a `&Ctx` in the modules
//! above this one (`lookup`, `dirs`, `files`), which reach each component
//! by its field and its methods only; [`crate::Fs`] routes requests to them
//! or to the lock directory.

use crate::attr::{make_attr, volatile};
use crate::kernel::KernelCache;
use crate::listing::Listing;
use crate::local_locks::LocalLocks;
use crate::node::{LockNode, Node};
use crate::open_files::OpenFiles;
use crate::options::{micros_to_time, Entry, FsOptions, FsResult};
use crate::row_memo::Known;
use crate::status::{StatusFile, StatusSources};
use crate::view::StoreView;
use engine::schema::FamilySchema;
use engine::{Cell, WriteOptions};
use fuser::{Errno, FileAttr, FileType};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What the data path needs from the lock directory, which sits above it:
/// `.chubby/` shows in the root (its listing, `..` of it), so the root's
/// listing asks for the attributes of its inodes. Implemented by
/// the lock directory (`LockDir`).
pub trait LockAttrs: Send + Sync {
    fn lock_attr(&self, cx: &Ctx, node: &LockNode) -> FsResult<FileAttr>;
    /// `lock_*` lines for `.bigtable/status`: the lock service's backend
    /// and session.
    fn lock_summary(&self) -> Vec<String>;
}

/// The data path's components side by side; each keeps its state private.
pub struct Ctx {
    /// The store view: engine queries, pending directories, counters.
    pub(crate) data: StoreView,
    pub(crate) opts: FsOptions,
    /// The inodes the kernel holds and invalidation of its caches.
    pub(crate) kernel: KernelCache,
    /// Open handles, the page cache gate and the write budget.
    pub(crate) open: OpenFiles,
    /// What listings keep between requests.
    pub(crate) listing: Listing,
    /// When the mount started: the times of what has no time of its own.
    started: SystemTime,
    /// flock/fcntl locks on files outside `.chubby/`.
    pub(crate) local_locks: Arc<LocalLocks>,
    /// `.chubby/`, when a lock service is attached.
    lockdir: Option<Arc<dyn LockAttrs>>,
}

impl Ctx {
    pub fn new(store: Arc<dyn crate::store::Store>, opts: FsOptions) -> Ctx {
        Ctx {
            data: StoreView::new(store),
            open: OpenFiles::new(opts.limits.buffer_per_uid, opts.limits.buffer_total),
            opts,
            kernel: KernelCache::default(),
            listing: Default::default(),
            started: SystemTime::now(),
            local_locks: Arc::default(),
            lockdir: None,
        }
    }

    /// Shows `.chubby/`, served by `lockdir`.
    pub(crate) fn attach_lockdir(&mut self, lockdir: Arc<dyn LockAttrs>) {
        self.lockdir = Some(lockdir);
    }

    /// Whether `.chubby/` exists (a lock service is attached).
    pub(crate) fn has_lockdir(&self) -> bool {
        self.lockdir.is_some()
    }

    pub(crate) fn write_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.opts.sync_writes,
        }
    }

    /// A directory's attributes: its mtime and ctime are the mount's start,
    /// or when a name in it was last made or removed through the mount.
    pub(crate) fn dir_attr(&self, ino: u64, perm: u32, uid: u32, gid: u32) -> FileAttr {
        let t = self
            .kernel
            .inodes()
            .dir_changed_at(ino)
            .unwrap_or(self.started);
        make_attr(ino, FileType::Directory, perm, uid, gid, 0, t)
    }

    /// Attributes of a cell or version file holding `cell` (or nothing yet).
    pub(crate) fn value_attr(&self, ino: u64, fam: &FamilySchema, cell: Option<&Cell>) -> FileAttr {
        let sized = cell.map(|c| (c.value.len() as u64, c.timestamp));
        self.sized_attr(ino, fam, sized)
    }

    /// Attributes of a cell or version file holding a value of this size
    /// and version (or nothing yet).
    fn sized_attr(&self, ino: u64, fam: &FamilySchema, sized: Option<(u64, u64)>) -> FileAttr {
        let (size, ts) = sized.unwrap_or((0, 0));
        let mtime = if sized.is_some() {
            micros_to_time(ts)
        } else {
            SystemTime::now()
        };
        self.kernel.inodes().set_reported(ino, size, ts);
        make_attr(
            ino,
            FileType::RegularFile,
            fam.mode & 0o666,
            fam.owner,
            fam.group,
            size,
            mtime,
        )
    }

    /// While an open handle holds uncommitted changes to a file, the file's
    /// size is that handle's (it is what the kernel has seen written): a
    /// committed size here would shrink the kernel's view under the writer.
    /// But not while a reader reads the committed value through the page
    /// cache: the kernel clamps its reads to the size it was told last.
    /// (`ino` is `node`'s inode number.)
    fn writer_attr(&self, ino: u64, node: &Node, fam: &FamilySchema) -> Option<FileAttr> {
        if !node.view().is_some_and(|v| v.is_now()) || self.open.pages().has_readers(ino) {
            return None;
        }
        let size = self.open.writer_size(ino, node)?;
        Some(make_attr(
            ino,
            FileType::RegularFile,
            fam.mode & 0o666,
            fam.owner,
            fam.group,
            size,
            SystemTime::now(),
        ))
    }

    /// Fresh attributes of any node (a row or family directory may be
    /// answered from the row memo: see `row_memo.rs`); ENOENT if it no
    /// longer exists.
    pub fn node_attr(&self, node: &Node) -> FsResult<FileAttr> {
        self.attr_of(node, false)
    }

    /// A lookup's or getattr's attributes of a node: as [`Ctx::node_attr`],
    /// but a cell that a read or write of its row a moment ago saw (the
    /// row memo) is answered from it, without a read. (Rows and families
    /// are answered from the memo by both.)
    pub fn lookup_attr(&self, node: &Node) -> FsResult<FileAttr> {
        self.attr_of(node, true)
    }

    fn attr_of(&self, node: &Node, walk: bool) -> FsResult<FileAttr> {
        let mut attr = self.node_attr_now(node, walk)?;
        if matches!(node, Node::Table(_) | Node::AtRoot { .. }) {
            attr.blksize = crate::attr::LISTING_BLKSIZE;
        }
        if attr.kind == FileType::Directory && volatile(node) {
            // The kernel keeps a listing until the directory's mtime moves:
            // these change without a word to it, so their mtime always moves.
            attr.mtime = SystemTime::now();
            attr.ctime = attr.mtime;
        }
        // A snapshot never changes: its time is when it was taken.
        if let Node::AtRoot { table, .. } = node {
            if let Some((t, snap)) = crate::names::split_snapshot_table(table) {
                let taken = self
                    .data
                    .store()
                    .snapshot_taken(t, snap)
                    .map_err(|e| crate::errno::errno(&e))?;
                attr.mtime = std::time::UNIX_EPOCH + std::time::Duration::from_micros(taken);
                attr.ctime = attr.mtime;
            }
        }
        Ok(attr)
    }

    /// A `.changes/` file's size ([`crate::change_sizes`]): where its
    /// furthest reader is, plus the lines of the changes known beyond
    /// (some: `tail -f` reads as many bytes as the size grew).
    fn changes_size(&self, ino: u64, table: &str, query: &[u8]) -> u64 {
        let (read_to, pos) = crate::change_sizes::furthest(ino);
        let Ok(name) = crate::change_query::parse(query) else {
            return read_to;
        };
        let after = pos.unwrap_or(name.query.after);
        let q = engine::changes::ChangeQuery {
            after,
            max_records: 256,
            ..name.query
        };
        let mut lines = Vec::new();
        if let Ok(b) = self.data.store().read_changes(table, &q) {
            crate::change_lines::write_batch(&b.records, after, name.family.as_deref(), &mut lines);
        }
        read_to + lines.len() as u64
    }

    fn node_attr_now(&self, node: &Node, walk: bool) -> FsResult<FileAttr> {
        let ino = self.kernel.ino_of(node);
        match node {
            Node::Lock(l) => match &self.lockdir {
                Some(ld) => ld.lock_attr(self, l),
                None => Err(Errno::ENOENT),
            },
            Node::Root => Ok(self.dir_attr(ino, 0o755, self.opts.uid, self.opts.gid)),
            Node::StatusDir => Ok(self.dir_attr(ino, 0o555, self.opts.uid, self.opts.gid)),
            Node::Status(f) => {
                let len = self.status_content(*f, None).len() as u64;
                Ok(make_attr(
                    ino,
                    FileType::RegularFile,
                    // control: root writes commands, anyone reads the usage.
                    if f.writable() { 0o644 } else { 0o444 },
                    // Owned by root whoever mounted, since only root may command.
                    if f.writable() { 0 } else { self.opts.uid },
                    if f.writable() { 0 } else { self.opts.gid },
                    len,
                    SystemTime::now(),
                ))
            }
            Node::Table(t)
            | Node::ScanDir(t)
            | Node::ChangesDir(t)
            | Node::AtDir(t)
            | Node::SnapDir(t)
            | Node::AtRoot { table: t, .. } => {
                let s = self.data.schema(t)?;
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::Schema(t) | Node::Mutate(t) => {
                let s = self.data.schema(t)?;
                // `.mutate` reads empty (its results are per handle).
                let len = match node {
                    Node::Schema(_) => crate::schema_file::render(&s).len() as u64,
                    _ => 0,
                };
                Ok(make_attr(
                    ino,
                    FileType::RegularFile,
                    s.mode & 0o666,
                    s.owner,
                    s.group,
                    len,
                    self.started,
                ))
            }
            Node::Scan { table, .. } | Node::Changes { table, .. } => {
                let s = self.data.schema(table)?;
                let size = match node {
                    Node::Changes { query, .. } => self.changes_size(ino, table, query),
                    _ => 0,
                };
                Ok(make_attr(
                    ino,
                    FileType::RegularFile,
                    s.mode & 0o444,
                    s.owner,
                    s.group,
                    size,
                    SystemTime::now(),
                ))
            }
            Node::Row { table, view, row } => {
                let s = self.data.schema(table)?;
                // Directories may be answered from the row memo in a getattr too
                // (the kernel asks again after every create in them).
                if !self.data.row_exists(table, *view, row, true)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::Family(f) | Node::VersionsDir(f) => {
                let s = self.data.family_schema(&f.table, &f.family)?;
                if !self.data.family_exists(f, true)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::VersionsColumn(c) => {
                let f = self.data.family_schema(&c.table, &c.family)?;
                if !self.data.column_exists(c)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, f.mode, f.owner, f.group))
            }
            Node::Cell(c) => {
                let f = self.data.family_schema(&c.table, &c.family)?;
                if let Some(a) = self.writer_attr(ino, node, &f) {
                    return Ok(a);
                }
                // One look at the memo: a read kept between two would make a
                // cell it returned absent.
                let known = if walk {
                    self.data.known_cell(c)
                } else {
                    Known::Unknown
                };
                if let Known::Seen(seen) = &known {
                    return Ok(self.sized_attr(ino, &f, Some((seen.len, seen.timestamp))));
                }
                // The version an open found newest, if nothing wrote the row
                // since (the `fstat` after an open; a READ of dropped pages
                // makes the kernel ask for the atime it invalidated).
                if walk && self.data.newest_lasts(c) && !self.data.is_pending_cell(c) {
                    let stamp = self.data.row_stamp(c);
                    if let Some((ts, len)) = self.open.pages().newest_known(ino, stamp) {
                        return Ok(self.sized_attr(ino, &f, Some((len, ts))));
                    }
                }
                // Before the store's read (see `is_pending_cell`).
                let created = self.data.is_pending_cell(c);
                // A name in a row read empty a moment ago (one this mount
                // just made, say) holds nothing yet, nor one the walk's
                // read of the whole row (or family) did not return.
                let newest = if (c.view.is_now() && self.data.row_read_empty(&c.table, &c.row))
                    || known == Known::Absent
                {
                    None
                } else {
                    self.data.newest_for_attr(c)?
                };
                match newest {
                    Some(v) => Ok(self.value_attr(ino, &f, Some(&v))),
                    None if created => Ok(self.value_attr(ino, &f, None)),
                    None => Err(Errno::ENOENT),
                }
            }
            Node::Version { cell, ts } => {
                let f = self.data.family_schema(&cell.table, &cell.family)?;
                if let Some(a) = self.writer_attr(ino, node, &f) {
                    return Ok(a);
                }
                match self.data.version(cell, *ts)? {
                    Some(v) => Ok(self.value_attr(ino, &f, Some(&v))),
                    None => Err(Errno::ENOENT),
                }
            }
        }
    }

    /// How long the kernel may cache a node's attributes.
    pub(crate) fn attr_ttl(&self, node: &Node) -> Duration {
        ttl(node, self.opts.attr_timeout, self.opts.dir_timeout)
    }

    /// How long the kernel may cache a name (and the attributes that come with it).
    pub(crate) fn entry_ttl(&self, node: &Node) -> Duration {
        ttl(node, self.opts.entry_timeout, self.opts.dir_timeout)
    }

    pub(crate) fn entry(&self, node: &Node, attr: FileAttr) -> Entry {
        Entry {
            attr,
            ttl: self.entry_ttl(node),
        }
    }

    /// The `.chubby/` inode behind `ino`, if it is one.
    pub(crate) fn lock_node(&self, ino: u64) -> Option<LockNode> {
        match &*self.kernel.inodes().get(ino)? {
            Node::Lock(l) => Some(l.clone()),
            _ => None,
        }
    }

    /// The text of a status file as `reader` may see it (None: all of it):
    /// row keys of tables it may not read are left out.
    pub(crate) fn status_content(
        &self,
        f: StatusFile,
        reader: Option<&crate::perms::Caller>,
    ) -> Vec<u8> {
        f.content(&StatusSources {
            reader,
            store: self.data.store(),
            stats: self.data.stats(),
            store_calls: self.data.store_calls(),
            opts: &self.opts,
            invalidations: self.kernel.invalidations_sent(),
            replays: self.kernel.replay_counts(),
            inodes: self.kernel.inodes().len(),
            open_handles: self.open.handles().len(),
            pending_dirs: self.data.pending().len(),
            kept_listing_bytes: self.listing.kept_bytes(),
            reader_waits: self.open.pages().reader_waits(),
            page_stores: self.open.pages().stores(),
            page_reopens: self.open.pages().reopens(),
            write_buffers: self.open.budget_figures(),
            lock: self
                .lockdir
                .as_ref()
                .map(|l| l.lock_summary())
                .unwrap_or_default(),
        })
    }
}

/// Lock-service files change behind the daemon's back (other clients of
/// the cell, the engine's own servers): the kernel keeps them at most this long.
const LOCK_TTL: Duration = Duration::from_secs(1);

/// Tables, rows and families change only through the daemon, which
/// invalidates what the kernel caches, so a walk may keep them for
/// `dir_timeout`; files keep `timeout`; status files, scans and versions
/// are never cached.
fn ttl(node: &Node, timeout: Duration, dir_timeout: Duration) -> Duration {
    match node {
        _ if volatile(node) => Duration::ZERO,
        Node::Lock(_) => timeout.min(LOCK_TTL),
        Node::Table(_) | Node::Row { .. } | Node::Family(_) => dir_timeout,
        _ => timeout,
    }
}
