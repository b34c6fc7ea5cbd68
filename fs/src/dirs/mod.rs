//! Directories: mkdir, rmdir and listings.
//!
//! Small directories (a row's families, a family's cells, versions) are read
//! once per open and listed from that snapshot. A table's rows are streamed:
//! each `readdir` scans the store from the key after the last row listed,
//! which the handle remembers per offset for the last two batches only —
//! memory does not grow with the table, and rows inserted meanwhile neither
//! repeat nor hide rows.

pub(crate) mod change;
pub(crate) mod list;
pub(crate) mod snapshots;

use crate::node::Node;
use fuser::{FileAttr, FileType};

/// Offsets below this are `.`, `..` and the fixed entries of a table.
const ROW_BASE: u64 = 16;
/// Rows fetched per `readdir` of a table (a reply holds about a page of names).
const ROW_BATCH: u64 = 128;
/// Rows fetched at most per scan of a long listing (4× more each scan);
/// those a reply has no room for wait for the next (see `listing/readahead.rs`).
const MAX_ROW_BATCH: u64 = 1024;

pub use crate::open_files::handles::Listed;

/// A directory entry, with its attributes if the listing has them.
fn dir(name: Vec<u8>, node: Node, attr: Option<FileAttr>) -> Listed {
    Listed {
        name,
        node,
        kind: FileType::Directory,
        attr,
        version: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::node::{parent_and_name, CellAddr, Node, View};

    #[test]
    fn parents_and_names() {
        let cell = Node::Cell(CellAddr {
            table: "t".into(),
            view: View::At(5),
            row: b"r/x".to_vec().into(),
            family: "f".into(),
            qualifier: b".q".to_vec(),
        });
        let (p, n) = parent_and_name(&cell).unwrap();
        assert_eq!(n, b"%2Eq");
        let (pp, pn) = parent_and_name(&p).unwrap();
        assert_eq!(pn, b"f");
        let (ppp, ppn) = parent_and_name(&pp).unwrap();
        assert_eq!(ppn, b"r%2Fx");
        assert_eq!(
            ppp,
            Node::AtRoot {
                table: "t".into(),
                ts: 5
            }
        );
        assert!(parent_and_name(&Node::Root).is_none());
    }
}
