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
//! In an aggregate family a major compaction folds the visible operands at
//! one column and timestamp into one entry (the highest-sequence one's key);
//! other compactions keep them apart ([`crate::aggregate`]).
//!
//! Reads through the output equal reads through the input at the newest
//! snapshot. Reads at older snapshots are not preserved: the engine keeps
//! the input files alive for readers that started before the compaction.

use crate::aggregate::Aggregator;
use crate::error::Result;
use crate::iterator::InternalIterator;
use crate::key::Kind;
use crate::schema::{GcRule, TableSchema, CHANGES_FAMILY};
use crate::visibility::{prefix_end, Change, EntryKey, Tracker, Verdict};
use std::sync::Arc;

/// What a change-logged table's major compaction drops without a
/// writer's delete, which it reports (docs/changes.md): a cell garbage
/// collection dropped (`timestamp` set), or a row's entries of a family no
/// longer in the schema (`timestamp` None).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    pub row: Vec<u8>,
    pub family: String,
    pub qualifier: Vec<u8>,
    pub timestamp: Option<u64>,
}

/// What becomes of the cells the GC rules collect.
enum GcLog {
    /// Dropped.
    Drop,
    /// Kept (a later compaction that reports them drops them).
    Keep,
    /// Dropped and reported while their keys take under `cap` bytes;
    /// then kept.
    Report {
        cells: Vec<Collected>,
        bytes: usize,
        cap: usize,
    },
}

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
    /// The current family's aggregator, if it is an aggregate family.
    aggregate: Option<Aggregator>,
    /// Set once a version of the current column is GC-collected in a major
    /// compaction: every older version is collected too.
    column_collected: bool,
    /// Set after an error, so the `Iterator` impl stops instead of repeating it.
    failed: bool,
    gc_log: GcLog,
}

