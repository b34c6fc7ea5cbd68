//! [`Fs`]: the filesystem as the FUSE adapter (and the tests) see it. It
//! composes the data path's context and the lock directory, and routes
//! every request that may concern `.chubby/`: its inodes and file handles
//! go to [`LockDir`], the rest to the data-path operations (`lookup`,
//! `dirs`, `files`). This is the only place that tells the two apart; the
//! requests that never concern `.chubby/` (lookup, the commit of a flush or
//! release, copy_file_range, fsyncdir, statfs, access) go from the adapter
//! straight to their operation on [`Fs::ctx`], with no hop through here.

use crate::ctx::Ctx;
use crate::lockdir::events::PollWaker;
use crate::lockdir::{is_lock_fh, Done, LockDir, LockOpened, LockReply, LockRequest};
use crate::options::{Entry, FsOptions, FsResult};
use crate::perms::Caller;
use crate::reply::{DirOut, Opened, SetAttr};
use crate::store::Store;
use crate::{dirs, files, lookup};
use chubby::LockService;
use fuser::FileAttr;
use std::sync::Arc;
use std::time::Duration;

/// Bigtable as a filesystem, independent of FUSE (see `fuse.rs` for the adapter).
pub struct Fs {
    cx: Ctx,
    /// `.chubby/`, when a lock service is attached.
    lockdir: Option<Arc<LockDir>>,
}

fn lock_opened(o: LockOpened) -> Opened {
    Opened {
        fh: o.fh,
        direct_io: o.direct_io,
        nonseekable: o.nonseekable,
        ..Opened::default()
    }
}

impl Fs {
    /// The filesystem over `store`, with no lock directory.
    pub fn new(store: Arc<dyn Store>, opts: FsOptions) -> Fs {
        Fs {
            cx: Ctx::new(store, opts),
            lockdir: None,
        }
    }

    /// Serves a lock service under `.chubby/` (without one, `.chubby/` does
    /// not exist).
    pub fn with_lock_service(mut self, svc: Arc<dyn LockService>) -> Fs {
        let ld = Arc::new(LockDir::new(svc));
        self.cx.attach_lockdir(ld.clone());
        self.lockdir = Some(ld);
        self
    }

    /// Starts cache invalidation through a mounted session's notifier.
    pub fn start_notifier(&self, notifier: fuser::Notifier) {
        if let Some(ld) = &self.lockdir {
            ld.start_notifier(notifier.clone());
        }
        self.cx.kernel.start(notifier);
    }

    /// The current text of a `.bigtable/` file (the console serves the
    /// same figures).
    pub fn status_text(&self, f: crate::StatusFile) -> Vec<u8> {
        self.cx.status_content(f, None)
    }

    /// The data path's context: the adapter calls the operations that
    /// never concern `.chubby/` on it directly.
    pub(crate) fn ctx(&self) -> &Ctx {
        &self.cx
    }

    #[cfg(test)]
    pub(crate) fn lock_dir(&self) -> &LockDir {
        self.lockdir.as_deref().expect("a lock service is attached")
    }

    /// The lock directory, if `ino` is one of its inodes.
    fn lock_ino(&self, ino: u64) -> Option<&LockDir> {
        self.cx.lock_node(ino)?;
        self.lockdir.as_deref()
    }

    /// The lock directory, if `fh` is one of its file handles.
    fn lock_fh(&self, fh: u64) -> Option<&LockDir> {
        if is_lock_fh(fh) {
            self.lockdir.as_deref()
        } else {
            None
        }
    }

    // ---- names and attributes ----

    /// FUSE `lookup` (`.chubby/` names resolve through their node type;
    /// the adapter calls [`lookup::lookup`] itself).
    #[cfg(test)]
    pub(crate) fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Entry> {
        lookup::lookup(&self.cx, parent, name)
    }

