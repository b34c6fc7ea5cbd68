//! Change streams: every mutation applied to a table that keeps a change
//! log is also written, in the same commit-log record, as a change record
//! in the hidden family `.changes` of its row (docs/changes.md). So the log
//! is durable with the commit and moves with the row through splits,
//! merges, moves and recovery; the family's GC rule is the retention.
//!
//! `record` is the record's format, `watermark` a server's low watermark,
//! `reader` reads a row range's changes in commit-timestamp order.

pub mod reader;
pub mod record;
pub mod watermark;

pub use reader::{ChangeBatch, ChangeQuery, Position};
pub use record::ChangeRecord;

/// The qualifier of the marker cell a tablet server puts first in a scan of
/// the change family: its timestamp is the part's watermark. Change records
/// themselves have the empty qualifier.
pub const WATERMARK_QUALIFIER: &[u8] = b"watermark";
