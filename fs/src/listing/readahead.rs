//! Rows read for a table listing but not sent yet.
//!
//! A reply holds a few hundred to a few thousand rows; the store is scanned
//! in larger batches, and the rows a reply had no room for wait here for the
//! `readdir` that goes on from them (the kernel asks for the next reply as
//! soon as it has copied this one), instead of being scanned again. They
//! are a snapshot a moment old, as a listing from an open directory is: rows
//! made or removed since may or may not show, as POSIX allows for entries
//! changed after `opendir`; after [`FRESH`] they are dropped and the store
//! scanned again.
//!
//! A listing that goes on also has its next reply's rows read while the
//! kernel and the reader take this one in (a *fill*): the scan, most of what
//! a reply costs the daemon, then runs beside the reader instead of between
//! its `getdents` calls. The reply that goes on waits for a fill in flight
//! (up to [`FILL_WAIT`]) rather than scanning the same rows again.

use super::Listing;
use crate::node::{Name, View};
use ahash::AHashMap as HashMap;
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long read rows may wait for their listing.
const FRESH: Duration = Duration::from_secs(1);
/// Listings with rows waiting, at most (each holds one scan batch).
const CAPACITY: usize = 256;
/// Rows one fill reads at most.
const MAX_FILL: usize = 16 << 10;
/// How long a reply waits for a fill in flight before it scans itself
/// (long in unit tests, which must not depend on the machine's load).
const FILL_WAIT: Duration = Duration::from_millis(if cfg!(test) { 20_000 } else { 200 });

/// A row of a table listing, ready to send (a fill makes them whole, so
/// that the reply only copies them out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRow {
    pub row: Vec<u8>,
    /// Its name in the table directory, where that is not the row key
    /// itself (most keys are listed as they are: no copy of them is made).
    pub escaped: Option<Vec<u8>>,
    /// Its inode number.
    pub ino: u64,
}

impl ListedRow {
    /// The row `row`, numbered `ino`.
    pub fn new(row: Vec<u8>, ino: u64) -> ListedRow {
        let escaped = (!crate::names::is_own_name(&row)).then(|| crate::names::display_name(&row));
        ListedRow { row, escaped, ino }
    }

    /// Its name in the table directory.
    pub fn name(&self) -> &[u8] {
        self.escaped.as_deref().unwrap_or(&self.row)
    }
}

/// Rows of one listing that follow a place in it.
pub struct Ahead {
    /// The entry number of `rows[0]`.
    pub ordinal: u64,
    pub rows: VecDeque<ListedRow>,
    /// The table's listing ends with these rows.
    pub exhausted: bool,
    read: Instant,
    /// What a fill would read next, until one starts.
    plan: Option<Fill>,
    /// A fill of these rows is in flight (its number).
    filling: Option<u64>,
}

/// A fill to run: `want` rows of `table` after `after` (see the module
/// comment), for the rows waiting under number `id`.
pub struct Fill {
    pub table: Name,
    pub view: View,
    pub after: Vec<u8>,
    pub want: usize,
    id: u64,
}

impl Ahead {
    pub fn new(ordinal: u64, rows: VecDeque<ListedRow>, exhausted: bool) -> Ahead {
        Ahead {
            ordinal,
            rows,
            exhausted,
            read: Instant::now(),
            plan: None,
            filling: None,
        }
    }

    /// Asks for a fill of about `want` more rows of `table` after the last
    /// waiting one, unless the listing ends with them.
    pub fn with_fill(mut self, table: Name, view: View, want: usize) -> Ahead {
        if let (false, Some(last)) = (self.exhausted, self.rows.back()) {
            self.plan = Some(Fill {
                table,
                view,
                after: last.row.clone(),
                want: want.clamp(1, MAX_FILL),
                id: 0,
            });
        }
        self
    }
}

/// See the module comment.
#[derive(Default)]
pub(super) struct Readahead {
    dirs: Mutex<HashMap<u64, Ahead>>,
    /// Signalled when a fill ends.
    filled: Condvar,
    /// Numbers fills, so that one whose rows were taken or dropped meanwhile
    /// adds nothing.
    next_fill: AtomicU64,
}

