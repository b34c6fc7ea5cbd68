//! What an inode stands for, and inode numbers derived from it.
//!
//! Every inode is a path-like value ([`Node`]). Its number is a hash of that
//! value, so the same table, row or cell always gets the same inode number —
//! `readdir` can report the number `lookup` will later return without keeping
//! anything, and the daemon can invalidate the kernel's cache for a cell it
//! changed without having been asked about it.

use std::fmt;

pub mod lock;
#[cfg(test)]
mod tests;

use crate::names::{display_name, split_snapshot_table, version_name};
pub use crate::status::StatusFile;
pub use lock::LockNode;

/// The root directory's inode number (fixed by FUSE).
pub const ROOT_INO: u64 = 1;

/// Which data a row/family/cell node shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum View {
    /// The live table (writable).
    Now,
    /// `.at/<ts>/`: the newest version at or before `ts` (read-only).
    At(u64),
}

impl View {
    pub fn is_now(self) -> bool {
        self == View::Now
    }
    /// The newest timestamp this view shows.
    pub fn max_ts(self) -> Option<u64> {
        match self {
            View::Now => None,
            View::At(t) => Some(t),
        }
    }
}

/// Reserved names inside a table directory.
pub const SCHEMA: &str = ".schema";
pub const MUTATE: &str = ".mutate";
pub const SCAN: &str = ".scan";
pub const CHANGES: &str = ".changes";
pub const AT: &str = ".at";
pub const SNAPSHOTS: &str = ".snapshots";
/// The view a snapshot's tree is shown in: every version it holds.
pub const SNAPSHOT_TS: u64 = u64::MAX - 1;
/// Reserved name inside a family directory.
pub const VERSIONS: &str = ".versions";
/// Reserved name in the root.
pub const STATUS_DIR: &str = ".bigtable";

/// A row's tag in the inode encoding (see [`DataPath`]).
const ROW_TAG: u8 = 10;

/// A node inside a row, described once (see [`Node::data_path`]).
struct DataPath<'a> {
    /// The node's tag in the inode encoding (10..=15; 13 and up lie under
    /// `.versions`).
    tag: u8,
    table: &'a str,
    view: View,
    row: &'a [u8],
    family: Option<&'a str>,
    qualifier: Option<&'a [u8]>,
    ts: Option<u64>,
}

impl CellAddr {
    /// The column as a [`DataPath`] with inode tag `tag`.
    fn data_path(&self, tag: u8, ts: Option<u64>) -> DataPath<'_> {
        DataPath {
            family: Some(&self.family),
            qualifier: Some(&self.qualifier),
            ts,
            ..DataPath::base(tag, &self.table, self.view, &self.row)
        }
    }
}

impl<'a> DataPath<'a> {
    /// Its part of [`Node::encode`]: the tag, then each part present.
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.tag);
        put(out, self.table.as_bytes());
        match self.view {
            View::Now => out.push(0),
            View::At(t) => {
                out.push(1);
                out.extend_from_slice(&t.to_le_bytes());
            }
        }
        put(out, self.row);
        if let Some(f) = self.family {
            put(out, f.as_bytes());
        }
        if let Some(q) = self.qualifier {
            put(out, q);
        }
        if let Some(ts) = self.ts {
            out.extend_from_slice(&ts.to_le_bytes());
        }
    }

    fn base(tag: u8, table: &'a str, view: View, row: &'a [u8]) -> DataPath<'a> {
        DataPath {
            tag,
            table,
            view,
            row,
            family: None,
            qualifier: None,
            ts: None,
        }
    }
}

/// A table or family name in a [`Node`]: shared, since every inode below a
/// table (or family) names it and the kernel may hold millions of them.
pub type Name = std::sync::Arc<str>;
/// A row key in a [`Node`], shared by the row's family and cell inodes.
pub type Key = std::sync::Arc<[u8]>;

/// One column of a row as a view shows it: what a cell file, its
/// `.versions/<qualifier>/` directory and each of its version files name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CellAddr {
    pub table: Name,
    pub view: View,
    pub row: Key,
    pub family: Name,
    pub qualifier: Vec<u8>,
}

impl CellAddr {
    /// The live column `family:qualifier` of `row`.
    pub fn now(table: Name, row: Key, family: Name, qualifier: Vec<u8>) -> CellAddr {
        CellAddr {
            table,
            view: View::Now,
            row,
            family,
            qualifier,
        }
    }

    /// The same column in the live table.
    pub fn live(&self) -> CellAddr {
        CellAddr {
            view: View::Now,
            ..self.clone()
        }
    }

    /// The family the column lies in.
    pub fn family_addr(&self) -> FamilyAddr {
        FamilyAddr {
            table: self.table.clone(),
            view: self.view,
            row: self.row.clone(),
            family: self.family.clone(),
        }
    }
}

