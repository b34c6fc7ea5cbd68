//! Where manifests live in the file store: `snapshots/<table>/<name>`,
//! beside the table's `sst/` files. A manifest is written whole under a
//! temporary name that carries its time, synced, then renamed into place:
//! a crash leaves the whole manifest or a temporary file, which GC deletes
//! once it is older than [`LEFTOVER_AGE`].

use super::manifest::{Manifest, MAX_BYTES};
use crate::{now_micros, Error, Result};
use gfs::FileStore;
use std::collections::HashSet;

const DIR: &str = "snapshots/";
/// Temporary manifests start so; a snapshot name cannot (no leading dot).
const TMP: &str = ".tmp.";
/// A temporary manifest older than this was left by a crash.
pub const LEFTOVER_AGE: std::time::Duration = std::time::Duration::from_secs(600);

/// Snapshot names: 1-255 of `[A-Za-z0-9_.-]`, not starting with a dot.
pub fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "snapshot name {name:?}: use 1-255 of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

/// The manifest's file name.
pub fn path(table: &str, name: &str) -> String {
    format!("{DIR}{table}/{name}")
}

/// Writes `m` atomically; fails if a snapshot of that name exists.
pub fn publish(store: &dyn FileStore, m: &Manifest) -> Result<()> {
    if store.exists(&path(&m.table, &m.name))? {
        return Err(Error::SnapshotExists(format!("{}/{}", m.table, m.name)));
    }
    write(store, m)
}

/// Rewrites an existing manifest atomically (the rename replaces it).
pub fn replace(store: &dyn FileStore, m: &Manifest) -> Result<()> {
    if !store.exists(&path(&m.table, &m.name))? {
        return Err(Error::SnapshotNotFound(format!("{}/{}", m.table, m.name)));
    }
    write(store, m)
}

fn write(store: &dyn FileStore, m: &Manifest) -> Result<()> {
    let to = path(&m.table, &m.name);
    let tmp = format!("{DIR}{}/{TMP}{}.{}", m.table, now_micros(), m.name);
    let body = m.encode();
    let written = (|| {
        let mut f = store.create(&tmp)?;
        f.append_sync(&[&body])?;
        drop(f);
        store.rename(&tmp, &to)
    })();
    if let Err(e) = written {
        let _ = store.delete(&tmp);
        return Err(e.into());
    }
    Ok(())
}

/// Reads snapshot `name` of `table`.
pub fn read(store: &dyn FileStore, table: &str, name: &str) -> Result<Manifest> {
    validate_name(name)?;
    read_file(store, &path(table, name)).map_err(|e| match e {
        Error::Fs(gfs::Error::NotFound(_)) => Error::SnapshotNotFound(format!("{table}/{name}")),
        e => e,
    })
}

fn read_file(store: &dyn FileStore, file: &str) -> Result<Manifest> {
    Manifest::decode(&read_whole(store, file, MAX_BYTES)?)
}

/// A small file read whole, refused (as damaged) past `max` bytes.
pub fn read_whole(store: &dyn FileStore, file: &str, max: u64) -> Result<Vec<u8>> {
    let f = store.open(file)?;
    let len = f.len()?;
    if len > max {
        return Err(Error::corruption(format!("{file}: {len} bytes is too big")));
    }
    Ok(f.read_at(0, len as usize)?)
}

/// The names of `table`'s snapshots, sorted.
pub fn names(store: &dyn FileStore, table: &str) -> Result<Vec<String>> {
    let prefix = format!("{DIR}{table}/");
    Ok(store
        .list(&prefix)?
        .into_iter()
        .filter_map(|n| n.strip_prefix(&prefix).map(str::to_string))
        .filter(|n| !n.contains('/') && !n.starts_with('.'))
        .collect())
}

/// The manifests of the snapshots listed as (table, name), leaving out
/// those deleted since the listing.
pub fn read_listed(
    store: &dyn FileStore,
    listed: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for (table, name) in listed {
        match read(store, &table, &name) {
            Ok(m) => out.push(m),
            Err(Error::SnapshotNotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every snapshot in the store as (table, name), of tables that exist or
/// not.
pub fn all(store: &dyn FileStore) -> Result<Vec<(String, String)>> {
    per_table(store, DIR, |_| true)
}

/// The files `<dir><table>/<name>` as (table, name), for the names that are
/// snapshot names (no temporary file) and that `keep` keeps.
pub fn per_table(
    store: &dyn FileStore,
    dir: &str,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<(String, String)>> {
    Ok(store
        .list(dir)?
        .into_iter()
        .filter_map(|n| {
            let (table, name) = n.strip_prefix(dir)?.split_once('/')?;
            (!name.contains('/') && !name.starts_with('.') && keep(name))
                .then(|| (table.to_string(), name.to_string()))
        })
        .collect())
}

/// Deletes snapshot `name` of `table`; its files are GC's once nothing
/// else names them.
pub fn delete(store: &dyn FileStore, table: &str, name: &str) -> Result<()> {
    validate_name(name)?;
    match store.delete(&path(table, name)) {
        Ok(()) => Ok(()),
        Err(gfs::Error::NotFound(_)) => Err(Error::SnapshotNotFound(format!("{table}/{name}"))),
        Err(e) => Err(e.into()),
    }
}

/// What GC must keep: every SSTable a manifest names. Deletes temporary
/// manifests a crash left, and manifests whose expiry has passed (their
/// files then go unless something else names them). A manifest that cannot be read stops the
/// collection (an error), since its files cannot be told apart.
pub fn live_files(store: &dyn FileStore) -> Result<HashSet<u64>> {
    let mut live = HashSet::new();
    let now = now_micros();
    for name in store.list(DIR)? {
        let base = name.rsplit('/').next().unwrap_or_default();
        if let Some(rest) = base.strip_prefix(TMP) {
            let made: u64 = rest
                .split('.')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            if now.saturating_sub(made) > LEFTOVER_AGE.as_micros() as u64 {
                match store.delete(&name) {
                    Ok(()) | Err(gfs::Error::NotFound(_)) => {}
                    Err(e) => log::warn!("could not delete the leftover {name}: {e}"),
                }
            }
            continue;
        }
        match read_file(store, &name) {
            Ok(m) if m.expire_micros.is_some_and(|e| e <= now) => {
                match store.delete(&name) {
                    Ok(()) | Err(gfs::Error::NotFound(_)) => {
                        log::info!("deleted the expired snapshot {}/{}", m.table, m.name)
                    }
                    // Kept, with its files, until the next collection.
                    Err(e) => {
                        log::warn!("could not delete the expired {name}: {e}");
                        live.extend(m.files());
                    }
                }
            }
            Ok(m) => live.extend(m.files()),
            // Deleted since the listing.
            Err(Error::Fs(gfs::Error::NotFound(_))) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(live)
}
