//! A reference model of the mount, in the manner of mountpoint-s3's: proptest
//! runs random sequences of operations on `Fs` over the mock store and on
//! [`Model`], a few maps of tables, rows, families and versioned cells, and
//! compares each operation's answer (errno included) and then the whole
//! visible tree. A failing sequence shrinks to a minimal one. A second
//! daemon's mount of the same store takes some of the operations
//! ([`Op::Peer`]), each daemon told of the other's writes as the cluster
//! tells it, and its tree is compared too; the first mount also restarts
//! ([`Op::Remount`]).
//!
//! Where the documented behaviour differs from the naive expectation, the
//! model follows the documentation, and says which line.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const TABLES: [&str; 2] = ["t", "u"];
/// "ab" shares a prefix with "a", for `.scan/prefix=`.
const ROWS: [&str; 4] = ["a", "ab", "b", "c"];
const FAMS: [&str; 3] = ["f", "g", "h"];
const QUALS: [&str; 2] = ["x", "y"];
/// Timestamps at or above this were given by the store's clock (file
/// writes); explicit ones (`.mutate set … <ts>`) are below it.
const AUTO: u64 = 1 << 50;
/// The settings of every family the model makes: versions beyond a
/// family's limit are collected lazily (a compaction drops them, a read
/// only hides them), which no model of these operations can say, so the
/// limit is never reached.
const FAMILY_SETTINGS: &str = " max_versions=1000";

type Versions = BTreeMap<u64, Vec<u8>>;
/// row → family → qualifier → versions; empty maps are pruned.
type Rows = BTreeMap<String, BTreeMap<String, BTreeMap<String, Versions>>>;

#[derive(Clone, Debug, Default)]
struct Table {
    families: BTreeSet<String>,
    rows: Rows,
    /// Empty row and family directories (docs/mount.md, "Rows and
    /// families": "`mkdir row` and `mkdir row/family` make empty
    /// directories that last while the mount runs" and "`rm` of the last
    /// cell leaves the directories for `rmdir`").
    pending_rows: BTreeSet<String>,
    pending_fams: BTreeSet<(String, String)>,
    /// A `.versions/<qualifier>` whose last version was removed: it keeps
    /// its family directory listed (fs/src/pending.rs, `has_family`), not
    /// its row (`has_row`).
    pending_cols: BTreeSet<(String, String, String)>,
}

impl Table {
    fn cell(&self, r: &str, f: &str, q: &str) -> Option<&Versions> {
        self.rows.get(r)?.get(f)?.get(q)
    }

    fn row_visible(&self, r: &str) -> bool {
        self.rows.contains_key(r)
            || self.pending_rows.contains(r)
            || self.pending_fams.iter().any(|(pr, _)| pr == r)
    }

    fn fam_visible(&self, r: &str, f: &str) -> bool {
        self.rows.get(r).is_some_and(|fs| fs.contains_key(f))
            || self.pending_fams.contains(&(r.to_string(), f.to_string()))
            || self
                .pending_cols
                .iter()
                .any(|(pr, pf, _)| pr == r && pf == f)
    }

    fn visible_rows(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.rows.keys().cloned().collect();
        out.extend(self.pending_rows.iter().cloned());
        out.extend(self.pending_fams.iter().map(|(r, _)| r.clone()));
        out
    }

    fn visible_fams(&self, r: &str) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .rows
            .get(r)
            .map(|fs| fs.keys().cloned().collect())
            .unwrap_or_default();
        out.extend(
            self.pending_fams
                .iter()
                .filter(|(pr, _)| pr == r)
                .map(|(_, f)| f.clone()),
        );
        out.extend(
            self.pending_cols
                .iter()
                .filter(|(pr, ..)| pr == r)
                .map(|(_, f, _)| f.clone()),
        );
        out
    }

    fn set(&mut self, r: &str, f: &str, q: &str, ts: u64, v: Vec<u8>) {
        self.rows
            .entry(r.into())
            .or_default()
            .entry(f.into())
            .or_default()
            .entry(q.into())
            .or_default()
            .insert(ts, v);
    }

    fn delete_cell(&mut self, r: &str, f: &str, q: &str) -> Option<Versions> {
        let fams = self.rows.get_mut(r)?;
        let quals = fams.get_mut(f)?;
        let old = quals.remove(q);
        if quals.is_empty() {
            fams.remove(f);
        }
        if fams.is_empty() {
            self.rows.remove(r);
        }
        old
    }

    /// Data reached the store under this row and family: its placeholders
    /// go (fs/src/pending.rs, `data_written`), so a later delete through
    /// `.mutate` lets the row vanish ("A row exists while it has a cell").
    fn data_written(&mut self, r: &str, f: &str) {
        self.pending_rows.remove(r);
        self.pending_fams.remove(&(r.to_string(), f.to_string()));
    }

    fn keep_dirs(&mut self, r: &str, f: &str) {
        self.pending_rows.insert(r.into());
        self.pending_fams.insert((r.into(), f.into()));
    }
}

/// A cell open for writing, its buffer not yet committed.
#[derive(Debug)]
struct Open {
    at: (usize, usize, usize, usize),
    value: String,
    /// False once the cell was unlinked or replaced by a rename: "its
    /// `close` … commits nothing" (docs/cell-semantics.md).
    live: bool,
    /// An mtime set on it (by path) before its close: "A value not yet
    /// committed … is committed at that timestamp" (docs/cell-semantics.md).
    mtime: Option<u64>,
}

/// One daemon's empty directories of a table (the fields of [`Table`]).
type Dirs = (
    BTreeSet<String>,
    BTreeSet<(String, String)>,
    BTreeSet<(String, String, String)>,
);

#[derive(Debug, Default)]
struct Model {
    tables: BTreeMap<String, Table>,
    clock: u64,
    /// At most one descriptor held across operations.
    open: Option<Open>,
    /// The second daemon's empty directories, by table ([`Op::Peer`]).
    peer_dirs: BTreeMap<String, Dirs>,
    /// The descriptor it holds.
    peer_open: Option<Open>,
}

/// What the store holds: each table's families and rows.
type Stored = BTreeMap<String, (BTreeSet<String>, Rows)>;

#[derive(Clone, Debug)]
enum MutLine {
    Set(usize, usize, usize, String, Option<u64>),
    /// Every version, or the one at a timestamp.
    Delete(usize, usize, usize, Option<u64>),
    DeleteFamily(usize, usize),
    DeleteRow(usize),
}

#[derive(Clone, Debug)]
enum Op {
    MkTable(usize),
    RmTable(usize),
    MkRow(usize, usize),
    MkFam(usize, usize, usize),
    Put(usize, usize, usize, usize, String),
    /// `echo v >> t/r/f/q`: "`O_APPEND` writes commit as an atomic append"
    /// (docs/mount.md, Cells are whole-value files).
    Append(usize, usize, usize, usize, String),
    /// `mknod` of a regular file: "makes an empty cell, as `creat` and
    /// `close` do" (docs/cell-semantics.md); EEXIST where one is.
    Mknod(usize, usize, usize, usize),
    /// `mkdir -p t/r/f && echo v > t/r/f/q` (docs/mount.md, Rows and families).
    PutP(usize, usize, usize, usize, String),
    Get(usize, usize, usize, usize),
    Unlink(usize, usize, usize, usize),
    RmRow(usize, usize),
    RmFam(usize, usize, usize),
    /// A cell renamed within its row: table, row, (family, qualifier) →
    /// (family, qualifier), after a `mkdir -p` of the target's family.
    Rename(usize, usize, usize, usize, usize, usize),
    /// `truncate -s <n>` of a cell: its value cut or padded with zeros, as
    /// a new version (none if the size is the value's already).
    Truncate(usize, usize, usize, usize, usize),
    /// `touch -d @<ts>` of a cell: "moves the newest version to that
    /// timestamp" (docs/cell-semantics.md, mtime of a cell).
    Touch(usize, usize, usize, usize, u64),
    /// `renameat2(RENAME_EXCHANGE)` of two cells of one row: table, row,
    /// (family, qualifier) ↔ (family, qualifier).
    Exchange(usize, usize, usize, usize, usize, usize),
    Mutate(usize, Vec<MutLine>),
    /// The same lines written past the mount, as the gRPC API writes:
    /// straight to the store, then the mount is told which rows changed.
    External(usize, Vec<MutLine>),
    /// `.scan/<query>`: table, start, end, prefix (row indices), every
    /// version (`versions=all`) or the newest.
    Scan(usize, Option<usize>, Option<usize>, Option<usize>, bool),
    AddFamily(usize, usize),
    DropFamily(usize, usize),
    /// Writing `.versions/<q>/<ts>`: that exact version (docs/mount.md, Versions).
    PutVersion(usize, usize, usize, usize, u64, String),
    /// `rm .versions/<q>/<ts>`: one version.
    RmVersion(usize, usize, usize, usize, u64),
    /// Open an existing cell with `O_TRUNC`, write, and keep it open;
    /// nothing if a descriptor is open already.
    OpenWrite(usize, usize, usize, usize, String),
    /// Close that descriptor: its buffer is one new version.
    Close,
    /// `ftruncate` of that descriptor: its buffer cut or padded with zeros.
    Ftruncate(usize),
    /// The tree under `.at/<ts>/`.
    At(usize, u64),
    /// The operation on the n-th cell that exists (modulo their number), so
    /// that operations on cells mostly reach one; run as that operation.
    OnCell(usize, Box<Op>),
    /// The operation through a second daemon's mount of the same store (its
    /// own empty directories and descriptor): each daemon is told of
    /// the rows and tables the other's operations wrote, as the cluster's
    /// invalidations tell it (docs/coherence.md).
    Peer(Box<Op>),
    /// The mount stopped and mounted again: the descriptor is closed first,
    /// and the directories made with `mkdir` are gone ("last while the
    /// mount runs", docs/mount.md, Rows and families).
    Remount,
}

