//! An insert-only concurrent skiplist whose nodes live in an [`Arena`]
//! (as LevelDB's `SkipList` and RocksDB's `InlineSkipList`): a node is one
//! arena allocation holding its tower of next pointers, its key and a
//! short value; a long value lies apart, in the arena's cold run, so that
//! a search's nodes sit close together. Nodes are never removed, which is
//! what makes lock-free inserts simple: a node is linked bottom-up with one
//! compare-and-swap per level, and a reader that finds it at some level
//! finds it at every level below.
//!
//! Keys are ordered bytewise. Inserting a key that is already present keeps
//! the first value.
//!
//! Each thread remembers where its last insert into a list went (RocksDB's
//! splice): a key that lands right after it (a writer filling its own range
//! in order) is linked from there, comparing with a node or two per level
//! of its own height, instead of searching from the top (about 20 key
//! comparisons, most of them cache misses, at 64 MiB of 1 KB values).

use super::arena::{Arena, ALIGN};
use std::cell::Cell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

/// Enough levels for 4^12 = 16M entries at the usual cost per search.
pub const MAX_HEIGHT: usize = 12;
/// One node in this many reaches the next level up.
const BRANCHING: u64 = 4;

/// A node's header; its tower (`height` next pointers) and key follow it in
/// the same allocation, and so does its value if it is at most
/// [`INLINE_VALUE`] bytes.
#[repr(C)]
pub struct Node {
    key_len: u32,
    value_len: u32,
    height: u32,
    _pad: u32,
    /// The value: after the key, or in the arena's cold run.
    value: *const u8,
}

/// Longer values live apart from the nodes (the arena's cold run), so that
/// nodes sit close together: a search of a memtable of 1 KB values touched
/// a page and a line of its own for every node it compared with (about
/// twenty per insert at 64 MiB), most of them misses in the TLB and the
/// caches; with the values apart, the nodes of 64 MiB of such values fit
/// in a few MiB.
const INLINE_VALUE: usize = 64;

const HEADER: usize = std::mem::size_of::<Node>();
const _: () = assert!(HEADER.is_multiple_of(ALIGN) && std::mem::align_of::<Node>() <= ALIGN);

impl Node {
    /// Next pointer at `level` (< height).
    ///
    /// # Safety
    /// `self` must be a node built by [`SkipList::new_node`] and `level` below
    /// its height.
    unsafe fn next(&self, level: usize) -> &AtomicPtr<Node> {
        let base = (self as *const Node as *const u8).wrapping_add(HEADER);
        // SAFETY: the tower follows the header and has `height > level` slots,
        // each an initialized `AtomicPtr` (see the function contract).
        unsafe { &*(base as *const AtomicPtr<Node>).add(level) }
    }

    fn data(&self) -> *const u8 {
        (self as *const Node as *const u8).wrapping_add(HEADER + self.height as usize * 8)
    }

    pub fn key(&self) -> &[u8] {
        // SAFETY: `key_len` bytes of key were written after the tower when the
        // node was built, and the node lives as long as its arena.
        unsafe { std::slice::from_raw_parts(self.data(), self.key_len as usize) }
    }

    pub fn value(&self) -> &[u8] {
        // SAFETY: `value` points at `value_len` bytes written when the node
        // was built, in the node or in its arena, which outlives the node.
        unsafe { std::slice::from_raw_parts(self.value, self.value_len as usize) }
    }
}

fn random_height() -> usize {
    crate::xorshift::with(|rng| {
        let mut h = 1;
        while h < MAX_HEIGHT && rng.next_u64() % BRANCHING == 0 {
            h += 1;
        }
        h
    })
}

/// Where this thread's last insert into one list went: for each level, a
/// node of that list at least that tall whose key is at most the inserted
/// one (the inserted node itself on the levels it has, the head as the
/// lowest key). Its pointers are only followed while `list` names the
/// list being inserted into, which is then alive, and with it every node.
#[derive(Clone, Copy)]
struct Hint {
    /// [`SkipList::id`] of the list (0: none).
    list: u64,
    prev: [*const Node; MAX_HEIGHT],
}

thread_local! {
    static HINT: Cell<Hint> = const {
        Cell::new(Hint {
            list: 0,
            prev: [ptr::null(); MAX_HEIGHT],
        })
    };
}

/// Ids of lists, never reused, so a hint never outlives its list's identity.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The skiplist. Readers and writers may run concurrently from any threads.
pub struct SkipList {
    id: u64,
    arena: Arena,
    head: NonNull<Node>,
    /// Height of the tallest node linked so far (at least 1).
    max_height: AtomicUsize,
    len: AtomicUsize,
}

