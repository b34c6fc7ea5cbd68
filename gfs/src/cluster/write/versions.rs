//! Each chunk's current replicas: the set that can take writes, new
//! versions that make dropped replicas stale, and forgetting a replica.

use super::{open_all, unavailable, Placed};
use crate::cluster::master::ChunkCtl;
use crate::cluster::oplog::Op;
use crate::cluster::{bump, Inner};
use crate::{Error, Result};
use std::sync::atomic::Ordering;

impl Inner {
    /// The replicas of chunk `handle` that can take writes and serve reads,
    /// and the servers listed for it whose replica cannot (to be dropped).
    pub(crate) fn write_set(&self, handle: u64) -> Result<(Vec<Placed>, Vec<usize>)> {
        let st = self.master.state.lock();
        let c = st
            .chunks
            .get(&handle)
            .ok_or_else(|| Error::NotFound(format!("chunk {handle:016x}")))?;
        let mut ok = Vec::new();
        let mut missing = Vec::new();
        for &s in &c.locations {
            let server = &self.servers[s];
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
    pub(super) fn new_version(&self, handle: u64, replicas: &[Placed]) -> Result<Vec<Placed>> {
        let name = format!("chunk {handle:016x}");
        let v = {
            let st = self.master.state.lock();
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
        let res = self.run_opened(&opens, |i, o, c| o.version_chain(c, &sbs[i]));
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
                    self.note_write_error(*s, &e);
                    r.mark_bad();
                    failed.push(*s);
                }
            }
        }
        drop(guards);
        if ok.is_empty() {
            return Err(unavailable(&name, "no replica took the new version"));
        }
        bump(&self.counters.version_bumps);
        let mut st = self.master.state.lock();
        self.master
            .commit(&mut st, Op::SetVersion { handle, version: v }, true)?;
        if let Some(c) = st.chunks.get_mut(&handle) {
            c.locations = ok.iter().map(|(s, _)| *s).collect();
            bump(&self.counters.placements);
        }
        drop(st);
        for s in failed {
            self.forget_replica(handle, s);
        }
        Ok(ok)
    }

    /// Removes the replicas on `servers` from chunk `handle` and, if the chunk
    /// can still change, gives the rest a new version so the removed ones are
    /// stale. The caller holds the chunk's lock. Returns the current replicas.
    pub(crate) fn drop_replicas_locked(
        &self,
        ctl: &ChunkCtl,
        servers: &[usize],
    ) -> Result<Vec<Placed>> {
        let handle = ctl.handle;
        {
            let mut st = self.master.state.lock();
            if let Some(c) = st.chunks.get_mut(&handle) {
                let before = c.locations.len();
                c.locations.retain(|s| !servers.contains(s));
                let n = before - c.locations.len();
                bump(&self.counters.placements);
                self.counters
                    .replicas_dropped
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        for &s in servers {
            self.forget_replica(handle, s);
        }
        self.repairs.wake();
        let (reps, missing) = self.write_set(handle)?;
        if !missing.is_empty() {
            return self.drop_replicas_locked(ctl, &missing);
        }
        if ctl.sealed.load(Ordering::Acquire) || reps.is_empty() {
            return Ok(reps);
        }
        self.new_version(handle, &reps)
    }

    /// Marks a replica unusable and deletes it if its server can be told to
    /// (a server that is down is not: its replicas are sorted out by version
    /// when it comes back).
    pub(crate) fn forget_replica(&self, handle: u64, server: usize) {
        let s = &self.servers[server];
        if let Some(r) = s.replica(handle) {
            r.mark_bad();
        }
        if s.serving() && !s.gate.is_offline() {
            s.delete(handle);
        }
    }
}