    /// Forget `n` kernel references to an inode.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        // The kernel evicts an inode's pages before it forgets the inode.
        if self.cx.kernel.inodes().forget(ino, n) {
            self.cx.open.pages().drop_ino(ino);
        }
    }

    /// FUSE `getattr`; an open file is described by its handle.
    pub(crate) fn getattr(&self, ino: u64, fh: Option<u64>) -> FsResult<(FileAttr, Duration)> {
        if let Some(fh) = fh {
            // An open `.chubby/` file with unwritten contents.
            if let Some(a) = self.lock_fh(fh).and_then(|ld| ld.handle_attr(&self.cx, fh)) {
                return Ok((a, self.cx.opts.attr_timeout));
            }
        }
        lookup::getattr(&self.cx, ino, fh)
    }

    /// FUSE `setattr`.
    pub(crate) fn setattr(
        &self,
        caller: &Caller,
        ino: u64,
        fh: Option<u64>,
        set: SetAttr,
    ) -> FsResult<(FileAttr, Duration)> {
        match self.lock_ino(ino) {
            Some(ld) => ld.setattr(&self.cx, caller, ino, fh, set),
            None => files::attrs::setattr(&self.cx, caller, ino, fh, set),
        }
    }

    // ---- directories ----

    /// FUSE `mkdir`.
    pub(crate) fn mkdir(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> FsResult<Entry> {
        match self.lock_ino(parent) {
            Some(ld) => ld.mkdir(&self.cx, caller, parent, name, mode, umask),
            None => dirs::change::mkdir(&self.cx, caller, parent, name, mode, umask)
                .inspect(|_| self.cx.kernel.inodes().dir_changed(parent)),
        }
    }

    /// FUSE `unlink`.
    pub(crate) fn unlink(&self, caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
        match self.lock_ino(parent) {
            Some(ld) => ld.unlink(&self.cx, caller, parent, name),
            None => files::rename::unlink(&self.cx, caller, parent, name)
                .inspect(|()| self.cx.kernel.inodes().dir_changed(parent)),
        }
    }

    /// FUSE `rmdir`.
    pub(crate) fn rmdir(&self, caller: &Caller, parent: u64, name: &[u8]) -> FsResult<()> {
        match self.lock_ino(parent) {
            Some(ld) => ld.rmdir(&self.cx, caller, parent, name),
            None => dirs::change::rmdir(&self.cx, caller, parent, name)
                .inspect(|()| self.cx.kernel.inodes().dir_changed(parent)),
        }
    }

    /// FUSE `rename` (either side in `.chubby/` makes it the lock
    /// directory's, which refuses moves across the boundary).
    pub(crate) fn rename(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        match self.lock_ino(parent).or_else(|| self.lock_ino(newparent)) {
            Some(ld) => ld.rename(&self.cx, caller, parent, name, newparent, newname, flags),
            None => {
                files::rename::rename(&self.cx, caller, parent, name, newparent, newname, flags)
                    .inspect(|()| {
                        self.cx.kernel.inodes().dir_changed(parent);
                        self.cx.kernel.inodes().dir_changed(newparent);
                    })
            }
        }
    }

    /// FUSE `opendir`.
    pub(crate) fn opendir(&self, caller: &Caller, ino: u64) -> FsResult<u64> {
        match self.lock_ino(ino) {
            Some(ld) => ld.opendir(&self.cx, caller, ino),
            None => dirs::list::opendir(&self.cx, ino),
        }
    }

    /// FUSE `readdir`/`readdirplus`. `add` returns true when the reply is full
    /// (the entry was not taken).
    pub(crate) fn readdir(
        &self,
        fh: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirOut<'_>) -> bool,
    ) -> FsResult<()> {
        match self.lock_fh(fh) {
            Some(ld) => ld.readdir(&self.cx, fh, offset, plus, add),
            None => dirs::list::readdir(&self.cx, fh, offset, plus, add),
        }
    }

    /// FUSE `readdir`/`readdirplus` without an open directory (fh 0: the
    /// kernel sends no OPENDIR once we decline it).
    pub(crate) fn readdir_unopened(
        &self,
        caller: &Caller,
        ino: u64,
        offset: u64,
        plus: bool,
        add: &mut dyn FnMut(&DirOut<'_>) -> bool,
    ) -> FsResult<()> {
        match self.lock_ino(ino) {
            Some(ld) => ld.readdir_unopened(&self.cx, caller, ino, offset, plus, add),
            None => dirs::list::readdir_unopened(&self.cx, ino, offset, plus, add),
        }
    }

    /// FUSE `releasedir`.
    pub(crate) fn releasedir(&self, fh: u64) {
        match self.lock_fh(fh) {
            Some(ld) => ld.releasedir(fh),
            None => dirs::list::releasedir(&self.cx, fh),
        }
    }

    // ---- files ----

    /// FUSE `open`.
    pub(crate) fn open(&self, caller: &Caller, ino: u64, flags: i32) -> FsResult<Opened> {
        match self.lock_ino(ino) {
            Some(ld) => ld.open(&self.cx, caller, ino, flags).map(lock_opened),
            None => files::open::open(&self.cx, caller, ino, flags),
        }
    }

    /// Whether opening `ino` with `flags` may wait for readers to close (see
    /// `open_files/pages.rs`), and so belongs on a worker rather than a FUSE thread.
    pub(crate) fn open_waits(&self, ino: u64, flags: i32) -> bool {
        files::acc_writable(flags) && self.cx.open.pages().has_readers(ino)
    }

    /// FUSE `create` with mode 0644 (a cell takes its family's mode anyway).
    #[cfg(test)]
    pub(crate) fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        self.create_mode(caller, parent, name, 0o644, 0, flags)
    }

    /// FUSE `create`.
    pub(crate) fn create_mode(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> FsResult<(Entry, Opened)> {
        match self.lock_ino(parent) {
            Some(ld) => ld
                .create(&self.cx, caller, parent, name, mode, umask, flags)
                .map(|(e, o)| (e, lock_opened(o))),
            None => files::open::create(&self.cx, caller, parent, name, flags),
        }
    }

    /// FUSE `mknod`: a regular file is made as `creat` then `close` make
    /// it (an empty cell); devices, fifos and sockets have no place in a
    /// table: EPERM, as for symlinks and hard links (see
    /// docs/cell-semantics.md).
    pub(crate) fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
    ) -> FsResult<Entry> {
        let kind = mode & libc::S_IFMT;
        if kind != libc::S_IFREG && kind != 0 {
            return Err(self.refuse_kind("mknod", parent, name));
        }
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let (e, o) = self.create_mode(caller, parent, name, mode, umask, flags)?;
        let ino = e.attr.ino.0;
        let flushed = match self.flush_locks(caller, ino, o.fh, 0) {
            Some(r) => r,
            None => files::commit::flush(&self.cx, o.fh, None),
        };
        let released = match self.release_locks(ino, o.fh, None) {
            Some(r) => r,
            None => files::commit::release(&self.cx, o.fh),
        };
        flushed.and(released).map(|()| e)
    }

    /// FUSE `symlink` and `link` (and `mknod` of anything but a regular
    /// file): a table holds cells, which are regular files, and one cell
    /// has one name.
    pub(crate) fn refuse_kind(&self, op: &str, parent: u64, name: &[u8]) -> fuser::Errno {
        let what = format!("{op} {}/{}", parent, String::from_utf8_lossy(name));
        self.cx.data.refuse(
            &what,
            fuser::Errno::EPERM,
            "only directories and regular files (cells) exist here",
        )
    }

    /// `read` of a data file (cells, versions, `.schema`, `.mutate`, scans,
    /// status files).
    #[cfg(test)]
    pub(crate) fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        files::io::read(&self.cx, fh, offset, size)
    }

    /// FUSE `read` of any file: `done` is called at once, or later by a
    /// thread waiting for an event (a blocking read of a `.chubby/` events
    /// file).
    /// `page_fill`: the READ fills the kernel's page cache (see
    /// [`files::io::read_for`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read_then(
        &self,
        caller: &Caller,
        fh: u64,
        offset: u64,
        size: u32,
        nonblock: bool,
        page_fill: bool,
        done: Done<Vec<u8>>,
    ) {
        match self.lock_fh(fh) {
            Some(ld) => ld.read(caller, fh, offset, size, nonblock, done),
            None => {
                let r = files::io::read_for(&self.cx, fh, offset, size, page_fill);
                let source = files::io::page_source(&self.cx, fh);
                let ok = r.is_ok();
                if ok {
                    self.cx.kernel.settle();
                }
                done(r);
                // Noted once the kernel has the pages (see `open_files/pages.rs`).
                if let (true, Some((ino, ts))) = (ok, source) {
                    self.cx.open.pages().filled(ino, ts);
                }
            }
        }
    }

    /// FUSE `write`, by the descriptor table `owner` (FUSE's lock owner).
    pub(crate) fn write(
        &self,
        fh: u64,
        offset: u64,
        data: &[u8],
        owner: Option<u64>,
    ) -> FsResult<u32> {
        match self.lock_fh(fh) {
            Some(ld) => ld.write(fh, offset, data),
            None => files::io::write(&self.cx, fh, offset, data, owner),
        }
    }

    /// FUSE `copy_file_range` between data files (the adapter calls
    /// [`files::io::copy_file_range`] itself).
    #[cfg(test)]
    pub(crate) fn copy_file_range(
        &self,
        fh_in: u64,
        offset_in: u64,
        fh_out: u64,
        offset_out: u64,
        len: u64,
    ) -> FsResult<u32> {
        files::io::copy_file_range(&self.cx, fh_in, offset_in, fh_out, offset_out, len)
    }

    /// The first part of FUSE `flush`: a `.chubby/` file is flushed here
    /// (`Some`); for a data file the closing process's fcntl locks go, and
    /// the commit, [`files::commit::flush`], is left to the caller (`None`), which may
    /// run it off the FUSE thread.
    pub(crate) fn flush_locks(
        &self,
        caller: &Caller,
        ino: u64,
        fh: u64,
        lock_owner: u64,
    ) -> Option<FsResult<()>> {
        if let Some(ld) = self.lock_fh(fh) {
            return Some(ld.flush(&self.cx, caller, fh, lock_owner));
        }
        self.cx.local_locks.unlock(ino, lock_owner);
        None
    }

    /// The commit of a data file's FLUSH (see [`Fs::flush_locks`]) by the
    /// descriptor table `closer` (see [`files::commit::flush`]).
    #[cfg(test)]
    pub(crate) fn flush(&self, fh: u64, closer: Option<u64>) -> FsResult<()> {
        files::commit::flush(&self.cx, fh, closer)
    }

    /// The first part of FUSE `release`, like [`Fs::flush_locks`]: for a
    /// data file the description's flock goes, and fcntl locks taken
    /// through it (a read-only open is not flushed); [`files::commit::release`] is left.
    pub(crate) fn release_locks(
        &self,
        ino: u64,
        fh: u64,
        flock_owner: Option<u64>,
    ) -> Option<FsResult<()>> {
        if let Some(ld) = self.lock_fh(fh) {
            return Some(ld.release(&self.cx, fh, flock_owner));
        }
        if let Some(o) = flock_owner {
            self.cx.local_locks.unlock(ino, o);
        }
        self.cx.local_locks.unlock_fh(ino, fh);
        None
    }

    /// The commit and close of a data file's RELEASE.
    #[cfg(test)]
    pub(crate) fn release(&self, fh: u64) -> FsResult<()> {
        files::commit::release(&self.cx, fh)
    }

    /// Rows that a writer other than the mount (the gRPC API) changed: drops
    /// what the kernel caches of them, and the table's listing, before the
    /// writer is answered.
    pub fn rows_changed_elsewhere(&self, table: &str, rows: &[&[u8]]) {
        self.cx.data.rows_changed_elsewhere(table, rows);
        files::lost_cells::writers_lost_cells(
            &self.cx,
            |n| {
                rows.iter()
                    .any(|r| files::lost_cells::cell_in(n, table, r, None))
            },
            false,
        );
        self.cx.kernel.rows_changed_elsewhere(table, rows)
    }

    /// Rows another daemon of the cluster changed: as
    /// [`Fs::rows_changed_elsewhere`], then the write is replayed through
    /// the mount for inotify watchers (`kernel/replay.rs`), when started.
    pub fn rows_changed_by_peer(&self, table: &str, rows: &[&[u8]]) {
        let replays = self.cx.kernel.row_replays(table, rows);
        self.rows_changed_elsewhere(table, rows);
        self.cx.kernel.replay(replays);
    }

    /// Other daemons share the store: every write one of them acknowledges
    /// before `until` reaches this daemon first (its leases at all of them
    /// last until then; docs/coherence.md). A reader's open is answered on
    /// the kernel's pages alone only before it (`files/open.rs`); a daemon
    /// never told so is alone with its store.
    pub fn writes_reported_until(&self, until: std::time::Instant) {
        self.cx.open.pages().writes_reported_until(until);
    }

    /// Replays other daemons' writes through the mount at `mountpoint`.
    pub fn start_replay(&self, mountpoint: std::path::PathBuf) {
        self.cx.kernel.start_replay(mountpoint);
    }

    /// A table that a writer other than the mount created, deleted, or
    /// changed the families or dropped rows of.
    pub fn table_changed_elsewhere(&self, table: &str) {
        self.cx.data.table_changed_elsewhere(table);
        self.cx.kernel.table_changed_elsewhere(table)
    }

    /// FUSE `fsync`.
    pub(crate) fn fsync(&self, fh: u64) -> FsResult<()> {
        match self.lock_fh(fh) {
            Some(ld) => ld.fsync(fh),
            None => files::commit::fsync(&self.cx, fh),
        }
    }

    // ---- extended attributes ----

    /// FUSE `getxattr`. Only `user.` names exist on the mount: a name of
    /// another namespace (ACLs, security labels) is not supported, which
    /// `ls -l` remembers for the whole mount (coreutils keeps the device
    /// that answered ENOTSUP) instead of asking for every entry.
    pub(crate) fn getxattr(&self, caller: &Caller, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        if !name.starts_with(b"user.") {
            return Err(fuser::Errno::from_i32(libc::ENOTSUP));
        }
        match self.lock_ino(ino) {
            Some(ld) => ld.getxattr(&self.cx, caller, ino, name),
            None => files::xattrs::getxattr(&self.cx, ino, name),
        }
    }

    /// FUSE `listxattr`.
    pub(crate) fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        match self.lock_ino(ino) {
            Some(ld) => ld.listxattr(&self.cx, ino),
            None => files::xattrs::listxattr(&self.cx, ino),
        }
    }

    /// FUSE `setxattr`: only `.chubby/` files take extended attributes.
    pub(crate) fn setxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &[u8],
        value: &[u8],
    ) -> FsResult<()> {
        match self.lock_ino(ino) {
            Some(ld) => ld.setxattr(&self.cx, caller, ino, name, value),
            None => Err(fuser::Errno::from_i32(libc::ENOTSUP)),
        }
    }

    /// FUSE `removexattr`: only `.chubby/` files have removable ones.
    pub(crate) fn removexattr(&self, caller: &Caller, ino: u64, name: &[u8]) -> FsResult<()> {
        match self.lock_ino(ino) {
            Some(ld) => ld.removexattr(&self.cx, caller, ino, name),
            None => Err(fuser::Errno::from_i32(libc::ENOTSUP)),
        }
    }

    // ---- locks and poll ----

    /// FUSE `setlk`: `done` is called at once, or by a waiting thread later.
    /// `caller.pid` is the requesting thread (whose signals a wait watches).
    pub(crate) fn setlk(&self, caller: &Caller, r: LockRequest, done: Done<()>) {
        crate::lockdir::setlk(self.lockdir.as_deref(), &self.cx, caller, r, done)
    }

    /// FUSE `getlk`: a lock that would block `r`, or F_UNLCK.
    pub(crate) fn getlk(&self, r: LockRequest) -> FsResult<LockReply> {
        crate::lockdir::getlk(self.lockdir.as_deref(), &self.cx, r)
    }

    /// FUSE `poll`: the ready events (POLL* bits); only `.chubby/` events
    /// files are ever not ready.
    pub(crate) fn poll(&self, fh: u64, waker: Option<PollWaker>) -> FsResult<u32> {
        match self.lock_fh(fh) {
            Some(ld) => ld.poll(fh, waker),
            None => Ok((libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM) as u32),
        }
    }
}
