//! Directories and files that exist only in this mount, not (yet) in the
//! store.
//!
//! A row exists while it has a cell, and a family directory while the row
//! has a cell in it. But `mkdir -p t/row/fam && echo v > t/row/fam/q` must
//! work, and `rm -r t/row` must be able to `rmdir` the family after unlinking
//! its last cell. So empty directories made with `mkdir` (or emptied by
//! `unlink`) are remembered here until they get data or are removed, and a
//! file being created is visible from `create` until its first commit.
//! None of this survives a remount: an empty directory holds no data.

use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

type Fam = (String, Vec<u8>, String);
type Col = (String, Vec<u8>, String, Vec<u8>);

#[derive(Default)]
struct Inner {
    rows: HashMap<String, BTreeSet<Vec<u8>>>,
    families: HashSet<Fam>,
    /// `.versions/<qualifier>` directories made with mkdir.
    columns: HashSet<Col>,
    /// Cells created and not yet committed, with the number of open handles.
    cells: HashMap<Col, usize>,
    /// `.schema`/`.mutate` files removed with unlink (see [`Pending::hide`]).
    hidden: HashSet<(String, String)>,
    /// Tables another writer made, deleted or changed the schema of since
    /// their directories here were checked against the store (see
    /// [`Pending::table_changed_elsewhere`]).
    unsure: BTreeSet<String>,
}

/// See the module comment.
#[derive(Default)]
pub struct Pending {
    inner: Mutex<Inner>,
    /// Whether `unsure` holds a table: checked on every use, without the lock.
    any_unsure: AtomicBool,
}

fn fam(t: &str, r: &[u8], f: &str) -> Fam {
    (t.to_string(), r.to_vec(), f.to_string())
}

fn col(t: &str, r: &[u8], f: &str, q: &[u8]) -> Col {
    (t.to_string(), r.to_vec(), f.to_string(), q.to_vec())
}

impl Pending {
    pub fn add_row(&self, t: &str, r: &[u8]) {
        self.inner
            .lock()
            .rows
            .entry(t.to_string())
            .or_default()
            .insert(r.to_vec());
    }

    pub fn has_row(&self, t: &str, r: &[u8]) -> bool {
        let g = self.inner.lock();
        g.rows.get(t).is_some_and(|s| s.contains(r))
            || g.families.iter().any(|(ft, fr, _)| ft == t && fr == r)
            || g.cells.keys().any(|(ct, cr, _, _)| ct == t && cr == r)
    }

    /// Forgets a row and everything pending inside it; whether it was there.
    pub fn remove_row(&self, t: &str, r: &[u8]) -> bool {
        let mut g = self.inner.lock();
        let mut had = g.rows.get_mut(t).is_some_and(|s| s.remove(r));
        if g.rows.get(t).is_some_and(|s| s.is_empty()) {
            g.rows.remove(t);
        }
        let (nf, nc) = (g.families.len(), g.columns.len());
        g.families.retain(|(ft, fr, _)| !(ft == t && fr == r));
        g.columns.retain(|(ct, cr, _, _)| !(ct == t && cr == r));
        had |= g.families.len() != nf || g.columns.len() != nc;
        had
    }

    /// Up to `limit` pending rows of a table after `after` (exclusive), in order.
    pub fn rows_after(&self, t: &str, after: Option<&[u8]>, limit: usize) -> Vec<Vec<u8>> {
        let g = self.inner.lock();
        let mut rows: BTreeSet<Vec<u8>> = BTreeSet::new();
        if let Some(s) = g.rows.get(t) {
            rows.extend(s.iter().cloned());
        }
        // Rows holding only a pending family or a file being created count too.
        rows.extend(
            g.families
                .iter()
                .filter(|(ft, _, _)| ft == t)
                .map(|(_, r, _)| r.clone()),
        );
        rows.extend(
            g.cells
                .keys()
                .filter(|(ct, ..)| ct == t)
                .map(|(_, r, _, _)| r.clone()),
        );
        rows.into_iter()
            .filter(|r| after.is_none_or(|a| r.as_slice() > a))
            .take(limit)
            .collect()
    }

    pub fn add_family(&self, t: &str, r: &[u8], f: &str) {
        self.inner.lock().families.insert(fam(t, r, f));
    }

    pub fn has_family(&self, t: &str, r: &[u8], f: &str) -> bool {
        let g = self.inner.lock();
        g.families.contains(&fam(t, r, f))
            || g.columns
                .iter()
                .any(|(ct, cr, cf, _)| ct == t && cr == r && cf == f)
            || g.cells
                .keys()
                .any(|(ct, cr, cf, _)| ct == t && cr == r && cf == f)
    }

    pub fn remove_family(&self, t: &str, r: &[u8], f: &str) -> bool {
        let mut g = self.inner.lock();
        let nc = g.columns.len();
        g.columns
            .retain(|(ct, cr, cf, _)| !(ct == t && cr == r && cf == f));
        g.families.remove(&fam(t, r, f)) | (g.columns.len() != nc)
    }

