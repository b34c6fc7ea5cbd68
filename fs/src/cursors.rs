//! Directory offsets that need no open directory.
//!
//! The kernel sends OPENDIR and RELEASEDIR around every listing unless the
//! daemon declines them (FUSE_NO_OPENDIR_SUPPORT): a tree walk then costs
//! two requests fewer per directory, which is most of a walk's time, since
//! each request is a round trip through the scheduler. Without an open
//! directory a listing's place is kept here instead: every entry listed gets
//! an offset of its own, unique in the process, naming the directory and the
//! entry's name; the next `readdir` continues after that name. The offset of
//! a listing's last entry carries [`LAST`], so the call that only confirms
//! the end costs nothing. Only the newest [`CAPACITY`] offsets are kept (a
//! reader far behind gets EINVAL, as `seekdir` to a forgotten offset would).

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};

/// Set in the offset of a listing's last entry.
pub const LAST: u64 = 1 << 62;
/// The first offset handed out (below: `.`, `..` and fixed entries).
const FIRST: u64 = 16;
/// Offsets remembered; a reply holds at most a few hundred entries.
const CAPACITY: usize = 1 << 16;

#[derive(Default)]
struct Inner {
    next: u64,
    places: HashMap<u64, (u64, Vec<u8>)>,
    order: VecDeque<u64>,
}

/// See the module comment.
#[derive(Default)]
pub struct Cursors {
    inner: Mutex<Inner>,
}

impl Cursors {
    /// A fresh offset for entry `name` of directory `ino` (`last`: the
    /// listing ends with it).
    pub fn place(&self, ino: u64, name: &[u8], last: bool) -> u64 {
        let mut g = self.inner.lock();
        let off = g.next.max(FIRST);
        g.next = off + 1;
        if !last {
            g.places.insert(off, (ino, name.to_vec()));
            g.order.push_back(off);
            while g.order.len() > CAPACITY {
                if let Some(old) = g.order.pop_front() {
                    g.places.remove(&old);
                }
            }
        }
        off | if last { LAST } else { 0 }
    }

    /// The name after which a listing of `ino` continues from `offset`.
    pub fn name_at(&self, ino: u64, offset: u64) -> Option<Vec<u8>> {
        let g = self.inner.lock();
        match g.places.get(&offset) {
            Some((i, name)) if *i == ino => Some(name.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_unique_and_name_their_entry() {
        let c = Cursors::default();
        let a = c.place(5, b"a", false);
        let b = c.place(5, b"b", false);
        let z = c.place(6, b"z", true);
        assert!(a >= FIRST && b > a);
        assert_eq!(c.name_at(5, a).unwrap(), b"a");
        assert_eq!(c.name_at(5, b).unwrap(), b"b");
        // Another directory's offset is not ours.
        assert!(c.name_at(6, a).is_none());
        assert!(z & LAST != 0);
        assert!(c.name_at(6, z).is_none());
    }

    #[test]
    fn old_offsets_are_forgotten() {
        let c = Cursors::default();
        let first = c.place(1, b"x", false);
        for _ in 0..CAPACITY {
            c.place(1, b"y", false);
        }
        assert!(c.name_at(1, first).is_none());
    }
}
