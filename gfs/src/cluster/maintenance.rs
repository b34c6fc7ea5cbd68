//! What the master does besides serving clients: learn where replicas are
//! (at startup and when a chunkserver comes back), watch chunkservers with
//! heartbeats, collect garbage, and checkpoint.
//!
//! Deciding which replicas are current:
//! - a replica of a chunk the master does not know is an orphan (a chunk
//!   allocated just before a crash, or of a purged file): deleted;
//! - a version below the master's is stale (its server missed a mutation
//!   while down): deleted, never served; a version above it means the master
//!   died while granting a lease, and the higher version is adopted;
//! - a sealed chunk's replicas must hold exactly its logged length; for the
//!   open last chunk the longest current replica wins (it holds every
//!   acknowledged append, all verified) and shorter ones are deleted.

use super::oplog::Op;
use super::server::{Health, Probe, Scan, Start};
use super::write::drop_replicas_locked;
use super::{bump, Inner};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) fn heartbeat_loop(inner: Arc<Inner>) {
    while !inner.stopping() {
        inner.heartbeat_signal.wait(inner.opts.heartbeat);
        if inner.stopping() {
            break;
        }
        heartbeat_once(&inner);
    }
}

pub(crate) fn heartbeat_once(inner: &Inner) {
    check_servers(inner);
    if let Err(e) = inner.master.check_copies() {
        log::warn!("gfs master: re-creating copies: {e}");
    }
    if let Err(e) = collect_garbage(inner) {
        log::warn!("gfs: garbage collection: {e}");
    }
    if let Err(e) = inner.master.checkpoint(false) {
        log::warn!("gfs: checkpoint: {e}");
    }
}

/// Starts every chunkserver and reconciles their replicas with the
/// master's chunk map. Fails only if no chunkserver starts.
pub(crate) fn start_servers(inner: &Inner) -> Result<()> {
    let mut scans = Vec::new();
    for s in &inner.servers {
        match s.start(&inner.io, Start::First) {
            Ok(scan) => scans.push((s.id, scan)),
            Err(why) => {
                log::error!("gfs: chunkserver {} ({}): {why}", s.id, s.dir.display());
                s.set_health(Health::Failed(why));
            }
        }
    }
    if scans.is_empty() {
        return Err(Error::io(
            "gfs cluster",
            std::io::Error::other("no chunkserver could start"),
        ));
    }
    reconcile(inner, scans)
}

