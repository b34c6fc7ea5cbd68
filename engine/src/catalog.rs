//! The tables the cluster knows: names, ids and schemas, as METADATA's
//! table-definition rows record them. The master loads and changes it;
//! tablet servers and clients read schemas from it.

use crate::cow_map::CowMap;
use crate::metadata::{metadata_schema, TableDef, METADATA_ID, METADATA_NAME};
use crate::schema::TableSchema;
use crate::{Error, Result};
use arc_swap::{ArcSwap, Guard};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One table as the cluster knows it.
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

/// Every table, by name and by id; METADATA is always present.
pub struct Catalog {
    tables: CowMap<String, Arc<TableEntry>>,
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
        }
    }
}

impl Catalog {
    pub fn get(&self, name: &str) -> Result<Arc<TableEntry>> {
        self.tables
            .get(name)
            .ok_or_else(|| Error::TableNotFound(name.to_string()))
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

    /// Adds or replaces a table's definition.
    pub fn put(&self, def: &TableDef) {
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
        self.tables.remove(name);
    }

    /// Makes the user tables exactly `defs` (a new master's view); entries
    /// that stay keep their identity so holders see schema changes.
    pub fn replace_all(&self, defs: Vec<TableDef>) {
        let names: std::collections::HashSet<String> =
            defs.iter().map(|d| d.name.clone()).collect();
        for d in &defs {
            self.put(d);
        }
        self.tables
            .update(|t| t.retain(|n, e| e.id == METADATA_ID || names.contains(n)));
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
