//! [`CrashDisk`]: the cell's files in memory with a power-loss model, for
//! tests that cut the power at any point and check what the cell recovers.
//!
//! # The power-loss model
//!
//! It is the POSIX one the cell is written against (stricter than
//! `gfs::CrashStore`, which models the `FileStore` contract, on the same
//! `testkit::disk::DiskModel`):
//!
//! * A file's data is durable up to where it was last `sync`ed; the synced
//!   data belongs to the file, not to its name, so it follows renames.
//! * A directory change (creating a file, renaming, removing) is durable only
//!   once `sync_dir` returns. Until then a crash may undo it.
//! * On a crash the directory becomes its last synced state, and each file
//!   keeps its synced prefix plus, with torn writes on, a random prefix of its
//!   unsynced tail.

use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use testkit::disk::{DiskModel, ModelFile};
use testkit::power::Refused;

use crate::disk::Disk;

/// Kinds of [`CrashDisk`] operation, for [`CrashDisk::fail_nth`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskOp {
    /// Reading a file whole.
    Read,
    /// Creating an empty file.
    Create,
    /// Appending to a file.
    Append,
    /// Syncing a file's data.
    Sync,
    /// Cutting or extending a file.
    SetLen,
    /// Renaming a file over another.
    Rename,
    /// Removing a file.
    Remove,
    /// Syncing the directory's entries.
    SyncDir,
}

type CrashState = DiskModel<DiskOp>;

/// Counts one operation and decides whether it may run.
fn admit(s: &mut CrashState, op: DiskOp) -> io::Result<()> {
    s.admit(op, op != DiskOp::Read).map_err(|r| match r {
        Refused::Injected => io::Error::from_raw_os_error(libc::EIO),
        off => io::Error::other(off.to_string()),
    })
}

/// The file `name` means now, created empty if missing and `create`.
fn inode<'a>(s: &'a mut CrashState, name: &str, create: bool) -> io::Result<&'a mut ModelFile> {
    let id = match s.lookup(name) {
        Some(id) => id,
        None if create => {
            let id = s.new_file();
            s.link(name, id);
            id
        }
        None => return Err(io::Error::from(io::ErrorKind::NotFound)),
    };
    s.file_mut(id)
        .ok_or_else(|| io::Error::other("inode vanished"))
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
    /// An empty disk with the power on.
    pub fn new() -> Self {
        Self::default()
    }

    /// A disk whose torn tails are drawn from `seed`.
    pub fn with_seed(seed: u64) -> Self {
        CrashDisk {
            state: Arc::new(Mutex::new(DiskModel::new(seed))),
        }
    }

    /// Whether a crash keeps a random prefix of each file's unsynced tail.
    pub fn set_torn_writes(&self, on: bool) {
        self.state.lock().set_torn_writes(on);
    }

    /// The `n`th operation of `op` from now (1 = the next) fails with EIO, once.
    pub fn fail_nth(&self, op: DiskOp, n: u64) {
        self.state.lock().fail_nth(op, n);
    }

    /// Lets `n` more mutating operations run; then every operation fails
    /// until [`Self::crash`].
    pub fn power_off_after(&self, n: u64) {
        self.state.lock().power_off_after(n);
    }

    /// Mutating operations so far.
    pub fn mutations(&self) -> u64 {
        self.state.lock().mutations()
    }

    /// Drops everything not durable and turns the power back on.
    pub fn crash(&self) {
        self.state.lock().crash();
    }
}

impl Disk for CrashDisk {
    fn describe(&self) -> String {
        "crash-disk".to_string()
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Read)?;
        Ok(s.lookup(name)
            .and_then(|id| s.file(id))
            .map(|f| f.data.clone()))
    }
    fn create(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Create)?;
        let id = s.new_file();
        s.link(name, id);
        Ok(())
    }
    fn append(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Append)?;
        inode(&mut s, name, true)?.data.extend_from_slice(data);
        Ok(())
    }
    fn sync(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Sync)?;
        inode(&mut s, name, false)?.sync();
        Ok(())
    }
    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::SetLen)?;
        let f = inode(&mut s, name, false)?;
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        f.data.resize(len, 0);
        f.synced = f.synced.min(len);
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Rename)?;
        let id = s
            .unlink(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        s.link(to, id);
        Ok(())
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::Remove)?;
        s.unlink(name);
        Ok(())
    }
    fn sync_dir(&self) -> io::Result<()> {
        let mut s = self.state.lock();
        admit(&mut s, DiskOp::SyncDir)?;
        s.sync_namespace();
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
}
