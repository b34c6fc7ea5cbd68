//! Open files of `.chubby/`: one lock-service session and handle per open
//! file description, whole-file contents, events and status files.
//!
//! A description's locks are the service's locks taken through its handle.
//! Closing decides how they end: every `close` sends FLUSH from the closing
//! thread, so we can see whether that process is being killed; the RELEASE
//! after the last close then ends the session as a dead client (locks enter
//! lock-delay) if the last closer was killed, and orderly otherwise.

use super::events::{PollWaker, Queue};
use super::interrupt::{self, ProcRef};
use super::{creds, errno, is_lock_fh, join, LockDir, LockNode, EVENTS, STATUS};
use crate::ctx::Ctx;
use crate::node::Node;
use crate::offsets::{slice_at, write_at};
use crate::options::{Entry, FsResult};
use crate::perms::Caller;
use chubby::{
    Credentials, HandleId, NodeKind, NodeSpec, OpenOptions, OwnerKey, SessionId, Target,
    MAX_CONTENTS,
};
use fuser::{Errno, FileAttr};
use std::sync::Arc;
use std::time::Duration;

/// How a blocked read hears back.
pub type Done<T> = Box<dyn FnOnce(FsResult<T>) + Send>;

/// How often a blocked reader looks at its caller's pending signals.
const READ_POLL: Duration = Duration::from_millis(50);

/// What `open`/`create` tell the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOpened {
    pub fh: u64,
    /// Always set: contents change behind the kernel's back.
    pub direct_io: bool,
    /// An events file is a stream.
    pub nonseekable: bool,
}

/// An open `.chubby/` directory: its entries, listed at offset 0.
pub(crate) struct DirHandle {
    pub path: String,
    pub creds: chubby::Credentials,
    pub entries: Option<Vec<(Vec<u8>, Node, fuser::FileType)>>,
}

/// A `.chubby/` file open for reading and/or writing.
pub(crate) struct FileHandle {
    /// Path at open (for log lines; the service's handle follows renames).
    pub path: String,
    pub ino: u64,
    pub session: SessionId,
    pub handle: HandleId,
    pub creds: Credentials,
    pub readable: bool,
    pub writable: bool,
    pub append: bool,
    /// The contents as this handle sees them: the snapshot taken by the last
    /// read at offset 0, or the new contents being written.
    pub data: Vec<u8>,
    /// `data` holds the file's contents (a writer merges into them).
    pub loaded: bool,
    /// `data` differs from the file.
    pub dirty: bool,
    /// A write or truncation since the last commit: a close commits only
    /// then (a shell's `> f` closes a duplicate before writing).
    pub wrote: bool,
    /// A write failed (EFBIG): never committed; close reports it.
    pub failed: Option<Errno>,
    /// The last close was made by a process being killed.
    pub killed: bool,
    /// Processes known to have this description (for sequencer lookups).
    pub refs: Vec<ProcRef>,
}

/// Any open `.chubby/` file or directory.
pub(crate) enum LockHandle {
    File(FileHandle),
    Dir(DirHandle),
    Events {
        ino: u64,
        sub: u64,
        queue: Arc<Queue>,
    },
    Status {
        ino: u64,
        data: Vec<u8>,
    },
}

impl LockHandle {
    /// The inode the handle was opened on.
    pub fn ino(&self) -> u64 {
        match self {
            LockHandle::File(f) => f.ino,
            LockHandle::Dir(d) => LockNode::entry_ino(&d.path),
            LockHandle::Events { ino, .. } | LockHandle::Status { ino, .. } => *ino,
        }
    }
}

impl LockDir {
    /// The process behind a request, as a lasting reference.
    fn proc_ref(caller: &Caller) -> Option<ProcRef> {
        ProcRef::of(interrupt::tgid_of(caller.pid)?)
    }

