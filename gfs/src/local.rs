//! [`LocalStore`]: the [`FileStore`] over one local data directory.
//!
//! A name "log/000001.log" is the file `<dir>/log/000001.log`; directories are
//! made as names need them. Reads go through io_uring, several blocks in one
//! submission (see `uring.rs`), and writes and syncs, one file's each, by
//! plain system calls; [`IoMode::Syscall`] takes the reads there too, the
//! baseline a benchmark compares against.
//!
//! Writers write at explicit offsets, never through a shared file position,
//! so a reader of the same name sees data as soon as it is appended. What the
//! file system needs for a crash not to lose a file is done here, since the
//! layers above only see names: the first sync of a new file also syncs the
//! directories its creation changed, and rename and delete sync the parent
//! directory before they return (a renamed manifest must not revert).

use crate::io::{Io, IoMode};
use crate::name::validate;
use crate::shared_map::SharedMap;
use crate::zeros::{Renew, Renewer};
use crate::{Error, FileStore, Mapped, ReadableFile, Result, WritableFile};
use parking_lot::Mutex;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A [`FileStore`] keeping each file as a file under one directory.
/// Cloning shares the directory and the I/O counters.
#[derive(Clone)]
pub struct LocalStore {
    inner: Arc<Inner>,
}

struct Inner {
    root: PathBuf,
    io: Io,
    /// Whether readers may map files (see [`LocalStore::set_maps`]).
    maps: AtomicBool,
    /// Renews the zeros ahead of logs (see `zeros.rs`).
    zeros: Renewer,
}

impl LocalStore {
    /// Opens (creating it if needed) the data directory `dir`, with io_uring.
    pub fn open(dir: impl AsRef<Path>) -> Result<LocalStore> {
        Self::open_with(dir, IoMode::Uring)
    }

    /// Opens `dir` with the given I/O mode. If io_uring is asked for but the
    /// kernel refuses it, logs a warning and uses syscalls ([`Self::io_mode`]
    /// tells which one is in use).
    pub fn open_with(dir: impl AsRef<Path>, mode: IoMode) -> Result<LocalStore> {
        let dir = dir.as_ref();
        let label = dir.display().to_string();
        let io = Io::new(mode);
        create_dir_synced(&io, dir, None).map_err(|e| Error::io(&label, e))?;
        let root = fs::canonicalize(dir).map_err(|e| Error::io(&label, e))?;
        Ok(LocalStore {
            inner: Arc::new(Inner {
                root,
                zeros: Renewer::new(io.mode()),
                io,
                maps: AtomicBool::new(true),
            }),
        })
    }

    /// Whether readers opened from now on may map their files
    /// ([`ReadableFile::map`]; on by default). Off, every read is a `pread`:
    /// a disk error on a mapped page kills the process where a `pread`
    /// would have failed that one read.
    pub fn set_maps(&self, on: bool) {
        self.inner.maps.store(on, Ordering::Relaxed);
    }

    /// The I/O path actually in use.
    pub fn io_mode(&self) -> IoMode {
        self.inner.io.mode()
    }

    /// Counts of io_uring batches, requests and plain syscalls so far.
    #[cfg(test)]
    pub(crate) fn io_stats(&self) -> crate::IoStats {
        self.inner.io.stats()
    }

    /// The data directory (canonical path).
    pub(crate) fn dir(&self) -> &Path {
        &self.inner.root
    }
}

impl Inner {
    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// fsync of a directory, so the entries just changed in it are durable.
    fn sync_dir(&self, dir: &Path, name: &str) -> Result<()> {
        let f = File::open(dir).map_err(|e| Error::io(name, e))?;
        self.io.sync(&f, false).map_err(|e| Error::io(name, e))
    }

    /// Removes a file's name, its directory not yet synced; returns its path.
    fn unlink(&self, name: &str) -> Result<PathBuf> {
        validate(name)?;
        let path = self.path(name);
        crate::power::namespace(&path).map_err(|e| Error::io(name, e))?;
        fs::remove_file(&path).map_err(|e| fail(name, e))?;
        Ok(path)
    }

    fn sync_dirs(&self, dirs: &mut Vec<PathBuf>, name: &str) -> Result<()> {
        while let Some(dir) = dirs.last() {
            self.sync_dir(dir, name)?;
            dirs.pop();
        }
        Ok(())
    }

    /// Creates the missing directories above `path`; returns the directories
    /// whose entries changed (each new directory's parent), to be synced.
    fn make_parents(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        match path.parent() {
            Some(dir) => make_dirs(dir, Some(&self.root)),
            None => Ok(Vec::new()),
        }
    }
}

/// Creates `dir` and its missing parents (below `stop`, if given); returns
/// the directories whose entries changed (each new directory's parent).
fn make_dirs(dir: &Path, stop: Option<&Path>) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if Some(d) == stop || d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        at = d.parent();
    }
    let mut changed = Vec::new();
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => changed.extend(d.parent().map(Path::to_path_buf)),
            // Another thread made it first.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(changed)
}

/// Creates directory `dir` and any missing parents, as `create_dir_all`
/// does, and makes their entries durable before returning: fsyncs the
/// parent of every directory it made. For directories that hold files the
/// code relies on after a power cut (a store's root, a chunkserver's
/// `chunks/`). With `stop`, directories at or above it are never made: a
/// missing `stop` is an error, not something to recreate.
pub(crate) fn create_dir_synced(io: &Io, dir: &Path, stop: Option<&Path>) -> io::Result<()> {
    if let Some(stop) = stop {
        if !stop.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} is missing", stop.display()),
            ));
        }
    }
    for d in make_dirs(dir, stop)? {
        // A relative `dir`'s first component has the parent "".
        let d = if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &d
        };
        io.sync(&File::open(d)?, false)?;
    }
    Ok(())
}

/// Maps an OS error about `name` to the store's error: a missing file, or a
/// path that crosses a regular file or names a directory, is "not found".
fn fail(name: &str, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR | libc::EISDIR) => Error::NotFound(name.to_string()),
        Some(libc::EEXIST) => Error::AlreadyExists(name.to_string()),
        _ => Error::io(name, e),
    }
}

