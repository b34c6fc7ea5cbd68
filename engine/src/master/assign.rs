//! Keeping every tablet assigned (paper §5.2): root first, then METADATA's
//! tablets, then every user table's, each to the least loaded live server.
//! A tablet whose redo point is in a dead server's log is assigned only
//! after that log has been sorted.

use super::Master;
use crate::client::{read_table_defs, MetaRow, Scanner};
use crate::coordination::{root_location, set_root_location, Schemas};
use crate::data::{Mutation, RowRange};
use crate::metadata::{
    effective_tablets, root_end, table_def_key, tablet_row_cells, tablet_row_key, TableDef,
    TabletMeta, FAMILY_LOCATION, FAMILY_TABLET, METADATA_ID, METADATA_NAME,
};
use crate::recovery;
use crate::scan::ScanSpec;
use crate::tablet_server::log_dir;
use crate::{Error, Result};
use std::ops::Bound;
use std::sync::atomic::Ordering;

impl Master {
    /// Assigns every unassigned tablet; loads the catalog of tables.
    pub(super) fn reconcile(&self) -> Result<()> {
        let live = self.live();
        if live.is_empty() {
            return Ok(());
        }
        let seq = self.sequencer()?;
        let root_server = root_location(&*self.env.lock)?;
        if !live.contains(&root_server) {
            let meta = self.env.root.load()?;
            let target = self.assign(meta, &live)?;
            set_root_location(&*self.env.lock, &seq, &target)?;
        }
        if !self.catalog_loaded.load(Ordering::Acquire) {
            let _ops = self.ops.lock();
            let defs = self.load_defs()?;
            self.env.catalog.replace_all(defs);
            self.catalog_loaded.store(true, Ordering::Release);
        }
        let mut pending = self.reconcile_table(METADATA_ID, &live)?;
        for name in self.env.catalog.names() {
            if let Ok(t) = self.env.catalog.get(&name) {
                pending += self.reconcile_table(t.id, &live)?;
            }
        }
        self.state.lock().pending = pending;
        if pending == 0 && !self.ready.swap(true, Ordering::AcqRel) {
            self.note("every tablet is assigned".into());
        }
        Ok(())
    }

    /// The tables METADATA defines; the lock service's schema wins where it
    /// has one.
    fn load_defs(&self) -> Result<Vec<TableDef>> {
        let mut defs = Vec::new();
        for read in read_table_defs(&self.client, &*self.env.lock)? {
            let def = read.def;
            if read.stale_in_metadata {
                log::info!("table {}: schema taken from the lock service", def.name);
                self.write_def(&def)?;
            }
            if read.missing_in_lock {
                Schemas(&*self.env.lock).store_schema(&def.name, &def.schema)?;
            }
            self.env.numbers.bump(def.id);
            defs.push(def);
        }
        Ok(defs)
    }

    pub(super) fn write_def(&self, def: &TableDef) -> Result<()> {
        let seq = self.sequencer()?;
        self.client
            .write_metadata(&table_def_key(&def.name), vec![def.mutation()], Some(&seq))
    }

    /// The METADATA rows of `table`'s tablets, in row order.
    pub(super) fn table_rows(&self, table: u64) -> Result<Vec<MetaRow>> {
        self.meta_rows(RowRange {
            start: Bound::Included(tablet_row_key(table, Some(b""))),
            end: Bound::Included(tablet_row_key(table, None)),
        })
    }

    /// The METADATA row of the tablet of `table` ending at `end`, as it is now.
    fn tablet_row(&self, table: u64, end: Option<&[u8]>) -> Result<Option<MetaRow>> {
        let key = tablet_row_key(table, end);
        Ok(self
            .meta_rows(RowRange {
                start: Bound::Included(key.clone()),
                end: Bound::Included(key),
            })?
            .pop())
    }