fn reconcile(inner: &Inner, scans: Vec<(usize, Scan)>) -> Result<()> {
    let mut st = inner.master.state.lock();
    // Per handle: (server, version, length, chunk size) of each replica.
    let mut by_handle: HashMap<u64, Vec<(usize, u64, u64, u64)>> = HashMap::new();
    let mut unreadable = Vec::new();
    // Replicas loading found damaged (marked bad): no say in the chunk's
    // version or length, replaced from the good copies.
    let mut damaged = Vec::new();
    for (s, scan) in scans {
        bump_by(&inner.counters.corruptions, scan.corrupt.len());
        for r in scan.reports {
            if r.replica.is_bad() {
                damaged.push((s, r.replica.handle));
                continue;
            }
            by_handle.entry(r.replica.handle).or_default().push((
                s,
                r.version,
                r.len,
                r.replica.chunk_size(),
            ));
        }
        unreadable.extend(scan.unreadable.into_iter().map(|(h, _)| (s, h)));
    }
    let mut deletions: Vec<(usize, u64)> = Vec::new();
    let mut adopted = false;
    for (h, reps) in by_handle {
        let Some(c) = st.chunks.get(&h) else {
            bump_by(&inner.counters.orphans_deleted, reps.len());
            deletions.extend(reps.iter().map(|&(s, ..)| (s, h)));
            continue;
        };
        let maxv = reps.iter().map(|r| r.1).max().unwrap_or(0);
        if maxv > c.version {
            log::warn!("gfs: chunk {h:016x}: adopting version {maxv} found on a replica");
            inner.master.commit(
                &mut st,
                Op::SetVersion {
                    handle: h,
                    version: maxv,
                },
                false,
            )?;
            adopted = true;
        }
        let Some(c) = st.chunks.get_mut(&h) else {
            continue;
        };
        let (current, stale): (Vec<_>, Vec<_>) = reps.into_iter().partition(|r| r.1 == c.version);
        for (s, v, ..) in &stale {
            log::warn!(
                "gfs: chunk {h:016x}: chunkserver {s} holds stale version {v} (current {}); deleting it",
                c.version
            );
            bump(&inner.counters.stale_deleted);
            deletions.push((*s, h));
        }
        let want = match c.sealed_len {
            Some(l) => l,
            None => current.iter().map(|r| r.2).max().unwrap_or(0),
        };
        let (good, short): (Vec<_>, Vec<_>) = current.into_iter().partition(|r| r.2 == want);
        if good.is_empty() {
            if !short.is_empty() {
                log::error!(
                    "gfs: chunk {h:016x}: no replica holds its {want} bytes; keeping them for inspection"
                );
            }
        } else {
            for (s, _, len, _) in &short {
                log::warn!(
                    "gfs: chunk {h:016x}: chunkserver {s} holds {len} of {want} bytes; deleting it"
                );
                deletions.push((*s, h));
            }
        }
        c.locations = good.iter().map(|r| r.0).collect();
        c.placement_changed();
        if let Some(cap) = good.iter().map(|r| r.3).min() {
            c.ctl.capacity.store(cap, Ordering::Release);
        }
        if c.sealed_len.is_none() {
            c.ctl.len.store(want, Ordering::Release);
        }
    }
    for (s, h) in unreadable {
        if st.chunks.get(&h).is_none_or(|c| !c.locations.is_empty()) {
            deletions.push((s, h));
        }
    }
    for (s, h) in damaged {
        match st.chunks.get(&h) {
            None => {
                bump(&inner.counters.orphans_deleted);
                deletions.push((s, h));
            }
            Some(c) if !c.locations.is_empty() => deletions.push((s, h)),
            Some(_) => log::error!(
                "gfs: chunk {h:016x}: chunkserver {s} holds the only copy and it is damaged; keeping it for inspection"
            ),
        }
    }
    if adopted {
        let (lsn, ..) = inner.master.log_position();
        inner.master.sync_to(lsn)?;
    }
    drop(st);
    for (s, h) in deletions {
        inner.servers[s].delete(h);
    }
    inner.repairs.wake();
    Ok(())
}

/// Probes every chunkserver: fails the ones that went away, restarts the
/// ones whose directory is back.
pub(crate) fn check_servers(inner: &Inner) {
    for s in &inner.servers {
        match s.health() {
            Health::Failed(_) => {
                if !s.dir_present() {
                    continue;
                }
                match s.start(&inner.io, Start::Again) {
                    Ok(scan) => {
                        log::warn!("gfs: chunkserver {} ({}) is back", s.id, s.dir.display());
                        rejoin(inner, s.id, scan);
                    }
                    Err(why) => s.set_health(Health::Failed(why)),
                }
            }
            h => match s.probe() {
                Probe::Ok => {
                    if h != Health::Healthy {
                        log::info!("gfs: chunkserver {} has space again", s.id);
                        s.set_health(Health::Healthy);
                    }
                }
                Probe::Full(why) => {
                    if h == Health::Healthy {
                        log::warn!("gfs: chunkserver {} ({}): {why}", s.id, s.dir.display());
                    }
                    s.set_health(Health::Full(why));
                }
                Probe::Down(why) => fail_server(inner, s.id, why),
            },
        }
    }
}

/// Takes a chunkserver out: its replicas stop serving and are copied
/// elsewhere.
fn fail_server(inner: &Inner, id: usize, why: String) {
    let s = &inner.servers[id];
    log::error!(
        "gfs: chunkserver {id} ({}) failed: {why}; re-replicating its chunks",
        s.dir.display()
    );
    s.set_health(Health::Failed(why));
    for r in s.forget_all() {
        let ctl = {
            let st = inner.master.state.lock();
            match st.chunks.get(&r.handle) {
                Some(c) if c.locations.contains(&id) => c.ctl.clone(),
                _ => continue,
            }
        };
        let _m = ctl.m.lock();
        if let Err(e) = drop_replicas_locked(inner, &ctl, &[id]) {
            log::warn!("gfs: chunk {:016x}: {e}", r.handle);
        }
    }
    inner.repairs.wake();
}

