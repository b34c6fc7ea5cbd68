//! io_uring submission: one ring per thread, whole batches in one system call.
//!
//! Why io_uring for the file layer: Bigtable's hot paths are batches. A lookup
//! that misses the block cache needs several blocks of one SSTable (index,
//! Bloom filter, data), and a scan prefetches many; with io_uring they go out
//! as one submission and the kernel works on them in parallel, instead of one
//! blocking `pread` after another. A replicated append is one chain per
//! replica, each its write linked (`IOSQE_IO_LINK`) to its `fdatasync`, and
//! all of them go out from one `io_uring_enter`, so the replicas' syncs run
//! at once. Where nothing runs in parallel, one file's write or sync, the
//! ring only adds a hand-off: the kernel runs a buffered ext4 write or an
//! fsync on a worker thread, not the submitting one, so those go by plain
//! system calls (see [`UringIo`]).
//!
//! Each calling thread lazily gets its own small ring, so no lock is shared
//! between threads and a request never waits behind another thread's batch.
//! Every call submits its requests and waits for all of their completions
//! before it returns: buffers are borrowed, not handed over, which keeps the
//! API synchronous and the memory safety argument local.

use crate::requests::{Chain, Counters, FileIo, ReadReq, Reads, Step, WriteReq};
use crate::sysio::Syscalls;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Requests per ring. Batches larger than this are split into several
/// submissions; 64 covers a typical multi-block read in one.
const RING_ENTRIES: u32 = 64;
/// Largest length put in one request: the SQE field is 32 bits and the
/// kernel caps a single transfer just under 2 GiB anyway.
const MAX_RW: usize = 1 << 30;
/// Rounds without progress (EAGAIN) tolerated before giving up.
const MAX_AGAIN: u32 = 1000;
/// Failed `io_uring_enter` calls (other than EINTR) tolerated in one batch.
const MAX_ENTER_FAILURES: u32 = 100;

thread_local! {
    static RING: RefCell<Slot> = const { RefCell::new(Slot::Empty) };
}

enum Slot {
    /// Not created yet (or discarded after a failure): create on next use.
    Empty,
    Ready(Box<Ring>),
    /// Creation failed on this thread; the reason, for the fallback warning.
    Failed(String),
}

/// Warn once per process when a thread cannot get a ring; repeating it per
/// operation would flood the log while the fallback keeps working.
static RING_WARNED: AtomicBool = AtomicBool::new(false);

fn warn_no_ring(e: &io::Error) {
    if !RING_WARNED.swap(true, Ordering::Relaxed) {
        log::warn!("no io_uring on this thread ({e}); using plain system calls here");
    }
}

/// Runs `f` on this thread's ring, or `fallback` by plain system calls
/// where the thread has none.
fn on_ring<R>(f: impl FnOnce(&mut Ring) -> R, fallback: impl FnOnce() -> R) -> R {
    match with_ring(f) {
        Ok(res) => res,
        Err(e) => {
            warn_no_ring(&e);
            fallback()
        }
    }
}

/// The io_uring path: batches in one submission, plain system calls where
/// they are faster (one file's writes and syncs, chains without a sync) or
/// where a thread has no ring.
pub(crate) struct UringIo;

impl FileIo for UringIo {
    fn read(&self, file: &File, ranges: &[(u64, usize)], ctr: &Counters) -> Reads {
        on_ring(
            |r| r.read(file, ranges, ctr),
            || Syscalls.read(file, ranges, ctr),
        )
    }

    /// One file's write, synced or not, runs by plain system calls. An
    /// unsynced write only copies into the page cache, which ext4 will not
    /// do from io_uring's submitting thread: the ring hands it to a worker
    /// thread and back, two context switches that cost more than the copy
    /// (measured: unsynced log appends 2-3x faster by pwritev). A synced
    /// one is a write and an fdatasync in order, nothing to run in
    /// parallel, and the ring hands both to a worker: the commit log's
    /// synced appends ran 1.4x faster as pwritev + fdatasync on the calling
    /// thread (`engine --sync`, four alternated pairs on a quiet machine).
    fn write(&self, w: WriteReq<'_>, ctr: &Counters) -> io::Result<()> {
        Syscalls.write(w, ctr)
    }

