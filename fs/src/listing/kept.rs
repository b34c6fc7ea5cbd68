//! Whole table listings, kept for when the kernel has let its own go.
//!
//! The kernel keeps a table's listing as long as it keeps the table's
//! inode; memory pressure (or `drop_caches`) takes both, and the next `ls`
//! of the table scans the table again: most of what a listing costs the
//! daemon (the row scan and each row's inode number), and on the reader's
//! path, since the kernel waits for each reply. So a table listed a second
//! time with no write to it in between is scanned once, whole, and kept,
//! and the listings after that are answered from it while no write reaches
//! the table. A table listed once costs nothing here but its name.
//!
//! Coherence is the row memo's: a kept listing carries its table's write
//! epoch, taken before its scan ([`crate::row_memo::RowMemo::table_epoch`]),
//! which every write to a row of the table moves before it is acknowledged
//! (through the mount, a `.mutate` batch, gRPC or another daemon's
//! invalidation), as every table-wide change does; a listing whose epoch
//! has moved is never used. The caller rules out what no write moves
//! (tables with a family whose age limit may collect a column's newest
//! version, time-travel views) and what the
//! store does not hold (pending directories), and uses a kept listing only
//! while other daemons' writes are known to reach this one. A kept listing
//! lasts the kernel's `dir_timeout`, as the kernel's own copy would.

use super::{ListedRow, Listing};
use crate::node::Name;
use ahash::AHashMap as HashMap;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Memory all kept listings may take together; past it the oldest go.
pub const KEPT_BYTES: usize = 64 << 20;

/// Memory one table's kept listing may take (about 200,000 rows of short
/// keys): a larger table is listed by its scans, as before.
pub const KEPT_TABLE_BYTES: usize = 16 << 20;

/// Tables remembered; past this the map starts again.
const CAPACITY: usize = 4096;

/// What a kept row costs beside its key's bytes (the row's own fields).
const ROW_OVERHEAD: usize = std::mem::size_of::<ListedRow>();

enum State {
    /// Listed at `epoch`: the next listing at the same epoch keeps it.
    Listed { epoch: u64, at: Instant },
    /// A listing at `epoch` is reading the table whole to keep it: the
    /// others scan meanwhile (rather than read it whole again).
    Keeping { epoch: u64, at: Instant },
    Kept {
        epoch: u64,
        at: Instant,
        rows: Arc<[ListedRow]>,
        bytes: usize,
    },
    /// Not to be kept at `epoch` (more than [`KEPT_TABLE_BYTES`], or a
    /// table whose rows may go with no write).
    NotKept { epoch: u64 },
}

/// How the next reply of a table listing gets its rows.
pub enum KeptListing {
    /// From these, the table's whole listing as it stands.
    Rows(Arc<[ListedRow]>),
    /// From a scan of the whole table, to keep ([`Listing::keep_listing`]).
    Keep,
    /// From the store, a batch at a time.
    Scan,
}

#[derive(Default)]
struct Tables {
    map: HashMap<Name, State>,
    /// Bytes of the kept listings.
    bytes: usize,
}

/// See the module comment.
#[derive(Default)]
pub(super) struct Kept {
    tables: Mutex<Tables>,
}

/// What one kept row takes, about.
pub fn row_bytes(r: &ListedRow) -> usize {
    ROW_OVERHEAD + r.row.len() + r.escaped.as_ref().map_or(0, Vec::len)
}

impl Tables {
    /// Puts `state` for `table`, keeping the byte count.
    fn put(&mut self, table: &Name, state: State) {
        if let State::Kept { bytes, .. } = &state {
            self.bytes += bytes;
        }
        if let Some(State::Kept { bytes, .. }) = self.map.insert(table.clone(), state) {
            self.bytes -= bytes;
        }
    }

    fn remove(&mut self, table: &Name) {
        if let Some(State::Kept { bytes, .. }) = self.map.remove(table) {
            self.bytes -= bytes;
        }
    }

    /// Drops the oldest kept listings until `more` bytes fit.
    fn make_room(&mut self, more: usize) {
        while self.bytes + more > KEPT_BYTES {
            let oldest = self
                .map
                .iter()
                .filter_map(|(t, s)| match s {
                    State::Kept { at, .. } => Some((*at, t.clone())),
                    _ => None,
                })
                .min_by_key(|(at, _)| *at);
            let Some((_, t)) = oldest else { return };
            self.remove(&t);
        }
    }
}

