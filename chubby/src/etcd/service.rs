//! `LockService` for `EtcdCell`: sessions and handles are the daemon's own
//! (its one lease stands for all of them in etcd); everything else goes to
//! the namespace and lock operations.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::Receiver;

use super::EtcdCell;
use crate::acl::{self, Credentials, READ, WRITE};
use crate::error::{Error, Result};
use crate::path;
use crate::sequencer::Sequencer;
use crate::service::{LockGrant, LockRequest, LockService, Wait};
use crate::types::{
    DirEntry, Event, HandleId, LockHolder, NodeKind, NodeSpec, OpenOptions, OwnerKey, SessionId,
    Stat, Target, WatchEvent,
};

impl EtcdCell {
    fn close_handle_impl(&self, handle: HandleId, dead: bool) -> Result<()> {
        self.release_handle(handle, dead);
        let (path, left) = {
            let mut local = self.local.lock();
            let (_, left) = local.sessions.close_handle(handle)?;
            (local.paths.remove(&handle), left)
        };
        match path {
            Some(p) if left == 0 => self.reap(&p),
            _ => Ok(()),
        }
    }
}

impl LockService for EtcdCell {
    fn open_session(&self, holder: &str) -> SessionId {
        self.local.lock().sessions.open_session(holder)
    }