    fn read_multi(&self, reqs: &[ReadReq<'_>], ctr: &Counters) -> Vec<io::Result<Vec<u8>>> {
        on_ring(
            |r| r.read_multi(reqs, ctr),
            || Syscalls.read_multi(reqs, ctr),
        )
    }

    /// Chains without a sync run by plain system calls, as in `write`.
    fn run_chains(&self, chains: &[Chain<'_>], ctr: &Counters) -> Vec<io::Result<()>> {
        let syncs = chains
            .iter()
            .any(|c| c.steps.iter().any(|s| matches!(s, Step::Sync { .. })));
        if !syncs {
            return Syscalls.run_chains(chains, ctr);
        }
        on_ring(
            |r| r.run_chains(chains, ctr),
            || Syscalls.run_chains(chains, ctr),
        )
    }

    /// One file's sync waits for one request: by a system call, as `write`.
    fn sync(&self, file: &File, data_only: bool, ctr: &Counters) -> io::Result<()> {
        Syscalls.sync(file, data_only, ctr)
    }
}

/// Sets up this thread's ring now, so a store can tell at open time whether
/// io_uring works here.
pub(crate) fn probe() -> io::Result<()> {
    with_ring(|_| ())
}

/// Runs `f` with this thread's ring, creating it on first use. Fails (and the
/// caller falls back to syscalls) when the ring cannot be had.
pub(crate) fn with_ring<R>(f: impl FnOnce(&mut Ring) -> R) -> io::Result<R> {
    RING.try_with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| io::Error::other("this thread's io_uring is already in use"))?;
        if let Slot::Empty = *slot {
            *slot = match Ring::new() {
                Ok(r) => Slot::Ready(Box::new(r)),
                Err(e) => Slot::Failed(e.to_string()),
            };
        }
        match &mut *slot {
            Slot::Ready(ring) => {
                let out = f(ring);
                if ring.ring.is_none() {
                    // Discarded after a fatal error: start afresh next time.
                    *slot = Slot::Empty;
                }
                Ok(out)
            }
            Slot::Failed(why) => Err(io::Error::other(format!("io_uring setup failed: {why}"))),
            Slot::Empty => Err(io::Error::other("io_uring ring missing")),
        }
    })
    .map_err(|_| io::Error::other("thread is exiting; its io_uring is gone"))?
}

/// A batch could not be completed.
struct RunError {
    err: io::Error,
    /// The kernel may still use the batch's buffers: the caller must leak them.
    in_flight: bool,
}

/// One thread's ring.
pub(crate) struct Ring {
    /// None once discarded after a fatal error.
    ring: Option<IoUring>,
    /// Submission queue size: the most requests in one batch.
    cap: usize,
}

impl Ring {
    fn new() -> io::Result<Ring> {
        // The ring is only ever used by the thread that made it, which lets the
        // kernel skip some locking and signalling; older kernels reject these
        // flags, so retry plain.
        let ring = IoUring::<squeue::Entry, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build(RING_ENTRIES)
            .or_else(|_| IoUring::new(RING_ENTRIES))?;
        let cap = (ring.params().sq_entries() as usize).max(2);
        Ok(Ring {
            ring: Some(ring),
            cap,
        })
    }

