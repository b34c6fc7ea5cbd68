//! The master's files (operation log and checkpoints) kept in several
//! directories: the master directory and, by default, a `master/` inside
//! every chunkserver directory. Every record and checkpoint goes to every
//! copy; a copy that fails or vanishes is dropped from the writes and made
//! afresh at the next checkpoint, so losing any directory but the last loses
//! nothing.

use super::checkpoint;
use crate::{Error, FileStore, IoMode, LocalStore, Result, WritableFile};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One directory holding a copy of the master's files.
pub(crate) struct Copy {
    pub(crate) dir: PathBuf,
    /// `None` while lost: nothing is written here until the next checkpoint
    /// re-creates the copy.
    store: Mutex<Option<LocalStore>>,
    /// Why the copy was lost last (for status).
    pub(crate) lost_why: Mutex<Option<String>>,
    /// When the copy was last re-created: one that keeps failing is tried
    /// again only after [`RETRY`], not at every heartbeat.
    revived_at: Mutex<Option<Instant>>,
}

/// How soon a copy lost again after being re-created is retried.
const RETRY: Duration = Duration::from_secs(30);

pub(crate) struct Mirrors {
    pub(crate) copies: Vec<Copy>,
    mode: IoMode,
}

/// The generation of a checkpoint or log file name.
pub(crate) fn generation(name: &str) -> Option<u64> {
    checkpoint::parse_name(name).or_else(|| parse_log_name(name))
}

impl Mirrors {
    /// Opens (creating as needed) every directory; duplicates count once.
    /// A directory that cannot be opened starts lost.
    pub(crate) fn open(dirs: &[PathBuf], mode: IoMode) -> Mirrors {
        let mut copies: Vec<Copy> = Vec::new();
        for d in dirs {
            if copies.iter().any(|c| same_dir(&c.dir, d)) {
                continue;
            }
            let (store, why) = match LocalStore::open_with(d, mode) {
                Ok(s) => (Some(s), None),
                Err(e) => {
                    log::warn!("gfs master: copy in {}: {e}", d.display());
                    (None, Some(e.to_string()))
                }
            };
            copies.push(Copy {
                dir: d.clone(),
                store: Mutex::new(store),
                lost_why: Mutex::new(why),
                revived_at: Mutex::new(None),
            });
        }
        Mirrors { copies, mode }
    }

    /// The store of copy `i`, if it is not lost.
    pub(crate) fn store(&self, i: usize) -> Option<LocalStore> {
        self.copies.get(i).and_then(|c| c.store.lock().clone())
    }

    pub(crate) fn live(&self) -> usize {
        self.copies
            .iter()
            .filter(|c| c.store.lock().is_some())
            .count()
    }

    /// Stops writing to copy `i` until the next checkpoint.
    pub(crate) fn lose(&self, i: usize, why: &str) {
        if let Some(c) = self.copies.get(i) {
            if c.store.lock().take().is_some() {
                log::warn!(
                    "gfs master: copy in {} lost: {why}; re-created at the next checkpoint",
                    c.dir.display()
                );
            }
            *c.lost_why.lock() = Some(why.to_string());
        }
    }

    /// Re-opens lost copies (creating their directories, but not their
    /// parents: a chunkserver directory that is gone is a disk that is gone,
    /// and is not made again on the disk below it); returns whether one
    /// came back (it needs a checkpoint and a new log).
    pub(crate) fn revive(&self) -> bool {
        let mut any = false;
        for c in &self.copies {
            let mut s = c.store.lock();
            let mut at = c.revived_at.lock();
            let due = at.is_none_or(|t| t.elapsed() >= RETRY);
            if s.is_none() && due && c.dir.parent().is_none_or(Path::is_dir) {
                *at = Some(Instant::now());
                if let Ok(store) = LocalStore::open_with(&c.dir, self.mode) {
                    log::info!("gfs master: re-creating the copy in {}", c.dir.display());
                    // What a lost copy holds is not trusted: an old file of a
                    // higher generation would look newer at the next start.
                    for n in store.list("").unwrap_or_default() {
                        if generation(&n).is_some() {
                            let _ = store.delete(&n);
                        }
                    }
                    *s = Some(store);
                    any = true;
                }
            }
        }
        any
    }

