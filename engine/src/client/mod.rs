//! The client library: the only way the mount (and the master, and tablet
//! servers writing METADATA) reach tablets. It finds them through METADATA
//! with a location cache (`locate.rs`) and the location each thread used
//! last (`last_location.rs`), retries a request whose tablet moved,
//! split or is being recovered, and streams scans across tablets
//! (`scanner.rs`).

mod defs;
mod last_location;
mod locate;
mod scanner;

pub(crate) use defs::{read_table_defs, table_family_rows};
pub use locate::{parse_meta_row, Location, MetaRow};
pub(crate) use scanner::Parts;
pub use scanner::Scanner;

use crate::counter::Counter;
use crate::cow_map::CowMap;
use crate::data::*;
use crate::env::Env;
use crate::metadata::METADATA_ID;
use crate::protocol::TabletService;
use crate::scan::ScanSpec;
use crate::txn::{RowTxn, TxnOutcome};
use crate::{Error, Result};
use chubby::Sequencer;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The client's counters.
#[derive(Default)]
pub struct ClientCounters {
    pub cache_hits: Counter,
    pub cache_misses: Counter,
    /// Reads of METADATA (or root) tablets made by lookups.
    pub metadata_reads: AtomicU64,
    /// Requests sent again after a stale location or an unavailable tablet.
    pub retries: AtomicU64,
}

/// A client of the cluster.
pub struct Client {
    pub(crate) env: Arc<Env>,
    /// METADATA rows by key (table id, end row).
    cache: CowMap<Vec<u8>, Arc<Location>>,
    /// The location each thread used last, and the cache's version.
    last: last_location::LastLocation,
    /// The root tablet's server.
    root: RwLock<Option<String>>,
    /// How long a request keeps retrying.
    deadline: Duration,
    pub counters: ClientCounters,
}

/// Whether `e` means "look the tablet up again and retry".
pub(crate) fn is_not_serving(e: &Error) -> bool {
    matches!(e.root(), Error::NotServing { .. })
}

/// "Not serving" for `loc`: its server is gone (look the tablet up again).
fn not_serving_at(loc: &Location) -> Error {
    Error::NotServing {
        server: loc.server.clone(),
        tablet: loc.tablet,
    }
}

fn retryable(e: &Error) -> bool {
    matches!(e.root(), Error::NotServing { .. } | Error::Unavailable(_))
}

impl Client {
    pub fn new(env: Arc<Env>) -> Client {
        let d = env.opts.retry_deadline;
        Self::with_deadline(env, d)
    }

    /// A client whose requests give up after `deadline` (the master's: it
    /// must go back to repairing the cluster rather than wait for itself).
    pub fn with_deadline(env: Arc<Env>, deadline: Duration) -> Client {
        Client {
            deadline,
            env,
            cache: CowMap::default(),
            last: Default::default(),
            root: RwLock::new(None),
            counters: ClientCounters::default(),
        }
    }

    pub fn env(&self) -> &Arc<Env> {
        &self.env
    }

    /// The live server at `loc`.
    fn server(&self, loc: &Location) -> Result<Arc<dyn TabletService>> {
        self.env
            .server(&loc.server)
            .ok_or_else(|| not_serving_at(loc))
    }

