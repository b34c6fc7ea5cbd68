//! `LockService` for `LocalCell`: each call takes the mutex, runs the
//! operation on the state, and wakes lock waiters when a lock or node may
//! have gone away.

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;

use crate::acl::{Credentials, READ};
use crate::error::{Error, Result};
use crate::sequencer::Sequencer;
use crate::service::{LockGrant, LockRequest, LockService, Wait};
use crate::types::{
    DirEntry, Event, HandleId, LockHolder, NodeSpec, OpenOptions, OwnerKey, SessionId, Stat,
    Target, WatchEvent,
};

use super::LocalCell;

impl LocalCell {
    /// Runs a mutation that may remove nodes or release locks, then wakes waiters.
    fn mutate<T>(&self, f: impl FnOnce(&mut super::state::State) -> Result<T>) -> Result<T> {
        let mut st = self.state.lock();
        let res = f(&mut st);
        drop(st);
        self.cond.notify_all();
        res
    }
}

impl LockService for LocalCell {
    fn open_session(&self, holder: &str) -> SessionId {
        self.state.lock().sessions.open_session(holder)
    }

    fn close_session(&self, session: SessionId) -> Result<()> {
        self.mutate(|st| st.close_session(session))
    }

    fn open_handle(
        &self,
        session: SessionId,
        creds: &Credentials,
        path: &str,
        opts: &OpenOptions,
    ) -> Result<(HandleId, Stat)> {
        self.state.lock().open_handle(session, creds, path, opts)
    }

    fn close_handle(&self, handle: HandleId) -> Result<()> {
        self.mutate(|st| st.close_handle(handle, false))
    }

    fn handle_path(&self, handle: HandleId) -> Result<String> {
        let st = self.state.lock();
        let h = st.sessions.handle(handle)?;
        st.ns.node(h.node)?;
        Ok(st.ns.path_of(h.node))
    }

    fn create(&self, creds: &Credentials, path: &str, spec: &NodeSpec) -> Result<Stat> {
        let mut st = self.state.lock();
        let id = st.create_node(creds, path, spec, false)?;
        st.ns.stat(id)
    }

    fn read(&self, creds: &Credentials, target: Target<'_>) -> Result<(Vec<u8>, Stat)> {
        self.state.lock().read(creds, target)
    }

    fn set_contents(&self, creds: &Credentials, target: Target<'_>, data: &[u8]) -> Result<Stat> {
        self.state.lock().set_contents(creds, target, data)
    }

    fn unlink(&self, creds: &Credentials, path: &str) -> Result<()> {
        self.mutate(|st| st.unlink(creds, path))
    }

    fn rmdir(&self, creds: &Credentials, path: &str) -> Result<()> {
        self.mutate(|st| st.rmdir(creds, path))
    }

    fn rename(&self, creds: &Credentials, from: &str, to: &str) -> Result<()> {
        self.mutate(|st| st.rename(creds, from, to))
    }

    fn list(&self, creds: &Credentials, path: &str) -> Result<Vec<DirEntry>> {
        self.state.lock().list(creds, path)
    }

    fn stat(&self, creds: &Credentials, target: Target<'_>) -> Result<Stat> {
        self.state.lock().stat(creds, target)
    }

    fn chmod(&self, creds: &Credentials, target: Target<'_>, mode: u32) -> Result<Stat> {
        self.state.lock().chmod(creds, target, mode)
    }

