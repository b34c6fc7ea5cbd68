//! What every file of one store shares: the client, caches, and the count of open files.

use crate::client::Client;
use crate::disk_cache::DiskCache;
use crate::error::to_gfs;
use crate::keys::Keys;
use crate::owner::{self, Claim};
use object_store::path::Path;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// What every file of one store shares.
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) keys: Keys,
    pub(crate) cache: Option<DiskCache>,
    /// This daemon's claim on the prefix; `None` when several daemons
    /// share it ([`S3Config::shared`]).
    pub(crate) claim: Option<Claim>,
    pub(crate) fenced: AtomicBool,
    /// Open readers per name, and whether a delete waits for them.
    pub(crate) open: Mutex<HashMap<String, (usize, bool)>>,
    /// The ETag this daemon last wrote or saw for each replaced file.
    pub(crate) etags: Mutex<HashMap<String, Option<String>>>,
}

impl Shared {
    /// Refuses writes once another daemon has taken the prefix over.
    pub(crate) fn check_fenced(&self, name: &str) -> gfs::Result<()> {
        if self.fenced.load(Ordering::Acquire) {
            return Err(self.fenced_error(name));
        }
        Ok(())
    }

    pub(crate) fn fenced_error(&self, name: &str) -> gfs::Error {
        gfs::Error::Io {
            name: name.to_string(),
            source: std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "fenced: another daemon took {} over; this one writes nothing more",
                    self.client.location
                ),
            ),
        }
    }

    /// Marks the store fenced (once) and says why.
    pub(crate) fn fence(&self, why: &str) {
        if !self.fenced.swap(true, Ordering::AcqRel) {
            log::error!(
                "{}: fenced ({why}): another daemon owns this prefix now; \
                 writes fail from here on, restart this daemon to take it back",
                self.client.location
            );
        }
    }

    /// Reads `OWNER`: if another daemon has claimed the prefix, this store
    /// is fenced and `name` is refused.
    pub(crate) fn confirm_owner(&self, name: &str) -> gfs::Result<()> {
        let body = self
            .client
            .get(&self.keys.owner(), None)
            .map_err(|e| to_gfs(name, e))?;
        self.fence_unless_ours(&body);
        self.check_fenced(name)
    }

    /// Whether several daemons share the prefix (each log is fenced on its
    /// own then, never the whole store).
    pub(crate) fn is_shared(&self) -> bool {
        self.claim.is_none()
    }

    /// Refuses a new log in a directory whose logs were sealed: its server
    /// was declared dead and another is recovering it.
    pub(crate) fn check_unsealed(&self, name: &str) -> gfs::Result<()> {
        let dir = crate::keys::parent(name);
        match self.client.head(&self.keys.seal(dir)) {
            Ok(_) => Err(sealed_error(name)),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(to_gfs(name, e)),
        }
    }

    /// Fences this store if `OWNER` (its bytes) names another epoch.
    pub(crate) fn fence_unless_ours(&self, owner: &[u8]) {
        let Some(claim) = &self.claim else {
            return;
        };
        let text = String::from_utf8_lossy(owner);
        if owner::epoch_of(&text) != Some(claim.epoch) {
            self.fence(&format!("OWNER now says: {}", text.trim()));
        }
    }

    pub(crate) fn delete_now(&self, name: &str) -> gfs::Result<()> {
        let key = self.keys.file(name);
        match self.client.head(&key) {
            Ok(_) => return self.client.delete(&key).map_err(|e| to_gfs(name, e)),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(to_gfs(name, e)),
        }
        let (segs, _, _) = segments(&self.client, &self.keys, name)?;
        if segs.is_empty() {
            return Err(gfs::Error::NotFound(name.to_string()));
        }
        self.client.delete_all(segs).map_err(|e| to_gfs(name, e))
    }
}

/// What a writer to a sealed log (or a new log in a sealed directory) gets.
pub(crate) fn sealed_error(name: &str) -> gfs::Error {
    gfs::Error::Io {
        name: name.to_string(),
        source: std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "fenced: this log was sealed because its server was declared dead; \
             another server recovers it and it takes no more appends",
        ),
    }
}

/// Keeps a deleted file readable while a reader has it open, as a local
/// file stays readable after unlink: the delete runs when the last reader
/// goes.
pub(crate) struct OpenGuard {
    pub(crate) shared: Weak<Shared>,
    pub(crate) name: String,
}

impl OpenGuard {
    pub(crate) fn new(shared: &Arc<Shared>, name: &str) -> OpenGuard {
        shared
            .open
            .lock()
            .entry(name.to_string())
            .or_insert((0, false))
            .0 += 1;
        OpenGuard {
            shared: Arc::downgrade(shared),
            name: name.to_string(),
        }
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let Some(s) = self.shared.upgrade() else {
            return;
        };
        let doomed = {
            let mut open = s.open.lock();
            match open.get_mut(&self.name) {
                Some(e) if e.0 > 1 => {
                    e.0 -= 1;
                    false
                }
                Some(_) => open.remove(&self.name).is_some_and(|(_, d)| d),
                None => false,
            }
        };
        if doomed {
            if let Err(e) = s.delete_now(&self.name) {
                log::warn!("deleting {} after its last reader: {e}", self.name);
            }
        }
    }
}

/// The segments of log `name`, in order, and their total size.
pub(crate) fn segments(c: &Client, keys: &Keys, name: &str) -> gfs::Result<(Vec<Path>, u64, u64)> {
    let metas = c.list(&keys.log_dir(name)).map_err(|e| to_gfs(name, e))?;
    let mut segs = Vec::new();
    let (mut size, mut next) = (0, 0);
    for m in metas {
        if let Some((n, seq)) = keys.segment_of(m.location.as_ref()) {
            if n == name {
                size += m.size;
                next = next.max(seq + 1);
                segs.push((seq, m.location));
            }
        }
    }
    segs.sort_by_key(|(s, _)| *s);
    Ok((segs.into_iter().map(|(_, p)| p).collect(), size, next))
}