    /// Forgets the empty directories of family `f` in every row of a
    /// table, and its `.versions/` columns (the family was dropped: were it
    /// added again, they would come back with it).
    pub fn drop_family(&self, t: &str, f: &str) {
        self.keep_families(t, |ff| ff != f);
    }

    /// Pending families of a row.
    pub fn families_of(&self, t: &str, r: &[u8]) -> Vec<String> {
        let g = self.inner.lock();
        let mut out: BTreeSet<String> = g
            .families
            .iter()
            .filter(|(ft, fr, _)| ft == t && fr == r)
            .map(|(_, _, f)| f.clone())
            .collect();
        out.extend(
            g.cells
                .keys()
                .chain(g.columns.iter())
                .filter(|(ct, cr, _, _)| ct == t && cr == r)
                .map(|(_, _, f, _)| f.clone()),
        );
        out.into_iter().collect()
    }

    pub fn add_column(&self, t: &str, r: &[u8], f: &str, q: &[u8]) {
        self.inner.lock().columns.insert(col(t, r, f, q));
    }

    pub fn has_column(&self, t: &str, r: &[u8], f: &str, q: &[u8]) -> bool {
        self.inner.lock().columns.contains(&col(t, r, f, q))
    }

    pub fn remove_column(&self, t: &str, r: &[u8], f: &str, q: &[u8]) -> bool {
        self.inner.lock().columns.remove(&col(t, r, f, q))
    }

    pub fn columns_of(&self, t: &str, r: &[u8], f: &str) -> Vec<Vec<u8>> {
        let g = self.inner.lock();
        g.columns
            .iter()
            .filter(|(ct, cr, cf, _)| ct == t && cr == r && cf == f)
            .map(|(_, _, _, q)| q.clone())
            .collect()
    }

    /// A handle created this cell.
    pub fn add_cell(&self, t: &str, r: &[u8], f: &str, q: &[u8]) {
        *self.inner.lock().cells.entry(col(t, r, f, q)).or_default() += 1;
    }

