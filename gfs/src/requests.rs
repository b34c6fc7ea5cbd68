//! The requests [`crate::io::Io`] carries out, shared by the paths that carry
//! them out (`sysio.rs`, `uring.rs`) and the power-cut model (`power.rs`):
//! batches of reads, chains of writes and syncs, the counters of what ran,
//! and [`FileIo`], the trait each of them implements.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a store has done so far, by path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// io_uring submissions (each one `io_uring_enter` batch of requests).
    pub uring_batches: u64,
    /// Requests (SQEs) carried by those batches.
    pub uring_ops: u64,
    /// Operations done with plain system calls (Syscall mode or fallback).
    pub syscall_ops: u64,
}

/// Live counters behind [`IoStats`].
#[derive(Default)]
pub(crate) struct Counters {
    uring_batches: AtomicU64,
    uring_ops: AtomicU64,
    syscall_ops: AtomicU64,
}

impl Counters {
    pub(crate) fn uring_batch(&self, ops: usize) {
        self.uring_batches.fetch_add(1, Ordering::Relaxed);
        self.uring_ops.fetch_add(ops as u64, Ordering::Relaxed);
    }
    pub(crate) fn syscall(&self) {
        self.syscall_ops.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn snapshot(&self) -> IoStats {
        IoStats {
            uring_batches: self.uring_batches.load(Ordering::Relaxed),
            uring_ops: self.uring_ops.load(Ordering::Relaxed),
            syscall_ops: self.syscall_ops.load(Ordering::Relaxed),
        }
    }
}

/// One way of carrying out the requests: plain system calls
/// (`sysio::Syscalls`), io_uring (`uring::UringIo`), and in test builds the
/// power-cut model in front of either (`power::PowerCutIo`, a decorator).
/// [`crate::io::Io`] picks one per mode; the paths are generic or matched
/// on, never called through a vtable. Each counts what it ran in `ctr`.
pub(crate) trait FileIo {
    /// Reads each `(offset, len)` range; a returned buffer is shorter than
    /// asked only where the file ended first.
    fn read(&self, file: &File, ranges: &[(u64, usize)], ctr: &Counters) -> Reads;
    /// Carries out one write (and its sync).
    fn write(&self, w: WriteReq<'_>, ctr: &Counters) -> io::Result<()>;
    /// Reads every request (files may differ); each gets its own result.
    fn read_multi(&self, reqs: &[ReadReq<'_>], ctr: &Counters) -> Vec<io::Result<Vec<u8>>>;
    /// Runs independent chains of writes and syncs; each gets its own result.
    fn run_chains(&self, chains: &[Chain<'_>], ctr: &Counters) -> Vec<io::Result<()>>;
    /// fdatasync (`data_only`) or fsync; the latter also works on directories.
    fn sync(&self, file: &File, data_only: bool, ctr: &Counters) -> io::Result<()>;
}

/// Buffers read, one per range asked for.
pub(crate) type Reads = io::Result<Vec<Vec<u8>>>;

/// One write: all of `bufs` back to back at `offset` of `file`; with `sync`
/// the data is also made durable before it returns.
#[derive(Clone, Copy)]
pub(crate) struct WriteReq<'a> {
    pub(crate) file: &'a File,
    pub(crate) offset: u64,
    pub(crate) bufs: &'a [&'a [u8]],
    pub(crate) sync: bool,
}

/// One read of a batch: `len` bytes at `offset` of `file`.
pub(crate) struct ReadReq<'a> {
    pub(crate) file: &'a File,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// One request of a [`Chain`].
pub(crate) enum Step<'a> {
    /// Writes `bufs` back to back at `offset`.
    Write {
        file: &'a File,
        offset: u64,
        bufs: Vec<&'a [u8]>,
    },
    /// fdatasync (`data_only`) or fsync; with `upto` > 0 (io_uring only)
    /// of the file's first `upto` bytes (see [`Chain::sync_upto`]).
    Sync {
        file: &'a File,
        data_only: bool,
        upto: u64,
    },
}

/// Requests that run in order, each only if the one before it succeeded.
#[derive(Default)]
pub(crate) struct Chain<'a> {
    pub(crate) steps: Vec<Step<'a>>,
}

impl<'a> Chain<'a> {
    pub(crate) fn new() -> Self {
        Chain { steps: Vec::new() }
    }

    /// Adds a write of `bufs` at `offset`, split into requests the kernel
    /// takes whole (at most [`MAX_IOV`] buffers and [`MAX_RW`] bytes each).
    pub(crate) fn write(
        &mut self,
        file: &'a File,
        mut offset: u64,
        bufs: &[&'a [u8]],
    ) -> &mut Self {
        let mut cur: Vec<&'a [u8]> = Vec::new();
        let mut bytes = 0usize;
        for b in bufs {
            let mut rest: &'a [u8] = b;
            while !rest.is_empty() {
                if cur.len() == MAX_IOV || bytes == MAX_RW {
                    let n = bytes as u64;
                    self.steps.push(Step::Write {
                        file,
                        offset,
                        bufs: std::mem::take(&mut cur),
                    });
                    offset += n;
                    bytes = 0;
                }
                let take = rest.len().min(MAX_RW - bytes);
                cur.push(&rest[..take]);
                bytes += take;
                rest = &rest[take..];
            }
        }
        if !cur.is_empty() {
            self.steps.push(Step::Write {
                file,
                offset,
                bufs: cur,
            });
        }
        self
    }

    /// Adds an fdatasync (`data_only`) or fsync of `file`.
    pub(crate) fn sync(&mut self, file: &'a File, data_only: bool) -> &mut Self {
        self.steps.push(Step::Sync {
            file,
            data_only,
            upto: 0,
        });
        self
    }

    /// Adds an fdatasync of `file` that writes back only its dirty pages
    /// below `upto` (an io_uring fsync with a range: the journal commit and
    /// the disk's cache flush are those of any fdatasync). A log replica's
    /// zeros ahead of its data are dirty too and would otherwise go to disk
    /// at every sync, only to be overwritten by the next appends and written
    /// again. Without io_uring (or under a power-cut model) the whole file
    /// is synced, which is never less durable.
    pub(crate) fn sync_upto(&mut self, file: &'a File, upto: u64) -> &mut Self {
        self.steps.push(Step::Sync {
            file,
            data_only: true,
            upto,
        });
        self
    }
}

/// Most buffers in one write request (UIO_MAXIOV).
const MAX_IOV: usize = 1024;
/// Most bytes in one write request (the kernel caps a transfer near 2 GiB).
const MAX_RW: usize = 1 << 30;
