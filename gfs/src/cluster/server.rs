//! A chunkserver: one data directory holding chunk replicas.
//!
//! The chunkserver knows its replicas (loaded by scanning its directory) but
//! not which file they belong to; the master learns where chunks are from the
//! reports made at startup and whenever a server comes back. Its health is
//! probed by the master's heartbeat: a directory that disappears or turns
//! unreadable, or an injected fault, makes the server fail, and everything it
//! held is re-replicated elsewhere.

use super::fds::FdCache;
use super::gate::{Fault, Gate};
use super::replica::{self, Replica};
use crate::io::Io;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The marker file that makes a directory a chunkserver's.
const MARKER: &str = "CHUNKSERVER";
const CHUNKS: &str = "chunks";

/// Whether [`ChunkServer::start`] brings a server up for the first time or
/// after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    /// At cluster open: the directory is made if missing.
    First,
    /// After a failure: the directory must exist.
    Again,
}

/// A chunkserver's state as the master sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// Serving reads and writes, and takes new replicas.
    Healthy,
    /// Out of space: still serves reads, takes no new replicas.
    Full(String),
    /// Down: its replicas are not used and are being copied elsewhere.
    Failed(String),
}

/// [`ChunkServer::kind`]'s values.
const HEALTHY: u8 = 0;
const FULL: u8 = 1;
const FAILED: u8 = 2;

fn kind_of(h: &Health) -> u8 {
    match h {
        Health::Healthy => HEALTHY,
        Health::Full(_) => FULL,
        Health::Failed(_) => FAILED,
    }
}

/// What a heartbeat probe found.
pub(crate) enum Probe {
    Ok,
    Full(String),
    Down(String),
}

/// One replica a server holds, as reported to the master.
pub(crate) struct Report {
    pub(crate) replica: Arc<Replica>,
    pub(crate) version: u64,
    pub(crate) len: u64,
}

/// What a scan of the directory found.
pub(crate) struct Scan {
    pub(crate) reports: Vec<Report>,
    /// Replica files that could not be loaded: (handle, why).
    pub(crate) unreadable: Vec<(u64, String)>,
    /// Bytes dropped from replica tails that did not verify.
    pub(crate) dropped_tail: u64,
    /// Replicas found damaged (a dropped tail that was not a torn append, or
    /// a damaged table entry: then the replica is marked bad): (handle, why).
    pub(crate) corrupt: Vec<(u64, String)>,
}

pub(crate) struct ChunkServer {
    pub(crate) id: usize,
    pub(crate) dir: PathBuf,
    pub(crate) gate: Arc<Gate>,
    health: Mutex<Health>,
    /// `health`'s kind, for the checks every append makes (see
    /// [`ChunkServer::serving`]): written under `health`'s lock.
    kind: AtomicU8,
    replicas: RwLock<HashMap<u64, Arc<Replica>>>,
    /// Identity written in the marker file; a directory with another (or no)
    /// marker is a different disk.
    incarnation: Mutex<Option<String>>,
    /// Free bytes below which the server counts as full.
    min_free: u64,
}

impl ChunkServer {
    pub(crate) fn new(id: usize, dir: PathBuf, min_free: u64, fds: Arc<FdCache>) -> ChunkServer {
        ChunkServer {
            id,
            dir,
            gate: Arc::new(Gate::new(id, fds)),
            health: Mutex::new(Health::Failed("not started".into())),
            kind: AtomicU8::new(FAILED),
            replicas: RwLock::new(HashMap::new()),
            incarnation: Mutex::new(None),
            min_free,
        }
    }

    fn chunks_dir(&self) -> PathBuf {
        self.dir.join(CHUNKS)
    }

    pub(crate) fn health(&self) -> Health {
        self.health.lock().clone()
    }

    pub(crate) fn set_health(&self, h: Health) {
        let mut g = self.health.lock();
        self.kind.store(kind_of(&h), Ordering::Release);
        *g = h;
    }

    /// Whether new replicas may be placed here.
    pub(crate) fn placeable(&self) -> bool {
        self.kind.load(Ordering::Acquire) == HEALTHY
    }