/// One column family of a row as a view shows it: what a family directory
/// and its `.versions/` directory name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FamilyAddr {
    pub table: Name,
    pub view: View,
    pub row: Key,
    pub family: Name,
}

impl FamilyAddr {
    /// Column `qualifier` of the family.
    pub fn column(&self, qualifier: Vec<u8>) -> CellAddr {
        CellAddr {
            table: self.table.clone(),
            view: self.view,
            row: self.row.clone(),
            family: self.family.clone(),
            qualifier,
        }
    }

    /// The row directory the family lies in.
    pub fn row_node(&self) -> Node {
        Node::Row {
            table: self.table.clone(),
            view: self.view,
            row: self.row.clone(),
        }
    }

    /// The family as a [`DataPath`] with inode tag `tag`.
    fn data_path(&self, tag: u8) -> DataPath<'_> {
        DataPath {
            family: Some(&self.family),
            ..DataPath::base(tag, &self.table, self.view, &self.row)
        }
    }
}

/// One inode of the filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Node {
    Root,
    /// `/.bigtable/`
    StatusDir,
    /// `/.bigtable/<file>`
    Status(StatusFile),
    /// `/<table>/`
    Table(Name),
    /// `/<table>/.schema`
    Schema(Name),
    /// `/<table>/.mutate`
    Mutate(Name),
    /// `/<table>/.scan/`
    ScanDir(Name),
    /// `/<table>/.scan/<query>` (the query is the raw filename)
    Scan {
        table: Name,
        query: Vec<u8>,
    },
    /// `/<table>/.changes/`
    ChangesDir(Name),
    /// `/<table>/.changes/<query>`: the table's change stream (the query
    /// is the raw filename, `crate::change_query`)
    Changes {
        table: Name,
        query: Vec<u8>,
    },
    /// `/<table>/.at/`
    AtDir(Name),
    /// `/<table>/.at/<ts>/`: the rows of the table as of `ts`; with
    /// `table` a [`crate::names::snapshot_table`] name and `ts`
    /// [`SNAPSHOT_TS`], `/<table>/.snapshots/<snapshot>/`.
    AtRoot {
        table: Name,
        ts: u64,
    },
    /// `/<table>/.snapshots/`
    SnapDir(Name),
    /// A row directory.
    Row {
        table: Name,
        view: View,
        row: Key,
    },
    /// A column family directory inside a row.
    Family(FamilyAddr),
    /// A cell: the newest version of one column.
    Cell(CellAddr),
    /// `<family>/.versions/`
    VersionsDir(FamilyAddr),
    /// `<family>/.versions/<qualifier>/`
    VersionsColumn(CellAddr),
    /// `<family>/.versions/<qualifier>/<ts>`: one version.
    Version {
        cell: CellAddr,
        ts: u64,
    },
    // ---- lockdir hook: `.chubby/`, the lock service's namespace ----
    /// An inode under `.chubby/` (see `crate::lockdir`).
    Lock(LockNode),
}

impl Node {
    /// Whether this is a directory. For a lock-service entry the kind lives
    /// in the service; every operation on one is routed to `crate::lockdir`,
    /// which looks it up, so this only matters for the virtual files.
    pub fn is_dir(&self) -> bool {
        !matches!(
            self,
            Node::Lock(LockNode::Events(_) | LockNode::Status)
                | Node::Status(_)
                | Node::Schema(_)
                | Node::Mutate(_)
                | Node::Scan { .. }
                | Node::Changes { .. }
                | Node::Cell(_)
                | Node::Version { .. }
        )
    }

    /// The column whose value this node's file holds: a cell's, or a
    /// version file's (`None` for every other node).
    pub fn value_cell(&self) -> Option<&CellAddr> {
        match self {
            Node::Cell(c) | Node::Version { cell: c, .. } => Some(c),
            _ => None,
        }
    }

    /// The table this node belongs to.
    pub fn table(&self) -> Option<&str> {
        match self {
            Node::Root | Node::StatusDir | Node::Status(_) | Node::Lock(_) => None,
            Node::Table(t)
            | Node::Schema(t)
            | Node::Mutate(t)
            | Node::ScanDir(t)
            | Node::ChangesDir(t)
            | Node::AtDir(t)
            | Node::SnapDir(t) => Some(t),
            Node::Scan { table, .. } | Node::Changes { table, .. } | Node::AtRoot { table, .. } => {
                Some(table)
            }
            n => n.data_path().map(|p| p.table),
        }
    }

