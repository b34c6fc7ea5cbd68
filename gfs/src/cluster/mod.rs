//! [`Cluster`]: a GFS-like replicated store on one machine, behind [`FileStore`].
//!
//! One master (namespace, file → chunk map, operation log and checkpoints)
//! and one chunkserver per data directory run in this process; the client
//! code that implements [`FileStore`] talks to them by direct calls. Files
//! are split into chunks (64 MiB by default) with 64-bit handles and version
//! numbers, each replicated on up to three chunkservers. See docs/chunk-layer.md
//! for what a user sees; the pieces are:
//!
//! - `master.rs`, `oplog.rs`, `checkpoint.rs`: metadata and its persistence;
//!   `mirror.rs`: the copies of the master's files in several directories;
//! - `server.rs`, `replica.rs`, `chunk.rs`: chunkservers and replica files
//!   (data plus a seahash per 64 KiB block, verified on every read);
//! - `lease.rs`, `write.rs`: leases and mutations (record append), all
//!   replicas of one append in one io_uring submission;
//! - `repair.rs`: dropping bad replicas and re-replication, most endangered
//!   first, several chunks at once; `throttle.rs`: its bytes/s budget;
//! - `scrub.rs`: the background scrub of every replica while clients are idle;
//! - `maintenance.rs`: startup reconciliation, heartbeats, garbage collection;
//! - `client.rs`: the [`FileStore`] readers and writers; `status.rs`: health.
//!
//! They share one core, [`Inner`], whose own methods (in this file) are only
//! what crosses the pieces: `stopping`, and reporting a bad replica (a read,
//! a write or the scrub finds it; repair acts on it). Each piece's work (an
//! append, a sync, a heartbeat, a repair or scrub pass, status) is a
//! function over `&Inner` in that piece's file.

mod checkpoint;
mod chunk;
mod client;
mod coding;
mod direct;
mod fds;
mod gate;
mod lease;
mod maintenance;
mod master;
mod mirror;
mod oplog;
mod placement;
mod repair;
mod replica;
mod scrub;
mod server;
mod status;
mod throttle;
mod write;

#[cfg(test)]
use gate::Fault;
use maintenance::start_servers;
use scrub::scrub_now;
use status::{health, status_lines};
pub use status::{ClusterHealth, ScrubHealth, ServerHealth};

use crate::io::Io;
use crate::name::validate;
use crate::{Error, FileStore, IoMode, ReadableFile, Result, WritableFile};
use master::Master;
use oplog::Op;
use parking_lot::{Condvar, Mutex};
use replica::ReadFail;
use server::ChunkServer;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How a [`Cluster`] is laid out and behaves.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The master's directory: operation log and checkpoints.
    pub master_dir: PathBuf,
    /// More directories that hold a copy of the master's files; `None`
    /// means a `master` directory inside each chunkserver directory.
    pub master_mirrors: Option<Vec<PathBuf>>,
    /// One chunkserver per directory; put them on different disks to survive
    /// the loss of one.
    pub chunkserver_dirs: Vec<PathBuf>,
    /// Replicas per chunk; 0 means the number of chunkserver directories,
    /// at most 3.
    pub replication: usize,
    /// Bytes per chunk, a multiple of 64 KiB (64 MiB by default).
    pub chunk_size: u64,
    /// io_uring (default) or plain system calls, for comparison.
    pub io_mode: IoMode,
    /// How long a primary's lease on a chunk lasts (60 s by default; it
    /// counts as over 20 ms early, as the clock it is read by lags by up to
    /// a kernel tick).
    pub lease: Duration,
    /// How often the master checks chunkservers, repairs and collects garbage.
    pub heartbeat: Duration,
    /// How long a deleted file's chunks are kept before they are reclaimed.
    pub gc_delay: Duration,
    /// Operation log size that triggers a checkpoint.
    pub checkpoint_bytes: u64,
    /// A chunkserver with less free space than this takes no new chunks.
    pub min_free_bytes: u64,
    /// Re-replication budget in bytes per second over all copies (0: no limit).
    pub repair_rate: u64,
    /// Chunks re-replicated at once.
    pub repair_parallel: usize,
    /// Background scrub budget in bytes per second (0: no background scrub).
    pub scrub_rate: u64,
    /// Time from the start of one scrub pass to the start of the next.
    pub scrub_interval: Duration,
    /// The scrub reads only after this long without client I/O.
    pub scrub_idle: Duration,
    /// Write all but one replica of a chunk that is not a log around the
    /// page cache (`O_DIRECT`) where the chunkserver's filesystem allows it.
    pub direct_writes: bool,
}