impl Listing {
    /// How the next reply of a listing of `table` gets its rows, the
    /// table's write epoch being `epoch` now; `first`: the listing's first
    /// reply; `ttl`: how long a listing may be kept.
    pub fn kept(&self, table: &Name, epoch: u64, first: bool, ttl: Duration) -> KeptListing {
        let mut g = self.kept.tables.lock();
        match g.map.get(table) {
            Some(State::Kept {
                epoch: e, at, rows, ..
            }) if *e == epoch && at.elapsed() < ttl => {
                return KeptListing::Rows(rows.clone());
            }
            Some(State::NotKept { epoch: e }) if *e == epoch => return KeptListing::Scan,
            Some(State::Listed { epoch: e, at }) if first && *e == epoch && at.elapsed() < ttl => {
                let keeping = State::Keeping {
                    epoch,
                    at: Instant::now(),
                };
                g.put(table, keeping);
                return KeptListing::Keep;
            }
            Some(State::Keeping { epoch: e, at }) if *e == epoch && at.elapsed() < ttl => {
                return KeptListing::Scan;
            }
            _ => {}
        }
        if first {
            if g.map.len() >= CAPACITY && !g.map.contains_key(table) {
                *g = Tables::default();
            }
            g.put(
                table,
                State::Listed {
                    epoch,
                    at: Instant::now(),
                },
            );
        }
        KeptListing::Scan
    }

    /// Keeps `rows`, the whole listing of `table` read after its write
    /// epoch was `epoch` (`bytes`: what they take, by [`row_bytes`]).
    pub fn keep_listing(&self, table: &Name, epoch: u64, rows: Arc<[ListedRow]>, bytes: usize) {
        let mut g = self.kept.tables.lock();
        g.remove(table);
        g.make_room(bytes);
        g.put(
            table,
            State::Kept {
                epoch,
                at: Instant::now(),
                rows,
                bytes,
            },
        );
    }

    /// `table`'s listing at `epoch` is not to be kept (more rows than a
    /// kept listing may hold, or rows that may go with no write).
    pub fn not_kept(&self, table: &Name, epoch: u64) {
        self.kept.tables.lock().put(table, State::NotKept { epoch });
    }

    /// Bytes the kept listings take.
    pub fn kept_bytes(&self) -> usize {
        self.kept.tables.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(300);

    fn rows(n: usize) -> (Arc<[ListedRow]>, usize) {
        let rows: Vec<ListedRow> = (0..n)
            .map(|i| ListedRow::new(format!("r{i:04}").into_bytes(), i as u64 + 10))
            .collect();
        let bytes = rows.iter().map(row_bytes).sum();
        (rows.into(), bytes)
    }

    #[test]
    fn a_table_is_kept_from_its_second_listing_at_one_epoch() {
        let l = Listing::default();
        let t = Name::from("t");
        assert!(matches!(l.kept(&t, 1, true, TTL), KeptListing::Scan));
        // Its later replies, and a listing after a write, scan too.
        assert!(matches!(l.kept(&t, 1, false, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 2, true, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 2, true, TTL), KeptListing::Keep));
        let (r, bytes) = rows(3);
        l.keep_listing(&t, 2, r, bytes);
        assert_eq!(l.kept_bytes(), bytes);
        match l.kept(&t, 2, false, TTL) {
            KeptListing::Rows(r) => assert_eq!(r.len(), 3),
            _ => panic!("not kept"),
        }
        // A write moved the epoch: scanned again, and kept again only from
        // the second listing at the new epoch.
        assert!(matches!(l.kept(&t, 3, true, TTL), KeptListing::Scan));
        assert_eq!(l.kept_bytes(), 0);
        assert!(matches!(l.kept(&t, 3, true, TTL), KeptListing::Keep));
    }

    #[test]
    fn a_listing_beside_one_that_keeps_the_table_scans() {
        let l = Listing::default();
        let t = Name::from("t");
        assert!(matches!(l.kept(&t, 1, true, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 1, true, TTL), KeptListing::Keep));
        assert!(matches!(l.kept(&t, 1, true, TTL), KeptListing::Scan));
        let (r, bytes) = rows(1);
        l.keep_listing(&t, 1, r, bytes);
        assert!(matches!(l.kept(&t, 1, true, TTL), KeptListing::Rows(_)));
    }

    #[test]
    fn a_kept_listing_lasts_its_time_only() {
        let l = Listing::default();
        let t = Name::from("t");
        let (r, bytes) = rows(2);
        l.keep_listing(&t, 1, r, bytes);
        assert!(matches!(
            l.kept(&t, 1, true, Duration::ZERO),
            KeptListing::Scan
        ));
    }

    #[test]
    fn a_table_not_kept_is_scanned_until_its_epoch_moves() {
        let l = Listing::default();
        let t = Name::from("t");
        l.not_kept(&t, 5);
        assert!(matches!(l.kept(&t, 5, true, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 5, true, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 6, true, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&t, 6, true, TTL), KeptListing::Keep));
    }

    #[test]
    fn the_oldest_kept_listings_make_room_for_a_new_one() {
        let l = Listing::default();
        let (a, b) = (Name::from("a"), Name::from("b"));
        let (r, _) = rows(1);
        l.keep_listing(&a, 1, r.clone(), KEPT_BYTES / 2 + 1);
        l.keep_listing(&b, 1, r, KEPT_BYTES / 2);
        assert_eq!(l.kept_bytes(), KEPT_BYTES / 2);
        assert!(matches!(l.kept(&a, 1, false, TTL), KeptListing::Scan));
        assert!(matches!(l.kept(&b, 1, false, TTL), KeptListing::Rows(_)));
    }
}
