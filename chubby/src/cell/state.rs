//! The cell's state behind its mutex, and the steps every operation shares:
//! resolving targets, logging a record, removing nodes, reaping ephemeral ones.

use std::time::Instant;

use crate::acl::{self, Credentials};
use crate::error::{Error, Result};
use crate::events::Events;
use crate::locks::LockTable;
use crate::namespace::{now_ns, Namespace};
use crate::path;
use crate::record::Record;
use crate::session::{Handle, Sessions};
use crate::store::{RecoveryInfo, Store};
use crate::types::{Event, NodeId, NodeKind, Target, ROOT_ID};

use super::CellOptions;

pub struct State {
    pub ns: Namespace,
    pub store: Store,
    pub locks: LockTable,
    pub sessions: Sessions,
    pub events: Events,
    pub opts: CellOptions,
    pub recovery: RecoveryInfo,
    /// Creates and writes refused for a user's quota (`.chubby/.status`).
    pub quota_refusals: u64,
}

impl State {
    /// Logs `rec` durably, then applies it.
    pub fn commit(&mut self, rec: Record) -> Result<()> {
        self.store.append(&rec)?;
        if let Err(e) = self.ns.apply(&rec) {
            // The record is durable but does not fit the tree: replay would
            // fail the same way, so stop writing and report it.
            let why = format!("logged record does not apply: {e}");
            log::error!("chubby: {why}");
            self.store.poison(why.clone());
            return Err(Error::corruption(why));
        }
        if let Err(e) = self.store.maybe_checkpoint(&self.ns) {
            // The operation itself is durable in the log; only compaction failed.
            log::error!("chubby: snapshot failed: {e}");
        }
        Ok(())
    }

    pub fn emit(&mut self, node: NodeId, event: Event) {
        if self.events.wanted(node) {
            let path = self.ns.path_of(node);
            self.events.emit(node, &path, event);
        }
    }

    pub fn resolve_path(&self, creds: &Credentials, p: &str) -> Result<NodeId> {
        let comps = path::components(p)?;
        self.ns.resolve(creds, &comps)
    }

    /// The node a target names, and the handle if it came through one.
    pub fn resolve_target(
        &self,
        creds: &Credentials,
        target: Target<'_>,
    ) -> Result<(NodeId, Option<Handle>)> {
        match target {
            Target::Path(p) => Ok((self.resolve_path(creds, p)?, None)),
            Target::Handle(h) => {
                let handle = self.sessions.handle(h)?;
                self.ns.node(handle.node)?;
                Ok((handle.node, Some(handle)))
            }
        }
    }

    /// The directory that would hold `p`, and `p`'s last name.
    pub fn resolve_parent<'p>(&self, creds: &Credentials, p: &'p str) -> Result<(NodeId, &'p str)> {
        let (comps, name) = path::split_last(p)?;
        let parent = self.ns.resolve(creds, &comps)?;
        if self.ns.node(parent)?.children().is_none() {
            return Err(Error::NotDir(self.ns.path_of(parent)));
        }
        Ok((parent, name))
    }

    pub fn check_access(&self, creds: &Credentials, id: NodeId, want: u32) -> Result<()> {
        let node = self.ns.node(id)?;
        acl::check(creds, node.meta.perm(), want, &self.ns.path_of(id))
    }

    /// Removes a file or empty directory (already validated), forgetting its
    /// lock and telling subscribers. Waiters must be woken by the caller.
    pub fn remove_node(&mut self, id: NodeId) -> Result<()> {
        let node = self.ns.node(id)?;
        let (parent, name) = (node.parent, node.name.clone());
        let path = self.ns.path_of(id);
        self.commit(Record::Remove {
            id,
            time_ns: now_ns(),
        })?;
        self.forget_removed(id, &path);
        self.emit(parent, Event::ChildRemoved(name));
        Ok(())
    }

    /// Bookkeeping after node `id` (formerly at `path`) left the tree.
    pub fn forget_removed(&mut self, id: NodeId, path: &str) {
        let owners = self.locks.remove_node(id);
        if !owners.is_empty() {
            log::info!("chubby: {path} removed while locked by owners {owners:?}");
        }
        self.events.emit(id, path, Event::Deleted);
    }

    /// Whether node `id` is ephemeral, unopened and (for a directory) empty.
    fn reapable(&self, id: NodeId) -> bool {
        match self.ns.get(id) {
            Some(n) => {
                id != ROOT_ID
                    && n.meta.ephemeral
                    && self.sessions.open_count(id) == 0
                    && n.children().is_none_or(|c| c.is_empty())
            }
            None => false,
        }
    }

    /// Removes `id` if it is a dead ephemeral node, then its parent likewise.
    pub fn reap(&mut self, mut id: NodeId) -> Result<()> {
        while self.reapable(id) {
            let parent = self.ns.node(id)?.parent;
            log::debug!("chubby: ephemeral {} vanishes", self.ns.path_of(id));
            self.remove_node(id)?;
            id = parent;
        }
        Ok(())
    }

    /// After a restart no handle is open: every ephemeral node goes.
    pub fn reap_all_ephemeral(&mut self) -> Result<()> {
        for id in self.ns.postorder(ROOT_ID) {
            if self.reapable(id) {
                self.remove_node(id)?;
            }
        }
        Ok(())
    }

    /// Releases `owner`'s lock on `node`; `dead` starts the node's lock-delay.
    pub fn release(&mut self, node: NodeId, owner: u64, dead: bool) -> bool {
        let delay = if dead {
            self.ns
                .get(node)
                .map(|n| std::time::Duration::from_millis(n.meta.lock_delay_ms))
        } else {
            None
        };
        let released = self
            .locks
            .release(node, owner, delay, Instant::now())
            .is_some();
        if released {
            self.emit(node, Event::LockReleased);
        }
        released
    }

    pub fn kind(&self, id: NodeId) -> Result<NodeKind> {
        Ok(self.ns.node(id)?.kind())
    }
}
