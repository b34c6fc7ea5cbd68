//! The master (paper §5.2–§5.4): one at a time, elected through the lock
//! service; a standby takes over when the active one dies.
//!
//! The active master checks every tablet server's lock; when it can take a
//! server's lock the server is dead: it deletes the server's file, fences
//! it, has its commit log sorted (`recovery.rs`) and assigns its tablets to
//! the others. It keeps every tablet in METADATA assigned (root first, then
//! METADATA tablets, then user tablets), balances load, merges small
//! neighbouring tablets, creates and drops tables, and collects SSTables and
//! logs nothing refers to any more (mark and sweep over METADATA).

mod admin;
mod assign;
mod balance;
mod gc;
mod load;
mod rebalance;
mod restore;
mod trash;

use crate::client::Client;
use crate::coordination::{known_servers, list_servers, master_looks_held, reap_server, Lease};
use crate::env::Env;
use crate::snapshot::{ops, Manifest};
use crate::{Error, Result};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Events kept for status.
const RECENT: usize = 32;
/// How often a round asks the lock service itself whether the master's
/// and the servers' locks are held, instead of what its watch told it
/// (a watch that lagged then delays a failover by at most this).
const EXACT_EVERY: Duration = Duration::from_secs(2);

#[derive(Default)]
struct State {
    /// Servers seen alive at the last check.
    live: BTreeSet<String>,
    /// Servers declared dead, most recent last.
    dead: VecDeque<String>,
    /// Recent assignments, moves, splits, merges and deaths.
    recent: VecDeque<String>,
    /// Tablets waiting for a server.
    pending: usize,
    need_reconcile: bool,
    last_reconcile: Option<Instant>,
    last_balance: Option<Instant>,
    last_gc: Option<Instant>,
    /// The last round that asked the lock service itself.
    last_exact: Option<Instant>,
    /// Tablet loads between balancing rounds.
    load: load::LoadTracker,
    /// The last error of a round, for status and startup failures.
    last_error: Option<String>,
    /// Whether that error was damage no retry can fix.
    last_error_fatal: bool,
}

#[derive(Default)]
pub struct MasterCounters {
    pub takeovers: AtomicU64,
    pub servers_reaped: AtomicU64,
    pub assignments: AtomicU64,
    pub moves: AtomicU64,
    pub merges: AtomicU64,
    pub splits_reported: AtomicU64,
    pub logs_sorted: AtomicU64,
    pub files_collected: AtomicU64,
    pub logs_collected: AtomicU64,
    pub trash_purged: AtomicU64,
}

pub struct Master {
    pub name: String,
    env: Arc<Env>,
    client: Arc<Client>,
    lease: Mutex<Option<Lease>>,
    active: AtomicBool,
    /// Set once an active master has assigned every tablet it found.
    ready: AtomicBool,
    stop: AtomicBool,
    state: Mutex<State>,
    /// Serializes the main loop's rounds (server checks, assignment, collection).
    admin: Mutex<()>,
    /// Serializes table operations, moves and merges. They run off the main
    /// loop: they write METADATA, and if its server has just died only the
    /// main loop can bring it back.
    ops: Mutex<()>,
    /// Tablets an operation has in hand (being moved, merged or created):
    /// assignment leaves them alone.
    busy: Mutex<std::collections::HashMap<u64, usize>>,
    /// Held while a new table's definition and first tablet are written, so
    /// that assignment, which makes a first tablet for a table that has none
    /// (a create cut short by a crash), never makes a second one for a table
    /// being created. Taken last, never waited for by the main loop.
    first_tablets: Mutex<()>,
    /// Whether the catalog has been loaded since this master took over.
    catalog_loaded: AtomicBool,
    wake_tx: Sender<()>,
    wake_rx: Receiver<()>,
    thread: Mutex<Vec<JoinHandle<()>>>,
    pub counters: MasterCounters,
}