fn value() -> impl Strategy<Value = String> {
    "[a-c]{0,3}"
}

fn mut_line() -> impl Strategy<Value = MutLine> {
    prop_oneof![
        3 => (0..4usize, 0..3usize, 0..2usize, value(), proptest::option::of(1..10u64))
            .prop_map(|(r, f, q, v, ts)| MutLine::Set(r, f, q, v, ts.map(|t| t * 100))),
        2 => (0..4usize, 0..3usize, 0..2usize, proptest::option::of(1..10u64))
            .prop_map(|(r, f, q, ts)| MutLine::Delete(r, f, q, ts.map(|t| t * 100))),
        1 => (0..4usize, 0..3usize).prop_map(|(r, f)| MutLine::DeleteFamily(r, f)),
        1 => (0..4usize).prop_map(MutLine::DeleteRow),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    // Mostly the table and families that exist from the start, so that most
    // operations reach data rather than ENOENT.
    let t = prop_oneof![3 => Just(0usize), 1 => Just(1usize)];
    let r = 0..4usize;
    let f = prop_oneof![3 => Just(0usize), 3 => Just(1usize), 1 => Just(2usize)];
    let q = 0..2usize;
    prop_oneof![
        1 => t.clone().prop_map(Op::MkTable),
        1 => t.clone().prop_map(Op::RmTable),
        4 => (t.clone(), r.clone()).prop_map(|(t, r)| Op::MkRow(t, r)),
        4 => (t.clone(), r.clone(), f.clone()).prop_map(|(t, r, f)| Op::MkFam(t, r, f)),
        3 => (t.clone(), r.clone(), f.clone(), q.clone(), value())
            .prop_map(|(t, r, f, q, v)| Op::Put(t, r, f, q, v)),
        8 => (t.clone(), r.clone(), f.clone(), q.clone(), value())
            .prop_map(|(t, r, f, q, v)| Op::PutP(t, r, f, q, v)),
        3 => (t.clone(), r.clone(), f.clone(), q.clone(), value())
            .prop_map(|(t, r, f, q, v)| Op::Append(t, r, f, q, v)),
        3 => (t.clone(), r.clone(), f.clone(), q.clone()).prop_map(|(t, r, f, q)| Op::Get(t, r, f, q)),
        1 => (t.clone(), r.clone(), f.clone(), q.clone())
            .prop_map(|(t, r, f, q)| Op::Mknod(t, r, f, q)),
        3 => (t.clone(), r.clone(), f.clone(), q.clone())
            .prop_map(|(t, r, f, q)| Op::Unlink(t, r, f, q)),
        2 => (t.clone(), r.clone()).prop_map(|(t, r)| Op::RmRow(t, r)),
        2 => (t.clone(), r.clone(), f.clone()).prop_map(|(t, r, f)| Op::RmFam(t, r, f)),
        2 => (t.clone(), r.clone(), f.clone(), q.clone(), f.clone(), q.clone())
            .prop_map(|(t, r, f, q, f2, q2)| Op::Rename(t, r, f, q, f2, q2)),
        4 => (t.clone(), proptest::collection::vec(mut_line(), 1..4))
            .prop_map(|(t, l)| Op::Mutate(t, l)),
        2 => (t.clone(), proptest::collection::vec(mut_line(), 1..4))
            .prop_map(|(t, l)| Op::External(t, l)),
        2 => (
            t.clone(),
            proptest::option::of(r.clone()),
            proptest::option::of(r.clone()),
            proptest::option::of(r.clone()),
            any::<bool>()
        )
            .prop_map(|(t, s, e, p, a)| Op::Scan(t, s, e, p, a)),
        1 => (t.clone(), f.clone()).prop_map(|(t, f)| Op::AddFamily(t, f)),
        1 => (t.clone(), f.clone()).prop_map(|(t, f)| Op::DropFamily(t, f)),
        1 => (t.clone(), 1..10u64).prop_map(|(t, ts)| Op::At(t, ts * 100 + 50)),
        3 => (t.clone(), r.clone(), f.clone(), q.clone(), value())
            .prop_map(|(t, r, f, q, v)| Op::OpenWrite(t, r, f, q, v)),
        3 => Just(Op::Close),
        1 => (0..5usize).prop_map(Op::Ftruncate),
        12 => (any::<usize>(), prop_oneof![
            (0..3usize, 0..2usize).prop_map(|(f, q)| Op::Rename(0, 0, 0, 0, f, q)),
            (0..3usize, 0..2usize).prop_map(|(f, q)| Op::Exchange(0, 0, 0, 0, f, q)),
            (0..5usize).prop_map(|n| Op::Truncate(0, 0, 0, 0, n)),
            (1..10u64).prop_map(|ts| Op::Touch(0, 0, 0, 0, ts * 100)),
            Just(Op::Get(0, 0, 0, 0)),
            Just(Op::Unlink(0, 0, 0, 0)),
            value().prop_map(|v| Op::OpenWrite(0, 0, 0, 0, v)),
            value().prop_map(|v| Op::Append(0, 0, 0, 0, v)),
            (1..10u64, value()).prop_map(|(ts, v)| Op::PutVersion(0, 0, 0, 0, ts * 100, v)),
            Just(Op::RmVersion(0, 0, 0, 0, 0)),
        ])
            .prop_map(|(n, op)| Op::OnCell(n, Box::new(op))),
        2 => (t.clone(), r.clone(), f.clone(), q.clone(), 1..10u64, value())
            .prop_map(|(t, r, f, q, ts, v)| Op::PutVersion(t, r, f, q, ts * 100, v)),
        2 => (t, r, f, q, 1..10u64)
            .prop_map(|(t, r, f, q, ts)| Op::RmVersion(t, r, f, q, ts * 100)),
        1 => Just(Op::Remount),
    ]
}

/// What the second daemon does: any operation but writes past both mounts
/// and a restart.
fn peer_op() -> impl Strategy<Value = Op> {
    op().prop_filter("an operation of the first mount", |op| {
        !matches!(op, Op::External(..) | Op::Remount)
    })
}

/// Operations on one daemon's mount, or now and then on a second's.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let one = prop_oneof![
        6 => op(),
        1 => peer_op().prop_map(|op| Op::Peer(Box::new(op))),
    ];
    proptest::collection::vec(one, 1..40)
}

/// What an operation answers, compared between the two sides.
type Answer = Result<Vec<String>, Errno>;

fn ok() -> Answer {
    Ok(Vec::new())
}

fn unit(r: Result<(), Errno>) -> Answer {
    r.map(|()| Vec::new())
}

