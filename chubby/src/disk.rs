//! The cell's storage seam: the few file operations the log and snapshots
//! need, on one directory. [`LocalDisk`] is the real directory; [`CrashDisk`]
//! keeps the files in memory with a power-loss model, for tests that cut the
//! power at any point and check what the cell recovers.
//!
//! # The power-loss model of [`CrashDisk`]
//!
//! It is the POSIX one the cell is written against (stricter than
//! `gfs::CrashStore`, which models the `FileStore` contract):
//!
//! * A file's data is durable up to where it was last `sync`ed; the synced
//!   data belongs to the file, not to its name, so it follows renames.
//! * A directory change (creating a file, renaming, removing) is durable only
//!   once `sync_dir` returns. Until then a crash may undo it.
//! * On a crash the directory becomes its last synced state, and each file
//!   keeps its synced prefix plus, with torn writes on, a random prefix of its
//!   unsynced tail.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Kinds of [`CrashDisk`] operation, for [`CrashDisk::fail_nth`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskOp {
    Read,
    Create,
    Append,
    Sync,
    SetLen,
    Rename,
    Remove,
    SyncDir,
}

struct Inode {
    data: Vec<u8>,
    synced: usize,
}

struct CrashState {
    inodes: HashMap<u64, Inode>,
    live: BTreeMap<String, u64>,
    durable: BTreeMap<String, u64>,
    next_inode: u64,
    counts: HashMap<DiskOp, u64>,
    fail_at: Vec<(DiskOp, u64)>,
    power_left: Option<u64>,
    powered_off: bool,
    mutations: u64,
    torn: bool,
    rng: u64,
}

impl CrashState {
    fn admit(&mut self, op: DiskOp) -> io::Result<()> {
        if self.powered_off {
            return Err(io::Error::other("power is off"));
        }
        if op != DiskOp::Read {
            if let Some(left) = self.power_left.as_mut() {
                if *left == 0 {
                    self.powered_off = true;
                    self.power_left = None;
                    return Err(io::Error::other("power lost"));
                }
                *left -= 1;
            }
            self.mutations += 1;
        }
        let n = self.counts.entry(op).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(i) = self.fail_at.iter().position(|&(o, at)| o == op && at == n) {
            self.fail_at.swap_remove(i);
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    fn new_inode(&mut self) -> u64 {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(
            id,
            Inode {
                data: Vec::new(),
                synced: 0,
            },
        );
        id
    }

    fn inode(&mut self, name: &str, create: bool) -> io::Result<&mut Inode> {
        let id = match self.live.get(name) {
            Some(&id) => id,
            None if create => {
                let id = self.new_inode();
                self.live.insert(name.to_string(), id);
                id
            }
            None => return Err(io::Error::from(io::ErrorKind::NotFound)),
        };
        self.inodes
            .get_mut(&id)
            .ok_or_else(|| io::Error::other("inode vanished"))
    }

    fn next_rand(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// An in-memory directory with a power-loss model (see the module docs);
/// clones share the same files.
#[derive(Clone)]
pub struct CrashDisk {
    state: Arc<Mutex<CrashState>>,
}

impl Default for CrashDisk {
    fn default() -> Self {
        Self::with_seed(0)
    }
}

impl CrashDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// A disk whose torn tails are drawn from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        CrashDisk {
            state: Arc::new(Mutex::new(CrashState {
                inodes: HashMap::new(),
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
                next_inode: 1,
                counts: HashMap::new(),
                fail_at: Vec::new(),
                power_left: None,
                powered_off: false,
                mutations: 0,
                torn: false,
                rng: seed,
            })),
        }
    }

    /// Whether a crash keeps a random prefix of each file's unsynced tail.
    pub fn set_torn_writes(&self, on: bool) {
        self.state.lock().torn = on;
    }

    /// The `n`th operation of `op` from now (1 = the next) fails with EIO, once.
    pub fn fail_nth(&self, op: DiskOp, n: u64) {
        let mut s = self.state.lock();
        let at = s.counts.get(&op).copied().unwrap_or(0) + n.max(1);
        s.fail_at.push((op, at));
    }

    /// Lets `n` more mutating operations run; then every operation fails
    /// until [`Self::crash`].
    pub fn power_off_after(&self, n: u64) {
        self.state.lock().power_left = Some(n);
    }

    /// Mutating operations so far.
    pub fn mutations(&self) -> u64 {
        self.state.lock().mutations
    }

    /// Drops everything not durable and turns the power back on.
    pub fn crash(&self) {
        let mut s = self.state.lock();
        let keep: Vec<u64> = s.durable.values().copied().collect();
        let mut inodes = std::mem::take(&mut s.inodes);
        inodes.retain(|id, _| keep.contains(id));
        for f in inodes.values_mut() {
            let unsynced = f.data.len() - f.synced;
            let kept = if s.torn && unsynced > 0 {
                (s.next_rand() % (unsynced as u64 + 1)) as usize
            } else {
                0
            };
            f.data.truncate(f.synced + kept);
            f.synced = f.data.len();
        }
        s.inodes = inodes;
        s.live = s.durable.clone();
        s.powered_off = false;
        s.power_left = None;
        s.fail_at.clear();
    }
}

impl Disk for CrashDisk {
    fn describe(&self) -> String {
        "crash-disk".to_string()
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Read)?;
        Ok(s.live
            .get(name)
            .and_then(|id| s.inodes.get(id))
            .map(|f| f.data.clone()))
    }
    fn create(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Create)?;
        let id = s.new_inode();
        s.live.insert(name.to_string(), id);
        Ok(())
    }
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Append)?;
        s.inode(name, true)?.data.extend_from_slice(data);
        Ok(())
    }
    fn sync(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Sync)?;
        let f = s.inode(name, false)?;
        f.synced = f.data.len();
        Ok(())
    }
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::SetLen)?;
        let f = s.inode(name, false)?;
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        f.data.resize(len, 0);
        f.synced = f.synced.min(len);
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Rename)?;
        let id = s
            .live
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.live.insert(to.to_string(), id);
        Ok(())
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::Remove)?;
        s.live.remove(name);
        Ok(())
    }
    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        s.admit(DiskOp::SyncDir)?;
        s.durable = s.live.clone();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_keeps_synced_data_and_synced_entries_only() {
        let d = CrashDisk::new();
        d.append("a", b"one").unwrap();
        d.sync("a").unwrap();
        d.sync_dir().unwrap();
        d.append("a", b"two").unwrap();
        d.create("b.tmp").unwrap();
        d.append("b.tmp", b"bee").unwrap();
        d.sync("b.tmp").unwrap();
        d.rename("b.tmp", "b").unwrap();
        d.crash();
        assert_eq!(d.read("a").unwrap().unwrap(), b"one");
        assert_eq!(d.read("b").unwrap(), None);
        d.create("b.tmp").unwrap();
        d.append("b.tmp", b"bee").unwrap();
        d.sync("b.tmp").unwrap();
        d.rename("b.tmp", "b").unwrap();
        d.sync_dir().unwrap();
        d.power_off_after(0);
        assert!(d.append("a", b"x").is_err());
        assert!(d.read("a").is_err());
        d.crash();
        assert_eq!(d.read("b").unwrap().unwrap(), b"bee");
        assert_eq!(d.read("b.tmp").unwrap(), None);
    }

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