    /// Whether the replicas here may serve. Every append asks, for each
    /// replica: an atomic load, where the health's lock was a line every
    /// writer wrote.
    pub(crate) fn serving(&self) -> bool {
        self.kind.load(Ordering::Acquire) != FAILED
    }

    #[cfg(test)]
    pub(crate) fn set_offline(&self, offline: bool) {
        self.gate.set_offline(offline);
    }

    #[cfg(test)]
    pub(crate) fn inject(&self, fault: Option<Fault>) {
        self.gate.inject(fault);
    }

    /// Brings the server up on its directory (creating its marker and
    /// `chunks/` if missing: a new or replaced disk), drops leftovers of
    /// interrupted copies, and loads every replica. The server's replica map
    /// is replaced. Only the first start (`Start::First`) may create the
    /// server's directory itself: a restart after a failure needs it back in
    /// place, so a restart racing with the directory's removal fails instead
    /// of bringing an empty directory back to life.
    pub(crate) fn start(&self, io: &Io, how: Start) -> Result<Scan, String> {
        self.gate.check_read().map_err(|e| e.to_string())?;
        let chunks = self.chunks_dir();
        let stop = match how {
            Start::First => None,
            Start::Again => Some(self.dir.as_path()),
        };
        // A new disk, or `chunks/` lost: the entries must be durable before
        // replicas are made in it.
        crate::local::create_dir_synced(io, &chunks, stop)
            .map_err(|e| format!("{}: {e}", chunks.display()))?;
        // A power-cut model sees only the writes it makes itself.
        let direct = !crate::power::covers_path(&chunks) && super::direct::probe(&chunks);
        self.gate.set_direct(direct);
        let marker = self.dir.join(MARKER);
        let id = match fs::read_to_string(&marker) {
            Ok(s) => s.trim().to_string(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let id = format!("gfs-chunkserver {:016x}", rand_id());
                write_synced(&marker, &id).map_err(|e| format!("{}: {e}", marker.display()))?;
                id
            }
            Err(e) => return Err(format!("{}: {e}", marker.display())),
        };
        let mut scan = Scan {
            reports: Vec::new(),
            unreadable: Vec::new(),
            dropped_tail: 0,
            corrupt: Vec::new(),
        };
        let mut map = HashMap::new();
        let entries = fs::read_dir(&chunks).map_err(|e| format!("{}: {e}", chunks.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", chunks.display()))?;
            let name = entry.file_name();
            let name = String::from_utf8_lossy(name.as_bytes()).to_string();
            let path = entry.path();
            if name.ends_with(".tmp") {
                // An interrupted re-replication: never installed, never used.
                let _ = fs::remove_file(&path);
                continue;
            }
            let Some(handle) = replica::parse_name(&name) else {
                continue;
            };
            match Replica::load(self.gate.clone(), io, &path, handle) {
                Ok(l) => {
                    scan.dropped_tail += l.dropped_tail;
                    if let Some(why) = l.corrupt {
                        self.gate.stats.corrupt();
                        if l.replica.is_bad() {
                            log::warn!(
                                "chunkserver {}: chunk {handle:016x}: {why}; kept as it is, unused, re-replicating",
                                self.id
                            );
                        } else {
                            log::warn!(
                                "chunkserver {}: chunk {handle:016x}: {why}; dropped {} bytes, re-replicating",
                                self.id,
                                l.dropped_tail
                            );
                        }
                        scan.corrupt.push((handle, why));
                    } else if l.dropped_tail > 0 {
                        log::warn!(
                            "chunkserver {}: chunk {handle:016x}: dropped {} unverifiable tail bytes",
                            self.id,
                            l.dropped_tail
                        );
                    }
                    let r = l.replica;
                    scan.reports.push(Report {
                        version: r.version(),
                        len: r.len(),
                        replica: r.clone(),
                    });
                    map.insert(handle, r);
                }
                Err(why) => {
                    log::warn!("chunkserver {}: chunk {handle:016x}: {why}", self.id);
                    scan.unreadable.push((handle, why));
                }
            }
        }
        *self.replicas.write() = map;
        *self.incarnation.lock() = Some(id);
        self.set_health(Health::Healthy);
        Ok(scan)
    }

    /// Checks that the directory is still this server's and usable.
    pub(crate) fn probe(&self) -> Probe {
        if self.gate.is_offline() {
            return Probe::Down("offline".into());
        }
        match self.gate.fault() {
            Some(Fault::IoError) => return Probe::Down("I/O error (injected)".into()),
            Some(Fault::DiskFull) => return Probe::Full("disk full (injected)".into()),
            None => {}
        }
        let marker = self.dir.join(MARKER);
        match fs::read_to_string(&marker) {
            Ok(s) if Some(s.trim()) == self.incarnation.lock().as_deref() => {}
            Ok(_) => return Probe::Down("directory was replaced".into()),
            Err(e) => return Probe::Down(format!("{}: {e}", marker.display())),
        }
        match fs::metadata(self.chunks_dir()) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Probe::Down("chunks directory is not a directory".into()),
            Err(e) => return Probe::Down(format!("{}: {e}", self.chunks_dir().display())),
        }
        match free_bytes(&self.dir) {
            Ok(free) if free < self.min_free => Probe::Full(format!("{free} bytes free")),
            Ok(_) => Probe::Ok,
            Err(e) => Probe::Down(format!("statvfs: {e}")),
        }
    }

