//! Open replica files, bounded.
//!
//! A chunkserver may hold far more replicas than a process may keep open
//! (64 MiB chunks, three replicas, a few TB: tens of thousands of files), so
//! replica files are opened on demand and kept in an LRU-like cache, as
//! LevelDB's table cache does. An operation holds its `Arc<File>` while it
//! runs, so eviction never closes a file under it.

use quick_cache::sync::Cache;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(crate) struct FdCache {
    files: Cache<u64, Arc<File>>,
    next_id: AtomicU64,
}

impl FdCache {
    pub(crate) fn new(capacity: usize) -> Arc<FdCache> {
        Arc::new(FdCache {
            files: Cache::new(capacity.max(8)),
            next_id: AtomicU64::new(1),
        })
    }

    /// A key for a new replica object (never reused, so a replica deleted and
    /// created again at the same path is a different entry).
    pub(crate) fn new_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The open file of replica `id`, opening `path` if it is not cached.
    pub(crate) fn get(&self, id: u64, path: &Path) -> io::Result<Arc<File>> {
        self.files.get_or_insert_with(&id, || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map(Arc::new)
        })
    }

    /// The `O_DIRECT` handle of replica `id` (a key of its own from
    /// [`FdCache::new_id`]), opening `path` if it is not cached.
    pub(crate) fn get_direct(&self, id: u64, path: &Path) -> io::Result<Arc<File>> {
        self.files
            .get_or_insert_with(&id, || super::direct::open(path).map(Arc::new))
    }

    pub(crate) fn insert(&self, id: u64, file: File) -> Arc<File> {
        let f = Arc::new(file);
        self.files.insert(id, f.clone());
        f
    }

    /// Closes replica `id`'s file (once nobody uses it): a deleted replica
    /// must not keep its disk space.
    pub(crate) fn forget(&self, id: u64) {
        self.files.remove(&id);
    }

    pub(crate) fn open_count(&self) -> usize {
        self.files.len()
    }
}

/// How many replica files to keep open: a quarter of the descriptors this
/// process may have, after raising the soft limit to the hard one (as Go's
/// runtime and many databases do).
pub(crate) fn default_capacity() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 256;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `raised` is a valid rlimit; raising the soft limit up to
        // the hard one needs no privilege and affects only this process.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    let cur = usize::try_from(lim.rlim_cur).unwrap_or(usize::MAX);
    (cur / 4).clamp(64, 65_536)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_reopen_after_eviction_and_forget_closes() {
        let dir = tempfile::tempdir().unwrap();
        let c = FdCache::new(8);
        let paths: Vec<_> = (0..40).map(|i| dir.path().join(format!("f{i}"))).collect();
        let ids: Vec<u64> = paths
            .iter()
            .map(|p| {
                std::fs::write(p, b"x").unwrap();
                let id = c.new_id();
                c.get(id, p).unwrap();
                id
            })
            .collect();
        assert!(c.open_count() <= 8 + 1, "{}", c.open_count());
        for (id, p) in ids.iter().zip(&paths) {
            use std::os::unix::fs::FileExt;
            let mut b = [0u8];
            c.get(*id, p).unwrap().read_exact_at(&mut b, 0).unwrap();
            assert_eq!(&b, b"x");
        }
        c.forget(ids[0]);
        std::fs::remove_file(&paths[0]).unwrap();
        assert!(c.get(ids[0], &paths[0]).is_err());
        assert!(default_capacity() >= 64);
    }
}