    fn close_session(&self, session: SessionId) -> Result<()> {
        let handles = self.local.lock().sessions.remove_session(session)?;
        let mut first_err = None;
        for h in handles {
            if let Err(e) = self.close_handle_impl(h, true) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn open_handle(
        &self,
        session: SessionId,
        creds: &Credentials,
        p: &str,
        opts: &OpenOptions,
    ) -> Result<(HandleId, Stat)> {
        self.local.lock().sessions.session(session)?;
        path::components(p)?;
        let (f, created) = match (self.lookup(creds, p), &opts.create) {
            (Ok(_), Some(_)) if opts.exclusive => return Err(Error::Exists(p.to_string())),
            (Ok(f), _) => (f, false),
            (Err(Error::NotFound(_)), Some(spec)) => {
                (self.create_node(creds, p, spec, true)?, true)
            }
            (Err(e), _) => return Err(e),
        };
        if f.val.kind == NodeKind::Dir && opts.write {
            return Err(Error::IsDir(p.to_string()));
        }
        if !created {
            let want = if opts.read { READ } else { 0 } | if opts.write { WRITE } else { 0 };
            acl::check(creds, f.val.perm(), want, p)?;
        }
        let stat = self.stat_of(&f)?;
        let mut local = self.local.lock();
        let h = local
            .sessions
            .open_handle(session, f.val.id, opts.read, opts.write)?;
        local.paths.insert(h, f.path);
        Ok((h, stat))
    }

    fn close_handle(&self, handle: HandleId) -> Result<()> {
        self.close_handle_impl(handle, false)
    }

    fn handle_path(&self, handle: HandleId) -> Result<String> {
        let (f, _) = self.resolve_target(&Credentials::root(), Target::Handle(handle))?;
        Ok(f.path)
    }

    fn create(&self, creds: &Credentials, p: &str, spec: &NodeSpec) -> Result<Stat> {
        let f = self.create_node(creds, p, spec, false)?;
        self.stat_of(&f)
    }

    fn read(&self, creds: &Credentials, target: Target<'_>) -> Result<(Vec<u8>, Stat)> {
        self.read_impl(creds, target)
    }

    fn set_contents(&self, creds: &Credentials, target: Target<'_>, data: &[u8]) -> Result<Stat> {
        self.set_contents_impl(creds, target, data)
    }

    fn unlink(&self, creds: &Credentials, p: &str) -> Result<()> {
        self.unlink_impl(creds, p)
    }

    fn rmdir(&self, creds: &Credentials, p: &str) -> Result<()> {
        self.rmdir_impl(creds, p)
    }

    fn rename(&self, creds: &Credentials, from: &str, to: &str) -> Result<()> {
        self.rename_impl(creds, from, to)
    }

    fn list(&self, creds: &Credentials, p: &str) -> Result<Vec<DirEntry>> {
        self.list_impl(creds, p)
    }

    fn stat(&self, creds: &Credentials, target: Target<'_>) -> Result<Stat> {
        let (f, _) = self.resolve_target(creds, target)?;
        self.stat_of(&f)
    }

    fn chmod(&self, creds: &Credentials, target: Target<'_>, mode: u32) -> Result<Stat> {
        self.chmod_impl(creds, target, mode)
    }

    fn chown(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<Stat> {
        self.chown_impl(creds, target, uid, gid)
    }

    fn set_lock_delay(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        delay: Duration,
    ) -> Result<Stat> {
        self.set_lock_delay_impl(creds, target, delay)
    }

    fn set_ephemeral(
        &self,
        creds: &Credentials,
        target: Target<'_>,
        ephemeral: bool,
    ) -> Result<Stat> {
        self.set_ephemeral_impl(creds, target, ephemeral)
    }

    fn acquire(&self, req: LockRequest<'_>, wait: Wait<'_>) -> Result<LockGrant> {
        self.acquire_on_etcd(req, wait)
    }

    fn unlock(&self, owner: OwnerKey, target: Target<'_>) -> Result<bool> {
        self.unlock_impl(owner, target)
    }

    fn release_owner_dead(&self, owner: OwnerKey) -> usize {
        self.release_owner_dead_impl(owner)
    }

    fn holders(&self, target: Target<'_>) -> Result<Vec<LockHolder>> {
        self.holders_impl(target)
    }

    fn sequencer(&self, owner: OwnerKey, target: Target<'_>) -> Option<Sequencer> {
        self.sequencer_impl(owner, target)
    }

    fn check_sequencer(&self, seq: &Sequencer) -> bool {
        self.check_sequencer_impl(seq)
    }

    fn known_valid(&self, seq: &Sequencer) -> bool {
        self.known_valid_impl(seq)
    }

    fn known_held(&self, path: &str) -> bool {
        self.known_held_impl(path)
    }

    fn known_list(&self, dir: &str) -> Option<Vec<String>> {
        self.known_list_impl(dir)
    }

    fn subscribe(&self, creds: &Credentials, target: Target<'_>) -> Result<Receiver<Event>> {
        let (f, _) = self.resolve_target(creds, target)?;
        acl::check(creds, f.val.perm(), READ, &f.path)?;
        Ok(self.watch.inner.lock().events.subscribe(f.val.id))
    }

    fn watch_all(&self) -> Receiver<WatchEvent> {
        self.watch.inner.lock().events.watch_all()
    }

    fn status(&self) -> Vec<String> {
        let ttl = self.opts.lease_ttl;
        let health = match (self.lease.id(), self.lease.since_ok()) {
            (0, _) => "ended".to_string(),
            (_, Some(d)) if d < ttl => format!("ok last_answer_ms={}", d.as_millis()),
            (_, _) => "failing".to_string(),
        };
        // The lock_* lines are also `.bigtable/status`'s.
        let mut out = vec![
            format!(
                "lock_backend=etcd endpoints={} prefix={}",
                self.opts.endpoints.join(","),
                self.prefix
            ),
            format!(
                "lock_session lease={:x} ttl_s={} keepalive={health} failures={} sessions_lost={}",
                self.lease.id(),
                ttl.as_secs(),
                self.lease.failures.load(Ordering::SeqCst),
                self.lease.sessions_lost.load(Ordering::SeqCst)
            ),
            format!("lock_requests sent={}", self.requests()),
        ];
        {
            let w = self.watch.inner.lock();
            out.push(format!(
                "watch revision {} restarts {} subscribers {}",
                w.rev,
                w.restarts,
                w.events.subscriber_count()
            ));
        }
        let local = self.local.lock();
        out.push(format!(
            "sessions {} handles {}",
            local.sessions.sessions().count(),
            local.sessions.handle_count()
        ));
        out.push(format!("locks held here {}", local.held.len()));
        for h in &local.held {
            out.push(format!(
                "lock node {} owner {} {} generation {}",
                h.node, h.owner, h.mode, h.rev
            ));
        }
        out
    }
}
