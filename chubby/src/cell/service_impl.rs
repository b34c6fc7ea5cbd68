//! `LockService` for `LocalCell`: each call takes the mutex, runs the
//! operation on the state, and wakes lock waiters when a lock or node may
//! have gone away.

use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Receiver;

use crate::acl::{Credentials, READ};
use crate::error::Result;
use crate::sequencer::Sequencer;
use crate::service::{LockGrant, LockService};
use crate::types::{
    DirEntry, Event, HandleId, LockHolder, LockMode, NodeSpec, OpenOptions, OwnerKey, SessionId,
    Stat, Target, WatchEvent,
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

    fn try_lock(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
    ) -> Result<LockGrant> {
        self.try_lock_impl(creds, owner, target, mode)
    }

    fn lock_wait(
        &self,
        creds: &Credentials,
        owner: OwnerKey,
        target: Target<'_>,
        mode: LockMode,
        deadline: Option<Instant>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<LockGrant> {
        self.lock_wait_impl(creds, owner, target, mode, deadline, cancelled)
    }

    fn unlock(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool> {
        self.unlock_impl(owner, target)
    }

    fn release_owner_dead(&self, owner: OwnerKey) -> usize {
        self.release_owner_dead_impl(owner)
    }

    fn holders(&self, target: Target<'_>) -> Result<Vec<LockHolder>> {
        let st = self.state.lock();
        let (node, _) = st.resolve_target(&Credentials::root(), target)?;
        Ok(st.locks.holders(node))
    }

    fn sequencer(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer> {
        self.sequencer_impl(owner, target)
    }

    fn check_sequencer(&self, seq: &Sequencer) -> bool {
        self.check_sequencer_impl(seq)
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