impl Master {
    /// Starts a master; it becomes active when it can take the master lock.
    /// It has a client of its own whose requests give up quickly: while a
    /// METADATA server is dead, only the master can bring it back.
    pub fn start(env: Arc<Env>, name: &str) -> Result<Arc<Master>> {
        let (wake_tx, wake_rx) = crossbeam_channel::bounded(1);
        let client = Arc::new(Client::with_deadline(env.clone(), Duration::from_secs(2)));
        let m = Arc::new(Master {
            name: name.to_string(),
            env,
            client,
            lease: Mutex::new(None),
            active: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            admin: Mutex::new(()),
            ops: Mutex::new(()),
            busy: Mutex::new(Default::default()),
            first_tablets: Mutex::new(()),
            catalog_loaded: AtomicBool::new(false),
            wake_tx,
            wake_rx,
            thread: Mutex::new(Vec::new()),
            counters: MasterCounters::default(),
        });
        let me = m.clone();
        let t = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || me.run())
            .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?;
        let me = m.clone();
        let b = std::thread::Builder::new()
            .name(format!("{name}-balance"))
            .spawn(move || me.run_balancer())
            .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?;
        *m.thread.lock() = vec![t, b];
        Ok(m)
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Whether this master is active and has assigned every tablet.
    pub fn is_ready(&self) -> bool {
        self.is_active() && self.ready.load(Ordering::Acquire)
    }

    pub fn wake(&self) {
        let _ = self.wake_tx.try_send(());
    }

    fn note(&self, event: String) {
        log::info!("{}: {event}", self.name);
        let mut s = self.state.lock();
        s.recent
            .push_back(format!("{} {event}", crate::env::now_micros()));
        while s.recent.len() > RECENT {
            s.recent.pop_front();
        }
    }

    /// The master's sequencer while it is active (fences its METADATA writes).
    fn sequencer(&self) -> Result<chubby::Sequencer> {
        self.lease
            .lock()
            .as_ref()
            .filter(|l| l.held())
            .map(|l| l.sequencer.clone())
            .ok_or_else(|| Error::Unavailable(format!("{} is not the active master", self.name)))
    }