/// Default re-replication budget: 32 MiB/s.
pub const DEFAULT_REPAIR_RATE: u64 = 32 << 20;
/// Default background scrub budget: 4 MiB/s (a terabyte in about three days).
pub const DEFAULT_SCRUB_RATE: u64 = 4 << 20;

/// The chunk size used unless told otherwise.
pub const DEFAULT_CHUNK_SIZE: u64 = 64 << 20;

impl ClusterOptions {
    /// Options with the defaults for everything but the directories.
    pub fn new(master_dir: impl Into<PathBuf>, chunkserver_dirs: Vec<PathBuf>) -> Self {
        ClusterOptions {
            master_dir: master_dir.into(),
            master_mirrors: None,
            chunkserver_dirs,
            replication: 0,
            chunk_size: DEFAULT_CHUNK_SIZE,
            io_mode: IoMode::Uring,
            lease: Duration::from_secs(60),
            heartbeat: Duration::from_secs(1),
            gc_delay: Duration::from_secs(60),
            checkpoint_bytes: 4 << 20,
            min_free_bytes: 256 << 20,
            repair_rate: DEFAULT_REPAIR_RATE,
            repair_parallel: 4,
            scrub_rate: DEFAULT_SCRUB_RATE,
            scrub_interval: Duration::from_secs(24 * 3600),
            scrub_idle: Duration::from_secs(1),
            direct_writes: true,
        }
    }

    /// The default layout under one data directory: `DIR/master` and the
    /// chunkservers `DIR/chunkserver-N` that exist (each may be a symlink to
    /// another disk), or `chunkserver-0..2` if there are none yet.
    pub fn for_data_dir(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let n = name.strip_prefix("chunkserver-")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        found.sort();
        let dirs = if found.is_empty() {
            (0..3)
                .map(|i| dir.join(format!("chunkserver-{i}")))
                .collect()
        } else {
            found.into_iter().map(|(_, p)| p).collect()
        };
        ClusterOptions::new(dir.join("master"), dirs)
    }

    /// Every directory holding a copy of the master's files, the master
    /// directory first.
    pub(crate) fn master_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.master_dir.clone()];
        match &self.master_mirrors {
            Some(m) => dirs.extend(m.iter().cloned()),
            None => dirs.extend(self.chunkserver_dirs.iter().map(|d| d.join("master"))),
        }
        dirs
    }

    fn replication(&self) -> usize {
        match self.replication {
            0 => self.chunkserver_dirs.len().min(3),
            r => r,
        }
    }
}

/// Events worth counting, for status and tests.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) corruptions: AtomicU64,
    pub(crate) stale_deleted: AtomicU64,
    pub(crate) orphans_deleted: AtomicU64,
    pub(crate) replicas_dropped: AtomicU64,
    pub(crate) repaired: AtomicU64,
    pub(crate) repair_bytes: AtomicU64,
    pub(crate) repair_failures: AtomicU64,
    pub(crate) read_retries: AtomicU64,
    pub(crate) files_purged: AtomicU64,
    pub(crate) version_bumps: AtomicU64,
    pub(crate) write_failovers: AtomicU64,
    /// Re-replication: chunks of the current round not yet started.
    pub(crate) repair_queue: AtomicU64,
    /// Bumped whenever a chunk's replica set changes, so open readers know
    /// to look again (and use a new copy).
    pub(crate) placements: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Wakes a background thread early.
