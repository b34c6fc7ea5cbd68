//! Taking a snapshot: every server holds the table's writes at once, the
//! cut is taken while all hold, the writes go on, each server writes its
//! tablets' memtable part and pins their files, the manifest is published,
//! the files unpinned. Cost: two calls per server, one SSTable per
//! locality group of each tablet with unflushed writes, one manifest.

use super::manifest::{check_cover, Manifest, SnapTablet};
use super::store;
use crate::catalog::TableEntry;
use crate::env::Env;
use crate::metadata::TabletMeta;
use crate::protocol::{HeldTablet, TabletService};
use crate::{now_micros, Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// How long each server holds the table's writes at most: the time to
/// reach every other server once.
const HOLD_MS: u64 = 5_000;
/// Tries before giving up (a tablet splitting or moving makes one fail).
const ATTEMPTS: u32 = 20;

/// Where a test makes the taking stop, as a crash would.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Every server holds the writes.
    Held,
    /// The writes go on, the files are written and pinned.
    Released,
}

/// `None` but in tests.
pub(crate) type Crash = Option<Step>;

/// The manifest's optional fields: the expiry (µs) and the API's cluster.
pub(crate) type Extra<'a> = (Option<u64>, Option<&'a str>);

/// Takes snapshot `name` of `table`, retrying while tablets move.
pub(crate) fn take(
    env: &Env,
    table: &TableEntry,
    name: &str,
    extra: Extra<'_>,
    crash: Crash,
) -> Result<Manifest> {
    store::validate_name(name)?;
    if table.id == crate::metadata::METADATA_ID {
        // Its writers are the servers' own records, which a hold would stall.
        return Err(Error::invalid("METADATA has no snapshots"));
    }
    if env.store.exists(&store::path(&table.name, name))? {
        return Err(Error::SnapshotExists(format!("{}/{name}", table.name)));
    }
    let mut last = None;
    let started = std::time::Instant::now();
    for attempt in 0..ATTEMPTS {
        match try_once(env, table, name, extra, crash) {
            Ok((m, held)) => {
                log::info!(
                    "snapshot {name} of {}: {} tablets, {} files, {} bytes; writes held {held:?}, \
                     taken in {:?} ({} tries)",
                    table.name,
                    m.tablets.len(),
                    m.files().len(),
                    m.bytes(),
                    started.elapsed(),
                    attempt + 1
                );
                return Ok(m);
            }
            Err(e @ (Error::Unavailable(_) | Error::NotServing { .. })) => {
                last = Some(e);
                // Staggered, so two snapshots of one table stop colliding.
                let ms = 20 * u64::from(attempt + 1) + now_micros() % 50;
                std::thread::sleep(Duration::from_millis(ms));
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Unavailable("snapshot not taken".into())))
}

fn decode(held: &[HeldTablet]) -> Result<Vec<SnapTablet>> {
    let mut tablets = held
        .iter()
        .map(|h| {
            Ok(SnapTablet {
                cut: h.cut,
                meta: TabletMeta::decode(&h.meta)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    tablets.sort_by(|a, b| a.meta.start.cmp(&b.meta.start));
    Ok(tablets)
}

/// One try: the manifest, and how long the first server held writes.
fn try_once(
    env: &Env,
    table: &TableEntry,
    name: &str,
    extra: Extra<'_>,
    crash: Crash,
) -> Result<(Manifest, Duration)> {
    let servers: Vec<Arc<dyn TabletService>> = env
        .servers()
        .into_iter()
        .filter(|s| s.is_serving())
        .collect();
    let mut holds: Vec<(Arc<dyn TabletService>, u64)> = Vec::new();
    let result = (|| {
        let mut cut = Vec::new();
        let holding = std::time::Instant::now();
        for s in &servers {
            let h = s.hold_writes(table.id, HOLD_MS)?;
            holds.push((s.clone(), h.hold));
            cut.extend(h.tablets);
        }
        // Every server holds the table's writes now: this is the instant.
        let taken_micros = now_micros();
        let schema = (*table.schema()).clone();
        check_cover(decode(&cut)?.iter().map(|t| &t.meta)).map_err(|why| {
            Error::Unavailable(format!("the table's tablets were moving ({why})"))
        })?;
        if crash == Some(Step::Held) {
            return Err(Error::ShuttingDown);
        }
        let held_for = holding.elapsed();
        let mut held = Vec::new();
        for (s, h) in &holds {
            held.extend(s.release_writes(*h)?);
        }
        if crash == Some(Step::Released) {
            return Err(Error::ShuttingDown);
        }
        let manifest = Manifest {
            name: name.to_string(),
            table: table.name.clone(),
            table_id: table.id,
            taken_micros,
            schema,
            tablets: decode(&held)?,
            expire_micros: extra.0,
            cluster: extra.1.map(str::to_string),
        };
        store::publish(&*env.store, &manifest)?;
        Ok((manifest, held_for))
    })();
    if matches!(result, Err(Error::ShuttingDown)) && crash.is_some() {
        // A crash: nothing is let go; the pins run out by themselves.
        return result;
    }
    for (s, h) in holds {
        if let Err(e) = s.unpin(h) {
            log::warn!(
                "snapshot {name} of {}: unpin on {}: {e}",
                table.name,
                s.name()
            );
        }
    }
    result
}
