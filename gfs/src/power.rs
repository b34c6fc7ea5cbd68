//! [`PowerCut`]: power-loss testing of code that writes real files.
//!
//! [`crate::CrashStore`] models a disk for code written against
//! [`crate::FileStore`]; the chunk layer's replicas and the master's files
//! are real files written through this crate's I/O layer, so they are tested
//! here instead, on the real disk: while a `PowerCut` covers a directory,
//! every write, sync and namespace change of a file under it goes through the
//! model, which remembers what a power cut would take back. [`PowerCut::crash`]
//! then puts the files back into the state a machine would find after the
//! power went: as RocksDB's fault-injection environment does, it keeps an undo
//! record of every write not yet synced and replays them backwards
//! (`testkit::power::UndoLog`).
//!
//! # The durability model
//!
//! * **File data.** A write is durable once an fsync or fdatasync of its file
//!   succeeds. On a crash every later write is undone (old bytes written
//!   back, the file cut to its synced length). With torn writes on, the
//!   kernel is taken to have written back some of the dirty data before the
//!   power went, in any order: each 512-byte sector touched since the last
//!   sync independently shows its synced content or its content after one of
//!   the writes that touched it; a file grown past its synced length keeps
//!   the length of its furthest surviving piece, and sectors below that
//!   which survived in no version read as zeros. A sector is the unit a disk
//!   writes atomically.
//! * **Created files.** A file created under the directory is gone after a
//!   crash unless its directory was fsynced after the creation.
//! * **Created directories.** A directory made under the root (by any
//!   means) is gone after a crash, with everything in it, unless its parent
//!   was fsynced through this crate's I/O while it was there.
//! * **Renames and deletes** are taken as durable at once (the code under
//!   test fsyncs the directory right after each).
//! * **Power off.** After [`PowerCut::power_off_after`] mutating operations,
//!   every further write, sync or namespace change under the directory fails
//!   with EIO until [`PowerCut::crash`].
//!
//! While any `PowerCut` is installed, writes go through plain system calls
//! (not io_uring), one at a time, so the model sees them in order. With none
//! installed the hooks cost one atomic load.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use testkit::power::{PowerSwitch, UndoLog};
use testkit::rng::SplitMix64;

use crate::requests::{Chain, Counters, FileIo, ReadReq, Reads, Step, WriteReq};
use crate::sysio;

/// How many models are installed: the fast path skips everything at zero.
static INSTALLED: AtomicUsize = AtomicUsize::new(0);
static MODELS: Mutex<Vec<Weak<Model>>> = Mutex::new(Vec::new());

/// What [`PowerCut::crash`] took back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerReport {
    /// Unsynced writes undone (wholly or, when torn, in part).
    pub writes_undone: usize,
    /// Files whose creation was not durable and that are gone.
    pub files_lost: usize,
    /// Directories whose creation was not durable and that are gone.
    pub dirs_lost: usize,
    /// Files that kept part of their unsynced writes (torn writes).
    pub torn_files: usize,
}

struct State {
    /// The writes since each file's last sync, by (device, inode).
    files: HashMap<(u64, u64), UndoLog>,
    /// Files created since their directory was last synced, by directory.
    created: HashMap<PathBuf, Vec<PathBuf>>,
    /// Directories under the root whose entry is durable: there at install
    /// or at an fsync of their parent.
    durable_dirs: HashSet<PathBuf>,
    power: PowerSwitch,
    torn: bool,
    rng: SplitMix64,
}

struct Model {
    root: PathBuf,
    state: Mutex<State>,
}

/// A power-loss model over one directory; uninstalled when dropped.
pub struct PowerCut {
    model: Arc<Model>,
}

impl PowerCut {
    /// Starts modelling every file under `root` (which must exist), taking
    /// what is there now as durable. `seed` draws the torn writes.
    pub fn install(root: &Path, seed: u64) -> io::Result<PowerCut> {
        let root = root.canonicalize()?;
        let durable_dirs = dirs_under(&root).into_iter().collect();
        let model = Arc::new(Model {
            root,
            state: Mutex::new(State {
                files: HashMap::new(),
                created: HashMap::new(),
                durable_dirs,
                power: PowerSwitch::default(),
                torn: false,
                rng: SplitMix64::new(seed),
            }),
        });
        let mut models = MODELS.lock();
        models.retain(|m| m.strong_count() > 0);
        models.push(Arc::downgrade(&model));
        INSTALLED.fetch_add(1, Ordering::SeqCst);
        Ok(PowerCut { model })
    }