/// Opens an existing regular file (a directory of that name does not count).
fn open_file(opts: &OpenOptions, path: &Path, name: &str) -> Result<(File, u64)> {
    let file = opts.open(path).map_err(|e| fail(name, e))?;
    let meta = file.metadata().map_err(|e| Error::io(name, e))?;
    if !meta.is_file() {
        return Err(Error::NotFound(name.to_string()));
    }
    Ok((file, meta.len()))
}

/// All regular files under `root` whose relative name starts with `prefix`,
/// sorted. Only directories that can hold such names are read.
fn walk(root: &Path, prefix: &str) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut dirs = vec![String::new()];
    while let Some(rel) = dirs.pop() {
        let entries = match fs::read_dir(root.join(&rel)) {
            Ok(rd) => rd,
            // Removed while we were listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            // Names this store writes are UTF-8; anything else is not ours.
            let Ok(file_name) = entry.file_name().into_string() else {
                continue;
            };
            let full = format!("{rel}{file_name}");
            let kind = match entry.file_type() {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if kind.is_dir() {
                let d = full + "/";
                if d.starts_with(prefix) || prefix.starts_with(&d) {
                    dirs.push(d);
                }
            } else if kind.is_file() && full.starts_with(prefix) {
                out.push(full);
            }
        }
    }
    out.sort();
    Ok(out)
}

impl LocalStore {
    /// A new empty file, written at offsets from 0.
    fn create_writer(&self, name: &str) -> Result<LocalWriter> {
        validate(name)?;
        let inner = &self.inner;
        let path = inner.path(name);
        let mut opts = OpenOptions::new();
        // Readable too: a log's appends may store into a shared mapping.
        opts.read(true).write(true).create_new(true);
        let crosses_file = || Error::InvalidName(name.to_string(), "a parent is an existing file");
        let mut dirs = Vec::new();
        crate::power::namespace(&path).map_err(|e| Error::io(name, e))?;
        let file = match opts.open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                dirs = inner
                    .make_parents(&path)
                    .map_err(|e| match e.raw_os_error() {
                        Some(libc::EEXIST | libc::ENOTDIR) => crosses_file(),
                        _ => Error::io(name, e),
                    })?;
                opts.open(&path)
            }
            other => other,
        }
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOTDIR) => crosses_file(),
            _ => fail(name, e),
        })?;
        crate::power::created(&path);
        if let Some(parent) = path.parent() {
            if !dirs.iter().any(|d| d == parent) {
                dirs.push(parent.to_path_buf());
            }
        }
        Ok(LocalWriter {
            inner: inner.clone(),
            name: name.to_string(),
            file: Arc::new(file),
            len: 0,
            unsynced_dirs: dirs,
            zeros: None,
        })
    }
}

impl LocalStore {
    /// A new empty commit log (see [`FileStore::create_log`]).
    fn create_log_writer(&self, name: &str) -> Result<LocalWriter> {
        let mut w = self.create_writer(name)?;
        w.zeros = Some(Arc::new(LogZeros {
            name: w.name.clone(),
            file: w.file.clone(),
            zeroed_to: AtomicU64::new(0),
            end: AtomicU64::new(0),
            deciding: Mutex::new(()),
            refilling: Mutex::new(()),
            window: Mutex::new(None),
            asked: AtomicBool::new(false),
        }));
        Ok(w)
    }
}

impl FileStore for LocalStore {
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(self.create_writer(name)?))
    }

    /// A file whose synced appends land on zeros written ahead of them (see
    /// `LocalWriter::zero_ahead`).
    fn create_log(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(self.create_log_writer(name)?))
    }

    fn open_append(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        validate(name)?;
        let (file, len) = open_file(OpenOptions::new().write(true), &self.inner.path(name), name)?;
        Ok(Box::new(LocalWriter {
            inner: self.inner.clone(),
            name: name.to_string(),
            file: Arc::new(file),
            len,
            unsynced_dirs: Vec::new(),
            zeros: None,
        }))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ReadableFile>> {
        validate(name)?;
        let (file, len) = open_file(OpenOptions::new().read(true), &self.inner.path(name), name)?;
        Ok(Arc::new(LocalReader {
            inner: self.inner.clone(),
            name: name.to_string(),
            file,
            known_len: AtomicU64::new(len),
        }))
    }

    fn delete(&self, name: &str) -> Result<()> {
        let path = self.inner.unlink(name)?;
        match path.parent() {
            Some(parent) => self.inner.sync_dir(parent, name),
            None => Ok(()),
        }
    }

    fn delete_unused(&self, names: &[String]) -> Vec<Result<()>> {
        let mut results = Vec::with_capacity(names.len());
        let mut dirs: Vec<(PathBuf, Vec<usize>)> = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match self.inner.unlink(name) {
                Ok(path) => {
                    if let Some(parent) = path.parent() {
                        match dirs.iter_mut().find(|(d, _)| d == parent) {
                            Some((_, at)) => at.push(i),
                            None => dirs.push((parent.to_path_buf(), vec![i])),
                        }
                    }
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        for (dir, at) in dirs {
            if let Err(e) = self.inner.sync_dir(&dir, &names[at[0]]) {
                for i in at {
                    results[i] = Err(Error::io(&names[i], io::Error::other(e.to_string())));
                }
            }
        }
        results
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate(from)?;
        validate(to)?;
        let inner = &self.inner;
        let (src, dst) = (inner.path(from), inner.path(to));
        match fs::symlink_metadata(&src) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(Error::NotFound(from.to_string())),
            Err(e) => return Err(fail(from, e)),
        }
        let mut dirs = match dst.parent() {
            Some(p) if !p.is_dir() => inner.make_parents(&dst).map_err(|e| Error::io(to, e))?,
            _ => Vec::new(),
        };
        crate::power::namespace(&dst).map_err(|e| Error::io(to, e))?;
        fs::rename(&src, &dst).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NotFound(from.to_string()),
            _ => Error::io(to, e),
        })?;
        // Both directory entries must be durable: the new name, and the
        // removal of the old one.
        for p in [dst.parent(), src.parent()].into_iter().flatten() {
            if !dirs.iter().any(|d| d == p) {
                dirs.push(p.to_path_buf());
            }
        }
        inner.sync_dirs(&mut dirs, to)
    }

    fn exists(&self, name: &str) -> Result<bool> {
        validate(name)?;
        match fs::metadata(self.inner.path(name)) {
            Ok(m) => Ok(m.is_file()),
            Err(e) => match fail(name, e) {
                Error::NotFound(_) => Ok(false),
                other => Err(other),
            },
        }
    }

    fn size(&self, name: &str) -> Result<u64> {
        validate(name)?;
        let meta = fs::metadata(self.inner.path(name)).map_err(|e| fail(name, e))?;
        if !meta.is_file() {
            return Err(Error::NotFound(name.to_string()));
        }
        Ok(meta.len())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        walk(&self.inner.root, prefix).map_err(|e| Error::io(prefix, e))
    }

    fn status(&self) -> Vec<String> {
        let inner = &self.inner;
        let head = format!("local dir={} io={}", inner.root.display(), inner.io.mode());
        let line = match walk(&inner.root, "") {
            Ok(names) => {
                let bytes: u64 = names
                    .iter()
                    .filter_map(|n| fs::metadata(inner.path(n)).ok())
                    .map(|m| m.len())
                    .sum();
                let s = inner.io.stats();
                format!(
                    "{head} files={} bytes={bytes} uring_batches={} uring_ops={} syscall_ops={}",
                    names.len(),
                    s.uring_batches,
                    s.uring_ops,
                    s.syscall_ops
                )
            }
            Err(e) => format!("{head} error={e}"),
        };
        vec![line]
    }
}

