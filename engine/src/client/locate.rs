//! Tablet location (paper §5.1): the client's cache of METADATA rows and
//! the three-level lookup behind it.
//!
//! A lookup for row `r` of table `t` first looks in the cache for the entry
//! with the smallest METADATA key at or after `lookup_key(t, r)`. On a miss
//! it locates the METADATA tablet holding that key (the same way, one level
//! up; the root tablet's server is in the lock service) and reads several
//! METADATA rows from there at once, caching them all (prefetch). A server
//! that answers "not serving" makes the caller drop the entry and look again.

use super::Client;
use crate::coordination::root_location;
use crate::data::RowRange;
use crate::key;
use crate::metadata::{
    lookup_key, lookup_key_small, parse_tablet_row_key, root_end, tablet_row_key, TabletMeta,
    FAMILY_LOCATION, FAMILY_TABLET, METADATA_ID, Q_INFO, Q_SERVER,
};
use crate::own_lines;
use crate::scan::ScanSpec;
use crate::{Error, Result};
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// METADATA rows read per lookup miss.
const PREFETCH_ROWS: u64 = 8;

/// Where a tablet is served. Read by every request for the tablet, on
/// every core: on cache lines of its own (see [`own_lines`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(align(64))]
pub struct Location {
    pub tablet: u64,
    pub table: u64,
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
    /// The serving tablet server ("" while unassigned).
    pub server: String,
}

impl Location {
    pub fn contains(&self, row: &[u8]) -> bool {
        !key::less(row, &self.start) && self.end.as_deref().is_none_or(|e| key::less(row, e))
    }

    fn cache_key(&self) -> Vec<u8> {
        tablet_row_key(self.table, self.end.as_deref())
    }
}

/// A METADATA row as the client and the master read it.
#[derive(Debug, Clone)]
pub struct MetaRow {
    pub key: Vec<u8>,
    pub meta: TabletMeta,
    pub server: String,
}

/// Decodes the cells of one METADATA row.
pub fn parse_meta_row(key: &[u8], cells: &[crate::Cell]) -> Result<Option<MetaRow>> {
    if parse_tablet_row_key(key).is_none() {
        return Ok(None); // a table definition
    }
    let mut meta = None;
    let mut server = String::new();
    for c in cells {
        if c.family == FAMILY_TABLET && c.qualifier == Q_INFO {
            meta = Some(TabletMeta::decode(&c.value)?);
        } else if c.family == FAMILY_LOCATION && c.qualifier == Q_SERVER {
            server = String::from_utf8_lossy(&c.value).into_owned();
        }
    }
    Ok(meta.map(|meta| MetaRow {
        key: key.to_vec(),
        meta,
        server,
    }))
}

impl Client {
    /// Where row `row` of table `table` is served.
    pub fn locate(&self, table: u64, row: &[u8]) -> Result<Location> {
        self.locate_shared(table, row).map(|l| (*l).clone())
    }

    /// As [`Client::locate`], sharing the cached entry (no copies of its keys).
    pub(crate) fn locate_shared(&self, table: u64, row: &[u8]) -> Result<Arc<Location>> {
        if table == METADATA_ID && row < root_end().as_slice() {
            return self.root_location().map(Arc::new);
        }
        if let Some(loc) = self.with_cached(table, row, Arc::clone) {
            return Ok(loc);
        }
        let k = lookup_key(table, row);
        self.counters.cache_misses.incr();
        // The row sought may be past the end of the METADATA tablet holding
        // `k` (its key is the next tablet's first): then read on in the next.
        let mut meta = self.locate(METADATA_ID, &k)?;
        let rows = loop {
            let rows = match self.read_meta_rows(&meta, &k, PREFETCH_ROWS) {
                Ok(r) => r,
                Err(e) => {
                    if super::is_not_serving(&e) {
                        self.invalidate(&meta);
                    }
                    return Err(e);
                }
            };
            match &meta.end {
                Some(end) if rows.is_empty() => meta = self.locate(METADATA_ID, end)?,
                _ => break rows,
            }
        };
        self.cache.update(|cache| {
            for r in &rows {
                let loc = Location {
                    tablet: r.meta.id,
                    table: r.meta.table,
                    start: own_lines::bytes(&r.meta.start),
                    end: r.meta.end.as_deref().map(own_lines::bytes),
                    server: r.server.clone(),
                };
                cache.insert(loc.cache_key(), Arc::new(loc));
            }
        });
        self.last.edited();
        match rows.first() {
            Some(r) if r.meta.table == table && r.meta.start.as_slice() <= row => {
                Ok(Arc::new(Location {
                    tablet: r.meta.id,
                    table,
                    start: own_lines::bytes(&r.meta.start),
                    end: r.meta.end.as_deref().map(own_lines::bytes),
                    server: r.server.clone(),
                }))
            }
            Some(r) if r.meta.table == table => Err(Error::Unavailable(format!(
                "METADATA of table {table} has no tablet holding a row yet (tablet {} starts later)",
                r.meta.id
            ))),
            _ => Err(Error::TableNotFound(format!("table id {table}"))),
        }
    }

