//! Whether a table listing's entries carry attributes (readdirplus).
//!
//! An entry with attributes makes the kernel build an inode and a dentry for
//! the row, and us register it: that is most of what a plain `ls` of a big
//! table costs (5× a passthrough answering plain readdir, at 100,000 rows).
//! An entry with its name only costs what a plain readdir entry costs, but a
//! reader that then enters the row must look it up first: one request more
//! per row. So entries carry attributes when the reader is likely to enter
//! the rows:
//!
//! - in a table's first listing's first reply (as the kernel's own
//!   READDIRPLUS_AUTO does in every listing), its first
//!   [`FIRST_REPLY_ATTRS`] rows: a table directory asks for 1 MiB replies
//!   (see `attr::listing_blksize`), thousands of rows, and an inode for each
//!   would cost a plain `ls` more than the whole listing. A table listed
//!   again with no row entered since its previous listing began is being
//!   listed, not walked: none (the kernel would make inodes for those rows
//!   only to forget them);
//! - when rows of the table were entered since the listing's last reply (a
//!   walk that descends as it reads, or after each batch it reads);
//! - for a whole listing, when rows were entered since the table's previous
//!   listing began: tree walks come in series (`find`, then `du`, `tar`,
//!   `rsync`), and one that found the rows without attributes has looked
//!   every one of them up.
//!
//! A hint only: concurrent listings of one table share it, and a wrong guess
//! costs time, never a wrong answer.

use super::Listing;
use crate::node::Name;
use ahash::AHashMap as HashMap;
use parking_lot::Mutex;

/// Tables remembered; past this the map starts again (a table forgotten is
/// treated as one never listed).
const CAPACITY: usize = 4096;

/// Rows of a listing's first reply that carry attributes when nobody
/// entered the table's rows (about what a 64 KiB first reply held).
pub const FIRST_REPLY_ATTRS: u64 = 384;

#[derive(Default, Clone, Copy)]
struct Table {
    /// Rows entered (looked up or listed) so far.
    entered: u64,
    /// `entered` when the latest listing began.
    at_start: u64,
    /// `entered` at the latest listing's latest reply.
    at_reply: u64,
    /// The latest listing began after its table's rows were entered.
    walked: bool,
}

/// See the module comment.
#[derive(Default)]
pub(super) struct PlusHints {
    tables: Mutex<HashMap<Name, Table>>,
}

impl Listing {
    /// A row of `table` was entered: looked up, or listed.
    pub fn entered(&self, table: &Name) {
        let mut g = self.plus_hints.tables.lock();
        if let Some(t) = g.get_mut(table) {
            t.entered += 1;
            return;
        }
        if g.len() >= CAPACITY {
            g.clear();
        }
        g.insert(
            table.clone(),
            Table {
                entered: 1,
                ..Default::default()
            },
        );
    }

    /// Whether the next reply of a listing of `table` carries attributes;
    /// `first`: it is the listing's first reply.
    #[cfg(test)]
    pub fn reply_plus(&self, table: &Name, first: bool) -> bool {
        self.reply_attrs(table, first) > 0
    }

    /// How many rows of the next reply of a listing of `table` carry
    /// attributes (the rest: names only); `first`: it is the listing's
    /// first reply. Some only in the first reply of a table's first
    /// listing; all when rows were entered (see the module comment).
    pub fn reply_attrs(&self, table: &Name, first: bool) -> u64 {
        let mut g = self.plus_hints.tables.lock();
        let t = match g.get_mut(table) {
            Some(t) => t,
            None if first => {
                if g.len() >= CAPACITY {
                    g.clear();
                }
                g.insert(table.clone(), Table::default());
                return FIRST_REPLY_ATTRS;
            }
            None => return 0,
        };
        let all = if first {
            t.walked = t.entered != t.at_start;
            t.at_start = t.entered;
            t.walked
        } else {
            t.walked || t.entered != t.at_reply
        };
        t.at_reply = t.entered;
        if all {
            u64::MAX
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_nobody_descends_into_carries_names_after_its_first_reply() {
        let h = Listing::default();
        let t = Name::from("t");
        assert!(h.reply_plus(&t, true));
        assert!(!h.reply_plus(&t, false));
        assert!(!h.reply_plus(&t, false));
        // The next listing carries none: nobody entered a row since the
        // first began, so this table is listed, not walked.
        assert!(!h.reply_plus(&t, true));
        assert!(!h.reply_plus(&t, false));
    }

    #[test]
    fn only_a_walked_tables_first_reply_carries_attributes_throughout() {
        let h = Listing::default();
        let t = Name::from("t");
        assert_eq!(h.reply_attrs(&t, true), FIRST_REPLY_ATTRS);
        assert_eq!(h.reply_attrs(&t, false), 0);
        h.entered(&t);
        assert_eq!(h.reply_attrs(&t, true), u64::MAX);
    }

    #[test]
    fn rows_entered_between_replies_bring_attributes_back() {
        let h = Listing::default();
        let t = Name::from("t");
        assert!(h.reply_plus(&t, true));
        assert!(!h.reply_plus(&t, false));
        h.entered(&t);
        assert!(h.reply_plus(&t, false));
        // Nothing entered since that reply.
        assert!(!h.reply_plus(&t, false));
    }

    #[test]
    fn a_walk_after_a_walk_gets_attributes_throughout() {
        let h = Listing::default();
        let (t, u) = (Name::from("t"), Name::from("u"));
        assert!(h.reply_plus(&t, true));
        assert!(!h.reply_plus(&t, false));
        // The walker looks the rows up after reading the listing.
        h.entered(&t);
        h.entered(&t);
        assert!(h.reply_plus(&t, true));
        assert!(h.reply_plus(&t, false));
        assert!(h.reply_plus(&t, false));
        // Another table keeps its own history.
        assert!(h.reply_plus(&u, true));
        assert!(!h.reply_plus(&u, false));
        // A listing after which nobody entered a row ends the series.
        assert!(!h.reply_plus(&t, true));
        assert!(!h.reply_plus(&t, false));
        // An entry brings the attributes back.
        h.entered(&t);
        assert_eq!(h.reply_attrs(&t, true), u64::MAX);
    }
}