impl CompactionFilter {
    /// Positions `iter` at its first entry.
    pub fn new(
        mut iter: Box<dyn InternalIterator>,
        major: bool,
        schema: Arc<TableSchema>,
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
            aggregate: None,
            column_collected: false,
            failed: false,
            gc_log: GcLog::Drop,
        })
    }

    /// Keeps the cells the GC rules would drop: a change-logged table's
    /// compaction that cannot report them (a memtable's flush).
    pub fn keeping_collected(mut self) -> Self {
        self.gc_log = GcLog::Keep;
        self
    }

    /// Reports the cells the GC rules drop ([`Self::take_collected`]),
    /// while their keys take under `cap` bytes: past that, they are kept
    /// for a later compaction.
    pub fn reporting_collected(mut self, cap: usize) -> Self {
        self.gc_log = GcLog::Report {
            cells: Vec::new(),
            bytes: 0,
            cap,
        };
        self
    }

    /// The cells reported as collected so far.
    pub fn take_collected(&mut self) -> Vec<Collected> {
        match &mut self.gc_log {
            GcLog::Report { cells, .. } => std::mem::take(cells),
            _ => Vec::new(),
        }
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
                    // The hidden change family too, collected after its
                    // retention (docs/changes.md).
                    let family = std::str::from_utf8(&k.family()?)
                        .ok()
                        .and_then(|n| self.schema.stored_family(n));
                    self.gc = family.as_ref().map(|f| f.gc.clone());
                    self.aggregate = family.and_then(|f| f.aggregate);
                    self.tracker.set_aggregate(self.aggregate.is_some());
                    if self.major && self.gc.is_none() {
                        let end = prefix_end(k.family_prefix);
                        if matches!(self.gc_log, GcLog::Report { .. })
                            && !k.family_is(CHANGES_FAMILY.as_bytes())
                        {
                            // A cell still visible in a dropped family was
                            // written while it was dropped: it goes with
                            // the family, reported as the family's delete.
                            let (row, family) = (k.row()?, k.family()?);
                            if self.visible_before(&end)? {
                                note_dropped_family(&mut self.gc_log, row, family);
                            }
                        }
                        self.iter.seek(&end)?;
                        continue;
                    }
                }
                if change >= Change::Column {
                    self.column_collected = false;
                }
            }
            let verdict = self.tracker.classify(&k, self.iter.value())?;
            let keep = match verdict {
                Verdict::Tombstone => !self.major,
                Verdict::RedundantTombstone | Verdict::Hidden => false,
                // A major compaction folded it into its cell unless that
                // cell was collected; others keep it as its cell goes.
                Verdict::Fold { .. } => match &self.gc {
                    None => true,
                    Some(_) if self.major => !self.column_collected,
                    // An operand goes with its cell, which a logged table
                    // reports (or keeps) in a major compaction only.
                    Some(_) if !matches!(self.gc_log, GcLog::Drop) => true,
                    Some(gc) => !gc.collects_by_age_alone(k.timestamp, self.now),
                },
                Verdict::Visible { index } => {
                    debug_assert_eq!(k.kind, Kind::Put);
                    let collects = match &self.gc {
                        None => false,
                        Some(gc) if self.major => {
                            self.column_collected || gc.collects(index, k.timestamp, self.now)
                        }
                        Some(gc) => gc.collects_by_age_alone(k.timestamp, self.now),
                    };
                    let collected = collects && may_collect(&mut self.gc_log, &k)?;
                    if self.major {
                        self.column_collected = collected;
                    }
                    !collected
                }
            };
            if keep {
                let key = self.iter.key().to_vec();
                let mut value = self.iter.value().to_vec();
                self.iter.next()?;
                if let (true, Some(agg), Verdict::Visible { .. }) =
                    (self.major, self.aggregate, verdict)
                {
                    self.fold_twins(&key, agg, &mut value)?;
                }
                return Ok(Some((key, value)));
            }
            self.iter.next()?;
        }
    }

    /// Whether an entry from here to `end` (one row's family) is a cell no
    /// tombstone hides; stops at the first.
    fn visible_before(&mut self, end: &[u8]) -> Result<bool> {
        while self.iter.valid() && self.iter.key() < end {
            let e = EntryKey::parse(self.iter.key())?;
            self.tracker.position(&e);
            if let Verdict::Visible { .. } = self.tracker.classify(&e, self.iter.value())? {
                return Ok(true);
            }
            self.iter.next()?;
        }
        Ok(false)
    }

    /// Folds into `value` the operands after the cell `head` at its column
    /// and timestamp, and steps past them.
    fn fold_twins(&mut self, head: &[u8], agg: Aggregator, value: &mut Vec<u8>) -> Result<()> {
        let h = EntryKey::parse(head)?;
        while self.iter.valid() {
            let k = EntryKey::parse(self.iter.key())?;
            if k.column_enc != h.column_enc || k.timestamp != h.timestamp || k.kind != Kind::Put {
                break;
            }
            self.tracker.position(&k);
            if let Verdict::Fold { .. } = self.tracker.classify(&k, self.iter.value())? {
                agg.fold_into(value, self.iter.value());
            }
            self.iter.next()?;
        }
        Ok(())
    }
}

/// Whether the cell at `k`, which the GC rule collects, may go (and
/// notes it if it is reported). The hidden change family's own
/// retention is never reported.
fn may_collect(log: &mut GcLog, k: &EntryKey<'_>) -> Result<bool> {
    match log {
        GcLog::Drop => Ok(true),
        GcLog::Keep => Ok(k.family_is(CHANGES_FAMILY.as_bytes())),
        GcLog::Report { cells, bytes, cap } => {
            if k.family_is(CHANGES_FAMILY.as_bytes()) {
                return Ok(true);
            }
            if *bytes >= *cap {
                return Ok(false);
            }
            let c = Collected {
                row: k.row()?,
                family: String::from_utf8_lossy(&k.family()?).into_owned(),
                qualifier: k.qualifier()?,
                timestamp: Some(k.timestamp),
            };
            *bytes += c.row.len() + c.family.len() + c.qualifier.len() + 64;
            cells.push(c);
            Ok(true)
        }
    }
}

