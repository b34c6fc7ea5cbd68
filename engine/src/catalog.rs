//! The tables the cluster knows: names, ids and schemas, as METADATA's
//! table-definition rows record them. The master loads and changes it;
//! tablet servers and clients read schemas from it.

use crate::cow_map::CowMap;
use crate::metadata::{metadata_schema, TableDef, METADATA_ID, METADATA_NAME};
use crate::schema::TableSchema;
use crate::{Error, Result};
use arc_swap::{ArcSwap, Guard};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One table as the cluster knows it. Read by every request for the
/// table: on cache lines of its own (see [`crate::own_lines`]).
#[repr(align(64))]
pub struct TableEntry {
    pub id: u64,
    pub name: String,
    schema: ArcSwap<TableSchema>,
}

impl TableEntry {
    pub fn schema(&self) -> Arc<TableSchema> {
        self.schema.load_full()
    }

    /// The schema for a short read, without taking a reference count (see
    /// [`crate::tablet::Tablet::current`]).
    pub fn schema_now(&self) -> Guard<Arc<TableSchema>> {
        self.schema.load()
    }
}

/// The table id a thread looked up last (see [`Catalog::id_of`]).
#[derive(Default)]
struct LastId {
    catalog: u64,
    version: u64,
    name: String,
    id: u64,
}

thread_local! {
    static LAST_ID: RefCell<Option<LastId>> = const { RefCell::new(None) };
}

/// Numbers catalogs, so that a thread's kept id is only used by the
/// catalog that gave it (a process may hold several).
static NEXT_CATALOG: AtomicU64 = AtomicU64::new(1);

/// Every table, by name and by id; METADATA is always present.
pub struct Catalog {
    tables: CowMap<String, Arc<TableEntry>>,
    /// This catalog's number (see [`NEXT_CATALOG`]).
    serial: u64,
    /// Counts the changes made to it, so that a daemon re-reading the
    /// tables from METADATA does not overwrite a newer definition the
    /// master pushed while it read.
    changes: AtomicU64,
    /// Serializes writers, so a change and that check cannot interleave.
    writers: Mutex<()>,
}

impl Default for Catalog {
    fn default() -> Self {
        let meta = Arc::new(TableEntry {
            id: METADATA_ID,
            name: METADATA_NAME.to_string(),
            schema: ArcSwap::from_pointee(metadata_schema()),
        });
        Catalog {
            tables: CowMap::from(BTreeMap::from([(METADATA_NAME.to_string(), meta)])),
            serial: NEXT_CATALOG.fetch_add(1, Ordering::Relaxed),
            changes: AtomicU64::new(0),
            writers: Mutex::new(()),
        }
    }
}