// SAFETY: nodes are only reached through atomics with acquire/release
// ordering, are immutable once published (but for their next pointers, which
// are atomics), and live in the arena the list owns.
unsafe impl Send for SkipList {}
// SAFETY: as above.
unsafe impl Sync for SkipList {}

impl Default for SkipList {
    fn default() -> Self {
        Self::new()
    }
}

impl SkipList {
    pub fn new() -> SkipList {
        let arena = Arena::new();
        let head = Self::new_node(&arena, MAX_HEIGHT, &[], &[]);
        SkipList {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            arena,
            head,
            max_height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
        }
    }

    /// Builds an unlinked node (null tower) in `arena`.
    fn new_node(arena: &Arena, height: usize, key: &[u8], value: &[u8]) -> NonNull<Node> {
        let (Ok(key_len), Ok(value_len)) = (u32::try_from(key.len()), u32::try_from(value.len()))
        else {
            // The engine caps keys and values far below 4 GiB.
            panic!("memtable entry of {} + {} bytes", key.len(), value.len());
        };
        let inline = value.len() <= INLINE_VALUE;
        let size = HEADER + height * 8 + key.len();
        let (p, value_at) = if inline {
            let p = arena.alloc(size + value.len());
            // SAFETY: the value's room follows the key's in the allocation.
            (p, unsafe { p.as_ptr().add(size) })
        } else {
            let (p, v) = arena.alloc_pair(size, value.len());
            (p, v.as_ptr())
        };
        let p = p.cast::<Node>();
        // SAFETY: `p` is a fresh, aligned allocation of `size` bytes: room for
        // the header, `height` tower slots and the key (and the value where
        // it is inline); `value_at` has room for the value.
        unsafe {
            p.as_ptr().write(Node {
                key_len,
                value_len,
                height: height as u32,
                _pad: 0,
                value: value_at,
            });
            let tower = (p.as_ptr() as *mut u8).add(HEADER) as *mut AtomicPtr<Node>;
            for i in 0..height {
                tower.add(i).write(AtomicPtr::new(ptr::null_mut()));
            }
            let data = (tower as *mut u8).add(height * 8);
            ptr::copy_nonoverlapping(key.as_ptr(), data, key.len());
            ptr::copy_nonoverlapping(value.as_ptr(), value_at, value.len());
        }
        p
    }

    fn head(&self) -> &Node {
        // SAFETY: the head is built in `new` and lives in the list's arena.
        unsafe { self.head.as_ref() }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of nodes (headers, towers, keys and values).
    pub fn used(&self) -> usize {
        self.arena.used()
    }

    /// The first node at or after `before` on `level` whose key is >= `key`,
    /// and the node before it (`before` itself if none is skipped).
    fn splice<'a>(
        &'a self,
        key: &[u8],
        mut before: &'a Node,
        level: usize,
    ) -> (&'a Node, *mut Node) {
        loop {
            // SAFETY: `before` is the head or a linked node, both at least
            // `level + 1` tall on the levels we search.
            let next = unsafe { before.next(level) }.load(Ordering::Acquire);
            // SAFETY: a non-null next pointer is a published node of this list.
            match unsafe { next.as_ref() } {
                Some(n) if n.key() < key => before = n,
                _ => return (before, next),
            }
        }
    }

    /// Inserts a copy of `key` and `value`. Returns false (and inserts
    /// nothing) if `key` is already present.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> bool {
        let height = random_height();
        let mut max = self.max_height.load(Ordering::Relaxed);
        while height > max {
            match self.max_height.compare_exchange_weak(
                max,
                height,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => max = height,
                Err(m) => max = m,
            }
        }
        // Built before the search, not after: the copy's stores (a kilobyte
        // of value is some twenty lines the core must own) then drain while
        // the search waits on its cache misses, instead of holding up the
        // first link's compare-and-swap, which waits for every store before
        // it (on x86 a locked instruction is a full barrier). Measured: the
        // CAS was two fifths of an insert's samples built after. A duplicate
        // (rare: a write replayed) leaves the node unused in the arena.
        let node = Self::new_node(&self.arena, height, key, value);
        let mut prev: [&Node; MAX_HEIGHT] = [self.head(); MAX_HEIGHT];
        let mut next: [*mut Node; MAX_HEIGHT] = [ptr::null_mut(); MAX_HEIGHT];
        let hint = HINT.get();
        if hint.list == self.id {
            // SAFETY: the hint names this list, which is alive (this is its
            // method): its pointers are nodes of it or its head (see `Hint`).
            prev = hint.prev.map(|p| unsafe { &*p });
        }
        if !self.hinted_splices(key, height, &mut prev, &mut next) {
            prev = [self.head(); MAX_HEIGHT];
            let mut x = self.head();
            for level in (0..max.max(height)).rev() {
                let (p, n) = self.splice(key, x, level);
                prev[level] = p;
                next[level] = n;
                x = p;
            }
        }
        let is_dup = |n: *mut Node| {
            // SAFETY: a non-null next pointer is a published node.
            unsafe { n.as_ref() }.is_some_and(|n| n.key() == key)
        };
        if is_dup(next[0]) {
            return false;
        }
        // SAFETY: `node` was just built with `height` levels.
        let node_ref = unsafe { node.as_ref() };
        for level in 0..height {
            loop {
                // SAFETY: `level < height` of `node` and of `prev[level]` (the
                // head is MAX_HEIGHT tall; a node found on `level` has it).
                unsafe { node_ref.next(level) }.store(next[level], Ordering::Relaxed);
                // SAFETY: as above, for `prev[level]`.
                let linked = unsafe { prev[level].next(level) }.compare_exchange(
                    next[level],
                    node.as_ptr(),
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                if linked.is_ok() {
                    break;
                }
                // Another insert got in between: search again from `prev`,
                // which still sorts before `key` (nothing is ever removed).
                let (p, n) = self.splice(key, prev[level], level);
                if level == 0 && is_dup(n) {
                    return false; // the same key raced in; the node stays unused
                }
                prev[level] = p;
                next[level] = n;
            }
        }
        self.len.fetch_add(1, Ordering::AcqRel);
        let mut hint = Hint {
            list: self.id,
            prev: prev.map(|p| p as *const Node),
        };
        hint.prev[..height].fill(node.as_ptr());
        HINT.set(hint);
        true
    }

