//! Tables from snapshots: a clone (a new table) or a restore (the table
//! itself), whose tablets name the snapshot's SSTables; nothing is copied.
//! Each tablet is written to METADATA with the snapshot's range and files
//! and a new id, and loaded: its server numbers later writes above the
//! files' sequence numbers, so they shadow the snapshot's cells, and any
//! compaction writes new files, never touching the shared ones.

use super::Master;
use crate::catalog::validate_table_name;
use crate::coordination::Schemas;
use crate::metadata::{TableDef, TabletMeta};
use crate::snapshot::{read_manifest, Manifest};
use crate::{Error, Result};

impl Master {
    /// New table `to` as snapshot `snapshot` of `table` was.
    pub fn clone_snapshot(&self, table: &str, snapshot: &str, to: &str) -> Result<()> {
        validate_table_name(to)?;
        let m = read_manifest(&*self.env.store, table, snapshot)?;
        m.schema.validate()?;
        let _ops = self.ops.lock();
        if self.env.catalog.get(to).is_ok() {
            return Err(Error::TableExists(to.to_string()));
        }
        let def = TableDef {
            id: self.env.catalog.next_id(),
            name: to.to_string(),
            schema: m.schema.clone(),
        };
        self.env.numbers.bump(def.id);
        self.install_snapshot(&def, &m)?;
        self.note(format!("cloned {table}/{snapshot} as {to}"));
        Ok(())
    }

    /// Table `table` made snapshot `snapshot` again: its tablets (and what
    /// their memtables held) are dropped, the snapshot's put in their place.
    pub fn restore_snapshot(&self, table: &str, snapshot: &str) -> Result<()> {
        let m = read_manifest(&*self.env.store, table, snapshot)?;
        m.schema.validate()?;
        let _ops = self.ops.lock();
        let t = self.env.catalog.get(table)?;
        t.schema().check_restorable(table)?;
        // A restore replaces the rows wholesale and would rewind the change
        // log with them: a reader of the log would miss it (docs/changes.md).
        if t.schema().logs_changes() || m.schema.logs_changes() {
            return Err(Error::invalid(format!(
                "table {table} keeps a change log, which a restore would bypass: \
                 turn change_retention off first, or clone the snapshot instead"
            )));
        }
        self.drop_tablets(t.id)?;
        let def = TableDef {
            id: t.id,
            name: table.to_string(),
            schema: m.schema.clone(),
        };
        self.install_snapshot(&def, &m)?;
        self.note(format!("restored {table} to its snapshot {snapshot}"));
        Ok(())
    }

    /// Drops every tablet of table `table` from its server (what its
    /// memtables held with it) and from METADATA. The caller holds `ops`.
    pub(super) fn drop_tablets(&self, table: u64) -> Result<()> {
        let rows = self.table_rows(table)?;
        let ids: Vec<u64> = rows.iter().map(|r| r.meta.id).collect();
        let _held = self.hold(&ids);
        for s in self.env.servers() {
            // A server that cannot answer is reaped and its tablets, with
            // the table gone from METADATA, are not loaded again.
            for served in s.served().unwrap_or_default() {
                if served.table_id == table {
                    s.drop_tablet(served.id)?;
                }
            }
        }
        for r in rows {
            self.delete_row(&r.key)?;
        }
        self.client.forget_table(table);
        Ok(())
    }

    /// Writes table `def` with the snapshot's tablets, and loads them.
    fn install_snapshot(&self, def: &TableDef, m: &Manifest) -> Result<()> {
        Schemas(&*self.env.lock).store_schema(&def.name, &def.schema)?;
        let metas = m
            .tablets
            .iter()
            .map(|t| {
                Ok(TabletMeta {
                    id: self.env.numbers.next_id()?,
                    table: def.id,
                    start: t.meta.start.clone(),
                    end: t.meta.end.clone(),
                    files: t.meta.files.clone(),
                    redo: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ids: Vec<u64> = metas.iter().map(|t| t.id).collect();
        let _held = self.hold(&ids);
        {
            // No first tablet is made for the table while its rows are
            // written (see `first_tablets`).
            let _first = self.first_tablets.lock();
            self.write_def(def)?;
            self.env.catalog.put(def);
            for meta in &metas {
                self.write_tablet_row(meta, "")?;
            }
        }
        self.tell_servers(def);
        let live = self.live();
        for meta in metas {
            let id = meta.id;
            // Left unassigned, the main loop assigns it.
            if let Err(e) = self.assign(meta, &live) {
                log::warn!("{}: tablet {id} of {}: {e}", self.name, def.name);
                self.wake();
            }
        }
        Ok(())
    }
}
