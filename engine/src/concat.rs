//! Disjoint sorted sources read one after another, as one sorted stream:
//! LevelDB's concatenating iterator over a level's files.
//!
//! A tablet keeps the files of a sequential load as they are (they are
//! disjoint; see `compaction::needs_merge`), and a scan through a heap of
//! all of them would compare keys of files that cannot interleave on every
//! step. [`sources`] chains such files into runs instead, so that a scan of
//! a sequentially loaded tablet steps through one file at a time, the
//! merge's heap holding that run and only the memtables with entries.

use crate::iterator::InternalIterator;
use crate::tablet::Sst;
use crate::value::Value;
use crate::Result;
use std::sync::Arc;

/// A source a run can hold: its key range (inclusive; empty when unknown)
/// and a cursor over it.
pub trait Piece: Send {
    fn smallest(&self) -> &[u8];
    fn largest(&self) -> &[u8];
    fn open(&self) -> Box<dyn InternalIterator>;
}

impl Piece for Arc<Sst> {
    fn smallest(&self) -> &[u8] {
        &self.meta.smallest
    }
    fn largest(&self) -> &[u8] {
        &self.meta.largest
    }
    fn open(&self) -> Box<dyn InternalIterator> {
        Box::new(self.table.iter())
    }
}

/// A file read around the block cache: a compaction's input, read once.
pub struct Uncached(pub Arc<Sst>);

impl Piece for Uncached {
    fn smallest(&self) -> &[u8] {
        &self.0.meta.smallest
    }
    fn largest(&self) -> &[u8] {
        &self.0.meta.largest
    }
    fn open(&self) -> Box<dyn InternalIterator> {
        Box::new(self.0.table.iter_uncached())
    }
}

/// Cursors over `pieces` (newest first) for a merge: each run of
/// consecutive pieces whose key ranges are pairwise disjoint becomes one
/// cursor, newest run first. Runs are of consecutive pieces so that every
/// piece of an earlier run is newer than every piece of a later one: the
/// merge's order for equal keys (newer source first) still holds.
pub fn sources<P: Piece + 'static>(
    pieces: impl IntoIterator<Item = P>,
) -> Vec<Box<dyn InternalIterator>> {
    let mut runs: Vec<Vec<P>> = Vec::new();
    for p in pieces {
        match runs.last_mut() {
            Some(run) if run.iter().all(|q| disjoint(q, &p)) => run.push(p),
            _ => runs.push(vec![p]),
        }
    }
    runs.into_iter()
        .map(|mut run| {
            if run.len() == 1 {
                if let Some(only) = run.pop() {
                    return only.open();
                }
            }
            run.sort_by(|a, b| a.smallest().cmp(b.smallest()));
            Box::new(ConcatIterator::new(run)) as Box<dyn InternalIterator>
        })
        .collect()
}

/// Whether no key can be in both: a piece whose range is unknown (empty
/// bounds) overlaps everything.
fn disjoint<P: Piece>(a: &P, b: &P) -> bool {
    fn known<P: Piece>(p: &P) -> bool {
        !p.smallest().is_empty() && !p.largest().is_empty()
    }
    known(a) && known(b) && (a.largest() < b.smallest() || b.largest() < a.smallest())
}

/// Pieces with disjoint ranges, sorted by range, read in turn.
pub struct ConcatIterator<P: Piece> {
    pieces: Vec<P>,
    /// The piece `cur` walks.
    at: usize,
    /// None before a positioning, past the end and after an error.
    cur: Option<Box<dyn InternalIterator>>,
}

impl<P: Piece> ConcatIterator<P> {
    /// `pieces` must be sorted by range and pairwise disjoint.
    pub fn new(pieces: Vec<P>) -> Self {
        ConcatIterator {
            pieces,
            at: 0,
            cur: None,
        }
    }

