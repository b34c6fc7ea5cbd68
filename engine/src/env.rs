//! What the parts of one daemon share: the file store, the lock service, the
//! catalog of tables, the caches, file numbers, the clock that stamps cells,
//! and the registry through which masters, tablet servers and clients reach
//! each other (threads and channels stand in for RPC inside one process).

use crate::cache::ScanCache;
use crate::catalog::Catalog;
use crate::compaction::sst_number;
use crate::cow_map::CowMap;
use crate::metadata::RootStore;
use crate::options::Options;
use crate::protocol::{AfterWrite, Dialer, MasterService, TabletService};
use crate::quiesce;
use crate::sstable::BlockCache;
use crate::{Error, Result};
use arc_swap::ArcSwapOption;
use chubby::LockService;
use gfs::FileStore;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

pub use crate::numbers::Numbers;

/// Test switches for failures that are hard to cause from outside.
#[derive(Default)]
pub struct Hooks {
    /// Tablet servers commit splits but never tell the master.
    pub drop_split_notifications: AtomicBool,
    /// A splitting tablet server dies after recording the left half.
    pub split_stops_after_left: AtomicBool,
    /// A move waits here between unloading its tablet and loading it.
    pub move_after_unload: Pause,
    /// The master's assignment waits here after reading a user table's
    /// METADATA rows, before acting on them.
    pub assign_after_read: Pause,
    /// A tablet server's load waits here after reading the tablet (and
    /// redoing its log), before recording that it serves it.
    pub load_before_record: Pause,
}

/// A point where a test can stop an operation: while held, whoever
/// reaches it waits there.
#[derive(Default)]
pub struct Pause {
    held: AtomicBool,
    /// The next arrival alone waits, until [`Pause::hold`]`(false)`.
    next: AtomicBool,
    next_held: AtomicBool,
    /// Times the point was passed (or reached, while held).
    reached: AtomicU64,
}

impl Pause {
    /// Makes later arrivals wait (`true`) or lets them, and any waiting, go.
    pub fn hold(&self, held: bool) {
        self.held.store(held, Ordering::Release);
        if !held {
            self.next.store(false, Ordering::Release);
            self.next_held.store(false, Ordering::Release);
        }
    }

    /// Makes the next arrival wait (and only it: later ones pass) until
    /// `hold(false)`.
    pub fn hold_next(&self) {
        self.next_held.store(true, Ordering::Release);
        self.next.store(true, Ordering::Release);
    }

    /// How many times the point was reached.
    pub fn reached(&self) -> u64 {
        self.reached.load(Ordering::Acquire)
    }