#[derive(Default)]
pub(crate) struct Signal {
    flag: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    pub(crate) fn notify(&self) {
        *self.flag.lock() = true;
        self.cv.notify_all();
    }

    /// Waits until notified or `timeout`; clears the notification.
    pub(crate) fn wait(&self, timeout: Duration) {
        let mut f = self.flag.lock();
        if !*f {
            self.cv.wait_for(&mut f, timeout);
        }
        *f = false;
    }
}

/// Everything the client code, the master's threads and the chunkservers share.
pub(crate) struct Inner {
    pub(crate) opts: ClusterOptions,
    pub(crate) replication: usize,
    pub(crate) layout: chunk::Layout,
    pub(crate) io: Io,
    pub(crate) master: Master,
    pub(crate) servers: placement::Servers,
    pub(crate) counters: Counters,
    /// Re-replication's state (`repair.rs`).
    pub(crate) repairs: repair::Repairs,
    /// The background scrub's state (`scrub.rs`).
    pub(crate) scrub: scrub::Scrub,
    pub(crate) heartbeat_signal: Signal,
    /// Renews the zeros ahead of logs' replicas (see `zeros.rs`).
    pub(crate) zeros: crate::zeros::Renewer,
    pub(crate) stop: AtomicBool,
}

impl Inner {
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// A replica failed: never serve it again, and have the repair thread
    /// drop it and copy the chunk elsewhere.
    pub(crate) fn report_bad(&self, handle: u64, server: usize, why: &str, corrupt: bool) {
        let newly = self.servers[server]
            .replica(handle)
            .is_some_and(|r| r.mark_bad());
        if newly {
            if corrupt {
                bump(&self.counters.corruptions);
            }
            log::warn!(
                "gfs: chunk {handle:016x} on chunkserver {server} ({}): {why}; re-replicating",
                self.servers[server].dir.display()
            );
        }
        self.repairs.report(handle, server);
    }

    /// Reports what a failed read says about a replica.
    pub(crate) fn report_read_failure(&self, handle: u64, server: usize, f: &ReadFail) {
        match f {
            ReadFail::Corrupt(d) => self.report_bad(handle, server, d, true),
            ReadFail::Io(e) => {
                self.servers[server].gate.stats.read_error();
                self.report_bad(handle, server, &format!("read error: {e}"), false);
                self.heartbeat_signal.notify();
            }
            ReadFail::Short { have } => {
                self.report_bad(handle, server, &format!("holds only {have} bytes"), false)
            }
            // Down server or already known bad: the heartbeat or an earlier
            // report deals with it.
            ReadFail::Unavailable(_) => {}
        }
    }
}

