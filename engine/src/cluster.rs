//! One daemon's cluster: tablet servers, a master with a standby, and the
//! client they and the mount share. A supervisor keeps the configured
//! number of tablet servers and masters running, starting a fresh one
//! (under a new name, as a replacement machine would be) when one dies.

use crate::client::{read_table_defs, Client};
use crate::coordination::{ensure_layout, Lease};
use crate::env::{now_micros, Env};
use crate::master::Master;
use crate::metadata::METADATA_ID;
use crate::options::Options;
use crate::protocol::{MasterService, TabletLifecycle, TabletService};
use crate::tablet_server::TabletServer;
use crate::{Error, Result};
use chubby::LockService;
use gfs::FileStore;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A daemon's part of its server names: when it started, and a random
/// part, so that daemons on other machines starting in the same
/// microsecond still name their servers (and logs) apart.
fn incarnation() -> String {
    format!(
        "{:x}{:04x}",
        now_micros() % (1 << 40),
        rand::random::<u16>()
    )
}

/// Masters per daemon: the active one and a standby.
const MASTERS: usize = 2;

pub struct Cluster {
    pub env: Arc<Env>,
    pub client: Arc<Client>,
    /// Distinguishes this daemon's server names from earlier runs'.
    incarnation: String,
    started: AtomicU64,
    /// The masters and tablet servers this daemon runs (the registry in
    /// `env` also reaches those of other daemons).
    masters: Mutex<Vec<Arc<Master>>>,
    servers: Mutex<Vec<Arc<TabletServer>>>,
    stop: Arc<AtomicBool>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    /// When a daemon without a master last read the tables from METADATA.
    catalog_read: Mutex<Option<Instant>>,
}

/// How stale a master-less daemon's list of tables may grow.
const CATALOG_TTL: Duration = Duration::from_secs(1);

impl Cluster {
    /// Starts the cluster's servers, masters and supervisor without waiting
    /// for the tablets to be assigned ([`Cluster::wait_ready`] waits: a
    /// daemon that serves calls from others must take them meanwhile).
    pub fn launch(
        store: Arc<dyn FileStore>,
        lock: Option<Arc<dyn LockService>>,
        opts: Options,
    ) -> Result<Arc<Cluster>> {
        let env = Env::new(store, lock, opts)?;
        ensure_layout(&*env.lock)?;
        let client_only = env.opts.tablet_servers == 0;
        let shared = env.store.shared_by_daemons();
        // A second daemon on the same cell stops here rather than stand by,
        // unless the store is one every daemon reaches (then it joins, and
        // its masters stand by); one that serves nothing always joins.
        if !client_only && !shared {
            match Lease::try_master(env.lock.clone(), "probe", None, env.opts.server_lock_delay)? {
                Some(l) => drop(l),
                None => return Err(Error::Lock("another master holds /bigtable/master".into())),
            }
        }
        if shared && !client_only {
            env.numbers.reserve_from(env.lock.clone())?;
        }
        let client = Arc::new(Client::new(env.clone()));
        let cluster = Arc::new(Cluster {
            env,
            client,
            incarnation: incarnation(),
            started: AtomicU64::new(0),
            masters: Mutex::new(Vec::new()),
            servers: Mutex::new(Vec::new()),
            stop: Arc::new(AtomicBool::new(false)),
            supervisor: Mutex::new(None),
            catalog_read: Mutex::new(None),
        });
        if client_only {
            return Ok(cluster);
        }
        for _ in 0..cluster.env.opts.tablet_servers {
            cluster.add_server()?;
        }
        for _ in 0..MASTERS {
            cluster.add_master()?;
        }
        let c = cluster.clone();
        let t = std::thread::Builder::new()
            .name("bt-supervisor".into())
            .spawn(move || c.supervise())
            .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?;
        *cluster.supervisor.lock() = Some(t);
        Ok(cluster)
    }

    /// Whether this daemon shares the store with others (each may run
    /// servers and a master; one master is active in the whole cluster).
    fn is_shared(&self) -> bool {
        self.env.store.shared_by_daemons()
    }

    /// Whether this daemon learns the tables by reading METADATA: it runs
    /// no master, or shares the store and its master stands by.
    pub fn learns_catalog(&self) -> bool {
        self.is_client_only() || (self.is_shared() && self.local_master().is_none())
    }

    fn next_name(&self, kind: &str) -> String {
        let n = self.started.fetch_add(1, Ordering::AcqRel);
        format!("{kind}{n}-{}", self.incarnation)
    }

    /// Starts one more tablet server; returns its name.
    pub fn add_server(&self) -> Result<String> {
        let name = self.next_name("ts");
        let s = TabletServer::start(self.env.clone(), self.client.clone(), &name)?;
        self.servers.lock().push(s.clone());
        self.env.add_server(s);
        if let Some(m) = self.env.active_master() {
            m.wake();
        }
        Ok(name)
    }

    fn add_master(&self) -> Result<()> {
        let m = Master::start(self.env.clone(), &self.next_name("master"))?;
        self.masters.lock().push(m.clone());
        self.env.add_master(m);
        Ok(())
    }

    /// This daemon's live tablet server `name`.
    pub fn local_server(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        let servers = self.servers.lock();
        let s = servers.iter().find(|s| s.name == name && s.is_serving())?;
        Some(s.clone() as Arc<dyn TabletService>)
    }

    /// This daemon's master, if it holds the master lock.
    pub fn local_master(&self) -> Option<Arc<dyn MasterService>> {
        let masters = self.masters.lock();
        let m = masters.iter().find(|m| m.is_active())?;
        Some(m.clone() as Arc<dyn MasterService>)
    }