    /// Opens a session and a handle on the cell node `path`.
    fn open_node(
        &self,
        caller: &Caller,
        path: &str,
        flags: i32,
        create: Option<NodeSpec>,
    ) -> FsResult<LockOpened> {
        let ld = self;
        let acc = flags & libc::O_ACCMODE;
        let readable = acc != libc::O_WRONLY;
        let writable = acc != libc::O_RDONLY;
        let c = creds(caller);
        let opts = OpenOptions {
            read: readable,
            write: writable,
            exclusive: create.is_some() && flags & libc::O_EXCL != 0,
            create,
        };
        let session = ld.svc.open_session(&format!("fuse pid {}", caller.pid));
        let (handle, st) = match ld.svc.open_handle(session, &c, path, &opts) {
            Ok(x) => x,
            Err(e) => {
                let _ = ld.svc.close_session(session);
                return Err(errno(&format!("open /.chubby{path}"), &e));
            }
        };
        if st.kind == NodeKind::Dir {
            let _ = ld.svc.close_handle(handle);
            let _ = ld.svc.close_session(session);
            return Err(Errno::EISDIR);
        }
        let truncated = writable && flags & libc::O_TRUNC != 0;
        let fh = ld.insert(LockHandle::File(FileHandle {
            path: path.to_string(),
            ino: LockNode::entry_ino(path),
            session,
            handle,
            creds: c,
            readable,
            writable,
            append: flags & libc::O_APPEND != 0,
            data: Vec::new(),
            loaded: truncated,
            dirty: truncated && st.size > 0,
            wrote: false,
            failed: None,
            killed: false,
            refs: Self::proc_ref(caller).into_iter().collect(),
        }));
        Ok(LockOpened {
            fh,
            direct_io: true,
            nonseekable: false,
        })
    }

    /// FUSE `open` of a `.chubby/` file.
    pub fn open(&self, cx: &Ctx, caller: &Caller, ino: u64, flags: i32) -> FsResult<LockOpened> {
        let ld = self;
        let node = cx.lock_node(ino).ok_or(Errno::ENOENT)?;
        let writable = flags & libc::O_ACCMODE != libc::O_RDONLY;
        match node {
            LockNode::Entry(path) => self.open_node(caller, &path, flags, None),
            LockNode::Events(dir) => {
                if writable {
                    return Err(Errno::EACCES);
                }
                // The directory must exist (and be one) when the stream starts.
                self.attr(cx, &LockNode::Events(dir.clone()))?;
                let (sub, queue) = ld.hub.subscribe(&dir);
                let fh = ld.insert(LockHandle::Events { ino, sub, queue });
                Ok(LockOpened {
                    fh,
                    direct_io: true,
                    nonseekable: true,
                })
            }
            LockNode::Status => {
                if writable {
                    return Err(Errno::EACCES);
                }
                let fh = ld.insert(LockHandle::Status {
                    ino,
                    data: ld.status_text(),
                });
                Ok(LockOpened {
                    fh,
                    direct_io: true,
                    nonseekable: false,
                })
            }
        }
    }

    /// FUSE `create` in a `.chubby/` directory.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &self,
        cx: &Ctx,
        caller: &Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> FsResult<(Entry, LockOpened)> {
        let ld = self;
        let Some(LockNode::Entry(dir)) = cx.lock_node(parent) else {
            return Err(Errno::ENOTDIR);
        };
        if name == EVENTS.as_bytes() || (dir == "/" && name == STATUS.as_bytes()) {
            return Err(Errno::EEXIST);
        }
        let name = std::str::from_utf8(name).map_err(|_| Errno::EINVAL)?;
        let path = join(&dir, name);
        let spec = NodeSpec::file(mode & !umask & 0o7777);
        let opened = self.open_node(caller, &path, flags, Some(spec))?;
        let st = match self.handle_file(opened.fh, |f| {
            ld.svc
                .stat(&Credentials::root(), Target::Handle(f.handle))
                .map_err(|e| errno(&format!("stat {path}"), &e))
        }) {
            Ok(st) => st,
            Err(e) => {
                let _ = self.release(cx, opened.fh, None);
                return Err(e);
            }
        };
        let entry = self.entry(cx, LockNode::Entry(path), &st)?;
        Ok((entry, opened))
    }

    /// Runs `f` on an open `.chubby/` file's handle.
    pub(crate) fn handle_file<T>(
        &self,
        fh: u64,
        f: impl FnOnce(&mut FileHandle) -> FsResult<T>,
    ) -> FsResult<T> {
        let h = self.handle(fh)?;
        let mut g = h.lock();
        match &mut *g {
            LockHandle::File(file) => f(file),
            _ => Err(Errno::EBADF),
        }
    }

    /// Loads the file's contents into a writer's buffer (once).
    fn load(&self, f: &mut FileHandle) -> FsResult<()> {
        if f.loaded {
            return Ok(());
        }
        let ld = self;
        // A write-only handle may not read through the service; merging
        // its writes into the contents is the daemon's own business.
        let path = ld
            .svc
            .handle_path(f.handle)
            .map_err(|e| errno(&format!("open {}", f.path), &e))?;
        let (data, _) = ld
            .svc
            .read(&Credentials::root(), Target::Path(&path))
            .map_err(|e| errno(&format!("read {path}"), &e))?;
        f.data = data;
        f.loaded = true;
        Ok(())
    }