    /// The point itself: returns at once unless held.
    pub(crate) fn pass(&self) {
        self.reached.fetch_add(1, Ordering::AcqRel);
        let mine = self.next.swap(false, Ordering::AcqRel);
        while self.held.load(Ordering::Acquire) || (mine && self.next_held.load(Ordering::Acquire))
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// A registered tablet server as a plain pointer, valid while the epoch it
/// was taken in lasts (used only inside [`quiesce::read`]).
#[derive(Clone, Copy)]
pub(crate) struct KeptServer {
    pub epoch: u64,
    pub server: *const dyn TabletService,
}

/// Drops what the server registry let go of once no thread may still use
/// a kept pointer to it.
fn retired<T>(gone: T) -> T {
    quiesce::retire();
    gone
}

/// The shared context of one daemon's cluster.
pub struct Env {
    pub store: Arc<dyn FileStore>,
    pub opts: Options,
    pub lock: Arc<dyn LockService>,
    pub catalog: Catalog,
    pub block_cache: Arc<BlockCache>,
    pub scan_cache: ScanCache,
    pub numbers: Numbers,
    pub root: RootStore,
    pub hooks: Hooks,
    /// Snapshots opened for reading lately (the mount reads one cell at a time).
    /// Set when the daemon stops: requests give up instead of retrying.
    pub stopping: AtomicBool,
    last_ts: AtomicU64,
    servers: CowMap<String, Arc<dyn TabletService>>,
    masters: RwLock<Vec<Arc<dyn MasterService>>>,
    /// Reaches the servers and master of other daemons.
    dialer: ArcSwapOption<Box<dyn Dialer>>,
    /// Reach even this daemon's own servers and masters through the
    /// dialer (how one process exercises the network protocol).
    dial_local: AtomicBool,
    /// Told of every write this daemon's clients make (cache coherence
    /// between daemons: docs/coherence.md).
    after_write: ArcSwapOption<Box<dyn AfterWrite>>,
    /// The private lock-service cell of a cluster opened without one.
    _cell_dir: Option<tempfile::TempDir>,
}

impl Env {
    pub fn new(
        store: Arc<dyn FileStore>,
        lock: Option<Arc<dyn LockService>>,
        opts: Options,
    ) -> Result<Arc<Env>> {
        let (lock, cell_dir) = match lock {
            Some(l) => (l, None),
            None => {
                let dir = tempfile::tempdir().map_err(|e| {
                    Error::Lock(format!("cannot make a private lock-service cell: {e}"))
                })?;
                let cell = chubby::LocalCell::open(dir.path(), chubby::CellOptions::default())
                    .map_err(|e| Error::Lock(format!("private lock-service cell: {e}")))?;
                (cell as Arc<dyn LockService>, Some(dir))
            }
        };
        let numbers = Numbers::default();
        for name in store.list("sst/")? {
            if let Some(n) = sst_number(&name) {
                numbers.bump(n);
            }
        }
        numbers.bump(0);
        Ok(Arc::new(Env {
            block_cache: Arc::new(BlockCache::new(opts.block_cache_bytes)),
            scan_cache: ScanCache::new(opts.scan_cache_bytes),
            root: RootStore::new(store.clone()),
            store,
            opts,
            lock,
            catalog: Catalog::default(),
            numbers,
            hooks: Hooks::default(),
            stopping: AtomicBool::new(false),
            last_ts: AtomicU64::new(0),
            servers: CowMap::default(),
            masters: RwLock::new(Vec::new()),
            dialer: ArcSwapOption::empty(),
            dial_local: AtomicBool::new(false),
            after_write: ArcSwapOption::empty(),
            _cell_dir: cell_dir,
        }))
    }

    /// How far ahead of this machine's clock a timestamp found in a tablet
    /// may lie and still be taken for one a server assigned, on a machine
    /// whose clock runs ahead (see [`Env::raise_clock`]). Users also write
    /// explicit timestamps, some far in the future (year 3000, `i64::MAX`);
    /// raising the clock to those would stamp every later write of the
    /// daemon with that time, so anything further ahead than any plausible
    /// skew is left alone.
    pub const MAX_CLOCK_SKEW_MICROS: u64 = 3_600 * 1_000_000;

    /// A timestamp above every one handed out before in this process, so a
    /// row's newest write is its newest version whichever server took it.
    pub fn next_timestamp(&self) -> u64 {
        let now = now_micros();
        let prev = self
            .last_ts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last + 1))
            })
            .unwrap_or(0);
        now.max(prev + 1)
    }

    /// Makes every later [`Env::next_timestamp`] exceed `ts`, the newest
    /// cell timestamp of a tablet this daemon starts serving, so a write
    /// after a move is newer than every write before it even when the
    /// tablet's last server had a clock ahead of this one. Returns how far
    /// the clock jumped ahead of what it would have handed out (0 if not at
    /// all), or `None`, leaving the clock alone, when `ts` lies more than
    /// [`Env::MAX_CLOCK_SKEW_MICROS`] ahead of now.
    pub fn raise_clock(&self, ts: u64) -> Option<u64> {
        let now = now_micros();
        if ts > now.saturating_add(Self::MAX_CLOCK_SKEW_MICROS) {
            return None;
        }
        let prev = self.last_ts.fetch_max(ts, Ordering::AcqRel);
        Some(ts.saturating_sub(prev.max(now)))
    }

    // ------------------------------------------------------------ registry

    pub fn add_server(&self, s: Arc<dyn TabletService>) {
        if let Some(replaced) = self.servers.insert(s.name().to_string(), s) {
            retired(replaced);
        }
    }

    pub fn remove_server(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        self.servers.remove(name).map(retired)
    }

    /// Local server `name` as a pointer a thread may keep, with the epoch
    /// it was taken in (see [`crate::quiesce`]); None if it is not
    /// registered here or not serving.
    pub(crate) fn kept_server(&self, name: &str) -> Option<KeptServer> {
        if !self.local() {
            return None;
        }
        // The epoch first: a removal after it moves it, and the pointer
        // taken then is never used.
        let epoch = quiesce::epoch();
        self.servers.with(name, |s| {
            s.is_serving().then_some(KeptServer {
                epoch,
                server: Arc::as_ptr(s),
            })
        })?
    }

    /// Installs how other daemons' servers and masters are reached; with
    /// `dial_local`, this daemon's own are reached that way too.
    pub fn set_dialer(&self, dialer: Box<dyn Dialer>, dial_local: bool) {
        self.dialer.store(Some(Arc::new(dialer)));
        self.dial_local.store(dial_local, Ordering::Release);
    }

    /// Installs what is told of every write this daemon makes.
    pub fn set_after_write(&self, hook: Box<dyn AfterWrite>) {
        self.after_write.store(Some(Arc::new(hook)));
    }

    /// Rows of `table` were written (or a write to them failed midway):
    /// tell the hook, which returns once the daemons caching them know.
    pub(crate) fn wrote(&self, table: &str, rows: &[&[u8]]) {
        if let Some(h) = self.after_write.load().as_ref() {
            h.wrote(table, rows);
        }
    }

    /// Table `table` changed as a whole (see [`AfterWrite::changed_table`]).
    pub(crate) fn changed_table(&self, table: &str) {
        if let Some(h) = self.after_write.load().as_ref() {
            h.changed_table(table);
        }
    }

    /// The write hook's figures (None without one).
    pub(crate) fn after_write_status(&self) -> Option<String> {
        self.after_write.load().as_ref().map(|h| h.status_line())
    }

    fn local(&self) -> bool {
        !self.dial_local.load(Ordering::Acquire)
    }

    fn dialed(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        self.dialer.load().as_ref().and_then(|d| d.server(name))
    }

    /// A live tablet server by name (one in another daemon is live while
    /// registered; it answers "not serving" itself once it is not).
    pub fn server(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        if self.local() {
            if let Some(s) = self
                .servers
                .with(name, |s| s.is_serving().then(|| Arc::clone(s)))
            {
                return s;
            }
        }
        self.dialed(name)
    }

    /// `f` of the live tablet server `name`, borrowed (what a point read uses).
    pub fn with_server<R>(&self, name: &str, f: impl FnOnce(&dyn TabletService) -> R) -> Option<R> {
        let mut f = Some(f);
        if self.local() {
            let here = self.servers.with(name, |s| {
                if s.is_serving() {
                    f.take().map(|f| f(&**s))
                } else {
                    None
                }
            });
            if let Some(r) = here {
                return r; // registered here: its answer, or None if it died
            }
        }
        let f = f?;
        self.dialed(name).map(|s| f(&*s))
    }

    /// Every registered tablet server, live or not, in name order.
    pub fn servers(&self) -> Vec<Arc<dyn TabletService>> {
        let mut all: std::collections::BTreeMap<String, Arc<dyn TabletService>> = if self.local() {
            self.servers.snapshot().as_ref().clone()
        } else {
            Default::default()
        };
        if let Some(d) = self.dialer.load().as_ref() {
            for name in d.server_names() {
                if let std::collections::btree_map::Entry::Vacant(e) = all.entry(name) {
                    if let Some(s) = d.server(e.key()) {
                        e.insert(s);
                    }
                }
            }
        }
        all.into_values().collect()
    }

    pub fn add_master(&self, m: Arc<dyn MasterService>) {
        self.masters.write().push(m);
    }

    pub fn remove_master(&self, name: &str) {
        self.masters.write().retain(|m| m.name() != name);
    }

    pub fn masters(&self) -> Vec<Arc<dyn MasterService>> {
        self.masters.read().clone()
    }

    /// The master that holds the master lock, if one does.
    pub fn active_master(&self) -> Option<Arc<dyn MasterService>> {
        if self.local() {
            if let Some(m) = self.masters.read().iter().find(|m| m.is_active()) {
                return Some(m.clone());
            }
        }
        self.dialer.load().as_ref().and_then(|d| d.active_master())
    }

    /// Drops every reference the registry holds (at shutdown).
    pub fn clear(&self) {
        let servers = self.servers.update(std::mem::take);
        if !servers.is_empty() {
            retired(servers);
        }
        self.masters.write().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Arc<Env> {
        Env::new(Arc::new(gfs::MemStore::new()), None, Options::default()).unwrap()
    }

    #[test]
    fn the_clock_rises_to_a_tablets_timestamps_within_the_skew_limit() {
        let env = env();
        let ahead = now_micros() + 10 * 60 * 1_000_000;
        let jump = env.raise_clock(ahead).unwrap();
        assert!(jump > 9 * 60 * 1_000_000, "{jump}");
        assert!(env.next_timestamp() > ahead);
        // Already past it: no jump.
        assert_eq!(env.raise_clock(ahead), Some(0));
        assert_eq!(env.raise_clock(1), Some(0));
        assert!(env.next_timestamp() > ahead + 1);
    }

    #[test]
    fn timestamps_beyond_the_skew_limit_leave_the_clock_alone() {
        let env = env();
        let far = now_micros() + Env::MAX_CLOCK_SKEW_MICROS + 60 * 1_000_000;
        for ts in [far, crate::key::MAX_TIMESTAMP, u64::MAX] {
            assert_eq!(env.raise_clock(ts), None);
        }
        let t = env.next_timestamp();
        assert!(t < far - Env::MAX_CLOCK_SKEW_MICROS, "{t}");
    }
}
