//! A snapshot's operations where the store's files are: a daemon that
//! serves the store runs them for its own callers, and its active master
//! for a daemon that serves nothing (`tablet_servers=0`), which cannot
//! reach the files and asks over the internal RPC
//! ([`crate::protocol::MasterService`]).

use super::{store, take, Manifest};
use crate::catalog::validate_table_name;
use crate::catalog::TableEntry;
use crate::env::Env;
use crate::Result;

/// Takes snapshot `name` of `table` (an expiry in µs since the epoch, and
/// for a backup the API's cluster it was made in).
pub(crate) fn take_snapshot(
    env: &Env,
    table: &TableEntry,
    name: &str,
    expire_micros: Option<u64>,
    cluster: Option<&str>,
) -> Result<Manifest> {
    take::take(env, table, name, (expire_micros, cluster), None)
}

/// Sets or clears snapshot `name`'s expiry (the manifest is rewritten
/// whole, in place).
pub(crate) fn set_expiry(
    env: &Env,
    table: &str,
    name: &str,
    expire_micros: Option<u64>,
) -> Result<Manifest> {
    validate_table_name(table)?;
    let mut m = store::read(&*env.store, table, name)?;
    m.expire_micros = expire_micros;
    store::replace(&*env.store, &m)?;
    Ok(m)
}

/// The manifests of `table`'s snapshots (the table may have been deleted
/// since), by name.
pub(crate) fn manifests(env: &Env, table: &str) -> Result<Vec<Manifest>> {
    validate_table_name(table)?;
    let names = store::names(&*env.store, table)?;
    store::read_listed(
        &*env.store,
        names.into_iter().map(|n| (table.to_string(), n)),
    )
}

/// Snapshot `name` of `table`, whole.
pub(crate) fn manifest(env: &Env, table: &str, name: &str) -> Result<Manifest> {
    validate_table_name(table)?;
    store::read(&*env.store, table, name)
}

/// Deletes snapshot `name` of `table`.
pub(crate) fn delete(env: &Env, table: &str, name: &str) -> Result<()> {
    validate_table_name(table)?;
    store::delete(&*env.store, table, name)
}