/// The replicated store: a master and its chunkservers, in this process.
pub struct Cluster {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Cluster {
    /// Starts the master (checkpoint + log replay) and the chunkservers
    /// (creating missing directories), reconciles what the chunkservers hold
    /// with the master's chunk map (stale and orphaned replicas are deleted),
    /// and starts the heartbeat and re-replication threads.
    pub fn open(opts: ClusterOptions) -> Result<Arc<Cluster>> {
        let bad = |why: &'static str| Error::InvalidName("ClusterOptions".into(), why);
        if opts.chunkserver_dirs.is_empty() {
            return Err(bad("no chunkserver directories"));
        }
        if opts.chunk_size == 0 || !opts.chunk_size.is_multiple_of(chunk::BLOCK) {
            return Err(bad("chunk_size must be a positive multiple of 64 KiB"));
        }
        if opts.chunk_size > u64::from(u32::MAX) {
            return Err(bad("chunk_size must be below 4 GiB"));
        }
        let replication = opts.replication();
        if replication == 0 || replication > opts.chunkserver_dirs.len() {
            return Err(bad(
                "replication must be between 1 and the number of chunkservers",
            ));
        }
        let io = Io::new(opts.io_mode);
        let fds = fds::FdCache::new(fds::default_capacity());
        let master = Master::open(&opts.master_dirs(), io.mode(), opts.checkpoint_bytes)?;
        let servers: Vec<ChunkServer> = opts
            .chunkserver_dirs
            .iter()
            .enumerate()
            .map(|(i, d)| ChunkServer::new(i, d.clone(), opts.min_free_bytes, fds.clone()))
            .collect();
        let inner = Arc::new(Inner {
            layout: chunk::Layout::new(opts.chunk_size),
            replication,
            io,
            master,
            servers: placement::Servers::new(servers),
            counters: Counters::default(),
            repairs: repair::Repairs::new(opts.repair_rate),
            scrub: scrub::Scrub::new(opts.scrub_rate),
            heartbeat_signal: Signal::default(),
            zeros: crate::zeros::Renewer::new(opts.io_mode),
            stop: AtomicBool::new(false),
            opts,
        });
        start_servers(&inner)?;
        let mut threads = Vec::new();
        for (name, f) in [
            (
                "gfs-heartbeat",
                maintenance::heartbeat_loop as fn(Arc<Inner>),
            ),
            ("gfs-repair", repair::repair_loop as fn(Arc<Inner>)),
            ("gfs-scrub", scrub::scrub_loop as fn(Arc<Inner>)),
        ] {
            let i = inner.clone();
            let t = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(i))
                .map_err(|e| Error::io(name, e))?;
            threads.push(t);
        }
        Ok(Arc::new(Cluster {
            inner,
            threads: Mutex::new(threads),
        }))
    }

    /// The I/O path in use (io_uring unless unavailable or asked otherwise).
    pub fn io_mode(&self) -> IoMode {
        self.inner.io.mode()
    }

    /// io_uring batches and syscalls so far, over all chunk I/O.
    pub fn io_stats(&self) -> crate::IoStats {
        self.inner.io.stats()
    }

    /// Replicas per chunk.
    pub fn replication(&self) -> usize {
        self.inner.replication
    }

    /// The health of the cluster and each chunkserver.
    pub fn health(&self) -> ClusterHealth {
        health(&self.inner)
    }

