//! Opening and closing handles and sessions: the points where ephemeral
//! nodes vanish and a dead client's locks enter lock-delay.

use crate::acl::{self, Credentials, READ, WRITE};
use crate::error::{Error, Result};
use crate::path;
use crate::types::{HandleId, OpenOptions, SessionId, Stat};

use super::state::State;

impl State {
    pub fn open_handle(
        &mut self,
        session: SessionId,
        creds: &Credentials,
        p: &str,
        opts: &OpenOptions,
    ) -> Result<(HandleId, Stat)> {
        self.sessions.session(session)?;
        let comps = path::components(p)?;
        let (id, created) = match (self.ns.resolve(creds, &comps), &opts.create) {
            (Ok(_), Some(_)) if opts.exclusive => return Err(Error::Exists(p.to_string())),
            (Ok(id), _) => (id, false),
            (Err(Error::NotFound(_)), Some(spec)) => {
                (self.create_node(creds, p, spec, true)?, true)
            }
            (Err(e), _) => return Err(e),
        };
        let node = self.ns.node(id)?;
        if node.children().is_some() && opts.write {
            return Err(Error::IsDir(p.to_string()));
        }
        // As open(2): the creator gets the access it asked for whatever the new mode says.
        if !created {
            let want = if opts.read { READ } else { 0 } | if opts.write { WRITE } else { 0 };
            acl::check(creds, node.meta.perm(), want, p)?;
        }
        let h = self
            .sessions
            .open_handle(session, id, opts.read, opts.write)?;
        Ok((h, self.ns.stat(id)?))
    }

    /// Closes a handle. Locks still held through it are released, with
    /// lock-delay if `dead`; an ephemeral node left with no handle vanishes.
    pub fn close_handle(&mut self, handle: HandleId, dead: bool) -> Result<()> {
        for (node, owner) in self.locks.taken_via(handle) {
            self.release(node, owner, dead);
        }
        let (h, left) = self.sessions.close_handle(handle)?;
        if left == 0 {
            self.reap(h.node)?;
        }
        Ok(())
    }

    /// Ends a session as a dead client: every lock taken through its handles
    /// is released with lock-delay, then the handles close.
    pub fn close_session(&mut self, session: SessionId) -> Result<()> {
        let holder = self.sessions.session(session)?.holder.clone();
        let handles = self.sessions.remove_session(session)?;
        log::debug!(
            "chubby: session {} ({holder}) closed with {} handles",
            session.0,
            handles.len()
        );
        let mut first_err = None;
        for h in handles {
            // Keep closing the rest even if reaping one node fails.
            if let Err(e) = self.close_handle(h, true) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