    fn run(self: Arc<Self>) {
        let mut last_error: Option<Instant> = None;
        while !self.stop.load(Ordering::Acquire) {
            if let Err(e) = self.step() {
                {
                    let mut s = self.state.lock();
                    s.last_error = Some(e.to_string());
                    s.last_error_fatal = matches!(e.root(), Error::Corruption(_));
                }
                if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(2)) {
                    log::warn!("{}: {e}", self.name);
                }
                last_error = Some(Instant::now());
            }
            let _ = self.wake_rx.recv_timeout(self.env.opts.master_interval);
        }
        self.active.store(false, Ordering::Release);
    }

    /// Whether this round asks the lock service itself (see [`EXACT_EVERY`]).
    fn exact_round(&self) -> bool {
        let mut s = self.state.lock();
        let due = s.last_exact.is_none_or(|t| t.elapsed() >= EXACT_EVERY);
        if due {
            s.last_exact = Some(Instant::now());
        }
        due
    }

    fn step(&self) -> Result<()> {
        let exact = self.exact_round();
        if !self.is_active() {
            // Trying the lock writes to the lock service: only once it
            // may be free.
            if master_looks_held(&*self.env.lock, exact) {
                return Ok(());
            }
            let Some(lease) = Lease::try_master(
                self.env.lock.clone(),
                &self.name,
                self.env.opts.advertise.as_deref(),
                self.env.opts.server_lock_delay,
            )?
            else {
                return Ok(());
            };
            *self.lease.lock() = Some(lease);
            self.active.store(true, Ordering::Release);
            self.counters.takeovers.fetch_add(1, Ordering::Relaxed);
            self.state.lock().need_reconcile = true;
            self.catalog_loaded.store(false, Ordering::Release);
            self.note("became the active master".into());
        }
        if !self.lease.lock().as_ref().is_some_and(|l| l.held()) {
            self.active.store(false, Ordering::Release);
            self.ready.store(false, Ordering::Release);
            *self.lease.lock() = None;
            self.note("lost the master lock; standing by".into());
            return Ok(());
        }
        let _admin = self.admin.lock();
        self.check_servers(exact)?;
        let (reconcile, gc) = {
            let s = self.state.lock();
            let due = |t: Option<Instant>, every: Duration| t.is_none_or(|t| t.elapsed() >= every);
            (
                s.need_reconcile || due(s.last_reconcile, Duration::from_secs(2)),
                // Rarely: collection lists and reads files, and the chunk
                // layer scrubs only when no client does I/O.
                due(s.last_gc, Duration::from_secs(30)),
            )
        };
        if reconcile {
            self.reconcile()?;
            let mut s = self.state.lock();
            s.need_reconcile = false;
            s.last_reconcile = Some(Instant::now());
        }
        if gc && self.ready.load(Ordering::Acquire) {
            self.state.lock().last_gc = Some(Instant::now());
            self.expire_trash()?;
            self.collect()?;
        }
        Ok(())
    }

    /// Balancing and merging, once a second while this master is active
    /// and every tablet is assigned.
    fn run_balancer(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(100));
            let due = self
                .state
                .lock()
                .last_balance
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
            if !due || !self.is_ready() {
                continue;
            }
            self.state.lock().last_balance = Some(Instant::now());
            let r = if self.env.opts.balance {
                self.balance()
            } else {
                Ok(())
            };
            if let Err(e) = r.and_then(|()| self.merge_small()) {
                log::info!("{}: balancing: {e}", self.name);
            }
        }
    }

    /// Marks tablets as in hand; they are released when the guard drops
    /// (each hold counts: two operations on one tablet release it once
    /// both are done).
    fn hold(&self, ids: &[u64]) -> Held<'_> {
        let mut b = self.busy.lock();
        for &id in ids {
            *b.entry(id).or_default() += 1;
        }
        Held {
            master: self,
            ids: ids.to_vec(),
        }
    }

    /// Holds tablet `id` unless something else holds it now.
    fn try_hold(&self, id: u64) -> Option<Held<'_>> {
        let mut b = self.busy.lock();
        if b.contains_key(&id) {
            return None;
        }
        b.insert(id, 1);
        Some(Held {
            master: self,
            ids: vec![id],
        })
    }

    fn is_held(&self, id: u64) -> bool {
        self.busy.lock().contains_key(&id)
    }

    /// The paper's server check: a server whose lock the master can take is
    /// dead. Its file is deleted, it is fenced, and its tablets reassigned.
    /// With `exact`, the lock service itself is asked, else what its watch
    /// told it (see [`EXACT_EVERY`]).
    fn check_servers(&self, exact: bool) -> Result<()> {
        let listed = if exact {
            list_servers(&*self.env.lock)?
        } else {
            known_servers(&*self.env.lock)?
        };
        let mut names: BTreeSet<String> = listed.into_iter().collect();
        names.extend(self.state.lock().live.iter().cloned());
        let mut live = BTreeSet::new();
        let known = self.state.lock().live.clone();
        for name in names {
            if !known.contains(&name) {
                // Just started: it may be between creating its file and
                // locking it (and, in another daemon, not yet reachable:
                // its address is written once it holds the lock). It is
                // checked from the next round on.
                live.insert(name);
                continue;
            }
            if reap_server(&*self.env.lock, &name, exact)? {
                if let Some(s) = self.env.remove_server(&name) {
                    s.fence();
                }
                let mut st = self.state.lock();
                if st.live.contains(&name) {
                    st.dead.push_back(name.clone());
                    while st.dead.len() > RECENT {
                        st.dead.pop_front();
                    }
                    st.need_reconcile = true;
                    drop(st);
                    self.counters.servers_reaped.fetch_add(1, Ordering::Relaxed);
                    self.note(format!("server {name} is dead; reassigning its tablets"));
                }
            } else if self.env.server(&name).is_some() {
                live.insert(name);
            }
        }
        let mut st = self.state.lock();
        if live != st.live {
            st.need_reconcile = true;
        }
        st.live = live;
        Ok(())
    }

    /// The last error, if it was damage in the store (a corrupt METADATA
    /// file or log) that retrying cannot repair.
    pub fn fatal_error(&self) -> Option<String> {
        let s = self.state.lock();
        s.last_error.clone().filter(|_| s.last_error_fatal)
    }

    /// The last error a round of this master met.
    pub fn last_error(&self) -> Option<String> {
        self.state.lock().last_error.clone()
    }

    /// Live servers, in name order.
    fn live(&self) -> Vec<String> {
        self.state.lock().live.iter().cloned().collect()
    }

    /// A tablet server told us it split a tablet.
    pub fn tablet_split(&self, server: &str, parent: u64, children: &[u64]) {
        self.counters
            .splits_reported
            .fetch_add(1, Ordering::Relaxed);
        self.note(format!("{server} split tablet {parent} into {children:?}"));
        // Not merged back within the cooldown, like a load split.
        self.state
            .lock()
            .load
            .split_reported(children, Instant::now());
        self.wake();
    }

    /// Stops the master's threads, then releases the master lock.
    pub fn stop(&self) {
        self.halt();
        *self.lease.lock() = None;
    }

    /// Stops the master's threads (an operation under way finishes first).
    fn halt(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
        let threads: Vec<_> = self.thread.lock().drain(..).collect();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }

    /// Simulates the master's machine dying: it stops acting, then its lock
    /// session expires (the lock enters its lock-delay).
    pub fn kill(&self) {
        self.halt();
        if let Some(l) = self.lease.lock().take() {
            l.expire();
        }
    }

    /// `key=value` lines for `.bigtable/master`.
    pub fn report(&self) -> Vec<String> {
        let s = self.state.lock();
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut lines = vec![format!(
            "master={} state={} ready={} takeovers={} live_servers={} pending_assignments={} \
             servers_reaped={} assignments={} moves={} merges={} splits_reported={} \
             logs_sorted={} files_collected={} logs_collected={}",
            self.name,
            if self.is_active() {
                "active"
            } else {
                "standby"
            },
            self.ready.load(Ordering::Acquire),
            get(&c.takeovers),
            s.live.len(),
            s.pending,
            get(&c.servers_reaped),
            get(&c.assignments),
            get(&c.moves),
            get(&c.merges),
            get(&c.splits_reported),
            get(&c.logs_sorted),
            get(&c.files_collected),
            get(&c.logs_collected),
        )];
        if self.is_active() {
            for d in &s.dead {
                lines.push(format!("dead_server={d}"));
            }
            for e in &s.recent {
                lines.push(format!("event={e}"));
            }
        }
        lines
    }
}