    /// Whether the directory exists again after a failure (and could be
    /// restarted with [`Self::start`]).
    pub(crate) fn dir_present(&self) -> bool {
        !self.gate.is_offline()
            && self.gate.fault() != Some(Fault::IoError)
            && fs::metadata(&self.dir).map(|m| m.is_dir()).unwrap_or(false)
    }

    pub(crate) fn replica(&self, handle: u64) -> Option<Arc<Replica>> {
        self.replicas.read().get(&handle).cloned()
    }

    pub(crate) fn handles(&self) -> Vec<u64> {
        self.replicas.read().keys().copied().collect()
    }

    pub(crate) fn replica_count(&self) -> usize {
        self.replicas.read().len()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.replicas.read().values().map(|r| r.len()).sum()
    }

    /// Forgets every replica (the server failed); the files stay.
    pub(crate) fn forget_all(&self) -> Vec<Arc<Replica>> {
        let map = std::mem::take(&mut *self.replicas.write());
        map.into_values()
            .inspect(|r| {
                r.mark_bad();
                r.close();
            })
            .collect()
    }

    /// A new, empty replica (under a temporary name when `tmp`, for copies
    /// that are installed only once complete); the caller writes its header.
    pub(crate) fn new_replica(
        &self,
        handle: u64,
        version: u64,
        layout: super::chunk::Layout,
        tmp: bool,
    ) -> io::Result<(Arc<Replica>, Vec<u8>)> {
        let mut name = replica::file_name(handle);
        if tmp {
            name.push_str(".tmp");
        }
        Replica::create(
            self.gate.clone(),
            self.chunks_dir().join(name),
            handle,
            version,
            layout,
        )
    }

    /// Registers a new replica written under its final name.
    pub(crate) fn add(&self, r: Arc<Replica>) {
        self.replicas.write().insert(r.handle, r);
    }

    /// Moves a completed copy to its final name (durably) and registers it.
    pub(crate) fn install(&self, io: &Io, r: &Replica) -> io::Result<Arc<Replica>> {
        let final_path = self.chunks_dir().join(replica::file_name(r.handle));
        crate::power::namespace(&final_path)?;
        fs::rename(&r.path, &final_path)?;
        self.sync_dir(io)?;
        // Reload under the final name so the replica's path is right.
        let loaded = Replica::load(self.gate.clone(), io, &final_path, r.handle)
            .map_err(io::Error::other)?;
        let r = loaded.replica;
        self.replicas.write().insert(r.handle, r.clone());
        Ok(r)
    }

    /// Makes the creation or removal of replica files durable.
    pub(crate) fn sync_dir(&self, io: &Io) -> io::Result<()> {
        let d = fs::File::open(self.chunks_dir())?;
        io.sync(&d, false)
    }

