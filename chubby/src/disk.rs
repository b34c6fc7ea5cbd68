//! The cell's storage seam: the few file operations the log and snapshots
//! need, on one directory. [`LocalDisk`] is the real directory;
//! `CrashDisk` (`crash_disk.rs`, with the `testing` feature) keeps the
//! files in memory with a power-loss model, for tests that cut the power at
//! any point and check what the cell recovers.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

/// File operations on one directory, by plain file name.
pub trait Disk: Send + Sync + 'static {
    /// Where the files are, for messages and status lines.
    fn describe(&self) -> String;
    /// The whole file, or `None` if it does not exist.
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Creates the file empty, replacing any file of that name.
    fn create(&self, name: &str) -> io::Result<()>;
    /// Appends `data` at the end of the file, creating it if missing.
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()>;
    /// Makes the file's data durable.
    fn sync(&self, name: &str) -> io::Result<()>;
    /// Cuts (or extends with zeros) the file to `len` bytes.
    fn set_len(&self, name: &str, len: u64) -> io::Result<()>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Removes a file; a missing file is not an error.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self) -> io::Result<()>;
}

/// The cell's files in a local directory, locked against a second opener.
pub struct LocalDisk {
    dir: PathBuf,
    /// Open handles, so that log appends do not reopen the file.
    open: Mutex<HashMap<String, File>>,
    _lock: File,
}

impl LocalDisk {
    /// Creates the directory if needed (durably) and locks it (`LOCK`, held
    /// while open).
    pub fn open(dir: &Path) -> io::Result<LocalDisk> {
        for parent in make_dirs(dir)? {
            File::open(parent)?.sync_all()?;
        }
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "cell is open in another process",
                ))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        Ok(LocalDisk {
            dir: dir.to_path_buf(),
            open: Mutex::new(HashMap::new()),
            _lock: f,
        })
    }

    fn with_file<T>(
        &self,
        name: &str,
        f: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut open = self.open.lock();
        if !open.contains_key(name) {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(self.dir.join(name))?;
            open.insert(name.to_string(), file);
        }
        match open.get_mut(name) {
            Some(file) => f(file),
            None => Err(io::Error::other("file handle vanished")),
        }
    }
}

/// Creates `dir` and its missing parents, as `create_dir_all` does; returns
/// the directories whose entries changed (each new directory's parent), to
/// be fsynced: a cell's fsynced files are only as durable as the entry of
/// the directory that holds them.
fn make_dirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    let mut changed = Vec::new();
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => changed.push(match d.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(changed)
}

impl Disk for LocalDisk {
    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let mut f = match File::open(self.dir.join(name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }
    fn create(&self, name: &str) -> io::Result<()> {
        self.open.lock().remove(name);
        File::create(self.dir.join(name)).map(drop)
    }
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        self.with_file(name, |f| f.write_all(data))
    }
    fn sync(&self, name: &str) -> io::Result<()> {
        self.with_file(name, |f| f.sync_data())
    }
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        self.with_file(name, |f| f.set_len(len))
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut open = self.open.lock();
        open.remove(from);
        open.remove(to);
        fs::rename(self.dir.join(from), self.dir.join(to))
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.open.lock().remove(name);
        match fs::remove_file(self.dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir).and_then(|d| d.sync_all())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_cell_directories_are_listed_for_a_parent_fsync() {
        let dir = tempfile::tempdir().unwrap();
        let cell = dir.path().join("a/b");
        assert_eq!(
            make_dirs(&cell).unwrap(),
            [dir.path().to_path_buf(), dir.path().join("a")]
        );
        assert!(cell.is_dir());
        assert!(make_dirs(&cell).unwrap().is_empty());
        drop(LocalDisk::open(&dir.path().join("c")).unwrap());
        assert!(dir.path().join("c/LOCK").is_file());
    }

    #[test]
    fn local_disk_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let d = LocalDisk::open(dir.path()).unwrap();
        assert!(LocalDisk::open(dir.path()).is_err());
        d.append("w", b"abc").unwrap();
        d.sync("w").unwrap();
        d.set_len("w", 2).unwrap();
        d.append("w", b"d").unwrap();
        assert_eq!(d.read("w").unwrap().unwrap(), b"abd");
        d.create("t").unwrap();
        d.rename("t", "w").unwrap();
        assert_eq!(d.read("w").unwrap().unwrap(), b"");
        d.remove("w").unwrap();
        d.remove("w").unwrap();
        d.sync_dir().unwrap();
        assert_eq!(d.read("w").unwrap(), None);
    }
}
