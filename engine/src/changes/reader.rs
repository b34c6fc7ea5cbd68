//! Reads a row range's change records in commit-timestamp order, from a
//! position on, up to the watermark of the servers read (nothing can
//! appear behind it later). Memory is bounded and the range is scanned once
//! a read: the oldest records asked for are kept in a bounded heap, and
//! when it overflows the window ends at the newest one it lets go.

use super::record::{decode_value, encode_value, ChangeRecord};
use super::WATERMARK_QUALIFIER;
use crate::data::TimeRange;
use crate::db::Bigtable;
use crate::env::now_micros;
use crate::error::{Error, Result};
use crate::scan::ScanSpec;
use crate::schema::CHANGES_FAMILY;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::ops::Bound;

/// Most records one read holds at once, whatever is asked.
pub const MAX_BATCH: usize = 10_000;

/// Where a reader is in the stream: every record with a commit timestamp
/// below `ts` has been delivered, and the first `skip` records at exactly
/// `ts` (records at one timestamp are ordered by row, then bytes). A
/// position resumes the same selection of rows it was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// Commit timestamp (µs) reached.
    pub ts: u64,
    /// Records at exactly `ts` already delivered.
    pub skip: u32,
}

impl Position {
    /// The token text: `<ts>` or `<ts>.<skip>`.
    pub fn to_token(self) -> String {
        if self.skip == 0 {
            self.ts.to_string()
        } else {
            format!("{}.{}", self.ts, self.skip)
        }
    }

    /// The position after a record committed at `commit_ts` read from here
    /// (records come in order: its timestamp is at least `self.ts`).
    pub fn after_record(self, commit_ts: u64) -> Position {
        if commit_ts == self.ts {
            Position {
                ts: commit_ts,
                skip: self.skip.saturating_add(1),
            }
        } else {
            Position {
                ts: commit_ts,
                skip: 1,
            }
        }
    }

    /// Parses [`Position::to_token`]'s text strictly.
    pub fn parse(s: &str) -> Result<Position> {
        let bad = || {
            Error::invalid(format!(
                "change token {s:?} is not <µs> or <µs>.<n> (decimal, no sign)"
            ))
        };
        let digits = |t: &str| {
            (!t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok())
                .flatten()
        };
        let (ts, skip) = match s.split_once('.') {
            Some((a, b)) => (
                digits(a).ok_or_else(bad)?,
                digits(b)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(bad)?,
            ),
            None => (digits(s).ok_or_else(bad)?, 0),
        };
        Ok(Position { ts, skip })
    }
}

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct ChangeQuery {
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// Row end (exclusive); `None`: the table's end.
    pub end: Option<Vec<u8>>,
    /// Resume after this position (ts 0: the oldest change retained).
    pub after: Position,
    /// Only records committed before this timestamp.
    pub until: Option<u64>,
    /// At most this many records (capped at [`MAX_BATCH`]).
    pub max_records: usize,
}

/// One read's result.
#[derive(Debug, Clone, Default)]
pub struct ChangeBatch {
    /// In commit-timestamp order.
    pub records: Vec<ChangeRecord>,
    /// Where to resume (after the last record, or at the watermark).
    pub next: Position,
    /// Every record at or below this timestamp has been delivered once
    /// `records` are consumed (when the batch was not cut short).
    pub watermark: u64,
    /// Whether `until` was reached: nothing more will come.
    pub done: bool,
}

/// The records of one window, complete up to `end` (exclusive).
struct Window {
    records: Vec<ChangeRecord>,
    end: u64,
    /// More than the cap were found: `end` is where the kept ones stop.
    full: bool,
}