    /// Submits `sqes` (user_data = index) in one go and waits for all of their
    /// completions; returns each request's result in order.
    fn run(&mut self, sqes: &[squeue::Entry], ctr: &Counters) -> Result<Vec<i32>, RunError> {
        let n = sqes.len();
        let Some(ring) = self.ring.as_mut() else {
            return Err(RunError {
                err: io::Error::other("io_uring ring was discarded"),
                in_flight: false,
            });
        };
        // SAFETY: each entry points at buffers and iovec arrays that the caller
        // keeps alive and untouched until this returns; if we return while the
        // kernel may still hold requests, the ring is leaked (never closed) and
        // `in_flight` tells the caller to leak the buffers as well. The queue is
        // empty between calls and callers never pass more than `cap` entries.
        let pushed = unsafe { ring.submission().push_multiple(sqes) };
        if pushed.is_err() {
            return Err(RunError {
                err: io::Error::other("io_uring submission queue full"),
                in_flight: false,
            });
        }
        ctr.uring_batch(n);
        let mut results: Vec<Option<i32>> = vec![None; n];
        let mut done = 0;
        let mut failures = 0;
        let mut fatal = None;
        while done < n {
            match ring.submit_and_wait(n - done) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    // EAGAIN/EBUSY are transient (memory, full completion queue):
                    // reap below and try again, but not forever.
                    failures += 1;
                    if failures > MAX_ENTER_FAILURES {
                        fatal = Some(e);
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            for cqe in ring.completion() {
                if let Some(slot) = results.get_mut(cqe.user_data() as usize) {
                    if slot.is_none() {
                        *slot = Some(cqe.result());
                        done += 1;
                    }
                }
            }
        }
        if let Some(err) = fatal {
            let consumed = n - ring.submission().len();
            let in_flight = consumed > done;
            let ring = self.ring.take();
            if in_flight {
                // Closing the ring would not stop requests already running.
                std::mem::forget(ring);
            }
            return Err(RunError { err, in_flight });
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or(-libc::EIO))
            .collect())
    }

    /// Reads each `(offset, len)` range, as few submissions as the ring size
    /// allows; a buffer comes back shorter than asked only at end of file.
    pub(crate) fn read(
        &mut self,
        file: &File,
        ranges: &[(u64, usize)],
        ctr: &Counters,
    ) -> io::Result<Vec<Vec<u8>>> {
        let reqs: Vec<ReadReq<'_>> = ranges
            .iter()
            .map(|&(offset, len)| ReadReq { file, offset, len })
            .collect();
        self.read_multi(&reqs, ctr).into_iter().collect()
    }

