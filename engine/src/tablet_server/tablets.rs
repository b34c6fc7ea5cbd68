//! The tablets a server serves: each with its table, the gate writers
//! pass and splits and unloads close, and its request count; the map of
//! them, read without a lock.

use super::load_sample::LoadSample;
use crate::catalog::TableEntry;
use crate::counter::Counter;
use crate::cow_map::CowMap;
use crate::metadata::{Redo, TabletMeta};
use crate::tablet::Tablet;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// One tablet being served.
pub struct Served {
    pub tablet: Arc<Tablet>,
    pub table: Arc<TableEntry>,
    /// Writers hold it shared from routing to commit; splits and unloads
    /// hold it exclusively, so no write lands in a retired tablet.
    gate: RwLock<()>,
    /// Reads and writes served, for the master's load balancing.
    pub requests: Counter,
    /// Their bytes and a sample of their rows, for the same.
    pub load: LoadSample,
}

impl Served {
    /// The descriptor to record in METADATA for the tablet as it is now.
    pub fn meta(&self, log: &str) -> TabletMeta {
        let t = &self.tablet;
        TabletMeta {
            id: t.id,
            table: t.table_id,
            start: t.start.clone(),
            end: t.end.clone(),
            files: t.version().files.iter().map(|f| f.meta.clone()).collect(),
            redo: Some(Redo {
                log: log.to_string(),
                seq: t.flushed_seq.load(Ordering::Acquire),
            }),
        }
    }

    /// A new served tablet of `table`.
    pub(super) fn new(tablet: Arc<Tablet>, table: Arc<TableEntry>) -> Served {
        Served {
            tablet,
            table,
            gate: RwLock::new(()),
            requests: Counter::default(),
            load: LoadSample::default(),
        }
    }

    /// Held by a write from routing to commit.
    pub(super) fn admit(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Held by a split or an unload: no write is in the tablet meanwhile.
    pub(super) fn close(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// [`Served::close`], waiting at most `wait` (a snapshot's hold).
    pub(super) fn close_within(&self, wait: Duration) -> Option<RwLockWriteGuard<'_, ()>> {
        self.gate.try_write_for(wait)
    }
}

/// The served tablets by id.
#[derive(Default)]
pub(super) struct Tablets {
    map: CowMap<u64, Arc<Served>>,
}

impl Tablets {
    /// `f` of tablet `id`, borrowed (no reference count taken), unless it
    /// is not served or retired.
    pub(super) fn with_unretired<R>(
        &self,
        id: u64,
        f: impl FnOnce(&Arc<Served>) -> R,
    ) -> Option<R> {
        self.map
            .with(&id, |s| {
                (!s.tablet.retired.load(Ordering::Acquire)).then(|| f(s))
            })
            .flatten()
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        self.map.contains_key(&id)
    }

    pub(super) fn insert(&self, s: Arc<Served>) {
        self.map.insert(s.tablet.id, s);
    }

    pub(super) fn remove(&self, id: u64) -> Option<Arc<Served>> {
        self.map.remove(&id)
    }

    /// Replaces tablet `old` by its two halves, at once.
    pub(super) fn split(&self, old: u64, a: Arc<Served>, b: Arc<Served>) {
        self.map.update(|tablets: &mut BTreeMap<u64, Arc<Served>>| {
            tablets.remove(&old);
            tablets.insert(a.tablet.id, a);
            tablets.insert(b.tablet.id, b);
        });
    }

    /// Every tablet served now.
    pub(super) fn all(&self) -> Vec<Arc<Served>> {
        self.map.snapshot().values().cloned().collect()
    }

    /// The ids of the tablets served now.
    pub(super) fn ids(&self) -> Vec<u64> {
        self.map.snapshot().keys().copied().collect()
    }

    /// Requests served by tablet `id` since it was loaded (0 if not served).
    pub(super) fn requests(&self, id: u64) -> u64 {
        self.map.snapshot().get(&id).map_or(0, |s| s.requests.get())
    }
}