    /// Whether a crash keeps some of the unsynced writes, sector by sector.
    pub fn set_torn_writes(&self, on: bool) {
        self.model.state.lock().torn = on;
    }

    /// Cuts the power after `n` more mutating operations (writes, syncs,
    /// creations, renames, deletes): the `n+1`th and all after it fail.
    pub fn power_off_after(&self, n: u64) {
        self.model.state.lock().power.off_after(n);
    }

    /// Mutating operations seen so far (to size a sweep of crash points).
    pub fn mutations(&self) -> u64 {
        self.model.state.lock().power.mutations()
    }

    /// Whether the power is off.
    pub fn is_off(&self) -> bool {
        self.model.state.lock().power.is_off()
    }

    /// Puts every file back into what would survive a power cut now, and
    /// turns the power back on with everything on disk taken as durable.
    /// Stop every writer first: this is the machine restarting.
    pub fn crash(&self) -> PowerReport {
        let mut s = self.model.state.lock();
        let mut report = PowerReport::default();
        let files = std::mem::take(&mut s.files);
        for (_, log) in files {
            if log.is_empty() {
                continue;
            }
            report.writes_undone += log.len();
            // A failure here leaves the file as the process left it, which a
            // real machine could also show; the test reading it decides.
            let torn = s.torn;
            if let Ok(true) = log.roll_back(torn.then_some(&mut s.rng)) {
                report.torn_files += 1;
            }
        }
        for (_, paths) in std::mem::take(&mut s.created) {
            for p in paths {
                if std::fs::remove_file(&p).is_ok() {
                    report.files_lost += 1;
                }
            }
        }
        let mut dirs = vec![self.model.root.clone()];
        while let Some(d) = dirs.pop() {
            for child in subdirs(&d) {
                if s.durable_dirs.contains(&child) {
                    dirs.push(child);
                } else if std::fs::remove_dir_all(&child).is_ok() {
                    report.dirs_lost += 1;
                }
            }
        }
        s.durable_dirs = dirs_under(&self.model.root).into_iter().collect();
        s.power.restore();
        report
    }
}

impl Drop for PowerCut {
    fn drop(&mut self) {
        let mut models = MODELS.lock();
        models.retain(|m| m.strong_count() > 0 && !std::ptr::eq(m.as_ptr(), &*self.model));
        INSTALLED.fetch_sub(1, Ordering::SeqCst);
    }
}

fn eio(why: &str) -> io::Error {
    io::Error::other(format!("power cut: {why}"))
}

/// The directories directly in `dir` (not following symlinks).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Every directory below `root`.
fn dirs_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for c in subdirs(&d) {
            todo.push(c.clone());
            out.push(c);
        }
    }
    out
}

pub(crate) fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed) > 0
}

/// Whether a model covers `file` (not merely whether one is installed, for
/// another test's directory).
pub(crate) fn covers(file: &File) -> bool {
    model_of(file).is_some()
}

/// Whether a model covers files under `path`.
pub(crate) fn covers_path(path: &Path) -> bool {
    installed() && model_for(path).is_some()
}

/// The model covering `path`, if any.
fn model_for(path: &Path) -> Option<Arc<Model>> {
    let models = MODELS.lock();
    models
        .iter()
        .filter_map(Weak::upgrade)
        .find(|m| path.starts_with(&m.root))
}

/// The path of an open file (through /proc; only asked while a model is
/// installed).
fn path_of(file: &File) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let s = p.to_string_lossy();
    match s.strip_suffix(" (deleted)") {
        Some(live) => Some(PathBuf::from(live)),
        None => Some(p),
    }
}

/// A read-write handle of our own on `file`'s inode (the writer's may be
/// write-only); through /proc it works even for a deleted file.
fn reopen(file: &File) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

fn model_of(file: &File) -> Option<Arc<Model>> {
    if !installed() {
        return None;
    }
    model_for(&path_of(file)?)
}

impl State {
    /// Counts a mutating operation; fails it once the power is off.
    fn admit(&mut self) -> io::Result<()> {
        self.power.admit().map_err(|r| eio(&r.to_string()))
    }

