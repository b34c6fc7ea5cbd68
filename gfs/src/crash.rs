//! [`CrashStore`]: an in-memory [`FileStore`] for power-loss tests.
//!
//! It keeps, beside what the process sees, what would survive a power cut,
//! and [`CrashStore::crash`] throws away everything else. It can also make the
//! Nth operation of a kind fail ([`CrashStore::fail_nth`]) and cut the power
//! after the Nth mutating operation ([`CrashStore::power_off_after`]), which is
//! how a test visits many crash points of one workload.
//!
//! The files, the two namespaces and the crash points are
//! `testkit::disk::DiskModel` (which also serves `chubby::CrashDisk`); this
//! file adapts it to the [`FileStore`] contract.
//!
//! # The durability model
//!
//! It is the contract [`FileStore`] states and [`crate::LocalStore`] keeps:
//!
//! * **File data.** Each file has a synced length. `append` and
//!   `append_vectored` grow the file but not its synced length; `sync` and
//!   `append_sync` move the synced length to the end. A failed sync leaves it
//!   where it was. On a crash a file keeps its synced prefix; with torn writes
//!   on ([`CrashStore::set_torn_writes`]) it also keeps a random-length prefix
//!   of its unsynced tail, as when the kernel wrote back some pages of the last
//!   writes before the power went.
//! * **Creation.** A created file's directory entry becomes durable at the
//!   writer's first successful `sync`/`append_sync` (LocalStore fsyncs the new
//!   entry's directories then). A file created and never synced is gone after
//!   a crash, even if it is not empty.
//! * **Rename and delete.** Durable when the call returns (LocalStore fsyncs
//!   the directories before returning). A renamed file keeps its own synced
//!   length: renaming does not sync data, so a file renamed before its data
//!   was synced comes back under the new name with only its synced prefix.
//! * **Handles.** A crash ends the "process": every writer and reader opened
//!   before it fails from then on, as they would in a restarted program.
//!
//! Failures are plain [`Error::Io`] errors (EIO), the same shape a real disk
//! gives; once the power is off every operation fails until `crash()`.

use crate::{Error, FileStore, ReadableFile, Result, WritableFile};
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;
use testkit::disk::{DiskModel, ModelFile};
use testkit::power::Refused;

pub use testkit::disk::CrashReport;

/// The kinds of operation [`CrashStore`] counts and can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `create` and `create_log`.
    Create,
    /// `open_append`.
    OpenAppend,
    /// `open` for reading.
    Open,
    /// `delete`.
    Delete,
    /// `rename` (and the rename half of `replace`).
    Rename,
    /// `append` and `append_vectored` (and the write half of `append_sync`).
    Append,
    /// `sync` and `append_sync`.
    Sync,
    /// `read_at` and `read_many`.
    Read,
}

impl OpKind {
    /// Whether the operation changes what is stored (a crash point).
    pub fn mutates(self) -> bool {
        !matches!(self, OpKind::Open | OpKind::Read)
    }
}

type Inner = DiskModel<OpKind>;

/// Counts one operation of a handle opened in `epoch` and decides whether
/// it may run.
fn admit(g: &mut Inner, kind: OpKind, epoch: u64, name: &str) -> Result<()> {
    if epoch != g.epoch() {
        return Err(eio(name, "handle from before a crash"));
    }
    g.admit(kind, kind.mutates()).map_err(|r| refused(name, r))
}

/// Fails once the power is off (for the calls that are not counted).
fn powered(g: &Inner, name: &str) -> Result<()> {
    g.check_power().map_err(|r| refused(name, r))
}

fn id_of(g: &Inner, name: &str) -> Result<u64> {
    g.lookup(name)
        .ok_or_else(|| Error::NotFound(name.to_string()))
}

fn refused(name: &str, r: Refused) -> Error {
    eio(name, &r.to_string())
}

fn eio(name: &str, why: &str) -> Error {
    Error::io(name, io::Error::other(why.to_string()))
}

/// Files in memory with a power-loss model; cloning shares the same files.
#[derive(Clone)]
pub struct CrashStore {
    inner: Arc<Mutex<Inner>>,
}

impl Default for CrashStore {
    fn default() -> Self {
        Self::with_seed(0)
    }
}

impl CrashStore {
    /// An empty store with the power on.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose torn writes are drawn from `seed` (same seed, same tears).
    pub fn with_seed(seed: u64) -> Self {
        CrashStore {
            inner: Arc::new(Mutex::new(DiskModel::new(seed))),
        }
    }

    /// Whether a crash keeps a random prefix of each file's unsynced tail.
    pub fn set_torn_writes(&self, on: bool) {
        self.inner.lock().set_torn_writes(on);
    }