/// How far past its first store a log's window of zeros is mapped (see
/// `shared_map.rs`): the zeros' renewals within it need no new mapping.
const WINDOW_REACH: u64 = 16 << 20;

/// A file being appended to at explicit offsets.
struct LocalWriter {
    inner: Arc<Inner>,
    name: String,
    file: Arc<File>,
    /// Where the next append goes; only advanced by complete writes.
    len: u64,
    /// Directories changed by this file's creation, synced on first sync.
    unsynced_dirs: Vec<PathBuf>,
    /// For a commit log (`create_log`): the zeros written ahead of the data.
    zeros: Option<Arc<LogZeros>>,
}

/// A commit log's zeros ahead of its data (see `zeros.rs`), shared with the
/// thread that renews them, by the protocol of [`Renew`].
struct LogZeros {
    name: String,
    file: Arc<File>,
    /// Where the zeros end (0 until the first append).
    zeroed_to: AtomicU64,
    /// Where the data ends, as of the last append.
    end: AtomicU64,
    /// Held by the writer while it writes past the zeros (its own zeros
    /// and data there), and by the renewal while it decides what to write.
    deciding: Mutex<()>,
    /// Held while the renewal writes (and faults in what it wrote).
    refilling: Mutex<()>,
    /// The zeros ahead of the data mapped shared and writable, which the
    /// unsynced appends store into instead of writing them (see
    /// [`LocalWriter::store_mapped`]); shared with a renewal while it
    /// faults in the pages it wrote.
    window: Mutex<Option<Arc<SharedMap>>>,
    /// The renewal was asked for and has not run.
    asked: AtomicBool,
}

impl Renew for LogZeros {
    fn renew(&self, io: &Io) {
        let deciding = self.deciding.lock();
        self.asked.store(false, Ordering::Release);
        let to = self.zeroed_to.load(Ordering::Acquire);
        let end = self.end.load(Ordering::Acquire);
        let Some(z) = crate::zeros::refill(to, end, u64::MAX) else {
            return;
        };
        // Under a power-cut model the writer writes its own zeros, in order
        // with its data (the model sees writes and syncs, not stores).
        if crate::power::covers(&self.file) {
            return;
        }
        let _refilling = self.refilling.lock();
        drop(deciding);
        for (off, piece) in z.pieces {
            if let Err(e) = io.write(&self.file, off, &[piece], false) {
                log::debug!("{}: zeros ahead: {e}", self.name);
                return;
            }
        }
        self.zeroed_to.store(z.upto, Ordering::Release);
        // The appends' window reaches over the new zeros: fault their pages
        // in here, not one by one in the appends' stores.
        let window = self.window.lock().clone();
        if let Some(w) = window {
            // SAFETY: the file holds the zeros just written, and the writer
            // cuts it only after waiting for `refilling`.
            unsafe { w.populate(to, z.upto - to) };
        }
    }
}

impl LocalWriter {
    /// Before a log append of `len` bytes ending at `end`: zeros written
    /// past it (see `zeros.rs`). The caller holds `z.deciding`, and no
    /// renewal is writing.
    fn zero_ahead(&self, z: &LogZeros, end: u64, len: u64) -> Result<()> {
        let to = z.zeroed_to.load(Ordering::Acquire);
        if let Some(w) = crate::zeros::ahead(to, end, len, u64::MAX) {
            for (off, piece) in w.pieces {
                self.inner
                    .io
                    .write(&self.file, off, &[piece], false)
                    .map_err(|e| Error::io(&self.name, e))?;
            }
            z.zeroed_to.store(w.upto, Ordering::Release);
        }
        Ok(())
    }