/// Reports a row's cells of a family no longer in the schema, if the
/// compaction has room; past the cap they go unreported.
fn note_dropped_family(log: &mut GcLog, row: Vec<u8>, family: Vec<u8>) {
    if let GcLog::Report { cells, bytes, cap } = log {
        if *bytes < *cap {
            let c = Collected {
                row,
                family: String::from_utf8_lossy(&family).into_owned(),
                qualifier: Vec::new(),
                timestamp: None,
            };
            *bytes += c.row.len() + c.family.len() + 64;
            cells.push(c);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{RowMutation, TimeRange};
    use crate::iterator::VecIterator;
    use crate::key::{self, TOMBSTONE_TS};
    use crate::mutation::to_entries;
    use crate::read::CellReader;
    use crate::scan::ScanSpec;
    use crate::schema::{FamilySchema, GcMode};

    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn entries(ms: &[RowMutation]) -> Entries {
        let mut seq = 1;
        let mut v = Vec::new();
        for m in ms {
            let e = to_entries(m, seq, 1_000);
            seq += e.len() as u64;
            v.extend(e);
        }
        v.sort();
        v
    }

    fn filter(input: &Entries, schema: &Arc<TableSchema>, major: bool, now: u64) -> Entries {
        let it = Box::new(VecIterator::new(Arc::new(input.clone())));
        CompactionFilter::new(it, major, schema.clone(), now)
            .unwrap()
            .collect::<Result<_>>()
            .unwrap()
    }

    fn kinds(v: &Entries) -> Vec<(Vec<u8>, u64, Kind)> {
        v.iter()
            .map(|(k, _)| {
                let p = key::decode(k).unwrap();
                (p.qualifier, p.timestamp, p.kind)
            })
            .collect()
    }

    fn schema(gc: GcRule) -> Arc<TableSchema> {
        let mut f = FamilySchema::new("f");
        f.gc = gc;
        Arc::new(TableSchema::with_families([f]))
    }

    #[test]
    fn minor_keeps_live_tombstones_drops_what_they_hide() {
        let input = entries(&[
            RowMutation::new("r")
                .set_at("f", "q", 1, "a")
                .set_at("f", "q", 2, "b"),
            RowMutation::new("r").delete_cells("f", "q", TimeRange::exactly(1)),
            RowMutation::new("r").delete_cells("f", "q", TimeRange::exactly(1)),
            RowMutation::new("r").set_at("f", "q", 2, "c"),
        ]);
        let out = filter(&input, &schema(GcRule::KEEP_ALL), false, 0);
        assert_eq!(
            kinds(&out),
            vec![
                (b"q".to_vec(), TOMBSTONE_TS, Kind::DeleteColumn),
                (b"q".to_vec(), 2, Kind::Put),
            ]
        );
        assert_eq!(out[1].1, b"c");
        // Major: the tombstone goes too.
        let out = filter(&input, &schema(GcRule::KEEP_ALL), true, 0);
        assert_eq!(kinds(&out), vec![(b"q".to_vec(), 2, Kind::Put)]);
    }

    fn aggregate_schema(agg: Aggregator, gc: GcRule) -> Arc<TableSchema> {
        let mut f = FamilySchema::new("f");
        f.gc = gc;
        f.aggregate = Some(agg);
        Arc::new(TableSchema::with_families([f]))
    }

    /// (timestamp, Int64 value) of every cell the reader shows.
    fn read_ints(v: &Entries, s: &Arc<TableSchema>, snapshot: u64) -> Vec<(u64, i64)> {
        let it = Box::new(VecIterator::new(Arc::new(v.clone())));
        CellReader::new(it, &ScanSpec::default(), s.clone(), snapshot, 0)
            .unwrap()
            .map(|c| {
                let c = c.unwrap();
                (c.timestamp, crate::aggregate::decode(&c.value).unwrap())
            })
            .collect()
    }

    #[test]
    fn aggregates_fold_on_read_and_in_major_compactions_only() {
        let input = entries(&[
            RowMutation::new("r")
                .add_to_cell("f", "q", 0, 1)
                .add_to_cell("f", "q", 5, 100),
            RowMutation::new("r").add_to_cell("f", "q", 0, 9),
            // Hides the first two adds at 0 (lower sequence), not later ones.
            RowMutation::new("r").delete_cells("f", "q", TimeRange::exactly(0)),
            RowMutation::new("r").add_to_cell("f", "q", 0, -4),
            RowMutation::new("r").add_to_cell("f", "q", 0, 7),
        ]);
        for (agg, at0) in [
            (Aggregator::Sum, 3),
            (Aggregator::Min, -4),
            (Aggregator::Max, 7),
        ] {
            let s = aggregate_schema(agg, GcRule::KEEP_ALL);
            let want = vec![(5, 100), (0, at0)];
            assert_eq!(read_ints(&input, &s, u64::MAX), want, "{agg:?}");
            // A snapshot before the last add leaves it out.
            let before_last = input.iter().map(|(k, _)| key::decode(k).unwrap().seq).max();
            let older = read_ints(&input, &s, before_last.unwrap() - 1);
            assert_eq!(older, vec![(5, 100), (0, -4)]);
            // Minor: operands stay apart (the tombstone and hidden adds go).
            let minor = filter(&input, &s, false, 0);
            assert_eq!(
                kinds(&minor),
                vec![
                    (b"q".to_vec(), TOMBSTONE_TS, Kind::DeleteColumn),
                    (b"q".to_vec(), 5, Kind::Put),
                    (b"q".to_vec(), 0, Kind::Put),
                    (b"q".to_vec(), 0, Kind::Put),
                ]
            );
            assert_eq!(read_ints(&minor, &s, u64::MAX), want);
            // Major: one entry per cell, holding the fold.
            let major = filter(&input, &s, true, 0);
            assert_eq!(
                kinds(&major),
                vec![(b"q".to_vec(), 5, Kind::Put), (b"q".to_vec(), 0, Kind::Put)]
            );
            assert_eq!(read_ints(&major, &s, u64::MAX), want);
        }
        // A plain family keeps only the newest write at a timestamp.
        let plain = schema(GcRule::KEEP_ALL);
        assert_eq!(read_ints(&input, &plain, u64::MAX), vec![(5, 100), (0, 7)]);
    }

    #[test]
    fn aggregate_sums_wrap_and_gc_counts_cells() {
        let input = entries(&[RowMutation::new("r")
            .add_to_cell("f", "q", 1, i64::MAX)
            .add_to_cell("f", "q", 1, 2)
            .add_to_cell("f", "q", 2, 1)
            .add_to_cell("f", "q", 2, 1)
            .add_to_cell("f", "q", 3, 5)]);
        let s = aggregate_schema(Aggregator::Sum, GcRule::KEEP_ALL);
        assert_eq!(
            read_ints(&input, &s, u64::MAX),
            vec![(3, 5), (2, 2), (1, i64::MIN + 1)],
            "MAX + 2 wraps to MIN + 1"
        );
        // max_versions counts cells, not operands.
        let two = aggregate_schema(Aggregator::Sum, GcRule::MaxVersions(2));
        assert_eq!(read_ints(&input, &two, u64::MAX), vec![(3, 5), (2, 2)]);
        let major = filter(&input, &two, true, 0);
        assert_eq!(major.len(), 2);
        assert_eq!(read_ints(&major, &two, u64::MAX), vec![(3, 5), (2, 2)]);
    }

    #[test]
    fn redundant_tombstones_are_dropped() {
        let input = entries(&[
            RowMutation::new("r").delete_cells("f", "q", TimeRange::ALL),
            RowMutation::new("r").delete_family("f"),
            RowMutation::new("r").delete_row(),
            RowMutation::new("r").delete_family("f"),
        ]);
        let out = filter(&input, &schema(GcRule::KEEP_ALL), false, 0);
        assert_eq!(
            kinds(&out),
            vec![
                (Vec::new(), TOMBSTONE_TS, Kind::DeleteRow),
                (Vec::new(), TOMBSTONE_TS, Kind::DeleteFamily),
            ]
        );
    }

    #[test]
    fn gc_count_rules_only_in_major() {
        let mut ms = Vec::new();
        for ts in 1..=5 {
            ms.push(RowMutation::new("r").set_at("f", "q", ts, "v"));
        }
        let input = entries(&ms);
        let two = schema(GcRule::flat(Some(2), None, GcMode::Union));
        assert_eq!(filter(&input, &two, false, 0).len(), 5);
        let out = filter(&input, &two, true, 0);
        assert_eq!(
            kinds(&out).iter().map(|k| k.1).collect::<Vec<_>>(),
            vec![5, 4]
        );
        // Union age rules are applied by minor compactions too; intersection ones are not.
        let age = GcRule::flat(Some(10), Some(2), GcMode::Union);
        let out = filter(&input, &schema(age), false, 6);
        assert_eq!(
            kinds(&out).iter().map(|k| k.1).collect::<Vec<_>>(),
            vec![5, 4]
        );
        let inter = GcRule::flat(Some(1), Some(2), GcMode::Intersection);
        assert_eq!(filter(&input, &schema(inter.clone()), false, 6).len(), 5);
        let out = filter(&input, &schema(inter), true, 6);
        assert_eq!(
            kinds(&out).iter().map(|k| k.1).collect::<Vec<_>>(),
            vec![5, 4]
        );
    }

    #[test]
    fn unknown_families_dropped_only_in_major() {
        let mut input = entries(&[RowMutation::new("r").set_at("f", "q", 1, "v")]);
        input.push((key::encode(b"r", b"old", b"q", 1, 9, Kind::Put), vec![]));
        input.push((
            key::encode(b"r", b"old", b"", TOMBSTONE_TS, 10, Kind::DeleteFamily),
            vec![],
        ));
        input.sort();
        let s = schema(GcRule::KEEP_ALL);
        assert_eq!(
            filter(&input, &s, false, 0).len(),
            2,
            "tombstone kept, hidden cell dropped"
        );
        assert_eq!(filter(&input, &s, true, 0).len(), 1);
    }

    #[test]
    fn output_reads_like_input() {
        let input = entries(&[
            RowMutation::new("a")
                .set_at("f", "q", 1, "1")
                .set_at("f", "p", 1, "2"),
            RowMutation::new("a").delete_cells("f", "p", TimeRange::ALL),
            RowMutation::new("b").set_at("f", "q", 1, "3").delete_row(),
            RowMutation::new("c").set_at("f", "q", 1, "4"),
        ]);
        let s = schema(GcRule::default());
        let read = |v: &Entries| -> Vec<_> {
            let it = Box::new(VecIterator::new(Arc::new(v.clone())));
            CellReader::new(it, &ScanSpec::default(), s.clone(), u64::MAX, 0)
                .unwrap()
                .collect::<Result<Vec<_>>>()
                .unwrap()
        };
        let want = read(&input);
        assert_eq!(want.len(), 2);
        assert_eq!(read(&filter(&input, &s, true, 0)), want);
        assert_eq!(read(&filter(&input, &s, false, 0)), want);
    }

    #[test]
    fn corrupt_input_is_an_error_once() {
        let input: Entries = vec![(b"nonsense".to_vec(), vec![])];
        let it = Box::new(VecIterator::new(Arc::new(input)));
        let mut f = CompactionFilter::new(it, true, schema(GcRule::KEEP_ALL), 0).unwrap();
        assert!(matches!(f.next(), Some(Err(crate::Error::Corruption(_)))));
        assert!(f.next().is_none());
    }

    #[test]
    fn a_logged_major_compaction_reports_what_gc_and_dropped_families_take() {
        let input = entries(&[
            RowMutation::new("r")
                .set_at("f", "q", 1, "old")
                .set_at("f", "q", 2, "new")
                .set_at("g", "x", 5, "written while g was dropped"),
            RowMutation::new("s").set_at("g", "x", 5, "deleted first"),
            RowMutation::new("s").delete_family("g"),
        ]);
        // g is no longer in the schema; f keeps one version.
        let schema = schema(GcRule::flat(Some(1), None, GcMode::Union));
        let it = Box::new(VecIterator::new(Arc::new(input.clone())));
        let mut f = CompactionFilter::new(it, true, schema.clone(), 0)
            .unwrap()
            .reporting_collected(1 << 20);
        let out: Entries = f.by_ref().collect::<Result<_>>().unwrap();
        assert_eq!(kinds(&out), vec![(b"q".to_vec(), 2, Kind::Put)]);
        let got = f.take_collected();
        let c = |row: &str, fam: &str, q: &str, ts| Collected {
            row: row.as_bytes().to_vec(),
            family: fam.into(),
            qualifier: q.as_bytes().to_vec(),
            timestamp: ts,
        };
        // Row s's family was deleted (a writer's record) before the drop.
        assert_eq!(got, vec![c("r", "f", "q", Some(1)), c("r", "g", "", None)]);
        // Kept, not dropped, when nothing can report them (a flush).
        let it = Box::new(VecIterator::new(Arc::new(input)));
        let kept: Entries = CompactionFilter::new(it, false, schema, 0)
            .unwrap()
            .keeping_collected()
            .collect::<Result<_>>()
            .unwrap();
        assert!(kinds(&kept).contains(&(b"q".to_vec(), 1, Kind::Put)));
    }
}