/// `mkdir -p`: a directory that exists already is no error.
fn mkdir_p(a: Answer) -> Answer {
    match a {
        Err(Errno::EEXIST) => ok(),
        a => a,
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

impl Model {
    fn new() -> Model {
        // T::new's table: families f and g.
        let mut t = Table::default();
        t.families.extend(["f".to_string(), "g".to_string()]);
        let mut m = Model::default();
        m.tables.insert("t".into(), t);
        m
    }

    /// `f` with the second daemon's empty directories and descriptor in
    /// place of the first's: each daemon's writes reach a descriptor of the
    /// other as writes past its mount do.
    fn as_peer<R>(&mut self, f: impl FnOnce(&mut Model) -> R) -> R {
        self.swap_dirs();
        std::mem::swap(&mut self.open, &mut self.peer_open);
        let r = f(self);
        std::mem::swap(&mut self.open, &mut self.peer_open);
        self.swap_dirs();
        r
    }

    fn swap_dirs(&mut self) {
        for (name, tb) in &mut self.tables {
            let d = self.peer_dirs.entry(name.clone()).or_default();
            std::mem::swap(&mut tb.pending_rows, &mut d.0);
            std::mem::swap(&mut tb.pending_fams, &mut d.1);
            std::mem::swap(&mut tb.pending_cols, &mut d.2);
        }
    }

    /// Either daemon's empty directories of a table that is gone, or of a
    /// family no longer in its table's schema: they go with it on every
    /// daemon (after each operation).
    fn forget_gone_dirs(&mut self) {
        let tables = &self.tables;
        self.peer_dirs.retain(|name, _| tables.contains_key(name));
        for (name, tb) in &mut self.tables {
            let fams = &tb.families;
            tb.pending_fams.retain(|(_, f)| fams.contains(f));
            tb.pending_cols.retain(|(_, f, _)| fams.contains(f));
            if let Some(d) = self.peer_dirs.get_mut(name) {
                d.1.retain(|(_, f)| fams.contains(f));
                d.2.retain(|(_, f, _)| fams.contains(f));
            }
        }
    }

    /// The first daemon's mount started again.
    fn remount(&mut self) -> Answer {
        let closed = self.apply(&Op::Close);
        for tb in self.tables.values_mut() {
            tb.pending_rows.clear();
            tb.pending_fams.clear();
            tb.pending_cols.clear();
        }
        closed
    }

    fn stored(&self) -> Stored {
        self.tables
            .iter()
            .map(|(n, tb)| (n.clone(), (tb.families.clone(), tb.rows.clone())))
            .collect()
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        AUTO + self.clock
    }

    fn table(&mut self, t: usize) -> Result<&mut Table, Errno> {
        self.tables.get_mut(TABLES[t]).ok_or(Errno::ENOENT)
    }

    /// The family directory a cell's path names must resolve.
    fn fam_dir(&mut self, t: usize, r: usize, f: usize) -> Result<&mut Table, Errno> {
        let tb = self.table(t)?;
        if !tb.row_visible(ROWS[r]) || !tb.fam_visible(ROWS[r], FAMS[f]) {
            return Err(Errno::ENOENT);
        }
        Ok(tb)
    }

    fn apply(&mut self, op: &Op) -> Answer {
        match *op {
            Op::MkTable(t) => {
                if self.tables.contains_key(TABLES[t]) {
                    return Err(Errno::EEXIST);
                }
                self.tables.insert(TABLES[t].into(), Table::default());
                ok()
            }
            Op::RmTable(t) => {
                // docs/mount.md, Tables: "`rmdir` removes an empty one".
                if self.table(t)?.visible_rows().is_empty() {
                    self.tables.remove(TABLES[t]);
                    ok()
                } else {
                    Err(Errno::ENOTEMPTY)
                }
            }
            Op::MkRow(t, r) => {
                let tb = self.table(t)?;
                if tb.row_visible(ROWS[r]) {
                    return Err(Errno::EEXIST);
                }
                tb.pending_rows.insert(ROWS[r].into());
                ok()
            }
            Op::MkFam(t, r, f) => {
                let tb = self.table(t)?;
                if !tb.row_visible(ROWS[r]) {
                    return Err(Errno::ENOENT);
                }
                // "`mkdir row/family` fails with ENOENT if the family is
                // not in the schema" (docs/mount.md, Rows and families).
                if !tb.families.contains(FAMS[f]) {
                    return Err(Errno::ENOENT);
                }
                if tb.fam_visible(ROWS[r], FAMS[f]) {
                    return Err(Errno::EEXIST);
                }
                tb.pending_fams.insert((ROWS[r].into(), FAMS[f].into()));
                ok()
            }
            Op::Put(t, r, f, q, ref v) => {
                let ts = self.tick();
                let tb = self.fam_dir(t, r, f)?;
                // A closed file is one new version (docs/cell-semantics.md,
                // first paragraph).
                tb.set(ROWS[r], FAMS[f], QUALS[q], ts, v.clone().into_bytes());
                tb.data_written(ROWS[r], FAMS[f]);
                ok()
            }
            Op::Append(t, r, f, q, ref v) => {
                let ts = self.tick();
                let tb = self.fam_dir(t, r, f)?;
                let mut new = tb
                    .cell(ROWS[r], FAMS[f], QUALS[q])
                    .and_then(|vs| newest(vs, u64::MAX))
                    .unwrap_or_default()
                    .to_vec();
                new.extend_from_slice(v.as_bytes());
                tb.set(ROWS[r], FAMS[f], QUALS[q], ts, new);
                tb.data_written(ROWS[r], FAMS[f]);
                ok()
            }
            Op::PutP(t, r, f, q, ref v) => {
                mkdir_p(self.apply(&Op::MkRow(t, r)))?;
                mkdir_p(self.apply(&Op::MkFam(t, r, f)))?;
                self.apply(&Op::Put(t, r, f, q, v.clone()))
            }
            Op::Mknod(t, r, f, q) => {
                let ts = self.tick();
                let tb = self.fam_dir(t, r, f)?;
                if tb.cell(ROWS[r], FAMS[f], QUALS[q]).is_some() {
                    return Err(Errno::EEXIST);
                }
                tb.set(ROWS[r], FAMS[f], QUALS[q], ts, Vec::new());
                tb.data_written(ROWS[r], FAMS[f]);
                ok()
            }
            Op::Get(t, r, f, q) => {
                let tb = self.fam_dir(t, r, f)?;
                let vs = tb.cell(ROWS[r], FAMS[f], QUALS[q]).ok_or(Errno::ENOENT)?;
                Ok(vec![text(newest(vs, u64::MAX).unwrap_or_default())])
            }
            Op::Unlink(t, r, f, q) => {
                let tb = self.fam_dir(t, r, f)?;
                tb.delete_cell(ROWS[r], FAMS[f], QUALS[q])
                    .ok_or(Errno::ENOENT)?;
                if let Some(o) = self.open.as_mut().filter(|o| o.at == (t, r, f, q)) {
                    o.live = false;
                }
                let tb = self.table(t)?;
                // "`rm` of the last cell leaves the directories for `rmdir`".
                tb.keep_dirs(ROWS[r], FAMS[f]);
                ok()
            }
            Op::RmRow(t, r) => {
                let tb = self.table(t)?;
                if tb.rows.contains_key(ROWS[r]) {
                    return Err(Errno::ENOTEMPTY);
                }
                if !tb.row_visible(ROWS[r]) {
                    return Err(Errno::ENOENT);
                }
                tb.pending_rows.remove(ROWS[r]);
                tb.pending_fams.retain(|(pr, _)| pr != ROWS[r]);
                tb.pending_cols.retain(|(pr, ..)| pr != ROWS[r]);
                ok()
            }
            Op::RmFam(t, r, f) => {
                let tb = self.table(t)?;
                if !tb.row_visible(ROWS[r]) || !tb.families.contains(FAMS[f]) {
                    return Err(Errno::ENOENT);
                }
                if tb
                    .rows
                    .get(ROWS[r])
                    .is_some_and(|fs| fs.contains_key(FAMS[f]))
                {
                    return Err(Errno::ENOTEMPTY);
                }
                let cols = tb.pending_cols.len();
                tb.pending_cols
                    .retain(|(pr, pf, _)| !(pr == ROWS[r] && pf == FAMS[f]));
                let had_cols = cols != tb.pending_cols.len();
                if !tb.pending_fams.remove(&(ROWS[r].into(), FAMS[f].into())) && !had_cols {
                    return Err(Errno::ENOENT);
                }
                // The row directory stays until it is removed itself.
                tb.pending_rows.insert(ROWS[r].into());
                ok()
            }
            Op::Rename(t, r, f, q, f2, q2) => {
                mkdir_p(self.apply(&Op::MkFam(t, r, f2)))?;
                let tb = self.fam_dir(t, r, f)?;
                if !tb.fam_visible(ROWS[r], FAMS[f2]) {
                    return Err(Errno::ENOENT);
                }
                let row = ROWS[r];
                tb.cell(row, FAMS[f], QUALS[q]).ok_or(Errno::ENOENT)?;
                if (f, q) == (f2, q2) {
                    return ok();
                }
                let vs = tb
                    .delete_cell(row, FAMS[f], QUALS[q])
                    .ok_or(Errno::ENOENT)?;
                // Every version moves, replacing the target's (docs/cell-semantics.md, Rename).
                tb.delete_cell(row, FAMS[f2], QUALS[q2]);
                for (ts, v) in vs {
                    tb.set(row, FAMS[f2], QUALS[q2], ts, v);
                }
                // The source's directory stays (as after `rm`).
                tb.pending_fams.insert((row.into(), FAMS[f].into()));
                tb.data_written(row, FAMS[f2]);
                if f != f2 {
                    tb.pending_rows.insert(row.into());
                }
                // "Descriptors open on it follow it …; one open on a cell the
                // rename replaced commits nothing" (docs/cell-semantics.md).
                if let Some(o) = self.open.as_mut() {
                    if o.at == (t, r, f, q) {
                        o.at = (t, r, f2, q2);
                    } else if o.at == (t, r, f2, q2) {
                        o.live = false;
                    }
                }
                ok()
            }
            Op::Touch(t, r, f, q, ts) => {
                let tb = self.fam_dir(t, r, f)?;
                let vs = tb
                    .cell(ROWS[r], FAMS[f], QUALS[q])
                    .ok_or(Errno::ENOENT)?
                    .clone();
                let newest_ts = vs.keys().next_back().copied();
                // A descriptor writing it: its commit comes at that time,
                // which must be after every version's.
                if let Some(o) = self
                    .open
                    .as_mut()
                    .filter(|o| o.live && o.at == (t, r, f, q))
                {
                    if newest_ts.is_some_and(|n| n >= ts) {
                        return Err(Errno::EINVAL);
                    }
                    o.mtime = Some(ts);
                    return ok();
                }
                let Some((&cur, v)) = vs.iter().next_back() else {
                    return Err(Errno::ENOENT);
                };
                if cur == ts {
                    return ok();
                }
                // "A time that is not after every older version's … EINVAL".
                if vs.keys().any(|&k| k != cur && k >= ts) {
                    return Err(Errno::EINVAL);
                }
                let v = v.clone();
                let tb = self.table(t)?;
                let vs = tb
                    .rows
                    .get_mut(ROWS[r])
                    .and_then(|fs| fs.get_mut(FAMS[f]))
                    .and_then(|qs| qs.get_mut(QUALS[q]))
                    .ok_or(Errno::ENOENT)?;
                vs.remove(&cur);
                vs.insert(ts, v);
                ok()
            }
            Op::Truncate(t, r, f, q, n) => {
                let tb = self.fam_dir(t, r, f)?;
                let vs = tb.cell(ROWS[r], FAMS[f], QUALS[q]).ok_or(Errno::ENOENT)?;
                let mut v = newest(vs, u64::MAX).unwrap_or_default().to_vec();
                if v.len() == n {
                    return ok();
                }
                v.resize(n, 0);
                let ts = self.tick();
                let tb = self.table(t)?;
                tb.set(ROWS[r], FAMS[f], QUALS[q], ts, v);
                tb.data_written(ROWS[r], FAMS[f]);
                ok()
            }
            Op::Exchange(t, r, f, q, f2, q2) => {
                // The kernel looks both names up first.
                let tb = self.fam_dir(t, r, f)?;
                let row = ROWS[r];
                if !tb.fam_visible(row, FAMS[f2]) {
                    return Err(Errno::ENOENT);
                }
                tb.cell(row, FAMS[f], QUALS[q]).ok_or(Errno::ENOENT)?;
                tb.cell(row, FAMS[f2], QUALS[q2]).ok_or(Errno::ENOENT)?;
                if (f, q) == (f2, q2) {
                    return ok();
                }
                // "swaps them in one row mutation; each keeps … its
                // descriptors" (docs/cell-semantics.md, Rename).
                let a = tb.delete_cell(row, FAMS[f], QUALS[q]).unwrap_or_default();
                let b = tb.delete_cell(row, FAMS[f2], QUALS[q2]).unwrap_or_default();
                for (ts, v) in a {
                    tb.set(row, FAMS[f2], QUALS[q2], ts, v);
                }
                for (ts, v) in b {
                    tb.set(row, FAMS[f], QUALS[q], ts, v);
                }
                // A write through the mount to both families.
                tb.data_written(row, FAMS[f]);
                tb.data_written(row, FAMS[f2]);
                if let Some(o) = self.open.as_mut() {
                    if o.at == (t, r, f, q) {
                        o.at = (t, r, f2, q2);
                    } else if o.at == (t, r, f2, q2) {
                        o.at = (t, r, f, q);
                    }
                }
                ok()
            }
            Op::Mutate(t, ref lines) => self.apply_lines(t, lines, true),
            Op::External(t, ref lines) => self.apply_lines(t, lines, false),
            Op::Scan(t, start, end, prefix, all) => {
                let tb = self.table(t)?;
                let mut out = Vec::new();
                for (r, fams) in &tb.rows {
                    if start.is_some_and(|s| r.as_str() < ROWS[s])
                        || end.is_some_and(|e| r.as_str() >= ROWS[e])
                        || prefix.is_some_and(|p| !r.starts_with(ROWS[p]))
                    {
                        continue;
                    }
                    for (f, quals) in fams {
                        for (q, vs) in quals {
                            // Newest first; one version unless `versions=all`.
                            let n = if all { vs.len() } else { 1 };
                            for v in vs.values().rev().take(n) {
                                let mut escaped = Vec::new();
                                crate::output::tsv_escape(v, &mut escaped);
                                out.push(format!("{r}\t{f}:{q}\t{}", text(&escaped)));
                            }
                        }
                    }
                }
                Ok(out)
            }
            Op::AddFamily(t, f) => {
                self.table(t)?.families.insert(FAMS[f].into());
                ok()
            }
            Op::DropFamily(t, f) => {
                let tb = self.table(t)?;
                // "a family the new text omits is dropped if it holds no
                // data, else the write fails with ENOTEMPTY" (docs/mount.md,
                // `.schema`).
                if tb.rows.values().any(|fs| fs.contains_key(FAMS[f])) {
                    return Err(Errno::ENOTEMPTY);
                }
                // Its empty directories go too.
                tb.families.remove(FAMS[f]);
                tb.pending_fams.retain(|(_, pf)| pf != FAMS[f]);
                tb.pending_cols.retain(|(_, pf, _)| pf != FAMS[f]);
                ok()
            }
            Op::PutVersion(t, r, f, q, ts, ref v) => {
                let tb = self.fam_dir(t, r, f)?;
                // Versions are written into a cell's column, which exists
                // while the cell does (or after its last version is removed).
                let col = (
                    ROWS[r].to_string(),
                    FAMS[f].to_string(),
                    QUALS[q].to_string(),
                );
                if tb.cell(ROWS[r], FAMS[f], QUALS[q]).is_none() && !tb.pending_cols.contains(&col)
                {
                    return Err(Errno::ENOENT);
                }
                tb.set(ROWS[r], FAMS[f], QUALS[q], ts, v.clone().into_bytes());
                tb.data_written(ROWS[r], FAMS[f]);
                ok()
            }
            Op::RmVersion(t, r, f, q, ts) => {
                let tb = self.fam_dir(t, r, f)?;
                let (row, fam, qual) = (ROWS[r], FAMS[f], QUALS[q]);
                let vs = tb.cell(row, fam, qual).ok_or(Errno::ENOENT)?;
                if !vs.contains_key(&ts) {
                    return Err(Errno::ENOENT);
                }
                let mut vs = tb.delete_cell(row, fam, qual).unwrap_or_default();
                vs.remove(&ts);
                for (ts, v) in vs {
                    tb.set(row, fam, qual, ts, v);
                }
                tb.keep_dirs(row, fam);
                tb.pending_cols
                    .insert((row.into(), fam.into(), qual.into()));
                ok()
            }
            Op::OpenWrite(t, r, f, q, ref v) => {
                if self.open.is_some() {
                    return ok();
                }
                let tb = self.fam_dir(t, r, f)?;
                tb.cell(ROWS[r], FAMS[f], QUALS[q]).ok_or(Errno::ENOENT)?;
                self.open = Some(Open {
                    at: (t, r, f, q),
                    value: v.clone(),
                    live: true,
                    mtime: None,
                });
                ok()
            }
            Op::Ftruncate(n) => {
                if let Some(o) = self.open.as_mut() {
                    let mut v = std::mem::take(&mut o.value).into_bytes();
                    v.resize(n, 0);
                    o.value = String::from_utf8(v).unwrap_or_default();
                }
                ok()
            }
            Op::Close => {
                let Some(o) = self.open.take() else {
                    return ok();
                };
                if o.live {
                    let (t, r, f, q) = o.at;
                    // A family dropped since (it held no data then): the
                    // commit has nowhere to go.
                    if !self.table(t)?.families.contains(FAMS[f]) {
                        return Err(Errno::ENOENT);
                    }
                    let ts = o.mtime.unwrap_or_else(|| self.tick());
                    let tb = self.table(t)?;
                    tb.set(ROWS[r], FAMS[f], QUALS[q], ts, o.value.into_bytes());
                    tb.data_written(ROWS[r], FAMS[f]);
                }
                ok()
            }
            Op::OnCell(..) => {
                let op = concrete(self, op);
                self.apply(&op)
            }
            Op::At(t, ts) => {
                let tb = self.table(t)?;
                Ok(at_tree(tb, ts))
            }
            Op::Peer(ref inner) => self.as_peer(|m| m.apply(inner)),
            Op::Remount => self.remount(),
        }
    }
}

impl Model {
    /// A batch's lines (`.mutate`, or past the mount unless `through_mount`).
    fn apply_lines(&mut self, t: usize, lines: &[MutLine], through_mount: bool) -> Answer {
        let lines = known_families(self, t, lines);
        // A row's lines are one transaction, stamped once (docs/batches-and-scans.md).
        let mut autos = BTreeMap::new();
        for l in &lines {
            if let MutLine::Set(r, .., None) = l {
                if !autos.contains_key(r) {
                    let ts = self.tick();
                    autos.insert(*r, ts);
                }
            }
        }
        let tb = self.table(t)?;
        for l in lines {
            match l {
                MutLine::Set(r, f, q, v, ts) => {
                    let ts = ts.or_else(|| autos.get(&r).copied()).unwrap_or(AUTO);
                    tb.set(ROWS[r], FAMS[f], QUALS[q], ts, v.into_bytes());
                    // Only the mount's own writes drop its placeholders.
                    if through_mount {
                        tb.data_written(ROWS[r], FAMS[f]);
                    }
                }
                // A delete brings no data: directories made with
                // mkdir "last while the mount runs" (docs/mount.md,
                // Rows and families).
                MutLine::Delete(r, f, q, ts) => {
                    let (row, fam, qual) = (ROWS[r], FAMS[f], QUALS[q]);
                    let mut vs = tb.delete_cell(row, fam, qual).unwrap_or_default();
                    if let Some(ts) = ts {
                        // "`delete` with one timestamp … delete exactly
                        // one version" (docs/batches-and-scans.md).
                        vs.remove(&ts);
                        for (ts, v) in vs {
                            tb.set(row, fam, qual, ts, v);
                        }
                    }
                }
                MutLine::DeleteFamily(r, f) => {
                    if let Some(fams) = tb.rows.get_mut(ROWS[r]) {
                        fams.remove(FAMS[f]);
                        if fams.is_empty() {
                            tb.rows.remove(ROWS[r]);
                        }
                    }
                }
                // A row exists while it has a cell; deleterow leaves
                // only directories made with mkdir.
                MutLine::DeleteRow(r) => {
                    tb.rows.remove(ROWS[r]);
                }
            }
        }
        ok()
    }
}

/// The lines of a batch whose family is in the schema: a batch naming an
/// unknown family is refused whole, which the model does not try to say.
fn known_families(m: &Model, t: usize, lines: &[MutLine]) -> Vec<MutLine> {
    let fams = m.tables.get(TABLES[t]).map(|tb| &tb.families);
    lines
        .iter()
        .filter(|l| match l {
            MutLine::Set(_, f, ..) | MutLine::Delete(_, f, ..) | MutLine::DeleteFamily(_, f) => {
                fams.is_some_and(|fs| fs.contains(FAMS[*f]))
            }
            MutLine::DeleteRow(_) => true,
        })
        .cloned()
        .collect()
}

fn newest(vs: &Versions, at: u64) -> Option<&[u8]> {
    vs.range(..=at).next_back().map(|(_, v)| v.as_slice())
}

/// `.at/<ts>/`: "every cell's newest version with a timestamp at or before
/// it" (docs/mount.md, time travel); rows without one are absent.
fn at_tree(tb: &Table, ts: u64) -> Vec<String> {
    let mut out = Vec::new();
    for (r, fams) in &tb.rows {
        for (f, quals) in fams {
            for (q, vs) in quals {
                if let Some(v) = newest(vs, ts) {
                    out.push(format!("{r}/{f}/{q}={}", text(v)));
                    // "with `.versions` limited the same way".
                    out.extend(vs.range(..=ts).map(|(ts, v)| format!("  {ts}={}", text(v))));
                }
            }
        }
    }
    out
}

/// The filesystem's side of each operation.
/// The descriptor held across operations: its handle and its inode.
type Held = std::cell::Cell<Option<(u64, u64)>>;

/// What the kernel does when a name goes: it evicts the inode and forgets
/// it, unless a descriptor holds it.
fn evict(t: &T, fh: &Held, ino: u64) {
    if fh.get().is_none_or(|(_, held)| held != ino) {
        t.fs.forget(ino, u64::MAX);
    }
}

/// `rmdir`: the kernel looks the name up first.
fn rmdir(t: &T, path: &str) -> Answer {
    t.ino(path)?;
    unit(t.rmdir(path))
}

fn run(t: &T, m: &Model, fh: &Held, op: &Op) -> Answer {
    match *op {
        Op::MkTable(i) => unit(t.mkdir(&format!("/{}", TABLES[i]))),
        Op::RmTable(i) => rmdir(t, &format!("/{}", TABLES[i])),
        Op::MkRow(i, r) => unit(t.mkdir(&format!("/{}/{}", TABLES[i], ROWS[r]))),
        Op::MkFam(i, r, f) => unit(t.mkdir(&format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f]))),
        Op::Put(i, r, f, q, ref v) => unit(t.put(
            &format!("/{}/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f], QUALS[q]),
            v.as_bytes(),
            TRUNC,
        )),
        Op::Append(i, r, f, q, ref v) => unit(t.put(
            &format!("/{}/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f], QUALS[q]),
            v.as_bytes(),
            WR | libc::O_APPEND,
        )),
        Op::PutP(i, r, f, q, ref v) => {
            mkdir_p(run(t, m, fh, &Op::MkRow(i, r)))?;
            mkdir_p(run(t, m, fh, &Op::MkFam(i, r, f)))?;
            run(t, m, fh, &Op::Put(i, r, f, q, v.clone()))
        }
        Op::Mknod(i, r, f, q) => {
            let fam = t.ino(&format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f]))?;
            let made =
                t.fs.mknod(&t.root, fam, QUALS[q].as_bytes(), libc::S_IFREG | 0o644, 0);
            unit(made.map(|_| ()))
        }
        Op::Get(i, r, f, q) => t
            .get(&format!(
                "/{}/{}/{}/{}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            ))
            .map(|v| vec![text(&v)]),
        Op::Unlink(i, r, f, q) => {
            let path = format!("/{}/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f], QUALS[q]);
            let gone = t.ino(&path)?;
            t.unlink(&path)?;
            evict(t, fh, gone);
            ok()
        }
        Op::RmRow(i, r) => rmdir(t, &format!("/{}/{}", TABLES[i], ROWS[r])),
        Op::RmFam(i, r, f) => rmdir(t, &format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f])),
        Op::Rename(i, r, f, q, f2, q2) => {
            mkdir_p(run(t, m, fh, &Op::MkFam(i, r, f2)))?;
            let from = t.ino(&format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f]));
            let to = t.ino(&format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f2]));
            let (from, to) = (from?, to?);
            // The kernel looks the source up first, and answers a rename
            // of a name onto itself without asking the filesystem.
            t.fs.lookup(from, QUALS[q].as_bytes())?;
            if (f, q) == (f2, q2) {
                return ok();
            }
            let replaced = t.fs.lookup(to, QUALS[q2].as_bytes()).ok();
            t.fs.rename(
                &t.root,
                from,
                QUALS[q].as_bytes(),
                to,
                QUALS[q2].as_bytes(),
                0,
            )?;
            // The kernel evicts the inode the rename replaced (unless a
            // descriptor holds it: then a cell made later at that name takes
            // another number).
            if let Some(e) = replaced {
                evict(t, fh, e.attr.ino.0);
            }
            ok()
        }
        Op::Touch(i, r, f, q, ts) => {
            let ino = t.ino(&format!(
                "/{}/{}/{}/{}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            ))?;
            let set = SetAttr {
                times: true,
                mtime: Some(std::time::UNIX_EPOCH + std::time::Duration::from_micros(ts)),
                ..Default::default()
            };
            unit(t.fs.setattr(&t.root, ino, None, set).map(|_| ()))
        }
        Op::Truncate(i, r, f, q, n) => {
            let ino = t.ino(&format!(
                "/{}/{}/{}/{}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            ))?;
            let set = SetAttr {
                size: Some(n as u64),
                ..Default::default()
            };
            unit(t.fs.setattr(&t.root, ino, None, set).map(|_| ()))
        }
        Op::Exchange(i, r, f, q, f2, q2) => {
            let dir = |f: usize| format!("/{}/{}/{}", TABLES[i], ROWS[r], FAMS[f]);
            let (from, to) = (t.ino(&dir(f))?, t.ino(&dir(f2))?);
            t.fs.lookup(from, QUALS[q].as_bytes())?;
            t.fs.lookup(to, QUALS[q2].as_bytes())?;
            if (f, q) == (f2, q2) {
                return ok();
            }
            unit(t.fs.rename(
                &t.root,
                from,
                QUALS[q].as_bytes(),
                to,
                QUALS[q2].as_bytes(),
                libc::RENAME_EXCHANGE,
            ))
        }
        Op::Mutate(i, ref lines) => {
            let mut batch = String::new();
            for l in &known_families(m, i, lines) {
                batch += &match l {
                    MutLine::Set(r, f, q, v, ts) => {
                        let v = if v.is_empty() { "%" } else { v };
                        let ts = ts.map(|ts| format!(" {ts}")).unwrap_or_default();
                        format!("set {} {}:{} {v}{ts}\n", ROWS[*r], FAMS[*f], QUALS[*q])
                    }
                    MutLine::Delete(r, f, q, ts) => {
                        let ts = ts.map(|ts| format!(" {ts}")).unwrap_or_default();
                        format!("delete {} {}:{}{ts}\n", ROWS[*r], FAMS[*f], QUALS[*q])
                    }
                    MutLine::DeleteFamily(r, f) => {
                        format!("deletefamily {} {}\n", ROWS[*r], FAMS[*f])
                    }
                    MutLine::DeleteRow(r) => format!("deleterow {}\n", ROWS[*r]),
                };
            }
            let ino = t.ino(&format!("/{}/.mutate", TABLES[i]))?;
            let fh = t.fs.open(&t.root, ino, libc::O_WRONLY)?.fh;
            let r =
                t.fs.write(fh, 0, batch.as_bytes(), None)
                    .and_then(|_| t.fs.flush(fh, None));
            t.fs.release(fh)?;
            unit(r.map(|_| ()))
        }
        Op::External(i, ref lines) => {
            use engine::{Mutation, RowMutation, TimeRange, WriteOptions};
            let table = TABLES[i];
            if !t.store.list_tables().iter().any(|n| n == table) {
                return Err(Errno::ENOENT);
            }
            // A row's lines in one mutation, as the gRPC API's MutateRows.
            let mut rows: Vec<(usize, Vec<Mutation>)> = Vec::new();
            for l in known_families(m, i, lines) {
                let (r, mutation) = match l {
                    MutLine::Set(r, f, q, v, ts) => (
                        r,
                        Mutation::SetCell {
                            family: FAMS[f].into(),
                            qualifier: QUALS[q].into(),
                            timestamp: ts,
                            value: v.into_bytes(),
                        },
                    ),
                    MutLine::Delete(r, f, q, ts) => (
                        r,
                        Mutation::DeleteCells {
                            family: FAMS[f].into(),
                            qualifier: QUALS[q].into(),
                            range: ts.map_or(TimeRange::ALL, TimeRange::exactly),
                        },
                    ),
                    MutLine::DeleteFamily(r, f) => (
                        r,
                        Mutation::DeleteFamily {
                            family: FAMS[f].into(),
                        },
                    ),
                    MutLine::DeleteRow(r) => (r, Mutation::DeleteRow),
                };
                match rows.iter_mut().find(|(row, _)| *row == r) {
                    Some((_, ms)) => ms.push(mutation),
                    None => rows.push((r, vec![mutation])),
                }
            }
            for (r, mutations) in &rows {
                let m = RowMutation {
                    row: ROWS[*r].into(),
                    mutations: mutations.clone(),
                };
                t.store
                    .apply(table, &m, WriteOptions::default())
                    .map_err(|e| crate::errno::errno(&e))?;
            }
            let keys: Vec<&[u8]> = rows.iter().map(|(r, _)| ROWS[*r].as_bytes()).collect();
            t.fs.rows_changed_elsewhere(table, &keys);
            ok()
        }
        Op::Scan(i, start, end, prefix, all) => {
            let mut keys = Vec::new();
            if all {
                keys.push("versions=all".to_string());
            }
            if let Some(s) = start {
                keys.push(format!("start={}", ROWS[s]));
            }
            if let Some(e) = end {
                keys.push(format!("end={}", ROWS[e]));
            }
            if let Some(p) = prefix {
                keys.push(format!("prefix={}", ROWS[p]));
            }
            let query = if keys.is_empty() {
                "all".to_string()
            } else {
                keys.join("&")
            };
            let out = t.get(&format!("/{}/.scan/{query}", TABLES[i]))?;
            // row, column, timestamp, value: the timestamp is the store's.
            Ok(text(&out)
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split('\t').collect();
                    format!("{}\t{}\t{}", f[0], f[1], f.get(3).unwrap_or(&""))
                })
                .collect())
        }
        Op::AddFamily(i, f) => unit(t.put(
            &format!("/{}/.schema", TABLES[i]),
            format!("{}{FAMILY_SETTINGS}\n", FAMS[f]).as_bytes(),
            WR | libc::O_APPEND,
        )),
        Op::DropFamily(i, f) => {
            // The whole schema without the family (the model's families:
            // the trees were equal before this step).
            let rest: String = m
                .tables
                .get(TABLES[i])
                .into_iter()
                .flat_map(|tb| &tb.families)
                .filter(|x| x.as_str() != FAMS[f])
                .map(|x| format!("{x}{FAMILY_SETTINGS}\n"))
                .collect();
            unit(t.put(&format!("/{}/.schema", TABLES[i]), rest.as_bytes(), TRUNC))
        }
        Op::PutVersion(i, r, f, q, ts, ref v) => unit(t.put(
            &format!(
                "/{}/{}/{}/.versions/{}/{ts:016}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            ),
            v.as_bytes(),
            TRUNC,
        )),
        Op::RmVersion(i, r, f, q, ts) => {
            let path = format!(
                "/{}/{}/{}/.versions/{}/{ts:016}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            );
            t.ino(&path)?;
            unit(t.unlink(&path))
        }
        Op::OpenWrite(i, r, f, q, ref v) => {
            if fh.get().is_some() {
                return ok();
            }
            let ino = t.ino(&format!(
                "/{}/{}/{}/{}",
                TABLES[i], ROWS[r], FAMS[f], QUALS[q]
            ))?;
            let h = t.fs.open(&t.root, ino, TRUNC)?.fh;
            fh.set(Some((h, ino)));
            t.fs.write(h, 0, v.as_bytes(), None)?;
            ok()
        }
        Op::Ftruncate(n) => {
            let Some((h, ino)) = fh.get() else {
                return ok();
            };
            let set = SetAttr {
                size: Some(n as u64),
                ..Default::default()
            };
            unit(t.fs.setattr(&t.root, ino, Some(h), set).map(|_| ()))
        }
        Op::Close => {
            let Some((h, _)) = fh.take() else {
                return ok();
            };
            let r = t.fs.flush(h, None);
            t.fs.release(h)?;
            unit(r)
        }
        Op::OnCell(..) => run(t, m, fh, &concrete(m, op)),
        Op::Peer(_) | Op::Remount => unreachable!("run by check_on: {op:?}"),
        Op::At(i, ts) => {
            let base = format!("/{}/.at/{ts}", TABLES[i]);
            let mut out = Vec::new();
            for r in names(t, &base)? {
                for f in names(t, &format!("{base}/{r}"))? {
                    for q in names(t, &format!("{base}/{r}/{f}"))? {
                        let v = t.get(&format!("{base}/{r}/{f}/{q}"))?;
                        out.push(format!("{r}/{f}/{q}={}", text(&v)));
                        let dir = format!("{base}/{r}/{f}/.versions/{q}");
                        for name in t.ls(&dir)? {
                            let v = t.get(&format!("{dir}/{name}"))?;
                            let ts: u64 = name.parse().unwrap_or(0);
                            out.push(format!("  {ts}={}", text(&v)));
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

/// A directory's entries without the dot files (`.schema`, `.mutate`),
/// sorted.
fn names(t: &T, path: &str) -> Result<Vec<String>, Errno> {
    let mut n = listed(t, path)?;
    n.sort();
    Ok(n)
}

/// The same in the listing's order.
fn listed(t: &T, path: &str) -> Result<Vec<String>, Errno> {
    Ok(t.ls(path)?
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect())
}

/// The whole visible tree, from the model: tables, rows, families, cells
/// with their values, and each cell's versions (explicit timestamps by
/// name, the store clock's as `auto`) with their values.
fn model_tree(m: &Model) -> Vec<String> {
    let mut out = Vec::new();
    for (name, tb) in &m.tables {
        out.push(format!("/{name}"));
        for r in tb.visible_rows() {
            out.push(format!("/{name}/{r}"));
            for f in tb.visible_fams(&r) {
                out.push(format!("/{name}/{r}/{f}"));
                let quals = tb.rows.get(&r).and_then(|fs| fs.get(&f));
                for (q, vs) in quals.into_iter().flatten() {
                    let v = newest(vs, u64::MAX).unwrap_or_default();
                    out.push(format!("/{name}/{r}/{f}/{q}={}", text(v)));
                    for (ts, v) in vs {
                        let ts = if *ts >= AUTO {
                            "auto".to_string()
                        } else {
                            ts.to_string()
                        };
                        out.push(format!("  {ts}={}", text(v)));
                    }
                }
            }
        }
    }
    out
}

fn fs_tree(t: &T) -> Result<Vec<String>, Errno> {
    let mut out = Vec::new();
    for name in names(t, "/")? {
        out.push(format!("/{name}"));
        // "`ls table` lists rows in key order" (docs/mount.md, Listing),
        // the empty directories among them.
        for r in listed(t, &format!("/{name}"))? {
            let row = format!("/{name}/{r}");
            out.push(row.clone());
            for f in names(t, &row)? {
                let fam = format!("{row}/{f}");
                out.push(fam.clone());
                for q in names(t, &fam)? {
                    let v = t.get(&format!("{fam}/{q}"))?;
                    out.push(format!("{fam}/{q}={}", text(&v)));
                    let dir = format!("{fam}/.versions/{q}");
                    for ts in t.ls(&dir)? {
                        let v = t.get(&format!("{dir}/{ts}"))?;
                        let n: u64 = ts.parse().unwrap_or(0);
                        let ts = if n >= AUTO {
                            "auto".to_string()
                        } else {
                            n.to_string()
                        };
                        out.push(format!("  {ts}={}", text(&v)));
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `Op::OnCell` as the operation it names, on the model's state.
fn concrete(m: &Model, op: &Op) -> Op {
    if let Op::Peer(inner) = op {
        return Op::Peer(Box::new(concrete(m, inner)));
    }
    let Op::OnCell(n, inner) = op else {
        return op.clone();
    };
    let pos = |names: &[&str], x: &str| names.iter().position(|n| *n == x).unwrap_or(0);
    let mut cells = Vec::new();
    for (t, tb) in &m.tables {
        for (r, fams) in &tb.rows {
            for (f, quals) in fams {
                for (q, vs) in quals {
                    let at = (
                        pos(&TABLES, t),
                        pos(&ROWS, r),
                        pos(&FAMS, f),
                        pos(&QUALS, q),
                    );
                    cells.push((at, vs));
                }
            }
        }
    }
    if cells.is_empty() {
        return (**inner).clone();
    }
    let ((t, r, f, q), vs) = cells[n % cells.len()];
    match &**inner {
        Op::Rename(.., f2, q2) => Op::Rename(t, r, f, q, *f2, *q2),
        Op::Exchange(.., f2, q2) => Op::Exchange(t, r, f, q, *f2, *q2),
        Op::Truncate(.., n) => Op::Truncate(t, r, f, q, *n),
        Op::Touch(.., ts) => Op::Touch(t, r, f, q, *ts),
        Op::Get(..) => Op::Get(t, r, f, q),
        Op::Unlink(..) => Op::Unlink(t, r, f, q),
        Op::OpenWrite(.., v) => Op::OpenWrite(t, r, f, q, v.clone()),
        Op::Append(.., v) => Op::Append(t, r, f, q, v.clone()),
        Op::PutVersion(.., ts, v) => Op::PutVersion(t, r, f, q, *ts, v.clone()),
        // One of its versions with a timestamp the model knows.
        _ => {
            let known: Vec<u64> = vs.keys().copied().filter(|ts| *ts < AUTO).collect();
            let ts = known.get(n % known.len().max(1)).copied().unwrap_or(100);
            Op::RmVersion(t, r, f, q, ts)
        }
    }
}

fn check(ops: &[Op]) -> Result<(), TestCaseError> {
    check_on(T::new(), ops)
}

/// [`check`] with the mount on `t`, and a second daemon's on its store.
fn check_on(mut t: T, ops: &[Op]) -> Result<(), TestCaseError> {
    let schema = format!("f{FAMILY_SETTINGS}\ng{FAMILY_SETTINGS}\n");
    prop_assert_eq!(t.put("/t/.schema", schema.as_bytes(), TRUNC), Ok(()));
    let peer = t.peer();
    let mut m = Model::new();
    let fh = std::cell::Cell::new(None);
    let peer_fh = std::cell::Cell::new(None);
    for (i, op) in ops.iter().enumerate() {
        let op = &concrete(&m, op);
        let before = m.stored();
        let (got, other) = match op {
            Op::Peer(inner) => (run(&peer, &m, &peer_fh, inner), &t),
            Op::Remount => {
                let closed = run(&t, &m, &fh, &Op::Close);
                t.remount();
                (closed, &peer)
            }
            _ => (run(&t, &m, &fh, op), &peer),
        };
        let want = m.apply(op);
        prop_assert_eq!(&got, &want, "step {} {:?}", i, op);
        m.forget_gone_dirs();
        tell(other, &before, &m.stored());
        let tree = fs_tree(&t);
        prop_assert_eq!(tree, Ok(model_tree(&m)), "tree after step {} {:?}", i, op);
        let tree = fs_tree(&peer);
        let want = m.as_peer(|m| model_tree(m));
        prop_assert_eq!(
            tree,
            Ok(want),
            "the second daemon's tree after step {} {:?}",
            i,
            op
        );
    }
    Ok(())
}

/// What the other daemon is told of a write (docs/coherence.md): the rows
/// it changed, or the table, where the table was made, deleted or its
/// schema changed.
fn tell(t: &T, before: &Stored, after: &Stored) {
    let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for name in names {
        match (before.get(name), after.get(name)) {
            (Some((fb, rb)), Some((fa, ra))) if fb == fa => {
                let keys: BTreeSet<&String> = rb.keys().chain(ra.keys()).collect();
                let rows: Vec<&[u8]> = keys
                    .into_iter()
                    .filter(|r| rb.get(*r) != ra.get(*r))
                    .map(|r| r.as_bytes())
                    .collect();
                if !rows.is_empty() {
                    t.fs.rows_changed_by_peer(name, &rows);
                }
            }
            _ => t.fs.table_changed_elsewhere(name),
        }
    }
}

proptest! {
    #![proptest_config(testkit::fuzz::config(128))]

    /// `FUZZ_CASES=n` runs n sequences.
    #[test]
    fn the_mount_behaves_as_the_model(ops in ops()) {
        check(&ops)?;
    }
}

proptest! {
    #![proptest_config(testkit::fuzz::config(128))]

    /// The same on the engine itself (in memory) instead of the mock store:
    /// what the mock stands for holds of what it stands for.
    #[test]
    fn the_mount_over_the_engine_behaves_as_the_model(ops in ops()) {
        let (t, _one_at_a_time) = T::over_the_shared_engine();
        check_on(t, &ops)?;
    }
}

#[test]
fn the_model_sees_what_the_docs_promise() {
    // mkdir -p then echo, rm of the last cell keeps the directories,
    // deleterow through .mutate after a write lets the row vanish.
    check(&[
        Op::MkRow(0, 0),
        Op::MkFam(0, 0, 0),
        Op::Put(0, 0, 0, 0, "v".into()),
        Op::Unlink(0, 0, 0, 0),
        Op::RmFam(0, 0, 0),
        Op::RmRow(0, 0),
        Op::Mutate(0, vec![MutLine::Set(1, 1, 1, "w".into(), Some(300))]),
        Op::At(0, 350),
        Op::Mutate(0, vec![MutLine::DeleteRow(1)]),
        Op::Scan(0, None, None, None, true),
    ])
    .unwrap();
}

// The bugs the model found, each as its shortest sequence (each failed
// before its fix).

/// Was bug 1: a `.mutate` `delete` forgot the row's and the family's empty
/// directories made with mkdir (docs/mount.md: they last while the mount
/// runs).
#[test]
fn a_delete_keeps_directories_made_with_mkdir() {
    let t = T::new();
    t.mkdir("/t/c").unwrap();
    t.mutate("delete c f:x\n").unwrap();
    assert_eq!(t.ls("/t").unwrap(), vec![".schema", ".mutate", "c"]);
}

/// Was bug 2: dropping a family from `.schema` kept its empty directories
/// made with mkdir: hidden while the family was gone, they came back when
/// it was added again.
#[test]
fn a_dropped_family_takes_its_empty_directories() {
    let t = T::new();
    t.mkdir("/t/a").unwrap();
    t.mkdir("/t/a/g").unwrap();
    t.put("/t/.schema", b"f\n", TRUNC).unwrap();
    t.put("/t/.schema", b"g\n", WR | libc::O_APPEND).unwrap();
    assert_eq!(t.ls("/t/a").unwrap(), Vec::<String>::new());
}

/// Was bug 3: a cell made at a name whose file a rename had replaced,
/// while a descriptor still held that file, answered EIO (the new cell's
/// inode number was the held file's, which a second rename had moved on).
#[test]
fn a_cell_made_where_a_held_file_was_replaced_takes_another_number() {
    let t = T::new();
    t.mutate("set a g:x 1\nset a f:x 2\n").unwrap();
    let (g, f) = (t.ino("/t/a/g").unwrap(), t.ino("/t/a/f").unwrap());
    t.ino("/t/a/g/x").unwrap();
    let held = t.ino("/t/a/f/x").unwrap();
    let fh = t.fs.open(&t.root, held, libc::O_RDONLY).unwrap().fh;
    t.fs.rename(&t.root, g, b"x", f, b"x", 0).unwrap();
    t.fs.rename(&t.root, f, b"x", f, b"y", 0).unwrap();
    let made = t.put("/t/a/f/x", b"3", TRUNC);
    t.fs.release(fh).unwrap();
    assert_eq!(made, Ok(()));
}

/// Was bug 4 too: a cell whose versions went another way (`.mutate`,
/// `rm` of its last version) while a descriptor held it open for writing
/// answered `lookup` (with the writer's size) but not `open`, and was not
/// listed. Now it is gone for all three until the writer's close commits
/// it again (a new version, after the delete).
#[test]
fn a_cell_deleted_another_way_while_open_for_writing_is_gone_until_its_close() {
    let t = T::new();
    t.mutate("set b f:x 1\nset b f:y 1\n").unwrap();
    let ino = t.ino("/t/b/f/x").unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    t.fs.write(fh, 0, b"writer", None).unwrap();
    t.mutate("delete b f:x\n").unwrap();
    assert_eq!(t.ino("/t/b/f/x"), Err(Errno::ENOENT));
    assert_eq!(t.ls("/t/b/f").unwrap(), vec!["y"]);
    // `>>` makes it anew; the writer's close commits after it.
    t.put("/t/b/f/x", b"appended", WR | libc::O_APPEND | libc::O_CREAT)
        .unwrap();
    assert_eq!(t.get("/t/b/f/x").unwrap(), b"appended");
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/b/f/x").unwrap(), b"writer");
}

/// The same for a delete past the mount (the gRPC API's), which the mount
/// is told of.
#[test]
fn a_cell_deleted_past_the_mount_while_open_for_writing_is_gone_until_its_close() {
    let t = T::new();
    t.mutate("set b f:x 1\nset b f:y 1\n").unwrap();
    let ino = t.ino("/t/b/f/x").unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    t.fs.write(fh, 0, b"writer", None).unwrap();
    let m = engine::RowMutation::new("b").delete_cells("f", "x", engine::TimeRange::ALL);
    t.store
        .apply("t", &m, engine::WriteOptions::default())
        .unwrap();
    t.fs.rows_changed_elsewhere("t", &[b"b"]);
    assert_eq!(t.ino("/t/b/f/x"), Err(Errno::ENOENT));
    t.fs.flush(fh, None).unwrap();
    t.fs.release(fh).unwrap();
    assert_eq!(t.get("/t/b/f/x").unwrap(), b"writer");
}

/// A descriptor writing a cell that was unlinked, its family dropped since
/// (it held no data then), still answers `ftruncate` and `fstat`: it
/// answered ENOENT, having no family's permissions to show.
#[test]
fn an_unlinked_descriptor_outlives_its_family() {
    let t = T::new();
    t.mutate("set a g:x 1\n").unwrap();
    let ino = t.ino("/t/a/g/x").unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    t.unlink("/t/a/g/x").unwrap();
    t.put("/t/.schema", b"f\n", TRUNC).unwrap();
    let set = SetAttr {
        size: Some(2),
        ..Default::default()
    };
    let (attr, _) = t.fs.setattr(&t.root, ino, Some(fh), set).unwrap();
    assert_eq!((attr.size, attr.nlink), (2, 0));
    t.fs.release(fh).unwrap();
}

/// Was bug 4: a cell removed by `.mutate` while a descriptor held it open
/// for writing answered `lookup` but not `open` until that descriptor
/// closed.
#[test]
fn a_cell_deleted_while_open_for_writing_can_be_made_again() {
    let t = T::new();
    t.mutate("set b f:x 1\n").unwrap();
    let ino = t.ino("/t/b/f/x").unwrap();
    let fh = t.fs.open(&t.root, ino, TRUNC).unwrap().fh;
    t.mutate("deleterow b\n").unwrap();
    t.mkdir("/t/b").unwrap();
    t.mkdir("/t/b/f").unwrap();
    let put = t.put("/t/b/f/x", b"2", TRUNC);
    t.fs.release(fh).unwrap();
    assert_eq!(put, Ok(()));
}
