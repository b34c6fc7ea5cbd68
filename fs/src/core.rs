//! The filesystem's state and the helpers every operation shares: attributes
//! of nodes and the store queries behind them.

use crate::errno::errno;
use crate::handles::Handles;
use crate::inodes::InodeTable;
use crate::names::KeyName;
use crate::node::{Node, View};
use crate::notify::{Inval, Invalidator};
use crate::pending::Pending;
use crate::query::exact_column_regex;
use crate::store::Store;
use engine::schema::{FamilySchema, TableSchema};
use engine::{Cell, RowRange, ScanSpec, TimeRange, WriteOptions};
use fuser::{Errno, FileAttr, FileType, INodeNo};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Result of a filesystem operation.
pub type FsResult<T> = Result<T, Errno>;

/// Settings of a mount.
#[derive(Debug, Clone)]
pub struct FsOptions {
    /// How long the kernel may cache attributes.
    pub attr_timeout: Duration,
    /// How long the kernel may cache names.
    pub entry_timeout: Duration,
    /// fsync the commit log on every close (not only on fsync).
    pub sync_writes: bool,
    /// Largest cell value (EFBIG above).
    pub max_value_size: usize,
    /// Owner of the root directory.
    pub uid: u32,
    pub gid: u32,
    /// Where `statfs` measures free space (the data directory).
    pub statfs_path: Option<PathBuf>,
    /// The mount's options, shown in `.bigtable/mount`.
    pub description: String,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
            sync_writes: false,
            max_value_size: engine::DEFAULT_MAX_VALUE,
            uid: 0,
            gid: 0,
            statfs_path: None,
            description: String::new(),
        }
    }
}

/// Operation counters (`.bigtable/stats`).
#[derive(Default)]
pub struct Stats {
    pub lookups: AtomicU64,
    pub getattrs: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub commits: AtomicU64,
    pub batches: AtomicU64,
    pub batch_rows: AtomicU64,
    pub scans: AtomicU64,
    pub readdirs: AtomicU64,
    pub errors: AtomicU64,
}

impl Stats {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// Bigtable as a filesystem, independent of FUSE (see `fuse.rs` for the adapter).
pub struct Fs {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) opts: FsOptions,
    pub(crate) inodes: InodeTable,
    pub(crate) handles: Handles,
    pub(crate) pending: Pending,
    pub(crate) inval: Invalidator,
    pub(crate) stats: Stats,
    pub(crate) started: SystemTime,
    // ---- lockdir hook ----
    /// `.chubby/`, when a lock service is attached.
    pub(crate) lockdir: Option<crate::lockdir::LockDir>,
    /// flock/fcntl locks on files outside `.chubby/`.
    pub(crate) local_locks: Arc<crate::lockdir::local::LocalLocks>,
}

/// A name the kernel may cache: the attributes and how long.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub attr: FileAttr,
    pub ttl: Duration,
}

