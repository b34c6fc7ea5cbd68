//! FUSE over io_uring (Linux 6.14+, when the `fuse` module's `enable_uring`
//! parameter is on).
//!
//! The kernel keeps one request queue per possible CPU and hands a request to
//! the queue of the CPU its caller runs on. Each queue here is served by one
//! thread pinned to that CPU, so a request and its answer never cross CPUs:
//! no inter-processor wake-up per request, which on a small virtual machine
//! costs more than the request itself.
//!
//! Protocol (`Documentation/filesystems/fuse-io-uring.rst`): every queue entry
//! is a header buffer (`fuse_uring_req_header`: the in/out header, the
//! opcode's fixed argument struct, and `fuse_uring_ent_in_out`) and a payload
//! buffer, registered with a `REGISTER` command. The command completes when
//! the kernel has written a request into the entry; the answer goes back into
//! the same buffers with `COMMIT_AND_FETCH`, which also waits for the next
//! request. The request is rebuilt in the `/dev/fuse` layout (header, fixed
//! struct, payload) and dispatched like any other, and its reply is written
//! into the entry instead of to the device. Forgets, interrupts and
//! notifications still use `/dev/fuse`.

use std::fmt;
use std::io;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use log::{debug, error, warn};
use parking_lot::Mutex;
use zerocopy::{FromBytes, IntoBytes};

mod abi;
mod codec;
mod spin;
use abi::{fuse_uring_cmd, fuse_uring_req_header};
use spin::Looking;

use crate::Filesystem;
use crate::channel::{Channel, ChannelSender};
use crate::request::RequestWithSender;
use crate::session::{FilesystemHolder, SessionACL, SessionEventLoop};

/// Size of an entry's header buffer.
const HEADER_SIZE: usize = size_of::<fuse_uring_req_header>();

/// `user_data` of the poll on the queue's wake-up eventfd.
const WAKE: u64 = u64::MAX;

/// Payloads larger than this give their pages back after the request is read.
const KEEP_PAYLOAD: usize = 64 * 1024;

static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// Requests answered through io_uring since the process started.
pub fn requests_over_io_uring() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Sessions whose queues are running.
static RUNNING: AtomicU64 = AtomicU64::new(0);

/// Whether a session's requests come through io_uring queues now: the
/// kernel agreed at INIT and the queues started (they may fail to, e.g.
/// where io_uring is disabled, and the kernel then keeps to `/dev/fuse`).
pub fn io_uring_running() -> bool {
    RUNNING.load(Ordering::Acquire) > 0
}

/// A zeroed, page-aligned mapping the kernel reads and writes. Mapped
/// rather than allocated: its pages cost memory only once written, so an
/// entry's payload buffer (as large as the largest request) stays free until
/// a request that large comes.
struct Buf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a private anonymous mapping; who may touch it when is set by the
// protocol (an entry belongs either to the kernel or to its one request).
unsafe impl Send for Buf {}
// SAFETY: as above.
unsafe impl Sync for Buf {}