    fn write(&mut self, file: &File, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.admit()?;
        let meta = file.metadata()?;
        let log = match self.files.entry((meta.dev(), meta.ino())) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(UndoLog::new(reopen(file)?)),
        };
        log.record(offset, bufs, meta.len())?;
        sysio::write(file, offset, bufs)
    }

    fn sync(&mut self, file: &File, data_only: bool) -> io::Result<()> {
        self.admit()?;
        sysio::sync(file, data_only)?;
        let meta = file.metadata()?;
        if meta.is_dir() {
            if let Some(dir) = path_of(file) {
                self.created.remove(&dir);
                self.durable_dirs.extend(subdirs(&dir));
            }
        } else if let Some(log) = self.files.get_mut(&(meta.dev(), meta.ino())) {
            log.clear();
        }
        Ok(())
    }
}

/// The power-cut model in front of another path (a decorator): a write,
/// sync or chain of a file a model covers goes through the model, one
/// system call at a time; everything else, and every read, goes to the
/// path inside. With no model installed that costs one atomic load.
pub(crate) struct PowerCutIo<I>(pub(crate) I);

impl<I: FileIo> FileIo for PowerCutIo<I> {
    fn read(&self, file: &File, ranges: &[(u64, usize)], ctr: &Counters) -> Reads {
        self.0.read(file, ranges, ctr)
    }

    fn write(&self, w: WriteReq<'_>, ctr: &Counters) -> io::Result<()> {
        match write(w.file, w.offset, w.bufs, w.sync) {
            Some(r) => r,
            None => self.0.write(w, ctr),
        }
    }