    /// The tablet rows of METADATA in `rows`, in row order.
    fn meta_rows(&self, rows: RowRange) -> Result<Vec<MetaRow>> {
        let spec = ScanSpec {
            rows,
            families: Some(vec![FAMILY_TABLET.into(), FAMILY_LOCATION.into()]),
            ..ScanSpec::default()
        };
        let mut scan = Scanner::new(self.client.clone(), METADATA_ID, spec);
        let mut out = Vec::new();
        while let Some((row, cells)) = scan.next_row()? {
            if let Some(r) = crate::client::parse_meta_row(&row, &cells)? {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Writes a tablet's row; `server` is its location ("" = unassigned).
    pub(super) fn write_tablet_row(&self, meta: &TabletMeta, server: &str) -> Result<()> {
        let seq = self.sequencer()?;
        let key = tablet_row_key(meta.table, meta.end.as_deref());
        let mutations = tablet_row_cells(meta, server.as_bytes());
        self.client.write_metadata(&key, mutations, Some(&seq))
    }

    pub(super) fn delete_row(&self, key: &[u8]) -> Result<()> {
        let seq = self.sequencer()?;
        self.client
            .write_metadata(key, vec![Mutation::DeleteRow], Some(&seq))
    }

    /// A new, empty first tablet for `table`.
    pub(super) fn first_tablet(&self, table: u64) -> Result<TabletMeta> {
        Ok(TabletMeta {
            id: self.env.numbers.next_id()?,
            table,
            start: if table == METADATA_ID {
                root_end()
            } else {
                Vec::new()
            },
            end: None,
            files: Vec::new(),
            redo: None,
        })
    }

    /// Assigns `table`'s unassigned tablets; returns how many are still
    /// waiting (their load failed).
    fn reconcile_table(&self, table: u64, live: &[String]) -> Result<usize> {
        let mut rows = self.table_rows(table)?;
        if rows.is_empty() {
            // A create may be writing this table's first tablet right now:
            // then try again next round rather than make a second one.
            let Some(first) = self.first_tablets.try_lock() else {
                return Ok(1);
            };
            rows = self.table_rows(table)?;
            if rows.is_empty() {
                let meta = self.first_tablet(table)?;
                self.write_tablet_row(&meta, "")?;
                rows.push(MetaRow {
                    key: tablet_row_key(table, None),
                    meta,
                    server: String::new(),
                });
            }
            drop(first);
        }
        let mut servers = std::collections::HashMap::new();
        for r in &rows {
            self.env.numbers.bump(r.meta.id);
            for f in &r.meta.files {
                self.env.numbers.bump(f.number);
            }
            servers.insert(r.meta.id, r.server.clone());
        }
        let first = if table == METADATA_ID {
            root_end()
        } else {
            Vec::new()
        };
        let (tablets, fixed) =
            effective_tablets(rows.into_iter().map(|r| r.meta).collect(), &first);
        for f in &fixed {
            let server = servers.get(&f.id).cloned().unwrap_or_default();
            if live.contains(&server) || self.is_held(f.id) {
                // A live server may be in the middle of this split (or a
                // merge of ours): it finishes it itself.
                continue;
            }
            // Read again under a hold, as for an assignment below: a merge
            // of ours that ended since the rows were read leaves nothing
            // to repair, and rewriting the old read would undo it.
            let Some(_held) = self.try_hold(f.id) else {
                continue;
            };
            let now = self.table_rows(table)?;
            let unserved = now
                .iter()
                .any(|r| r.meta.id == f.id && !live.contains(&r.server));
            let (_, still) = effective_tablets(now.into_iter().map(|r| r.meta).collect(), &first);
            if !unserved || !still.contains(f) {
                continue;
            }
            self.note(format!(
                "repaired the METADATA row of tablet {} (an interrupted split or merge)",
                f.id
            ));
            self.write_tablet_row(f, &server)?;
        }
        if table != METADATA_ID {
            self.env.hooks.assign_after_read.pass();
        }
        let mut pending = 0;
        for t in tablets {
            let server = servers.get(&t.id).cloned().unwrap_or_default();
            if live.contains(&server) || self.is_held(t.id) {
                continue;
            }
            // The rows were read a while ago: a move or merge may have
            // begun and ended since (a move's tablet reads as unassigned
            // between its unload and its load). Held from here, the row
            // read again is the tablet as it is; assigning the old read
            // would have a second server serve it beside the one it moved
            // to, and writes to either would be lost to the other.
            let Some(_held) = self.try_hold(t.id) else {
                continue;
            };
            let t = match self.tablet_row(t.table, t.end.as_deref())? {
                Some(now) if now.meta.id == t.id && !live.contains(&now.server) => now.meta,
                // Assigned meanwhile, or merged or split away: the next
                // round reads it afresh.
                _ => continue,
            };
            let id = t.id;
            if let Err(e) = self.assign(t, live) {
                if matches!(e.root(), Error::Corruption(_) | Error::Fs(_)) {
                    // Damage in the store: retrying will not help.
                    return Err(Error::Corruption(format!(
                        "tablet {id} of table {table} cannot be loaded: {e}"
                    )));
                }
                log::warn!(
                    "{}: tablet {id} of table {table} not assigned yet: {e}",
                    self.name
                );
                pending += 1;
            }
        }
        Ok(pending)
    }

    /// Loads `meta` on the least loaded live server; returns its name.
    pub(super) fn assign(&self, meta: TabletMeta, live: &[String]) -> Result<String> {
        if let Some(redo) = &meta.redo {
            if !live.iter().any(|s| log_dir(s) == redo.log) {
                self.sort_log(&redo.log)?;
            }
        }
        let target = live
            .iter()
            .filter_map(|n| self.env.server(n))
            .min_by_key(|s| {
                // One that cannot answer is last choice.
                let n = s.tablet_ids().map_or(usize::MAX, |t| t.len());
                (n, s.name().to_string())
            })
            .ok_or_else(|| Error::Unavailable("no live tablet server".into()))?;
        let id = meta.id;
        let table = meta.table;
        // Only the master holding the lock assigns (a deposed one's round
        // or move may still be under way): the server checks.
        target.load(meta, &self.sequencer()?)?;
        self.counters.assignments.fetch_add(1, Ordering::Relaxed);
        let table_name = if table == METADATA_ID {
            METADATA_NAME.to_string()
        } else {
            self.env
                .catalog
                .by_id(table)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        };
        self.note(format!(
            "assigned tablet {id} of {table_name} to {}",
            target.name()
        ));
        Ok(target.name().to_string())
    }

    /// Sorts a dead server's log so its tablets can be recovered.
    fn sort_log(&self, log: &str) -> Result<()> {
        let started = std::time::Instant::now();
        let r = recovery::sort_log(&self.env.store, log, 2)?;
        if r.log_bytes > 0 {
            self.counters.logs_sorted.fetch_add(1, Ordering::Relaxed);
            self.note(format!(
                "sorted {log}: {} bytes, {} entries into {} runs in {} ms",
                r.log_bytes,
                r.entries,
                r.runs.len(),
                started.elapsed().as_millis()
            ));
        }
        Ok(())
    }
}