    /// Deletes a replica (stale, corrupt, orphaned or of a deleted file).
    pub(crate) fn delete(&self, handle: u64) {
        let removed = self.replicas.write().remove(&handle);
        let path = match &removed {
            Some(r) => {
                r.mark_bad();
                r.close();
                r.path.clone()
            }
            None => self.chunks_dir().join(replica::file_name(handle)),
        };
        match crate::power::namespace(&path).and_then(|()| fs::remove_file(&path)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("chunkserver {}: deleting {}: {e}", self.id, path.display()),
        }
    }

    /// Removes a file left by an abandoned copy.
    pub(crate) fn discard(&self, r: &Replica) {
        r.mark_bad();
        r.close();
        if crate::power::namespace(&r.path).is_ok() {
            let _ = fs::remove_file(&r.path);
        }
    }

    /// Free bytes on the server's file system.
    pub(crate) fn free(&self) -> Option<u64> {
        free_bytes(&self.dir).ok()
    }
}

fn free_bytes(dir: &Path) -> io::Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized,
    // writable statvfs the call fills in; both outlive the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

fn write_synced(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    crate::power::namespace(path)?;
    let mut f = fs::File::create(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    if let Some(parent) = path.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// A random identifier, from the clock and the process.
fn rand_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    seahash::hash(&[t.to_le_bytes(), u64::from(std::process::id()).to_le_bytes()].concat())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::IoMode;

    #[test]
    fn start_probe_and_notice_a_vanished_directory() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(IoMode::Uring);
        let s = ChunkServer::new(0, dir.path().join("cs"), 0, FdCache::new(16));
        assert!(!s.serving());
        let scan = s.start(&io, Start::First).unwrap();
        assert!(scan.reports.is_empty());
        assert!(s.placeable());
        assert!(matches!(s.probe(), Probe::Ok));
        s.inject(Some(Fault::DiskFull));
        assert!(matches!(s.probe(), Probe::Full(_)));
        s.inject(Some(Fault::IoError));
        assert!(matches!(s.probe(), Probe::Down(_)));
        s.inject(None);
        s.set_offline(true);
        assert!(matches!(s.probe(), Probe::Down(_)));
        assert!(s.start(&io, Start::First).is_err());
        s.set_offline(false);
        fs::remove_dir_all(dir.path().join("cs")).unwrap();
        assert!(matches!(s.probe(), Probe::Down(_)));
        assert!(!s.dir_present());
        // A restart never brings the removed directory back by itself.
        assert!(s.start(&io, Start::Again).is_err());
        assert!(!dir.path().join("cs").exists());
        // Recreated (a replaced disk): a new identity.
        fs::create_dir(dir.path().join("cs")).unwrap();
        s.start(&io, Start::Again).unwrap();
        assert!(matches!(s.probe(), Probe::Ok));
    }

    #[test]
    fn scan_loads_replicas_and_removes_interrupted_copies() {
        let dir = tempfile::tempdir().unwrap();
        let io = Io::new(IoMode::Uring);
        let s = ChunkServer::new(3, dir.path().to_path_buf(), 0, FdCache::new(16));
        s.start(&io, Start::First).unwrap();
        let layout = super::super::chunk::Layout::new(128 << 10);
        for (h, tmp) in [(1u64, false), (2, true)] {
            let (r, header) = s.new_replica(h, 4, layout, tmp).unwrap();
            let o = r.open(false).unwrap();
            let mut c = crate::io::Chain::new();
            o.init_chain(&mut c, &header);
            assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
        }
        fs::write(
            dir.path().join(CHUNKS).join("0000000000000009.chunk"),
            b"junk",
        )
        .unwrap();
        let scan = s.start(&io, Start::First).unwrap();
        assert_eq!(scan.reports.len(), 1);
        assert_eq!(
            (scan.reports[0].replica.handle, scan.reports[0].version),
            (1, 4)
        );
        assert_eq!(scan.unreadable.len(), 1);
        assert!(!dir
            .path()
            .join(CHUNKS)
            .join("0000000000000002.chunk.tmp")
            .exists());
        s.delete(1);
        assert!(s.replica(1).is_none());
        assert_eq!(s.start(&io, Start::First).unwrap().reports.len(), 0);
    }
}
