//! A backup store's layout: `backups/<table>/<name>`, each backup's record
//! (written whole, last), and `files/`, the SSTables' copies that the
//! records share. Deleting a backup deletes its record, then the copies no
//! other record names.

use super::record::{Record, MAX_BYTES};
use crate::snapshot::{per_table, read_whole, validate_snapshot_name};
use crate::{Error, Result};
use gfs::FileStore;
use std::collections::HashSet;

const DIR: &str = "backups/";

pub fn path(table: &str, name: &str) -> String {
    format!("{DIR}{table}/{name}")
}

/// Writes `r` whole, atomically; fails if a backup of that name exists.
pub fn publish(store: &dyn FileStore, r: &Record) -> Result<()> {
    let m = &r.manifest;
    let p = path(&m.table, &m.name);
    if store.exists(&p)? {
        return Err(Error::SnapshotExists(format!(
            "backup {}/{}",
            m.table, m.name
        )));
    }
    store.replace(&p, &[&r.encode()])?;
    Ok(())
}

/// Backup `name` of `table`.
pub fn read(store: &dyn FileStore, table: &str, name: &str) -> Result<Record> {
    validate_snapshot_name(name)?;
    read_file(store, &path(table, name)).map_err(|e| match e {
        Error::Fs(gfs::Error::NotFound(_)) => {
            Error::SnapshotNotFound(format!("backup {table}/{name}"))
        }
        e => e,
    })
}

fn read_file(store: &dyn FileStore, file: &str) -> Result<Record> {
    Record::decode(&read_whole(store, file, MAX_BYTES)?)
}

/// Every backup as (table, name).
pub fn all(store: &dyn FileStore) -> Result<Vec<(String, String)>> {
    // `replace` writes beside the record first (`NAME.tmp`).
    per_table(store, DIR, |name| !name.ends_with(".tmp"))
}

/// Every record, read whole (one skipped if deleted meanwhile).
pub fn records(store: &dyn FileStore) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for (t, n) in all(store)? {
        match read(store, &t, &n) {
            Ok(r) => out.push(r),
            Err(Error::SnapshotNotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Deletes backup `name` of `table`, then the copies only it named.
pub fn delete(store: &dyn FileStore, table: &str, name: &str) -> Result<()> {
    let r = read(store, table, name)?;
    store.delete(&path(table, name))?;
    let mut kept: HashSet<String> = HashSet::new();
    for o in records(store)? {
        kept.extend(o.files.into_iter().map(|f| f.key));
    }
    for f in r.files {
        if !kept.contains(&f.key) {
            match store.delete(&f.key) {
                Ok(()) | Err(gfs::Error::NotFound(_)) => {}
                Err(e) => log::warn!("could not delete the backup's copy {}: {e}", f.key),
            }
        }
    }
    Ok(())
}