    /// Runs `f` on every live copy; a copy where it fails is lost. Fails
    /// only if it failed everywhere (or no copy is live).
    fn each<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&LocalStore) -> Result<T>,
    ) -> Result<Vec<(usize, T)>> {
        let mut out = Vec::new();
        let mut last = None;
        for i in 0..self.copies.len() {
            let Some(store) = self.store(i) else { continue };
            match f(&store) {
                Ok(v) => out.push((i, v)),
                Err(e) => {
                    self.lose(i, &format!("{what}: {e}"));
                    last = Some(e);
                }
            }
        }
        if out.is_empty() {
            return Err(last.unwrap_or_else(|| {
                Error::io(
                    "gfs master",
                    std::io::Error::other("no copy of the master's files is writable"),
                )
            }));
        }
        Ok(out)
    }

    /// Writes checkpoint bytes `name` to every copy, re-creating lost ones
    /// first (a checkpoint is what a new copy starts from).
    pub(crate) fn write_checkpoint(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.revive();
        let tmp = format!("{name}.tmp");
        self.each("writing a checkpoint", |store| {
            if store.exists(&tmp)? {
                store.delete(&tmp)?;
            }
            let mut w = store.create(&tmp)?;
            w.append_sync(&[bytes])?;
            store.rename(&tmp, name)
        })
        .map(|_| ())
    }

    /// Starts log file `seq` in every copy (replacing a leftover of that
    /// number); returns the writers by copy.
    pub(crate) fn create_log(&self, seq: u64) -> Result<Vec<(usize, Box<dyn WritableFile>)>> {
        let name = log_name(seq);
        self.each("starting a log", |store| {
            let mut w = match store.create(&name) {
                Ok(w) => w,
                Err(Error::AlreadyExists(_)) => {
                    // Not expected (a start or rotation takes a number past
                    // every file), but never append to a leftover.
                    store.delete(&name)?;
                    store.create(&name)?
                }
                Err(e) => return Err(e),
            };
            // Make the new (empty) file's name durable now.
            w.sync()?;
            Ok(w)
        })
    }

    /// Deletes, in every live copy, checkpoints and logs of generations
    /// below `keep`.
    pub(crate) fn prune(&self, keep: u64) -> Result<()> {
        self.each("pruning", |store| {
            for n in store.list("")? {
                if generation(&n).is_some_and(|g| g < keep) {
                    store.delete(&n)?;
                }
            }
            Ok(())
        })
        .map(|_| ())
    }

    /// Deletes, in copy `i`, checkpoints and logs of generations below
    /// `keep` (failures only cost disk space until the next prune).
    pub(crate) fn prune_copy(&self, i: usize, keep: u64) {
        let Some(store) = self.store(i) else { return };
        for n in store.list("").unwrap_or_default() {
            if generation(&n).is_some_and(|g| g < keep) {
                if let Err(e) = store.delete(&n) {
                    log::warn!("gfs master: {}: deleting {n}: {e}", store.dir().display());
                }
            }
        }
    }

    /// Whether every live copy still holds log `seq` (a directory removed
    /// under us keeps taking writes to its unlinked files); loses those that
    /// do not.
    pub(crate) fn check(&self, seq: u64) {
        let name = log_name(seq);
        for (i, c) in self.copies.iter().enumerate() {
            if c.store.lock().is_none() {
                continue;
            }
            if !c.dir.join(&name).is_file() {
                self.lose(i, &format!("{name} is gone"));
            }
        }
    }

    /// Status lines, one per copy.
    pub(crate) fn status_lines(&self) -> Vec<String> {
        self.copies
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut line = format!("gfs master copy {i}: dir={}", c.dir.display());
                if c.store.lock().is_some() {
                    line.push_str(" state=ok");
                } else {
                    let why = c.lost_why.lock().clone().unwrap_or_default();
                    line.push_str(" state=lost why=");
                    line.push_str(&why.replace(' ', "_"));
                }
                line
            })
            .collect()
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// The name of the operation log file that starts at record `seq`.
pub(crate) fn log_name(seq: u64) -> String {
    format!("oplog-{seq:020}")
}

/// The `seq` of an operation log file's name.
pub(crate) fn parse_log_name(name: &str) -> Option<u64> {
    name.strip_prefix("oplog-")?.parse().ok()
}