    /// Runs a garbage collection now if this daemon's master is active
    /// (the operator's `gc`); Unavailable if the master is elsewhere.
    pub fn collect_garbage(&self) -> Result<()> {
        let m = self.masters.lock().iter().find(|m| m.is_active()).cloned();
        match m {
            Some(m) => m.collect_now(),
            None => Err(crate::Error::Unavailable(
                "the active master is in another daemon".into(),
            )),
        }
    }

    /// Whether this daemon runs no tablet server and no master: its client
    /// reaches those of the other daemons.
    pub fn is_client_only(&self) -> bool {
        self.env.opts.tablet_servers == 0
    }

    /// Reads the tables from METADATA into the catalog (a daemon without an
    /// active master has no other way to learn them); at most once per
    /// second unless `force`.
    pub fn refresh_catalog(&self, force: bool) -> Result<()> {
        if !self.learns_catalog() {
            return Ok(());
        }
        let mut last = self.catalog_read.lock();
        if !force && last.is_some_and(|t| t.elapsed() < CATALOG_TTL) {
            return Ok(());
        }
        // A definition the master pushed while METADATA was read is newer
        // than what was read: read again rather than overwrite it.
        for _ in 0..3 {
            let seen = self.env.catalog.changes();
            let defs = read_table_defs(&self.client, &*self.env.lock)?;
            let defs = defs.into_iter().map(|d| d.def).collect();
            if self.env.catalog.replace_all_since(defs, seen) {
                *last = Some(Instant::now());
                break;
            }
        }
        Ok(())
    }

    /// Waits until an active master has assigned every tablet (for a daemon
    /// that runs no master, or whose master stands by for another daemon's:
    /// until METADATA answers).
    pub fn wait_ready(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        if self.is_client_only() {
            return self.wait_metadata(deadline);
        }
        loop {
            let masters = self.masters.lock().clone();
            if masters.iter().any(|m| m.is_ready()) {
                return Ok(());
            }
            if self.is_shared() && self.master_elsewhere() {
                return self.wait_metadata(deadline);
            }
            if let Some(e) = masters.iter().find_map(|m| m.fatal_error()) {
                return Err(Error::Corruption(format!("the cluster cannot start: {e}")));
            }
            if Instant::now() >= deadline {
                let why: Vec<String> = masters
                    .iter()
                    .filter_map(|m| m.last_error().map(|e| format!("{}: {e}", m.name)))
                    .collect();
                return Err(Error::Unavailable(format!(
                    "the cluster did not finish assigning tablets in time ({})",
                    why.join("; ")
                )));
            }
            // Asking who is master goes to the lock service: less often.
            std::thread::sleep(Duration::from_millis(if self.is_shared() { 50 } else { 5 }));
        }
    }

    /// Whether another daemon's master is the active one.
    fn master_elsewhere(&self) -> bool {
        let ours = self.masters.lock();
        self.env
            .active_master()
            .is_some_and(|m| !ours.iter().any(|o| o.name == m.name()))
    }

    /// Waits until METADATA answers and the tables are read from it.
    fn wait_metadata(&self, deadline: Instant) -> Result<()> {
        let limit = deadline.saturating_duration_since(Instant::now());
        let client = Client::with_deadline(self.env.clone(), limit);
        client.locate(METADATA_ID, b"")?;
        while let Err(e) = self.refresh_catalog(true) {
            if Instant::now() >= deadline {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Keeps the configured numbers of live tablet servers and masters.
    fn supervise(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            // Tables made or changed through another daemon's master reach
            // this daemon's servers (their schemas) within a second.
            if let Err(e) = self.refresh_catalog(false) {
                log::debug!("cannot read the tables from METADATA: {e}");
            }
            let live = {
                let mut servers = self.servers.lock();
                servers.retain(|s| s.is_serving());
                servers.len()
            };
            if live < self.env.opts.tablet_servers.max(1) {
                if let Err(e) = self.add_server() {
                    log::warn!("cannot start a replacement tablet server: {e}");
                }
            }
            let running = {
                let mut masters = self.masters.lock();
                for m in masters.iter().filter(|m| m.is_stopped()) {
                    self.env.remove_master(&m.name);
                }
                masters.retain(|m| !m.is_stopped());
                masters.len()
            };
            if running < MASTERS {
                if let Err(e) = self.add_master() {
                    log::warn!("cannot start a replacement master: {e}");
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Expires tablet server `name`'s lock session, as losing its machine
    /// would; the master then reassigns its tablets.
    pub fn kill_server(&self, name: &str) -> Result<()> {
        let s = self
            .env
            .server(name)
            .ok_or_else(|| Error::invalid(format!("no live tablet server {name}")))?;
        s.kill()?;
        if let Some(m) = self.env.active_master() {
            m.wake();
        }
        Ok(())
    }

    /// Kills the active master; the standby takes over. Returns its name.
    pub fn kill_master(&self) -> Result<String> {
        let m = self
            .env
            .active_master()
            .ok_or_else(|| Error::Unavailable("no active master".into()))?;
        m.kill();
        Ok(m.name().to_string())
    }

    /// Orderly stop: masters first, then servers (each syncs its log).
    pub fn stop(&self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.supervisor.lock().take() {
            let _ = t.join();
        }
        let masters: Vec<_> = self.masters.lock().drain(..).collect();
        for m in masters {
            m.stop();
        }
        self.env.stopping.store(true, Ordering::Release);
        let mut result = Ok(());
        let servers: Vec<_> = self.servers.lock().drain(..).collect();
        for s in servers {
            if let Err(e) = s.stop() {
                result = Err(e);
            }
        }
        self.env.clear();
        result
    }
}
