//! Loading and unloading tablets (paper §5.2–§5.4).
//!
//! To load a tablet the server opens the SSTables its METADATA row lists,
//! and if the row names a redo point in another server's commit log, reads
//! that tablet's entries above the redo point from the log's sorted runs.
//! Those entries are written out as SSTables at once, so the tablet's new
//! row points only at this server's log. Unloading does a minor compaction
//! first, so the next server has no log to read (a fast move).

use super::{Served, TabletServer};
use crate::client::read_table_defs;
use crate::compaction::open_sst;
use crate::memtable::Memtable;
use crate::metadata::{TabletMeta, METADATA_ID};
use crate::recovery;
use crate::tablet::{next_files_version, Tablet, TabletVersion};
use crate::{key, Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl TabletServer {
    /// Starts serving the tablet `meta` describes.
    pub fn load(&self, meta: TabletMeta) -> Result<()> {
        self.live()?;
        if self.tablets.contains_key(&meta.id) {
            return Ok(());
        }
        let table = match self.env.catalog.by_id(meta.table) {
            Some(t) => t,
            // A table another daemon's master just made: read the tables
            // from METADATA (a daemon sharing the store learns them so).
            None => {
                for read in read_table_defs(&self.client, &*self.env.lock)? {
                    if self.env.catalog.by_id(read.def.id).is_none() {
                        self.env.catalog.put(&read.def);
                    }
                }
                self.env
                    .catalog
                    .by_id(meta.table)
                    .ok_or_else(|| Error::TableNotFound(format!("table id {}", meta.table)))?
            }
        };
        let schema = table.schema();
        let groups = schema.locality_groups();
        let mut files = Vec::new();
        for f in &meta.files {
            let in_memory = groups.iter().any(|g| g.name == f.group && g.in_memory);
            files.push(open_sst(
                &self.env.store,
                &self.env.block_cache,
                f.clone(),
                in_memory,
            )?);
        }
        files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
        let mut floor = meta.max_seq();
        let tablet = Arc::new(Tablet::new(
            meta.id,
            meta.table,
            meta.start.clone(),
            meta.end.clone(),
            0,
            TabletVersion {
                files_version: next_files_version(),
                mem: Arc::new(Memtable::new()),
                imm: Vec::new(),
                files,
            },
        ));
        let served = Arc::new(Served {
            tablet: tablet.clone(),
            table,
            gate: Default::default(),
            requests: Default::default(),
        });
        let mut event = "began serving".to_string();
        // Recovered SSTables stay in flight until METADATA lists them.
        let mut fresh: Vec<u64> = Vec::new();
        if let Some(redo) = meta.redo.as_ref().filter(|r| r.log != self.log_dir) {
            let mem = Arc::new(Memtable::new());
            let mut max = 0;
            let activity = format!("load{}", meta.id);
            let doing = format!("recovery tablet={} log={}", meta.id, redo.log);
            self.set_activity(&activity, Some(doing.clone()));
            let mut redone = 0u64;
            let read = recovery::read_tablet(
                &self.env.store,
                &redo.log,
                meta.table,
                &meta.start,
                meta.end.as_deref(),
                redo.seq,
                |k, v| {
                    if let Some(p) = key::split(&k) {
                        max = max.max(p.seq);
                    }
                    mem.insert(&k, &v);
                    redone += 1;
                    // How far along, for the status files and page.
                    if redone.is_multiple_of(16 << 10) {
                        self.set_activity(
                            &activity,
                            Some(format!("{doing} entries_redone={redone}")),
                        );
                    }
                },
            );
            self.set_activity(&format!("load{}", meta.id), None);
            let read = read?;
            let n = mem.len() as u64;
            self.counters
                .recovery_bytes
                .fetch_add(read, Ordering::Relaxed);
            self.counters
                .recovered_entries
                .fetch_add(n, Ordering::Relaxed);
            floor = floor.max(max);
            if n > 0 {
                let outputs = self.write_memtable(&served, &mem)?;
                fresh.extend(outputs.iter().map(|o| o.meta.number));
                tablet.update(|cur| {
                    let mut files: Vec<_> = cur.files.iter().cloned().chain(outputs).collect();
                    files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
                    TabletVersion {
                        files_version: next_files_version(),
                        mem: cur.mem.clone(),
                        imm: Vec::new(),
                        files,
                    }
                });
            }
            event = format!(
                "began serving, recovered {n} entries ({read} bytes) from {}",
                redo.log
            );
        }
        self.raise_floor(floor)?;
        tablet.flushed_seq.store(floor, Ordering::Release);
        let recorded = self.record_as(&served.meta(&self.log_dir), Some(&event), true, &self.quick);
        self.env.numbers.release(fresh);
        recorded?;
        self.tablets.insert(meta.id, served);
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        log::info!(
            "{}: serving tablet {} of table {}",
            self.name,
            meta.id,
            meta.table
        );
        Ok(())
    }

    /// Stops serving tablet `id` after writing its memtables out; returns
    /// its final descriptor (no redo point: nothing is left in the log).
    pub fn unload(&self, id: u64) -> Result<TabletMeta> {
        let s = self.served(id)?;
        let t = &s.tablet;
        let _claim = t.claim();
        let _gate = s.gate.write();
        if t.retired.load(Ordering::Acquire) {
            return Err(self.not_serving(id));
        }
        self.freeze(t);
        while !t.version().imm.is_empty() {
            self.flush_imm(&s)?;
        }
        let mut meta = s.meta(&self.log_dir);
        meta.redo = None;
        t.retired.store(true, Ordering::Release);
        let recorded = if t.table_id == METADATA_ID && t.start.is_empty() {
            self.env.root.save(&meta)
        } else {
            self.record_as(
                &meta,
                Some("stopped serving (unloaded)"),
                false,
                &self.quick,
            )
        };
        if let Err(e) = recorded {
            // METADATA still names this server: keep serving.
            t.retired.store(false, Ordering::Release);
            return Err(e);
        }
        self.tablets.remove(&id);
        self.counters.unloads.fetch_add(1, Ordering::Relaxed);
        Ok(meta)
    }

    /// Stops serving tablet `id` at once, without a compaction (its table
    /// was dropped).
    pub fn drop_tablet(&self, id: u64) {
        if let Some(s) = self.tablets.remove(&id) {
            let _gate = s.gate.write();
            s.tablet.retired.store(true, Ordering::Release);
        }
    }
}
