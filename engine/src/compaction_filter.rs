//! What a compaction writes: the entries of a merged input stream that can
//! still matter to a reader.
//!
//! Always dropped: cells hidden by a tombstone in the same stream, cells
//! overwritten by a higher-sequence cell at the same column and timestamp,
//! tombstones made redundant by a newer tombstone of the same or wider scope
//! in the stream (the newer one is kept and hides everything they hide), and
//! cells that a *union* GC rule collects by age alone (such a cell and every
//! older version of its column are collected by every read from now on,
//! whatever versions other inputs hold).
//!
//! A *major* compaction (its inputs are every SSTable and the memtable of the
//! tablet) additionally drops every tombstone (nothing older is left for them
//! to hide), every version the family's GC rule collects at `now_micros`,
//! and the entries of families no longer in the schema. A minor or merging
//! compaction keeps tombstones and does not apply count limits, because
//! entries in inputs it does not see may still need them.
//!
//! Reads through the output equal reads through the input at the newest
//! snapshot. Reads at older snapshots are not preserved: the engine keeps
//! the input files alive for readers that started before the compaction.

use crate::error::Result;
use crate::iterator::InternalIterator;
use crate::key::Kind;
use crate::schema::{GcRule, TableSchema};
use crate::visibility::{prefix_end, Change, EntryKey, Tracker, Verdict};
use std::sync::Arc;

/// Filters a merged stream of internal entries into a compaction's output,
/// yielding `(key, value)` pairs in key order.
pub struct CompactionFilter {
    iter: Box<dyn InternalIterator>,
    schema: Arc<TableSchema>,
    major: bool,
    now: u64,
    tracker: Tracker,
    /// The current family's GC rule; `None` if it is not in the schema.
    gc: Option<GcRule>,
    /// Set once a version of the current column is GC-collected in a major
    /// compaction: every older version is collected too.
    column_collected: bool,
    /// Set after an error, so the `Iterator` impl stops instead of repeating it.
    failed: bool,
}

impl CompactionFilter {
    /// Positions `iter` at its first entry.
    pub fn new(
        mut iter: Box<dyn InternalIterator>,
        schema: Arc<TableSchema>,
        major: bool,
        now_micros: u64,
    ) -> Result<CompactionFilter> {
        iter.seek_to_first()?;
        Ok(CompactionFilter {
            iter,
            schema,
            major,
            now: now_micros,
            tracker: Tracker::new(),
            gc: None,
            column_collected: false,
            failed: false,
        })
    }

    /// The next entry to write, or `None` when the input is exhausted.
    pub fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            if !self.iter.valid() {
                return Ok(None);
            }
            let k = EntryKey::parse(self.iter.key())?;
            let change = self.tracker.position(&k);
            if !k.is_row_level() {
                if change >= Change::Family {
                    self.gc = std::str::from_utf8(&k.family()?)
                        .ok()
                        .and_then(|n| self.schema.family(n))
                        .map(|f| f.gc);
                    if self.major && self.gc.is_none() {
                        let end = prefix_end(k.family_prefix);
                        self.iter.seek(&end)?;
                        continue;
                    }
                }
                if change >= Change::Column {
                    self.column_collected = false;
                }
            }
            let keep = match self.tracker.classify(&k, self.iter.value())? {
                Verdict::Tombstone => !self.major,
                Verdict::RedundantTombstone | Verdict::Hidden => false,
                Verdict::Visible { index } => {
                    debug_assert_eq!(k.kind, Kind::Put);
                    match self.gc {
                        None => true,
                        Some(gc) if self.major => {
                            self.column_collected = self.column_collected
                                || gc.collects(index, k.timestamp, self.now);
                            !self.column_collected
                        }
                        Some(gc) => !gc.collects_by_age_alone(k.timestamp, self.now),
                    }
                }
            };
            if keep {
                let out = (self.iter.key().to_vec(), self.iter.value().to_vec());
                self.iter.next()?;
                return Ok(Some(out));
            }
            self.iter.next()?;
        }
    }
}

impl Iterator for CompactionFilter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = self.next_entry();
        self.failed = r.is_err();
        r.transpose()
    }
}
