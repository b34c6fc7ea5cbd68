//! Loading and unloading tablets (paper §5.2–§5.4).
//!
//! To load a tablet the server opens the SSTables its METADATA row lists,
//! and if the row names a redo point in another server's commit log, reads
//! that tablet's entries above the redo point from the log's sorted runs.
//! Those entries are written out as SSTables at once, so the tablet's new
//! row points only at this server's log. Unloading does a minor compaction
//! first, so the next server has no log to read (a fast move).

use super::background::{flush_imm, record_as, write_memtable};
use super::commit::{freeze, raise_floor};
use super::{Served, TabletServer};
use crate::client::read_table_defs;
use crate::compaction::open_sst;
use crate::memtable::Memtable;
use crate::metadata::{TableDef, TabletMeta, METADATA_ID};
use crate::protocol::{Sequencer, TabletAssignment};
use crate::recovery;
use crate::tablet::{next_files_version, Tablet, TabletVersion};
use crate::{key, Error, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Raises the daemon's clock to the newest timestamp among `newest` (of
/// the tablet's files and redone entries) that a server may have
/// assigned, before the tablet takes writes: its last server's clock may
/// have run ahead of this one's. Split halves need nothing more: they
/// stay on their server (one clock), and their inherited memtables
/// reach a next server as files or as redone log entries, both counted.
fn raise_clock(server: &TabletServer, tablet: u64, mut newest: Vec<u64>) {
    newest.sort_unstable_by(|a, b| b.cmp(a));
    let mut beyond = None;
    for ts in newest {
        match server.env.raise_clock(ts) {
            None => {
                beyond.get_or_insert(ts);
            }
            Some(jump) => {
                if jump > 0 {
                    let c = &server.counters;
                    c.clock_raised.fetch_add(1, Ordering::Relaxed);
                    c.clock_raise_max_us.fetch_max(jump, Ordering::Relaxed);
                    log::info!(
                        "{}: tablet {tablet} holds cells stamped up to {jump} us ahead of \
                         this clock; raised it",
                        server.name
                    );
                }
                break;
            }
        }
    }
    if let Some(ts) = beyond {
        log::info!(
            "{}: tablet {tablet} holds a cell stamped {ts}, more than {} s ahead of this \
             clock: a timestamp a user chose, so the clock is not raised to it",
            server.name,
            crate::env::Env::MAX_CLOCK_SKEW_MICROS / 1_000_000
        );
    }
}

impl TabletAssignment for TabletServer {
    /// Starts serving the tablet `meta` describes, for the master holding
    /// `master`. The sequencer is checked before anything is done and again
    /// just before the row names this server: a load that outlasts its
    /// master (a long log redo) is dropped, as the next master assigns the
    /// tablet anew. Between the last check and the record the lock
    /// service's lock-delay keeps a next master from assigning.
    fn load(&self, meta: TabletMeta, master: &Sequencer) -> Result<()> {
        self.live()?;
        let deposed = || {
            Error::Lock(format!(
                "tablet {}: the master that assigned it no longer holds its lock",
                meta.id
            ))
        };
        if !self.env.lock.check_sequencer(master) {
            return Err(deposed());
        }
        if self.tablets.contains(meta.id) {
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
        let mut newest: Vec<u64> = files.iter().filter_map(|f| f.newest_cell()).collect();
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
        let served = Arc::new(Served::new(tablet.clone(), table));
        let mut event = "began serving".to_string();
        // Recovered SSTables stay in flight until METADATA lists them.
        let mut fresh: Vec<u64> = Vec::new();
        if let Some(redo) = meta.redo.as_ref().filter(|r| r.log != self.log_dir) {
            let mem = Arc::new(Memtable::new());
            let mut max = 0;
            let mut newest_redone = None;
            let activity = format!("load{}", meta.id);
            let doing = format!("recovery tablet={} log={}", meta.id, redo.log);
            self.activity.set(&activity, Some(doing.clone()));
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
                        if p.kind == key::Kind::Put {
                            newest_redone = newest_redone.max(Some(p.timestamp));
                        }
                    }
                    mem.insert(&k, &v);
                    redone += 1;
                    // How far along, for the status files and page.
                    if redone.is_multiple_of(16 << 10) {
                        self.activity
                            .set(&activity, Some(format!("{doing} entries_redone={redone}")));
                    }
                },
            );
            self.activity.set(&format!("load{}", meta.id), None);
            let read = read?;
            let n = mem.len() as u64;
            self.counters
                .recovery_bytes
                .fetch_add(read, Ordering::Relaxed);
            self.counters
                .recovered_entries
                .fetch_add(n, Ordering::Relaxed);
            floor = floor.max(max);
            newest.extend(newest_redone);
            if n > 0 {
                let outputs = write_memtable(self, &served, &mem)?;
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
        raise_clock(self, meta.id, newest);
        raise_floor(self, floor)?;
        tablet.flushed_seq.store(floor, Ordering::Release);
        self.env.hooks.load_before_record.pass();
        // Files the redo wrote and nothing lists are the collector's.
        let recorded = if self.env.lock.check_sequencer(master) {
            record_as(
                self,
                &served.meta(&self.log_dir),
                Some(&event),
                true,
                &self.quick,
            )
        } else {
            Err(deposed())
        };
        self.env.numbers.release(fresh);
        recorded?;
        self.tablets.insert(served);
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
    fn unload(&self, id: u64) -> Result<TabletMeta> {
        let s = self.served(id)?;
        let t = &s.tablet;
        let _claim = t.claim();
        let _gate = s.close();
        if t.retired.load(Ordering::Acquire) {
            return Err(self.not_serving(id));
        }
        freeze(self, t);
        while !t.version().imm.is_empty() {
            flush_imm(self, &s)?;
        }
        let mut meta = s.meta(&self.log_dir);
        meta.redo = None;
        t.retired.store(true, Ordering::Release);
        let recorded = if t.table_id == METADATA_ID && t.start.is_empty() {
            self.env.root.save(&meta)
        } else {
            record_as(
                self,
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
        self.tablets.remove(id);
        self.counters.unloads.fetch_add(1, Ordering::Relaxed);
        Ok(meta)
    }

    /// Stops serving tablet `id` at once, without a compaction (its table
    /// was dropped).
    fn drop_tablet(&self, id: u64) -> Result<()> {
        if let Some(s) = self.tablets.remove(id) {
            let _gate = s.close();
            s.tablet.retired.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn learn_table(&self, def: &TableDef) -> Result<()> {
        self.env.catalog.put(def);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::sst_name;
    use crate::metadata::SstMeta;
    use crate::sstable::{BlockCache, TableBuilder, TableOptions, TimeRange};
    use crate::tablet::Sst;
    use gfs::FileStore;

    /// A file `number` with one cell stamped `ts`, opened as a tablet's
    /// file whose METADATA entry records `recorded`.
    fn file(
        store: &Arc<dyn FileStore>,
        number: u64,
        ts: u64,
        old_format: bool,
        recorded: Option<TimeRange>,
    ) -> Arc<Sst> {
        let out = store.create(&sst_name(number)).unwrap();
        let mut b = if old_format {
            TableBuilder::without_timestamps(out, TableOptions::default())
        } else {
            TableBuilder::new(out, TableOptions::default())
        };
        b.add(&key::encode(b"r", b"f", b"q", ts, 1, key::Kind::Put), b"v")
            .unwrap();
        b.finish().unwrap();
        let meta = SstMeta {
            number,
            timestamps: recorded,
            ..SstMeta::default()
        };
        let cache = Arc::new(BlockCache::new(1 << 20));
        open_sst(store, &cache, meta, false).unwrap()
    }

    #[test]
    fn a_files_newest_cell_comes_from_metadata_else_from_its_properties() {
        let store: Arc<dyn FileStore> = Arc::new(gfs::MemStore::new());
        let recorded = Some(TimeRange { min: 1, max: 50 });
        assert_eq!(file(&store, 1, 40, false, recorded).newest_cell(), Some(50));
        // A METADATA row written before rows recorded timestamps.
        assert_eq!(file(&store, 2, 40, false, None).newest_cell(), Some(40));
        // ... naming a file written before files recorded them: no bound.
        assert_eq!(file(&store, 3, 40, true, None).newest_cell(), None);
    }
}
