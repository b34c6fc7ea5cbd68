//! A tablet server (paper §5.2–§6): serves the tablets the master assigns
//! it, with one commit log shared by all of them, its own memtables, group
//! commit and background compactions. It serves only while it holds its
//! lock in the lock service.
//!
//! - `commit.rs`: the write path (row locks, stalls, the commit lock, group
//!   commit for synced writes, the log)
//! - `publish.rs`: making batches visible to reads in sequence order once
//!   their writers have inserted them
//! - `reads.rs`: row, column and scan reads of one tablet
//! - `background.rs`: minor, merging and major compactions, splits
//! - `load.rs`: loading a tablet (with recovery from a dead server's log) and unloading it
//! - `status.rs`: what the server reports

mod background;
mod commit;
mod load;
mod publish;
mod reads;
mod service;
mod status;

use crate::catalog::TableEntry;
use crate::client::Client;
use crate::coordination::Lease;
use crate::counter::Counter;
use crate::cow_map::CowMap;
use crate::env::Env;
use crate::group_commit::GroupCommit;
use crate::log::{CommitLog, CommitLogOptions};
use crate::metadata::{Redo, TabletMeta};
use crate::tablet::Tablet;
use crate::{Error, Result};
use commit::{CommitCore, Ticket, WriteGroup};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const ROW_LOCK_STRIPES: usize = 1024;

/// Where tablet server `name` keeps its commit log.
pub fn log_dir(name: &str) -> String {
    format!("logs/{name}")
}

/// One tablet being served.
pub struct Served {
    pub tablet: Arc<Tablet>,
    pub table: Arc<TableEntry>,
    /// Writers hold it shared from routing to commit; splits and unloads
    /// hold it exclusively, so no write lands in a retired tablet.
    gate: RwLock<()>,
    /// Reads and writes served, for the master's load balancing.
    pub requests: Counter,
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
}

const SERVING: u8 = 0;
const DEAD: u8 = 1;
const STOPPED: u8 = 2;

#[derive(Default)]
struct Counters {
    writes: Counter,
    reads: Counter,
    scans: Counter,
    flushes: AtomicU64,
    merges: AtomicU64,
    majors: AtomicU64,
    splits: AtomicU64,
    stalls: AtomicU64,
    /// Bytes of a dead server's sorted log read while loading tablets.
    recovery_bytes: AtomicU64,
    recovered_entries: AtomicU64,
    loads: AtomicU64,
    unloads: AtomicU64,
    /// Loads that raised the clock to a tablet's newest timestamp, and the
    /// largest jump (µs): clock skew between servers being absorbed.
    clock_raised: AtomicU64,
    clock_raise_max_us: AtomicU64,
}

/// One tablet server.
pub struct TabletServer {
    pub name: String,
    /// Its commit log's directory in the file store.
    pub log_dir: String,
    env: Arc<Env>,
    client: Arc<Client>,
    /// A client that gives up after a couple of seconds (see `record_as`).
    quick: Client,
    core: Arc<CommitCore>,
    commit: GroupCommit<WriteGroup, Ticket>,
    tablets: CowMap<u64, Arc<Served>>,
    row_locks: Vec<Mutex<()>>,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    stall_lock: Mutex<()>,
    stall_cv: Condvar,
    state: AtomicU8,
    counters: Counters,
    lease: Lease,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// What the background threads are doing, for status.
    activity: Mutex<BTreeMap<String, String>>,
}