impl Listing {
    /// The rows of directory `ino` from entry `ordinal` on, if they were read
    /// lately; waits for a fill of them in flight.
    pub fn take_ahead(&self, ino: u64, ordinal: u64) -> Option<Ahead> {
        let r = &self.readahead;
        let mut g = r.dirs.lock();
        let deadline = Instant::now() + FILL_WAIT;
        while g
            .get(&ino)
            .is_some_and(|a| a.filling.is_some() && a.ordinal == ordinal)
        {
            if r.filled.wait_until(&mut g, deadline).timed_out() {
                break;
            }
        }
        let a = g.remove(&ino)?;
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

    /// The fill the rows waiting for directory `ino` asked for, now in
    /// flight; `None` if they asked for none or one runs already.
    pub fn start_fill(&self, ino: u64) -> Option<Fill> {
        let mut g = self.readahead.dirs.lock();
        let a = g.get_mut(&ino)?;
        let mut fill = a.plan.take()?;
        fill.id = self.readahead.next_fill.fetch_add(1, Ordering::Relaxed);
        a.filling = Some(fill.id);
        Some(fill)
    }

    /// Ends `fill`: its rows (`None`: it failed) join the ones waiting, if
    /// those are still there.
    pub fn finish_fill(&self, ino: u64, fill: &Fill, rows: Option<(VecDeque<ListedRow>, bool)>) {
        let mut g = self.readahead.dirs.lock();
        if let Some(a) = g.get_mut(&ino).filter(|a| a.filling == Some(fill.id)) {
            a.filling = None;
            if let Some((rows, exhausted)) = rows {
                a.rows.extend(rows);
                a.exhausted = exhausted;
            }
        }
        drop(g);
        self.readahead.filled.notify_all();
    }

    /// Drops whatever waits for directory `ino` (its rows changed).
    pub fn forget_ahead(&self, ino: u64) {
        self.readahead.dirs.lock().remove(&ino);
        self.readahead.filled.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(names: &[&str]) -> VecDeque<ListedRow> {
        names
            .iter()
            .map(|n| ListedRow::new(n.as_bytes().to_vec(), n.len() as u64))
            .collect()
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

    /// Rows waiting at entry `ordinal` that ask for a fill of `want` more.
    fn asking(ordinal: u64, names: &[&str], exhausted: bool, want: usize) -> Ahead {
        Ahead::new(ordinal, rows(names), exhausted).with_fill("t".into(), View::Now, want)
    }

    #[test]
    fn a_fill_goes_on_after_the_waiting_rows() {
        let r = Listing::default();
        // A listing that ends with its waiting rows asks for none.
        r.put_ahead(1, asking(0, &["a"], true, 5));
        assert!(r.start_fill(1).is_none());
        r.put_ahead(1, asking(4, &["a", "b"], false, 5));
        let fill = r.start_fill(1).unwrap();
        assert_eq!(
            (&*fill.table, fill.after.as_slice(), fill.want),
            ("t", &b"b"[..], 5)
        );
        // One at a time.
        assert!(r.start_fill(1).is_none());
        r.finish_fill(1, &fill, Some((rows(&["c", "d"]), true)));
        let a = r.take_ahead(1, 4).unwrap();
        assert_eq!(a.rows, rows(&["a", "b", "c", "d"]));
        assert!(a.exhausted);
    }

    #[test]
    fn a_fill_adds_nothing_to_rows_taken_or_dropped_meanwhile() {
        let r = Listing::default();
        r.put_ahead(1, asking(0, &["a"], false, 5));
        let fill = r.start_fill(1).unwrap();
        r.forget_ahead(1);
        // Newer rows of another listing of the same directory.
        r.put_ahead(1, Ahead::new(0, rows(&["x"]), false));
        r.finish_fill(1, &fill, Some((rows(&["b"]), false)));
        assert_eq!(r.take_ahead(1, 0).unwrap().rows, rows(&["x"]));
        // A failed fill leaves the rows as they were.
        r.put_ahead(2, asking(0, &["a"], false, 5));
        let fill = r.start_fill(2).unwrap();
        r.finish_fill(2, &fill, None);
        let a = r.take_ahead(2, 0).unwrap();
        assert_eq!(a.rows, rows(&["a"]));
        assert!(!a.exhausted);
    }

    #[test]
    fn a_reply_waits_for_the_fill_in_flight() {
        let r = std::sync::Arc::new(Listing::default());
        r.put_ahead(3, asking(0, &["a"], false, 1));
        let fill = r.start_fill(3).unwrap();
        let r2 = r.clone();
        let filler = std::thread::spawn(move || {
            r2.finish_fill(3, &fill, Some((rows(&["b"]), true)));
        });
        // Whichever comes first, the reply sees the fill's rows: it waits
        // for the fill when that is still in flight.
        let a = r.take_ahead(3, 0).unwrap();
        filler.join().unwrap();
        assert_eq!(a.rows, rows(&["a", "b"]));
    }
}
