//! A tablet: a row range of one table with its memtables and SSTables.
//!
//! The mutable part is one `Arc<TabletVersion>` swapped under a short lock:
//! a reader clones the Arc and then reads memtables and SSTables without any
//! lock, so compactions and splits never block reads and a reader always sees
//! one consistent set of sources.

use crate::iterator::InternalIterator;
use crate::key;
use crate::memtable::Memtable;
use crate::metadata::SstMeta;
use crate::own_lines;
use crate::schema::{TableSchema, CHANGES_GROUP};
use crate::sstable::Table;
use crate::Result;
use arc_swap::{ArcSwap, Guard};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// An open SSTable with what METADATA knows of it. Read by every request
/// that reaches its tablet: on cache lines of its own (see [`own_lines`]).
#[repr(align(64))]
pub struct Sst {
    pub meta: SstMeta,
    pub table: Arc<Table>,
}

impl Sst {
    /// The newest cell timestamp in the file: from METADATA, else from the
    /// file's properties (files written before either knew it: None).
    pub fn newest_cell(&self) -> Option<u64> {
        self.meta
            .timestamps
            .or_else(|| self.table.timestamps())
            .map(|t| t.max)
    }
}

/// The sources of a tablet at one moment. Read by every request on every
/// core, so it and its lists are on cache lines of their own (see
/// [`own_lines`]).
#[repr(align(64))]
pub struct TabletVersion {
    /// Identifies this set of SSTables (changes on every flush and compaction;
    /// the scan cache keys on it so stale entries are never served).
    pub files_version: u64,
    /// The memtable taking writes.
    pub mem: Arc<Memtable>,
    /// Frozen memtables waiting to be written out, oldest first.
    pub imm: Vec<Arc<Memtable>>,
    /// SSTables, newest (highest max_seq) first.
    pub files: Vec<Arc<Sst>>,
}

static FILES_VERSION: AtomicU64 = AtomicU64::new(1);

pub fn next_files_version() -> u64 {
    FILES_VERSION.fetch_add(1, Ordering::Relaxed)
}

impl TabletVersion {
    /// This version as readers share it: its lists on lines of their own.
    fn shared(self) -> Arc<TabletVersion> {
        Arc::new(TabletVersion {
            imm: own_lines::vec(self.imm),
            files: own_lines::vec(self.files),
            ..self
        })
    }
}