    /// The row, family, column and version a node inside a row stands
    /// for: the one description the accessors, the inode encoding and the
    /// display use.
    fn data_path(&self) -> Option<DataPath<'_>> {
        Some(match self {
            Node::Row { table, view, row } => DataPath::base(ROW_TAG, table, *view, row),
            Node::Family(f) => f.data_path(11),
            Node::Cell(c) => c.data_path(12, None),
            Node::VersionsDir(f) => f.data_path(13),
            Node::VersionsColumn(c) => c.data_path(14, None),
            Node::Version { cell, ts } => cell.data_path(15, Some(*ts)),
            _ => return None,
        })
    }

    /// Whether this is the live cell `family:qualifier` of `row` or one of
    /// its version files (what unlinking that cell removes).
    pub fn is_column_of(&self, table: &str, row: &[u8], family: &str, qualifier: &[u8]) -> bool {
        match self {
            Node::Cell(c) | Node::Version { cell: c, .. } => {
                c.view.is_now()
                    && *c.table == *table
                    && *c.row == *row
                    && *c.family == *family
                    && c.qualifier == qualifier
            }
            _ => false,
        }
    }

    /// The row this node lies in.
    pub fn row(&self) -> Option<&[u8]> {
        self.data_path().map(|p| p.row)
    }

    /// The family this node lies in.
    pub fn family(&self) -> Option<&str> {
        self.data_path().and_then(|p| p.family)
    }

    /// The view of row-level nodes (`None` for the rest).
    pub fn view(&self) -> Option<View> {
        match self {
            Node::AtRoot { ts, .. } => Some(View::At(*ts)),
            n => n.data_path().map(|p| p.view),
        }
    }

    /// Whether writes to this node must fail with EROFS (time-travel views,
    /// status files and scan results).
    pub fn read_only(&self) -> bool {
        match self {
            Node::Status(f) => !f.writable(),
            Node::StatusDir
            | Node::ScanDir(_)
            | Node::Scan { .. }
            | Node::ChangesDir(_)
            | Node::Changes { .. }
            | Node::AtDir(_)
            | Node::AtRoot { .. } => true,
            n => n.view().is_some_and(|v| !v.is_now()),
        }
    }

    /// The natural inode number of this node: a hash of its value, never 0
    /// or 1 (1 is the root). What the kernel is told is
    /// [`crate::kernel::inodes::InodeTable::ino_of`]: a renamed cell keeps its number.
    pub fn natural_ino(&self) -> u64 {
        if *self == Node::Root {
            return ROOT_INO;
        }
        hashed(|buf| self.encode(buf))
    }

    /// The natural number of `Node::Row { table, view, row }`, without
    /// building the node: a listing numbers thousands of rows a reply.
    pub fn row_ino(table: &str, view: View, row: &[u8]) -> u64 {
        hashed(|buf| DataPath::base(ROW_TAG, table, view, row).encode(buf))
    }

    /// A self-delimiting encoding (the input of [`Node::natural_ino`]).
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Node::Root => out.push(0),
            Node::StatusDir => out.push(1),
            Node::Status(f) => {
                out.push(2);
                put(out, f.name().as_bytes());
            }
            Node::Table(t)
            | Node::Schema(t)
            | Node::Mutate(t)
            | Node::ScanDir(t)
            | Node::AtDir(t) => {
                out.push(match self {
                    Node::Table(_) => 3,
                    Node::Schema(_) => 4,
                    Node::Mutate(_) => 5,
                    Node::ScanDir(_) => 6,
                    _ => 8,
                });
                put(out, t.as_bytes());
            }
            Node::Scan { table, query } => {
                out.push(7);
                put(out, table.as_bytes());
                put(out, query);
            }
            Node::AtRoot { table, ts } => {
                out.push(9);
                put(out, table.as_bytes());
                out.extend_from_slice(&ts.to_le_bytes());
            }
            Node::Lock(l) => {
                out.push(16);
                l.encode(out);
            }
            Node::SnapDir(t) => {
                out.push(17);
                put(out, t.as_bytes());
            }
            Node::ChangesDir(t) => {
                out.push(18);
                put(out, t.as_bytes());
            }
            Node::Changes { table, query } => {
                out.push(19);
                put(out, table.as_bytes());
                put(out, query);
            }
            // Every other node lies inside a row.
            n => {
                if let Some(p) = n.data_path() {
                    p.encode(out);
                }
            }
        }
    }
}

/// The number hashed from an encoding that `encode` writes (never the
/// root's nor 0).
fn hashed(encode: impl FnOnce(&mut Vec<u8>)) -> u64 {
    // One buffer per thread: a listing asks for a number per entry, and
    // a fresh allocation each time was most of what one cost.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let h = BUF.with(|b| {
        let mut buf = b.borrow_mut();
        buf.clear();
        encode(&mut buf);
        let h = seahash::hash(&buf);
        // A long key's buffer is not kept.
        if buf.capacity() > 4096 {
            *buf = Vec::new();
        }
        h
    });
    match h {
        0 | ROOT_INO => 2,
        h => h,
    }
}

