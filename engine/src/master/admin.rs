//! What the master does on request or on its own: creating, altering and
//! dropping tables, moving tablets (by hand or to balance load, paper §5.4)
//! and merging small neighbouring tablets.

use super::Master;
use crate::catalog::validate_table_name;
use crate::client::Scanner;
use crate::coordination::Schemas;
use crate::metadata::{table_def_key, tablet_row_key, TableDef, TabletMeta};
use crate::scan::ScanSpec;
use crate::schema::TableSchema;
use crate::{Error, Result};
use std::sync::atomic::Ordering;

impl Master {
    pub fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        validate_table_name(name)?;
        schema.validate()?;
        let _ops = self.ops.lock();
        if self.env.catalog.get(name).is_ok() {
            return Err(Error::TableExists(name.to_string()));
        }
        let def = TableDef {
            id: self.next_table_id()?,
            name: name.to_string(),
            schema,
        };
        self.env.numbers.bump(def.id);
        Schemas(&*self.env.lock).store_schema(name, &def.schema)?;
        let meta = self.first_tablet(def.id)?;
        let _held = self.hold(&[meta.id]);
        {
            // From the moment the definition can be seen until its first
            // tablet's row is written (see `first_tablets`).
            let _first = self.first_tablets.lock();
            self.write_def(&def)?;
            self.env.catalog.put(&def);
            self.write_tablet_row(&meta, "")?;
        }
        self.tell_servers(&def);
        self.assign(meta, &self.live())?;
        Ok(())
    }

    pub fn delete_table(&self, name: &str) -> Result<()> {
        let _ops = self.ops.lock();
        let t = self.env.catalog.get(name)?;
        t.schema().check_deletable(name)?;
        if !self.env.opts.trash_period.is_zero() {
            return self.trash_table(&t);
        }
        self.env.catalog.remove(name);
        self.drop_tablets(t.id)?;
        self.delete_row(&table_def_key(name))?;
        Schemas(&*self.env.lock).drop_table(name)?;
        self.note(format!("dropped table {name}"));
        // The main loop takes `admin` before `ops` (loading the catalog):
        // never hold `ops` while waiting for `admin`.
        drop(_ops);
        let _admin = self.admin.lock();
        self.collect()
    }

    /// Replaces a table's schema; a dropped family must hold no data.
    pub fn set_schema(&self, name: &str, schema: TableSchema) -> Result<()> {
        schema.validate()?;
        let _ops = self.ops.lock();
        let t = self.env.catalog.get(name)?;
        let old = t.schema();
        old.check_change(name, &schema)?;
        for fam in old.families.keys() {
            if !schema.families.contains_key(fam) {
                let spec = ScanSpec {
                    families: Some(vec![fam.clone()]),
                    cell_limit: Some(1),
                    ..ScanSpec::default()
                };
                if Scanner::new(self.client.clone(), t.id, spec)
                    .next()
                    .transpose()?
                    .is_some()
                {
                    return Err(Error::FamilyNotEmpty(fam.clone()));
                }
            }
        }
        Schemas(&*self.env.lock).store_schema(name, &schema)?;
        let def = TableDef {
            id: t.id,
            name: name.to_string(),
            schema,
        };
        self.write_def(&def)?;
        self.env.catalog.put(&def);
        self.tell_servers(&def);
        Ok(())
    }

    /// Gives every live server (this daemon's share the catalog; others'
    /// do not) a table's new definition before the change is acknowledged,
    /// so that a write through any mount is served with the schema it was
    /// checked against. One that cannot be told learns it from METADATA
    /// within a second or when it loads a tablet of the table.
    pub(super) fn tell_servers(&self, def: &TableDef) {
        for s in self.env.servers() {
            if let Err(e) = s.learn_table(def) {
                log::warn!(
                    "{}: could not tell {} of table {}: {e}",
                    self.name,
                    s.name(),
                    def.name
                );
            }
        }
    }

    /// Moves the tablet holding `row` of `table` to server `to`.
    pub fn move_tablet(&self, table: &str, row: &[u8], to: &str) -> Result<()> {
        let _ops = self.ops.lock();
        let t = self.env.catalog.get(table)?;
        let loc = self.client.locate(t.id, row)?;
        if self.env.server(to).is_none() {
            return Err(Error::invalid(format!("no live tablet server {to}")));
        }
        let r = self.move_one(loc.tablet, &loc.server, to);
        if r.as_ref().is_err_and(crate::client::is_not_serving) {
            // The cached location was stale (this tablet moved or split
            // since): the caller's retry must look it up again.
            self.client.invalidate(&loc);
        }
        r
    }

    /// Unloads a tablet from `from` (a minor compaction first, so the move is
    /// fast) and loads it on `to`.
    pub(super) fn move_one(&self, id: u64, from: &str, to: &str) -> Result<()> {
        if from == to {
            return Ok(());
        }
        let src = self
            .env
            .server(from)
            .ok_or_else(|| Error::invalid(format!("no live tablet server {from}")))?;
        let dst = self
            .env
            .server(to)
            .ok_or_else(|| Error::invalid(format!("no live tablet server {to}")))?;
        // A destination that does not answer (or cannot prove it belongs
        // to the cluster) is found out before the tablet leaves its server.
        dst.tablet_ids()?;
        // Taken before the unload: a master that loses its lock meanwhile
        // leaves the unloaded tablet to the next one, which assigns it (the
        // servers refuse a load under a lock no longer held).
        let master = self.sequencer()?;
        let _held = self.hold(&[id]);
        let meta = src.unload(id)?;
        self.env.hooks.move_after_unload.pass();
        if let Err(e) = dst.load(meta.clone(), &master) {
            // Put it back rather than leave it unserved.
            log::warn!("{}: moving tablet {id} to {to} failed: {e}", self.name);
            src.load(meta, &master)?;
            return Err(e);
        }
        self.counters.moves.fetch_add(1, Ordering::Relaxed);
        self.note(format!("moved tablet {id} from {from} to {to}"));
        Ok(())
    }

    /// Merges adjacent tablets `a` (left) and `b`: both are unloaded, the
    /// right one's row widened to cover both, then the left row deleted (a
    /// crash between leaves overlapping rows, read back as "not merged").
    pub(super) fn merge(&self, a: u64, sa: &str, b: u64, sb: &str) -> Result<()> {
        let (Some(src_a), Some(src_b)) = (self.env.server(sa), self.env.server(sb)) else {
            return Ok(());
        };
        let mut held = self.hold(&[a, b]);
        let ma = src_a.unload(a)?;
        let mb = match src_b.unload(b) {
            Ok(m) => m,
            Err(e) => {
                src_a.load(ma, &self.sequencer()?)?;
                return Err(e);
            }
        };
        let mut files = ma.files.clone();
        for f in &mb.files {
            if !files.iter().any(|x| x.number == f.number) {
                files.push(f.clone());
            }
        }
        let merged = TabletMeta {
            id: self.env.numbers.next_id()?,
            table: ma.table,
            start: ma.start.clone(),
            end: mb.end.clone(),
            files,
            redo: None,
        };
        held.add(merged.id);
        self.write_tablet_row(&merged, "")?;
        self.delete_row(&tablet_row_key(ma.table, ma.end.as_deref()))?;
        self.client.forget_table(ma.table);
        self.counters.merges.fetch_add(1, Ordering::Relaxed);
        self.note(format!("merged tablets {a} and {b} into {}", merged.id));
        self.assign(merged, &self.live())?;
        Ok(())
    }
}