    /// Reads every request (each may name a different file) in as few
    /// submissions as the ring size allows. Each request gets its own result,
    /// so one failing file does not fail the others; a buffer comes back
    /// shorter than asked only at end of file.
    pub(crate) fn read_multi(
        &mut self,
        reqs: &[ReadReq<'_>],
        ctr: &Counters,
    ) -> Vec<io::Result<Vec<u8>>> {
        let n = reqs.len();
        let mut errs: Vec<Option<io::Error>> = (0..n).map(|_| None).collect();
        for (i, r) in reqs.iter().enumerate() {
            if r.offset.checked_add(r.len as u64).is_none() {
                errs[i] = Some(io::Error::from_raw_os_error(libc::EINVAL));
            }
        }
        let cap = self.cap;
        // Buffers are not zeroed: the kernel writes `filled[i]` bytes of
        // each, and only those become its contents (zeroing a 64 KiB block
        // before reading it over was a visible cost of every cache miss).
        let mut bufs: Vec<Vec<u8>> = reqs
            .iter()
            .zip(&errs)
            .map(|(r, e)| {
                if e.is_some() {
                    Vec::new()
                } else {
                    Vec::with_capacity(r.len)
                }
            })
            .collect();
        let want: Vec<usize> = reqs
            .iter()
            .zip(&errs)
            .map(|(r, e)| if e.is_some() { 0 } else { r.len })
            .collect();
        let mut filled = vec![0usize; n];
        let mut eof = vec![false; n];
        let mut again = 0;
        loop {
            let pending: Vec<usize> = (0..n)
                .filter(|&i| errs[i].is_none() && !eof[i] && filled[i] < want[i])
                .collect();
            if pending.is_empty() {
                break;
            }
            let mut progress = false;
            for chunk in pending.chunks(cap) {
                let sqes: Vec<squeue::Entry> = chunk
                    .iter()
                    .enumerate()
                    .map(|(j, &i)| {
                        let len = (want[i] - filled[i]).min(MAX_RW) as u32;
                        // SAFETY: `filled[i] < want[i] <= capacity`, so the
                        // pointer stays inside the buffer's allocation.
                        let at = unsafe { bufs[i].as_mut_ptr().add(filled[i]) };
                        opcode::Read::new(types::Fd(reqs[i].file.as_raw_fd()), at, len)
                            .offset(reqs[i].offset + filled[i] as u64)
                            .build()
                            .user_data(j as u64)
                    })
                    .collect();
                let res = match self.run(&sqes, ctr) {
                    Ok(res) => res,
                    Err(e) => {
                        if e.in_flight {
                            std::mem::forget(bufs);
                        }
                        let kind = e.err.kind();
                        let msg = e.err.to_string();
                        return (0..n)
                            .map(|_| Err(io::Error::new(kind, msg.clone())))
                            .collect();
                    }
                };
                for (&i, &r) in chunk.iter().zip(&res) {
                    if r > 0 {
                        filled[i] += r as usize;
                        progress = true;
                    } else if r == 0 {
                        eof[i] = true;
                        progress = true;
                    } else if !retryable(r) {
                        errs[i] = Some(io::Error::from_raw_os_error(-r));
                        progress = true;
                    }
                }
            }
            if let Err(e) = no_progress_guard(progress, &mut again) {
                for i in pending {
                    if errs[i].is_none() {
                        errs[i] = Some(io::Error::new(e.kind(), e.to_string()));
                    }
                }
                break;
            }
        }
        bufs.into_iter()
            .zip(filled)
            .zip(errs)
            .map(|((mut buf, n), err)| match err {
                Some(e) => Err(e),
                None => {
                    // SAFETY: the kernel wrote bytes `[0, n)` (`n` is the sum
                    // of completed read lengths, at most the capacity).
                    unsafe { buf.set_len(n) };
                    Ok(buf)
                }
            })
            .collect()
    }

    /// Runs independent chains of writes and syncs together: every chain's
    /// requests are linked (in order; a failure cancels the rest of that
    /// chain only) and as many chains as fit go out in one submission. This
    /// is how one replicated append reaches all replicas, each with its own
    /// linked fdatasync, in a single `io_uring_enter`. Short writes are
    /// resumed; a failed fsync is never retried.
    pub(crate) fn run_chains(
        &mut self,
        chains: &[Chain<'_>],
        ctr: &Counters,
    ) -> Vec<io::Result<()>> {
        struct State {
            pos: usize,
            done: usize,
            err: Option<io::Error>,
        }
        let mut st: Vec<State> = chains
            .iter()
            .map(|_| State {
                pos: 0,
                done: 0,
                err: None,
            })
            .collect();
        let cap = self.cap;
        let mut again = 0;
        loop {
            let mut sqes: Vec<squeue::Entry> = Vec::new();
            let mut iovs: Vec<Vec<libc::iovec>> = Vec::new();
            // (chain, step, bytes expected) per entry.
            let mut map: Vec<(usize, usize, usize)> = Vec::new();
            for (c, chain) in chains.iter().enumerate() {
                let s = &st[c];
                if s.err.is_some() || s.pos >= chain.steps.len() || sqes.len() >= cap {
                    continue;
                }
                let first = sqes.len();
                for (k, step) in chain.steps.iter().enumerate().skip(s.pos) {
                    if sqes.len() >= cap {
                        break;
                    }
                    let skip = if k == s.pos { s.done } else { 0 };
                    let (entry, want) = match step {
                        Step::Write { file, offset, bufs } => {
                            let iov = iovecs_after(bufs, skip);
                            let want: usize = iov.iter().map(|v| v.iov_len).sum();
                            let e = opcode::Writev::new(
                                types::Fd(file.as_raw_fd()),
                                iov.as_ptr(),
                                iov.len() as u32,
                            )
                            .offset(offset + skip as u64)
                            .build();
                            iovs.push(iov);
                            (e, want)
                        }
                        Step::Sync {
                            file,
                            data_only,
                            upto,
                        } => {
                            let flags = if *data_only {
                                types::FsyncFlags::DATASYNC
                            } else {
                                types::FsyncFlags::empty()
                            };
                            // Offset 0 and length 0 sync the whole file, as
                            // does a range too long to give.
                            let e = opcode::Fsync::new(types::Fd(file.as_raw_fd()))
                                .len(u32::try_from(*upto).unwrap_or(0))
                                .flags(flags)
                                .build();
                            (e, 0)
                        }
                    };
                    sqes.push(entry.user_data(sqes.len() as u64));
                    map.push((c, k, want));
                }
                // Link within this chain only: the last entry of a chain must
                // not link to the next chain's first.
                let last = sqes.len() - 1;
                for e in &mut sqes[first..last] {
                    *e = e.clone().flags(squeue::Flags::IO_LINK);
                }
            }
            if sqes.is_empty() {
                break;
            }
            let res = match self.run(&sqes, ctr) {
                Ok(res) => res,
                Err(e) => {
                    if e.in_flight {
                        std::mem::forget(iovs);
                    }
                    for s in st.iter_mut().filter(|s| s.err.is_none()) {
                        s.err = Some(io::Error::new(e.err.kind(), e.err.to_string()));
                    }
                    break;
                }
            };
            let mut progress = false;
            // A chain stops being processed at its first incomplete result:
            // everything after it in the chain was cancelled and is resubmitted.
            let mut stopped = vec![false; chains.len()];
            for (&(c, k, want), &r) in map.iter().zip(&res) {
                if stopped[c] {
                    continue;
                }
                let s = &mut st[c];
                debug_assert_eq!(s.pos, k);
                let is_sync = matches!(chains[c].steps[k], Step::Sync { .. });
                if r < 0 {
                    stopped[c] = true;
                    if !retryable(r) {
                        // A failed fsync is final too: the dirty pages may be gone.
                        s.err = Some(io::Error::from_raw_os_error(-r));
                        progress = true;
                    }
                    continue;
                }
                progress = true;
                let n = r as usize;
                if !is_sync && n < want {
                    s.done += n;
                    stopped[c] = true;
                    continue;
                }
                s.pos += 1;
                s.done = 0;
            }
            if let Err(e) = no_progress_guard(progress, &mut again) {
                for s in st.iter_mut().filter(|s| s.err.is_none()) {
                    s.err = Some(io::Error::new(e.kind(), e.to_string()));
                }
                break;
            }
        }
        st.into_iter()
            .map(|s| match s.err {
                Some(e) => Err(e),
                None => Ok(()),
            })
            .collect()
    }
}

/// Results worth resubmitting: interrupted, would block, or cancelled because
/// an earlier request of the same chain came up short.
fn retryable(res: i32) -> bool {
    matches!(-res, libc::EINTR | libc::EAGAIN | libc::ECANCELED)
}

/// Fails after too many rounds in a row that moved nothing, so a request the
/// kernel keeps bouncing cannot spin forever.
fn no_progress_guard(progress: bool, again: &mut u32) -> io::Result<()> {
    if progress {
        *again = 0;
        return Ok(());
    }
    *again += 1;
    if *again > MAX_AGAIN {
        return Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            "io_uring request made no progress",
        ));
    }
    std::thread::yield_now();
    Ok(())
}