    /// Stores an unsynced log append at `offset` through the window of
    /// zeros ahead of the data (mapped now if need be) instead of writing
    /// it: a buffered `pwritev` of a small record costs ext4's whole write
    /// path, a store into a page-cache page a copy. The stores survive a
    /// `kill -9` as the writes did (they are the page cache's), an
    /// fdatasync writes them back, and readers of the file see them. False
    /// where the append does not lie inside zeros already in the file, or
    /// under a power-cut model, which sees only writes and syncs.
    fn store_mapped(&self, offset: u64, n: u64, bufs: &[&[u8]]) -> bool {
        let Some(z) = &self.zeros else {
            return false;
        };
        let to = z.zeroed_to.load(Ordering::Acquire);
        if offset + n > to {
            return false;
        }
        let mut window = z.window.lock();
        if !window.as_ref().is_some_and(|m| m.reaches(offset, n)) {
            *window = None;
            if crate::power::covers(&self.file) {
                return false;
            }
            // SAFETY: the file holds `[offset, to)`: the zeros up to `to`
            // were written before `zeroed_to` was set, and the file is cut
            // only on drop, which unmaps first. Past `to` nothing is stored.
            *window = unsafe {
                SharedMap::reaching(&self.file, offset, (to - offset).max(WINDOW_REACH), to)
            }
            .map(Arc::new);
        }
        // A renewal may be faulting pages of it in meanwhile (see
        // `SharedMap`): the stores go on.
        let Some(w) = window.as_deref() else {
            return false;
        };
        // SAFETY: as above, for the zeros renewed since the mapping.
        unsafe { w.hold_to(to) };
        w.store_all(offset, bufs)
    }

    /// Unmaps a log's window of zeros: writeback write-protects every dirty
    /// page still mapped, a TLB shootdown each; one unmap flushes them all.
    fn unmap_window(&self) {
        if let Some(z) = &self.zeros {
            *z.window.lock() = None;
        }
    }

    /// Writes `bufs` at `offset` (and syncs them with the directories).
    fn write_data(&mut self, offset: u64, bufs: &[&[u8]], sync: bool) -> Result<()> {
        if sync {
            self.unmap_window();
        }
        self.inner
            .io
            .write(&self.file, offset, bufs, sync)
            .map_err(|e| Error::io(&self.name, e))?;
        if sync {
            self.inner.sync_dirs(&mut self.unsynced_dirs, &self.name)?;
        }
        Ok(())
    }

    fn write(&mut self, bufs: &[&[u8]], sync: bool) -> Result<u64> {
        let offset = self.len;
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset + n;
        let Some(z) = self.zeros.clone() else {
            self.write_data(offset, bufs, sync)?;
            self.len = end;
            return Ok(offset);
        };
        let to = z.zeroed_to.load(Ordering::Acquire);
        // Zeros to write first, or data past them: not while a renewal
        // writes there, nor with one deciding what to write.
        let past = end > to || crate::zeros::ahead(to, end, n, u64::MAX).is_some();
        let deciding = past.then(|| {
            let g = z.deciding.lock();
            drop(z.refilling.lock());
            g
        });
        if past {
            self.zero_ahead(&z, end, n)?;
        }
        if sync || !self.store_mapped(offset, n, bufs) {
            self.write_data(offset, bufs, sync)?;
        }
        drop(deciding);
        self.len = end;
        z.end.store(end, Ordering::Release);
        let to = z.zeroed_to.load(Ordering::Acquire);
        if crate::zeros::runs_low(to, end, u64::MAX) && !z.asked.swap(true, Ordering::AcqRel) {
            self.inner.zeros.ask(z);
        }
        Ok(offset)
    }
}

impl WritableFile for LocalWriter {
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.write(bufs, false)
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.write(bufs, true)
    }
    fn sync(&mut self) -> Result<()> {
        self.unmap_window();
        self.inner
            .io
            .sync(&self.file, true)
            .map_err(|e| Error::io(&self.name, e))?;
        self.inner.sync_dirs(&mut self.unsynced_dirs, &self.name)
    }
    fn len(&self) -> u64 {
        self.len
    }
}

impl Drop for LocalWriter {
    /// A clean close leaves no zeros after a log's data. (A power-cut
    /// model sees only writes and syncs, so under one the zeros stay.)
    fn drop(&mut self) {
        self.unmap_window();
        let Some(z) = &self.zeros else {
            return;
        };
        // No renewal runs now, nor writes after this (it finds no zeros
        // ahead of the data).
        let _deciding = z.deciding.lock();
        drop(z.refilling.lock());
        let to = z.zeroed_to.swap(self.len, Ordering::AcqRel);
        z.end.store(self.len, Ordering::Release);
        if to > self.len && !crate::power::covers(&self.file) {
            if let Err(e) = self.file.set_len(self.len) {
                log::debug!("{}: zeros after the data stay: {e}", self.name);
            }
        }
    }
}

/// A file open for positional reads, shared between threads.
struct LocalReader {
    inner: Arc<Inner>,
    name: String,
    file: File,
    /// Last size seen: reads inside it need no fstat; reads past it refresh it,
    /// so a file that is still growing can be read as it grows.
    known_len: AtomicU64,
}

impl LocalReader {
    fn current_len(&self) -> Result<u64> {
        let len = self
            .file
            .metadata()
            .map_err(|e| Error::io(&self.name, e))?
            .len();
        self.known_len.store(len, Ordering::Relaxed);
        Ok(len)
    }

    fn short(&self, offset: u64, wanted: usize, available: u64) -> Error {
        Error::ShortRead {
            name: self.name.clone(),
            offset,
            wanted,
            available,
        }
    }

    /// Refuses a range past the end before any buffer is allocated, so a
    /// corrupt length read from disk cannot ask for gigabytes.
    fn check(&self, offset: u64, len: usize) -> Result<()> {
        let known = self.known_len.load(Ordering::Relaxed);
        let Some(end) = offset.checked_add(len as u64) else {
            return Err(self.short(offset, len, known));
        };
        if end <= known {
            return Ok(());
        }
        let now = self.current_len()?;
        if end <= now {
            Ok(())
        } else {
            Err(self.short(offset, len, now))
        }
    }

    /// Reads checked ranges; a range that still comes back short (the file
    /// was truncated under us) is a short read.
    fn read_ranges(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        for &(offset, len) in ranges {
            self.check(offset, len)?;
        }
        let bufs = self
            .inner
            .io
            .read(&self.file, ranges)
            .map_err(|e| Error::io(&self.name, e))?;
        for (&(offset, len), buf) in ranges.iter().zip(&bufs) {
            if buf.len() < len {
                return Err(self.short(offset, len, offset + buf.len() as u64));
            }
        }
        Ok(bufs)
    }
}

