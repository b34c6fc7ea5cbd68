//! [`CrashStore`]: an in-memory [`FileStore`] for power-loss tests.
//!
//! It keeps, beside what the process sees, what would survive a power cut,
//! and [`CrashStore::crash`] throws away everything else. It can also make the
//! Nth operation of a kind fail ([`CrashStore::fail_nth`]) and cut the power
//! after the Nth mutating operation ([`CrashStore::power_off_after`]), which is
//! how a test visits many crash points of one workload.
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
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

/// The kinds of operation [`CrashStore`] counts and can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Create,
    OpenAppend,
    Open,
    Delete,
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

/// What [`CrashStore::crash`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Files whose names were not durable and are gone.
    pub files_lost: usize,
    /// Unsynced bytes dropped across all surviving files.
    pub bytes_lost: u64,
    /// Files that kept part of their unsynced tail (torn writes).
    pub torn_files: usize,
}

struct FileData {
    data: Vec<u8>,
    synced: usize,
}

struct Inner {
    files: HashMap<u64, FileData>,
    /// Names as the running process sees them.
    live: BTreeMap<String, u64>,
    /// Names as they would be found after a power cut.
    durable: BTreeMap<String, u64>,
    next_id: u64,
    /// Bumped by every crash; handles of an older epoch are dead.
    epoch: u64,
    counts: HashMap<OpKind, u64>,
    /// `(kind, n)`: the operation of `kind` whose count reaches `n` fails.
    fail_at: Vec<(OpKind, u64)>,
    /// Mutating operations left before the power goes off.
    power_left: Option<u64>,
    powered_off: bool,
    mutations: u64,
    torn: bool,
    rng: u64,
}

impl Inner {
    /// Counts one operation and decides whether it may run.
    fn admit(&mut self, kind: OpKind, epoch: u64, name: &str) -> Result<()> {
        if epoch != self.epoch {
            return Err(eio(name, "handle from before a crash"));
        }
        if self.powered_off {
            return Err(eio(name, "power is off"));
        }
        if kind.mutates() {
            if let Some(left) = self.power_left.as_mut() {
                if *left == 0 {
                    self.powered_off = true;
                    self.power_left = None;
                    return Err(eio(name, "power lost"));
                }
                *left -= 1;
            }
            self.mutations += 1;
        }
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(i) = self
            .fail_at
            .iter()
            .position(|&(k, at)| k == kind && at == n)
        {
            self.fail_at.swap_remove(i);
            return Err(eio(name, "injected fault"));
        }
        Ok(())
    }

    fn next_rand(&mut self) -> u64 {
        // splitmix64: deterministic for a given seed, no dependency.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn id_of(&self, name: &str) -> Result<u64> {
        self.live
            .get(name)
            .copied()
            .ok_or_else(|| Error::NotFound(name.to_string()))
    }
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
    pub fn new() -> Self {
        Self::default()
    }

