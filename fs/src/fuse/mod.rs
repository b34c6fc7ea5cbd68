//! The `fuser::Filesystem` adapter: decodes requests, calls [`Fs`], replies.
//!
//! Every request runs under `catch_unwind`: a bug in one request fails that
//! request with EIO (the unsent reply does so when dropped) and is logged; the
//! daemon and its other requests go on.

mod answer;
mod busy_poll;

use crate::fs::Fs;
use crate::options::MAX_WRITE;
use crate::reply::{DirOut, SetAttr};
use crate::{dirs, files, lookup};
use answer::{answer_xattr, caller, catching, fopen, guard, Answer};
pub use busy_poll::{BusyPoll, DEFAULT_BUSY_POLL};
use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLock, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// A mounted [`Fs`].
pub struct FuseFs {
    fs: Arc<Fs>,
    commits: crate::pool::Pool,
    /// Reads table listings' next rows while their replies are taken in.
    listing_fills: crate::pool::Pool,
    /// Closes committed on the FUSE thread that read them, now, and how
    /// many may be at once (see [`FuseFs::with_inline_commits`]).
    inline_commits: AtomicUsize,
    max_inline_commits: usize,
    /// Whether to decline OPENDIR when the kernel allows it (the default).
    unopened_dirs: bool,
    /// The kernel agreed: directories are listed without being opened.
    no_opendir: bool,
    busy_poll: Arc<BusyPoll>,
    /// Ask the kernel for FUSE over io_uring (see [`FuseFs::with_uring`]),
    /// and whether it agreed (its queues may still fail to start:
    /// `fuser::io_uring_running` says).
    want_uring: bool,
    uring: bool,
}

/// Workers for commits (see `pool.rs`): enough for many concurrent closes.
pub const COMMIT_WORKERS: usize = 32;
/// Workers reading table listings ahead (a few listings at once).
const LISTING_FILLERS: usize = 2;

impl FuseFs {
    /// With [`COMMIT_WORKERS`] commit workers.
    pub fn new(fs: Arc<Fs>) -> FuseFs {
        FuseFs::with_commit_workers(fs, COMMIT_WORKERS)
    }

    /// With `n` commit workers; 0 commits on the FUSE thread that got the request.
    pub fn with_commit_workers(fs: Arc<Fs>, n: usize) -> FuseFs {
        FuseFs {
            fs,
            commits: crate::pool::Pool::new(n),
            listing_fills: crate::pool::Pool::named("bt-listing", LISTING_FILLERS),
            inline_commits: AtomicUsize::new(0),
            max_inline_commits: 0,
            unopened_dirs: true,
            no_opendir: false,
            busy_poll: Arc::new(BusyPoll::new(std::time::Duration::ZERO, 1)),
            want_uring: false,
            uring: false,
        }
    }

    /// Polls the FUSE device for `window` after each reply (see
    /// `busy_poll.rs`), for a session of `threads` FUSE threads; polling
    /// starts once the device is given to the returned handle's
    /// [`BusyPoll::set_device`]. (With FUSE over io_uring, the session's
    /// `Config::uring_look_window` plays this part.)
    pub fn with_busy_poll(
        mut self,
        window: std::time::Duration,
        threads: usize,
    ) -> (FuseFs, Arc<BusyPoll>) {
        self.busy_poll = Arc::new(BusyPoll::new(window, threads));
        let handle = self.busy_poll.clone();
        (self, handle)
    }

    /// Asks the kernel for FUSE over io_uring at INIT: requests then come
    /// through per-CPU queues, each answered by a thread on the caller's
    /// CPU (the session's `uring_queue_depth` must be set too). The kernel
    /// offers it when the `fuse` module's `enable_uring` parameter is on.
    pub fn with_uring(mut self) -> FuseFs {
        self.want_uring = true;
        self
    }

    /// Runs one request (see [`guard`]), then polls for the next one.
    fn request(&self, op: &str, f: impl FnOnce()) {
        if self.uring && fuser::io_uring_running() {
            // Requests come through the queues: the device has none to poll.
            guard(op, f);
            return;
        }
        self.busy_poll.request_started();
        guard(op, f);
        self.busy_poll.after_reply();
    }