    fn chown(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Stat> {
        self.state.lock().chown(creds, target, uid, gid)
    }

    fn set_lock_delay(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        delay: Duration,
    ) -> Result<Stat> {
        self.state.lock().set_lock_delay(creds, target, delay)
    }

    fn set_ephemeral(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        ephemeral: bool,
    ) -> Result<Stat> {
        self.mutate(|st| st.set_ephemeral(creds, target, ephemeral))
    }

    fn acquire(&self, req: LockRequest<'_>, wait: Wait<'_>) -> Result<LockGrant> {
        let (owner, mode) = (req.owner, req.mode);
        if let Wait::Until { cancelled, .. } = wait {
            if cancelled() {
                return Err(Error::Interrupted);
            }
        }
        let mut st = self.state.lock();
        let (node, handle) = st.lock_target(req.creds, req.target)?;
        if let Some(res) = st.convert(node, owner, mode, handle) {
            self.cond.notify_all();
            return res;
        }
        let Wait::Until {
            deadline,
            cancelled,
        } = wait
        else {
            if st.locks.held(node, owner).is_some() {
                return Err(Error::WouldBlock);
            }
            return match st.locks.check(node, owner, mode, None, Instant::now()) {
                Ok(()) => st.grant(node, owner, mode, handle),
                Err(_) => Err(Error::WouldBlock),
            };
        };
        if st.locks.held(node, owner).is_some() {
            // An upgrade that must wait gives up the shared lock first, as
            // flock(2) does; two waiting upgraders cannot deadlock.
            st.release(node, owner, false);
            self.cond.notify_all();
        }
        let ticket = st.locks.enqueue(node, owner, mode);
        let res = self.wait_turn(
            &mut st, node, owner, mode, handle, ticket, deadline, cancelled,
        );
        st.locks.dequeue(node, ticket, Instant::now());
        // Our grant or departure may let the next waiter in.
        self.cond.notify_all();
        res
    }

    fn unlock(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool> {
        let mut st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target)?;
        let released = st.release(node, owner, false);
        if released {
            self.cond.notify_all();
        }
        Ok(released)
    }

    fn release_owner_dead(&self, owner: OwnerKey) -> usize {
        let mut st = self.state.lock();
        let mut n = 0;
        for node in st.locks.nodes_of(owner) {
            if st.release(node, owner, true) {
                n += 1;
            }
        }
        if n > 0 {
            self.cond.notify_all();
        }
        n
    }

    fn holders(&self, target: Target<'_>) -> Result<Vec<LockHolder>> {
        let st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target)?;
        Ok(st.locks.holders(node))
    }

    fn sequencer(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer> {
        let st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target).ok()?;
        let held = st.locks.held(node, owner)?;
        st.grant_of(node, held.mode).ok().map(|g| g.sequencer)
    }

    fn check_sequencer(&self, seq: &Sequencer) -> bool {
        let st = self.state.lock();
        let Ok(node) = st.resolve_path(&Credentials::root(), &seq.path) else {
            return false;
        };
        let generation = st.ns.get(node).map(|n| n.meta.lock_gen);
        st.locks.mode_held(node) == Some(seq.mode) && generation == Some(seq.generation)
    }

    fn subscribe(&self, creds: &Credentials, target: Target<'_>) -> Result<Receiver<Event>> {
        let mut st = self.state.lock();
        let (id, _) = st.resolve_target(creds, target)?;
        st.check_access(creds, id, READ)?;
        Ok(st.events.subscribe(id))
    }

    fn watch_all(&self) -> Receiver<WatchEvent> {
        self.state.lock().events.watch_all()
    }

    fn status(&self) -> Vec<String> {
        let st = self.state.lock();
        let mut out = vec![format!("nodes {}", st.ns.len())];
        out.extend(st.store.status());
        let (locked, holders, waiters) = st.locks.counts();
        out.push(format!(
            "recovered snapshot_seq {} replayed {} skipped {}",
            st.recovery.snapshot_seq, st.recovery.replayed, st.recovery.skipped
        ));
        out.push(format!(
            "sessions {} handles {}",
            st.sessions.sessions().count(),
            st.sessions.handle_count()
        ));
        out.push(format!(
            "locks held {locked} holders {holders} waiters {waiters}"
        ));
        out.push(format!("subscribers {}", st.events.subscriber_count()));
        out.push(format!(
            "quota nodes {} bytes {} refusals {}",
            st.opts.quota_nodes, st.opts.quota_bytes, st.quota_refusals
        ));
        let now = SystemTime::now();
        for (id, s) in st.sessions.sessions() {
            let age = now.duration_since(s.opened).unwrap_or_default();
            out.push(format!(
                "session {} holder {:?} handles {} age_s {}",
                id.0,
                s.holder,
                s.handles.len(),
                age.as_secs()
            ));
        }
        let fmt = |hs: &[LockHolder]| {
            hs.iter()
                .map(|h| format!("{}:{}", h.owner, h.mode))
                .collect::<Vec<_>>()
                .join(" ")
        };
        for info in st.locks.describe(Instant::now()) {
            let gen = st.ns.get(info.node).map_or(0, |n| n.meta.lock_gen);
            let mut line = format!(
                "lock {} generation {gen} holders [{}] waiters [{}]",
                st.ns.path_of(info.node),
                fmt(&info.holders),
                fmt(&info.waiters)
            );
            if let Some(d) = info.delay_left {
                line.push_str(&format!(" lock_delay_left_ms {}", d.as_millis()));
            }
            out.push(line);
        }
        out
    }
}