/// Microseconds since the epoch as a time.
pub fn micros_to_time(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

/// The timestamps a view shows.
pub fn view_range(view: View) -> TimeRange {
    match view {
        View::Now => TimeRange::ALL,
        View::At(t) => TimeRange {
            start: 0,
            end: t.saturating_add(1),
        },
    }
}

impl Fs {
    pub fn new(store: Arc<dyn Store>, opts: FsOptions) -> Fs {
        Fs {
            store,
            opts,
            inodes: InodeTable::new(),
            handles: Handles::default(),
            pending: Pending::default(),
            inval: Invalidator::default(),
            stats: Stats::default(),
            started: SystemTime::now(),
            lockdir: None,
            local_locks: Arc::default(),
        }
    }

    /// Starts cache invalidation through a mounted session's notifier.
    pub fn start_notifier(&self, notifier: fuser::Notifier) {
        if let Some(ld) = &self.lockdir {
            ld.start_notifier(notifier.clone());
        }
        self.inval.start(notifier);
    }

    pub fn options(&self) -> &FsOptions {
        &self.opts
    }

    pub(crate) fn write_options(&self) -> WriteOptions {
        WriteOptions {
            sync: self.opts.sync_writes,
        }
    }

    /// Logs an engine error for `what` and turns it into an errno.
    pub(crate) fn fail(&self, what: &dyn std::fmt::Display, e: &engine::Error) -> Errno {
        let code = errno(e);
        Stats::add(&self.stats.errors, 1);
        if code == Errno::EIO {
            log::error!("{what}: {e}");
        } else {
            log::info!("{what}: {e}");
        }
        code
    }

    /// Logs a refusal made by the filesystem itself.
    pub(crate) fn refuse(&self, what: &dyn std::fmt::Display, code: Errno, why: &str) -> Errno {
        Stats::add(&self.stats.errors, 1);
        if code == Errno::ENOENT {
            log::debug!("{what}: {why}");
        } else {
            log::info!("{what}: {why}");
        }
        code
    }

    pub(crate) fn schema(&self, table: &str) -> FsResult<Arc<TableSchema>> {
        self.store.schema(table).map_err(|e| match e {
            engine::Error::TableNotFound(_) => Errno::ENOENT,
            e => self.fail(&format!("schema of {table}"), &e),
        })
    }

    pub(crate) fn family_schema(&self, table: &str, family: &str) -> FsResult<FamilySchema> {
        self.schema(table)?
            .families
            .get(family)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    // ---- attributes ----

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn make_attr(
        &self,
        ino: u64,
        kind: FileType,
        perm: u32,
        uid: u32,
        gid: u32,
        size: u64,
        mtime: SystemTime,
    ) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind,
            perm: (perm & 0o7777) as u16,
            // Directories say 1: "unknown", so find(1) does not guess subdirectory counts.
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            blksize: 64 * 1024,
            flags: 0,
        }
    }

    pub(crate) fn dir_attr(&self, ino: u64, perm: u32, uid: u32, gid: u32) -> FileAttr {
        self.make_attr(ino, FileType::Directory, perm, uid, gid, 0, self.started)
    }

    /// Attributes of a cell or version file holding `cell` (or nothing yet).
    pub(crate) fn value_attr(&self, ino: u64, fam: &FamilySchema, cell: Option<&Cell>) -> FileAttr {
        let (size, ts) = cell.map_or((0, 0), |c| (c.value.len() as u64, c.timestamp));
        let mtime = if cell.is_some() {
            micros_to_time(ts)
        } else {
            SystemTime::now()
        };
        self.inodes.set_reported(ino, size, ts);
        self.make_attr(
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
    fn writer_attr(&self, node: &Node, fam: &FamilySchema) -> Option<FileAttr> {
        if !node.view().is_some_and(|v| v.is_now()) {
            return None;
        }
        let size = self.writer_size(node)?;
        Some(self.make_attr(
            node.ino(),
            FileType::RegularFile,
            fam.mode & 0o666,
            fam.owner,
            fam.group,
            size,
            SystemTime::now(),
        ))
    }

    /// Fresh attributes of any node; ENOENT if it no longer exists.
    pub fn node_attr(&self, node: &Node) -> FsResult<FileAttr> {
        let ino = node.ino();
        match node {
            Node::Lock(l) => self.lock_attr(l),
            Node::Root => Ok(self.dir_attr(ino, 0o755, self.opts.uid, self.opts.gid)),
            Node::StatusDir => Ok(self.dir_attr(ino, 0o555, self.opts.uid, self.opts.gid)),
            Node::Status(f) => {
                let len = self.status_content(*f).len() as u64;
                Ok(self.make_attr(
                    ino,
                    FileType::RegularFile,
                    0o444,
                    self.opts.uid,
                    self.opts.gid,
                    len,
                    SystemTime::now(),
                ))
            }
            Node::Table(t) => {
                let s = self.schema(t)?;
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::Schema(t) => {
                let s = self.schema(t)?;
                let len = crate::schema_file::render(&s).len() as u64;
                Ok(self.make_attr(
                    ino,
                    FileType::RegularFile,
                    s.mode & 0o666,
                    s.owner,
                    s.group,
                    len,
                    self.started,
                ))
            }
            Node::Mutate(t) => {
                let s = self.schema(t)?;
                Ok(self.make_attr(
                    ino,
                    FileType::RegularFile,
                    s.mode & 0o666,
                    s.owner,
                    s.group,
                    0,
                    self.started,
                ))
            }
            Node::ScanDir(t) | Node::AtDir(t) | Node::AtRoot { table: t, .. } => {
                let s = self.schema(t)?;
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::Scan { table, .. } => {
                let s = self.schema(table)?;
                Ok(self.make_attr(
                    ino,
                    FileType::RegularFile,
                    s.mode & 0o444,
                    s.owner,
                    s.group,
                    0,
                    SystemTime::now(),
                ))
            }
            Node::Row { table, view, row } => {
                let s = self.schema(table)?;
                if !self.row_exists(table, *view, row)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, s.mode, s.owner, s.group))
            }
            Node::Family {
                table,
                view,
                row,
                family,
            }
            | Node::VersionsDir {
                table,
                view,
                row,
                family,
            } => {
                let f = self.family_schema(table, family)?;
                if !self.family_exists(table, *view, row, family)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, f.mode, f.owner, f.group))
            }
            Node::VersionsColumn {
                table,
                view,
                row,
                family,
                qualifier,
            } => {
                let f = self.family_schema(table, family)?;
                if !self.column_exists(table, *view, row, family, qualifier)? {
                    return Err(Errno::ENOENT);
                }
                Ok(self.dir_attr(ino, f.mode, f.owner, f.group))
            }
            Node::Cell {
                table,
                view,
                row,
                family,
                qualifier,
            } => {
                let f = self.family_schema(table, family)?;
                if let Some(a) = self.writer_attr(node, &f) {
                    return Ok(a);
                }
                match self.newest(table, *view, row, family, qualifier)? {
                    Some(c) => Ok(self.value_attr(ino, &f, Some(&c))),
                    None if view.is_now()
                        && self.pending.has_cell(table, row, family, qualifier) =>
                    {
                        Ok(self.value_attr(ino, &f, None))
                    }
                    None => Err(Errno::ENOENT),
                }
            }
            Node::Version {
                table,
                view,
                row,
                family,
                qualifier,
                ts,
            } => {
                let f = self.family_schema(table, family)?;
                if let Some(a) = self.writer_attr(node, &f) {
                    return Ok(a);
                }
                match self.version(table, *view, row, family, qualifier, *ts)? {
                    Some(c) => Ok(self.value_attr(ino, &f, Some(&c))),
                    None => Err(Errno::ENOENT),
                }
            }
        }
    }

    /// Whether the kernel must not cache a node at all: versions, time-travel
    /// views, scans and status files change without the kernel's inodes
    /// being written, and are rarely used, so they are looked up afresh.
    fn volatile(node: &Node) -> bool {
        matches!(
            node,
            Node::StatusDir
                | Node::Status(_)
                | Node::ScanDir(_)
                | Node::Scan { .. }
                | Node::AtDir(_)
                | Node::VersionsDir { .. }
                | Node::VersionsColumn { .. }
                | Node::Version { .. }
                | Node::Lock(crate::lockdir::LockNode::Status)
        ) || node.view().is_some_and(|v| !v.is_now())
    }

    /// How long the kernel may cache a node's attributes.
    pub(crate) fn attr_ttl(&self, node: &Node) -> Duration {
        if Self::volatile(node) {
            Duration::ZERO
        } else {
            self.opts.attr_timeout
        }
    }

    /// How long the kernel may cache a name (and the attributes that come with it).
    pub(crate) fn entry_ttl(&self, node: &Node) -> Duration {
        if Self::volatile(node) {
            Duration::ZERO
        } else {
            self.opts.entry_timeout
        }
    }

    pub(crate) fn entry(&self, node: &Node, attr: FileAttr) -> Entry {
        Entry {
            attr,
            ttl: self.entry_ttl(node),
        }
    }

    // ---- store queries ----

    fn read_spec(view: View) -> ScanSpec {
        ScanSpec {
            time_range: view_range(view),
            max_versions: Some(1),
            ..Default::default()
        }
    }

    pub(crate) fn read_row(&self, table: &str, row: &[u8], spec: &ScanSpec) -> FsResult<Vec<Cell>> {
        self.store.read_row(table, row, spec).map_err(|e| match e {
            engine::Error::TableNotFound(_) => Errno::ENOENT,
            e => self.fail(&format!("read of row in {table}"), &e),
        })
    }

    /// Whether a row has a visible cell in `view` (or is a pending directory).
    pub(crate) fn row_exists(&self, table: &str, view: View, row: &[u8]) -> FsResult<bool> {
        if view.is_now() && self.pending.has_row(table, row) {
            return Ok(true);
        }
        let spec = ScanSpec {
            cell_limit: Some(1),
            ..Self::read_spec(view)
        };
        Ok(!self.read_row(table, row, &spec)?.is_empty())
    }

    pub(crate) fn family_exists(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
    ) -> FsResult<bool> {
        if view.is_now() && self.pending.has_family(table, row, family) {
            return Ok(true);
        }
        let spec = ScanSpec {
            families: Some(vec![family.to_string()]),
            cell_limit: Some(1),
            ..Self::read_spec(view)
        };
        Ok(!self.read_row(table, row, &spec)?.is_empty())
    }

    pub(crate) fn column_spec(
        view: View,
        family: &str,
        qualifier: &[u8],
        versions: Option<u32>,
    ) -> ScanSpec {
        ScanSpec {
            families: Some(vec![family.to_string()]),
            column_regex: Some(exact_column_regex(family, qualifier)),
            time_range: view_range(view),
            max_versions: versions,
            ..Default::default()
        }
    }

    pub(crate) fn column_exists(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> FsResult<bool> {
        if view.is_now() {
            // A live cell exists iff it has a newest version: the engine's
            // column read seeks straight to it (Bloom-filtered), where a
            // regex scan of the row would read the whole row.
            return Ok(self.pending.has_column(table, row, family, qualifier)
                || self.newest(table, view, row, family, qualifier)?.is_some());
        }
        let spec = ScanSpec {
            cell_limit: Some(1),
            ..Self::column_spec(view, family, qualifier, Some(1))
        };
        Ok(self
            .read_row(table, row, &spec)?
            .iter()
            .any(|c| c.family == family && c.qualifier == qualifier))
    }

    /// The newest visible version of a cell in `view`.
    pub(crate) fn newest(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> FsResult<Option<Cell>> {
        if view.is_now() {
            return self
                .store
                .read_cell(table, row, family, qualifier)
                .map_err(|e| match e {
                    engine::Error::TableNotFound(_) | engine::Error::UnknownFamily { .. } => {
                        Errno::ENOENT
                    }
                    e => self.fail(&format!("read of a cell in {table}"), &e),
                });
        }
        let spec = Self::column_spec(view, family, qualifier, Some(1));
        Ok(self
            .read_row(table, row, &spec)?
            .into_iter()
            .find(|c| c.family == family && c.qualifier == qualifier))
    }

    /// One exact version, if visible in `view`.
    pub(crate) fn version(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        ts: u64,
    ) -> FsResult<Option<Cell>> {
        if view.max_ts().is_some_and(|t| ts > t) {
            return Ok(None);
        }
        let spec = ScanSpec {
            time_range: TimeRange::exactly(ts),
            ..Self::column_spec(View::Now, family, qualifier, Some(1))
        };
        Ok(self
            .read_row(table, row, &spec)?
            .into_iter()
            .find(|c| c.family == family && c.qualifier == qualifier && c.timestamp == ts))
    }

    /// Every visible version of a column, newest first.
    pub(crate) fn versions(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
    ) -> FsResult<Vec<Cell>> {
        let spec = Self::column_spec(view, family, qualifier, None);
        let mut v: Vec<Cell> = self
            .read_row(table, row, &spec)?
            .into_iter()
            .filter(|c| c.family == family && c.qualifier == qualifier)
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.timestamp));
        Ok(v)
    }

    /// The newest visible cell of every column of a family in a row.
    pub(crate) fn family_cells(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
    ) -> FsResult<Vec<Cell>> {
        let spec = ScanSpec {
            families: Some(vec![family.to_string()]),
            ..Self::read_spec(view)
        };
        Ok(self
            .read_row(table, row, &spec)?
            .into_iter()
            .filter(|c| c.family == family)
            .collect())
    }

    /// Families with a visible cell in a row.
    pub(crate) fn row_families(
        &self,
        table: &str,
        view: View,
        row: &[u8],
    ) -> FsResult<BTreeSet<String>> {
        Ok(self
            .read_row(table, row, &Self::read_spec(view))?
            .into_iter()
            .map(|c| c.family)
            .collect())
    }

    /// Qualifiers with any visible version in a family of a row.
    pub(crate) fn family_columns(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
    ) -> FsResult<BTreeSet<Vec<u8>>> {
        Ok(self
            .family_cells(table, view, row, family)?
            .into_iter()
            .map(|c| c.qualifier)
            .collect())
    }

    /// Resolves a row name: the key itself, or the long key a hashed name stands for.
    pub(crate) fn resolve_row(
        &self,
        table: &str,
        view: View,
        name: &KeyName,
    ) -> FsResult<Option<Vec<u8>>> {
        match name {
            KeyName::Key(k) => Ok(self.row_exists(table, view, k)?.then(|| k.clone())),
            KeyName::Hashed { prefix, .. } => {
                let spec = ScanSpec {
                    rows: RowRange::prefix(prefix),
                    cell_limit: None,
                    ..Self::read_spec(view)
                };
                let mut stream = self
                    .store
                    .scan(table, spec)
                    .map_err(|e| self.fail(&format!("scan of {table}"), &e))?;
                while let Some((row, _)) = stream
                    .next_row()
                    .map_err(|e| self.fail(&format!("scan of {table}"), &e))?
                {
                    if name.matches(&row) {
                        return Ok(Some(row));
                    }
                }
                Ok(None)
            }
        }
    }

    /// Resolves a qualifier name within a family of a row.
    pub(crate) fn resolve_qualifier(
        &self,
        table: &str,
        view: View,
        row: &[u8],
        family: &str,
        name: &KeyName,
    ) -> FsResult<Option<Vec<u8>>> {
        match name {
            KeyName::Key(k) => Ok(Some(k.clone())),
            KeyName::Hashed { .. } => {
                let spec = ScanSpec {
                    families: Some(vec![family.to_string()]),
                    time_range: view_range(view),
                    max_versions: Some(1),
                    ..Default::default()
                };
                Ok(self
                    .read_row(table, row, &spec)?
                    .into_iter()
                    .map(|c| c.qualifier)
                    .find(|q| name.matches(q)))
            }
        }
    }

    // ---- invalidation ----

    /// The kernel may cache `node`: tell it the node changed.
    pub(crate) fn invalidate(&self, node: &Node) {
        if self.inodes.is_known(node) {
            self.inval.send(Inval::Inode(node.ino()));
        }
    }

    /// A name under `parent` went away or changed.
    pub(crate) fn invalidate_entry(&self, parent: &Node, name: Vec<u8>) {
        if self.inodes.is_known(parent) {
            self.inval.send(Inval::Entry {
                parent: parent.ino(),
                name,
            });
        }
    }

    /// Everything the kernel caches in a row may have changed (deleterow,
    /// deletefamily, a batch): drop the names and attributes.
    pub(crate) fn invalidate_row(&self, table: &str, row: &[u8], family: Option<&str>) {
        for (ino, node) in self.inodes.in_row(table, row) {
            if family.is_some() && node.family() != family {
                continue;
            }
            self.inval.send(Inval::Inode(ino));
            if let Some((parent, name)) = crate::dirs::parent_and_name(&node) {
                self.invalidate_entry(&parent, name);
            }
        }
    }

    /// The cached inodes of a table whose attributes a schema or permission
    /// change may alter: with `family`, only that family's; without, all.
    pub(crate) fn invalidate_table(&self, table: &str, family: Option<&str>) {
        for (ino, node) in self.inodes.in_table(table) {
            if family.is_none() || node.family() == family {
                self.inval.send(Inval::Inode(ino));
            }
        }
    }

    /// fsync of a directory: make the commit log durable.
    pub fn sync(&self) -> FsResult<()> {
        self.store.sync().map_err(|e| self.fail(&"fsync", &e))
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

    /// Forget `n` kernel references to an inode.
    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }
}
