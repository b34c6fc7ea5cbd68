//! The location each thread used last, kept beside the client's location
//! cache: a thread reading rows of one tablet (a scan's point reads, a
//! mount's files of one table) finds it without building the METADATA key
//! and searching the cache's map for it.
//!
//! A kept location is tagged with the cache's version, which every edit of
//! the cache moves (after the edit): one used under a version that has
//! moved since is looked up again. Even a location used a moment after it
//! went stale is only as wrong as a cached one: its server answers "not
//! serving", and the caller drops it and retries.

use super::locate::Location;
use crate::env::{Env, KeptServer};
use crate::protocol::TabletService;
use crate::quiesce;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Numbers clients, so that one thread's kept location is only ever used
/// by the client that found it.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

struct Kept {
    client: u64,
    version: u64,
    loc: Arc<Location>,
    /// Its server, once a read used it (see [`LastLocation::read`]).
    server: Option<KeptServer>,
}

thread_local! {
    static LAST: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// A client's side of it: its number and its cache's version.
pub(super) struct LastLocation {
    client: u64,
    version: AtomicU64,
}

impl Default for LastLocation {
    fn default() -> Self {
        LastLocation {
            client: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
            version: AtomicU64::new(0),
        }
    }
}

impl LastLocation {
    /// The cache's version now: taken before a lookup in it, and kept
    /// with what the lookup found.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The cache was edited: every kept location is looked up again.
    pub fn edited(&self) {
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// `f` of the location this thread kept, if it is this client's, no
    /// edit came since, and it holds `row` of `table`; borrowed where it
    /// lies (no count of references bounced between cores).
    pub fn with<R>(
        &self,
        table: u64,
        row: &[u8],
        f: impl FnOnce(&Arc<Location>) -> R,
    ) -> Option<R> {
        let version = self.version();
        LAST.with(|last| {
            let last = last.try_borrow().ok()?;
            let k = last.as_ref()?;
            (k.client == self.client
                && k.version == version
                && k.loc.table == table
                && k.loc.contains(row))
            .then(|| f(&k.loc))
        })
    }

    /// `f` of the location this thread kept (as [`LastLocation::with`])
    /// and of its server, reached through the pointer kept beside it
    /// rather than the registry (see [`crate::quiesce`]); None where the
    /// location does not hold the row, the server is not registered here
    /// or is not serving, or a server was removed since the pointer was
    /// taken. For reads: `f` runs inside a [`quiesce::read`].
    pub fn read<R>(
        &self,
        table: u64,
        row: &[u8],
        env: &Env,
        f: impl FnOnce(&Location, &dyn TabletService) -> R,
    ) -> Option<R> {
        let version = self.version();
        LAST.with(|last| {
            let kept = {
                let mut last = last.try_borrow_mut().ok()?;
                let k = last.as_mut()?;
                if !(k.client == self.client
                    && k.version == version
                    && k.loc.table == table
                    && k.loc.contains(row))
                {
                    return None;
                }
                match k.server {
                    Some(s) if s.epoch == quiesce::epoch() => s,
                    _ => {
                        let s = env.kept_server(&k.loc.server)?;
                        k.server = Some(s);
                        s
                    }
                }
            };
            // `f` may read again (a shared borrow); it may not keep.
            let last = last.try_borrow().ok()?;
            let loc = &last.as_ref()?.loc;
            quiesce::read(kept.epoch, || {
                // SAFETY: the pointer was taken from `env`'s registry in
                // epoch `kept.epoch`, and this read runs only while that
                // epoch lasts: the registry drops a server only after
                // moving the epoch and waiting for every such read
                // (`quiesce::retire`).
                let server = unsafe { &*kept.server };
                server.is_serving().then(|| f(loc, server))
            })
            .flatten()
        })
    }

    /// Keeps `loc`, found in the cache as of `version`, for this thread.
    pub fn keep(&self, version: u64, loc: &Arc<Location>) {
        LAST.with(|last| {
            // A lookup made inside another's use of the kept location
            // (a server's own METADATA write) keeps nothing.
            if let Ok(mut last) = last.try_borrow_mut() {
                *last = Some(Kept {
                    client: self.client,
                    version,
                    loc: loc.clone(),
                    server: None,
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(table: u64, start: &[u8], end: Option<&[u8]>) -> Arc<Location> {
        Arc::new(Location {
            tablet: 7,
            table,
            start: start.to_vec(),
            end: end.map(<[u8]>::to_vec),
            server: "ts".into(),
        })
    }

    #[test]
    fn a_kept_location_answers_its_rows_until_the_cache_is_edited() {
        let (a, b) = (LastLocation::default(), LastLocation::default());
        let v = a.version();
        a.keep(v, &loc(1, b"b", Some(b"m")));
        assert_eq!(a.with(1, b"c", |l| l.tablet), Some(7));
        // Outside its rows, another table, another client.
        assert_eq!(a.with(1, b"m", |l| l.tablet), None);
        assert_eq!(a.with(1, b"a", |l| l.tablet), None);
        assert_eq!(a.with(2, b"c", |l| l.tablet), None);
        assert_eq!(b.with(1, b"c", |l| l.tablet), None);
        a.edited();
        assert_eq!(a.with(1, b"c", |l| l.tablet), None);
        // Found under an older version: not used.
        a.keep(v, &loc(1, b"b", Some(b"m")));
        assert_eq!(a.with(1, b"c", |l| l.tablet), None);
    }

    #[test]
    fn a_lookup_inside_the_use_of_a_kept_location_keeps_nothing() {
        let a = LastLocation::default();
        a.keep(a.version(), &loc(1, b"", None));
        let inner = a.with(1, b"x", |_| {
            a.keep(a.version(), &loc(2, b"", None));
            a.with(1, b"y", |l| l.table)
        });
        assert_eq!(inner, Some(Some(1)));
        assert_eq!(a.with(2, b"x", |l| l.table), None);
    }
}
