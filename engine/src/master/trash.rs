//! The master's side of the trash (`crate::trash`): moving a deleted table
//! there, bringing it back, and purging it when asked or when the trash
//! period runs out.
//!
//! Each change is ordered so that a crash between its steps leaves
//! something whole: deleting writes the trash row before removing the
//! definition (both present after a crash: the table was not deleted, and
//! the next round drops the trash row); undeleting writes the definition
//! before removing the trash row (the same); purging first marks the entry
//! expired (it cannot be undeleted any more), then deletes the tablet rows,
//! then the trash row, and an interrupted purge is finished by the next round.

use super::Master;
use crate::catalog::{validate_table_name, TableEntry};
use crate::coordination::Schemas;
use crate::metadata::{table_def_key, TableDef};
use crate::trash::{read_trash, TrashEntry};
use crate::{Error, Result};
use std::sync::atomic::Ordering;

impl Master {
    /// `delete_table` with the trash on: the tablets are flushed and
    /// unloaded (their rows then name every file; no log to replay), and
    /// the definition becomes a trash row. The caller holds `ops`.
    pub(super) fn trash_table(&self, t: &TableEntry) -> Result<()> {
        let rows = self.table_rows(t.id)?;
        let ids: Vec<u64> = rows.iter().map(|r| r.meta.id).collect();
        let _held = self.hold(&ids);
        for s in self.env.servers() {
            for served in s.served()? {
                if served.table_id == t.id {
                    s.unload(served.id)?;
                }
            }
        }
        let entry = TrashEntry {
            id: t.id,
            name: t.name.clone(),
            deleted_at: crate::now_micros(),
            schema: (*t.schema()).clone(),
        };
        self.write_trash_row(&entry)?;
        self.delete_row(&table_def_key(&t.name))?;
        Schemas(&*self.env.lock).drop_table(&t.name)?;
        self.env.catalog.remove(&t.name);
        self.client.forget_table(t.id);
        self.note(format!("moved table {} (id {}) to the trash", t.name, t.id));
        Ok(())
    }

    /// Brings trashed table `id` back under `name` (its old one if None);
    /// its tablets are assigned by the next round.
    pub fn undelete_table(&self, id: u64, name: Option<&str>) -> Result<String> {
        let _ops = self.ops.lock();
        let e = self.trash_entry(id)?;
        if e.deleted_at == 0 {
            return Err(Error::TableNotFound(format!(
                "trash entry {id} (being purged)"
            )));
        }
        let name = name.unwrap_or(&e.name).to_string();
        validate_table_name(&name)?;
        if self.env.catalog.get(&name).is_ok() {
            return Err(Error::TableExists(name));
        }
        let def = TableDef {
            id,
            name: name.clone(),
            schema: e.schema,
        };
        Schemas(&*self.env.lock).store_schema(&name, &def.schema)?;
        self.write_def(&def)?;
        self.env.catalog.put(&def);
        self.delete_row(&TrashEntry::key(id))?;
        self.tell_servers(&def);
        self.state.lock().need_reconcile = true;
        self.wake();
        self.note(format!("undeleted table {name} (id {id}) from the trash"));
        Ok(name)
    }

    /// Deletes trashed table `id` for good; the next collection frees
    /// the files only it used.
    pub fn purge_trash(&self, id: u64) -> Result<()> {
        let _ops = self.ops.lock();
        let e = self.trash_entry(id)?;
        self.purge(e)?;
        // Not under `ops` (see `delete_table`).
        drop(_ops);
        let _admin = self.admin.lock();
        self.collect()
    }

    /// Purges the entries whose period has run out, and drops the trash
    /// rows of tables that are defined after all (an interrupted delete or
    /// undelete). Run by the main loop before a collection.
    pub(super) fn expire_trash(&self) -> Result<()> {
        let period = self.env.opts.trash_period.as_micros() as u64;
        let now = crate::now_micros();
        let _ops = self.ops.lock();
        let defined: std::collections::HashSet<u64> = self
            .env
            .catalog
            .names()
            .iter()
            .filter_map(|n| self.env.catalog.get(n).ok().map(|t| t.id))
            .collect();
        for e in read_trash(&self.client)? {
            if defined.contains(&e.id) {
                self.delete_row(&TrashEntry::key(e.id))?;
            } else if now.saturating_sub(e.deleted_at) >= period {
                self.purge(e)?;
            }
        }
        Ok(())
    }

    fn purge(&self, mut e: TrashEntry) -> Result<()> {
        if e.deleted_at != 0 {
            e.deleted_at = 0;
            self.write_trash_row(&e)?;
        }
        for r in self.table_rows(e.id)? {
            self.delete_row(&r.key)?;
        }
        self.delete_row(&TrashEntry::key(e.id))?;
        self.counters.trash_purged.fetch_add(1, Ordering::Relaxed);
        self.note(format!(
            "purged table {} (id {}) from the trash",
            e.name, e.id
        ));
        Ok(())
    }

    /// An id for a new table: above every defined table's and every
    /// trashed one's (a trashed table keeps its id and its tablet rows).
    pub(super) fn next_table_id(&self) -> Result<u64> {
        let trashed = read_trash(&self.client)?.iter().map(|e| e.id + 1).max();
        Ok(self.env.catalog.next_id().max(trashed.unwrap_or(0)))
    }

    fn trash_entry(&self, id: u64) -> Result<TrashEntry> {
        read_trash(&self.client)?
            .into_iter()
            .find(|e| e.id == id)
            .ok_or_else(|| Error::TableNotFound(format!("trash entry {id}")))
    }

    fn write_trash_row(&self, e: &TrashEntry) -> Result<()> {
        let seq = self.sequencer()?;
        self.client
            .write_metadata(&TrashEntry::key(e.id), vec![e.mutation()], Some(&seq))
    }
}
