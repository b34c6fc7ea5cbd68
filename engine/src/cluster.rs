//! One daemon's cluster: tablet servers, a master with a standby, and the
//! client they and the mount share. A supervisor keeps the configured
//! number of tablet servers and masters running, starting a fresh one
//! (under a new name, as a replacement machine would be) when one dies.

use crate::client::Client;
use crate::coordination::{ensure_layout, Lease};
use crate::env::{now_micros, Env};
use crate::master::Master;
use crate::options::Options;
use crate::tablet_server::TabletServer;
use crate::{Error, Result};
use chubby::LockService;
use gfs::FileStore;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Masters per daemon: the active one and a standby.
const MASTERS: usize = 2;

pub struct Cluster {
    pub env: Arc<Env>,
    pub client: Arc<Client>,
    /// Distinguishes this daemon's server names from earlier runs'.
    incarnation: String,
    started: AtomicU64,
    stop: Arc<AtomicBool>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
}

impl Cluster {
    /// Starts the cluster and waits until every tablet is served.
    pub fn start(
        store: Arc<dyn FileStore>,
        lock: Option<Arc<dyn LockService>>,
        opts: Options,
    ) -> Result<Arc<Cluster>> {
        let env = Env::new(store, lock, opts)?;
        ensure_layout(&*env.lock)?;
        // A second daemon on the same cell stops here rather than stand by.
        match Lease::try_master(env.lock.clone(), "probe", env.opts.server_lock_delay)? {
            Some(l) => drop(l),
            None => return Err(Error::Lock("another master holds /bigtable/master".into())),
        }
        let client = Arc::new(Client::new(env.clone()));
        let cluster = Arc::new(Cluster {
            env,
            client,
            incarnation: format!("{:x}", now_micros() % (1 << 40)),
            started: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            supervisor: Mutex::new(None),
        });
        for _ in 0..cluster.env.opts.tablet_servers.max(1) {
            cluster.add_server()?;
        }
        for _ in 0..MASTERS {
            cluster.add_master()?;
        }
        if let Err(e) = cluster.wait_ready(Duration::from_secs(120)) {
            let _ = cluster.stop();
            return Err(e);
        }
        let c = cluster.clone();
        let t = std::thread::Builder::new()
            .name("bt-supervisor".into())
            .spawn(move || c.supervise())
            .map_err(|e| Error::invalid(format!("cannot start a thread: {e}")))?;
        *cluster.supervisor.lock() = Some(t);
        Ok(cluster)
    }

    fn next_name(&self, kind: &str) -> String {
        let n = self.started.fetch_add(1, Ordering::AcqRel);
        format!("{kind}{n}-{}", self.incarnation)
    }

    /// Starts one more tablet server; returns its name.
    pub fn add_server(&self) -> Result<String> {
        let name = self.next_name("ts");
        let s = TabletServer::start(self.env.clone(), self.client.clone(), &name)?;
        self.env.add_server(s);
        if let Some(m) = self.env.active_master() {
            m.wake();
        }
        Ok(name)
    }

    fn add_master(&self) -> Result<()> {
        let m = Master::start(self.env.clone(), &self.next_name("master"))?;
        self.env.add_master(m);
        Ok(())
    }

    /// Waits until an active master has assigned every tablet.
    pub fn wait_ready(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if self.env.masters().iter().any(|m| m.is_ready()) {
                return Ok(());
            }
            if let Some(e) = self.env.masters().iter().find_map(|m| m.fatal_error()) {
                return Err(Error::Corruption(format!("the cluster cannot start: {e}")));
            }
            if Instant::now() >= deadline {
                let why: Vec<String> = self
                    .env
                    .masters()
                    .iter()
                    .filter_map(|m| m.last_error().map(|e| format!("{}: {e}", m.name)))
                    .collect();
                return Err(Error::Unavailable(format!(
                    "the cluster did not finish assigning tablets in time ({})",
                    why.join("; ")
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Keeps the configured numbers of live tablet servers and masters.
    fn supervise(self: Arc<Self>) {
        while !self.stop.load(Ordering::Acquire) {
            let live = self.env.servers().iter().filter(|s| s.is_serving()).count();
            if live < self.env.opts.tablet_servers.max(1) {
                if let Err(e) = self.add_server() {
                    log::warn!("cannot start a replacement tablet server: {e}");
                }
            }
            let masters = self.env.masters();
            let running = masters.iter().filter(|m| !m.is_stopped()).count();
            if running < MASTERS {
                self.env.retain_masters(|m| !m.is_stopped());
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
        s.kill();
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
        Ok(m.name.clone())
    }

    /// Orderly stop: masters first, then servers (each syncs its log).
    pub fn stop(&self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.supervisor.lock().take() {
            let _ = t.join();
        }
        for m in self.env.masters() {
            m.stop();
        }
        self.env.stopping.store(true, Ordering::Release);
        let mut result = Ok(());
        for s in self.env.servers() {
            if let Err(e) = s.stop() {
                result = Err(e);
            }
        }
        self.env.clear();
        result
    }
}
