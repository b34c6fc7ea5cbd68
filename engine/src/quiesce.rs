//! Reads through a plain pointer into a registry, and the wait that lets
//! the registry let go of what it removed.
//!
//! A point read finds its tablet server in the registry by name, under the
//! registry's `ArcSwap` guard: two atomic read-modify-writes (each a full
//! barrier on x86) and a string search per read, a tenth of a cached
//! sequential point read. A thread that keeps the pointer it found skips
//! them, but a pointer kept without a reference count may outlive what it
//! points to, and a reference count kept by an idle thread would keep a
//! stopped server (its lease, its log threads, its store) alive.
//!
//! So a kept pointer is tagged with the epoch it was taken in, and used
//! only inside [`read`], which marks the thread as reading with a plain
//! store to a line of its own and then checks that the epoch has not
//! moved. A registry that removes an entry moves the epoch and calls
//! [`retire`] before it drops the entry: `membarrier(2)` makes every
//! thread's marks visible (a barrier on each CPU that runs one of this
//! process's threads), and `retire` waits until no thread is inside a
//! read. A read that marked itself after the barrier sees the new epoch
//! and does not use its pointer. The readers pay two plain stores; the
//! rare remover pays the system call and the wait (the scheme of
//! userspace RCU's `membarrier` flavour).
//!
//! Where the kernel refuses `membarrier` (older kernels, some sandboxes),
//! [`read`] always declines and callers take their ordinary path.

use parking_lot::Mutex;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Moved by every removal that may free what a kept pointer points to.
static EPOCH: AtomicU64 = AtomicU64::new(1);

/// Set if a registered barrier ever failed: reads decline from then on.
static BROKEN: AtomicBool = AtomicBool::new(false);

/// One thread's mark: how deep it is in [`read`]s (a read's `f` may read
/// again). Only its thread writes it; it sits on a line of its own.
#[repr(align(64))]
struct Mark {
    depth: AtomicU32,
}

/// Every live thread's mark.
static MARKS: Mutex<Vec<Arc<Mark>>> = Mutex::new(Vec::new());

/// This thread's mark, unlisted when the thread exits.
struct Mine(Arc<Mark>);

impl Drop for Mine {
    fn drop(&mut self) {
        MARKS.lock().retain(|m| !Arc::ptr_eq(m, &self.0));
    }
}

thread_local! {
    static MINE: Mine = {
        let m = Arc::new(Mark { depth: AtomicU32::new(0) });
        MARKS.lock().push(Arc::clone(&m));
        Mine(m)
    };
}

// <linux/membarrier.h>
const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integers and a CPU number and touches no
    // memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

/// Whether this process may use kept pointers: `membarrier` offers the
/// private expedited barrier and this process registered for it.
fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let offered = membarrier(MEMBARRIER_CMD_QUERY);
        offered >= 0
            && offered & MEMBARRIER_CMD_PRIVATE_EXPEDITED as libc::c_long != 0
            && membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0
    }) && !BROKEN.load(Ordering::Relaxed)
}

/// The epoch now: taken before looking an entry up, kept with the pointer.
pub fn epoch() -> u64 {
    EPOCH.load(Ordering::Acquire)
}

/// Puts the mark back even if `f` panics.
struct Leave<'a> {
    mark: &'a Mark,
    depth: u32,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        self.mark.depth.store(self.depth, Ordering::Release);
    }
}

/// `f`, run as a reader, if no removal came since `taken` (an [`epoch`]);
/// None if one did (look the entry up again) or kept pointers are off.
/// What `f` uses through a pointer taken at `taken` stays alive until it
/// returns.
pub fn read<R>(taken: u64, f: impl FnOnce() -> R) -> Option<R> {
    if !enabled() {
        return None;
    }
    MINE.try_with(|mine| {
        let mark = &*mine.0;
        let depth = mark.depth.load(Ordering::Relaxed);
        mark.depth.store(depth + 1, Ordering::Relaxed);
        // Only the compiler is held back here: the other side's
        // membarrier orders this store before the load below on the CPU.
        compiler_fence(Ordering::SeqCst);
        let _leave = Leave { mark, depth };
        (EPOCH.load(Ordering::Relaxed) == taken).then(f)
    })
    .ok()
    .flatten()
}

/// Moves the epoch and waits until no thread is inside a [`read`] that
/// may use a pointer taken before: after it returns, what was removed from
/// the registry before the call may be dropped. Must not be called inside
/// a `read` (a read never removes; the caller's own mark is not waited
/// for).
pub fn retire() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
    if !enabled() {
        return; // nobody reads through kept pointers
    }
    if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 {
        // Once registered, membarrier(2) lists no way for this to fail.
        // If it did, a reader's mark might not be visible yet: no read
        // uses a kept pointer from here on, and the wait below covers
        // the marks that are.
        BROKEN.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }
    let own = MINE.try_with(|m| Arc::clone(&m.0)).ok();
    debug_assert!(
        own.as_ref()
            .is_none_or(|m| m.depth.load(Ordering::Relaxed) == 0),
        "retire inside a read"
    );
    let marks: Vec<Arc<Mark>> = MARKS.lock().clone();
    for m in marks {
        if own.as_ref().is_some_and(|o| Arc::ptr_eq(o, &m)) {
            continue;
        }
        while m.depth.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// `f` under the epoch now, again while other tests' removals move it.
    fn read_now<R>(mut f: impl FnMut() -> R) -> R {
        loop {
            if let Some(r) = read(epoch(), &mut f) {
                return r;
            }
        }
    }

    #[test]
    fn a_read_runs_under_its_epoch_and_declines_after_a_removal() {
        if !enabled() {
            return; // the kernel offers no membarrier: reads always decline
        }
        assert_eq!(read_now(|| 7), 7);
        // A read inside a read, and the mark as it was after both.
        assert_eq!(read_now(|| read(epoch(), || 8)).unwrap_or(8), 8);
        MINE.with(|m| assert_eq!(m.0.depth.load(Ordering::Relaxed), 0));
        let e = epoch();
        retire();
        assert_eq!(read(e, || 7), None, "a pointer taken before a removal");
    }

    #[test]
    fn retire_waits_for_a_reader_inside_a_read() {
        if !enabled() {
            return;
        }
        let inside = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (i, r) = (Arc::clone(&inside), Arc::clone(&release));
        let reader = std::thread::spawn(move || {
            read_now(|| {
                i.store(true, Ordering::SeqCst);
                while !r.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
            })
        });
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let retired = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&retired);
        let remover = std::thread::spawn(move || {
            retire();
            done.store(true, Ordering::SeqCst);
        });
        // However long the remover runs, it cannot be done while the
        // reader is inside (and the reader stays there until released).
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !retired.load(Ordering::SeqCst),
            "retire returned under a read"
        );
        release.store(true, Ordering::SeqCst);
        reader.join().unwrap();
        remover.join().unwrap();
        assert!(retired.load(Ordering::SeqCst));
    }
}
