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

/// The names of a directory's entries placed lately, by entry number: in
/// increasing order, since a listing places its entries in order (a new
/// listing from an earlier entry drops the ones after it).
type Placed = VecDeque<(u64, Box<[u8]>)>;

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
                let gone = drop.min(placed.len());
                placed.drain(..gone);
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
            self.place_run(ino, ordinal, [Box::from(name)]);
        }
        offset_of(ordinal, last)
    }

    /// Remembers the names of directory `ino`'s entries numbered from
    /// `first` on, in order (none of them its last: see [`offset_of`]).
    pub fn place_run(&self, ino: u64, first: u64, names: impl IntoIterator<Item = Box<[u8]>>) {
        let mut g = self.cursors.inner.lock();
        let placed = g.dirs.entry(ino).or_default();
        // A listing started again (or two interleave): keep order.
        let mut dropped = 0;
        while placed.back().is_some_and(|(o, _)| *o >= first) {
            placed.pop_back();
            dropped += 1;
        }
        let before = placed.len();
        placed.extend((first..).zip(names));
        let added = placed.len() - before;
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
            let i = placed.partition_point(|(o, _)| *o < ordinal);
            placed
                .get(i)
                .filter(|(o, _)| *o == ordinal)
                .map(|(_, n)| n.to_vec())
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
}
