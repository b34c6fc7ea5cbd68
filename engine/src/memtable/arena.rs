//! The memtable's arena: entries are carved out of large chunks, so an
//! insert costs no allocator call and dropping a memtable frees a few
//! chunks instead of one allocation per entry (LevelDB's and RocksDB's
//! design; per-entry `malloc` also made glibc grow each thread's heap a
//! page at a time, one `mprotect` per few inserts).
//!
//! Two runs share the chunks' pool but not their chunks: the hot one for
//! what searches walk, the cold one for what only a found entry's reader
//! touches (see `skiplist.rs`).
//!
//! Memory handed out is never moved or reused while the arena lives, so
//! pointers into it stay valid for the arena's whole life. Full-size chunks
//! of a dropped arena are kept (up to [`MAX_SPARE`]) for the next arenas.

use crate::aligned_alloc::AlignedAlloc;
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Every allocation is aligned to this (the skiplist's towers hold pointers).
pub const ALIGN: usize = 8;

/// The first chunk; each next one doubles, up to [`MAX_CHUNK`], so that a
/// memtable holding a few entries (most tablets, most of the time) stays small.
const FIRST_CHUNK: usize = 4 << 10;
/// A full-size chunk, aligned to a transparent huge page's size so that a
/// kernel set to back all memory with them (`enabled=always`) can. It does
/// not ask for them (`MADV_HUGEPAGE`): a huge page must be a free 2 MiB
/// block, which a VM that hands free memory back to its host (free page
/// reporting) has to fault in from the host first. Filling 256 MiB of
/// memtables that way ran at 130 MB/s on the benchmark VM (4 KiB pages:
/// 2.7 GB/s) and was a third of the CPU of sequential writes. RocksDB's
/// memtables use ordinary pages too unless told otherwise.
const MAX_CHUNK: usize = 2 << 20;

/// Full-size chunks kept after their arena was dropped, at most this many
/// (64 MiB, one default memtable): a fresh chunk costs page faults and the
/// kernel zeroing 2 MiB, which was about an eighth of the write path's CPU
/// while memtables turned over.
const MAX_SPARE: usize = 32;

/// Full-size chunks of dropped arenas, handed to the next ones.
static SPARE: Mutex<Vec<Chunk>> = parking_lot::const_mutex(Vec::new());

/// Fresh full-size chunks the filler keeps ready in the spare pool once an
/// arena found it short: memtables filling faster than flushed ones give
/// chunks back (a new server's first ones, every one after a burst) fault
/// in 2 MiB at a time, which the filler does on an otherwise idle core.
const READY_AHEAD: usize = 4;

/// One block of memory owned by the arena.
struct Chunk(AlignedAlloc);

impl Chunk {
    /// A new chunk of `size` bytes; a full-size one is aligned to
    /// [`MAX_CHUNK`].
    fn fresh(size: usize) -> Chunk {
        let align = if size == MAX_CHUNK { MAX_CHUNK } else { ALIGN };
        Chunk(AlignedAlloc::new(size, align))
    }

    /// Writes one byte of every page, so that the kernel backs (and zeroes)
    /// the whole chunk now rather than when an insert first reaches it.
    fn fault_in(&self) {
        for off in (0..self.0.size()).step_by(4096) {
            // SAFETY: `off` is inside the chunk, which nobody else uses yet.
            unsafe { self.0.ptr().as_ptr().add(off).write_volatile(0) };
        }
    }
}

/// Wakes the filler (started on first use), which tops the spare pool up
/// to [`READY_AHEAD`] faulted-in chunks, touching them at idle priority: it
/// runs on a core nothing else wants (at normal priority it took CPU from
/// the writers and gained nothing), and where none is free the writers
/// fault chunks in themselves, as without it.
fn nudge_filler() {
    static FILLER: OnceLock<Option<Sender<()>>> = OnceLock::new();
    let filler = FILLER.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        std::thread::Builder::new()
            .name("memtable-chunks".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    while SPARE.lock().len() < READY_AHEAD {
                        // Allocating and advising take the address space's
                        // lock for writing: not something to be holding
                        // while descheduled at idle priority.
                        let c = Chunk::fresh(MAX_CHUNK);
                        set_idle_priority(true);
                        c.fault_in();
                        set_idle_priority(false);
                        let mut pool = SPARE.lock();
                        if pool.len() >= MAX_SPARE {
                            break;
                        }
                        pool.push(c);
                    }
                }
            })
            .ok()
            .map(|_| tx)
    });
    if let Some(tx) = filler {
        // Full: a nudge is already pending.
        let _ = tx.try_send(());
    }
}

/// Puts the calling thread in `SCHED_IDLE`, or back in `SCHED_OTHER`
/// (best effort: failing leaves its priority as it was).
fn set_idle_priority(idle: bool) {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid struct the
    // call only reads.
    let _ = unsafe { libc::sched_setscheduler(0, policy, &param) };
}