    /// Waits until no chunk is under-replicated (or `timeout` passes);
    /// returns whether it got there.
    pub fn wait_for_repair(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.inner.repairs.wake();
            let h = health(&self.inner);
            if h.under_replicated == 0 && h.repair_queue == 0 {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Drops the replicas reported bad and re-replicates under-replicated
    /// chunks now, on this thread (the background thread does the same
    /// every heartbeat and whenever something is reported).
    #[cfg(test)]
    pub(crate) fn repair_now(&self) {
        repair::repair_pass(&self.inner);
    }

    /// Verifies every replica on every chunkserver now, at full speed (the
    /// background scrub does the same at `scrub_rate` while clients are
    /// idle); bad ones are reported and re-replicated. Returns how many
    /// replicas failed.
    pub fn scrub(&self) -> usize {
        scrub_now(&self.inner)
    }

    /// Runs a heartbeat now: probes the chunkservers, collects garbage,
    /// checkpoints if due.
    #[cfg(test)]
    pub(crate) fn heartbeat(&self) {
        maintenance::heartbeat_once(&self.inner);
    }

    /// Reclaims deleted files whose delay has passed and orphaned replicas
    /// now; returns how many files were purged.
    #[cfg(test)]
    pub(crate) fn collect_garbage(&self) -> Result<usize> {
        maintenance::collect_garbage(&self.inner)
    }

    /// Writes a checkpoint of the master's state and starts a new log.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.master.checkpoint(true).map(|_| ())
    }

    /// Takes chunkserver `server` down (as if its process died) or brings it
    /// back; the next heartbeat notices. For fire drills and tests.
    #[cfg(test)]
    pub(crate) fn set_offline(&self, server: usize, offline: bool) {
        if let Some(s) = self.inner.servers.get(server) {
            s.set_offline(offline);
            self.inner.heartbeat_signal.notify();
        }
    }

    /// Makes chunkserver `server` fail its I/O as a full or broken disk would
    /// (`None` clears it). For fire drills and tests.
    #[cfg(test)]
    pub(crate) fn inject_fault(&self, server: usize, fault: Option<Fault>) {
        if let Some(s) = self.inner.servers.get(server) {
            s.inject(fault);
            self.inner.heartbeat_signal.notify();
        }
    }

    /// The replica files of chunk data, with the server that holds each
    /// (for fault-injection tests: what a disk holds is not hidden).
    #[cfg(test)]
    pub(crate) fn replica_files(&self) -> Vec<(usize, PathBuf)> {
        self.inner
            .servers
            .iter()
            .flat_map(|s| {
                let mut v: Vec<(usize, PathBuf)> = s
                    .handles()
                    .into_iter()
                    .filter_map(|h| s.replica(h))
                    .filter(|r| !r.is_bad())
                    .map(|r| (s.id, r.path.clone()))
                    .collect();
                v.sort();
                v
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        self.inner.repairs.wake();
        self.inner.heartbeat_signal.notify();
        self.inner.scrub.wake();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Cluster {
    fn create_writer(&self, name: &str, log: bool) -> Result<client::Writer> {
        validate(name)?;
        let inner = &self.inner;
        let id = {
            let mut st = inner.master.state.lock();
            if st.names.contains_key(name) {
                return Err(Error::AlreadyExists(name.to_string()));
            }
            let id = st.next_file;
            inner.master.commit(
                &mut st,
                Op::Create {
                    id,
                    name: name.to_string(),
                },
                false,
            )?;
            id
        };
        Ok(client::Writer::new(inner.clone(), id, name, 0, log))
    }
}

impl FileStore for Cluster {
    fn create(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(self.create_writer(name, false)?))
    }

    /// A file whose replicas keep zeros ahead of their data, cut when the
    /// writer closes (see `zeros.rs`).
    fn create_log(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(self.create_writer(name, true)?))
    }

    fn open_append(&self, name: &str) -> Result<Box<dyn WritableFile>> {
        validate(name)?;
        let (id, len) = self.inner.master.lookup(name)?;
        Ok(Box::new(client::Writer::new(
            self.inner.clone(),
            id,
            name,
            len,
            false,
        )))
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ReadableFile>> {
        validate(name)?;
        let (id, _) = self.inner.master.lookup(name)?;
        Ok(Arc::new(client::Reader::new(self.inner.clone(), id, name)))
    }

    fn delete(&self, name: &str) -> Result<()> {
        validate(name)?;
        let inner = &self.inner;
        let mut st = inner.master.state.lock();
        if !st.names.contains_key(name) {
            return Err(Error::NotFound(name.to_string()));
        }
        let op = Op::Delete {
            name: name.to_string(),
            at: master::now_us(),
        };
        inner.master.commit(&mut st, op, true)?;
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        validate(from)?;
        validate(to)?;
        let inner = &self.inner;
        let mut st = inner.master.state.lock();
        if !st.names.contains_key(from) {
            return Err(Error::NotFound(from.to_string()));
        }
        let op = Op::Rename {
            from: from.to_string(),
            to: to.to_string(),
            at: master::now_us(),
        };
        inner.master.commit(&mut st, op, true)?;
        Ok(())
    }

    fn exists(&self, name: &str) -> Result<bool> {
        validate(name)?;
        Ok(self.inner.master.state.lock().names.contains_key(name))
    }

    fn size(&self, name: &str) -> Result<u64> {
        validate(name)?;
        Ok(self.inner.master.lookup(name)?.1)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let st = self.inner.master.state.lock();
        Ok(st
            .names
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn status(&self) -> Vec<String> {
        status_lines(&self.inner)
    }
}

#[cfg(test)]
mod tests;
