//! Rows read for a table listing but not sent yet.
//!
//! A reply holds a few hundred rows; the store is scanned in larger batches,
//! and the rows a reply had no room for wait here for the `readdir` that
//! goes on from them (the kernel asks for the next reply as soon as it has
//! copied this one), instead of being scanned again. They are a snapshot a
//! moment old, as a listing from an open directory is: rows made or removed
//! since may or may not show, as POSIX allows for entries changed after
//! `opendir`; after [`FRESH`] they are dropped and the store scanned again.

use super::Listing;
use ahash::AHashMap as HashMap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long read rows may wait for their listing.
const FRESH: Duration = Duration::from_secs(1);
/// Listings with rows waiting, at most (each holds one scan batch).
const CAPACITY: usize = 256;

/// Rows of one listing that follow a place in it.
pub struct Ahead {
    /// The entry number of `rows[0]`.
    pub ordinal: u64,
    pub rows: VecDeque<Vec<u8>>,
    /// The table's listing ends with these rows.
    pub exhausted: bool,
    read: Instant,
}

impl Ahead {
    pub fn new(ordinal: u64, rows: VecDeque<Vec<u8>>, exhausted: bool) -> Ahead {
        Ahead {
            ordinal,
            rows,
            exhausted,
            read: Instant::now(),
        }
    }
}

/// See the module comment.
#[derive(Default)]
pub(super) struct Readahead {
    dirs: Mutex<HashMap<u64, Ahead>>,
}

impl Listing {
    /// The rows of directory `ino` from entry `ordinal` on, if they were read
    /// lately.
    pub fn take_ahead(&self, ino: u64, ordinal: u64) -> Option<Ahead> {
        let a = self.readahead.dirs.lock().remove(&ino)?;
        (a.ordinal == ordinal && a.read.elapsed() < FRESH && !a.rows.is_empty()).then_some(a)
    }

    /// Keeps `ahead` for the next reply of directory `ino`.
    pub fn put_ahead(&self, ino: u64, ahead: Ahead) {
        if ahead.rows.is_empty() {
            return;
        }
        let mut g = self.readahead.dirs.lock();
        if g.len() >= CAPACITY && !g.contains_key(&ino) {
            g.retain(|_, a| a.read.elapsed() < FRESH);
            if g.len() >= CAPACITY {
                g.clear();
            }
        }
        g.insert(ino, ahead);
    }

    /// Drops whatever waits for directory `ino` (its rows changed).
    pub fn forget_ahead(&self, ino: u64) {
        self.readahead.dirs.lock().remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(names: &[&str]) -> VecDeque<Vec<u8>> {
        names.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn rows_wait_for_the_reply_that_goes_on_from_them() {
        let r = Listing::default();
        r.put_ahead(7, Ahead::new(10, rows(&["k", "l"]), true));
        // Another place in the listing: they are dropped.
        assert!(r.take_ahead(7, 11).is_none());
        assert!(r.take_ahead(7, 10).is_none());
        r.put_ahead(7, Ahead::new(10, rows(&["k", "l"]), false));
        let a = r.take_ahead(7, 10).unwrap();
        assert_eq!(a.rows, rows(&["k", "l"]));
        assert!(!a.exhausted);
        // Taken once.
        assert!(r.take_ahead(7, 10).is_none());
        r.put_ahead(7, Ahead::new(10, rows(&["k"]), false));
        r.forget_ahead(7);
        assert!(r.take_ahead(7, 10).is_none());
    }

    #[test]
    fn stale_rows_are_not_used() {
        let r = Listing::default();
        let mut a = Ahead::new(0, rows(&["a"]), false);
        a.read -= FRESH;
        r.put_ahead(1, a);
        assert!(r.take_ahead(1, 0).is_none());
    }
}