impl Bigtable {
    /// Reads the next changes of `table` (see [`ChangeQuery`]).
    pub fn read_changes(&self, table: &str, q: &ChangeQuery) -> Result<ChangeBatch> {
        let t = self.table(table)?;
        let schema = t.schema();
        if !schema.logs_changes() {
            return Err(Error::invalid(format!(
                "table {table} keeps no change log (set `.table change_retention=1d` in its \
                 .schema, or change_stream_config)"
            )));
        }
        let oldest = now_micros().saturating_sub(schema.change_retention);
        if q.after.ts != 0 && q.after.ts < oldest {
            return Err(Error::invalid(format!(
                "change token {} is older than table {table}'s change retention ({}); \
                 the oldest change kept is from {oldest} µs",
                q.after.to_token(),
                crate::duration::duration_str(schema.change_retention)
            )));
        }
        let max = q.max_records.clamp(1, MAX_BATCH);
        let stop = q.until.unwrap_or(u64::MAX);
        // The beginning is the oldest change kept.
        let after = if q.after.ts == 0 {
            Position {
                ts: oldest,
                skip: 0,
            }
        } else {
            q.after
        };
        // No server's watermark is past its clock: reading ends there.
        let limit = stop.min(now_micros().saturating_add(1));
        let mut out: Vec<ChangeRecord> = Vec::new();
        let mut pos = after;
        let mut watermark = pos.ts.saturating_sub(1);
        let mut cut = false;
        if pos.ts < limit {
            let start = pos.ts;
            // The records at `start` already delivered are read again.
            let cap = max + pos.skip as usize;
            let w = self.read_window(t.id, q, start, limit, cap)?;
            if w.full && w.end <= start {
                return Err(Error::invalid(format!(
                    "more than {cap} changes at one timestamp {start}"
                )));
            }
            let mut records = w.records;
            records.sort_by(|a, b| {
                (a.commit_ts, &a.row)
                    .cmp(&(b.commit_ts, &b.row))
                    .then_with(|| {
                        encode_value(&a.mutations, a.gc).cmp(&encode_value(&b.mutations, b.gc))
                    })
            });
            let skip = records
                .iter()
                .take_while(|r| r.commit_ts == start)
                .count()
                .min(pos.skip as usize);
            records.drain(..skip);
            if records.len() > max {
                records.truncate(max);
                for r in &records {
                    pos = pos.after_record(r.commit_ts);
                }
                cut = true;
            } else {
                watermark = w.end.saturating_sub(1);
                if w.end > start {
                    pos = Position { ts: w.end, skip: 0 };
                }
            }
            out = records;
        }
        Ok(ChangeBatch {
            records: out,
            next: pos,
            watermark,
            done: !cut && pos.ts >= stop,
        })
    }

    /// Reads the records in `[start, end)` of every tablet of the query's
    /// rows, in one scan: the window ends earlier at the tablets' lowest
    /// watermark, and at the oldest commit time of the records past the
    /// `cap` oldest (every record before it is kept).
    fn read_window(
        &self,
        table: u64,
        q: &ChangeQuery,
        start: u64,
        end: u64,
        cap: usize,
    ) -> Result<Window> {
        let client = self.client()?;
        let mut records: BinaryHeap<ByTime> = BinaryHeap::new();
        let mut complete = end;
        let mut full = false;
        let mut row = q.start.clone();
        loop {
            let spec = ScanSpec {
                rows: crate::data::RowRange {
                    start: Bound::Included(row.clone()),
                    end: q.end.clone().map_or(Bound::Unbounded, Bound::Excluded),
                },
                families: Some(vec![CHANGES_FAMILY.to_string()]),
                time_range: TimeRange { start, end },
                ..Default::default()
            };
            let (mut cells, tablet_end) =
                client.with_tablet(table, &row, |s, l| s.scan_part(l.tablet, &spec))?;
            let mut marked = false;
            while let Some(c) = cells.next_cell()? {
                if c.family != CHANGES_FAMILY {
                    continue;
                }
                if c.qualifier == WATERMARK_QUALIFIER {
                    marked = true;
                    complete = complete.min(c.timestamp.saturating_add(1));
                    continue;
                }
                if c.timestamp >= complete {
                    continue;
                }
                records.push(ByTime(decode_value(c.row, c.timestamp, &c.value)?));
                if records.len() > cap {
                    full = true;
                    // The newest goes, and every record at its time.
                    if let Some(newest) = records.pop() {
                        complete = newest.0.commit_ts;
                    }
                    while records.peek().is_some_and(|r| r.0.commit_ts >= complete) {
                        records.pop();
                    }
                }
            }
            if !marked {
                return Err(Error::corruption(
                    "a tablet server's change scan had no watermark",
                ));
            }
            match tablet_end {
                Some(e) if q.end.as_ref().is_none_or(|x| e < *x) => row = e,
                _ => break,
            }
        }
        let mut records: Vec<ChangeRecord> = records.into_iter().map(|r| r.0).collect();
        records.retain(|r| r.commit_ts < complete);
        Ok(Window {
            records,
            end: complete,
            full,
        })
    }
}

/// A record ordered by its commit time alone (the heap's newest on top).
struct ByTime(ChangeRecord);

impl PartialEq for ByTime {
    fn eq(&self, other: &Self) -> bool {
        self.0.commit_ts == other.0.commit_ts
    }
}
impl Eq for ByTime {}
impl PartialOrd for ByTime {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByTime {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.commit_ts.cmp(&other.0.commit_ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_strictly() {
        for (s, p) in [("0", (0, 0)), ("17", (17, 0)), ("17.3", (17, 3))] {
            let got = Position::parse(s).unwrap();
            assert_eq!((got.ts, got.skip), p);
            assert_eq!(got.to_token(), s);
        }
        for s in [
            "",
            ".",
            "1.",
            ".1",
            "-1",
            "+1",
            "1.2.3",
            "1x",
            "99999999999999999999999",
        ] {
            assert!(Position::parse(s).is_err(), "{s}");
        }
    }
}