    /// Replaces the file's contents with the handle's buffer.
    fn commit(&self, f: &mut FileHandle) -> FsResult<()> {
        let ld = self;
        ld.svc
            .set_contents(&f.creds, Target::Handle(f.handle), &f.data)
            .map_err(|e| errno(&format!("write /.chubby{}", f.path), &e))?;
        f.dirty = false;
        f.wrote = false;
        Ok(())
    }

    /// Truncation through an open handle (setattr with a file handle).
    pub(crate) fn truncate_handle(&self, fh: u64, size: usize) -> FsResult<()> {
        self.handle_file(fh, |f| {
            if !f.writable {
                return Err(Errno::EBADF);
            }
            self.load(f)?;
            f.data.resize(size, 0);
            f.dirty = true;
            f.wrote = true;
            Ok(())
        })
    }

    /// Attributes of an open file with unwritten contents (its size is the
    /// buffer's); None when the node's own attributes apply.
    pub fn handle_attr(&self, cx: &Ctx, fh: u64) -> Option<FileAttr> {
        let h = self.handle(fh).ok()?;
        let g = h.lock();
        let LockHandle::File(f) = &*g else {
            return None;
        };
        if !f.dirty {
            return None;
        }
        let node = Node::Lock(LockNode::Entry(f.path.clone()));
        let mut a = cx.node_attr(&node).ok()?;
        a.size = f.data.len() as u64;
        a.blocks = a.size.div_ceil(512);
        Some(a)
    }

    /// FUSE `read`. Files answer at once; an events file with nothing to
    /// read blocks (on its own thread, so the FUSE workers stay free) until
    /// a line comes, the directory goes, or the reader has a signal pending.
    pub fn read(
        &self,
        caller: &Caller,
        fh: u64,
        offset: u64,
        size: u32,
        nonblock: bool,
        done: Done<Vec<u8>>,
    ) {
        let h = match self.handle(fh) {
            Ok(h) => h,
            Err(e) => return done(Err(e)),
        };
        let mut g = h.lock();
        match &mut *g {
            LockHandle::File(f) => {
                if !f.readable {
                    return done(Err(Errno::EBADF));
                }
                // A read from the start takes a fresh snapshot, unless this
                // handle has contents of its own not yet committed.
                if (offset == 0 || !f.loaded) && !f.dirty {
                    let ld = self;
                    match ld.svc.read(&f.creds, Target::Handle(f.handle)) {
                        Ok((data, _)) => {
                            f.data = data;
                            f.loaded = true;
                        }
                        Err(e) => return done(Err(errno(&format!("read {}", f.path), &e))),
                    }
                }
                done(Ok(slice_at(&f.data, offset, size)))
            }
            LockHandle::Status { data, .. } => done(Ok(slice_at(data, offset, size))),
            LockHandle::Dir(_) => done(Err(Errno::EISDIR)),
            LockHandle::Events { queue, .. } => {
                let queue = queue.clone();
                drop(g);
                if let Some(d) = queue.take(size as usize) {
                    return done(Ok(d));
                }
                if nonblock {
                    return done(Err(Errno::EAGAIN));
                }
                let tid = caller.pid;
                let spawned = std::thread::Builder::new()
                    .name("chubby-events-read".into())
                    .spawn(move || loop {
                        queue.wait(READ_POLL);
                        if let Some(d) = queue.take(size as usize) {
                            return done(Ok(d));
                        }
                        if interrupt::should_abandon(tid) {
                            return done(Err(Errno::EINTR));
                        }
                    });
                if let Err(e) = spawned {
                    // The dropped reply answers EIO.
                    log::error!("cannot start a reader thread: {e}");
                }
            }
        }
    }

