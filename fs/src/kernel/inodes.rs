//! The inodes the kernel currently knows, with their lookup counts.
//!
//! The kernel holds an inode from a `lookup` (or a `readdirplus` entry, or a
//! `create`/`mkdir`) until it sends `forget`; while it does, requests name the
//! inode only by number, so we keep number → [`Node`]. Nothing else is kept:
//! memory follows the kernel's cache, not the size of the tables.

use crate::node::{Node, ROOT_INO};
use parking_lot::RwLock;
// aHash: several times faster than SipHash on these keys, and keyed at
// random as SipHash is, so row names cannot be chosen to collide.
use ahash::AHashMap as HashMap;
use smallvec::SmallVec;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

struct Entry {
    node: Arc<Node>,
    nlookup: u64,
    /// The (size, mtime in µs) last reported to the kernel for a file; an open
    /// that finds the data changed bypasses the page cache.
    reported: Option<(u64, u64)>,
    /// When a name was last added to or removed from this directory
    /// through the mount (its mtime and ctime); kept while the kernel
    /// holds the inode, not across a remount.
    changed: Option<SystemTime>,
}

#[derive(Default)]
struct Inner {
    /// Inodes dropped since memory was last handed back to the system.
    dropped: u64,
    /// Forgets seen by the last [`InodeTable::trim_if_idle`] (to tell a
    /// burst that is still going on from one that is over).
    dropped_at_check: u64,
    by_ino: HashMap<u64, Entry>,
    /// Inodes lying in a row, by a hash of (table, row): what a row-wide
    /// change must invalidate. Hashed, and inline for a row's usual three
    /// inodes (row, family, cell), so a walk allocates nothing here per row;
    /// readers check each inode's node, so rows sharing a hash never mix.
    by_row: HashMap<u64, SmallVec<[u64; 3]>>,
    row_hasher: ahash::RandomState,
}

impl Inner {
    fn row_key(&self, table: &str, row: &[u8]) -> u64 {
        self.row_hasher.hash_one((table, row))
    }

    /// Gives back the maps' spare capacity (a walk's peak) once they are
    /// mostly empty.
    fn shrink(&mut self) {
        self.dropped = 0;
        self.dropped_at_check = 0;
        if self.by_ino.len() < self.by_ino.capacity() / 4 {
            self.by_ino.shrink_to_fit();
        }
        if self.by_row.len() < self.by_row.capacity() / 4 {
            self.by_row.shrink_to_fit();
        }
    }
}

/// The numbers renamed cells keep. A cell's number is a hash of its path
/// ([`Node::natural_ino`]); a cell renamed keeps the number it had, as a
/// file does, for as long as the kernel holds its inode: programs that
/// track files by (dev, ino) — `tar`, `rsync`, `find -samefile` — must not
/// see it change under `mv`. Held only while the kernel holds the inode
/// (dropped by its forget), so memory follows the kernel's cache.
#[derive(Default)]
struct Aliases {
    /// Natural number of a renamed cell's name → the number it keeps.
    by_name: HashMap<u64, u64>,
    /// The reverse: a number kept → the natural number of the name keeping
    /// it ([`REPLACED`]: of a file a rename replaced, which no name keeps).
    /// A name whose natural number is kept by another is given another
    /// ([`rehash`]), so no two names share a number.
    kept: HashMap<u64, u64>,
}

/// What [`Aliases::kept`] holds for the number of a file that a rename
/// replaced while the kernel still held it (a descriptor open on it): it
/// stands for no name any more, so a file made later at its old name takes
/// another number, and renames of that name leave it alone. No natural
/// number is 0.
const REPLACED: u64 = 0;

impl Aliases {
    fn ino_of(&self, natural: u64) -> u64 {
        if let Some(a) = self.by_name.get(&natural) {
            return *a;
        }
        let (mut ino, mut k) = (natural, 0);
        while self.kept.get(&ino).is_some_and(|n| *n != natural) {
            k += 1;
            ino = rehash(natural, k);
        }
        ino
    }

    /// Drops whatever `natural`'s name kept.
    fn unalias(&mut self, natural: u64) {
        if let Some(a) = self.by_name.remove(&natural) {
            self.kept.remove(&a);
        }
    }
}

/// The `k`th other number for a name whose natural number another name keeps.
fn rehash(natural: u64, k: u64) -> u64 {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&natural.to_le_bytes());
    b[8..].copy_from_slice(&k.to_le_bytes());
    match seahash::hash(&b) {
        0 | ROOT_INO => 2,
        h => h,
    }
}

/// Forgotten inodes after which freed memory goes back to the system.
const TRIM_AFTER_FORGETS: u64 = 1 << 16;

