//! Directory offsets that need no open directory.
//!
//! The kernel sends OPENDIR and RELEASEDIR around every listing unless the
//! daemon declines them (FUSE_NO_OPENDIR_SUPPORT): a tree walk then costs
//! two requests fewer per directory, which is most of a walk's time, since
//! each request is a round trip through the scheduler. Without an open
//! directory a listing's place is kept here instead: the entry numbered `i`
//! (after the fixed entries) gets offset [`FIRST`] + `i`, and the newest
//! [`CAPACITY`] offsets remember the directory and the entry's name, so the
//! next `readdir` continues after that name. The offset of a listing's last
//! entry carries [`LAST`], so the call that only confirms the end costs
//! nothing.
//!
//! A forgotten offset still says where it was: declining OPENDIR also makes
//! the kernel cache listings, and when it drops a cached page (memory
//! pressure, an invalidation) it asks to go on from an offset of any age.
//! The listing then continues after the entry with that number, counted
//! from the start.

use ahash::AHashMap as HashMap;
use parking_lot::Mutex;
use std::collections::VecDeque;

use super::Listing;

/// Set in the offset of a listing's last entry.
pub const LAST: u64 = 1 << 62;
/// The offset of the first entry after the fixed ones (below: `.`, `..`
/// and a table's special files).
pub const FIRST: u64 = 16;
/// Offsets remembered; a reply holds at most a few hundred entries. (Small
/// in unit tests, so that they forget offsets with few entries.)
const CAPACITY: usize = if cfg!(test) { 256 } else { 1 << 16 };

/// Names of consecutive entries, as a reply places them: one buffer for
/// them all (a listing of a big table places thousands a reply).
#[derive(Debug, Default)]
pub struct PlacedNames {
    bytes: Vec<u8>,
    /// Where each name ends in `bytes`.
    ends: Vec<usize>,
}

impl PlacedNames {
    pub fn push(&mut self, name: &[u8]) {
        self.bytes.extend_from_slice(name);
        self.ends.push(self.bytes.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Name `i`.
    fn get(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |j| self.ends[j]);
        &self.bytes[start..self.ends[i]]
    }

    pub fn last(&self) -> Option<&[u8]> {
        self.len().checked_sub(1).map(|i| self.get(i))
    }

    /// Keeps the first `n` names.
    fn truncate(&mut self, n: usize) {
        self.ends.truncate(n);
        self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
    }

    /// Drops the first `n` names.
    fn drain_front(&mut self, n: usize) {
        let cut = n.checked_sub(1).map_or(0, |j| self.ends[j]);
        self.bytes.drain(..cut);
        self.ends.drain(..n);
        for e in &mut self.ends {
            *e -= cut;
        }
    }

    fn append(&mut self, other: &PlacedNames) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|e| base + e));
    }
}

/// Runs this short join the run before them (single names, a small
/// directory's entries) rather than start one of their own.
const JOIN_BELOW: usize = 16;

/// The names of a directory's entries numbered `first + skip` on.
struct Run {
    first: u64,
    /// Names forgotten from the front, not yet cut from the buffer.
    skip: usize,
    names: PlacedNames,
}

impl Run {
    /// The number of its first name.
    fn start(&self) -> u64 {
        self.first + self.skip as u64
    }

    /// The number after its last name.
    fn end(&self) -> u64 {
        self.first + self.names.len() as u64
    }

    fn len(&self) -> usize {
        self.names.len() - self.skip
    }

    fn get(&self, ordinal: u64) -> Option<&[u8]> {
        (self.start()..self.end())
            .contains(&ordinal)
            .then(|| self.names.get((ordinal - self.first) as usize))
    }

    /// Forgets the names from number `ordinal` on; how many it forgot.
    fn truncate_at(&mut self, ordinal: u64) -> usize {
        let keep = ordinal.saturating_sub(self.first) as usize;
        let before = self.len();
        self.names.truncate(keep.max(self.skip));
        before - self.len()
    }

    /// Forgets its first `n` names (fewer than it holds); the buffer is
    /// cut once half of it is forgotten.
    fn forget_front(&mut self, n: usize) {
        self.skip += n;
        if self.skip * 2 > self.names.len() {
            self.names.drain_front(self.skip);
            self.first += self.skip as u64;
            self.skip = 0;
        }
    }
}

/// The names of a directory's entries placed lately, in runs by entry
/// number: in increasing order, since a listing places its entries in order
/// (a new listing from an earlier entry drops the ones after it).
type Placed = VecDeque<Run>;