    /// Fills `prev` and `next` below `height` from this thread's last
    /// insert (`prev` holds its hint, or the head everywhere), if `key`
    /// lands right after it on the bottom level: nothing lies between the
    /// hinted bottom node and `key`, so on every level the hinted node
    /// sorts before `key` and only nodes inserted meanwhile lie between.
    /// False (nothing to rely on) otherwise.
    fn hinted_splices<'a>(
        &'a self,
        key: &[u8],
        height: usize,
        prev: &mut [&'a Node; MAX_HEIGHT],
        next: &mut [*mut Node; MAX_HEIGHT],
    ) -> bool {
        let bottom = prev[0];
        if ptr::eq(bottom, self.head()) || bottom.key() >= key {
            return false;
        }
        // SAFETY: `bottom` is a node of this list (level 0 is every node's).
        let n = unsafe { bottom.next(0) }.load(Ordering::Acquire);
        // SAFETY: a non-null next pointer is a published node.
        if unsafe { n.as_ref() }.is_some_and(|n| n.key() < key) {
            return false;
        }
        next[0] = n;
        for level in 1..height {
            let (p, n) = self.splice(key, prev[level], level);
            prev[level] = p;
            next[level] = n;
        }
        true
    }

    /// The first node with a key >= `key`, if any.
    pub fn seek(&self, key: &[u8]) -> Option<&Node> {
        let mut x = self.head();
        let mut level = self.max_height.load(Ordering::Acquire) - 1;
        loop {
            let (p, n) = self.splice(key, x, level);
            if level == 0 {
                // SAFETY: a non-null next pointer is a published node.
                return unsafe { n.as_ref() };
            }
            x = p;
            level -= 1;
        }
    }

    /// The first node, if any.
    pub fn first(&self) -> Option<&Node> {
        // SAFETY: the head has every level; a non-null pointer is a node.
        unsafe { self.head().next(0).load(Ordering::Acquire).as_ref() }
    }

