//! The listing component: what table and directory listings keep between
//! requests. Its state is private; each part's methods sit beside it:
//! `cursors.rs` the offsets of directories listed without OPENDIR,
//! `plus_hints.rs` whether a table listing's rows carry attributes,
//! `readahead.rs` rows scanned for a listing that a reply had no room for,
//! and the next reply's rows, read while the reader takes this one in, and
//! `kept.rs` whole table listings kept for when the kernel let its own go.

mod cursors;
mod kept;
mod plus_hints;
mod readahead;

pub use cursors::{offset_of, PlacedNames, Resume, LAST};
pub use kept::{row_bytes, KeptListing, KEPT_TABLE_BYTES};
#[cfg(test)]
pub use plus_hints::FIRST_REPLY_ATTRS;
pub use readahead::{Ahead, Fill, ListedRow};

/// Places in listings, plus hints, rows read ahead and whole listings kept
/// (see the module comment).
#[derive(Default)]
pub struct Listing {
    /// Places in listings of directories that were not opened.
    cursors: cursors::Cursors,
    /// Whether table listings send rows with attributes.
    plus_hints: plus_hints::PlusHints,
    /// Rows scanned for table listings and not sent yet.
    readahead: readahead::Readahead,
    /// Whole table listings.
    kept: kept::Kept,
}