    /// Lets up to `n` closes at a time commit on the FUSE thread that read
    /// them instead of a worker: an unsynced commit takes microseconds, less
    /// than handing it to a worker and back. Give the FUSE thread count
    /// less one, so that a commit held up (a synced mount, writers waiting
    /// for a compaction) always leaves a FUSE thread reading requests.
    pub fn with_inline_commits(mut self, n: usize) -> FuseFs {
        self.max_inline_commits = n;
        self
    }

    /// Starts the fill of the next reply's rows that a table listing's
    /// reply asked for, now that the reply went (see `listing/readahead.rs`).
    fn read_ahead(&self, ino: u64) {
        if let Some(fill) = self.fs.ctx().listing.start_fill(ino) {
            let fs = self.fs.clone();
            self.listing_fills
                .run(move || dirs::list::fill_ahead(fs.ctx(), ino, fill));
        }
    }

    /// Runs a close's commit here if a FUSE thread stays free, else on a worker.
    fn commit(&self, job: impl FnOnce() + Send + 'static) {
        let taken = self
            .inline_commits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_inline_commits).then_some(n + 1)
            })
            .is_ok();
        if taken {
            job();
            self.inline_commits.fetch_sub(1, Ordering::AcqRel);
        } else {
            self.commits.run(job);
        }
    }

    /// Lets the kernel open directories (OPENDIR/RELEASEDIR around every
    /// listing; a listing then keeps a snapshot in its handle).
    pub fn with_opendir(mut self) -> FuseFs {
        self.unopened_dirs = false;
        self
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for cap in [
            // Always readdirplus (not READDIRPLUS_AUTO, which switches a
            // big directory to plain readdir after its first reply, and then
            // a walk looks up every row it enters).
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
            // We keep no setuid bits or capabilities: spare the kernel the
            // security.capability lookup before page-cache writes (a
            // truncating open still makes one: docs/mount.md, "FUSE
            // requests per new file").
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // lockdir hook: flock(2) and fcntl locks come to the daemon.
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
            // Shared maps of files opened with direct I/O (every writer's):
            // without it mmap(MAP_SHARED) of a writable cell is ENODEV.
            // Their writes reach the handle's buffer as WRITE requests, and
            // are committed at close, fsync or msync like any write.
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
        ] {
            if config.add_capabilities(cap).is_err() {
                log::info!("kernel lacks {cap:?}");
            }
        }
        self.uring = self.want_uring
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        if self.uring {
            log::info!("FUSE over io_uring");
        } else if self.want_uring {
            log::info!(
                "the kernel does not offer FUSE over io_uring: requests come through \
                 /dev/fuse (Linux 6.14+ offers it once /sys/module/fuse/parameters/enable_uring is Y)"
            );
        }
        // No OPENDIR/RELEASEDIR: two requests fewer per directory walked.
        self.no_opendir = self.unopened_dirs
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok();
        if let Err(n) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(n);
        }
        let _ = config.set_max_background(64);
        Ok(())
    }

    fn destroy(&mut self) {
        log::info!("filesystem unmounted");
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.request("lookup", || {
            reply.answer(lookup::lookup(self.fs.ctx(), parent.0, name.as_bytes()))
        })
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        crate::options::FUSE_FORGETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        crate::counts::count("forget");
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.request("getattr", || {
            reply.answer(self.fs.getattr(ino.0, fh.map(|f| f.0)))
        })
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            times: atime.is_some() || mtime.is_some(),
            mtime: mtime.map(|t| match t {
                TimeOrNow::SpecificTime(t) => t,
                TimeOrNow::Now => SystemTime::now(),
            }),
        };
        self.request("setattr", || {
            match self.fs.setattr(&caller(req), ino.0, fh.map(|f| f.0), set) {
                Ok((a, ttl)) => {
                    self.fs.ctx().kernel.settle();
                    reply.attr(&ttl, &a)
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.request("mkdir", || {
            reply.answer(
                self.fs
                    .mkdir(&caller(req), parent.0, name.as_bytes(), mode, umask),
            )
        })
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        self.request("mknod", || {
            let r = self
                .fs
                .mknod(&caller(req), parent.0, name.as_bytes(), mode, umask);
            self.fs.ctx().kernel.settle();
            reply.answer(r)
        })
    }

    fn symlink(
        &self,
        _req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        _target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        self.request("symlink", || {
            reply.error(
                self.fs
                    .refuse_kind("symlink", parent.0, link_name.as_bytes()),
            )
        })
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.request("link", || {
            reply.error(self.fs.refuse_kind("link", newparent.0, newname.as_bytes()))
        })
    }

    /// No file here is a terminal or a device: isatty(3), which Python
    /// calls at every open, gets ENOTTY, without a word in the log.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        crate::counts::count("ioctl");
        reply.error(Errno::ENOTTY);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.request("unlink", || {
            match self.fs.unlink(&caller(req), parent.0, name.as_bytes()) {
                Ok(()) => {
                    self.fs.ctx().kernel.settle();
                    reply.ok()
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.request("rmdir", || {
            match self.fs.rmdir(&caller(req), parent.0, name.as_bytes()) {
                Ok(()) => {
                    self.fs.ctx().kernel.settle();
                    reply.ok()
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.request("rename", || {
            match self.fs.rename(
                &caller(req),
                parent.0,
                name.as_bytes(),
                newparent.0,
                newname.as_bytes(),
                flags.bits(),
            ) {
                Ok(()) => {
                    self.fs.ctx().kernel.settle();
                    reply.ok()
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.request("open", || {
            let caller = caller(req);
            let open = move |fs: &Fs| match fs.open(&caller, ino.0, flags.0) {
                Ok(o) => reply.opened(FileHandle(o.fh), fopen(&o)),
                Err(e) => reply.error(e),
            };
            if self.fs.open_waits(ino.0, flags.0) {
                // A writer waiting for readers to close must not hold a FUSE
                // thread: the readers' releases come through them.
                let fs = self.fs.clone();
                self.commits.run(move || catching("open", || open(&fs)));
            } else {
                open(&self.fs)
            }
        })
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.request("create", || {
            match self
                .fs
                .create_mode(&caller(req), parent.0, name.as_bytes(), mode, umask, flags)
            {
                Ok((e, o)) => {
                    reply.created(&e.ttl, &e.attr, Generation(0), FileHandle(o.fh), fopen(&o))
                }
                Err(e) => reply.error(e),
            }
        })
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // The kernel names the lock owner in a read(2) that bypasses the
        // page cache, and none when it fills its pages.
        let page_fill = lock_owner.is_none();
        // May answer later, from a thread waiting for an event.
        let nonblock = flags.0 & libc::O_NONBLOCK != 0;
        self.request("read", || {
            self.fs.read_then(
                &caller(req),
                fh.0,
                offset,
                size,
                nonblock,
                page_fill,
                Box::new(move |r| reply.answer(r)),
            )
        })
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.request("write", || {
            reply.answer(self.fs.write(fh.0, offset, data, lock_owner.map(|o| o.0)))
        })
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A close releases the closing process's fcntl locks; a `.chubby/`
        // file is flushed there and then, a data file's commit runs on a
        // commit worker.
        self.request("flush", || {
            match self.fs.flush_locks(&caller(req), ino.0, fh.0, lock_owner.0) {
                Some(Ok(())) => reply.ok(),
                Some(Err(e)) => reply.error(e),
                None => {
                    let fs = self.fs.clone();
                    self.commit(move || {
                        catching("flush", || {
                            match files::commit::flush(fs.ctx(), fh.0, Some(lock_owner.0)) {
                                Ok(()) => {
                                    fs.ctx().kernel.settle();
                                    reply.ok()
                                }
                                Err(e) => reply.error(e),
                            }
                        })
                    })
                }
            }
        })
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The last close of a description releases its flock.
        self.request("release", || {
            match self.fs.release_locks(ino.0, fh.0, lock_owner.map(|o| o.0)) {
                Some(Ok(())) => reply.ok(),
                Some(Err(e)) => reply.error(e),
                // A reader's handle is dropped here: handing it to a worker
                // would cost a thread switch per file a walk reads.
                None if !files::commit::release_commits(self.fs.ctx(), fh.0) => {
                    reply.answer(files::commit::release(self.fs.ctx(), fh.0))
                }
                None => {
                    let fs = self.fs.clone();
                    self.commits.run(move || {
                        catching("release", || {
                            reply.answer(files::commit::release(fs.ctx(), fh.0))
                        })
                    })
                }
            }
        })
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        self.commits.run(move || {
            guard("fsync", || match fs.fsync(fh.0) {
                Ok(()) => {
                    fs.ctx().kernel.settle();
                    reply.ok()
                }
                Err(e) => reply.error(e),
            })
        })
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.request("opendir", || {
            if self.no_opendir {
                // The kernel then lists every directory without opening it.
                return reply.error(Errno::ENOSYS);
            }
            reply.answer(self.fs.opendir(&caller(req), ino.0))
        })
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.request("readdir", || {
            let mut add = |e: &DirOut<'_>| {
                reply.add(INodeNo(e.ino), e.offset, e.kind, OsStr::from_bytes(e.name))
            };
            let r = match fh.0 {
                0 => self
                    .fs
                    .readdir_unopened(&caller(_req), _ino.0, offset, false, &mut add),
                fh => self.fs.readdir(fh, offset, false, &mut add),
            };
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
            if fh.0 == 0 {
                self.read_ahead(_ino.0);
            }
        })
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.request("readdirplus", || {
            let fs = &self.fs;
            let mut add = |e: &DirOut<'_>| match &e.attr {
                Some(a) => reply.add(
                    INodeNo(e.ino),
                    e.offset,
                    OsStr::from_bytes(e.name),
                    &e.ttl,
                    a,
                    Generation(0),
                ),
                // A row the reader is not expected to enter (see
                // `listing/plus_hints.rs`): the kernel makes no inode for it.
                None => {
                    reply.add_name_only(INodeNo(e.ino), e.offset, e.kind, OsStr::from_bytes(e.name))
                }
            };
            let r = match fh.0 {
                0 => fs.readdir_unopened(&caller(_req), _ino.0, offset, true, &mut add),
                fh => fs.readdir(fh, offset, true, &mut add),
            };
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
            if fh.0 == 0 {
                self.read_ahead(_ino.0);
            }
        })
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        crate::counts::count("releasedir");
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fs = self.fs.clone();
        self.commits
            .run(move || guard("fsyncdir", || reply.answer(fs.ctx().data.sync())))
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        self.request("copy_file_range", || {
            reply.answer(files::io::copy_file_range(
                self.fs.ctx(),
                fh_in.0,
                offset_in,
                fh_out.0,
                offset_out,
                len,
            ))
        })
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        crate::counts::count("statfs");
        let s = crate::status::statfs(&self.fs.ctx().opts);
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.request("setxattr", || {
            reply.answer(
                self.fs
                    .setxattr(&caller(req), ino.0, name.as_bytes(), value),
            )
        })
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.request("getxattr", || {
            let r = self.fs.getxattr(&caller(req), ino.0, name.as_bytes());
            answer_xattr(reply, size, r)
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.fs.listxattr(ino.0);
        self.request("listxattr", || answer_xattr(reply, size, r))
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.request("removexattr", || {
            reply.answer(self.fs.removexattr(&caller(req), ino.0, name.as_bytes()))
        })
    }

    // ---- locks and poll ----

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.request("getlk", || {
            let r = crate::lockdir::LockRequest {
                ino: ino.0,
                fh: fh.0,
                owner: lock_owner.0,
                start,
                end,
                typ,
                pid,
                sleep: false,
            };
            match self.fs.getlk(r) {
                Ok(l) => reply.locked(l.start, l.end, l.typ, l.pid),
                Err(e) => reply.error(e),
            }
        })
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        self.request("setlk", || {
            let r = crate::lockdir::LockRequest {
                ino: ino.0,
                fh: fh.0,
                owner: lock_owner.0,
                start,
                end,
                typ,
                pid,
                sleep,
            };
            // A lock that must wait answers later, from a thread of its own.
            self.fs
                .setlk(&caller(req), r, Box::new(move |res| reply.answer(res)))
        })
    }

    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        _events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        self.request("poll", || {
            let waker: Option<crate::lockdir::events::PollWaker> =
                if flags.contains(PollFlags::FUSE_POLL_SCHEDULE_NOTIFY) {
                    Some(Box::new(move || {
                        if let Err(e) = ph.notify() {
                            log::debug!("poll notification: {e}");
                        }
                    }))
                } else {
                    None
                };
            match self.fs.poll(fh.0, waker) {
                Ok(ev) => reply.poll(PollEvents::from_bits_retain(ev)),
                Err(e) => reply.error(e),
            }
        })
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permissions are checked by the kernel (default_permissions); this
        // only says whether the inode is still known.
        crate::counts::count("access");
        if self.fs.ctx().kernel.knows(ino.0) {
            reply.ok()
        } else {
            reply.error(Errno::ENOENT)
        }
    }
}