    fn read_multi(&self, reqs: &[ReadReq<'_>], ctr: &Counters) -> Vec<io::Result<Vec<u8>>> {
        self.0.read_multi(reqs, ctr)
    }

    fn run_chains(&self, chains: &[Chain<'_>], ctr: &Counters) -> Vec<io::Result<()>> {
        match run_chains(chains) {
            Some(r) => r,
            None => self.0.run_chains(chains, ctr),
        }
    }

    fn sync(&self, file: &File, data_only: bool, ctr: &Counters) -> io::Result<()> {
        match sync(file, data_only) {
            Some(r) => r,
            None => self.0.sync(file, data_only, ctr),
        }
    }
}

/// A write of `bufs` at `offset` (synced after with `sync`), if a model
/// covers the file; `None` means do it the ordinary way.
fn write(file: &File, offset: u64, bufs: &[&[u8]], sync: bool) -> Option<io::Result<()>> {
    let m = model_of(file)?;
    let mut s = m.state.lock();
    Some(
        s.write(file, offset, bufs)
            .and_then(|()| if sync { s.sync(file, true) } else { Ok(()) }),
    )
}

/// An fsync or fdatasync, if a model covers the file.
fn sync(file: &File, data_only: bool) -> Option<io::Result<()>> {
    let m = model_of(file)?;
    let result = m.state.lock().sync(file, data_only);
    Some(result)
}

/// Chains of writes and syncs, if a model covers a file of theirs.
fn run_chains(chains: &[Chain<'_>]) -> Option<Vec<io::Result<()>>> {
    if !installed() {
        return None;
    }
    let first = chains.iter().flat_map(|c| c.steps.first()).next()?;
    let file = match first {
        Step::Write { file, .. } | Step::Sync { file, .. } => *file,
    };
    let m = model_of(file)?;
    let mut s = m.state.lock();
    Some(
        chains
            .iter()
            .map(|chain| {
                for step in &chain.steps {
                    match step {
                        Step::Write { file, offset, bufs } => s.write(file, *offset, bufs)?,
                        // A ranged sync counts as a whole one here: the
                        // bytes past its range are a log's zeros, which
                        // nothing needs after a crash (a load cuts them).
                        Step::Sync {
                            file, data_only, ..
                        } => s.sync(file, *data_only)?,
                    }
                }
                Ok(())
            })
            .collect(),
    )
}

/// Admits a namespace change at `path` (a crash point; refused with the
/// power off).
pub(crate) fn namespace(path: &Path) -> io::Result<()> {
    if !installed() {
        return Ok(());
    }
    match model_for(path) {
        Some(m) => m.state.lock().admit(),
        None => Ok(()),
    }
}

/// Notes that `path` was just created: it is lost in a crash unless its
/// directory is synced first.
pub(crate) fn created(path: &Path) {
    if !installed() {
        return;
    }
    if let (Some(m), Some(dir)) = (model_for(path), path.parent()) {
        m.state
            .lock()
            .created
            .entry(dir.to_path_buf())
            .or_default()
            .push(path.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(p: &Path) -> Vec<u8> {
        std::fs::read(p).unwrap()
    }

    #[test]
    fn unsynced_writes_and_unsynced_creations_are_undone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let old = root.join("old");
        std::fs::write(&old, b"0123456789").unwrap();
        let cut = PowerCut::install(&root, 1).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&old).unwrap();
        write(&f, 5, &[b"abcdefgh"], true).unwrap().unwrap();
        write(&f, 0, &[b"XY"], false).unwrap().unwrap();
        write(&f, 13, &[b"zzzz"], false).unwrap().unwrap();
        let new = root.join("new");
        namespace(&new).unwrap();
        let g = File::create(&new).unwrap();
        created(&new);
        write(&g, 0, &[b"data"], true).unwrap().unwrap();
        assert_eq!(cut.mutations(), 7);
        let r = cut.crash();
        assert_eq!(read(&old), b"01234abcdefgh");
        assert!(!new.exists(), "created without a directory sync");
        assert_eq!(r.writes_undone, 2);
        assert_eq!(r.files_lost, 1);
    }

    #[test]
    fn a_synced_directory_keeps_its_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let cut = PowerCut::install(&root, 2).unwrap();
        let p = root.join("f");
        let f = File::create(&p).unwrap();
        created(&p);
        write(&f, 0, &[b"abc"], true).unwrap().unwrap();
        sync(&File::open(&root).unwrap(), false).unwrap().unwrap();
        cut.crash();
        assert_eq!(read(&p), b"abc");
    }

    #[test]
    fn a_new_directory_needs_its_parent_synced() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("old")).unwrap();
        let cut = PowerCut::install(&root, 5).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join("old/c/d")).unwrap();
        sync(&File::open(root.join("old")).unwrap(), false)
            .unwrap()
            .unwrap();
        sync(&File::open(root.join("old/c")).unwrap(), false)
            .unwrap()
            .unwrap();
        let r = cut.crash();
        assert!(!root.join("a").exists());
        assert!(root.join("old/c/d").is_dir());
        assert_eq!(r.dirs_lost, 1);
        // What is left is durable now.
        assert_eq!(cut.crash().dirs_lost, 0);
        assert!(root.join("old/c/d").is_dir());
    }

    #[test]
    fn power_off_fails_everything_after_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let cut = PowerCut::install(&root, 3).unwrap();
        let p = root.join("f");
        let f = File::create(&p).unwrap();
        cut.power_off_after(1);
        write(&f, 0, &[b"abc"], false).unwrap().unwrap();
        assert!(write(&f, 3, &[b"def"], false).unwrap().is_err());
        assert!(sync(&f, true).unwrap().is_err());
        assert!(namespace(&root.join("g")).is_err());
        assert!(cut.is_off());
        cut.crash();
        assert!(!cut.is_off());
        assert_eq!(read(&p), b"");
    }

    #[test]
    fn torn_writes_keep_any_version_of_each_sector() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (a, b, c) = (vec![b'a'; 512], vec![b'b'; 512], vec![b'c'; 512]);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            let p = root.join(format!("f{seed}"));
            std::fs::write(&p, b"").unwrap();
            let cut = PowerCut::install(&root, seed).unwrap();
            cut.set_torn_writes(true);
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            for (at, data) in [(0, &a), (512, &b), (0, &c)] {
                write(&f, at, &[data], false).unwrap().unwrap();
            }
            cut.crash();
            drop(cut);
            let got = read(&p);
            let first = got.first().copied().unwrap_or(b'-');
            let second = got.get(512).copied().unwrap_or(b'-');
            assert!(
                b"-ac\0".contains(&first) && b"-b".contains(&second),
                "{got:?}"
            );
            seen.insert((first, second));
        }
        // The later write can survive without the earlier one (reordered
        // writeback), leaving a hole of zeros.
        assert!(seen.contains(&(0, b'b')), "{seen:?}");
        assert!(seen.contains(&(b'c', b'-')), "{seen:?}");
    }

    #[test]
    fn files_outside_the_directory_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let _cut = PowerCut::install(dir.path(), 4).unwrap();
        let f = File::create(other.path().join("f")).unwrap();
        assert!(write(&f, 0, &[b"x"], false).is_none());
    }
}
