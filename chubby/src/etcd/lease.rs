//! The daemon's session: one etcd lease, kept alive by a thread. Safety does
//! not rest on etcd's clock: when keep-alives have failed for longer than
//! the lease (counted from the *sending* of the last one answered, so never
//! later than etcd's own expiry), the daemon ends the session itself: its
//! locks are forgotten, its sequencers fail their check, and a new lease is
//! taken once etcd answers again.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{EtcdCell, Local};
use crate::error::{Error, Result};

#[derive(Default)]
pub struct LeaseState {
    id: AtomicI64,
    /// When the last answered keep-alive (or the grant) was sent.
    last_ok: Mutex<Option<Instant>>,
    /// Keep-alives failed in a row, and sessions ended by the daemon.
    pub failures: AtomicU64,
    pub sessions_lost: AtomicU64,
}

impl LeaseState {
    pub fn id(&self) -> i64 {
        self.id.load(Ordering::SeqCst)
    }

    /// Whether the session is alive as far as the daemon can tell.
    pub fn alive(&self, ttl: Duration) -> bool {
        self.id() != 0 && self.last_ok.lock().is_some_and(|t| t.elapsed() < ttl)
    }

    pub fn since_ok(&self) -> Option<Duration> {
        self.last_ok.lock().map(|t| t.elapsed())
    }
}

impl EtcdCell {
    /// Takes a new lease for the session.
    pub(super) fn grant_lease(&self) -> Result<()> {
        let ttl = self.opts.lease_ttl.as_secs().max(1) as i64;
        let sent = Instant::now();
        let r = self.run("grant the session's lease", move |mut c| async move {
            c.lease_grant(ttl, None).await
        })?;
        if r.id() == 0 {
            return Err(Error::invalid(format!(
                "etcd refused a lease: {}",
                r.error()
            )));
        }
        self.lease.id.store(r.id(), Ordering::SeqCst);
        *self.lease.last_ok.lock() = Some(sent);
        log::info!("chubby: etcd session lease {:x} ttl {ttl}s", r.id());
        Ok(())
    }

    /// One keep-alive; whether etcd still has the lease.
    fn keep_alive_once(&self, id: i64) -> Result<bool> {
        let r = self.run("keep the lease alive", move |mut c| async move {
            let (mut keeper, mut stream) = c.lease_keep_alive(id).await?;
            keeper.keep_alive().await?;
            stream.message().await
        });
        match r {
            Ok(Some(resp)) => Ok(resp.ttl() > 0),
            Ok(None) => Err(super::etcd_err("keep the lease alive", "stream ended")),
            Err(e) if e.to_string().contains("lease not found") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ends the session in the daemon: every lock it held is gone.
    fn lose_session(&self, why: &str) {
        let id = self.lease.id.swap(0, Ordering::SeqCst);
        self.lease.sessions_lost.fetch_add(1, Ordering::SeqCst);
        log::warn!("chubby: etcd session lease {id:x} ended: {why}");
        let mut local = self.local.lock();
        let Local {
            held, lost_leases, ..
        } = &mut *local;
        lost_leases.insert(id);
        held.clear();
        drop(local);
        self.watch.poke();
    }
}

/// Starts the keep-alive thread (it holds the cell weakly and ends with it).
pub fn start_keeper(cell: &Arc<EtcdCell>) -> Result<()> {
    let weak: Weak<EtcdCell> = Arc::downgrade(cell);
    let stop = cell.stop.clone();
    let period = (cell.opts.lease_ttl / 4).max(Duration::from_millis(100));
    std::thread::Builder::new()
        .name("chubby-etcd-lease".into())
        .spawn(move || {
            let mut ticks = 0u64;
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(period);
                let Some(cell) = weak.upgrade() else { return };
                tick(&cell);
                // Once a lease period: clear markers nobody else will.
                ticks += 1;
                if ticks % 4 == 1 {
                    if let Err(e) = cell.sweep_markers() {
                        log::debug!("chubby: sweeping lock markers: {e}");
                    }
                }
            }
        })
        .map_err(|e| Error::io("lease thread", e))?;
    Ok(())
}

fn tick(cell: &EtcdCell) {
    let ttl = cell.opts.lease_ttl;
    let id = cell.lease.id();
    if id == 0 {
        // The session ended: start a new one as soon as etcd answers.
        if cell.grant_lease().is_ok() {
            cell.lease.failures.store(0, Ordering::SeqCst);
        }
        return;
    }
    let sent = Instant::now();
    match cell.keep_alive_once(id) {
        Ok(true) => {
            *cell.lease.last_ok.lock() = Some(sent);
            cell.lease.failures.store(0, Ordering::SeqCst);
        }
        Ok(false) => cell.lose_session("etcd no longer has the lease"),
        Err(e) => {
            let n = cell.lease.failures.fetch_add(1, Ordering::SeqCst) + 1;
            log::warn!("chubby: keep-alive {n} failed: {e}");
            if !cell.lease.alive(ttl) {
                cell.lose_session("keep-alives failed for longer than the lease");
            }
        }
    }
}
