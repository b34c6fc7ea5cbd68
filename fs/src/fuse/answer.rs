//! The adapter's small helpers: the caller of a request, the panic guard,
//! open flags and sending a result as a reply.

use crate::options::{Entry, FsResult};
use crate::perms::Caller;
use crate::reply::Opened;
use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, ReplyAttr, ReplyData, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, ReplyXattr, Request,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

pub(super) fn caller(req: &Request) -> Caller {
    Caller::new(req.uid(), req.gid(), req.pid())
}

/// Runs one request; a panic is logged (its reply, dropped, answers EIO).
pub(super) fn guard(op: &str, f: impl FnOnce()) {
    crate::options::FUSE_REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::counts::count(op);
    let took = run(op, f);
    telemetry::observe(telemetry::Latency::Fuse, op, took);
}

/// The part of a request that runs later on a commit worker: guarded the
/// same way, but not counted again.
pub(super) fn catching(op: &str, f: impl FnOnce()) {
    run(op, f);
}

/// Runs `f` as `op`'s (see `counts::during`), logging a panic; how long
/// it ran.
fn run(op: &str, f: impl FnOnce()) -> Duration {
    let (r, took) = crate::counts::during(op, || catch_unwind(AssertUnwindSafe(f)));
    if let Err(p) = r {
        let msg = p
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| p.downcast_ref::<&str>().copied())
            .unwrap_or("?");
        log::error!("{op}: internal error (answered EIO): {msg}");
    }
    took
}

/// Sends extended attribute data (a value, or the list of names) to a
/// caller with a `size`-byte buffer: its length when `size` is 0, ERANGE
/// when it does not fit.
pub(super) fn answer_xattr(reply: ReplyXattr, size: u32, r: FsResult<Vec<u8>>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

/// Sends a result as the reply (an error as its errno).
pub(super) trait Answer<T> {
    fn answer(self, r: FsResult<T>);
}

impl Answer<()> for ReplyEmpty {
    fn answer(self, r: FsResult<()>) {
        match r {
            Ok(()) => self.ok(),
            Err(e) => self.error(e),
        }
    }
}

impl Answer<u32> for ReplyWrite {
    fn answer(self, r: FsResult<u32>) {
        match r {
            Ok(n) => self.written(n),
            Err(e) => self.error(e),
        }
    }
}

impl Answer<Entry> for ReplyEntry {
    fn answer(self, r: FsResult<Entry>) {
        match r {
            Ok(e) => self.entry(&e.ttl, &e.attr, Generation(0)),
            Err(e) => self.error(e),
        }
    }
}

impl Answer<Vec<u8>> for ReplyData {
    fn answer(self, r: FsResult<Vec<u8>>) {
        match r {
            Ok(d) => self.data(&d),
            Err(e) => self.error(e),
        }
    }
}

impl Answer<(FileAttr, Duration)> for ReplyAttr {
    fn answer(self, r: FsResult<(FileAttr, Duration)>) {
        match r {
            Ok((a, ttl)) => self.attr(&ttl, &a),
            Err(e) => self.error(e),
        }
    }
}

/// An opened directory.
impl Answer<u64> for ReplyOpen {
    fn answer(self, r: FsResult<u64>) {
        match r {
            Ok(fh) => self.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => self.error(e),
        }
    }
}

pub(super) fn fopen(o: &Opened) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if o.direct_io {
        f |= FopenFlags::FOPEN_DIRECT_IO;
    }
    if o.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if o.noflush {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    if o.nonseekable {
        f |= FopenFlags::FOPEN_NONSEEKABLE;
    }
    f
}