/// One tablet. Read by every request that reaches it, on every core: on
/// cache lines of its own (see [`own_lines`]).
#[repr(align(64))]
pub struct Tablet {
    pub id: u64,
    pub table_id: u64,
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None` = end of table.
    pub end: Option<Vec<u8>>,
    version: ArcSwap<TabletVersion>,
    /// Serializes `update`s (readers never take it).
    update_lock: parking_lot::Mutex<()>,
    /// Every entry of this tablet up to this sequence number is in its SSTables.
    pub flushed_seq: AtomicU64,
    /// Claimed by whoever runs a flush, compaction or split of this tablet.
    busy: AtomicBool,
    /// Set once the tablet has been split or dropped: writes must re-route.
    pub retired: AtomicBool,
    pub last_major: parking_lot::Mutex<Instant>,
}

impl Tablet {
    pub fn new(
        id: u64,
        table_id: u64,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        flushed_seq: u64,
        version: TabletVersion,
    ) -> Tablet {
        Tablet {
            id,
            table_id,
            start: own_lines::vec(start),
            end: end.map(own_lines::vec),
            version: ArcSwap::new(version.shared()),
            update_lock: parking_lot::Mutex::new(()),
            flushed_seq: AtomicU64::new(flushed_seq),
            busy: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            last_major: parking_lot::Mutex::new(Instant::now()),
        }
    }

    pub fn version(&self) -> Arc<TabletVersion> {
        self.version.load_full()
    }

    /// The current version for a short read, without taking a reference
    /// count: point reads on every core would otherwise all write the one
    /// counter of the shared version. Hold it briefly (a scan takes
    /// [`Tablet::version`]).
    pub fn current(&self) -> Guard<Arc<TabletVersion>> {
        self.version.load()
    }

    /// Replaces the version with `f(current)`; returns the new one.
    pub fn update(&self, f: impl FnOnce(&TabletVersion) -> TabletVersion) -> Arc<TabletVersion> {
        let _one_at_a_time = self.update_lock.lock();
        let next = f(&self.version.load()).shared();
        self.version.store(next.clone());
        next
    }

    pub fn contains(&self, row: &[u8]) -> bool {
        !key::less(row, &self.start) && self.end.as_deref().is_none_or(|e| key::less(row, e))
    }

    /// Tries to claim the tablet for background work.
    pub fn try_claim(&self) -> Option<Claim<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Claim(self))
    }

    /// Claims the tablet, waiting for the current holder.
    pub fn claim(&self) -> Claim<'_> {
        loop {
            if let Some(c) = self.try_claim() {
                return c;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// The encoded key range `[lo, hi)` of this tablet.
    pub fn key_bounds(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        (
            key::row_start(&self.start),
            self.end.as_deref().map(key::row_start),
        )
    }

    /// The row to split the tablet at, strictly inside its range: of its
    /// files' middle keys, the one with nearest half of the tablet's data
    /// below it (ties to the smaller). The middle of the largest file alone,
    /// where HBase splits, cuts a tablet of disjoint files (a sequential
    /// load's) wherever that file happens to lie.
    pub fn split_row(&self, v: &TabletVersion) -> Option<Vec<u8>> {
        let (lo, hi) = self.key_bounds();
        let below = |k: &[u8]| -> u64 {
            v.files
                .iter()
                .map(|f| {
                    let t = &f.table;
                    t.approximate_offset_of(k)
                        .saturating_sub(t.approximate_offset_of(&lo))
                })
                .sum()
        };
        let total = match &hi {
            Some(h) => below(h),
            None => v
                .files
                .iter()
                .map(|f| {
                    let t = &f.table;
                    t.data_size().saturating_sub(t.approximate_offset_of(&lo))
                })
                .sum(),
        };
        v.files
            .iter()
            .filter_map(|f| {
                let mid = f.table.mid_key()?;
                let row = key::split(&mid).and_then(|p| key::decode_row(p.row_enc))?;
                if row <= self.start || self.end.as_ref().is_some_and(|e| row >= *e) {
                    return None;
                }
                Some(((2 * below(&mid)).abs_diff(total), row))
            })
            .min()
            .map(|(_, row)| row)
    }

    /// Whether any of the tablet's files holds keys outside its range (shared
    /// with a sibling after a split, until compacted).
    pub fn has_foreign_files(&self, v: &TabletVersion) -> bool {
        let (lo, hi) = self.key_bounds();
        v.files.iter().any(|f| is_foreign(f, &lo, hi.as_deref()))
    }

    /// The tablet's files that hold keys outside its range.
    pub fn foreign_files(&self, v: &TabletVersion) -> Vec<Arc<Sst>> {
        let (lo, hi) = self.key_bounds();
        v.files
            .iter()
            .filter(|f| is_foreign(f, &lo, hi.as_deref()))
            .cloned()
            .collect()
    }

    /// The tablet's files that hold no key inside its range (left to it by
    /// a split, all on the sibling's side): dropping them writes nothing.
    pub fn outside_files(&self, v: &TabletVersion) -> Vec<Arc<Sst>> {
        let (lo, hi) = self.key_bounds();
        v.files
            .iter()
            .filter(|f| {
                f.meta.largest.as_slice() < lo.as_slice()
                    || hi
                        .as_deref()
                        .is_some_and(|h| f.meta.smallest.as_slice() >= h)
            })
            .cloned()
            .collect()
    }

    /// Approximate bytes of SSTable data inside this tablet's range.
    pub fn sstable_bytes(&self, v: &TabletVersion) -> u64 {
        let (lo, hi) = self.key_bounds();
        v.files
            .iter()
            .map(|f| {
                let a = f.table.approximate_offset_of(&lo);
                let b = match &hi {
                    Some(h) => f.table.approximate_offset_of(h),
                    None => f.meta.size,
                };
                b.saturating_sub(a)
            })
            .sum()
    }

    /// Whether there is data not yet in SSTables.
    pub fn has_unflushed(&self, v: &TabletVersion) -> bool {
        !v.mem.is_empty() || !v.imm.is_empty()
    }
}

/// Exclusive right to run background work on a tablet; released on drop.
pub struct Claim<'a>(&'a Tablet);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

/// Whether `f` holds keys outside the encoded range `[lo, hi)`.
fn is_foreign(f: &Sst, lo: &[u8], hi: Option<&[u8]>) -> bool {
    f.meta.smallest.as_slice() < lo || hi.is_some_and(|h| f.meta.largest.as_slice() >= h)
}

/// The SSTables [`select_files`] picks.
pub type SelectedFiles<'a> = SmallVec<[&'a Arc<Sst>; 8]>;

/// Which SSTables a read of `families` must consult.
///
/// A file is needed if it holds one of the families, or if it holds row
/// tombstones and belongs to a locality group that serves one of them (row
/// tombstones are written to every group, so each group's files carry the
/// deletes that cover them). Inline up to 8 files: point reads call this
/// on every lookup.
pub fn select_files<'a, S: AsRef<str>>(
    files: &'a [Arc<Sst>],
    families: Option<&[S]>,
    schema: &TableSchema,
) -> SelectedFiles<'a> {
    let Some(fams) = families else {
        // Every family a reader may see: not the change log's files.
        return files
            .iter()
            .filter(|f| f.meta.group != CHANGES_GROUP)
            .collect();
    };
    let wanted = |x: &String| {
        fams.iter()
            .any(|f| key::equal(f.as_ref().as_bytes(), x.as_bytes()))
    };
    if !files.iter().any(|f| f.meta.row_tombstones) {
        return files
            .iter()
            .filter(|f| f.meta.families.iter().any(wanted))
            .collect();
    }
    // A few groups at most: a list is cheaper than a HashSet on this per-read path.
    let mut groups: SmallVec<[&str; 4]> = SmallVec::new();
    let named = fams.iter().filter_map(|f| {
        schema
            .families
            .get(f.as_ref())
            .map(|s| s.locality_group.as_str())
    });
    let holding = files
        .iter()
        .filter(|f| f.meta.families.iter().any(wanted))
        .map(|f| f.meta.group.as_str());
    for g in named.chain(holding) {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    files
        .iter()
        .filter(|f| {
            f.meta.families.iter().any(wanted)
                || (f.meta.row_tombstones && groups.contains(&f.meta.group.as_str()))
        })
        .collect()
}

/// An iterator limited to the encoded key range `[lo, hi)`, and, with
/// [`ClipIterator::up_to`], to the entries written up to a sequence number.
pub struct ClipIterator<I> {
    inner: I,
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    max_seq: Option<u64>,
}

impl<I: InternalIterator> ClipIterator<I> {
    pub fn new(inner: I, lo: Vec<u8>, hi: Option<Vec<u8>>) -> Self {
        ClipIterator {
            inner,
            lo,
            hi,
            max_seq: None,
        }
    }

    /// Skips the entries of sequence numbers above `seq` (what a snapshot's
    /// cut leaves out of a memtable that took writes after it).
    pub fn up_to(mut self, seq: u64) -> Self {
        self.max_seq = Some(seq);
        self
    }

    fn skip_later(&mut self) -> Result<()> {
        if let Some(max) = self.max_seq {
            while self.inner.valid() && key::split(self.inner.key()).is_some_and(|p| p.seq > max) {
                self.inner.next()?;
            }
        }
        Ok(())
    }
}

impl<I: InternalIterator> InternalIterator for ClipIterator<I> {
    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek(&self.lo)?;
        self.skip_later()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        if target < self.lo.as_slice() {
            self.inner.seek(&self.lo)?;
        } else {
            self.inner.seek(target)?;
        }
        self.skip_later()
    }
    fn next(&mut self) -> Result<()> {
        self.inner.next()?;
        self.skip_later()
    }
    fn valid(&self) -> bool {
        self.inner.valid() && self.hi.as_deref().is_none_or(|h| self.inner.key() < h)
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::VecIterator;

    #[test]
    fn clip_limits_to_rows() {
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = [b"a", b"b", b"c", b"d"]
            .iter()
            .map(|r| (key::encode(*r, b"f", b"q", 1, 1, key::Kind::Put), vec![]))
            .collect();
        entries.sort();
        let it = VecIterator::new(Arc::new(entries));
        let mut c = ClipIterator::new(it, key::row_start(b"b"), Some(key::row_start(b"d")));
        c.seek_to_first().unwrap();
        let mut rows = vec![];
        while c.valid() {
            rows.push(key::decode(c.key()).unwrap().row);
            c.next().unwrap();
        }
        assert_eq!(rows, vec![b"b".to_vec(), b"c".to_vec()]);
        c.seek(&key::row_start(b"a")).unwrap();
        assert_eq!(key::decode(c.key()).unwrap().row, b"b");
    }
}