    /// A store whose torn writes are drawn from `seed` (same seed, same tears).
    pub fn with_seed(seed: u64) -> Self {
        CrashStore {
            inner: Arc::new(Mutex::new(Inner {
                files: HashMap::new(),
                live: BTreeMap::new(),
                durable: BTreeMap::new(),
                next_id: 1,
                epoch: 0,
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
        self.inner.lock().torn = on;
    }

    /// Makes the `n`th operation of `kind` from now (1 = the next one) fail
    /// with an I/O error, once.
    pub fn fail_nth(&self, kind: OpKind, n: u64) {
        let mut g = self.inner.lock();
        let at = g.counts.get(&kind).copied().unwrap_or(0) + n.max(1);
        g.fail_at.push((kind, at));
    }

    /// Lets `n` more mutating operations run; the next one and everything
    /// after it fail as if the machine had lost power, until [`Self::crash`].
    pub fn power_off_after(&self, n: u64) {
        self.inner.lock().power_left = Some(n);
    }

    /// Whether a [`Self::power_off_after`] point has been reached.
    pub fn is_powered_off(&self) -> bool {
        self.inner.lock().powered_off
    }

    /// Mutating operations (creates, appends, syncs, renames, deletes) so far.
    pub fn mutations(&self) -> u64 {
        self.inner.lock().mutations
    }

    /// Operations of `kind` so far.
    pub fn count(&self, kind: OpKind) -> u64 {
        self.inner.lock().counts.get(&kind).copied().unwrap_or(0)
    }

    /// How many bytes of `name` would survive a crash now (`None` if the
    /// name itself would not).
    pub fn durable_len(&self, name: &str) -> Option<u64> {
        let g = self.inner.lock();
        let id = g.durable.get(name)?;
        g.files.get(id).map(|f| f.synced as u64)
    }

    /// Loses power and restarts: the namespace becomes the durable one, each
    /// file is cut to its synced length (plus a torn tail if enabled), every
    /// open handle dies, and the power is back on with no faults pending.
    pub fn crash(&self) -> CrashReport {
        let mut g = self.inner.lock();
        let mut report = CrashReport {
            files_lost: g
                .live
                .iter()
                .filter(|(n, id)| g.durable.get(*n) != Some(id))
                .count(),
            ..CrashReport::default()
        };
        let keep: Vec<u64> = g.durable.values().copied().collect();
        let mut files = std::mem::take(&mut g.files);
        files.retain(|id, _| keep.contains(id));
        for f in files.values_mut() {
            let unsynced = f.data.len() - f.synced;
            let kept = if g.torn && unsynced > 0 {
                (g.next_rand() % (unsynced as u64 + 1)) as usize
            } else {
                0
            };
            if kept > 0 {
                report.torn_files += 1;
            }
            report.bytes_lost += (unsynced - kept) as u64;
            f.data.truncate(f.synced + kept);
            f.synced = f.data.len();
        }
        g.files = files;
        g.live = g.durable.clone();
        g.epoch += 1;
        g.powered_off = false;
        g.power_left = None;
        g.fail_at.clear();
        report
    }

    fn epoch(&self) -> u64 {
        self.inner.lock().epoch
    }
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
        g.admit(OpKind::Append, self.epoch, &self.name)?;
        let f = g
            .files
            .get_mut(&self.id)
            .ok_or_else(|| eio(&self.name, "file vanished"))?;
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
        g.admit(OpKind::Sync, self.epoch, &self.name)?;
        let f = g
            .files
            .get_mut(&self.id)
            .ok_or_else(|| eio(&self.name, "file vanished"))?;
        f.synced = f.data.len();
        if self.entry_pending {
            self.entry_pending = false;
            // The entry is made durable only if the name still means this
            // file (a rename or delete since then was durable on its own).
            if g.live.get(&self.name) == Some(&self.id) {
                g.durable.insert(self.name.clone(), self.id);
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
        g.admit(OpKind::Read, self.epoch, &self.name)?;
        let f = g
            .files
            .get(&self.id)
            .ok_or_else(|| eio(&self.name, "file vanished"))?;
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
        if g.epoch != self.epoch {
            return Err(eio(&self.name, "handle from before a crash"));
        }
        g.files
            .get(&self.id)
            .map(|f| f.data.len() as u64)
            .ok_or_else(|| eio(&self.name, "file vanished"))
    }
}

impl FileStore for CrashStore {
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        g.admit(OpKind::Create, epoch, name)?;
        if g.live.contains_key(name) {
            return Err(Error::AlreadyExists(name.to_string()));
        }
        let id = g.next_id;
        g.next_id += 1;
        g.files.insert(
            id,
            FileData {
                data: Vec::new(),
                synced: 0,
            },
        );
        g.live.insert(name.to_string(), id);
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
        g.admit(OpKind::OpenAppend, epoch, name)?;
        let id = g.id_of(name)?;
        let len = g.files.get(&id).map_or(0, |f| f.data.len() as u64);
        // Reopening a name that is not yet durable behaves like its creator:
        // the entry becomes durable at this writer's first sync.
        let entry_pending = g.durable.get(name) != Some(&id);
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
        g.admit(OpKind::Open, epoch, name)?;
        let id = g.id_of(name)?;
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
        g.admit(OpKind::Delete, epoch, name)?;
        g.id_of(name)?;
        g.live.remove(name);
        g.durable.remove(name);
        Ok(())
    }
    fn rename(&self, from: &str, to: &str) -> Result<()> {
        let epoch = self.epoch();
        let mut g = self.inner.lock();
        g.admit(OpKind::Rename, epoch, from)?;
        let id = g.id_of(from)?;
        g.live.remove(from);
        g.live.insert(to.to_string(), id);
        g.durable.remove(from);
        g.durable.insert(to.to_string(), id);
        Ok(())
    }
    fn exists(&self, name: &str) -> Result<bool> {
        let g = self.inner.lock();
        if g.powered_off {
            return Err(eio(name, "power is off"));
        }
        Ok(g.live.contains_key(name))
    }
    fn size(&self, name: &str) -> Result<u64> {
        let g = self.inner.lock();
        if g.powered_off {
            return Err(eio(name, "power is off"));
        }
        let id = g.id_of(name)?;
        Ok(g.files.get(&id).map_or(0, |f| f.data.len() as u64))
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let g = self.inner.lock();
        if g.powered_off {
            return Err(eio(prefix, "power is off"));
        }
        Ok(g.live
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
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
