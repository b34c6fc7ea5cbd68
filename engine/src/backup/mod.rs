//! Backups (docs/backups.md): a snapshot copied out of the table's store
//! into another one (another bucket or prefix, another directory or chunk
//! layer), so that a table outlives the loss of its store, and copied back
//! into a new table. Copies are incremental: an SSTable never changes, so
//! a file that an earlier backup put in the store is not copied again.
//!
//! - `record.rs`: a backup's record and its bytes (docs/formats/backup.md)
//! - `target.rs`: a backup store's layout; publishing and deleting records
//! - `copy.rs`: copying one file between stores, checking its hash
//! - `progress.rs`: copies under way, and how far each got

mod copy;
mod progress;
mod record;
mod target;

pub use progress::{Job, JobKind, JobState};
pub use record::{BackupFile, Record};

use crate::snapshot::{publish_manifest, read_manifest, validate_snapshot_name, Manifest};
use crate::{Bigtable, Error, Result};
use gfs::FileStore;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A backup store this handle may copy to, by the name the mount gave it.
struct Target {
    store: Arc<dyn FileStore>,
    /// Held while a record is published or deleted, so that a deletion
    /// never takes a copy that a backup being published counted on.
    publish: Mutex<()>,
}

/// The backup stores and the copies of one handle.
#[derive(Default)]
pub(crate) struct Backups {
    targets: RwLock<BTreeMap<String, Arc<Target>>>,
    jobs: progress::Jobs,
}

/// Where a backup is copied from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A snapshot in the table's own store.
    Snapshot,
    /// A backup in the backup store of that name.
    Store(&'a str),
}