    /// `f` of the cached location of `row` of `table` (counted as a hit),
    /// or None (not counted) if it is not cached or is the root tablet's.
    pub(crate) fn with_cached<R>(
        &self,
        table: u64,
        row: &[u8],
        f: impl FnOnce(&Arc<Location>) -> R,
    ) -> Option<R> {
        if table == METADATA_ID && row < root_end().as_slice() {
            return None;
        }
        let mut f = Some(f);
        let kept = self.last.with(table, row, |loc| f.take().map(|f| f(loc)));
        if let Some(r) = kept.flatten() {
            self.counters.cache_hits.incr();
            return Some(r);
        }
        let f = f?;
        let version = self.last.version();
        let k = lookup_key_small(table, row);
        let r = self.cache.with_map(|cache| {
            let (_, loc) = cache
                .range::<[u8], _>((Bound::Included(k.as_slice()), Bound::Unbounded))
                .next()?;
            (loc.table == table && loc.contains(row)).then(|| {
                self.last.keep(version, loc);
                f(loc)
            })
        })?;
        self.counters.cache_hits.incr();
        Some(r)
    }

    fn root_location(&self) -> Result<Location> {
        let cached = self.root.read().clone();
        let server = match cached {
            Some(s) => s,
            None => {
                let s = root_location(&*self.env.lock)?;
                if s.is_empty() {
                    return Err(Error::Unavailable("the root tablet is not assigned".into()));
                }
                *self.root.write() = Some(s.clone());
                s
            }
        };
        Ok(Location {
            tablet: 0,
            table: METADATA_ID,
            start: Vec::new(),
            end: Some(root_end()),
            server,
        })
    }

    /// Forgets a location that turned out to be stale.
    pub fn invalidate(&self, loc: &Location) {
        if loc.table == METADATA_ID && loc.start.is_empty() {
            *self.root.write() = None;
            return;
        }
        let key = loc.cache_key();
        if self
            .cache
            .with(&key, |l| l.tablet == loc.tablet)
            .unwrap_or(false)
        {
            self.cache.update(|cache| {
                if cache.get(&key).is_some_and(|l| l.tablet == loc.tablet) {
                    cache.remove(&key);
                }
            });
            self.last.edited();
        }
    }

    /// Forgets every cached location (after a table is dropped).
    pub fn forget_table(&self, table: u64) {
        self.cache
            .update(|cache| cache.retain(|_, l| l.table != table));
        self.last.edited();
    }

    /// Up to `limit` METADATA rows from `from` on, read from the METADATA
    /// tablet at `meta`.
    pub(crate) fn read_meta_rows(
        &self,
        meta: &Location,
        from: &[u8],
        limit: u64,
    ) -> Result<Vec<MetaRow>> {
        self.counters.metadata_reads.fetch_add(1, Ordering::Relaxed);
        let server = self.server(meta)?;
        let spec = ScanSpec {
            rows: RowRange {
                start: Bound::Included(from.to_vec()),
                end: Bound::Unbounded,
            },
            families: Some(vec![FAMILY_TABLET.into(), FAMILY_LOCATION.into()]),
            row_limit: Some(limit),
            ..ScanSpec::default()
        };
        let (mut reader, _) = server.scan_part(meta.tablet, &spec)?;
        let mut out = Vec::new();
        let mut cells: Vec<crate::Cell> = Vec::new();
        loop {
            let next = reader.next_cell()?;
            let row_ends = match (&next, cells.first()) {
                (_, None) => false,
                (Some(c), Some(first)) => c.row != first.row,
                (None, Some(_)) => true,
            };
            if row_ends {
                if let Some(r) = parse_meta_row(&cells[0].row, &cells)? {
                    out.push(r);
                }
                cells.clear();
            }
            match next {
                Some(c) => cells.push(c),
                None => return Ok(out),
            }
        }
    }
}