/// One run of allocations carved from the front of its current chunk.
struct Bump {
    /// Next free byte of the current chunk, and how many are left after it.
    next: *mut u8,
    left: usize,
    /// Size of the last regular chunk allocated.
    chunk_size: usize,
}

impl Bump {
    const EMPTY: Bump = Bump {
        next: std::ptr::null_mut(),
        left: 0,
        chunk_size: 0,
    };
}

/// Which of an arena's two runs an allocation comes from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Run {
    /// What searches walk (the skiplist's nodes): kept dense, so that a
    /// search touches few cache lines and few pages.
    Hot,
    /// What only a found entry's reader touches (large values).
    Cold,
}

struct State {
    hot: Bump,
    cold: Bump,
    chunks: Vec<Chunk>,
}

impl State {
    fn bump(&mut self, run: Run) -> &mut Bump {
        match run {
            Run::Hot => &mut self.hot,
            Run::Cold => &mut self.cold,
        }
    }
}

/// A bump allocator; thread-safe, never frees before it is dropped. It
/// keeps two runs ([`Run`]) in chunks of their own, so that what a
/// search reads is not spread out by what it skips.
pub struct Arena {
    state: Mutex<State>,
    /// Bytes handed out (rounded up to [`ALIGN`]).
    used: AtomicUsize,
    /// Bytes of all chunks.
    reserved: AtomicUsize,
}

