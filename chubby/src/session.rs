//! Sessions and handles. A session stands for one client (a process, a
//! tablet server); its handles keep ephemeral nodes alive, and its death
//! releases every lock taken through them. None of this is durable: after a
//! restart every client is new.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::types::{HandleId, NodeId, SessionId};

#[derive(Debug)]
pub struct Session {
    pub holder: String,
    pub opened: SystemTime,
    pub handles: BTreeSet<HandleId>,
}

#[derive(Clone, Copy, Debug)]
pub struct Handle {
    pub session: SessionId,
    pub node: NodeId,
    pub read: bool,
    pub write: bool,
}

#[derive(Debug, Default)]
pub struct Sessions {
    sessions: BTreeMap<SessionId, Session>,
    handles: HashMap<HandleId, Handle>,
    open_count: HashMap<NodeId, usize>,
    next_session: u64,
    next_handle: u64,
}

impl Sessions {
    pub fn open_session(&mut self, holder: &str) -> SessionId {
        self.next_session += 1;
        let id = SessionId(self.next_session);
        self.sessions.insert(
            id,
            Session {
                holder: holder.to_string(),
                opened: SystemTime::now(),
                handles: BTreeSet::new(),
            },
        );
        id
    }

    pub fn session(&self, id: SessionId) -> Result<&Session> {
        self.sessions
            .get(&id)
            .ok_or_else(|| Error::BadHandle(format!("no session {}", id.0)))
    }

    /// Removes a session, returning its handles (still open: the caller
    /// closes them so that it can release locks and reap ephemeral nodes).
    pub fn remove_session(&mut self, id: SessionId) -> Result<Vec<HandleId>> {
        let s = self
            .sessions
            .remove(&id)
            .ok_or_else(|| Error::BadHandle(format!("no session {}", id.0)))?;
        Ok(s.handles.into_iter().collect())
    }

    pub fn open_handle(
        &mut self,
        session: SessionId,
        node: NodeId,
        read: bool,
        write: bool,
    ) -> Result<HandleId> {
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or_else(|| Error::BadHandle(format!("no session {}", session.0)))?;
        self.next_handle += 1;
        let id = HandleId(self.next_handle);
        s.handles.insert(id);
        self.handles.insert(
            id,
            Handle {
                session,
                node,
                read,
                write,
            },
        );
        *self.open_count.entry(node).or_default() += 1;
        Ok(id)
    }

    pub fn handle(&self, id: HandleId) -> Result<Handle> {
        self.handles
            .get(&id)
            .copied()
            .ok_or_else(|| Error::BadHandle(format!("no handle {}", id.0)))
    }

    pub fn is_open(&self, id: HandleId) -> bool {
        self.handles.contains_key(&id)
    }

    /// Closes a handle; returns it and how many handles remain on its node.
    pub fn close_handle(&mut self, id: HandleId) -> Result<(Handle, usize)> {
        let h = self
            .handles
            .remove(&id)
            .ok_or_else(|| Error::BadHandle(format!("no handle {}", id.0)))?;
        if let Some(s) = self.sessions.get_mut(&h.session) {
            s.handles.remove(&id);
        }
        let left = match self.open_count.get_mut(&h.node) {
            Some(n) if *n > 1 => {
                *n -= 1;
                *n
            }
            _ => {
                self.open_count.remove(&h.node);
                0
            }
        };
        Ok((h, left))
    }

    pub fn open_count(&self, node: NodeId) -> usize {
        self.open_count.get(&node).copied().unwrap_or(0)
    }

    pub fn sessions(&self) -> impl Iterator<Item = (&SessionId, &Session)> {
        self.sessions.iter()
    }

    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_count_per_node_and_belong_to_sessions() {
        let mut s = Sessions::default();
        let a = s.open_session("pid 1");
        let b = s.open_session("pid 2");
        let h1 = s.open_handle(a, 7, true, false).unwrap();
        let h2 = s.open_handle(b, 7, true, true).unwrap();
        assert_eq!(s.open_count(7), 2);
        assert_eq!(s.close_handle(h1).unwrap().1, 1);
        assert!(s.close_handle(h1).is_err());
        assert_eq!(s.remove_session(b).unwrap(), vec![h2]);
        assert!(s.open_handle(b, 7, true, false).is_err());
        let (h, left) = s.close_handle(h2).unwrap();
        assert_eq!((h.session, left), (b, 0));
        assert_eq!(s.open_count(7), 0);
    }
}