impl Catalog {
    pub fn get(&self, name: &str) -> Result<Arc<TableEntry>> {
        self.tables
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    /// The id of the table named `name`. Each thread keeps the last name it
    /// asked for with its id, good while the catalog is unchanged: a point
    /// read names its table every time, and the map's load and search were
    /// 5% of a cached sequential read.
    pub fn id_of(&self, name: &str) -> Result<u64> {
        let version = self.tables.version();
        let kept = LAST_ID.with(|last| {
            let last = last.try_borrow().ok()?;
            let k = last.as_ref()?;
            (k.catalog == self.serial && k.version == version && k.name == name).then_some(k.id)
        });
        if let Some(id) = kept {
            return Ok(id);
        }
        // Looked up after the version was read: kept under a version no
        // newer than the map it came from.
        let id = self.with(name, |t| t.id)?;
        LAST_ID.with(|last| {
            if let Ok(mut last) = last.try_borrow_mut() {
                let k = last.get_or_insert_with(LastId::default);
                k.catalog = self.serial;
                k.version = version;
                k.name.clear();
                k.name.push_str(name);
                k.id = id;
            }
        });
        Ok(id)
    }

    /// `f` of the table named `name`, borrowed (what a point read uses).
    pub fn with<R>(&self, name: &str, f: impl FnOnce(&TableEntry) -> R) -> Result<R> {
        self.tables
            .with(name, |t| f(t))
            .ok_or_else(|| Error::TableNotFound(name.to_string()))
    }

    pub fn by_id(&self, id: u64) -> Option<Arc<TableEntry>> {
        self.tables
            .snapshot()
            .values()
            .find(|t| t.id == id)
            .cloned()
    }

    /// User tables, in name order.
    pub fn names(&self) -> Vec<String> {
        self.tables
            .snapshot()
            .values()
            .filter(|t| t.id != METADATA_ID)
            .map(|t| t.name.clone())
            .collect()
    }

    pub fn next_id(&self) -> u64 {
        self.tables
            .snapshot()
            .values()
            .map(|t| t.id)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// How many changes were made so far (see [`Catalog::replace_all_since`]).
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Adds or replaces a table's definition.
    pub fn put(&self, def: &TableDef) {
        let _w = self.writers.lock();
        self.put_locked(def);
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    fn put_locked(&self, def: &TableDef) {
        self.tables.update(|t| match t.get(&def.name) {
            Some(e) if e.id == def.id => e.schema.store(Arc::new(def.schema.clone())),
            _ => {
                t.insert(
                    def.name.clone(),
                    Arc::new(TableEntry {
                        id: def.id,
                        name: def.name.clone(),
                        schema: ArcSwap::from_pointee(def.schema.clone()),
                    }),
                );
            }
        })
    }

    pub fn remove(&self, name: &str) {
        let _w = self.writers.lock();
        self.tables.remove(name);
        self.changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Makes the user tables exactly `defs` (a new master's view); entries
    /// that stay keep their identity so holders see schema changes.
    pub fn replace_all(&self, defs: Vec<TableDef>) {
        let _w = self.writers.lock();
        self.replace_locked(defs);
    }

    /// [`Catalog::replace_all`], unless the catalog changed since it had
    /// made `seen` changes (the definitions were read before that change
    /// and may be older than it). Returns whether it replaced them.
    pub fn replace_all_since(&self, defs: Vec<TableDef>, seen: u64) -> bool {
        let _w = self.writers.lock();
        if self.changes.load(Ordering::Acquire) != seen {
            return false;
        }
        self.replace_locked(defs);
        true
    }

    fn replace_locked(&self, defs: Vec<TableDef>) {
        let names: std::collections::HashSet<String> =
            defs.iter().map(|d| d.name.clone()).collect();
        for d in &defs {
            self.put_locked(d);
        }
        self.tables
            .update(|t| t.retain(|n, e| e.id == METADATA_ID || names.contains(n)));
        self.changes.fetch_add(1, Ordering::AcqRel);
    }
}

/// Table names: what a directory name may be, minus the reserved leading
/// dot; one `@` may join an instance and a table id (a table of another
/// instance of the gRPC API).
pub fn validate_table_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name.matches('@').count() <= 1
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "table name {name:?}: use 1-255 of [A-Za-z0-9_.-] and at most one '@', not starting with '.'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(id: u64, name: &str, families: &[&str]) -> TableDef {
        TableDef {
            id,
            name: name.to_string(),
            schema: TableSchema::with_families(
                families
                    .iter()
                    .map(|f| crate::schema::FamilySchema::new(*f)),
            ),
        }
    }

    #[test]
    fn a_reread_older_than_a_push_does_not_overwrite_it() {
        let c = Catalog::default();
        c.put(&def(5, "t", &[]));
        // A refresh starts reading METADATA (the table without families)...
        let seen = c.changes();
        let read = vec![def(5, "t", &[])];
        // ...while the master pushes the new schema.
        c.put(&def(5, "t", &["cf"]));
        assert!(!c.replace_all_since(read, seen));
        assert!(c.get("t").unwrap().schema().families.contains_key("cf"));
        // A read after the push replaces.
        let seen = c.changes();
        assert!(c.replace_all_since(vec![def(5, "t", &["cf", "x"])], seen));
        assert_eq!(c.get("t").unwrap().schema().families.len(), 2);
    }

    #[test]
    fn a_kept_id_follows_drops_recreations_and_catalogs() {
        let (a, b) = (Catalog::default(), Catalog::default());
        a.put(&def(5, "t", &[]));
        b.put(&def(9, "t", &[]));
        assert_eq!(a.id_of("t").unwrap(), 5);
        assert_eq!(a.id_of("t").unwrap(), 5, "the kept one");
        assert_eq!(b.id_of("t").unwrap(), 9, "another catalog's");
        assert_eq!(a.id_of("t").unwrap(), 5);
        a.remove("t");
        assert!(matches!(a.id_of("t"), Err(Error::TableNotFound(_))));
        a.put(&def(6, "t", &[]));
        assert_eq!(a.id_of("t").unwrap(), 6);
        a.replace_all(vec![def(7, "t", &[])]);
        assert_eq!(a.id_of("t").unwrap(), 7);
        assert!(a.id_of("u").is_err());
        assert_eq!(a.id_of(METADATA_NAME).unwrap(), METADATA_ID);
    }
}