// SAFETY: the raw pointers in `State` point into chunks the arena owns; the
// mutex serializes every access to them, and the memory handed out is only
// touched by its callers.
unsafe impl Send for Arena {}
// SAFETY: as above; `alloc` takes `&self` and locks.
unsafe impl Sync for Arena {}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena {
            state: Mutex::new(State {
                hot: Bump::EMPTY,
                cold: Bump::EMPTY,
                chunks: Vec::new(),
            }),
            used: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
        }
    }

    /// `size` bytes (uninitialized) of the hot run aligned to [`ALIGN`],
    /// valid until the arena is dropped. Aborts, as the standard
    /// collections do, if the system is out of memory.
    pub fn alloc(&self, size: usize) -> NonNull<u8> {
        let mut s = self.state.lock();
        self.carve(&mut s, Run::Hot, size)
    }

    /// `hot` bytes of the hot run and `cold` of the cold one, under one
    /// lock (as [`Arena::alloc`]).
    pub fn alloc_pair(&self, hot: usize, cold: usize) -> (NonNull<u8>, NonNull<u8>) {
        let mut s = self.state.lock();
        let h = self.carve(&mut s, Run::Hot, hot);
        let c = self.carve(&mut s, Run::Cold, cold);
        (h, c)
    }

    fn carve(&self, s: &mut State, run: Run, size: usize) -> NonNull<u8> {
        let size = size.max(1).next_multiple_of(ALIGN);
        if size > s.bump(run).left {
            if size > MAX_CHUNK / 4 {
                // A large entry gets a chunk of its own; the current chunk's
                // free tail stays in use for the next small ones.
                let ptr = self.new_chunk(s, size);
                self.used.fetch_add(size, Ordering::Relaxed);
                return ptr;
            }
            let chunk = (s.bump(run).chunk_size * 2)
                .clamp(FIRST_CHUNK, MAX_CHUNK)
                .max(size);
            let ptr = self.new_chunk(s, chunk);
            *s.bump(run) = Bump {
                next: ptr.as_ptr(),
                left: chunk,
                chunk_size: chunk,
            };
        }
        let b = s.bump(run);
        let ptr = b.next;
        // SAFETY: `size <= left`, so the result stays inside the current chunk.
        b.next = unsafe { ptr.add(size) };
        b.left -= size;
        self.used.fetch_add(size, Ordering::Relaxed);
        // SAFETY: `ptr` points into a live chunk, so it is not null.
        unsafe { NonNull::new_unchecked(ptr) }
    }

    fn new_chunk(&self, s: &mut State, size: usize) -> NonNull<u8> {
        let chunk = if size == MAX_CHUNK {
            let (spare, left) = {
                let mut pool = SPARE.lock();
                (pool.pop(), pool.len())
            };
            if left < READY_AHEAD {
                nudge_filler();
            }
            spare.unwrap_or_else(|| Chunk::fresh(size))
        } else {
            Chunk::fresh(size)
        };
        let ptr = chunk.0.ptr();
        s.chunks.push(chunk);
        self.reserved.fetch_add(size, Ordering::Relaxed);
        ptr
    }

    /// Bytes handed out so far.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes the arena holds (its chunks).
    #[cfg(test)]
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let chunks = std::mem::take(&mut self.state.get_mut().chunks);
        let mut spare = SPARE.lock();
        for c in chunks {
            // Only full-size chunks are kept; the rest are freed.
            if c.0.size() == MAX_CHUNK && spare.len() < MAX_SPARE {
                spare.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_disjoint_and_stable() {
        let a = Arena::new();
        let mut got: Vec<(usize, usize)> = Vec::new();
        for i in 0..5000usize {
            let size = 1 + (i * 37) % 3000;
            let p = a.alloc(size);
            assert_eq!(p.as_ptr() as usize % ALIGN, 0);
            // SAFETY: `size` bytes were just handed out.
            unsafe { std::ptr::write_bytes(p.as_ptr(), (i % 251) as u8, size) };
            got.push((p.as_ptr() as usize, size));
        }
        // Every allocation still holds what was written into it.
        for (i, &(p, size)) in got.iter().enumerate() {
            // SAFETY: the arena is alive and the range was handed out.
            let s = unsafe { std::slice::from_raw_parts(p as *const u8, size) };
            assert!(
                s.iter().all(|&b| b == (i % 251) as u8),
                "allocation {i} overwritten"
            );
        }
        let mut sorted = got.clone();
        sorted.sort();
        for w in sorted.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "allocations overlap");
        }
        assert!(a.used() >= got.iter().map(|g| g.1).sum::<usize>());
        assert!(a.reserved() >= a.used());
    }

    /// The pool keeps at most [`MAX_SPARE`] chunks, all full-size and
    /// aligned to their size.
    fn assert_spare_pool_holds_only_full_chunks() {
        let spare = SPARE.lock();
        assert!(spare.len() <= MAX_SPARE);
        assert!(spare
            .iter()
            .all(|c| c.0.size() == MAX_CHUNK && c.0.align() == MAX_CHUNK));
    }

    #[test]
    fn full_chunks_of_a_dropped_arena_are_reused() {
        let a = Arena::new();
        // A whole full-size chunk, written over (a reused chunk is not zeroed).
        let p = a.alloc(MAX_CHUNK);
        // SAFETY: `MAX_CHUNK` bytes were just handed out.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0xAB, MAX_CHUNK) };
        drop(a);
        // Other tests may have taken its chunk already.
        assert_spare_pool_holds_only_full_chunks();
        let b = Arena::new();
        let q = b.alloc(MAX_CHUNK);
        assert_eq!(q.as_ptr() as usize % MAX_CHUNK, 0);
        // SAFETY: as above, for the new arena.
        unsafe { std::ptr::write_bytes(q.as_ptr(), 0x11, MAX_CHUNK) };
        assert_eq!(b.reserved(), MAX_CHUNK);
    }

    #[test]
    fn an_arena_short_of_spare_chunks_gets_faulted_in_ones_ready() {
        // Taking a full-size chunk from a short pool wakes the filler; the
        // arena stays alive, so its chunk does not go back to the pool.
        let a = Arena::new();
        a.alloc(MAX_CHUNK);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        // Other tests take chunks meanwhile: wake the filler until the pool
        // is seen full.
        while SPARE.lock().len() < READY_AHEAD {
            assert!(
                std::time::Instant::now() < deadline,
                "the spare pool never held {READY_AHEAD} chunks"
            );
            nudge_filler();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_spare_pool_holds_only_full_chunks();
        drop(a);
    }

    #[test]
    fn the_two_runs_fill_chunks_of_their_own() {
        let a = Arena::new();
        let mut hot = Vec::new();
        let mut cold = Vec::new();
        for _ in 0..100 {
            let (h, c) = a.alloc_pair(40, 1000);
            hot.push(h.as_ptr() as usize);
            cold.push(c.as_ptr() as usize);
        }
        // The hot run is unbroken by the cold one's allocations (its
        // first chunk holds all hundred), and the cold ones lie outside it.
        assert!(hot.windows(2).all(|w| w[1] == w[0] + 40));
        let hot_end = hot[0] + 100 * 40;
        assert!(cold.iter().all(|&c| c + 1000 <= hot[0] || c >= hot_end));
        assert_eq!(a.used(), 100 * 1040);
        // Hot allocations continue where the pairs' left off.
        let next = a.alloc(8).as_ptr() as usize;
        assert_eq!(next, hot[99] + 40);
    }

    #[test]
    fn small_arena_stays_small_and_large_entries_get_their_own_chunk() {
        let a = Arena::new();
        a.alloc(100);
        assert_eq!(a.reserved(), FIRST_CHUNK);
        a.alloc(MAX_CHUNK);
        assert_eq!(a.reserved(), FIRST_CHUNK + MAX_CHUNK);
        // The first chunk's tail is still used for small entries.
        a.alloc(100);
        assert_eq!(a.reserved(), FIRST_CHUNK + MAX_CHUNK);
    }
}