    /// Opens piece `at` positioned by `position`, then moves on to the
    /// first entry of a later piece while the current one has none left.
    fn enter(
        &mut self,
        mut at: usize,
        position: impl FnOnce(&mut dyn InternalIterator) -> Result<()>,
    ) -> Result<()> {
        self.cur = None;
        let Some(p) = self.pieces.get(at) else {
            return Ok(());
        };
        let mut it = p.open();
        position(&mut *it)?;
        while !it.valid() {
            at += 1;
            let Some(p) = self.pieces.get(at) else {
                return Ok(());
            };
            it = p.open();
            it.seek_to_first()?;
        }
        self.at = at;
        self.cur = Some(it);
        Ok(())
    }
}

impl<P: Piece> InternalIterator for ConcatIterator<P> {
    fn seek_to_first(&mut self) -> Result<()> {
        self.enter(0, |it| it.seek_to_first())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // The first piece that can hold a key >= target.
        let at = self.pieces.partition_point(|p| p.largest() < target);
        self.enter(at, |it| it.seek(target))
    }

    fn next(&mut self) -> Result<()> {
        let Some(it) = self.cur.as_mut() else {
            return Ok(());
        };
        if let Err(e) = it.next() {
            self.cur = None;
            return Err(e);
        }
        if !it.valid() {
            let next = self.at + 1;
            return self.enter(next, |it| it.seek_to_first());
        }
        Ok(())
    }

    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|it| it.valid())
    }

    fn key(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |it| it.key())
    }

    fn value(&self) -> &[u8] {
        self.cur.as_ref().map_or(&[], |it| it.value())
    }

    fn shared_value(&self) -> Value {
        self.cur
            .as_ref()
            .map_or(Value::new(), |it| it.shared_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iterator::{drain, Failing, VecIterator};
    use crate::merge::MergingIterator;
    use rand::{Rng, SeedableRng};

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    /// A sorted vector as a piece.
    #[derive(Clone)]
    struct VecPiece(Arc<Entries>);

    impl Piece for VecPiece {
        fn smallest(&self) -> &[u8] {
            self.0.first().map_or(&[], |(k, _)| k)
        }
        fn largest(&self) -> &[u8] {
            self.0.last().map_or(&[], |(k, _)| k)
        }
        fn open(&self) -> Box<dyn InternalIterator> {
            Box::new(VecIterator::new(self.0.clone()))
        }
    }

    /// Pieces of random keys over a small alphabet (so that some overlap,
    /// some touch and some are disjoint), each tagged with its index.
    fn random_pieces(rng: &mut rand::rngs::StdRng) -> Vec<VecPiece> {
        (0..rng.gen_range(0..8))
            .map(|i| {
                let lo = rng.gen_range(b'a'..b'y');
                let hi = rng.gen_range(lo..=b'z');
                let mut v: Entries = (0..rng.gen_range(0..12))
                    .map(|_| {
                        let k = vec![rng.gen_range(lo..=hi), rng.gen_range(b'0'..b'3')];
                        (k, vec![i as u8])
                    })
                    .collect();
                v.sort();
                v.dedup_by(|a, b| a.0 == b.0);
                VecPiece(Arc::new(v))
            })
            .collect()
    }

    fn merged(pieces: Vec<Box<dyn InternalIterator>>) -> MergingIterator {
        MergingIterator::new(pieces)
    }

    #[test]
    fn runs_read_as_the_merge_of_every_piece() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..500 {
            let pieces = random_pieces(&mut rng);
            let mut want = merged(pieces.iter().map(|p| p.open()).collect());
            let mut got = merged(sources(pieces.clone()));
            want.seek_to_first().unwrap();
            got.seek_to_first().unwrap();
            assert_eq!(drain(&mut got), drain(&mut want));
            for _ in 0..8 {
                let t = vec![rng.gen_range(b'a'..=b'z'), rng.gen_range(b'0'..b'4')];
                want.seek(&t).unwrap();
                got.seek(&t).unwrap();
                assert_eq!(drain(&mut got), drain(&mut want), "seek {t:?}");
            }
        }
    }

    #[test]
    fn disjoint_pieces_make_one_run_and_overlapping_ones_do_not() {
        let piece = |keys: &[&str]| {
            VecPiece(Arc::new(
                keys.iter()
                    .map(|k| (k.as_bytes().to_vec(), Vec::new()))
                    .collect(),
            ))
        };
        // A sequential load, newest (highest keys) first: one cursor.
        let seq = [piece(&["g", "h"]), piece(&["d", "e"]), piece(&["a", "b"])];
        assert_eq!(sources(seq.clone()).len(), 1);
        // Touching at one key overlaps; an empty piece overlaps everything.
        assert_eq!(sources([piece(&["a", "c"]), piece(&["c", "d"])]).len(), 2);
        assert_eq!(sources([piece(&["a"]), piece(&[]), piece(&["z"])]).len(), 3);
        // Only consecutive pieces share a run: the old piece "b" is not
        // chained with the newer "x" past the overlapping "a".."z".
        let mixed = [piece(&["x"]), piece(&["a", "z"]), piece(&["b"])];
        assert_eq!(sources(mixed).len(), 3);
        let mut it = ConcatIterator::new(vec![seq[2].clone(), seq[1].clone(), seq[0].clone()]);
        it.seek(b"c").unwrap();
        assert_eq!(it.key(), b"d");
        it.seek(b"f").unwrap();
        assert_eq!(it.key(), b"g");
        it.seek(b"i").unwrap();
        assert!(!it.valid());
    }

    /// A piece whose cursor fails on its first positioning.
    struct FailingPiece(&'static [u8], &'static [u8]);
    impl Piece for FailingPiece {
        fn smallest(&self) -> &[u8] {
            self.0
        }
        fn largest(&self) -> &[u8] {
            self.1
        }
        fn open(&self) -> Box<dyn InternalIterator> {
            Box::new(Failing)
        }
    }

    #[test]
    fn an_error_entering_a_piece_leaves_it_invalid() {
        let mut it = ConcatIterator::new(vec![FailingPiece(b"a", b"b"), FailingPiece(b"c", b"d")]);
        assert!(it.seek_to_first().is_err());
        assert!(!it.valid());
        assert!(it.seek(b"c").is_err());
        assert!(!it.valid());
    }

    /// A table loaded in order, file by file (disjoint files, one run),
    /// then overwritten and deleted across all of them by a newer file and
    /// the memtable: scans see the newest of everything, before and after
    /// a merging and a major compaction (both read their inputs in runs).
    #[test]
    fn a_sequential_load_reads_back_through_runs_and_compactions() {
        use crate::schema::{FamilySchema, TableSchema};
        use crate::{Bigtable, Options, RowMutation, ScanSpec, WriteOptions};
        use std::collections::BTreeMap;
        let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
        let bt = Bigtable::open(store, Options::default()).unwrap();
        bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
            .unwrap();
        let put = |row: &str, v: &str| {
            bt.apply(
                "t",
                &RowMutation::new(row).set("f", "q", v),
                WriteOptions::default(),
            )
            .unwrap();
        };
        let mut want = BTreeMap::new();
        for file in 0..8 {
            for i in 0..20 {
                let row = format!("row{:04}", file * 20 + i);
                put(&row, &format!("v{file}"));
                want.insert(row, format!("v{file}"));
            }
            bt.flush().unwrap();
        }
        for row in ["row0005", "row0077", "row0159"] {
            put(row, "newer");
            want.insert(row.to_string(), "newer".to_string());
        }
        let deleted = RowMutation::new("row0100").delete_row();
        bt.apply("t", &deleted, WriteOptions::default()).unwrap();
        want.remove("row0100");
        bt.flush().unwrap();
        put("row0006", "unflushed");
        want.insert("row0006".to_string(), "unflushed".to_string());
        let check = |when: &str| {
            // The newest version of each row's one column comes first.
            let mut got = BTreeMap::new();
            for c in bt.scan("t", ScanSpec::default()).unwrap() {
                let c = c.unwrap();
                got.entry(String::from_utf8(c.row).unwrap())
                    .or_insert_with(|| String::from_utf8(c.value.to_vec()).unwrap());
            }
            assert_eq!(got, want, "{when}");
        };
        check("loaded");
        bt.compact("t", false).unwrap();
        check("after a merging compaction");
        bt.compact("t", true).unwrap();
        check("after a major compaction");
    }
}