/// How often the trim thread looks for a burst of forgets that is over.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Starts a thread that calls [`InodeTable::trim_if_idle`] every
/// [`IDLE_CHECK`] for as long as `table` lives.
pub fn start_idle_trim(table: &Arc<InodeTable>) {
    let weak = Arc::downgrade(table);
    let spawned = std::thread::Builder::new()
        .name("bt-trim".into())
        .spawn(move || loop {
            std::thread::sleep(IDLE_CHECK);
            match weak.upgrade() {
                Some(t) => {
                    t.trim_if_idle();
                }
                None => return,
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot start the memory trim thread: {e}");
    }
}

/// Two different nodes hashed to one inode number.
#[derive(Debug)]
pub struct Collision;

/// See the module comment.
pub struct InodeTable {
    inner: RwLock<Inner>,
    /// Taken after `inner` when both are; read only while `aliased` is
    /// nonzero, so requests pay nothing for it until a cell is renamed.
    aliases: RwLock<Aliases>,
    aliased: AtomicUsize,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    pub fn new() -> Self {
        let mut inner = Inner::default();
        inner.by_ino.insert(
            ROOT_INO,
            Entry {
                node: Arc::new(Node::Root),
                nlookup: 1,
                reported: None,
                changed: None,
            },
        );
        InodeTable {
            inner: RwLock::new(inner),
            aliases: RwLock::default(),
            aliased: AtomicUsize::new(0),
        }
    }

    /// The inode number of `node`: its natural one unless it is a renamed
    /// cell (see [`Aliases`]). Every number told to the kernel comes from here.
    pub fn ino_of(&self, node: &Node) -> u64 {
        let natural = node.natural_ino();
        if self.aliased.load(Ordering::Acquire) == 0 || !matches!(node, Node::Cell(_)) {
            return natural;
        }
        self.aliases.read().ino_of(natural)
    }

    pub fn get(&self, ino: u64) -> Option<Arc<Node>> {
        self.inner.read().by_ino.get(&ino).map(|e| e.node.clone())
    }

    /// Records one more kernel reference to `node`; returns its number.
    pub fn register(&self, node: &Node) -> Result<u64, Collision> {
        let mut g = self.inner.write();
        // Under `inner`: a forget dropping an alias cannot come in between.
        let ino = self.ino_of(node);
        if let Some(e) = g.by_ino.get_mut(&ino) {
            if *e.node != *node {
                return Err(Collision);
            }
            e.nlookup += 1;
            return Ok(ino);
        }
        g.by_ino.insert(
            ino,
            Entry {
                node: Arc::new(node.clone()),
                nlookup: 1,
                reported: None,
                changed: None,
            },
        );
        if let (Some(t), Some(r)) = (node.table(), node.row()) {
            let key = g.row_key(t, r);
            g.by_row.entry(key).or_default().push(ino);
        }
        Ok(ino)
    }

    /// The kernel dropped `n` references; true if that was the last (the
    /// inode is gone).
    pub fn forget(&self, ino: u64, n: u64) -> bool {
        if ino == ROOT_INO {
            return false;
        }
        let mut g = self.inner.write();
        let Some(e) = g.by_ino.get_mut(&ino) else {
            return false;
        };
        e.nlookup = e.nlookup.saturating_sub(n);
        if e.nlookup > 0 {
            return false;
        }
        let node = e.node.clone();
        g.by_ino.remove(&ino);
        g.dropped += 1;
        if self.aliased.load(Ordering::Acquire) != 0 {
            let mut a = self.aliases.write();
            if let Some(natural) = a.kept.remove(&ino) {
                a.by_name.remove(&natural);
                self.aliased.store(a.kept.len(), Ordering::Release);
            }
        }
        // The kernel let go of many inodes (memory pressure, drop_caches):
        // give their memory back rather than keep it for the next walk.
        let trim = g.dropped >= TRIM_AFTER_FORGETS;
        if trim {
            g.shrink();
        }
        if let (Some(t), Some(r)) = (node.table(), node.row()) {
            let key = g.row_key(t, r);
            if let Some(v) = g.by_row.get_mut(&key) {
                v.retain(|i| *i != ino);
                if v.is_empty() {
                    g.by_row.remove(&key);
                }
            }
        }
        drop(g);
        if trim {
            crate::memory::give_back();
        }
        true
    }

    /// Hands memory back once a burst of forgets is over (called every
    /// second or so): the last forgets of a burst seldom reach
    /// [`TRIM_AFTER_FORGETS`], and a table that was large keeps its capacity.
    pub fn trim_if_idle(&self) -> bool {
        let mut g = self.inner.write();
        let (dropped, seen) = (g.dropped, g.dropped_at_check);
        g.dropped_at_check = dropped;
        if dropped == 0 || dropped != seen {
            return false;
        }
        g.shrink();
        drop(g);
        crate::memory::give_back();
        true
    }

    /// Whether `ino` is a file a rename replaced (see [`REPLACED`]).
    pub fn is_replaced(&self, ino: u64) -> bool {
        self.aliased.load(Ordering::Acquire) != 0
            && self.aliases.read().kept.get(&ino) == Some(&REPLACED)
    }

    /// After a rename the kernel keeps the moved inode under its new name:
    /// every inode standing for `from` now stands for `to`, and `to` keeps
    /// `from`'s number while the kernel holds it.
    pub fn rebind(&self, from: &Node, to: &Node) {
        let mut g = self.inner.write();
        if matches!(from, Node::Cell(_)) && matches!(to, Node::Cell(_)) {
            let moved = self.ino_of(from);
            let held = g.by_ino.get(&moved).is_some_and(|e| *e.node == *from);
            let replaced = self.ino_of(to);
            let replaced_held =
                replaced != moved && g.by_ino.get(&replaced).is_some_and(|e| *e.node == *to);
            let mut a = self.aliases.write();
            a.unalias(from.natural_ino());
            // The file `to` named is replaced; its number goes with it.
            a.unalias(to.natural_ino());
            if replaced_held {
                a.kept.insert(replaced, REPLACED);
            }
            let natural = to.natural_ino();
            if held && moved != natural {
                a.by_name.insert(natural, moved);
                a.kept.insert(moved, natural);
            }
            self.aliased.store(a.kept.len(), Ordering::Release);
        }
        let inos: Vec<u64> = match (from.table(), from.row()) {
            (Some(t), Some(r)) => g
                .by_row
                .get(&g.row_key(t, r))
                .map(|v| v.to_vec())
                .unwrap_or_default(),
            _ => g.by_ino.keys().copied().collect(),
        };
        for ino in inos {
            if self.is_replaced(ino) {
                continue;
            }
            if let Some(e) = g.by_ino.get_mut(&ino) {
                if *e.node == *from {
                    e.node = Arc::new(to.clone());
                    e.reported = None;
                }
            }
        }
        // A rename stays within its row, so the row index is unchanged.
    }

    /// After `renameat2(RENAME_EXCHANGE)` of two cells of one row: the
    /// inodes standing for each stand for the other, and each name keeps
    /// the number of the file it now names.
    pub fn exchange(&self, a: &Node, b: &Node) {
        let mut g = self.inner.write();
        let (ia, ib) = (self.ino_of(a), self.ino_of(b));
        let held =
            |g: &Inner, ino: u64, n: &Node| g.by_ino.get(&ino).is_some_and(|e| *e.node == *n);
        let (held_a, held_b) = (held(&g, ia, a), held(&g, ib, b));
        let inos: Vec<u64> = match (a.table(), a.row()) {
            (Some(t), Some(r)) => g
                .by_row
                .get(&g.row_key(t, r))
                .map(|v| v.to_vec())
                .unwrap_or_default(),
            _ => return,
        };
        for ino in inos {
            if self.is_replaced(ino) {
                continue;
            }
            if let Some(e) = g.by_ino.get_mut(&ino) {
                let to = if *e.node == *a {
                    b
                } else if *e.node == *b {
                    a
                } else {
                    continue;
                };
                e.node = Arc::new(to.clone());
                e.reported = None;
            }
        }
        let mut al = self.aliases.write();
        let (na, nb) = (a.natural_ino(), b.natural_ino());
        al.unalias(na);
        al.unalias(nb);
        for (held, ino, name) in [(held_a, ia, nb), (held_b, ib, na)] {
            if held && ino != name {
                al.by_name.insert(name, ino);
                al.kept.insert(ino, name);
            }
        }
        self.aliased.store(al.kept.len(), Ordering::Release);
    }

    // ---- lockdir hook ----
    /// Rebinds every known inode for which `f` names a new node (a renamed
    /// `.chubby/` directory moves everything below it). Not for row nodes:
    /// the row index is left as it is.
    pub fn rebind_with(&self, f: impl Fn(&Node) -> Option<Node>) {
        let mut g = self.inner.write();
        for e in g.by_ino.values_mut() {
            if let Some(to) = f(&e.node) {
                e.node = Arc::new(to);
                e.reported = None;
            }
        }
    }

    /// Whether the kernel may have `node` cached.
    pub fn is_known(&self, node: &Node) -> bool {
        self.inner
            .read()
            .by_ino
            .get(&self.ino_of(node))
            .is_some_and(|e| *e.node == *node)
    }

    /// The known inodes lying in one row.
    pub fn in_row(&self, table: &str, row: &[u8]) -> Vec<(u64, Arc<Node>)> {
        let g = self.inner.read();
        let Some(inos) = g.by_row.get(&g.row_key(table, row)) else {
            return Vec::new();
        };
        inos.iter()
            .filter_map(|i| g.by_ino.get(i).map(|e| (*i, e.node.clone())))
            .filter(|(_, n)| n.table() == Some(table) && n.row() == Some(row))
            .collect()
    }

    /// The known inodes of one table (rare operations: schema and permission changes).
    pub fn in_table(&self, table: &str) -> Vec<(u64, Arc<Node>)> {
        let g = self.inner.read();
        g.by_ino
            .iter()
            .filter(|(_, e)| e.node.table() == Some(table))
            .map(|(i, e)| (*i, e.node.clone()))
            .collect()
    }

    /// Whether the kernel was last told `size` and version `ts` of `ino`.
    pub fn reported_is(&self, ino: u64, size: u64, ts: u64) -> bool {
        matches!(self.reported(ino), Some((s, t)) if s == size && t == ts)
    }

    pub fn set_reported(&self, ino: u64, size: u64, mtime: u64) {
        if let Some(e) = self.inner.write().by_ino.get_mut(&ino) {
            e.reported = Some((size, mtime));
        }
    }

    /// A name was added to or removed from the directory `ino` now.
    pub fn dir_changed(&self, ino: u64) {
        if let Some(e) = self.inner.write().by_ino.get_mut(&ino) {
            e.changed = Some(SystemTime::now());
        }
    }

    /// When the directory `ino` last changed (see [`InodeTable::dir_changed`]).
    pub fn dir_changed_at(&self, ino: u64) -> Option<SystemTime> {
        self.inner.read().by_ino.get(&ino).and_then(|e| e.changed)
    }

    pub fn reported(&self, ino: u64) -> Option<(u64, u64)> {
        self.inner.read().by_ino.get(&ino).and_then(|e| e.reported)
    }

    /// Number of known inodes (for `.bigtable/stats`).
    pub fn len(&self) -> usize {
        self.inner.read().by_ino.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{CellAddr, FamilyAddr, View};

    fn row(r: &[u8]) -> Node {
        Node::Row {
            table: "t".into(),
            view: View::Now,
            row: r.to_vec().into(),
        }
    }

    #[test]
    fn lookups_and_forgets_balance() {
        let t = InodeTable::new();
        let n = row(b"a");
        let ino = t.register(&n).unwrap();
        assert_eq!(t.register(&n).unwrap(), ino);
        assert_eq!(*t.get(ino).unwrap(), n);
        assert_eq!(t.in_row("t", b"a").len(), 1);
        assert!(!t.forget(ino, 1), "one lookup is left");
        assert!(t.is_known(&n));
        assert!(t.forget(ino, 1), "the last one");
        assert!(t.get(ino).is_none());
        assert!(!t.is_known(&n));
        assert!(t.in_row("t", b"a").is_empty());
        // The root is never forgotten.
        assert!(!t.forget(ROOT_INO, 100));
        assert_eq!(*t.get(ROOT_INO).unwrap(), Node::Root);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn row_and_table_indexes() {
        let t = InodeTable::new();
        t.register(&row(b"a")).unwrap();
        t.register(&Node::Family(FamilyAddr {
            table: "t".into(),
            view: View::Now,
            row: b"a".to_vec().into(),
            family: "f".into(),
        }))
        .unwrap();
        t.register(&row(b"b")).unwrap();
        t.register(&Node::Table("t".into())).unwrap();
        t.register(&Node::Row {
            table: "u".into(),
            view: View::Now,
            row: b"a".to_vec().into(),
        })
        .unwrap();
        assert_eq!(t.in_row("t", b"a").len(), 2);
        assert_eq!(
            t.in_row("u", b"a").len(),
            1,
            "another table's row of the same name"
        );
        assert_eq!(t.in_table("t").len(), 4);
        assert!(t.in_table("v").is_empty());
    }

    #[test]
    fn rebind_moves_an_inode_to_its_new_name() {
        let t = InodeTable::new();
        let cell = |q: &[u8]| {
            Node::Cell(CellAddr::now(
                "t".into(),
                b"r".to_vec().into(),
                "f".into(),
                q.to_vec(),
            ))
        };
        let ino = t.register(&cell(b"a")).unwrap();
        t.rebind(&cell(b"a"), &cell(b"b"));
        assert_eq!(*t.get(ino).unwrap(), cell(b"b"));
        t.rebind(&cell(b"b"), &cell(b"c"));
        assert_eq!(*t.get(ino).unwrap(), cell(b"c"));
        assert_eq!(t.in_row("t", b"r").len(), 1);
    }

    fn cell_in(f: &str, q: &[u8]) -> Node {
        Node::Cell(CellAddr::now(
            "t".into(),
            b"r".to_vec().into(),
            f.into(),
            q.to_vec(),
        ))
    }

    #[test]
    fn a_renamed_cell_keeps_its_number_while_the_kernel_holds_it() {
        let t = InodeTable::new();
        let (a, b) = (cell_in("f", b"a"), cell_in("g", b"b"));
        let ino = t.register(&a).unwrap();
        t.rebind(&a, &b);
        assert_eq!(t.ino_of(&b), ino, "the moved cell keeps its number");
        assert_eq!(
            t.register(&b).unwrap(),
            ino,
            "a new lookup finds the same inode"
        );
        assert!(t.is_known(&b));
        // A cell made again at the old name gets a number of its own.
        let again = t.register(&a).unwrap();
        assert_ne!(again, ino);
        assert_ne!(again, b.natural_ino());
        assert_eq!(t.ino_of(&a), again);
        // Moved on, and back: the number follows the file.
        let c = cell_in("f", b"c");
        t.rebind(&b, &c);
        assert_eq!(t.ino_of(&c), ino);
        assert_ne!(t.ino_of(&b), ino);
        // Once the kernel forgets the inode the alias goes (bounded memory).
        assert!(!t.forget(ino, 1));
        assert!(t.forget(ino, 1));
        assert_eq!(t.aliased.load(Ordering::Relaxed), 0);
        assert_eq!(t.ino_of(&c), c.natural_ino());
        assert_eq!(t.ino_of(&a), a.natural_ino());
    }

    #[test]
    fn a_rename_over_an_existing_cell_takes_its_name_not_its_number() {
        let t = InodeTable::new();
        let (a, b) = (cell_in("f", b"a"), cell_in("f", b"b"));
        let ia = t.register(&a).unwrap();
        let ib = t.register(&b).unwrap();
        t.rebind(&a, &b);
        assert_eq!(t.ino_of(&b), ia);
        // The replaced file's inode, still held by the kernel, goes away.
        assert!(t.forget(ib, 1));
        assert_eq!(t.ino_of(&b), ia);
        // An unknown inode renamed keeps no alias.
        let (x, y) = (cell_in("f", b"x"), cell_in("f", b"y"));
        t.rebind(&x, &y);
        assert_eq!(t.ino_of(&y), y.natural_ino());
        assert_eq!(t.aliased.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_exchange_swaps_names_and_keeps_numbers() {
        let t = InodeTable::new();
        let (a, b) = (cell_in("f", b"a"), cell_in("g", b"b"));
        let (ia, ib) = (t.register(&a).unwrap(), t.register(&b).unwrap());
        t.exchange(&a, &b);
        assert_eq!(*t.get(ia).unwrap(), b);
        assert_eq!(*t.get(ib).unwrap(), a);
        assert_eq!(t.ino_of(&b), ia);
        assert_eq!(t.ino_of(&a), ib);
        t.exchange(&a, &b);
        assert_eq!(t.ino_of(&a), ia);
        assert_eq!(t.ino_of(&b), ib);
        assert_eq!(t.aliased.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn an_idle_table_trims_once_after_forgets() {
        let t = InodeTable::new();
        let inos: Vec<u64> = (0..1000u32)
            .map(|i| t.register(&row(&i.to_be_bytes())).unwrap())
            .collect();
        assert!(!t.trim_if_idle(), "nothing was forgotten");
        for ino in inos {
            t.forget(ino, 1);
        }
        assert!(!t.trim_if_idle(), "forgets arrived since the last check");
        assert!(t.trim_if_idle(), "the burst is over");
        assert!(!t.trim_if_idle(), "already trimmed");
        assert_eq!(t.len(), 1);
        assert!(t.in_row("t", &0u32.to_be_bytes()).is_empty());
    }

    #[test]
    fn reported_attributes_are_kept_per_inode() {
        let t = InodeTable::new();
        let ino = t.register(&row(b"x")).unwrap();
        assert_eq!(t.reported(ino), None);
        t.set_reported(ino, 10, 20);
        assert_eq!(t.reported(ino), Some((10, 20)));
    }
}
