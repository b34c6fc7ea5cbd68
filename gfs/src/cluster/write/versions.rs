//! Each chunk's current replicas: the set that can take writes, new
//! versions that make dropped replicas stale, and forgetting a replica.

use super::{note_write_error, open_all, run_opened, unavailable, Placed};
use crate::cluster::master::ChunkCtl;
use crate::cluster::oplog::Op;
use crate::cluster::{bump, Inner};
use crate::{Error, Result};
use std::sync::atomic::Ordering;

/// The replicas of chunk `handle` that can take writes and serve reads,
/// and the servers listed for it whose replica cannot (to be dropped).
pub(crate) fn write_set(inner: &Inner, handle: u64) -> Result<(Vec<Placed>, Vec<usize>)> {
    let st = inner.master.state.lock();
    let c = st
        .chunks
        .get(&handle)
        .ok_or_else(|| Error::NotFound(format!("chunk {handle:016x}")))?;
    let mut ok = Vec::new();
    let mut missing = Vec::new();
    for &s in &c.locations {
        let server = &inner.servers[s];
        match server.replica(handle) {
            // A higher version than the master's means the master failed
            // to log a version it had already given the replicas.
            Some(r) if server.serving() && !r.is_bad() && r.version() >= c.version => {
                ok.push((s, r))
            }
            _ => missing.push(s),
        }
    }
    Ok((ok, missing))
}

/// Gives the chunk a new version on `replicas` (durably, one submission),
/// then logs it; replicas that fail are dropped. The caller holds the
/// chunk's lock. Returns the replicas now current.
pub(super) fn new_version(inner: &Inner, handle: u64, replicas: &[Placed]) -> Result<Vec<Placed>> {
    let name = format!("chunk {handle:016x}");
    let v = {
        let st = inner.master.state.lock();
        let c = st
            .chunks
            .get(&handle)
            .ok_or_else(|| Error::NotFound(name.clone()))?;
        let highest = replicas.iter().map(|(_, r)| r.version()).max().unwrap_or(0);
        c.version.max(highest) + 1
    };
    let sbs: Vec<[u8; 64]> = replicas.iter().map(|(_, r)| r.superblock(v)).collect();
    // Scrubs compare the superblock with the in-memory version: keep them
    // out until both agree again.
    let guards: Vec<_> = replicas.iter().map(|(_, r)| r.lock_io()).collect();
    let opens = open_all(replicas.iter().map(|p| &*p.1), false);
    let res = run_opened(inner, &opens, |i, o, c| o.version_chain(c, &sbs[i]));
    drop(opens);
    let mut ok = Vec::new();
    let mut failed = Vec::new();
    for ((s, r), res) in replicas.iter().zip(res) {
        match res {
            Ok(()) => {
                r.set_version(v);
                ok.push((*s, r.clone()));
            }
            Err(e) => {
                note_write_error(inner, *s, &e);
                r.mark_bad();
                failed.push(*s);
            }
        }
    }
    drop(guards);
    if ok.is_empty() {
        return Err(unavailable(&name, "no replica took the new version"));
    }
    bump(&inner.counters.version_bumps);
    let mut st = inner.master.state.lock();
    inner
        .master
        .commit(&mut st, Op::SetVersion { handle, version: v }, true)?;
    if let Some(c) = st.chunks.get_mut(&handle) {
        c.locations = ok.iter().map(|(s, _)| *s).collect();
        c.placement_changed();
        bump(&inner.counters.placements);
    }
    drop(st);
    for s in failed {
        forget_replica(inner, handle, s);
    }
    Ok(ok)
}

/// Removes the replicas on `servers` from chunk `handle` and, if the chunk
/// can still change, gives the rest a new version so the removed ones are
/// stale. The caller holds the chunk's lock. Returns the current replicas.
pub(crate) fn drop_replicas_locked(
    inner: &Inner,
    ctl: &ChunkCtl,
    servers: &[usize],
) -> Result<Vec<Placed>> {
    let handle = ctl.handle;
    {
        let mut st = inner.master.state.lock();
        if let Some(c) = st.chunks.get_mut(&handle) {
            let before = c.locations.len();
            c.locations.retain(|s| !servers.contains(s));
            c.placement_changed();
            let n = before - c.locations.len();
            bump(&inner.counters.placements);
            inner
                .counters
                .replicas_dropped
                .fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    for &s in servers {
        forget_replica(inner, handle, s);
    }
    inner.repairs.wake();
    let (reps, missing) = write_set(inner, handle)?;
    if !missing.is_empty() {
        return drop_replicas_locked(inner, ctl, &missing);
    }
    if ctl.sealed.load(Ordering::Acquire) || reps.is_empty() {
        return Ok(reps);
    }
    new_version(inner, handle, &reps)
}

/// Marks a replica unusable and deletes it if its server can be told to
/// (a server that is down is not: its replicas are sorted out by version
/// when it comes back).
pub(crate) fn forget_replica(inner: &Inner, handle: u64, server: usize) {
    let s = &inner.servers[server];
    if let Some(r) = s.replica(handle) {
        r.mark_bad();
    }
    if s.serving() && !s.gate.is_offline() {
        s.delete(handle);
    }
}