    /// The node after `n` (a node of this list), if any.
    pub fn next_of<'a>(&'a self, n: &'a Node) -> Option<&'a Node> {
        // SAFETY: every node has level 0; a non-null pointer is a node.
        unsafe { n.next(0).load(Ordering::Acquire).as_ref() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn collect(l: &SkipList) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut n = l.first();
        while let Some(x) = n {
            out.push(x.key().to_vec());
            n = l.next_of(x);
        }
        out
    }

    #[test]
    fn sorted_with_values_and_seek() {
        let l = SkipList::new();
        assert!(l.is_empty() && l.first().is_none() && l.seek(b"").is_none());
        let mut keys: Vec<u64> = (0..2000u64).map(|i| i.wrapping_mul(7919) % 10007).collect();
        keys.dedup();
        for k in &keys {
            assert!(l.insert(&k.to_be_bytes(), format!("v{k}").as_bytes()));
        }
        assert_eq!(l.len(), keys.len());
        let mut want: Vec<Vec<u8>> = keys.iter().map(|k| k.to_be_bytes().to_vec()).collect();
        want.sort();
        assert_eq!(collect(&l), want);
        for k in [0u64, 5, 10006, 10007, 4321] {
            let got = l.seek(&k.to_be_bytes()).map(|n| n.key().to_vec());
            let exp = want
                .iter()
                .find(|w| w.as_slice() >= &k.to_be_bytes()[..])
                .cloned();
            assert_eq!(got, exp, "seek {k}");
            if let Some(n) = l.seek(&k.to_be_bytes()) {
                let kk = u64::from_be_bytes(n.key().try_into().unwrap());
                assert_eq!(n.value(), format!("v{kk}").as_bytes());
            }
        }
    }

    #[test]
    fn duplicate_keeps_first_value() {
        let l = SkipList::new();
        assert!(l.insert(b"k", b"one"));
        assert!(!l.insert(b"k", b"two"));
        assert_eq!(l.len(), 1);
        assert_eq!(
            l.seek(b"k").map(|n| n.value().to_vec()),
            Some(b"one".to_vec())
        );
    }

    #[test]
    fn empty_keys_values_and_large_values() {
        let l = SkipList::new();
        assert!(l.insert(b"", b""));
        let big = vec![9u8; 2 << 20];
        assert!(l.insert(b"big", &big));
        assert_eq!(l.first().map(|n| n.key().len()), Some(0));
        assert_eq!(l.seek(b"b").map(|n| n.value().len()), Some(big.len()));
    }

    #[test]
    fn nodes_of_long_values_sit_together_and_short_values_inline() {
        let l = SkipList::new();
        let long = vec![5u8; 1000];
        for i in 0..1000u32 {
            let v: &[u8] = if i % 2 == 0 { &long } else { b"short" };
            assert!(l.insert(&i.to_be_bytes(), v));
        }
        let mut nodes = Vec::new();
        let mut n = l.first();
        while let Some(x) = n {
            let want: &[u8] = if u32::from_be_bytes(x.key().try_into().unwrap()) % 2 == 0 {
                &long
            } else {
                b"short"
            };
            assert_eq!(x.value(), want);
            let at = x as *const Node as usize;
            let value_at = x.value().as_ptr() as usize;
            let inline = value_at > at && value_at < at + 128;
            assert_eq!(inline, x.value().len() <= INLINE_VALUE);
            nodes.push(at);
            n = l.next_of(x);
        }
        assert_eq!(nodes.len(), 1000);
        // A thousand nodes without their kilobyte values lie on a few
        // dozen pages (the values take some 250).
        let mut pages: Vec<usize> = nodes.iter().map(|a| a / 4096).collect();
        pages.sort_unstable();
        pages.dedup();
        assert!(pages.len() < 40, "nodes on {} pages", pages.len());
    }

    #[test]
    fn hinted_inserts_into_several_lists_stay_sorted() {
        // One thread alternates between lists, goes up and down, and
        // meets a new list after an old one is dropped: every hint it
        // keeps must be for the list it inserts into.
        let a = SkipList::new();
        let mut b = SkipList::new();
        let mut want_a = Vec::new();
        let mut want_b = Vec::new();
        for i in 0..3000u64 {
            // Ascending runs of 50 that restart lower (a hint that misses).
            let k = ((i % 50) + (i / 50) * 37 % 1000 * 100).to_be_bytes();
            if a.insert(&k, b"a") {
                want_a.push(k.to_vec());
            }
            if i == 1500 {
                b = SkipList::new();
                want_b.clear();
            }
            let kb = (u64::MAX - i).to_be_bytes();
            assert!(b.insert(&kb, b"b"));
            want_b.push(kb.to_vec());
        }
        want_a.sort();
        want_a.dedup();
        want_b.sort();
        assert_eq!(collect(&a), want_a);
        assert_eq!(collect(&b), want_b);
        // A key equal to the hinted one is a duplicate, found from the hint.
        let last = want_a.last().unwrap().clone();
        assert!(!a.insert(&last, b"again"));
        assert_eq!(a.len(), want_a.len());
    }

    #[test]
    fn concurrent_inserts_and_readers() {
        let l = Arc::new(SkipList::new());
        let writers: Vec<_> = (0..4u64)
            .map(|w| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for i in 0..3000u64 {
                        // Interleaved key ranges, so writers race for the same spots.
                        let k = (i * 4 + w).to_be_bytes();
                        assert!(l.insert(&k, &k));
                    }
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let mut prev: Option<Vec<u8>> = None;
                        let mut n = l.first();
                        while let Some(x) = n {
                            assert_eq!(x.key(), x.value());
                            if let Some(p) = &prev {
                                assert!(p.as_slice() < x.key(), "out of order");
                            }
                            prev = Some(x.key().to_vec());
                            n = l.next_of(x);
                        }
                    }
                })
            })
            .collect();
        for h in writers.into_iter().chain(readers) {
            h.join().unwrap();
        }
        assert_eq!(l.len(), 12000);
        let all = collect(&l);
        assert_eq!(all.len(), 12000);
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }
}