    /// The creating handle committed or closed.
    pub fn drop_cell(&self, t: &str, r: &[u8], f: &str, q: &[u8]) {
        let mut g = self.inner.lock();
        let k = col(t, r, f, q);
        if let Some(n) = g.cells.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                g.cells.remove(&k);
            }
        }
    }

    pub fn has_cell(&self, t: &str, r: &[u8], f: &str, q: &[u8]) -> bool {
        self.inner.lock().cells.contains_key(&col(t, r, f, q))
    }

    pub fn cells_of(&self, t: &str, r: &[u8], f: &str) -> Vec<Vec<u8>> {
        let g = self.inner.lock();
        g.cells
            .keys()
            .filter(|(ct, cr, cf, _)| ct == t && cr == r && cf == f)
            .map(|(_, _, _, q)| q.clone())
            .collect()
    }

    /// Data reached the store under this row and family: the placeholders
    /// are no longer needed.
    pub fn data_written(&self, t: &str, r: &[u8], f: &str) {
        let mut g = self.inner.lock();
        if let Some(s) = g.rows.get_mut(t) {
            s.remove(r);
            if s.is_empty() {
                g.rows.remove(t);
            }
        }
        g.families.remove(&fam(t, r, f));
    }

    /// `rm table/.schema`: the file disappears until it is created again
    /// (the schema itself is unchanged). This lets `rm -r` empty a table and
    /// tar replace the file (unlink, then create with O_EXCL). Whether it was visible.
    pub fn hide(&self, t: &str, name: &str) -> bool {
        self.inner
            .lock()
            .hidden
            .insert((t.to_string(), name.to_string()))
    }

    /// The file was created again.
    pub fn unhide(&self, t: &str, name: &str) {
        self.inner
            .lock()
            .hidden
            .remove(&(t.to_string(), name.to_string()));
    }

    pub fn is_hidden(&self, t: &str, name: &str) -> bool {
        self.inner
            .lock()
            .hidden
            .contains(&(t.to_string(), name.to_string()))
    }

    /// Another writer made, deleted or changed the schema of table `t`: its
    /// directories here may belong to a table or family that is gone, and
    /// must not come back with a table or family made again under the
    /// name. Only noted here (this runs while the other writer waits, so
    /// it asks the store nothing); the next use checks ([`Pending::take_unsure`]).
    pub fn table_changed_elsewhere(&self, t: &str) {
        self.inner.lock().unsure.insert(t.to_string());
        self.any_unsure.store(true, Ordering::Release);
    }

    /// The tables noted by [`Pending::table_changed_elsewhere`] since the
    /// last call, for the caller to check against the store.
    pub fn take_unsure(&self) -> Vec<String> {
        if !self.any_unsure.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut g = self.inner.lock();
        self.any_unsure.store(false, Ordering::Release);
        std::mem::take(&mut g.unsure).into_iter().collect()
    }

    /// Forgets the empty directories and `.versions/` columns of the
    /// families of table `t` that `keep` refuses (they were dropped).
    pub fn keep_families(&self, t: &str, keep: impl Fn(&str) -> bool) {
        let mut g = self.inner.lock();
        g.families.retain(|(ft, _, ff)| ft != t || keep(ff));
        g.columns.retain(|(ct, _, cf, _)| ct != t || keep(cf));
    }

    /// Forgets everything of a table (it was deleted).
    pub fn drop_table(&self, t: &str) {
        let mut g = self.inner.lock();
        g.rows.remove(t);
        g.families.retain(|(ft, _, _)| ft != t);
        g.columns.retain(|(ct, ..)| ct != t);
        g.cells.retain(|(ct, ..), _| ct != t);
        g.hidden.retain(|(ht, _)| ht != t);
    }

    /// Number of placeholders (for `.bigtable/stats`).
    pub fn len(&self) -> usize {
        let g = self.inner.lock();
        g.rows.values().map(|s| s.len()).sum::<usize>()
            + g.families.len()
            + g.columns.len()
            + g.cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_families_and_cells() {
        let p = Pending::default();
        p.add_row("t", b"b");
        p.add_family("t", b"c", "f");
        p.add_cell("t", b"a", "g", b"q");
        assert!(p.has_row("t", b"b") && p.has_row("t", b"c") && p.has_row("t", b"a"));
        assert!(!p.has_row("u", b"b"));
        assert_eq!(
            p.rows_after("t", None, 10),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(p.rows_after("t", Some(b"a"), 1), vec![b"b".to_vec()]);
        assert!(p.has_family("t", b"a", "g"));
        assert_eq!(p.families_of("t", b"a"), vec!["g".to_string()]);
        assert_eq!(p.cells_of("t", b"a", "g"), vec![b"q".to_vec()]);
        p.drop_cell("t", b"a", "g", b"q");
        assert!(!p.has_row("t", b"a"));
        assert!(p.remove_row("t", b"b"));
        assert!(!p.remove_row("t", b"b"));
        p.data_written("t", b"c", "f");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn created_cells_count_handles() {
        let p = Pending::default();
        p.add_cell("t", b"r", "f", b"q");
        p.add_cell("t", b"r", "f", b"q");
        p.drop_cell("t", b"r", "f", b"q");
        assert!(p.has_cell("t", b"r", "f", b"q"));
        p.drop_cell("t", b"r", "f", b"q");
        assert!(!p.has_cell("t", b"r", "f", b"q"));
    }

    #[test]
    fn special_files_hide_until_created() {
        let p = Pending::default();
        assert!(p.hide("t", ".schema"));
        assert!(!p.hide("t", ".schema"));
        assert!(p.is_hidden("t", ".schema") && !p.is_hidden("t", ".mutate"));
        p.unhide("t", ".schema");
        assert!(!p.is_hidden("t", ".schema"));
        p.hide("t", ".mutate");
        p.drop_table("t");
        assert!(!p.is_hidden("t", ".mutate"));
    }

    #[test]
    fn columns_and_table_drop() {
        let p = Pending::default();
        p.add_column("t", b"r", "f", b"q");
        assert!(p.has_column("t", b"r", "f", b"q"));
        assert!(p.has_family("t", b"r", "f"));
        assert_eq!(p.columns_of("t", b"r", "f"), vec![b"q".to_vec()]);
        p.add_row("t", b"x");
        p.drop_table("t");
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn a_dropped_family_forgets_its_directories_in_every_row() {
        let p = Pending::default();
        p.add_family("t", b"a", "g");
        p.add_family("t", b"b", "g");
        p.add_family("t", b"b", "f");
        p.add_column("t", b"c", "g", b"q");
        p.add_family("u", b"a", "g");
        p.drop_family("t", "g");
        assert!(!p.has_family("t", b"a", "g") && !p.has_family("t", b"b", "g"));
        assert!(!p.has_family("t", b"c", "g") && !p.has_row("t", b"a"));
        assert!(p.has_family("t", b"b", "f") && p.has_family("u", b"a", "g"));
    }

    #[test]
    fn tables_changed_elsewhere_are_handed_out_once() {
        let p = Pending::default();
        assert!(p.take_unsure().is_empty());
        p.table_changed_elsewhere("u");
        p.table_changed_elsewhere("t");
        p.table_changed_elsewhere("u");
        assert_eq!(p.take_unsure(), vec!["t".to_string(), "u".to_string()]);
        assert!(p.take_unsure().is_empty());
    }

    #[test]
    fn only_the_families_kept_keep_their_directories() {
        let p = Pending::default();
        p.add_family("t", b"a", "f");
        p.add_family("t", b"a", "g");
        p.add_column("t", b"b", "h", b"q");
        p.add_family("u", b"a", "g");
        p.keep_families("t", |f| f == "f");
        assert!(p.has_family("t", b"a", "f") && !p.has_family("t", b"a", "g"));
        assert!(!p.has_column("t", b"b", "h", b"q") && p.has_family("u", b"a", "g"));
    }
}
