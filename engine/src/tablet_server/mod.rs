//! A tablet server (paper §5.2–§6): serves the tablets the master assigns
//! it, with one commit log shared by all of them, its own memtables, group
//! commit and background compactions. It serves only while it holds its
//! lock in the lock service.
//!
//! Each part of the protocol is implemented in the file that does its work
//! (this file: `TabletLifecycle`, start, fence, stop), and each piece of
//! state is a component with its own file and private fields:
//!
//! - `commit.rs`: the write path (`TabletWrites`; `CommitCore`: the commit
//!   lock, group commit, sequence numbers, the log)
//! - `row_locks.rs`: the striped row locks a write holds; `stall.rs`: where
//!   writers wait while a tablet has too many frozen memtables, or the
//!   server's memtables pass twice their budget
//! - `publish.rs`: making batches visible to reads in sequence order once
//!   their writers have inserted them
//! - `tablets.rs`: the served tablets (`Served`, `Tablets`)
//! - `reads.rs`: row, column and scan reads of one tablet (`TabletReads`)
//! - `background.rs`: minor, merging and major compactions, splits
//!   (`TabletMaintenance`); `pressure.rs`: memtables written out early
//!   for the server's memory budget, its log's length or their age
//! - `load.rs`: loading a tablet (with recovery from a dead server's log)
//!   and unloading it (`TabletAssignment`)
//! - `snapshot.rs`: a table's writes held for a snapshot's cut, the cut's
//!   memtable part written out, its files pinned (`TabletSnapshots`)
//! - `status.rs`: what the server reports (`TabletStatus`), its counters
//!   and what its background threads are doing
//!
//! `TabletServer`'s own methods are all in this file; the jobs of the other
//! files are functions over `&TabletServer` in the file that does the work.

mod background;
mod commit;
mod gc_changes;
mod load;
pub mod load_sample;
mod pressure;
mod publish;
mod reads;
mod row_locks;
mod snapshot;
mod stall;
mod status;
mod tablets;

use crate::client::Client;
use crate::coordination::Lease;
use crate::env::Env;
use crate::log::{CommitLog, CommitLogOptions};
use crate::protocol::TabletLifecycle;
use crate::{Error, Result};
use commit::{CommitCore, CommitShape};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use row_locks::RowLocks;
use stall::Stall;
use status::{Activity, Counters};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
pub use tablets::Served;
use tablets::Tablets;

/// Where tablet server `name` keeps its commit log.
pub fn log_dir(name: &str) -> String {
    format!("logs/{name}")
}

const SERVING: u8 = 0;
const DEAD: u8 = 1;
const STOPPED: u8 = 2;

/// One tablet server.
pub struct TabletServer {
    pub name: String,
    /// Its commit log's directory in the file store.
    pub log_dir: String,
    env: Arc<Env>,
    client: Arc<Client>,
    /// A client that gives up after a couple of seconds (see `record_as`).
    quick: Client,
    core: CommitCore,
    tablets: Tablets,
    row_locks: RowLocks,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    stall: Stall,
    state: AtomicU8,
    counters: Counters,
    lease: Lease,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// What the background threads are doing, for status.
    activity: Activity,
    /// Snapshots' holds on writes and pins on files.
    holds: snapshot::Holds,
    /// Commit timestamps of change-logged writes not yet visible.
    inflight: crate::changes::watermark::InFlight,
    pressure: pressure::Pressure,
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
        let core = CommitCore::new(
            log,
            env.opts.memtable_bytes,
            env.opts.memtable_budget,
            wake_tx.clone(),
            CommitShape {
                window: env.opts.log_batch_window,
                adaptive_window: env.opts.log_batch_window_adaptive,
                puts_in_flight: env.opts.log_puts_in_flight,
            },
        );
        let server = Arc::new(TabletServer {
            name: name.to_string(),
            log_dir,
            quick: Client::with_deadline(env.clone(), Duration::from_secs(2)),
            env,
            client,
            core,
            tablets: Tablets::default(),
            row_locks: RowLocks::new(),
            wake_tx,
            wake_rx,
            stall: Stall::default(),
            state: AtomicU8::new(SERVING),
            counters: Counters::default(),
            lease,
            threads: Mutex::new(Vec::new()),
            activity: Activity::default(),
            holds: snapshot::Holds::default(),
            inflight: Default::default(),
            pressure: Default::default(),
        });
        let mut threads = Vec::new();
        for i in 0..server.env.opts.background_threads.max(1) {
            let s = server.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-bg{i}"))
                    .spawn(move || background::background_loop(s, i))
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
            .with_unretired(id, f)
            .unwrap_or_else(|| Err(self.not_serving(id)))
    }

    /// The served tablet `id`, if this server serves it.
    fn served(&self, id: u64) -> Result<Arc<Served>> {
        self.with_served(id, |s| Ok(Arc::clone(s)))
    }

    /// Every tablet served now.
    pub fn served_tablets(&self) -> Vec<Arc<Served>> {
        self.tablets.all()
    }

    fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }

    fn wake_all(&self) {
        for _ in 0..64 {
            self.wake();
        }
        self.stall.release();
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
}

impl TabletLifecycle for TabletServer {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_serving(&self) -> bool {
        self.state.load(Ordering::Acquire) == SERVING
    }

    /// fsyncs the commit log.
    fn sync(&self) -> Result<()> {
        self.live()?;
        self.core.sync()
    }

    /// Stops serving at once, as when the server loses its lock: no write
    /// is logged after this returns, so a recovery that reads the log from
    /// now on sees every acknowledged write.
    fn fence(&self) {
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
    fn kill(&self) -> Result<()> {
        self.fence();
        self.lease.expire();
        Ok(())
    }
}