    /// Makes the `n`th operation of `kind` from now (1 = the next one) fail
    /// with an I/O error, once.
    pub fn fail_nth(&self, kind: OpKind, n: u64) {
        self.inner.lock().fail_nth(kind, n);
    }

    /// Lets `n` more mutating operations run; the next one and everything
    /// after it fail as if the machine had lost power, until [`Self::crash`].
    pub fn power_off_after(&self, n: u64) {
        self.inner.lock().power_off_after(n);
    }

    /// Whether a [`Self::power_off_after`] point has been reached.
    pub fn is_powered_off(&self) -> bool {
        self.inner.lock().is_powered_off()
    }

    /// Mutating operations (creates, appends, syncs, renames, deletes) so far.
    pub fn mutations(&self) -> u64 {
        self.inner.lock().mutations()
    }

    /// Operations of `kind` so far.
    pub fn count(&self, kind: OpKind) -> u64 {
        self.inner.lock().count(kind)
    }

    /// How many bytes of `name` would survive a crash now (`None` if the
    /// name itself would not).
    pub fn durable_len(&self, name: &str) -> Option<u64> {
        self.inner.lock().durable_len(name)
    }

    /// Loses power and restarts: the namespace becomes the durable one, each
    /// file is cut to its synced length (plus a torn tail if enabled), every
    /// open handle dies, and the power is back on with no faults pending.
    pub fn crash(&self) -> CrashReport {
        self.inner.lock().crash()
    }

    fn epoch(&self) -> u64 {
        self.inner.lock().epoch()
    }
}

/// The file `id` of a handle of `name`.
fn file_of<'a>(g: &'a mut Inner, id: u64, name: &str) -> Result<&'a mut ModelFile> {
    g.file_mut(id).ok_or_else(|| eio(name, "file vanished"))
}

struct CrashWriter {
    store: CrashStore,
    name: String,
    id: u64,
    epoch: u64,
    /// Whether the directory entry still waits for the first sync.
    entry_pending: bool,
    len: u64,
}

impl CrashWriter {
    fn write(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        let mut g = self.store.inner.lock();
        admit(&mut g, OpKind::Append, self.epoch, &self.name)?;
        let f = file_of(&mut g, self.id, &self.name)?;
        let off = f.data.len() as u64;
        for b in bufs {
            f.data.extend_from_slice(b);
        }
        self.len = f.data.len() as u64;
        Ok(off)
    }
}

impl WritableFile for CrashWriter {
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        self.write(&[data])
    }
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.write(bufs)
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        let off = self.write(bufs)?;
        self.sync()?;
        Ok(off)
    }
    fn sync(&mut self) -> Result<()> {
        let mut g = self.store.inner.lock();
        admit(&mut g, OpKind::Sync, self.epoch, &self.name)?;
        file_of(&mut g, self.id, &self.name)?.sync();
        if self.entry_pending {
            self.entry_pending = false;
            // The entry is made durable only if the name still means this
            // file (a rename or delete since then was durable on its own).
            if g.lookup(&self.name) == Some(self.id) {
                g.make_durable(&self.name, self.id);
            }
        }
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct CrashReader {
    store: CrashStore,
    name: String,
    id: u64,
    epoch: u64,
}

impl CrashReader {
    fn read_ranges(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        let mut g = self.store.inner.lock();
        admit(&mut g, OpKind::Read, self.epoch, &self.name)?;
        let f = file_of(&mut g, self.id, &self.name)?;
        ranges
            .iter()
            .map(|&(offset, len)| {
                let start = usize::try_from(offset).unwrap_or(usize::MAX);
                match start.checked_add(len) {
                    Some(end) if end <= f.data.len() => Ok(f.data[start..end].to_vec()),
                    _ => Err(Error::ShortRead {
                        name: self.name.clone(),
                        offset,
                        wanted: len,
                        available: f.data.len() as u64,
                    }),
                }
            })
            .collect()
    }
}

impl ReadableFile for CrashReader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = self.read_ranges(&[(offset, len)])?;
        v.pop().ok_or_else(|| eio(&self.name, "no result"))
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        self.read_ranges(ranges)
    }
    fn len(&self) -> Result<u64> {
        let g = self.store.inner.lock();
        if g.epoch() != self.epoch {
            return Err(eio(&self.name, "handle from before a crash"));
        }
        g.file(self.id)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| eio(&self.name, "file vanished"))
    }
}