/// Tablets an operation has in hand (see [`Master::hold`]).
struct Held<'a> {
    master: &'a Master,
    ids: Vec<u64>,
}

impl Held<'_> {
    fn add(&mut self, id: u64) {
        *self.master.busy.lock().entry(id).or_default() += 1;
        self.ids.push(id);
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut b = self.master.busy.lock();
        for id in &self.ids {
            if let Some(n) = b.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    b.remove(id);
                }
            }
        }
    }
}

impl crate::protocol::MasterService for Master {
    fn name(&self) -> &str {
        &self.name
    }
    fn is_active(&self) -> bool {
        Master::is_active(self)
    }
    fn create_table(&self, name: &str, schema: crate::schema::TableSchema) -> Result<()> {
        Master::create_table(self, name, schema)
    }
    fn delete_table(&self, name: &str) -> Result<()> {
        Master::delete_table(self, name)
    }
    fn set_schema(&self, name: &str, schema: crate::schema::TableSchema) -> Result<()> {
        Master::set_schema(self, name, schema)
    }
    fn undelete_table(&self, id: u64, name: Option<&str>) -> Result<String> {
        Master::undelete_table(self, id, name)
    }
    fn purge_trash(&self, id: u64) -> Result<()> {
        Master::purge_trash(self, id)
    }
    fn move_tablet(&self, table: &str, row: &[u8], to: &str) -> Result<()> {
        Master::move_tablet(self, table, row, to)
    }
    fn take_snapshot(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
        cluster: Option<&str>,
    ) -> Result<Vec<u8>> {
        let t = self.env.catalog.get(table)?;
        ops::take_snapshot(&self.env, &t, name, expire_micros, cluster).map(|m| m.encode())
    }
    fn set_snapshot_expiry(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
    ) -> Result<Vec<u8>> {
        ops::set_expiry(&self.env, table, name, expire_micros).map(|m| m.encode())
    }
    fn snapshot_manifests(&self, table: &str) -> Result<Vec<Vec<u8>>> {
        Ok(ops::manifests(&self.env, table)?
            .iter()
            .map(Manifest::encode)
            .collect())
    }
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<Vec<u8>> {
        ops::manifest(&self.env, table, name).map(|m| m.encode())
    }
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        ops::delete(&self.env, table, name)
    }
    fn clone_snapshot(&self, table: &str, snapshot: &str, to: &str) -> Result<()> {
        Master::clone_snapshot(self, table, snapshot, to)
    }
    fn restore_snapshot(&self, table: &str, snapshot: &str) -> Result<()> {
        Master::restore_snapshot(self, table, snapshot)
    }
    fn tablet_split(&self, server: &str, parent: u64, children: &[u64]) {
        Master::tablet_split(self, server, parent, children)
    }
    fn wake(&self) {
        Master::wake(self)
    }
    fn kill(&self) {
        Master::kill(self)
    }
    fn report(&self) -> Vec<String> {
        Master::report(self)
    }
}