    /// Runs `f` until it succeeds or fails for good; while tablets move or
    /// recover it waits (with backoff) up to the retry deadline.
    pub(crate) fn retry<T>(&self, what: &str, mut f: impl FnMut() -> Result<T>) -> Result<T> {
        // The clock is read only once a try fails (most succeed at once), so
        // the deadline runs from the first failure.
        let mut deadline = None;
        let mut backoff = Duration::from_millis(1);
        loop {
            match f() {
                Err(e) if retryable(&e) => {
                    if self.env.stopping.load(Ordering::Acquire) {
                        return Err(Error::ShuttingDown);
                    }
                    let now = Instant::now();
                    if now >= *deadline.get_or_insert(now + self.deadline) {
                        return Err(Error::Unavailable(format!("{what}: {e}")));
                    }
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_millis(100));
                }
                r => return r,
            }
        }
    }

    /// Runs `op` on the server of the tablet holding `row`, looking it up
    /// again while the answer is "not serving".
    pub(crate) fn with_tablet<T>(
        &self,
        table: u64,
        row: &[u8],
        mut op: impl FnMut(&dyn TabletService, &Location) -> Result<T>,
    ) -> Result<T> {
        self.retry("tablet lookup", || {
            // A cached location is used where it lies: no copy, no count
            // of references bounced between cores.
            if let Some(r) = self.with_cached(table, row, |loc| self.on_server(loc, &mut op)) {
                return r;
            }
            let loc = self.locate_shared(table, row)?;
            self.on_server(&loc, &mut op)
        })
    }

    /// [`Client::with_tablet`] for a read: first on the server of this
    /// thread's kept location, reached without the server registry (a
    /// tenth of a cached point read; see `last_location.rs`).
    fn read_on_tablet<T>(
        &self,
        table: u64,
        row: &[u8],
        mut op: impl FnMut(&dyn TabletService, &Location) -> Result<T>,
    ) -> Result<T> {
        if let Some(r) = self.last.read(table, row, &self.env, |l, s| op(s, l)) {
            match r {
                // Moved: the ordinary path looks it up again.
                Err(e) if is_not_serving(&e) => {}
                r => {
                    self.counters.cache_hits.incr();
                    return r;
                }
            }
        }
        self.with_tablet(table, row, op)
    }

    /// Runs `op` on the server at `loc`, forgetting `loc` if it is stale.
    fn on_server<T>(
        &self,
        loc: &Location,
        op: &mut impl FnMut(&dyn TabletService, &Location) -> Result<T>,
    ) -> Result<T> {
        let r = self
            .env
            .with_server(&loc.server, |s| op(s, loc))
            .unwrap_or_else(|| Err(not_serving_at(loc)));
        if let Err(e) = &r {
            if is_not_serving(e) {
                self.invalidate(loc);
            }
        }
        r
    }

    /// Groups the indices of `rows` by the tablet holding each.
    fn group<'a>(
        &self,
        table: u64,
        rows: impl Iterator<Item = (usize, &'a [u8])>,
    ) -> Result<Vec<(Arc<Location>, Vec<usize>)>> {
        let mut groups: Vec<(Arc<Location>, Vec<usize>)> = Vec::new();
        for (i, row) in rows {
            match groups.iter_mut().find(|(l, _)| l.contains(row)) {
                Some((_, v)) => v.push(i),
                None => groups.push((self.locate_shared(table, row)?, vec![i])),
            }
        }
        Ok(groups)
    }

    /// Runs `op` once per tablet on the indices of `rows` it holds; the
    /// groups whose server answers "not serving" are looked up and sent
    /// again (a tablet may have split meanwhile) until the retry deadline.
    fn per_tablet(
        &self,
        what: &str,
        table: u64,
        rows: &[&[u8]],
        mut op: impl FnMut(&dyn TabletService, &Location, &[usize]) -> Result<()>,
    ) -> Result<()> {
        let mut pending: Vec<usize> = (0..rows.len()).collect();
        self.retry(what, || {
            let groups = self.group(table, pending.iter().map(|&i| (i, rows[i])))?;
            let mut failed = Vec::new();
            let mut last = None;
            for (loc, idx) in groups {
                match self.server(&loc).and_then(|s| op(&*s, &loc, &idx)) {
                    Ok(()) => {}
                    Err(e) if is_not_serving(&e) => {
                        self.invalidate(&loc);
                        failed.extend(idx);
                        last = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            pending = failed;
            last.map_or(Ok(()), Err)
        })
    }

    /// Applies validated row mutations of `table`; each row atomically.
    /// Returns what they wrote.
    pub fn apply(&self, table: u64, ms: &[RowMutation], sync: bool) -> Result<Written> {
        let rows: Vec<&[u8]> = ms.iter().map(|m| m.row.as_slice()).collect();
        let mut written = Written::default();
        self.per_tablet("write", table, &rows, |s, loc, idx| {
            let w = if idx.len() == ms.len() {
                // One tablet holds them all (indices in order): no copies.
                s.apply(loc.tablet, ms, sync, None)?
            } else {
                let part: Vec<RowMutation> = idx.iter().map(|&i| ms[i].clone()).collect();
                s.apply(loc.tablet, &part, sync, None)?
            };
            written.timestamp = written.timestamp.max(w.timestamp);
            written.bytes += w.bytes;
            Ok(())
        })?;
        Ok(written)
    }

    /// Runs validated row transactions of `table`; outcomes in input order.
    pub fn apply_txns(&self, table: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>> {
        let mut out: Vec<Option<TxnOutcome>> = vec![None; txns.len()];
        let rows: Vec<&[u8]> = txns.iter().map(|t| t.row.as_slice()).collect();
        self.per_tablet("transaction", table, &rows, |s, loc, idx| {
            let part: Vec<RowTxn> = idx.iter().map(|&i| txns[i].clone()).collect();
            for (&i, r) in idx.iter().zip(s.apply_txns(loc.tablet, &part, sync)?) {
                out[i] = Some(r);
            }
            Ok(())
        })?;
        out.into_iter()
            .map(|o| o.ok_or_else(|| Error::corruption("a transaction produced no outcome")))
            .collect()
    }

    pub fn read_row(&self, table: u64, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        self.read_on_tablet(table, row, |s, l| s.read_row(l.tablet, row, spec))
    }

    pub fn peek_row(&self, table: u64, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        self.read_on_tablet(table, row, |s, l| s.peek_row(l.tablet, row, spec))
    }

    pub fn read_column(&self, table: u64, column: ColumnRead<'_>) -> Result<Vec<Version>> {
        self.read_on_tablet(table, column.row, |s, l| s.read_column(l.tablet, column))
    }

    /// Writes one METADATA row (synced), fenced by `fence` when given.
    pub fn write_metadata(
        &self,
        key: &[u8],
        mutations: Vec<Mutation>,
        fence: Option<&Sequencer>,
    ) -> Result<()> {
        let m = [RowMutation {
            row: key.to_vec(),
            mutations,
        }];
        self.with_tablet(METADATA_ID, key, |s, l| s.apply(l.tablet, &m, true, fence))?;
        Ok(())
    }

    /// Figures for status: `key=value` words.
    pub fn status_line(&self) -> String {
        let c = &self.counters;
        format!(
            "location_cache_hits={} location_cache_misses={} metadata_reads={} retries={} cached_locations={}",
            c.cache_hits.get(),
            c.cache_misses.get(),
            c.metadata_reads.load(Ordering::Relaxed),
            c.retries.load(Ordering::Relaxed),
            self.cache.with_map(|m| m.len())
        )
    }
}
