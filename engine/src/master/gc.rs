//! Garbage collection (paper §5.3): mark every SSTable and commit log that
//! METADATA (or the root tablet's descriptor) or a snapshot's manifest
//! still refers to, then sweep the rest. Files being written are protected by the in-flight set, read
//! before METADATA so that a file recorded in between is seen in one of the
//! two.

use super::Master;
use crate::client::{parse_meta_row, Scanner};
use crate::compaction::sst_number;
use crate::metadata::{FAMILY_LOCATION, FAMILY_TABLET, METADATA_ID};
use crate::recovery;
use crate::scan::ScanSpec;
use crate::tablet_server::log_dir;
use crate::Result;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Unused files deleted between two looks at whether the master stops.
const SWEEP_BATCH: usize = 256;

impl Master {
    /// One collection now, between the main loop's rounds.
    pub(crate) fn collect_now(&self) -> Result<()> {
        let _admin = self.admin.lock();
        self.collect()
    }

    pub(super) fn collect(&self) -> Result<()> {
        let store = &self.env.store;
        let names = store.list("sst/")?;
        let mut in_flight = self.env.numbers.in_flight();
        let mut live: HashSet<u64> = HashSet::new();
        let mut logs: HashSet<String> = HashSet::new();
        // The root tablet's files are those its server has open (read from
        // memory: re-reading `meta/root` would be client I/O that keeps the
        // chunk layer's scrub away); while it is unserved, collect nothing.
        // What every server has open or is writing, asked before METADATA
        // is read so that a file a compaction installs meanwhile is in one
        // or the other. A server that cannot answer stops the collection.
        let mut served = Vec::new();
        for s in self.env.servers() {
            served.push((s.name().to_string(), s.served()?));
            in_flight.extend(s.files_in_flight()?);
        }
        let root_served = served.iter().any(|(_, tablets)| {
            tablets
                .iter()
                .any(|t| t.table_id == METADATA_ID && t.start.is_empty())
        });
        if !root_served {
            return Ok(());
        }
        let spec = ScanSpec {
            families: Some(vec![FAMILY_TABLET.into(), FAMILY_LOCATION.into()]),
            ..ScanSpec::default()
        };
        let mut scan = Scanner::new(self.client.clone(), METADATA_ID, spec);
        while let Some((row, cells)) = scan.next_row()? {
            if let Some(r) = parse_meta_row(&row, &cells)? {
                live.extend(r.meta.files.iter().map(|f| f.number));
                logs.extend(r.meta.redo.iter().map(|r| r.log.clone()));
            }
        }
        // Files open in any server (a load in progress) stay too.
        for (name, tablets) in &served {
            logs.insert(log_dir(name));
            for t in tablets {
                live.extend(t.files.iter().copied());
            }
        }
        // A snapshot pins its cut's files until its manifest names them:
        // pins are asked after METADATA, manifests after pins, so a file
        // leaving METADATA meanwhile is in one of the three.
        for s in self.env.servers() {
            in_flight.extend(s.files_in_flight()?);
        }
        live.extend(crate::snapshot::live_files(&**store)?);
        let unused: Vec<String> = names
            .into_iter()
            .filter(|name| {
                !sst_number(name).is_some_and(|n| live.contains(&n) || in_flight.contains(&n))
            })
            .collect();
        // In batches, so that a master told to stop does not first sweep a
        // backlog of thousands of files.
        for batch in unused.chunks(SWEEP_BATCH) {
            if self.is_stopped() {
                return Ok(());
            }
            for (name, result) in batch.iter().zip(store.delete_unused(batch)) {
                match result {
                    Ok(()) | Err(gfs::Error::NotFound(_)) => {
                        // Its cached blocks may hold the file mapped, and
                        // with it the disk space it took.
                        if let Some(n) = sst_number(name) {
                            self.env.block_cache.evict_file(n);
                        }
                        self.counters
                            .files_collected
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => log::warn!("could not delete unused {name}: {e}"),
                }
            }
        }
        let mut dirs: HashSet<String> = HashSet::new();
        for name in store.list("logs/")? {
            let mut parts = name.splitn(3, '/');
            if let (Some(_), Some(server), Some(_)) = (parts.next(), parts.next(), parts.next()) {
                dirs.insert(log_dir(server));
            }
        }
        // A server that registered since the servers were asked (in this or
        // another daemon) may have started its log meanwhile: it stays.
        for name in crate::coordination::list_servers(&*self.env.lock)? {
            logs.insert(log_dir(&name));
        }
        for dir in dirs {
            if !logs.contains(&dir) {
                // A server frozen past its lease may wake and append:
                // sealed first, its appends fail instead of vanishing.
                store.seal_logs(&dir)?;
                recovery::remove(&**store, &dir)?;
                self.counters.logs_collected.fetch_add(1, Ordering::Relaxed);
                self.note(format!("collected the log {dir}"));
            }
        }
        Ok(())
    }
}