#[derive(Default)]
struct Inner {
    dirs: HashMap<u64, Placed>,
    /// Which directory each remembered name belongs to, oldest first, in
    /// runs: (directory, names).
    order: VecDeque<(u64, usize)>,
    total: usize,
}

impl Inner {
    /// Forgets the oldest names until at most [`CAPACITY`] are kept.
    fn evict(&mut self) {
        while self.total > CAPACITY {
            let Some((ino, n)) = self.order.pop_front() else {
                return;
            };
            let drop = n.min(self.total - CAPACITY);
            if drop < n {
                self.order.push_front((ino, n - drop));
            }
            if let Some(placed) = self.dirs.get_mut(&ino) {
                // Fewer may be left there: a later listing replaced them.
                let mut gone = 0;
                while let Some(r) = placed.front_mut() {
                    let k = r.len().min(drop - gone);
                    if k == r.len() {
                        placed.pop_front();
                    } else {
                        r.forget_front(k);
                    }
                    gone += k;
                    if gone == drop {
                        break;
                    }
                }
                self.total -= gone;
                if placed.is_empty() {
                    self.dirs.remove(&ino);
                }
            }
        }
    }
}

/// See the module comment.
#[derive(Default)]
pub(super) struct Cursors {
    inner: Mutex<Inner>,
}

/// Where a `readdir` of an unopened directory goes on from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    /// The number of the entry listed last (the next one is `ordinal + 1`).
    pub ordinal: u64,
    /// Its name, unless the offset was forgotten.
    pub name: Option<Vec<u8>>,
}

/// The offset of entry number `ordinal` of a listing (`last`: the listing
/// ends with it).
pub fn offset_of(ordinal: u64, last: bool) -> u64 {
    (FIRST + ordinal) | if last { LAST } else { 0 }
}

impl Listing {
    /// The offset of entry number `ordinal` of directory `ino`, named
    /// `name` (`last`: the listing ends with it).
    pub fn place(&self, ino: u64, ordinal: u64, name: &[u8], last: bool) -> u64 {
        if !last {
            let mut one = PlacedNames::default();
            one.push(name);
            self.place_run(ino, ordinal, one);
        }
        offset_of(ordinal, last)
    }

    /// Remembers the names of directory `ino`'s entries numbered from
    /// `first` on, in order (none of them its last: see [`offset_of`]).
    pub fn place_run(&self, ino: u64, first: u64, names: PlacedNames) {
        let mut g = self.cursors.inner.lock();
        let placed = g.dirs.entry(ino).or_default();
        // A listing started again (or two interleave): keep order.
        let mut dropped = 0;
        while let Some(r) = placed.back_mut() {
            if r.start() >= first {
                dropped += r.len();
                placed.pop_back();
            } else {
                dropped += r.truncate_at(first);
                break;
            }
        }
        let added = names.len();
        if !names.is_empty() {
            match placed.back_mut() {
                Some(r) if r.end() == first && added < JOIN_BELOW => r.names.append(&names),
                _ => placed.push_back(Run {
                    first,
                    skip: 0,
                    names,
                }),
            }
        }
        if added == 0 && dropped == 0 {
            return;
        }
        g.total = g.total + added - dropped;
        match g.order.back_mut() {
            Some((i, n)) if *i == ino => *n += added,
            _ if added > 0 => g.order.push_back((ino, added)),
            _ => {}
        }
        g.evict();
    }