impl Buf {
    fn new(len: usize) -> io::Result<Buf> {
        let len = len.max(1);
        // SAFETY: a new private anonymous mapping; no existing memory is
        // named.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Buf {
            ptr: ptr.cast(),
            len,
        })
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The buffer's bytes.
    ///
    /// # Safety
    /// The entry must belong to userspace (its command completed and it is
    /// not yet committed), and no mutable view of it be alive.
    unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: per the caller; the mapping is `len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The buffer's bytes, to write.
    ///
    /// # Safety
    /// As for [`Buf::bytes`], and no other view of it be alive.
    // Entries are shared (the queue's thread and whichever thread answers);
    // that one thread at a time writes an entry is the protocol's doing.
    #[allow(clippy::mut_from_ref)]
    unsafe fn bytes_mut(&self) -> &mut [u8] {
        // SAFETY: per the caller; the mapping is `len` bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: mapped in `Buf::new` with this length; nothing uses it
        // after the queue (and its ring) is gone.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One queue entry: its buffers and the iovecs REGISTER hands the kernel.
struct Entry {
    header: Buf,
    payload: Buf,
    iov: Box<[libc::iovec; 2]>,
}

// SAFETY: the iovecs only point at the entry's own buffers.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

impl Entry {
    /// The header buffer, typed, and the payload buffer.
    ///
    /// # Safety
    /// As for [`Buf::bytes`].
    unsafe fn request(&self) -> io::Result<(&fuse_uring_req_header, &[u8])> {
        // SAFETY: per the caller.
        let (header, payload) = unsafe { (self.header.bytes(), self.payload.bytes()) };
        // The mapping is page-aligned and HEADER_SIZE long: this does not fail.
        let header = fuse_uring_req_header::ref_from_bytes(header)
            .map_err(|_| io::Error::other("misaligned io_uring header buffer"))?;
        Ok((header, payload))
    }

    /// As [`Entry::request`], to write a reply.
    ///
    /// # Safety
    /// As for [`Buf::bytes_mut`].
    #[allow(clippy::mut_from_ref)] // See `Buf::bytes_mut`.
    unsafe fn reply(&self) -> io::Result<(&mut fuse_uring_req_header, &mut [u8])> {
        // SAFETY: per the caller.
        let (header, payload) = unsafe { (self.header.bytes_mut(), self.payload.bytes_mut()) };
        let header = fuse_uring_req_header::mut_from_bytes(header)
            .map_err(|_| io::Error::other("misaligned io_uring header buffer"))?;
        Ok((header, payload))
    }
}

/// A queue: the ring of the thread serving one CPU, and its entries.
pub(crate) struct Queue {
    qid: u16,
    /// Dropped first: closing the ring cancels the kernel's use of the
    /// entries before their buffers are freed.
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Serializes pushes to the submission queue (answers come from any
    /// thread).
    sq: Mutex<()>,
    entries: Vec<Entry>,
    /// Written to wake the queue's thread: to submit answers other threads
    /// queued, or, with `stop` set, to end.
    wake: OwnedFd,
    stop: AtomicBool,
}

/// Where a reply to a request that came through a queue goes.
#[derive(Clone)]
pub(crate) struct UringSender {
    queue: Arc<Queue>,
    entry: u16,
    /// For what still goes through the device (backing files).
    pub(crate) channel: ChannelSender,
}

impl fmt::Debug for UringSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UringSender(q{} e{})", self.queue.qid, self.entry)
    }
}

impl UringSender {
    /// Writes the reply (a `fuse_out_header` and its payload) into the
    /// entry and commits it.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let e = &self.queue.entries[self.entry as usize];
        // SAFETY: the entry is ours until committed, and its request was
        // copied out before it was dispatched: this is the one view of it.
        let (header, payload) = unsafe { e.reply()? };
        let commit_id = codec::write_reply(header, payload, data)?;
        REQUESTS.fetch_add(1, Ordering::Relaxed);
        self.queue.push(
            self.entry,
            fuse_uring_cmd::FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
            commit_id,
        )?;
        if !on_queue_thread(self.queue.qid) {
            // Only the queue's thread submits: io_uring cancels a command
            // when the thread that submitted it exits, and the fetch half of
            // this one waits for the entry's next request, however long a
            // lock waiter or commit worker that answered lives.
            self.queue.wake();
        }
        Ok(())
    }
}

thread_local! {
    /// The queue this thread serves, if any: its answers are submitted with
    /// its next wait instead of a system call of their own.
    static SERVING: std::cell::Cell<Option<u16>> = const { std::cell::Cell::new(None) };
}

fn on_queue_thread(qid: u16) -> bool {
    SERVING.with(|s| s.get() == Some(qid))
}

impl Queue {
    fn new(qid: u16, device: RawFd, depth: usize, payload: usize) -> io::Result<Queue> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(2 * (depth as u32 + 1))
            .build(depth as u32 + 1)?;
        ring.submitter().register_files(&[device])?;
        let mut entries = Vec::with_capacity(depth);
        for _ in 0..depth {
            let header = Buf::new(HEADER_SIZE)?;
            let payload = Buf::new(payload)?;
            let iov = Box::new([
                libc::iovec {
                    iov_base: header.ptr.cast(),
                    iov_len: HEADER_SIZE,
                },
                libc::iovec {
                    iov_base: payload.ptr.cast(),
                    iov_len: payload.len(),
                },
            ]);
            entries.push(Entry {
                header,
                payload,
                iov,
            });
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Queue {
            qid,
            ring,
            sq: Mutex::new(()),
            entries,
            wake,
            stop: AtomicBool::new(false),
        })
    }

    /// Queues a command for entry `entry`; the queue's thread submits it
    /// with its next wait.
    fn push(&self, entry: u16, cmd: fuse_uring_cmd, commit_id: u64) -> io::Result<()> {
        let mut op = opcode::UringCmd80::new(types::Fixed(0), cmd as u32)
            .cmd(codec::command(self.qid, commit_id));
        if cmd == fuse_uring_cmd::FUSE_IO_URING_CMD_REGISTER {
            op = op.addr(Some(self.entries[entry as usize].iov.as_ptr() as u64));
        }
        let sqe = with_len(op.build(), 2).user_data(u64::from(entry));
        {
            let _g = self.sq.lock();
            // SAFETY: pushes are serialized by `sq`; the ring outlives this.
            let mut sq = unsafe { self.ring.submission_shared() };
            // SAFETY: the command's buffers live as long as the queue, and a
            // REGISTER's iovecs are read before the call returns.
            unsafe { sq.push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        Ok(())
    }

    fn push_wake_poll(&self) -> io::Result<()> {
        let sqe = opcode::PollAdd::new(types::Fd(self.wake.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(WAKE);
        let _g = self.sq.lock();
        // SAFETY: as in `push`.
        let mut sq = unsafe { self.ring.submission_shared() };
        // SAFETY: the eventfd lives as long as the queue.
        unsafe { sq.push(&sqe.into()) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Resets the wake-up eventfd (answers queued before the wake-ups it
    /// drops go with the next submission) and polls it again.
    fn rearm_wake(&self) -> io::Result<()> {
        let mut count = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from our non-blocking
        // eventfd; EAGAIN (nothing to reset) is fine.
        let _ = unsafe { libc::read(self.wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        self.push_wake_poll()
    }
}

/// Sets the SQE's `len` (the iovec count of a REGISTER), which the
/// io-uring crate's `UringCmd80` builder does not expose.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(size_of::<squeue::Entry128>() == 128);
    // SAFETY: `Entry128` is `repr(C)`: a 64-byte `io_uring_sqe` then 64
    // bytes of command; `len` is the u32 at offset 24 of `io_uring_sqe`.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[24..28].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute::<[u8; 128], squeue::Entry128>(raw)
    }
}

/// The CPUs the kernel may run callers on: it wants a queue for each.
fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let last = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max();
    match last {
        Some(n) => n + 1,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// The running queues.
pub(crate) struct Rings {
    queues: Vec<Arc<Queue>>,
    threads: Vec<JoinHandle<()>>,
}

impl Rings {
    /// Registers `depth` entries with payload buffers of `payload` bytes on
    /// one queue per possible CPU, and starts their threads.
    pub(crate) fn start<FS: Filesystem>(
        ch: &Channel,
        filesystem: &Arc<FilesystemHolder<FS>>,
        allowed: SessionACL,
        session_owner: nix::unistd::Uid,
        depth: usize,
        payload: usize,
        look_window: std::time::Duration,
    ) -> io::Result<Rings> {
        let depth = depth.clamp(1, u16::MAX as usize - 1);
        let mut queues = Vec::new();
        for qid in 0..possible_cpus() {
            let qid = u16::try_from(qid).map_err(|_| io::Error::other("too many CPUs"))?;
            let q = Arc::new(Queue::new(qid, ch.as_fd().as_raw_fd(), depth, payload)?);
            for e in 0..depth as u16 {
                q.push(e, fuse_uring_cmd::FUSE_IO_URING_CMD_REGISTER, 0)?;
            }
            q.push_wake_poll()?;
            queues.push(q);
        }
        let looking = Arc::new(Looking::new(look_window, queues.len()));
        let mut threads = Vec::new();
        for q in &queues {
            let q = q.clone();
            let looking = looking.clone();
            let event_loop = SessionEventLoop {
                thread_name: format!("fuse-ring-{}", q.qid),
                filesystem: filesystem.clone(),
                ch: ch.clone(),
                allowed,
                session_owner,
            };
            threads.push(
                thread::Builder::new()
                    .name(event_loop.thread_name.clone())
                    .spawn(move || serve(&q, &looking, &event_loop))?,
            );
        }
        RUNNING.fetch_add(1, Ordering::AcqRel);
        Ok(Rings { queues, threads })
    }

    /// Wakes every queue's thread to end, and waits for them.
    pub(crate) fn stop(self) {
        RUNNING.fetch_sub(1, Ordering::AcqRel);
        for q in &self.queues {
            q.stop.store(true, Ordering::Release);
            q.wake();
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// A queue's thread: pinned to its CPU, it registers the entries, then
/// answers requests as they complete until the connection ends or it is
/// woken to stop.
fn serve<FS: Filesystem>(q: &Arc<Queue>, looking: &Looking, event_loop: &SessionEventLoop<FS>) {
    pin_to_cpu(q.qid);
    SERVING.with(|s| s.set(Some(q.qid)));
    // The request in the `/dev/fuse` layout, 8-byte aligned for the parser.
    let mut request: Vec<u64> = Vec::new();
    let mut done: Vec<(u64, i32)> = Vec::new();
    loop {
        // Either a completion came while looking, or wait for one.
        let waited = if looking.look_for_request(&q.ring) {
            Ok(0)
        } else {
            q.ring.submitter().submit_and_wait(1)
        };
        match waited {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => {
                error!("io_uring queue {}: {e}", q.qid);
                return;
            }
        }
        done.clear();
        // SAFETY: only this thread reads the completion queue.
        done.extend(unsafe { q.ring.completion_shared() }.map(|c| (c.user_data(), c.result())));
        for &(user_data, res) in &done {
            if user_data == WAKE {
                if q.stop.load(Ordering::Acquire) {
                    debug!("io_uring queue {} stopped", q.qid);
                    return;
                }
                // Another thread queued answers: the next wait submits them.
                if let Err(e) = q.rearm_wake() {
                    error!("io_uring queue {}: {e}", q.qid);
                    return;
                }
                continue;
            }
            let Ok(entry) = u16::try_from(user_data) else {
                continue;
            };
            match res {
                0 => handle(q, entry, looking, &mut request, event_loop),
                r if r == -libc::EINTR || r == -libc::EAGAIN => {
                    // The kernel did not take the command: hand it back.
                    if let Err(e) = q.push(entry, fuse_uring_cmd::FUSE_IO_URING_CMD_REGISTER, 0) {
                        error!("io_uring queue {}: {e}", q.qid);
                        return;
                    }
                }
                r if r == -libc::ENOTCONN || r == -libc::ENODEV => {
                    debug!("io_uring queue {}: connection ended", q.qid);
                    return;
                }
                r => {
                    // That entry is lost; the queue's others go on serving.
                    error!(
                        "io_uring queue {} entry {entry}: {}",
                        q.qid,
                        io::Error::from_raw_os_error(-r)
                    );
                }
            }
        }
    }
}

/// Rebuilds the request in entry `entry` and dispatches it.
fn handle<FS: Filesystem>(
    q: &Arc<Queue>,
    entry: u16,
    looking: &Looking,
    request: &mut Vec<u64>,
    event_loop: &SessionEventLoop<FS>,
) {
    let e = &q.entries[entry as usize];
    // SAFETY: the command completed, so the entry is ours until committed;
    // these views end before the request is dispatched (and answered).
    let (header, payload) = match unsafe { e.request() } {
        Ok(parts) => parts,
        Err(err) => {
            error!("io_uring queue {} entry {entry}: {err}", q.qid);
            return;
        }
    };
    let head = codec::in_header(header);
    looking.note_request(head.pid);
    let payload_len = codec::payload_len(header, payload.len());
    let bytes = codec::rebuild_request(header, payload, request);
    if payload_len > KEEP_PAYLOAD {
        // The request is copied out: give the payload's pages back rather
        // than keep every entry's largest request resident.
        // SAFETY: advises on memory this entry owns until it is committed;
        // the kernel refills it with zeros on the next touch.
        unsafe { libc::madvise(e.payload.ptr.cast(), e.payload.len(), libc::MADV_DONTNEED) };
    }
    let sender = UringSender {
        queue: q.clone(),
        entry,
        channel: event_loop.ch.sender(),
    };
    match RequestWithSender::new_uring(sender, bytes) {
        Some(req) => {
            if matches!(
                req.request.operation(),
                Ok(crate::ll::Operation::Destroy(_))
            ) {
                // Answered; the connection's end stops the queue.
                req.reply::<crate::ReplyEmpty>().ok();
            } else {
                req.dispatch(event_loop);
            }
        }
        None => {
            warn!("io_uring queue {}: unreadable request", q.qid);
            let out = codec::error_reply(head.unique, libc::EIO);
            let s = UringSender {
                queue: q.clone(),
                entry,
                channel: event_loop.ch.sender(),
            };
            if let Err(e) = s.send(&[IoSlice::new(out.as_bytes())]) {
                error!("io_uring queue {}: {e}", q.qid);
            }
        }
    }
}

fn pin_to_cpu(cpu: u16) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (queues are per possible CPU).
    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    // SAFETY: sets this thread's affinity from a valid set.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) } != 0 {
        debug!(
            "cannot pin io_uring queue {cpu}: {}",
            io::Error::last_os_error()
        );
    }
}