impl TabletServer {
    /// Starts tablet server `name`: registers it in the lock service, opens
    /// a fresh commit log and starts its background threads. It serves no
    /// tablet until the master assigns some.
    pub fn start(env: Arc<Env>, client: Arc<Client>, name: &str) -> Result<Arc<TabletServer>> {
        let lease = Lease::register_server(
            env.lock.clone(),
            name,
            env.opts.advertise.as_deref(),
            env.opts.server_lock_delay,
        )?;
        let log_dir = log_dir(name);
        let log = CommitLog::open(
            env.store.clone(),
            &log_dir,
            CommitLogOptions {
                roll_size: env.opts.log_file_bytes,
                slow_threshold: env.opts.slow_log_threshold,
                ..CommitLogOptions::default()
            },
        )?;
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let core = Arc::new(CommitCore::new(
            log,
            env.opts.memtable_bytes,
            wake_tx.clone(),
        ));
        let leader = core.clone();
        let commit = GroupCommit::new(
            8 << 20,
            |g: &WriteGroup| g.bytes,
            Box::new(move |groups, sync| leader.lead(groups, sync)),
        )
        .with_window(env.opts.log_batch_window);
        let server = Arc::new(TabletServer {
            name: name.to_string(),
            log_dir,
            quick: Client::with_deadline(env.clone(), Duration::from_secs(2)),
            env,
            client,
            core,
            commit,
            tablets: CowMap::default(),
            row_locks: (0..ROW_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            wake_tx,
            wake_rx,
            stall_lock: Mutex::new(()),
            stall_cv: Condvar::new(),
            state: AtomicU8::new(SERVING),
            counters: Counters::default(),
            lease,
            threads: Mutex::new(Vec::new()),
            activity: Mutex::new(BTreeMap::new()),
        });
        let mut threads = Vec::new();
        for i in 0..server.env.opts.background_threads.max(1) {
            let s = server.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-bg{i}"))
                    .spawn(move || s.background_loop(i))
                    .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?,
            );
        }
        let s = server.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("{name}-lease"))
                .spawn(move || s.watch_lease())
                .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?,
        );
        *server.threads.lock() = threads;
        Ok(server)
    }

    pub fn is_serving(&self) -> bool {
        self.state.load(Ordering::Acquire) == SERVING
    }

    fn live(&self) -> Result<()> {
        if self.is_serving() {
            Ok(())
        } else {
            Err(Error::NotServing {
                server: self.name.clone(),
                tablet: 0,
            })
        }
    }

    fn not_serving(&self, tablet: u64) -> Error {
        Error::NotServing {
            server: self.name.clone(),
            tablet,
        }
    }

    /// `f` of the served tablet `id`, borrowed (what a point read uses: no
    /// reference count taken), if this server serves it.
    fn with_served<R>(&self, id: u64, f: impl FnOnce(&Arc<Served>) -> Result<R>) -> Result<R> {
        self.live()?;
        self.tablets
            .with(&id, |s| {
                if s.tablet.retired.load(Ordering::Acquire) {
                    Err(self.not_serving(id))
                } else {
                    f(s)
                }
            })
            .unwrap_or_else(|| Err(self.not_serving(id)))
    }

    /// The served tablet `id`, if this server serves it.
    fn served(&self, id: u64) -> Result<Arc<Served>> {
        self.with_served(id, |s| Ok(Arc::clone(s)))
    }

    /// Every tablet served now.
    pub fn served_tablets(&self) -> Vec<Arc<Served>> {
        self.tablets.snapshot().values().cloned().collect()
    }

    /// Ids of the tablets served now.
    pub fn tablet_ids(&self) -> Vec<u64> {
        self.tablets.snapshot().keys().copied().collect()
    }

    fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }

    /// Stops serving at once, as when the server loses its lock: no write
    /// is logged after this returns, so a recovery that reads the log from
    /// now on sees every acknowledged write.
    pub fn fence(&self) {
        if self
            .state
            .compare_exchange(SERVING, DEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            log::warn!(
                "tablet server {} stops serving: it lost its lock",
                self.name
            );
        }
        self.core.fence();
        self.wake_all();
    }

    /// Simulates the loss of this server's machine: it stops serving, then
    /// its lock-service session expires so the master can reap it.
    pub fn kill(&self) {
        self.fence();
        self.lease.expire();
    }

    fn wake_all(&self) {
        for _ in 0..64 {
            self.wake();
        }
        let _g = self.stall_lock.lock();
        self.stall_cv.notify_all();
    }

    /// Orderly stop: syncs the log, stops the threads. Tablets are not
    /// flushed; they are recovered from the log on the next start.
    pub fn stop(&self) -> Result<()> {
        let synced = if self.is_serving() {
            self.sync()
        } else {
            Ok(())
        };
        self.state.store(STOPPED, Ordering::Release);
        self.core.fence();
        self.wake_all();
        let threads: Vec<_> = self.threads.lock().drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        synced
    }

    /// fsyncs the commit log.
    pub fn sync(&self) -> Result<()> {
        self.live()?;
        self.core.sync()
    }

    /// Checks the lock every few milliseconds; losing it stops the server.
    fn watch_lease(self: Arc<Self>) {
        while self.state.load(Ordering::Acquire) == SERVING {
            if !self.lease.held() {
                self.fence();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn set_activity(&self, key: &str, what: Option<String>) {
        let mut a = self.activity.lock();
        match what {
            Some(w) => {
                a.insert(key.to_string(), w);
            }
            None => {
                a.remove(key);
            }
        }
    }
}
