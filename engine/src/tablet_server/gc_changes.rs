//! Garbage collection's change records: the cells a change-logged table's
//! compaction drops by the families' GC rules are committed as change
//! records marked GC (one per row, `DeleteCells` of each version) before
//! the compaction is installed (docs/changes.md). A memtable's flush drops
//! no collected cell of such a table: it could not report it. A major
//! compaction's drop of a family no longer in the schema (cells written
//! while it was dropped) is reported the same way, as a `DeleteFamily` of
//! each row that had some, a user's record.

use super::{commit, Served, TabletServer};
use crate::compaction_filter::Collected;
use crate::data::{Mutation, TimeRange};
use crate::Result;

/// The most key bytes of collected cells one compaction reports; past it,
/// the rest are kept for a later compaction (reads hide them meanwhile).
pub(super) const MAX_REPORTED_BYTES: usize = 16 << 20;
/// The most ops in one record.
const OPS_PER_RECORD: usize = 1_000;
/// The most records in one commit.
const RECORDS_PER_COMMIT: usize = 256;

/// Commits the records of `cells` (in key order: a row's are together).
pub(super) fn commit_collected(
    server: &TabletServer,
    s: &Served,
    cells: Vec<Collected>,
) -> Result<()> {
    // GC's records, and the dropped families' (a user's doing: deletes).
    let mut gc: Vec<(Vec<u8>, Vec<Mutation>)> = Vec::new();
    let mut dropped: Vec<(Vec<u8>, Vec<Mutation>)> = Vec::new();
    for c in cells {
        let (records, op) = match c.timestamp {
            Some(ts) => (
                &mut gc,
                Mutation::DeleteCells {
                    family: c.family,
                    qualifier: c.qualifier,
                    range: TimeRange::exactly(ts),
                },
            ),
            None => (&mut dropped, Mutation::DeleteFamily { family: c.family }),
        };
        match records.last_mut() {
            Some((row, ops)) if *row == c.row && ops.len() < OPS_PER_RECORD => ops.push(op),
            _ => records.push((c.row, vec![op])),
        }
    }
    for (records, is_gc) in [(gc, true), (dropped, false)] {
        for chunk in records.chunks(RECORDS_PER_COMMIT) {
            commit::commit_records(server, s, chunk, is_gc)?;
        }
    }
    Ok(())
}