    /// FUSE `write` to a `.chubby/` file: into the handle's buffer.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        self.handle_file(fh, |f| {
            if !f.writable {
                return Err(Errno::EBADF);
            }
            if let Some(e) = f.failed {
                return Err(e);
            }
            self.load(f)?;
            let at = if f.append {
                f.data.len()
            } else {
                offset as usize
            };
            if at.saturating_add(data.len()) > MAX_CONTENTS {
                log::info!(
                    "write /.chubby{}: contents would exceed {MAX_CONTENTS} bytes",
                    f.path
                );
                f.failed = Some(Errno::EFBIG);
                return Err(Errno::EFBIG);
            }
            write_at(&mut f.data, at, data);
            f.dirty = true;
            f.wrote = true;
            Ok(data.len() as u32)
        })
    }

    /// FUSE `flush` (every `close`) of a `.chubby/` handle: commits what was
    /// written, notes whether the closer is being killed, and releases the
    /// closing process's fcntl locks (`lock_owner` names its descriptor table).
    pub fn flush(&self, cx: &Ctx, caller: &Caller, fh: u64, lock_owner: OwnerKey) -> FsResult<()> {
        let ld = self;
        let h = ld.handle(fh)?;
        let killed = interrupt::being_killed(caller.pid);
        let mut g = h.lock();
        let ino = g.ino();
        let LockHandle::File(f) = &mut *g else {
            drop(g);
            cx.local_locks.unlock(ino, lock_owner);
            return Ok(());
        };
        f.killed = killed;
        let mut res = Ok(());
        if killed {
            // The writer died before finishing: its contents never happened.
            if f.dirty {
                log::info!(
                    "/.chubby{}: writer pid {} killed; contents unchanged",
                    f.path,
                    caller.pid
                );
            }
            f.dirty = false;
            f.wrote = false;
        } else if let Some(e) = f.failed {
            res = Err(e);
        } else if f.wrote {
            res = self.commit(f);
        }
        let handle = f.handle;
        drop(g);
        if killed {
            if ld.svc.release_owner_dead(lock_owner) > 0 {
                log::info!("fcntl locks of killed pid {} enter lock-delay", caller.pid);
            }
        } else if let Err(e) = ld.svc.unlock(lock_owner, Target::Handle(handle)) {
            log::debug!("unlock at close: {e}");
        }
        if !killed {
            ld.owners.lock().remove(&lock_owner);
        }
        res
    }

    /// FUSE `fsync`: commits what was written so far.
    pub fn fsync(&self, fh: u64) -> FsResult<()> {
        self.handle_file(fh, |f| {
            if let Some(e) = f.failed {
                return Err(e);
            }
            if f.dirty {
                self.commit(f)?;
            }
            Ok(())
        })
        .or_else(|e| if e == Errno::EBADF { Ok(()) } else { Err(e) })
    }

    /// FUSE `release` (last close of a description). `flock_owner` is set
    /// when the description took flock locks (a failed `flock -n` too).
    pub fn release(&self, cx: &Ctx, fh: u64, flock_owner: Option<OwnerKey>) -> FsResult<()> {
        let ld = self;
        let Some(h) = ld.remove(fh) else {
            return Err(Errno::EBADF);
        };
        let mut g = h.lock();
        if let Some(o) = flock_owner {
            // Events and status files lock in the local table.
            cx.local_locks.unlock(g.ino(), o);
        }
        match &mut *g {
            LockHandle::File(f) => {
                if f.dirty && !f.killed && f.failed.is_none() {
                    if let Err(e) = self.commit(f) {
                        log::info!("/.chubby{}: contents not written at release: {e:?}", f.path);
                    }
                }
                ld.owners.lock().retain(|_, o| o.fh != fh);
                let res = if f.killed {
                    // A dead client: its locks enter lock-delay.
                    log::info!(
                        "/.chubby{}: last holder killed; its locks enter lock-delay",
                        f.path
                    );
                    ld.svc.close_session(f.session)
                } else {
                    let closed = ld.svc.close_handle(f.handle);
                    ld.svc.close_session(f.session).and(closed)
                };
                res.map_err(|e| errno(&format!("close /.chubby{}", f.path), &e))
            }
            LockHandle::Events { sub, .. } => {
                ld.hub.unsubscribe(*sub);
                Ok(())
            }
            LockHandle::Dir(_) | LockHandle::Status { .. } => Ok(()),
        }
    }

    /// FUSE `releasedir` of a `.chubby/` directory.
    pub fn releasedir(&self, fh: u64) {
        self.remove(fh);
    }

    /// FUSE `poll`: events files are readable when a line is waiting (else
    /// `waker` runs when one comes); everything else is always ready.
    /// Returns the ready events (POLL* bits).
    pub fn poll(&self, fh: u64, waker: Option<PollWaker>) -> FsResult<u32> {
        let always = (libc::POLLIN | libc::POLLOUT | libc::POLLRDNORM | libc::POLLWRNORM) as u32;
        if !is_lock_fh(fh) {
            return Ok(always);
        }
        let h = self.handle(fh)?;
        let g = h.lock();
        match &*g {
            LockHandle::Events { queue, .. } => {
                let readable = (libc::POLLIN | libc::POLLRDNORM) as u32;
                if queue.ready() {
                    return Ok(readable);
                }
                if let Some(w) = waker {
                    queue.on_ready(w);
                }
                // It may have become readable meanwhile (the waker ran then).
                Ok(if queue.ready() { readable } else { 0 })
            }
            _ => Ok(always),
        }
    }
}