impl FileStore for CrashStore {
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        admit(&mut g, OpKind::Create, epoch, name)?;
        if g.lookup(name).is_some() {
            return Err(Error::AlreadyExists(name.to_string()));
        }
        let id = g.new_file();
        g.link(name, id);
        Ok(Box::new(CrashWriter {
            store: self.clone(),
            name: name.to_string(),
            id,
            epoch,
            entry_pending: true,
            len: 0,
        }))
    }
    fn open_append(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        admit(&mut g, OpKind::OpenAppend, epoch, name)?;
        let id = id_of(&g, name)?;
        let len = g.file(id).map_or(0, |f| f.data.len() as u64);
        // Reopening a name that is not yet durable behaves like its creator:
        // the entry becomes durable at this writer's first sync.
        let entry_pending = g.durable_id(name) != Some(id);
        Ok(Box::new(CrashWriter {
            store: self.clone(),
            name: name.to_string(),
            id,
            epoch,
            entry_pending,
            len,
        }))
    }
    fn open(&self, name: &str) -> Result<Arc<dyn ReadableFile>> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        admit(&mut g, OpKind::Open, epoch, name)?;
        let id = id_of(&g, name)?;
        Ok(Arc::new(CrashReader {
            store: self.clone(),
            name: name.to_string(),
            id,
            epoch,
        }))
    }
    fn delete(&self, name: &str) -> Result<()> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        admit(&mut g, OpKind::Delete, epoch, name)?;
        id_of(&g, name)?;
        g.unlink(name);
        g.forget_durable(name);
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        admit(&mut g, OpKind::Rename, epoch, from)?;
        let id = id_of(&g, from)?;
        g.unlink(from);
        g.link(to, id);
        g.forget_durable(from);
        g.make_durable(to, id);
        Ok(())
    }
    fn exists(&self, name: &str) -> Result<bool> {
        let g = self.inner.lock();
        powered(&g, name)?;
        Ok(g.lookup(name).is_some())
    }
    fn size(&self, name: &str) -> Result<u64> {
        let g = self.inner.lock();
        powered(&g, name)?;
        let id = id_of(&g, name)?;
        Ok(g.file(id).map_or(0, |f| f.data.len() as u64))
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let g = self.inner.lock();
        powered(&g, prefix)?;
        Ok(g.names(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_data_and_entries_are_lost() {
        let s = CrashStore::new();
        let mut a = s.create("a").unwrap();
        a.append(b"hello").unwrap();
        a.sync().unwrap();
        a.append(b" world").unwrap();
        let mut b = s.create("b").unwrap();
        b.append(b"never synced").unwrap();
        assert_eq!(s.durable_len("a"), Some(5));
        assert_eq!(s.durable_len("b"), None);
        let r = s.crash();
        assert_eq!(r.files_lost, 1);
        assert_eq!(r.bytes_lost, 6);
        assert!(!s.exists("b").unwrap());
        assert_eq!(s.open("a").unwrap().read_at(0, 5).unwrap(), b"hello");
        assert_eq!(s.size("a").unwrap(), 5);
        // Old handles are dead.
        assert!(a.append(b"x").is_err());
        assert!(b.sync().is_err());
    }

    #[test]
    fn renames_and_deletes_are_durable_but_not_the_data() {
        let s = CrashStore::new();
        let mut w = s.create("tmp").unwrap();
        w.append(b"abc").unwrap();
        s.rename("tmp", "final").unwrap();
        let mut old = s.create("old").unwrap();
        old.append_sync(&[b"x"]).unwrap();
        s.delete("old").unwrap();
        s.crash();
        assert_eq!(s.list("").unwrap(), vec!["final".to_string()]);
        assert_eq!(s.size("final").unwrap(), 0);
    }

    #[test]
    fn torn_writes_keep_a_prefix_of_the_tail() {
        let mut torn = 0;
        for seed in 0..20 {
            let s = CrashStore::with_seed(seed);
            s.set_torn_writes(true);
            let mut w = s.create("f").unwrap();
            w.append_sync(&[b"0123"]).unwrap();
            w.append(b"456789").unwrap();
            torn += s.crash().torn_files;
            let len = s.size("f").unwrap() as usize;
            assert!((4..=10).contains(&len));
            assert_eq!(
                s.open("f").unwrap().read_at(0, len).unwrap(),
                &b"0123456789"[..len]
            );
        }
        assert!(torn > 0);
    }

    #[test]
    fn nth_operation_fails_once_and_power_off_stops_everything() {
        let s = CrashStore::new();
        let mut w = s.create("f").unwrap();
        s.fail_nth(OpKind::Sync, 2);
        w.append(b"a").unwrap();
        w.sync().unwrap();
        w.append(b"b").unwrap();
        assert!(w.sync().is_err());
        assert_eq!(s.durable_len("f"), Some(1));
        w.sync().unwrap();
        assert_eq!(s.durable_len("f"), Some(2));
        s.power_off_after(1);
        w.append(b"c").unwrap();
        assert!(w.sync().is_err());
        assert!(s.is_powered_off());
        assert!(s.create("g").is_err());
        assert!(s.list("").is_err());
        s.crash();
        assert!(!s.is_powered_off());
        assert_eq!(s.size("f").unwrap(), 2);
    }
}