/// The iovecs of `bufs` with the first `skip` bytes left out.
fn iovecs_after(bufs: &[&[u8]], mut skip: usize) -> Vec<libc::iovec> {
    let mut out = Vec::with_capacity(bufs.len());
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        let rest = &b[skip..];
        skip = 0;
        out.push(libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring<R>(f: impl FnOnce(&mut Ring) -> R) -> R {
        with_ring(f).expect("io_uring must work on this machine")
    }

    /// Writes `bufs` at `offset` as one chain, with an fdatasync behind them
    /// when `sync`.
    fn write(f: &File, offset: u64, bufs: &[&[u8]], sync: bool, ctr: &Counters) -> io::Result<()> {
        let mut c = Chain::new();
        c.write(f, offset, bufs);
        if sync {
            c.sync(f, true);
        }
        ring(|r| r.run_chains(&[c], ctr)).remove(0)
    }

    /// fsync or fdatasync of `f` through the ring.
    fn sync(f: &File, data_only: bool, ctr: &Counters) -> io::Result<()> {
        let mut c = Chain::new();
        c.sync(f, data_only);
        ring(|r| r.run_chains(&[c], ctr)).remove(0)
    }

    #[test]
    fn batches_larger_than_the_ring_are_split() {
        let ctr = Counters::default();
        let f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        write(&f, 0, &[&data], false, &ctr).unwrap();
        let ranges: Vec<(u64, usize)> = (0..200u64).map(|i| (i * 50, 7)).collect();
        let got = ring(|r| r.read(&f, &ranges, &ctr)).unwrap();
        for (&(o, l), g) in ranges.iter().zip(&got) {
            assert_eq!(g[..], data[o as usize..o as usize + l]);
        }
        // 1 write + ceil(200 / 64) read submissions.
        let s = ctr.snapshot();
        assert_eq!(s.uring_batches, 1 + 200u64.div_ceil(64));
        assert_eq!(s.uring_ops, 201);
    }

    #[test]
    fn many_small_buffers_make_a_long_linked_chain() {
        let ctr = Counters::default();
        let f = tempfile::tempfile().unwrap();
        // 70k one-byte buffers need 69 writev requests: more than one submission.
        let data: Vec<[u8; 1]> = (0..70_000u32).map(|i| [(i % 256) as u8]).collect();
        let mut bufs: Vec<&[u8]> = data.iter().map(|b| &b[..]).collect();
        bufs.insert(5, b"");
        write(&f, 3, &bufs, true, &ctr).unwrap();
        let want: Vec<u8> = data.concat();
        let got = ring(|r| r.read(&f, &[(3, want.len()), (0, 3)], &ctr)).unwrap();
        assert_eq!(got[0], want);
        assert_eq!(got[1], vec![0, 0, 0]);
        assert!(ctr.snapshot().uring_batches >= 3);
    }

    #[test]
    fn reads_stop_at_end_of_file_and_sync_works() {
        let ctr = Counters::default();
        let f = tempfile::tempfile().unwrap();
        write(&f, 0, &[b"hello"], true, &ctr).unwrap();
        let got = ring(|r| r.read(&f, &[(3, 10), (9, 1), (0, 0)], &ctr)).unwrap();
        assert_eq!(got, vec![b"lo".to_vec(), vec![], vec![]]);
        sync(&f, false, &ctr).unwrap();
        sync(&f, true, &ctr).unwrap();
        let bad = ring(|r| r.read(&f, &[(u64::MAX, 2)], &ctr));
        assert!(bad.is_err());
    }

    #[test]
    fn errors_from_completions_are_reported() {
        let ctr = Counters::default();
        let dir = tempfile::tempdir().unwrap();
        // A read-only descriptor: the kernel fails the write with EBADF.
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let f = File::open(&path).unwrap();
        let err = write(&f, 0, &[b"y"], true, &ctr).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADF));
        // The ring is still usable afterwards.
        assert_eq!(ring(|r| r.read(&f, &[(0, 1)], &ctr)).unwrap()[0], b"x");
    }
}