/// A chunkserver came back: keep its replicas that are current and
/// complete and still needed; delete the rest (stale ones by version).
fn rejoin(inner: &Inner, id: usize, scan: Scan) {
    let server = &inner.servers[id];
    bump_by(&inner.counters.corruptions, scan.corrupt.len());
    for rep in scan.reports {
        let h = rep.replica.handle;
        let ctl = {
            let st = inner.master.state.lock();
            match st.chunks.get(&h) {
                Some(c) => c.ctl.clone(),
                None => {
                    if !st.allocating.contains(&h) {
                        bump(&inner.counters.orphans_deleted);
                        drop(st);
                        server.delete(h);
                    }
                    continue;
                }
            }
        };
        let _m = ctl.m.lock();
        let mut st = inner.master.state.lock();
        let Some(c) = st.chunks.get_mut(&h) else {
            continue;
        };
        let want = c
            .sealed_len
            .unwrap_or_else(|| ctl.len.load(Ordering::Acquire));
        if rep.replica.is_bad() {
            // Damaged (counted above): the good copies replace it.
            if c.locations.iter().any(|&s| s != id) {
                drop(st);
                server.delete(h);
            } else {
                log::error!(
                    "gfs: chunk {h:016x}: chunkserver {id} came back with the only copy, damaged; keeping it for inspection"
                );
            }
        } else if rep.version < c.version {
            log::warn!(
                "gfs: chunk {h:016x}: chunkserver {id} came back with stale version {} (current {}); deleting it",
                rep.version,
                c.version
            );
            bump(&inner.counters.stale_deleted);
            drop(st);
            server.delete(h);
        } else if rep.version == c.version
            && rep.len == want
            && !c.locations.contains(&id)
            && c.locations.len() < inner.replication
        {
            c.locations.push(id);
            c.placement_changed();
            bump(&inner.counters.placements);
        } else if rep.version > c.version {
            log::error!(
                "gfs: chunk {h:016x}: chunkserver {id} holds version {} above the master's {}; leaving it unused",
                rep.version,
                c.version
            );
        } else if !c.locations.contains(&id) {
            drop(st);
            server.delete(h);
        }
    }
    for (h, _) in scan.unreadable {
        server.delete(h);
    }
    inner.repairs.wake();
}

/// Purges trashed files past the delay that nobody has open, and deletes
/// replicas no chunk owns. Returns the number of files purged.
pub(crate) fn collect_garbage(inner: &Inner) -> Result<usize> {
    let now = super::master::now_us();
    let delay = inner.opts.gc_delay.as_micros() as u64;
    let victims: Vec<u64> = {
        let st = inner.master.state.lock();
        st.files
            .iter()
            .filter(|(_, f)| {
                f.name.is_none() && f.open == 0 && now >= f.deleted_at.saturating_add(delay)
            })
            .map(|(&id, _)| id)
            .collect()
    };
    let mut purged = 0;
    for id in victims {
        let handles = {
            let mut st = inner.master.state.lock();
            let Some(f) = st.files.get(&id) else { continue };
            if f.open > 0 {
                continue;
            }
            let handles = f.chunks.clone();
            inner
                .master
                .commit(&mut st, Op::Purge { file: id }, false)?;
            handles
        };
        for h in handles {
            for s in &inner.servers {
                if s.replica(h).is_some() && s.serving() && !s.gate.is_offline() {
                    s.delete(h);
                }
            }
        }
        purged += 1;
        bump(&inner.counters.files_purged);
    }
    // Orphans: replicas of chunks the master does not know.
    let orphans: Vec<(usize, u64)> = {
        let st = inner.master.state.lock();
        inner
            .servers
            .iter()
            .filter(|s| s.serving() && !s.gate.is_offline())
            .flat_map(|s| s.handles().into_iter().map(move |h| (s.id, h)))
            .filter(|(_, h)| !st.chunks.contains_key(h) && !st.allocating.contains(h))
            .collect()
    };
    for (s, h) in orphans {
        bump(&inner.counters.orphans_deleted);
        inner.servers[s].delete(h);
    }
    Ok(purged)
}

fn bump_by(c: &std::sync::atomic::AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}