impl ReadableFile for LocalReader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut bufs = self.read_ranges(&[(offset, len)])?;
        bufs.pop().ok_or_else(|| self.short(offset, len, 0))
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        self.read_ranges(ranges)
    }
    fn len(&self) -> Result<u64> {
        self.current_len()
    }
    fn map(&self) -> Option<Arc<Mapped>> {
        if !self.inner.maps.load(Ordering::Relaxed) {
            return None;
        }
        Mapped::of(&self.file, self.known_len.load(Ordering::Relaxed)).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const MODES: [IoMode; 2] = [IoMode::Uring, IoMode::Syscall];

    fn store(mode: IoMode) -> (tempfile::TempDir, LocalStore) {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::open_with(dir.path().join("data"), mode).unwrap();
        (dir, s)
    }

    #[test]
    fn unused_files_are_deleted_in_one_batch() {
        let (_d, s) = store(IoMode::Syscall);
        for name in ["sst/1.sst", "sst/2.sst", "logs/a/1.log"] {
            s.create(name).unwrap().append_sync(&[b"x"]).unwrap();
        }
        let names: Vec<String> = [
            "sst/1.sst",
            "sst/9.sst",
            "logs/a/1.log",
            "sst/2.sst",
            "../x",
        ]
        .map(String::from)
        .into();
        let results = s.delete_unused(&names);
        assert_eq!(results.len(), names.len());
        assert!(results[0].is_ok() && results[2].is_ok() && results[3].is_ok());
        assert!(
            matches!(results[1], Err(Error::NotFound(_))),
            "{:?}",
            results[1]
        );
        assert!(results[4].is_err(), "a bad name is refused");
        for name in ["sst/1.sst", "sst/2.sst", "logs/a/1.log"] {
            assert!(!s.exists(name).unwrap(), "{name} is gone");
        }
    }

    #[test]
    fn roundtrip_in_both_modes() {
        for mode in MODES {
            let (_d, s) = store(mode);
            assert_eq!(s.io_mode(), mode);
            let mut w = s.create("log/000001.log").unwrap();
            assert!(w.is_empty());
            assert_eq!(w.append(b"hello").unwrap(), 0);
            assert_eq!(w.append_vectored(&[b" ", b"", b"world"]).unwrap(), 5);
            assert_eq!(w.append_sync(&[b"!", b"?"]).unwrap(), 11);
            assert_eq!(w.append(b"").unwrap(), 13);
            w.sync().unwrap();
            assert_eq!(w.len(), 13);
            let r = s.open("log/000001.log").unwrap();
            assert_eq!(r.len().unwrap(), 13);
            assert_eq!(r.read_at(0, 13).unwrap(), b"hello world!?");
            assert_eq!(r.read_at(6, 5).unwrap(), b"world");
            assert_eq!(r.read_at(13, 0).unwrap(), b"");
            assert_eq!(s.size("log/000001.log").unwrap(), 13);
            assert!(s.exists("log/000001.log").unwrap());
            assert!(!s.exists("log").unwrap(), "a directory is not a file");
            assert!(!s.exists("log/000002.log").unwrap());
            let st = s.io_stats();
            match mode {
                // Unsynced appends go by pwritev (see `Io::write`).
                IoMode::Uring => assert!(st.uring_ops > 0, "{st:?}"),
                IoMode::Syscall => assert!(st.syscall_ops > 0 && st.uring_ops == 0, "{st:?}"),
            }
        }
    }

    #[test]
    fn a_reader_maps_the_file_as_long_as_it_was_when_opened() {
        let (_d, s) = store(IoMode::Syscall);
        let mut w = s.create("sst/000001.sst").unwrap();
        w.append(b"immutable bytes").unwrap();
        w.sync().unwrap();
        let r = s.open("sst/000001.sst").unwrap();
        let m = r.map().unwrap();
        assert_eq!(&m[..], b"immutable bytes");
        drop(r);
        // A mapping outlives its reader and the file's name.
        s.delete("sst/000001.sst").unwrap();
        assert_eq!(&m[..9], b"immutable");
        s.create("sst/000002.sst").unwrap();
        assert!(s.open("sst/000002.sst").unwrap().map().is_none(), "empty");
        s.set_maps(false);
        s.create("sst/000003.sst").unwrap().append(b"x").unwrap();
        assert!(
            s.open("sst/000003.sst").unwrap().map().is_none(),
            "maps off"
        );
        let mem = crate::MemStore::new();
        mem.create("x").unwrap().append(b"x").unwrap();
        assert!(mem.open("x").unwrap().map().is_none(), "nothing to map");
    }

    #[test]
    fn io_uring_really_runs_here() {
        let disabled = fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "0".to_string());
        let (_d, s) = store(IoMode::Uring);
        if disabled != "0" {
            // The kernel forbids it: the store must have fallen back.
            assert_eq!(s.io_mode(), IoMode::Syscall);
            return;
        }
        assert_eq!(s.io_mode(), IoMode::Uring);
        let mut w = s.create("a").unwrap();
        w.append_sync(&[b"x"]).unwrap();
        let r = s.open("a").unwrap();
        assert_eq!(
            r.read_many(&[(0, 1), (0, 1)]).unwrap(),
            vec![b"x".to_vec(); 2]
        );
        let st = s.io_stats();
        // One batch of two reads; by system calls (one file's each, see
        // `uring.rs`): the fsync of the new root's parent at open, the write
        // and its fdatasync, the directory's fsync.
        assert_eq!(st.uring_batches, 1, "{st:?}");
        assert_eq!(st.uring_ops, 2, "{st:?}");
        assert_eq!(st.syscall_ops, 4, "{st:?}");
        assert!(s.status()[0].contains(" io=io_uring "));
    }

    #[test]
    fn read_many_returns_ranges_in_order() {
        for mode in MODES {
            let (_d, s) = store(mode);
            let mut w = s.create("f").unwrap();
            let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 256) as u8).collect();
            w.append(&data).unwrap();
            let r = s.open("f").unwrap();
            // More ranges than one ring holds, out of order, one empty.
            let mut ranges: Vec<(u64, usize)> = (0..150u64).rev().map(|i| (i * 33, 17)).collect();
            ranges.push((4999, 0));
            let got = r.read_many(&ranges).unwrap();
            assert_eq!(got.len(), ranges.len());
            for (&(o, l), g) in ranges.iter().zip(&got) {
                assert_eq!(g[..], data[o as usize..o as usize + l]);
            }
            assert!(r.read_many(&[(0, 1), (4990, 11)]).is_err());
        }
    }

    #[test]
    fn large_file_random_reads() {
        let (_d, s) = store(IoMode::Uring);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let data: Vec<u8> = (0..6 << 20).map(|_| rng.gen()).collect();
        let mut w = s.create("big/blob").unwrap();
        for chunk in data.chunks(1 << 20) {
            w.append(chunk).unwrap();
        }
        w.sync().unwrap();
        let r = s.open("big/blob").unwrap();
        assert_eq!(r.len().unwrap(), data.len() as u64);
        for _ in 0..200 {
            let len = rng.gen_range(0..100_000usize);
            let off = rng.gen_range(0..=(data.len() - len));
            assert_eq!(
                r.read_at(off as u64, len).unwrap()[..],
                data[off..off + len]
            );
        }
        assert_eq!(r.read_at(0, data.len()).unwrap(), data);
    }

    #[test]
    fn readers_see_appends_while_writer_runs() {
        let (_d, s) = store(IoMode::Uring);
        let mut w = s.create("log/live").unwrap();
        let record = |i: u32| -> Vec<u8> { vec![(i % 256) as u8; 100] };
        const N: u32 = 300;
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let r = s.open("log/live").unwrap();
                    let mut checked = 0u64;
                    let mut sizes_seen = 0;
                    while checked < u64::from(N) * 100 {
                        let len = r.len().unwrap();
                        assert!(len >= checked);
                        if len > checked {
                            sizes_seen += 1;
                        }
                        // Whole records only: check each one's bytes.
                        let whole = len / 100 * 100;
                        while checked < whole {
                            let i = (checked / 100) as u32;
                            assert_eq!(r.read_at(checked, 100).unwrap(), record(i));
                            checked += 100;
                        }
                        std::thread::yield_now();
                    }
                    sizes_seen
                })
            })
            .collect();
        for i in 0..N {
            assert_eq!(w.append(&record(i)).unwrap(), u64::from(i) * 100);
        }
        for r in readers {
            assert!(r.join().unwrap() >= 1);
        }
    }

    #[test]
    fn short_reads_are_errors() {
        for mode in MODES {
            let (_d, s) = store(mode);
            s.create("f").unwrap().append(b"0123456789").unwrap();
            let r = s.open("f").unwrap();
            match r.read_at(8, 5) {
                Err(Error::ShortRead {
                    name,
                    offset: 8,
                    wanted: 5,
                    available: 10,
                }) => assert_eq!(name, "f"),
                other => panic!("expected short read, got {other:?}"),
            }
            assert!(matches!(r.read_at(11, 0), Err(Error::ShortRead { .. })));
            assert!(matches!(
                r.read_at(u64::MAX, 2),
                Err(Error::ShortRead { .. })
            ));
            // A corrupt huge length fails without allocating it.
            assert!(matches!(
                r.read_at(0, usize::MAX),
                Err(Error::ShortRead { .. })
            ));
        }
    }

    #[test]
    fn invalid_names_are_rejected() {
        let (_d, s) = store(IoMode::Uring);
        s.create("ok").unwrap();
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "a/",
            ".",
            "a/./b",
            "n\0ul",
        ] {
            let invalid = |r: Result<()>| matches!(r, Err(Error::InvalidName(..)));
            assert!(invalid(s.create(bad).map(|_| ())), "create {bad:?}");
            assert!(
                invalid(s.open_append(bad).map(|_| ())),
                "open_append {bad:?}"
            );
            assert!(invalid(s.open(bad).map(|_| ())), "open {bad:?}");
            assert!(invalid(s.delete(bad)), "delete {bad:?}");
            assert!(invalid(s.exists(bad).map(|_| ())), "exists {bad:?}");
            assert!(invalid(s.size(bad).map(|_| ())), "size {bad:?}");
            assert!(invalid(s.rename("ok", bad)), "rename to {bad:?}");
            assert!(invalid(s.rename(bad, "ok2")), "rename from {bad:?}");
        }
        assert!(s.exists("ok").unwrap());
    }

    #[test]
    fn name_conflicts_and_missing_files() {
        let (_d, s) = store(IoMode::Uring);
        s.create("a").unwrap();
        assert!(matches!(s.create("a"), Err(Error::AlreadyExists(_))));
        assert!(matches!(s.create("a/b"), Err(Error::InvalidName(..))));
        assert!(matches!(s.create("a/b/c"), Err(Error::InvalidName(..))));
        s.create("d/e").unwrap();
        // "d" is only a directory: not a file of the store.
        assert!(matches!(s.open("d"), Err(Error::NotFound(_))));
        assert!(matches!(s.open_append("d"), Err(Error::NotFound(_))));
        assert!(matches!(s.size("d"), Err(Error::NotFound(_))));
        assert!(matches!(s.delete("d"), Err(Error::NotFound(_))));
        assert!(matches!(s.rename("d", "z"), Err(Error::NotFound(_))));
        assert!(matches!(s.open("a/x"), Err(Error::NotFound(_))));
        assert!(matches!(s.open("nope"), Err(Error::NotFound(_))));
        assert!(matches!(s.delete("nope"), Err(Error::NotFound(_))));
        assert!(matches!(s.rename("nope", "x"), Err(Error::NotFound(_))));
        s.delete("a").unwrap();
        assert!(!s.exists("a").unwrap());
        assert_eq!(s.list("").unwrap(), vec!["d/e"]);
    }

    #[test]
    fn rename_replaces_target() {
        for mode in MODES {
            let (_d, s) = store(mode);
            s.create("MANIFEST-2").unwrap().append(b"new").unwrap();
            s.create("CURRENT")
                .unwrap()
                .append(b"old contents")
                .unwrap();
            let old_reader = s.open("CURRENT").unwrap();
            s.rename("MANIFEST-2", "CURRENT").unwrap();
            assert!(!s.exists("MANIFEST-2").unwrap());
            assert_eq!(s.open("CURRENT").unwrap().read_at(0, 3).unwrap(), b"new");
            // An open reader keeps the replaced file.
            assert_eq!(old_reader.read_at(0, 3).unwrap(), b"old");
            // Into a directory that does not exist yet.
            s.rename("CURRENT", "x/y/CURRENT").unwrap();
            assert_eq!(s.list("").unwrap(), vec!["x/y/CURRENT"]);
            assert_eq!(s.size("x/y/CURRENT").unwrap(), 3);
        }
    }

    #[test]
    fn list_with_prefixes_and_nested_dirs() {
        let (_d, s) = store(IoMode::Uring);
        for n in [
            "manifest",
            "log/000002.log",
            "log/000001.log",
            "sst/b/2.sst",
            "sst/a/1.sst",
            "sst/a/deep/3.sst",
            "sstable",
        ] {
            s.create(n).unwrap();
        }
        let all = s.list("").unwrap();
        let mut sorted = all.clone();
        sorted.sort();
        assert_eq!(all, sorted);
        assert_eq!(all.len(), 7);
        assert_eq!(
            s.list("log/").unwrap(),
            vec!["log/000001.log", "log/000002.log"]
        );
        assert_eq!(s.list("log/000002").unwrap(), vec!["log/000002.log"]);
        assert_eq!(
            s.list("sst/a").unwrap(),
            vec!["sst/a/1.sst", "sst/a/deep/3.sst"]
        );
        assert_eq!(
            s.list("sst").unwrap(),
            vec!["sst/a/1.sst", "sst/a/deep/3.sst", "sst/b/2.sst", "sstable"]
        );
        assert_eq!(s.list("m").unwrap(), vec!["manifest"]);
        assert!(s.list("zzz").unwrap().is_empty());
        assert!(s.list("sst/c/").unwrap().is_empty());
        s.delete("sst/b/2.sst").unwrap();
        assert_eq!(s.list("sst/b").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn synced_data_survives_reopen() {
        for mode in MODES {
            let dir = tempfile::tempdir().unwrap();
            {
                let s = LocalStore::open_with(dir.path(), mode).unwrap();
                let mut w = s.create("log/1/000001.log").unwrap();
                w.append_sync(&[b"rec1", b"rec2"]).unwrap();
            }
            let s = LocalStore::open_with(dir.path(), mode).unwrap();
            let r = s.open("log/1/000001.log").unwrap();
            assert_eq!(r.read_at(0, 8).unwrap(), b"rec1rec2");
            // Appending resumes at the end.
            let mut w = s.open_append("log/1/000001.log").unwrap();
            assert_eq!(w.len(), 8);
            assert_eq!(w.append_sync(&[b"rec3"]).unwrap(), 8);
            assert_eq!(r.read_at(8, 4).unwrap(), b"rec3");
        }
    }

    #[test]
    fn a_new_store_directory_survives_a_power_cut() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let cut = crate::PowerCut::install(&root, 1).unwrap();
        let s = LocalStore::open(root.join("a/b")).unwrap();
        s.create("f").unwrap().append_sync(&[b"x"]).unwrap();
        assert_eq!(cut.crash().dirs_lost, 0);
        assert_eq!(std::fs::read(root.join("a/b/f")).unwrap(), b"x");
    }

    #[test]
    fn first_sync_syncs_new_directories_once() {
        let (_d, s) = store(IoMode::Uring);
        let mut w = s.create("t1/tablet/sst/000001.sst").unwrap();
        w.append(b"x").unwrap();
        let before = s.io_stats().syscall_ops;
        w.sync().unwrap();
        // fdatasync + fsync of the four directories the creation changed.
        assert_eq!(s.io_stats().syscall_ops - before, 5);
        let before = s.io_stats().syscall_ops;
        w.sync().unwrap();
        assert_eq!(s.io_stats().syscall_ops - before, 1);
    }

    #[test]
    fn status_reports_files_and_bytes() {
        let (_d, s) = store(IoMode::Syscall);
        s.create("a/b").unwrap().append(b"12345").unwrap();
        s.create("c").unwrap().append(b"67").unwrap();
        let st = s.status();
        assert_eq!(st.len(), 1);
        let want = format!(
            "local dir={} io=syscall files=2 bytes=7 ",
            s.dir().display()
        );
        assert!(st[0].starts_with(&want), "{}", st[0]);
    }

    #[test]
    fn a_logs_appends_land_on_zeros_that_a_clean_close_cuts() {
        for mode in MODES {
            let (_d, s) = store(mode);
            let path = s.dir().join("log");
            let mut w = s.create_log("log").unwrap();
            w.append(b"unsynced").unwrap();
            let zeroed = fs::read(&path).unwrap();
            assert!(
                zeroed.len() >= 8 + (1 << 19),
                "zeros ahead: {}",
                zeroed.len()
            );
            assert_eq!(&zeroed[..8], b"unsynced");
            w.append_sync(&[b"synced"]).unwrap();
            let on_disk = fs::read(&path).unwrap();
            assert!(
                on_disk.len() as u64 >= 14 + (1 << 19),
                "zeros ahead: {}",
                on_disk.len()
            );
            assert_eq!(&on_disk[..14], b"unsyncedsynced");
            assert!(on_disk[14..].iter().all(|&b| b == 0));
            // Readers of the open file see the zeros (a crash leaves them).
            assert_eq!(s.open("log").unwrap().read_at(8, 6).unwrap(), b"synced");
            assert_eq!(w.len(), 14);
            drop(w);
            assert_eq!(fs::read(&path).unwrap(), b"unsyncedsynced");
            // Plain files never get zeros.
            let mut p = s.create("plain").unwrap();
            p.append_sync(&[b"x"]).unwrap();
            assert_eq!(fs::metadata(s.dir().join("plain")).unwrap().len(), 1);
        }
    }

    #[test]
    fn a_logs_unsynced_appends_are_stores_that_readers_and_a_sync_see() {
        for mode in MODES {
            let (_d, s) = store(mode);
            let path = s.dir().join("log");
            let mut w = s.create_log("log").unwrap();
            // The first append writes the zeros ahead (and maps them).
            w.append(b"first").unwrap();
            let ops = |s: &LocalStore| {
                let st = s.inner.io.stats();
                st.uring_ops + st.syscall_ops
            };
            let before = ops(&s);
            let mut want = b"first".to_vec();
            for i in 0..100u32 {
                let rec = format!("record {i:04};");
                w.append(rec.as_bytes()).unwrap();
                want.extend_from_slice(rec.as_bytes());
            }
            assert_eq!(ops(&s), before, "{mode:?}: stores, no I/O");
            // Seen at once by a reader of the open file.
            let r = s.open("log").unwrap();
            assert_eq!(r.read_at(0, want.len()).unwrap(), want);
            // A synced append is written and synced, the stores with it.
            w.append_sync(&[b"synced"]).unwrap();
            want.extend_from_slice(b"synced");
            assert!(ops(&s) > before);
            w.append(b"after").unwrap();
            want.extend_from_slice(b"after");
            assert_eq!(w.len(), want.len() as u64);
            assert_eq!(&fs::read(&path).unwrap()[..want.len()], &want[..]);
            drop(w);
            assert_eq!(fs::read(&path).unwrap(), want, "{mode:?}: zeros cut");
        }
    }

    #[test]
    fn a_logs_zeros_are_renewed_in_the_background_before_its_appends_reach_their_end() {
        let (_d, s) = store(IoMode::Uring);
        let path = s.dir().join("log");
        let size = || fs::metadata(&path).unwrap().len();
        let mut w = s.create_log("log").unwrap();
        w.append(&[1u8; 1000]).unwrap();
        let first = size();
        assert!(first >= 1 << 20, "the first append wrote a window: {first}");
        // Appends into it until fewer than EARLY bytes of zeros are left.
        let mut seed = 2u8;
        while size() - w.len() >= crate::zeros::EARLY {
            w.append(&[seed; 1000]).unwrap();
            seed = seed.wrapping_add(1);
        }
        // With no further append, the file gets a window past the data.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while size() < w.len() + (1 << 20) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(size() >= w.len() + (1 << 20), "{} for {}", size(), w.len());
        let len = w.len();
        drop(w);
        assert_eq!(size(), len, "a clean close cuts them");
    }

    #[test]
    fn a_logs_append_past_its_zeros_waits_for_their_renewal_in_flight() {
        let (_d, s) = store(IoMode::Syscall);
        let mut w = s.create_log_writer("log").unwrap();
        w.append(&[1u8; 1000]).unwrap();
        let z = w.zeros.clone().unwrap();
        let to = z.zeroed_to.load(Ordering::Acquire);
        assert!(to >= 1 << 20, "the first append wrote a window: {to}");
        // The test plays the renewal: no request goes to the real one.
        z.asked.store(true, Ordering::Release);
        let refilling = z.refilling.lock();
        let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        let at = std::thread::scope(|sc| {
            let t = sc.spawn(|| {
                // Stores up to the zeros' end, then an append past it, too
                // large to write zeros of its own.
                while w.len() + big.len() as u64 <= to {
                    w.append(&[2u8; 1000]).unwrap();
                }
                w.append(&big).unwrap()
            });
            // Give the append time to reach the zeros' end (were it not to
            // wait, its data would now be in the file, under the zeros).
            let deadline = std::time::Instant::now() + std::time::Duration::from_millis(200);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            let zeros = vec![0u8; 256 << 10];
            s.inner.io.write(&z.file, to, &[&zeros], false).unwrap();
            z.zeroed_to
                .store(to + zeros.len() as u64, Ordering::Release);
            drop(refilling);
            t.join().unwrap()
        });
        assert!(at < to && at + big.len() as u64 > to);
        let back = s.open("log").unwrap().read_at(at, big.len()).unwrap();
        assert!(back == big, "the append past the zeros was overwritten");
    }

    #[test]
    fn a_logs_appends_past_its_zeros_are_written() {
        let (_d, s) = store(IoMode::Syscall);
        let mut w = s.create_log("log").unwrap();
        // Larger than what zeros are written ahead for: written, not stored.
        let big = vec![7u8; 200 << 10];
        w.append(&big).unwrap();
        w.append(b"small").unwrap();
        drop(w);
        let back = fs::read(s.dir().join("log")).unwrap();
        assert_eq!(back.len(), big.len() + 5);
        assert_eq!(&back[big.len()..], b"small");
    }

    #[test]
    fn failed_completion_is_io_error_with_name() {
        for mode in MODES {
            let (_d, s) = store(mode);
            s.create("ro").unwrap();
            // A writer on a read-only descriptor: the kernel fails the write.
            let file = File::open(s.dir().join("ro")).unwrap();
            let mut w = LocalWriter {
                inner: s.inner.clone(),
                name: "ro".to_string(),
                file: Arc::new(file),
                len: 0,
                unsynced_dirs: Vec::new(),
                zeros: None,
            };
            match w.append_sync(&[b"data"]) {
                Err(Error::Io { name, source }) => {
                    assert_eq!(name, "ro");
                    assert_eq!(source.raw_os_error(), Some(libc::EBADF));
                }
                other => panic!("expected Io error, got {other:?}"),
            }
            assert_eq!(w.len(), 0, "a failed append does not advance");
        }
    }
}