impl Bigtable {
    fn target(&self, name: &str) -> Result<Arc<Target>> {
        self.backups()
            .targets
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| {
                Error::invalid(format!(
                    "no backup store {name:?} (the mount's backup_store= option names them)"
                ))
            })
    }

    /// Adds backup store `name` (mount option `backup_store=NAME=URL`).
    pub fn add_backup_store(&self, name: &str, store: Arc<dyn FileStore>) -> Result<()> {
        validate_snapshot_name(name)?;
        self.backups().targets.write().insert(
            name.to_string(),
            Arc::new(Target {
                store,
                publish: Mutex::new(()),
            }),
        );
        Ok(())
    }

    /// The backup stores' names.
    pub fn backup_stores(&self) -> Vec<String> {
        self.backups().targets.read().keys().cloned().collect()
    }

    /// Copies under way and lately finished, oldest first.
    pub fn backup_jobs(&self) -> Vec<Arc<Job>> {
        self.backups().jobs.all()
    }

    /// Every backup in backup store `store`.
    pub fn list_backups(&self, store: &str) -> Result<Vec<Record>> {
        target::records(&*self.target(store)?.store)
    }

    /// Backup `name` of `table` in backup store `store`.
    pub fn backup_record(&self, store: &str, table: &str, name: &str) -> Result<Record> {
        target::read(&*self.target(store)?.store, table, name)
    }

    /// Deletes backup `name` of `table` from backup store `store`, and the
    /// copies no other backup there names.
    pub fn delete_backup(&self, store: &str, table: &str, name: &str) -> Result<()> {
        let t = self.target(store)?;
        let _publish = t.publish.lock();
        target::delete(&*t.store, table, name)
    }

    /// Copies snapshot `name` of `table` (from the table's store, or from
    /// another backup store) into backup store `to`, as backup `name` of
    /// `table`. Files that store holds already are not copied again. The
    /// backup is listed only once every file is there; a copy cut short
    /// leaves files that a later backup of the same snapshot reuses.
    pub fn copy_backup(&self, from: Source, table: &str, name: &str, to: &str) -> Result<Record> {
        self.copy_backup_named(from, table, name, to, name, None)
    }

    /// [`Bigtable::copy_backup`], naming the copy `as_name` and, if given,
    /// setting its expiry (µs since the epoch; for gRPC's CopyBackup).
    pub fn copy_backup_named(
        &self,
        from: Source,
        table: &str,
        name: &str,
        to: &str,
        as_name: &str,
        expire_micros: Option<u64>,
    ) -> Result<Record> {
        validate_snapshot_name(as_name)?;
        let job = self.backups().jobs.start(
            match from {
                Source::Snapshot => JobKind::Backup,
                Source::Store(_) => JobKind::Copy,
            },
            to,
            table,
            as_name,
        );
        let r = self
            .copy_backup_as(from, table, name, to, &job)
            .and_then(|mut rec| {
                rec.manifest.name = as_name.to_string();
                rec.manifest.cluster = Some(to.to_string());
                if expire_micros.is_some() {
                    rec.manifest.expire_micros = expire_micros;
                }
                let dst = self.target(to)?;
                let _publish = dst.publish.lock();
                // A deletion may have taken a copy counted on since it was listed.
                for f in &rec.files {
                    if !dst.store.exists(&f.key)? {
                        return Err(Error::Unavailable(format!(
                            "{} was deleted while the backup ran: back up again",
                            f.key
                        )));
                    }
                }
                target::publish(&*dst.store, &rec)?;
                Ok(rec)
            });
        progress::finish(&job, &r);
        match &r {
            Ok(rec) => log::info!(
                "backup {table}/{name} to {to}: {} files, {} bytes ({} already there)",
                rec.files.len(),
                rec.bytes(),
                job.bytes_skipped.load(Ordering::Relaxed)
            ),
            Err(e) => log::warn!("backup {table}/{name} to {to} failed: {e}"),
        }
        r
    }

    fn copy_backup_as(
        &self,
        from: Source,
        table: &str,
        name: &str,
        to: &str,
        job: &Job,
    ) -> Result<Record> {
        crate::catalog::validate_table_name(table)?;
        let dst = self.target(to)?;
        let (src, manifest, known): (Arc<dyn FileStore>, Manifest, HashMap<u64, BackupFile>) =
            match from {
                Source::Snapshot => {
                    let src = self.snapshot_store()?.clone();
                    let m = read_manifest(&*src, table, name)?;
                    (src, m, HashMap::new())
                }
                Source::Store(s) => {
                    let src = self.target(s)?.store.clone();
                    let r = target::read(&*src, table, name)?;
                    let known = r.files.into_iter().map(|f| (f.number, f)).collect();
                    (src, r.manifest, known)
                }
            };
        if dst.store.exists(&target::path(table, &job.name))? {
            return Err(Error::SnapshotExists(format!(
                "backup {table}/{} in {to}",
                job.name
            )));
        }
        // What the store holds already, from its backups' records: a copy
        // that no record names may be a cut-short one, so it is copied again.
        let mut there: HashMap<String, u64> = HashMap::new();
        for r in target::records(&*dst.store)? {
            there.extend(r.files.into_iter().map(|f| (f.key, f.xxh3)));
        }
        let metas: BTreeMap<u64, crate::metadata::SstMeta> = manifest
            .tablets
            .iter()
            .flat_map(|t| t.meta.files.iter().map(|f| (f.number, f.clone())))
            .collect();
        job.files_total.store(metas.len() as u64, Ordering::Relaxed);
        job.bytes_total
            .store(metas.values().map(|f| f.size).sum(), Ordering::Relaxed);
        let mut files = Vec::with_capacity(metas.len());
        for (number, f) in &metas {
            let key = record::file_key(f);
            let xxh3 = match there.get(&key) {
                Some(&h) => {
                    job.bytes_skipped.fetch_add(f.size, Ordering::Relaxed);
                    job.bytes_done.fetch_add(f.size, Ordering::Relaxed);
                    h
                }
                None => {
                    let (from_name, want) = match from {
                        Source::Snapshot => (crate::compaction::sst_name(*number), None),
                        Source::Store(_) => {
                            let k = known.get(number).ok_or_else(|| {
                                Error::corruption(format!(
                                    "backup {table}/{name}: no copy of file {number}"
                                ))
                            })?;
                            (k.key.clone(), Some(k.xxh3))
                        }
                    };
                    copy::copy_file(&*src, &from_name, &*dst.store, &key, f.size, want, job)?
                }
            };
            job.files_done.fetch_add(1, Ordering::Relaxed);
            files.push(BackupFile {
                number: *number,
                key,
                size: f.size,
                xxh3,
            });
        }
        Ok(Record { manifest, files })
    }

    /// Starts [`Bigtable::copy_backup`] in the background once what can be
    /// checked at once holds (the stores, the source, the name free), for
    /// `.bigtable/control`: a copy of gigabytes would hold a FUSE thread
    /// (and the requests queued behind it) for minutes. How it goes is in
    /// [`Bigtable::backup_jobs`] (`.bigtable/backups`).
    pub fn start_copy_backup(&self, from: Source, table: &str, name: &str, to: &str) -> Result<()> {
        crate::catalog::validate_table_name(table)?;
        let dst = self.target(to)?;
        match from {
            Source::Snapshot => {
                read_manifest(&**self.snapshot_store()?, table, name).map(|_| ())?
            }
            Source::Store(s) => target::read(&*self.target(s)?.store, table, name).map(|_| ())?,
        }
        if dst.store.exists(&target::path(table, name))? {
            return Err(Error::SnapshotExists(format!(
                "backup {table}/{name} in {to}"
            )));
        }
        let (bt, table, name, to) = (
            self.clone(),
            table.to_string(),
            name.to_string(),
            to.to_string(),
        );
        let from = match from {
            Source::Snapshot => None,
            Source::Store(s) => Some(s.to_string()),
        };
        std::thread::Builder::new()
            .name("backup".into())
            .spawn(move || {
                let from = from.as_deref().map_or(Source::Snapshot, Source::Store);
                // The outcome is the job's (and the log's).
                let _ = bt.copy_backup(from, &table, &name, &to);
            })
            .map_err(|e| Error::Unavailable(format!("cannot start the copy: {e}")))?;
        Ok(())
    }

    /// Starts [`Bigtable::restore_backup`] in the background, as
    /// [`Bigtable::start_copy_backup`] does: the table appears once whole.
    pub fn start_restore_backup(
        &self,
        store: &str,
        table: &str,
        name: &str,
        to: &str,
    ) -> Result<()> {
        crate::catalog::validate_table_name(to)?;
        target::read(&*self.target(store)?.store, table, name)?;
        if self.table(to).is_ok() {
            return Err(Error::TableExists(to.to_string()));
        }
        let (bt, store, table, name, to) = (
            self.clone(),
            store.to_string(),
            table.to_string(),
            name.to_string(),
            to.to_string(),
        );
        std::thread::Builder::new()
            .name("restore".into())
            .spawn(move || {
                let _ = bt.restore_backup(&store, &table, &name, &to);
            })
            .map_err(|e| Error::Unavailable(format!("cannot start the restore: {e}")))?;
        Ok(())
    }

    /// Sets or clears the expiry of backup `name` of `table` in backup
    /// store `store` (its record rewritten whole).
    pub fn set_backup_expiry(
        &self,
        store: &str,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
    ) -> Result<Record> {
        let t = self.target(store)?;
        let _publish = t.publish.lock();
        let mut r = target::read(&*t.store, table, name)?;
        r.manifest.expire_micros = expire_micros;
        t.store
            .replace(&target::path(table, name), &[&r.encode()])?;
        Ok(r)
    }

    /// Deletes the backups of every backup store whose expiry has passed
    /// (run with each garbage collection the operator asks for).
    pub fn collect_expired_backups(&self) -> Result<usize> {
        let now = crate::now_micros();
        let mut n = 0;
        for store in self.backup_stores() {
            for r in self.list_backups(&store)? {
                let m = &r.manifest;
                if m.expire_micros.is_some_and(|e| e <= now) {
                    match self.delete_backup(&store, &m.table, &m.name) {
                        Ok(()) | Err(Error::SnapshotNotFound(_)) => n += 1,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok(n)
    }

    /// New table `to` from backup `name` of `table` in backup store
    /// `store`: every file is copied into the table's store (under new
    /// numbers) and checked against the backup's hash, the snapshot is
    /// kept there as `to/.snapshots/<name>`, and the table cloned from it.
    /// Cut short, it leaves no table; run again, it goes on from the
    /// snapshot if that was written.
    pub fn restore_backup(&self, store: &str, table: &str, name: &str, to: &str) -> Result<()> {
        let job = self
            .backups()
            .jobs
            .start(JobKind::Restore, store, table, name);
        let r = self.restore_backup_as(store, table, name, to, &job);
        progress::finish(&job, &r);
        match &r {
            Ok(()) => log::info!("restored backup {table}/{name} of {store} as {to}"),
            Err(e) => log::warn!("restoring backup {table}/{name} of {store} failed: {e}"),
        }
        r
    }

    fn restore_backup_as(
        &self,
        store: &str,
        table: &str,
        name: &str,
        to: &str,
        job: &Job,
    ) -> Result<()> {
        crate::catalog::validate_table_name(to)?;
        let src = self.target(store)?.store.clone();
        let rec = target::read(&*src, table, name)?;
        if self.table(to).is_ok() {
            return Err(Error::TableExists(to.to_string()));
        }
        let files = self.snapshot_store()?.clone();
        let same = |m: &Manifest| {
            m.taken_micros == rec.manifest.taken_micros && m.table_id == rec.manifest.table_id
        };
        match read_manifest(&*files, to, name) {
            // A restore cut short after the snapshot was written.
            Ok(m) if same(&m) => return self.clone_snapshot(to, name, to),
            Ok(_) => {
                return Err(Error::SnapshotExists(format!(
                    "{to}/{name} (another snapshot of that name: delete it or restore under another table name)"
                )))
            }
            Err(Error::SnapshotNotFound(_)) => {}
            Err(e) => return Err(e),
        }
        job.files_total
            .store(rec.files.len() as u64, Ordering::Relaxed);
        job.bytes_total.store(rec.bytes(), Ordering::Relaxed);
        // New numbers, held from the collection until the snapshot names
        // them; a crash leaves files nothing names, which it then deletes.
        let mut renumber: HashMap<u64, u64> = HashMap::new();
        let numbers = &self.env().numbers;
        let copied = (|| {
            for f in &rec.files {
                let n = numbers.new_output()?;
                renumber.insert(f.number, n);
                copy::copy_file(
                    &*src,
                    &f.key,
                    &*files,
                    &crate::compaction::sst_name(n),
                    f.size,
                    Some(f.xxh3),
                    job,
                )?;
                job.files_done.fetch_add(1, Ordering::Relaxed);
            }
            let mut m = rec.manifest.clone();
            m.name = name.to_string();
            m.table = to.to_string();
            m.expire_micros = None;
            m.cluster = None;
            for t in &mut m.tablets {
                for f in &mut t.meta.files {
                    f.number = *renumber
                        .get(&f.number)
                        .ok_or_else(|| Error::corruption("backup record without a file"))?;
                }
            }
            publish_manifest(&*files, &m)
        })();
        numbers.release(renumber.values().copied());
        copied?;
        self.clone_snapshot(to, name, to)
    }
}

impl Bigtable {
    /// `.bigtable/backups`: the copies under way or lately finished, then
    /// every backup of every backup store (a store that cannot be read
    /// says so on its line).
    pub fn backups_report(&self) -> Vec<String> {
        let mut out = vec![
            "# copy kind store table name percent state files done/total bytes done/total skipped"
                .to_string(),
        ];
        for j in self.backup_jobs() {
            let state = match &*j.state.lock() {
                JobState::Running => "running".to_string(),
                JobState::Done => "done".to_string(),
                JobState::Failed(e) => format!("failed: {e}"),
            };
            out.push(format!(
                "copy {} {} {} {} {}% {} files {}/{} bytes {}/{} {}",
                match j.kind {
                    JobKind::Backup => "backup",
                    JobKind::Copy => "copy",
                    JobKind::Restore => "restore",
                },
                j.store,
                j.table,
                j.name,
                j.percent(),
                if state.starts_with("failed") {
                    "failed"
                } else {
                    &state
                },
                j.files_done.load(Ordering::Relaxed),
                j.files_total.load(Ordering::Relaxed),
                j.bytes_done.load(Ordering::Relaxed),
                j.bytes_total.load(Ordering::Relaxed),
                j.bytes_skipped.load(Ordering::Relaxed),
            ));
            if let JobState::Failed(e) = &*j.state.lock() {
                out.push(format!("#   {e}"));
            }
        }
        out.push("# store table name taken_us files bytes expire_us".to_string());
        for store in self.backup_stores() {
            match self.list_backups(&store) {
                Ok(list) => {
                    for r in list {
                        let m = &r.manifest;
                        out.push(format!(
                            "{store} {} {} {} {} {} {}",
                            m.table,
                            m.name,
                            m.taken_micros,
                            r.files.len(),
                            r.bytes(),
                            m.expire_micros.map_or("-".to_string(), |e| e.to_string())
                        ));
                    }
                }
                Err(e) => out.push(format!("# {store}: {e}")),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