/// A length-prefixed part of an encoding (keeps ("ab","c") and ("a","bc") apart).
fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

impl fmt::Display for Node {
    /// A readable path for log lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let esc = |b: &[u8]| String::from_utf8_lossy(&crate::names::display_name(b)).into_owned();
        let view = |v: &View| match v {
            View::Now => String::new(),
            View::At(t) => format!("{AT}/{t}/"),
        };
        match self {
            Node::Lock(l) => write!(f, "{l}"),
            Node::Root => write!(f, "/"),
            Node::StatusDir => write!(f, "/{STATUS_DIR}"),
            Node::Status(s) => write!(f, "/{STATUS_DIR}/{}", s.name()),
            Node::Table(t) => write!(f, "/{t}"),
            Node::Schema(t) => write!(f, "/{t}/{SCHEMA}"),
            Node::Mutate(t) => write!(f, "/{t}/{MUTATE}"),
            Node::ScanDir(t) => write!(f, "/{t}/{SCAN}"),
            Node::Scan { table, query } => {
                write!(f, "/{table}/{SCAN}/{}", String::from_utf8_lossy(query))
            }
            Node::ChangesDir(t) => write!(f, "/{t}/{CHANGES}"),
            Node::Changes { table, query } => {
                write!(f, "/{table}/{CHANGES}/{}", String::from_utf8_lossy(query))
            }
            Node::AtDir(t) => write!(f, "/{t}/{AT}"),
            Node::SnapDir(t) => write!(f, "/{t}/{SNAPSHOTS}"),
            Node::AtRoot { table, ts } => write!(f, "/{table}/{AT}/{ts}"),
            // Every other node lies inside a row.
            n => {
                let Some(p) = n.data_path() else {
                    return Ok(());
                };
                write!(f, "/{}/{}{}", p.table, view(&p.view), esc(p.row))?;
                if let Some(fam) = p.family {
                    write!(f, "/{fam}")?;
                }
                if p.tag >= 13 {
                    write!(f, "/{VERSIONS}")?;
                }
                if let Some(q) = p.qualifier {
                    write!(f, "/{}", esc(q))?;
                }
                if let Some(ts) = p.ts {
                    write!(f, "/{}", crate::names::version_name(ts))?;
                }
                Ok(())
            }
        }
    }
}

/// The directory a node lies in, and its name there (`None` for the root).
pub fn parent_and_name(node: &Node) -> Option<(Node, Vec<u8>)> {
    let s = |x: &str| x.as_bytes().to_vec();
    Some(match node {
        Node::Root => return None,
        Node::Lock(l) => l.parent_and_name(),
        Node::StatusDir => (Node::Root, s(STATUS_DIR)),
        Node::Status(f) => (Node::StatusDir, s(f.name())),
        Node::Table(t) => (Node::Root, s(t)),
        Node::Schema(t) => (Node::Table(t.clone()), s(SCHEMA)),
        Node::Mutate(t) => (Node::Table(t.clone()), s(MUTATE)),
        Node::ScanDir(t) => (Node::Table(t.clone()), s(SCAN)),
        Node::Scan { table, query } => (Node::ScanDir(table.clone()), query.clone()),
        Node::ChangesDir(t) => (Node::Table(t.clone()), s(CHANGES)),
        Node::Changes { table, query } => (Node::ChangesDir(table.clone()), query.clone()),
        Node::AtDir(t) => (Node::Table(t.clone()), s(AT)),
        Node::SnapDir(t) => (Node::Table(t.clone()), s(SNAPSHOTS)),
        Node::AtRoot { table, ts } => match split_snapshot_table(table) {
            Some((t, snap)) => (Node::SnapDir(Name::from(t)), s(snap)),
            None => (Node::AtDir(table.clone()), ts.to_string().into_bytes()),
        },
        Node::Row { table, view, row } => (
            match view {
                View::Now => Node::Table(table.clone()),
                View::At(ts) => Node::AtRoot {
                    table: table.clone(),
                    ts: *ts,
                },
            },
            display_name(row),
        ),
        Node::Family(f) => (f.row_node(), s(&f.family)),
        Node::Cell(c) => (Node::Family(c.family_addr()), display_name(&c.qualifier)),
        Node::VersionsDir(f) => (Node::Family(f.clone()), s(VERSIONS)),
        Node::VersionsColumn(c) => (
            Node::VersionsDir(c.family_addr()),
            display_name(&c.qualifier),
        ),
        Node::Version { cell, ts } => (
            Node::VersionsColumn(cell.clone()),
            version_name(*ts).into_bytes(),
        ),
    })
}

impl Node {
    /// The directory this node lies in, and its name there (`None` for the root).
    pub fn parent_and_name(&self) -> Option<(Node, Vec<u8>)> {
        parent_and_name(self)
    }
}