    /// Where a listing of `ino` goes on from `offset`; `None` for an offset
    /// before the numbered entries.
    pub fn resume(&self, ino: u64, offset: u64) -> Option<Resume> {
        let off = offset & !LAST;
        let ordinal = off.checked_sub(FIRST)?;
        let g = self.cursors.inner.lock();
        let name = g.dirs.get(&ino).and_then(|placed| {
            let i = placed.partition_point(|r| r.end() <= ordinal);
            placed.get(i)?.get(ordinal).map(<[u8]>::to_vec)
        });
        Some(Resume { ordinal, name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_number_their_entry_and_name_it() {
        let c = Listing::default();
        let a = c.place(5, 0, b"a", false);
        let b = c.place(5, 1, b"b", false);
        let z = c.place(6, 7, b"z", true);
        assert_eq!((a, b), (FIRST, FIRST + 1));
        let at = |ino, off| c.resume(ino, off).unwrap();
        assert_eq!(at(5, a).name.unwrap(), b"a");
        assert_eq!(at(5, b).ordinal, 1);
        assert_eq!(at(5, b).name.unwrap(), b"b");
        // Another directory's offset names nothing here.
        assert_eq!(at(6, a).name, None);
        assert!(z & LAST != 0);
        assert_eq!(at(6, z).ordinal, 7);
        assert!(c.resume(5, FIRST - 1).is_none());
    }

    #[test]
    fn a_forgotten_offset_still_gives_its_entry_number() {
        let c = Listing::default();
        let first = c.place(1, 3, b"x", false);
        for i in 0..CAPACITY as u64 {
            c.place(2, i, b"y", false);
        }
        assert_eq!(
            c.resume(1, first),
            Some(Resume {
                ordinal: 3,
                name: None
            })
        );
        assert_eq!(c.cursors.inner.lock().total, CAPACITY);
    }

    #[test]
    fn a_listing_started_again_replaces_the_names_after_its_start() {
        let c = Listing::default();
        for (i, n) in [b"a", b"b", b"c"].iter().enumerate() {
            c.place(9, i as u64, *n, false);
        }
        // Listed again from entry 1, where a new name now sorts.
        c.place(9, 1, b"a2", false);
        let name = |o| c.resume(9, FIRST + o).and_then(|r| r.name);
        assert_eq!(name(0).unwrap(), b"a");
        assert_eq!(name(1).unwrap(), b"a2");
        assert_eq!(name(2), None);
        assert_eq!(c.cursors.inner.lock().total, 2);
        // Eviction forgets the oldest first, whatever the directory.
        for i in 0..CAPACITY as u64 - 1 {
            c.place(10, i, b"y", false);
        }
        assert_eq!(name(0), None);
        assert_eq!(name(1).unwrap(), b"a2");
        assert_eq!(c.cursors.inner.lock().total, CAPACITY);
    }

    #[test]
    fn runs_of_names_resume_at_each_and_forget_from_the_front() {
        let c = Listing::default();
        let run = |names: &[&[u8]]| {
            let mut p = PlacedNames::default();
            for n in names {
                p.push(n);
            }
            p
        };
        // Two replies' runs, then one reply started again inside the first.
        c.place_run(4, 0, run(&[b"a", b"bb", b"ccc"]));
        c.place_run(4, 3, run(&[b"d", b"e"]));
        let name = |o: u64| c.resume(4, FIRST + o).and_then(|r| r.name);
        assert_eq!(name(1).unwrap(), b"bb");
        assert_eq!(name(4).unwrap(), b"e");
        assert_eq!(name(5), None);
        c.place_run(4, 2, run(&[b"c2"]));
        assert_eq!(name(1).unwrap(), b"bb");
        assert_eq!(name(2).unwrap(), b"c2");
        assert_eq!(name(3), None);
        assert_eq!(c.cursors.inner.lock().total, 3);
        // Eviction takes the oldest names a few at a time, from the front.
        let mut big = PlacedNames::default();
        for _ in 0..CAPACITY - 2 {
            big.push(b"y");
        }
        c.place_run(5, 0, big);
        assert_eq!(c.cursors.inner.lock().total, CAPACITY);
        assert_eq!(name(0), None);
        assert_eq!(name(1).unwrap(), b"bb");
        c.place(5, CAPACITY as u64 - 2, b"z", false);
        c.place(5, CAPACITY as u64 - 1, b"z", false);
        assert_eq!(name(1), None);
        assert_eq!(name(2), None);
        assert_eq!(c.resume(5, FIRST).unwrap().name.unwrap(), b"y");
        assert_eq!(
            c.resume(5, FIRST + CAPACITY as u64 - 2)
                .unwrap()
                .name
                .unwrap(),
            b"z"
        );
        assert_eq!(c.cursors.inner.lock().total, CAPACITY);
        // Forgetting most of a run cuts its buffer; the rest still resolve.
        let half = CAPACITY as u64 / 2 + 10;
        for i in 0..half {
            c.place(6, i, b"w", false);
        }
        assert_eq!(c.resume(5, FIRST + half - 1).unwrap().name, None);
        assert_eq!(c.resume(5, FIRST + half).unwrap().name.unwrap(), b"y");
        assert_eq!(
            c.resume(5, FIRST + CAPACITY as u64 - 1)
                .unwrap()
                .name
                .unwrap(),
            b"z"
        );
        assert_eq!(c.resume(6, FIRST + half - 1).unwrap().name.unwrap(), b"w");
        assert_eq!(c.cursors.inner.lock().total, CAPACITY);
    }
}
