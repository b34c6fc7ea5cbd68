//! Busy polling of the FUSE device after a reply, as Linux's `busy_poll`
//! does for sockets.
//!
//! A program walking the mount (`find`, `ls -R`, `tar`) sends its next
//! request a few microseconds after our reply. If the FUSE thread is asleep
//! in `read` by then, the kernel must wake it, usually on the other CPU: on a
//! virtual machine that wake-up (an inter-processor interrupt, the idle CPU
//! coming out of halt) costs more than the request itself. Measured on a
//! 2-CPU VM, `find` over 20,000 rows took 7–9 s with sleeping readers, 3 s with
//! the daemon and `find` pinned to one CPU, and 4–5 s with one reader polling.
//! So after answering, one FUSE thread at a time polls the device (without
//! sleeping) for a short window; when a request is pending it goes back to
//! fuser's `read`, which then returns at once. After the window it sleeps in
//! `read` as before, so an idle mount costs nothing. The other threads stand
//! by meanwhile (see [`BusyPoll::after_reply`]): with two threads and no
//! standing by, the walk took about a fifth longer than with one thread.

use parking_lot::{Condvar, Mutex};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Default polling window after a reply. It must outlast a request cycle
/// that includes a wake-up of the other CPU (a reply, the caller woken on a
/// halted CPU, its next request: 100–150 µs on a 2-CPU VM): with a shorter
/// window a single caller that once moves between CPUs keeps moving with
/// every request (docs/mount.md, "Looking for the next request").
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(200);

/// How long a thread stands by (see [`BusyPoll::after_reply`]) before it
/// goes back to reading: the longest a request can wait for a free thread
/// while the poller is busy with a slow one.
const STANDBY: Duration = Duration::from_millis(1);

/// Busy polling of one mount's FUSE device after each reply, shared by its
/// FUSE threads, so that a walk's next request finds a thread awake;
/// [`BusyPoll::set_device`] turns it on.
pub struct BusyPoll {
    /// A descriptor of the mount's FUSE connection (any clone will do: they
    /// share one request queue). Unset: no polling.
    device: OnceLock<OwnedFd>,
    window: Duration,
    /// FUSE threads, and how many are not in `read` (answering a request,
    /// polling or standing by).
    threads: usize,
    out_of_read: AtomicUsize,
    /// One poller at a time: on a small machine a second would take the CPU
    /// the program we wait for needs.
    polling: AtomicBool,
    /// Threads standing by (read without the lock by `request_started`),
    /// and their wake-up.
    standing_by: AtomicUsize,
    standby: Mutex<()>,
    wake: Condvar,
}

impl BusyPoll {
    /// Polls for `window` after each reply, for a mount read by `threads`
    /// FUSE threads.
    pub(crate) fn new(window: Duration, threads: usize) -> BusyPoll {
        BusyPoll {
            device: OnceLock::new(),
            window,
            threads,
            out_of_read: AtomicUsize::new(0),
            polling: AtomicBool::new(false),
            standing_by: AtomicUsize::new(0),
            standby: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// Starts polling `device` (a descriptor of this mount's /dev/fuse
    /// connection); a second call is ignored.
    pub fn set_device(&self, device: OwnedFd) {
        let _ = self.device.set(device);
    }

    /// A FUSE thread got a request.
    pub(crate) fn request_started(&self) {
        self.out_of_read.fetch_add(1, Ordering::Relaxed);
        // More requests queued behind this one: several programs at once,
        // so let a standby thread read too.
        if self.standing_by.load(Ordering::Relaxed) > 0 {
            if let Some(device) = self.device.get() {
                if pending(device) {
                    self.release_one();
                }
            }
        }
    }

    /// After a request's reply, before its thread goes back to `read`.
    ///
    /// A thread asleep in `read` is woken by every new request, even one the
    /// poller takes, and that wake-up is the cost polling is there to spare.
    /// So one thread polls, and the others stand by instead of going back to
    /// `read`: a thread finishing while another polls stands by, and a
    /// poller that sees a request while a thread sleeps in `read` (woken by
    /// that request, so it will take it) stands by itself. Standing by ends
    /// when a thread takes a request and finds more queued behind it
    /// (several programs at once, see [`BusyPoll::request_started`]), or
    /// after [`STANDBY`] at the latest.
    pub(crate) fn after_reply(&self) {
        self.poll_or_stand_by();
        self.out_of_read.fetch_sub(1, Ordering::Relaxed);
    }

    fn poll_or_stand_by(&self) {
        let Some(device) = self.device.get() else {
            return;
        };
        if self.window.is_zero() {
            return;
        }
        if self.polling.swap(true, Ordering::Acquire) {
            if !pending(device) {
                self.stand_by();
            }
            return;
        }
        let deadline = Instant::now() + self.window;
        let mut stand_by = false;
        loop {
            if pending(device) {
                stand_by = self.out_of_read.load(Ordering::Relaxed) < self.threads;
                break;
            }
            if Instant::now() >= deadline {
                break;
            }
            std::hint::spin_loop();
        }
        self.polling.store(false, Ordering::Release);
        if stand_by {
            self.stand_by();
        }
    }

    fn stand_by(&self) {
        let mut g = self.standby.lock();
        self.standing_by.fetch_add(1, Ordering::Relaxed);
        let _ = self.wake.wait_for(&mut g, STANDBY);
        self.standing_by.fetch_sub(1, Ordering::Relaxed);
    }

    fn release_one(&self) {
        let _g = self.standby.lock();
        self.wake.notify_one();
    }
}

/// Whether a request is pending on `device` (or the connection is gone,
/// which the next `read` reports).
fn pending(device: &OwnedFd) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        device.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
        Ok(n) => n > 0,
        Err(nix::errno::Errno::EINTR) => false,
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    #[test]
    fn returns_when_input_is_pending() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let p = BusyPoll::new(Duration::from_secs(3600), 2);
        p.set_device(OwnedFd::from(a));
        b.write_all(b"x").unwrap();
        // Would spin for an hour if the pending byte went unseen.
        p.request_started();
        p.after_reply();
        assert!(!p.polling.load(Ordering::Relaxed));
    }

    #[test]
    fn polls_no_longer_than_the_window() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = BusyPoll::new(Duration::from_millis(1), 2);
        p.set_device(OwnedFd::from(a));
        p.request_started();
        p.after_reply();
        assert!(!p.polling.load(Ordering::Relaxed));
        assert_eq!(p.out_of_read.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_thread_finishing_while_another_polls_stands_by_then_reads() {
        let (a, _b) = UnixStream::pair().unwrap();
        let p = BusyPoll::new(Duration::from_secs(3600), 2);
        p.set_device(OwnedFd::from(a));
        // Another thread is polling: this one stands by, for STANDBY at most.
        p.polling.store(true, Ordering::Relaxed);
        p.request_started();
        p.after_reply();
        assert_eq!(p.standing_by.load(Ordering::Relaxed), 0);
        assert_eq!(p.out_of_read.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn without_a_device_or_window_it_returns_at_once() {
        let p = BusyPoll::new(Duration::from_secs(3600), 2);
        p.request_started();
        p.after_reply();
        let (a, _b) = UnixStream::pair().unwrap();
        let p = BusyPoll::new(Duration::ZERO, 2);
        p.set_device(OwnedFd::from(a));
        p.request_started();
        p.after_reply();
    }
}
