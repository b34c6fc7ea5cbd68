//! The master: the file namespace and each file's chunks, with their versions.
//!
//! Every change is first appended to the operation log and then applied in
//! memory; a checkpoint of the whole state is written when the log grows past
//! a threshold (and at every start), so a restart loads the newest checkpoint
//! and replays only the logs after it. Where each chunk's replicas are is NOT
//! persisted: the chunkservers report what they hold, and that is the truth
//! (a replica on a dead disk cannot be trusted by a list anyway).

use super::checkpoint::{self, ChunkImage, FileImage, Image};
use super::lease::Lease;
use super::mirror::{self, Mirrors};
use super::oplog::{self, Op, OpLog};
use super::replica::Placed;
use crate::{Error, FileStore, IoMode, LocalStore, Result};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Where appends to a chunk are ordered: held by the primary for the time of
/// one mutation, and by the master to change the chunk's version or replicas.
pub(crate) struct ChunkCtl {
    pub(crate) handle: u64,
    pub(crate) m: Mutex<ChunkMut>,
    /// Bytes acknowledged on every current replica: what readers may read.
    pub(crate) len: AtomicU64,
    /// No more appends: the file continues in a later chunk. Set by the
    /// master's log (while the appender holds `m`), read under `m`.
    pub(crate) sealed: AtomicBool,
    /// The chunk size its replicas were made with (the configured size may
    /// have changed since); unknown (`u64::MAX`) until a replica is seen.
    pub(crate) capacity: AtomicU64,
    /// Moves on whenever the chunk's version or locations change (see
    /// [`ChunkMeta::placement_changed`]): a write set an appender kept
    /// ([`ChunkMut::write_set`]) is current while this stands still.
    pub(crate) placement: AtomicU64,
}

/// The replicas the last append wrote, kept for the next one: finding them
/// again takes the master's lock and each server's replica map per append.
pub(crate) struct KeptWriteSet {
    /// [`ChunkCtl::placement`] when they were found.
    pub(crate) placement: u64,
    pub(crate) replicas: Vec<Placed>,
}

/// The mutable state of a chunk, under its lock.
pub(crate) struct ChunkMut {
    /// Bytes of the partial last checksum block (for the next append's
    /// checksum); `None` until first needed after a restart.
    pub(crate) tail: Option<Vec<u8>>,
    /// The streaming checksum state of exactly `tail`, when known.
    pub(crate) tail_hash: Option<super::chunk::BlockHasher>,
    /// The primary's lease, if one is held.
    pub(crate) lease: Option<Lease>,
    /// The last append's replicas (see [`KeptWriteSet`]).
    pub(crate) write_set: Option<KeptWriteSet>,
}

impl ChunkCtl {
    fn new(handle: u64, len: u64, sealed: bool) -> Arc<ChunkCtl> {
        Arc::new(ChunkCtl {
            handle,
            m: Mutex::new(ChunkMut {
                tail: None,
                tail_hash: None,
                lease: None,
                write_set: None,
            }),
            len: AtomicU64::new(len),
            sealed: AtomicBool::new(sealed),
            capacity: AtomicU64::new(u64::MAX),
            placement: AtomicU64::new(0),
        })
    }
}

pub(crate) struct ChunkMeta {
    pub(crate) file: u64,
    pub(crate) version: u64,
    pub(crate) sealed_len: Option<u64>,
    pub(crate) ctl: Arc<ChunkCtl>,
    /// Servers holding a current, good replica (learned, not persisted).
    /// A change of this or of `version` calls [`Self::placement_changed`].
    pub(crate) locations: Vec<usize>,
}

impl ChunkMeta {
    /// The chunk's version or locations changed: appenders find its
    /// replicas again.
    pub(crate) fn placement_changed(&self) {
        self.ctl.placement.fetch_add(1, Ordering::AcqRel);
    }
}

pub(crate) struct FileMeta {
    /// `None` once deleted (in the trash, waiting for garbage collection).
    pub(crate) name: Option<String>,
    pub(crate) deleted_at: u64,
    pub(crate) chunks: Vec<u64>,
    /// Open readers and writers: a trashed file is not reclaimed under them.
    pub(crate) open: usize,
    /// Last log record that created or extended the file: a sync of the
    /// file's data makes the log durable up to here first.
    pub(crate) lsn: u64,
}

#[derive(Default)]
pub(crate) struct MasterState {
    pub(crate) names: BTreeMap<String, u64>,
    /// Both looked up on every append (ahash: SipHash was about 3% of one).
    pub(crate) files: HashMap<u64, FileMeta, ahash::RandomState>,
    pub(crate) chunks: HashMap<u64, ChunkMeta, ahash::RandomState>,
    pub(crate) next_file: u64,
    pub(crate) next_handle: u64,
    /// Handles below this are reserved in the log; `next_handle` must stay
    /// below it (see [`Op::ReserveHandles`]).
    pub(crate) reserved: u64,
    /// Handles whose replicas are being created but not yet logged: not
    /// orphans, whatever a chunkserver scan says.
    pub(crate) allocating: HashSet<u64>,
}

impl MasterState {
    /// Checks that `op` applies to this state; [`Self::apply`] changes
    /// nothing unless this passes.
    fn validate(&self, op: &Op) -> std::result::Result<(), String> {
        match op {
            Op::Create { id, name } => {
                if self.names.contains_key(name) {
                    return Err(format!("create: {name:?} exists"));
                }
                if self.files.contains_key(id) {
                    return Err(format!("create: file id {id} in use"));
                }
            }
            Op::AddChunk {
                file,
                handle,
                prev_len,
            } => {
                let f = self
                    .files
                    .get(file)
                    .ok_or_else(|| format!("add chunk: no file {file}"))?;
                if self.chunks.contains_key(handle) {
                    return Err(format!("add chunk: handle {handle:016x} in use"));
                }
                match (f.chunks.last(), prev_len) {
                    (None, None) => {}
                    (Some(h), Some(_)) => {
                        if self.chunks.get(h).is_none_or(|c| c.sealed_len.is_some()) {
                            return Err(format!("add chunk: last chunk {h:016x} not open"));
                        }
                    }
                    _ => return Err("add chunk: previous length mismatch".into()),
                }
            }
            Op::SetVersion { handle, version } => {
                let c = self
                    .chunks
                    .get(handle)
                    .ok_or_else(|| format!("set version: no chunk {handle:016x}"))?;
                if *version < c.version {
                    return Err(format!("set version: {version} < {}", c.version));
                }
            }
            Op::Rename { from, .. } => {
                if !self.names.contains_key(from) {
                    return Err(format!("rename: no file {from:?}"));
                }
            }
            Op::Delete { name, .. } => {
                if !self.names.contains_key(name) {
                    return Err(format!("delete: no file {name:?}"));
                }
            }
            Op::Purge { file } => match self.files.get(file) {
                Some(f) if f.name.is_none() => {}
                _ => return Err(format!("purge: file {file} is not in the trash")),
            },
            Op::ReserveHandles { .. } => {}
        }
        Ok(())
    }

    /// Applies a logged change (record `lsn`).
    pub(crate) fn apply(&mut self, op: &Op, lsn: u64) -> std::result::Result<(), String> {
        self.validate(op)?;
        match op {
            Op::Create { id, name } => {
                self.names.insert(name.clone(), *id);
                self.files.insert(
                    *id,
                    FileMeta {
                        name: Some(name.clone()),
                        deleted_at: 0,
                        chunks: Vec::new(),
                        open: 0,
                        lsn,
                    },
                );
                self.next_file = self.next_file.max(id + 1);
            }
            Op::AddChunk {
                file,
                handle,
                prev_len,
            } => {
                if let (Some(len), Some(f)) = (prev_len, self.files.get(file)) {
                    if let Some(prev) = f.chunks.last().and_then(|h| self.chunks.get_mut(h)) {
                        prev.sealed_len = Some(*len);
                        prev.ctl.sealed.store(true, Ordering::Release);
                        prev.ctl.len.store(*len, Ordering::Release);
                    }
                }
                if let Some(f) = self.files.get_mut(file) {
                    f.chunks.push(*handle);
                    f.lsn = lsn;
                }
                self.chunks.insert(
                    *handle,
                    ChunkMeta {
                        file: *file,
                        version: 1,
                        sealed_len: None,
                        ctl: ChunkCtl::new(*handle, 0, false),
                        locations: Vec::new(),
                    },
                );
                self.next_handle = self.next_handle.max(handle + 1);
            }
            Op::SetVersion { handle, version } => {
                if let Some(c) = self.chunks.get_mut(handle) {
                    c.version = *version;
                    c.placement_changed();
                }
            }
            Op::Rename { from, to, at } => {
                if from != to {
                    if let Some(old) = self.names.remove(to) {
                        self.trash(old, *at);
                    }
                    if let Some(id) = self.names.remove(from) {
                        self.names.insert(to.clone(), id);
                        if let Some(f) = self.files.get_mut(&id) {
                            f.name = Some(to.clone());
                            f.lsn = lsn;
                        }
                    }
                }
            }
            Op::Delete { name, at } => {
                if let Some(id) = self.names.remove(name) {
                    self.trash(id, *at);
                }
            }
            Op::Purge { file } => {
                if let Some(f) = self.files.remove(file) {
                    for h in f.chunks {
                        self.chunks.remove(&h);
                    }
                }
            }
            Op::ReserveHandles { upto } => self.reserved = self.reserved.max(*upto),
        }
        Ok(())
    }

    fn trash(&mut self, id: u64, at: u64) {
        if let Some(f) = self.files.get_mut(&id) {
            f.name = None;
            f.deleted_at = at;
        }
    }

    fn image(&self, seq: u64) -> Image {
        let mut files: Vec<FileImage> = self
            .files
            .iter()
            .map(|(&id, f)| FileImage {
                id,
                name: f.name.clone(),
                deleted_at: f.deleted_at,
                chunks: f
                    .chunks
                    .iter()
                    .filter_map(|h| {
                        self.chunks.get(h).map(|c| ChunkImage {
                            handle: *h,
                            version: c.version,
                            sealed_len: c.sealed_len,
                        })
                    })
                    .collect(),
            })
            .collect();
        files.sort_by_key(|f| f.id);
        // Whatever was reserved may be in use: start past it after a restart.
        Image {
            seq,
            next_file: self.next_file,
            next_handle: self.next_handle.max(self.reserved),
            files,
        }
    }

    fn from_image(img: Image) -> std::result::Result<MasterState, String> {
        let mut st = MasterState {
            next_file: img.next_file,
            next_handle: img.next_handle,
            reserved: img.next_handle,
            ..MasterState::default()
        };
        for f in img.files {
            if st.files.contains_key(&f.id) || f.id >= st.next_file {
                return Err(format!("file id {} duplicated or out of range", f.id));
            }
            let last = f.chunks.len().saturating_sub(1);
            let mut handles = Vec::new();
            for (i, c) in f.chunks.into_iter().enumerate() {
                if st.chunks.contains_key(&c.handle) || c.handle >= st.next_handle {
                    return Err(format!(
                        "chunk {:016x} duplicated or out of range",
                        c.handle
                    ));
                }
                if c.sealed_len.is_none() && i != last {
                    return Err(format!("chunk {:016x} is open but not last", c.handle));
                }
                let sealed = c.sealed_len.is_some();
                st.chunks.insert(
                    c.handle,
                    ChunkMeta {
                        file: f.id,
                        version: c.version,
                        sealed_len: c.sealed_len,
                        ctl: ChunkCtl::new(c.handle, c.sealed_len.unwrap_or(0), sealed),
                        locations: Vec::new(),
                    },
                );
                handles.push(c.handle);
            }
            if let Some(name) = &f.name {
                if st.names.insert(name.clone(), f.id).is_some() {
                    return Err(format!("name {name:?} used twice"));
                }
            }
            st.files.insert(
                f.id,
                FileMeta {
                    name: f.name,
                    deleted_at: f.deleted_at,
                    chunks: handles,
                    open: 0,
                    lsn: 0,
                },
            );
        }
        Ok(st)
    }

    /// Length of a file: its sealed chunks plus the committed length of the last.
    pub(crate) fn file_len(&self, id: u64) -> u64 {
        let Some(f) = self.files.get(&id) else {
            return 0;
        };
        f.chunks
            .iter()
            .filter_map(|h| self.chunks.get(h))
            .map(|c| {
                c.sealed_len
                    .unwrap_or_else(|| c.ctl.len.load(Ordering::Acquire))
            })
            .sum()
    }
}

/// What a start of the master found in its directories.
#[derive(Clone, Debug, Default)]
pub(crate) struct Recovery {
    pub(crate) checkpoint: u64,
    pub(crate) replayed: u64,
    pub(crate) torn_bytes: u64,
    /// The copy the state was loaded from.
    pub(crate) from_copy: usize,
    /// Copies that were missing, behind or damaged, and were re-created.
    pub(crate) recreated: usize,
}

pub(crate) struct Master {
    pub(crate) mirrors: Arc<Mirrors>,
    pub(crate) state: Mutex<MasterState>,
    log: Mutex<OpLog>,
    checkpoint_bytes: u64,
    pub(crate) recovery: Recovery,
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corruption {
        name: "gfs master".into(),
        detail: detail.into(),
    }
}

fn read_all(store: &LocalStore, name: &str) -> Result<Vec<u8>> {
    let f = store.open(name)?;
    let len = f.len()?;
    let len = usize::try_from(len).map_err(|_| corrupt(format!("{name} too large")))?;
    f.read_at(0, len)
}

/// The state one copy of the master's files holds.
struct Loaded {
    state: MasterState,
    recovery: Recovery,
    lsn: u64,
    /// Newest generation of its files, and the records of its last log:
    /// copies are written in lockstep, so the greater pair is the newer copy.
    generation: u64,
    last_records: u64,
}

/// The newest generation among a copy's files (0 when it has none).
fn newest_generation(store: &LocalStore) -> Result<u64> {
    Ok(store
        .list("")?
        .iter()
        .filter_map(|n| mirror::generation(n))
        .max()
        .unwrap_or(0))
}

/// Loads the newest readable checkpoint of one copy and replays the logs
/// after it.
fn load_copy(store: &LocalStore) -> Result<Loaded> {
    let names = store.list("")?;
    for n in names.iter().filter(|n| n.ends_with(".tmp")) {
        store.delete(n)?;
    }
    let mut ckpts: Vec<u64> = names
        .iter()
        .filter_map(|n| checkpoint::parse_name(n))
        .collect();
    ckpts.sort_unstable_by(|a, b| b.cmp(a));
    let mut logs: Vec<u64> = names
        .iter()
        .filter_map(|n| oplog::parse_log_name(n))
        .collect();
    logs.sort_unstable();

    if ckpts.is_empty() {
        // A copy's first checkpoint is written before its first log, so a
        // log without any checkpoint means the checkpoints were lost:
        // replaying what is left from an empty state would load part of the
        // state. (An empty `oplog-1` alone is a first start that died
        // before its checkpoint, when logs were made first.)
        for &seq in &logs {
            let name = oplog::log_name(seq);
            if seq != 1 || store.open(&name)?.len()? != 0 {
                return Err(corrupt(format!(
                    "{}: {name} but no checkpoint",
                    store.dir().display()
                )));
            }
        }
    }
    let mut recovery = Recovery::default();
    let mut state = MasterState::default();
    let mut base = 0;
    let mut loaded = ckpts.is_empty();
    for &seq in &ckpts {
        let img = read_all(store, &checkpoint::name(seq))
            .and_then(|b| checkpoint::decode(&b).map_err(corrupt))
            .and_then(|img| match img.seq {
                // A checkpoint under another generation's name would be
                // followed by the wrong logs.
                s if s == seq => Ok(img),
                s => Err(corrupt(format!("it holds generation {s}"))),
            });
        match img.and_then(|img| MasterState::from_image(img).map_err(corrupt)) {
            Ok(st) => {
                state = st;
                base = seq;
                loaded = true;
                break;
            }
            Err(e) => log::error!(
                "gfs master: {}: checkpoint {seq} unusable: {e}",
                store.dir().display()
            ),
        }
    }
    if !loaded {
        return Err(corrupt(format!(
            "{}: no readable checkpoint",
            store.dir().display()
        )));
    }
    recovery.checkpoint = base;
    let logs: Vec<u64> = logs.into_iter().filter(|&s| s >= base).collect();
    // Every change after the checkpoint is in `oplog-base`, `oplog-base+1`,
    // ...: a missing one would silently skip its changes.
    for (want, &seq) in (base.max(1)..).zip(&logs) {
        if seq != want {
            return Err(corrupt(format!(
                "{}: {} is missing before {}",
                store.dir().display(),
                oplog::log_name(want),
                oplog::log_name(seq)
            )));
        }
    }
    let mut lsn = 0;
    let mut last_records = 0;
    for (i, &seq) in logs.iter().enumerate() {
        let name = oplog::log_name(seq);
        let where_ = || format!("{}", store.dir().join(&name).display());
        let parsed = oplog::parse(&read_all(store, &name)?)
            .map_err(|e| corrupt(format!("{}: {e}", where_())))?;
        if let Some(torn) = parsed.torn {
            if i + 1 != logs.len() {
                return Err(corrupt(format!(
                    "{}: damaged record before later logs",
                    where_()
                )));
            }
            log::warn!(
                "gfs master: {}: dropped a torn tail of {torn} bytes after byte {}",
                where_(),
                parsed.good_len
            );
            recovery.torn_bytes = torn;
        }
        for op in &parsed.ops {
            lsn += 1;
            state
                .apply(op, lsn)
                .map_err(|e| corrupt(format!("{}: replay: {e}", where_())))?;
        }
        recovery.replayed += parsed.ops.len() as u64;
        last_records = parsed.ops.len() as u64;
    }
    Ok(Loaded {
        state,
        recovery,
        lsn,
        generation: logs.last().copied().unwrap_or(base).max(base),
        last_records,
    })
}

/// The newest of the loaded copies: the greatest `(generation, records in
/// the last log)`, the earlier copy on a tie. Copies are written in
/// lockstep, so copies tied on that key hold the same state; a tie whose
/// states differ means one of them is not what it claims to be, and the
/// master refuses to guess which.
fn choose(mirrors: &Mirrors, loaded: Vec<(usize, Loaded)>) -> Result<Option<(usize, Loaded)>> {
    let key = |l: &Loaded| (l.generation, l.last_records);
    let Some(top) = loaded.iter().map(|(_, l)| key(l)).max() else {
        return Ok(None);
    };
    let mut tied = loaded.into_iter().filter(|(_, l)| key(l) == top);
    let Some(best) = tied.next() else {
        return Ok(None);
    };
    let image = best.1.state.image(0);
    for (i, l) in tied {
        if l.state.image(0) != image {
            let dir = |i: usize| mirrors.copies[i].dir.display().to_string();
            return Err(corrupt(format!(
                "copies in {} and {} both hold generation {} with {} records in \
                 its log, but their contents differ",
                dir(best.0),
                dir(i),
                top.0,
                top.1
            )));
        }
    }
    Ok(Some(best))
}

impl Master {
    /// Opens the master on its copies in `dirs` (the first is the master
    /// directory): loads the newest consistent copy (newest checkpoint plus
    /// the logs after it), then writes a fresh checkpoint to every copy and
    /// starts a new log, which re-creates copies that were missing, behind
    /// or damaged.
    pub(crate) fn open(dirs: &[PathBuf], mode: IoMode, checkpoint_bytes: u64) -> Result<Master> {
        let mirrors = Arc::new(Mirrors::open(dirs, mode));
        let mut loaded: Vec<(usize, Loaded)> = Vec::new();
        let mut failure: Option<(u64, Error)> = None;
        let mut newest = 0;
        let mut keys = vec![None; mirrors.copies.len()];
        for (i, key_of) in keys.iter_mut().enumerate() {
            let Some(store) = mirrors.store(i) else {
                continue;
            };
            let generation = newest_generation(&store).unwrap_or(0);
            newest = newest.max(generation);
            match load_copy(&store) {
                Ok(l) => {
                    *key_of = Some((l.generation, l.last_records));
                    loaded.push((i, l));
                }
                Err(e) => {
                    log::error!("gfs master: copy in {}: {e}", store.dir().display());
                    if failure.as_ref().is_none_or(|(g, _)| generation > *g) {
                        failure = Some((generation, e));
                    }
                }
            }
        }
        let best = choose(&mirrors, loaded)?;
        let (chosen, loaded) = match (best, failure) {
            // A damaged copy newer than every readable one may hold changes
            // the others lack: refuse rather than start on old metadata.
            (Some((_, l)), Some((g, e))) if g > l.generation => return Err(e),
            (Some(b), _) => b,
            (None, Some((_, e))) => return Err(e),
            (None, None) => {
                return Err(corrupt(
                    "no directory for the master's files could be opened",
                ))
            }
        };
        let Loaded {
            mut state,
            mut recovery,
            lsn,
            ..
        } = loaded;
        recovery.from_copy = chosen;
        // Handles reserved before the crash may be on disk as orphans.
        state.next_handle = state.next_handle.max(state.reserved);
        state.reserved = state.next_handle;
        // Past every generation any copy holds, so no stale file looks newer.
        let seq = newest + 1;
        let base = recovery.checkpoint;
        // The checkpoint before the log, as `rotate` does: a copy holds
        // `oplog-(G+1)` only if it took `checkpoint-(G+1)`, so a copy whose
        // checkpoint write failed (it is lost) or that a crash reached
        // first keeps generation G at most and ranks below every copy that
        // has the new generation.
        mirrors.write_checkpoint(
            &checkpoint::name(seq),
            &checkpoint::encode(&state.image(seq)),
        )?;
        let master = Master {
            log: Mutex::new(OpLog::create(&mirrors, seq, lsn)?),
            mirrors,
            state: Mutex::new(state),
            checkpoint_bytes,
            recovery,
        };
        // The chosen copy keeps the generation it was loaded from; the others
        // now hold only the fresh checkpoint.
        let chosen_key = keys[chosen];
        let mut recreated = 0;
        for (i, key) in keys.iter().enumerate() {
            if *key != chosen_key {
                recreated += 1;
            }
            master
                .mirrors
                .prune_copy(i, if i == chosen { base } else { seq });
        }
        let mut master = master;
        master.recovery.recreated = recreated;
        Ok(master)
    }

    fn write_checkpoint(&self, img: &Image) -> Result<()> {
        self.mirrors
            .write_checkpoint(&checkpoint::name(img.seq), &checkpoint::encode(img))
    }

    /// Deletes checkpoints and logs older than generation `keep`.
    fn prune(&self, keep: u64) -> Result<()> {
        self.mirrors.prune(keep)
    }

    /// Logs `op` and applies it to `st` (which the caller has locked). With
    /// `sync` the record is durable when this returns; otherwise it has only
    /// reached the OS (a crash of the process keeps it).
    pub(crate) fn commit(&self, st: &mut MasterState, op: Op, sync: bool) -> Result<u64> {
        st.validate(&op).map_err(corrupt)?;
        let mut log = self.log.lock();
        if log.failed {
            // The last append may have left a partial record: continue in a
            // new log, after a checkpoint that holds everything so far.
            self.rotate(st, &mut log)?;
        }
        let lsn = log.append(&op, sync)?;
        if let Err(e) = st.apply(&op, lsn) {
            log::error!("gfs master: applying a validated op failed: {e}");
        }
        Ok(lsn)
    }

    /// Makes the log durable up to record `lsn`.
    pub(crate) fn sync_to(&self, lsn: u64) -> Result<()> {
        self.log.lock().sync_to(lsn)
    }

    fn rotate(&self, st: &MasterState, log: &mut OpLog) -> Result<()> {
        let prev = log.seq;
        let seq = prev + 1;
        self.write_checkpoint(&st.image(seq))?;
        log.switch(seq)?;
        self.prune(prev)
    }

    /// Writes a checkpoint and starts a new log if the log has grown past
    /// the threshold (or always, with `force`).
    pub(crate) fn checkpoint(&self, force: bool) -> Result<bool> {
        let st = self.state.lock();
        let mut log = self.log.lock();
        if !force && log.bytes() < self.checkpoint_bytes && !log.failed {
            return Ok(false);
        }
        self.rotate(&st, &mut log)?;
        Ok(true)
    }

    /// (log sequence number, bytes in the current log, its generation).
    /// A live file's id and length.
    pub(crate) fn lookup(&self, name: &str) -> Result<(u64, u64)> {
        let st = self.state.lock();
        let id = *st
            .names
            .get(name)
            .ok_or_else(|| Error::NotFound(name.to_string()))?;
        Ok((id, st.file_len(id)))
    }

    /// The length of file `id` (named `name` for the error).
    pub(crate) fn file_len(&self, id: u64, name: &str) -> Result<u64> {
        let st = self.state.lock();
        if !st.files.contains_key(&id) {
            return Err(Error::NotFound(name.to_string()));
        }
        Ok(st.file_len(id))
    }

    /// A reader or writer opened file `id` (an open file is not purged).
    pub(crate) fn open_handle(&self, id: u64) {
        if let Some(f) = self.state.lock().files.get_mut(&id) {
            f.open += 1;
        }
    }

    /// ... and closed it.
    pub(crate) fn close_handle(&self, id: u64) {
        if let Some(f) = self.state.lock().files.get_mut(&id) {
            f.open = f.open.saturating_sub(1);
        }
    }

    pub(crate) fn log_position(&self) -> (u64, u64, u64) {
        let log = self.log.lock();
        (log.lsn(), log.bytes(), log.seq)
    }

    /// For the heartbeat: notices copies whose directory was removed under
    /// us and re-creates lost copies that can be (a checkpoint to every copy
    /// and a new log).
    pub(crate) fn check_copies(&self) -> Result<()> {
        {
            // Under the log's lock: a rotation between reading the number
            // and looking for its file (a checkpoint at start or stop)
            // prunes that log, and a healthy copy looked lost.
            let log = self.log.lock();
            self.mirrors.check(log.seq);
        }
        if self.mirrors.live() < self.mirrors.copies.len() && self.mirrors.revive() {
            self.checkpoint(true)?;
        }
        Ok(())
    }
}

/// Microseconds since the epoch, for trash times.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn open(dir: &Path) -> Master {
        Master::open(&[dir.to_path_buf()], IoMode::Uring, 1 << 20).unwrap()
    }

    fn create(m: &Master, name: &str) -> u64 {
        let mut st = m.state.lock();
        let id = st.next_file;
        m.commit(
            &mut st,
            Op::Create {
                id,
                name: name.into(),
            },
            false,
        )
        .unwrap();
        id
    }

    fn add_chunk(m: &Master, file: u64, prev_len: Option<u64>) -> u64 {
        let mut st = m.state.lock();
        let handle = st.next_handle;
        m.commit(
            &mut st,
            Op::AddChunk {
                file,
                handle,
                prev_len,
            },
            false,
        )
        .unwrap();
        handle
    }

    type Summary = Vec<(String, Vec<(u64, u64, Option<u64>)>)>;

    fn summary(m: &Master) -> Summary {
        let st = m.state.lock();
        st.names
            .iter()
            .map(|(n, id)| {
                let chunks = st.files[id]
                    .chunks
                    .iter()
                    .map(|h| (*h, st.chunks[h].version, st.chunks[h].sealed_len))
                    .collect();
                (n.clone(), chunks)
            })
            .collect()
    }

    #[test]
    fn state_survives_restart_via_checkpoint_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let before;
        {
            let m = open(dir.path());
            let a = create(&m, "a");
            let b = create(&m, "b");
            let h = add_chunk(&m, a, None);
            add_chunk(&m, a, Some(100));
            add_chunk(&m, b, None);
            assert!(m.checkpoint(true).unwrap());
            let mut st = m.state.lock();
            m.commit(
                &mut st,
                Op::SetVersion {
                    handle: h,
                    version: 5,
                },
                true,
            )
            .unwrap();
            m.commit(
                &mut st,
                Op::Rename {
                    from: "b".into(),
                    to: "c".into(),
                    at: 1,
                },
                true,
            )
            .unwrap();
            drop(st);
            create(&m, "d");
            before = summary(&m);
        }
        let m = open(dir.path());
        assert_eq!(summary(&m), before);
        assert_eq!(m.recovery.replayed, 3);
        let st = m.state.lock();
        assert_eq!(st.file_len(st.names["a"]), 100);
        assert_eq!(st.next_handle, 3);
        drop(st);
        // Reserved handles are never handed out again after a restart.
        {
            let mut st = m.state.lock();
            m.commit(&mut st, Op::ReserveHandles { upto: 50 }, true)
                .unwrap();
        }
        drop(m);
        let m = open(dir.path());
        assert_eq!(m.state.lock().next_handle, 50);
        m.checkpoint(true).unwrap();
        drop(m);
        let st = open(dir.path()).state.into_inner();
        assert_eq!(st.next_handle, 50);
        // Only the current generation and the one before it are kept.
        let files = LocalStore::open(dir.path()).unwrap().list("").unwrap();
        assert!(files.len() <= 4, "{files:?}");
    }

    /// Makes files `a` and `b` in a new master in `dir`; returns its log.
    fn log_of_two(dir: &Path, a: &str, b: &str) -> PathBuf {
        {
            let m = open(dir);
            create(&m, a);
            create(&m, b);
        }
        let log = LocalStore::open(dir).unwrap().list("oplog-").unwrap().pop();
        dir.join(log.unwrap())
    }

    #[test]
    fn torn_log_tail_is_tolerated() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_of_two(dir.path(), "kept", "torn");
        let data = std::fs::read(&path).unwrap();
        // Cut the last record anywhere inside it.
        std::fs::write(&path, &data[..data.len() - 3]).unwrap();
        let m = open(dir.path());
        assert_eq!(m.recovery.torn_bytes, data.len() as u64 / 2 - 3);
        assert_eq!(summary(&m).len(), 1);
        assert!(m.state.lock().names.contains_key("kept"));
        drop(m);
        // The fresh checkpoint made the tear history: reopening is clean.
        let m = open(dir.path());
        assert_eq!(m.recovery.torn_bytes, 0);
        assert_eq!(summary(&m).len(), 1);
    }

    #[test]
    fn damage_before_the_tail_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_of_two(dir.path(), "a", "b");
        let mut data = std::fs::read(&path).unwrap();
        data[14] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        assert!(matches!(
            Master::open(&[dir.path().to_path_buf()], IoMode::Uring, 1 << 20),
            Err(Error::Corruption { .. })
        ));
    }

    #[test]
    fn invalid_ops_are_refused_before_logging() {
        let dir = tempfile::tempdir().unwrap();
        let m = open(dir.path());
        let a = create(&m, "a");
        let (lsn, ..) = m.log_position();
        let mut st = m.state.lock();
        for op in [
            Op::Create {
                id: 99,
                name: "a".into(),
            },
            Op::AddChunk {
                file: a,
                handle: 0,
                prev_len: Some(5),
            },
            Op::Delete {
                name: "zz".into(),
                at: 0,
            },
            Op::Purge { file: a },
        ] {
            assert!(m.commit(&mut st, op, false).is_err());
        }
        drop(st);
        assert_eq!(m.log_position().0, lsn);
        let mut st = m.state.lock();
        m.commit(
            &mut st,
            Op::Delete {
                name: "a".into(),
                at: 5,
            },
            true,
        )
        .unwrap();
        assert!(st.names.is_empty());
        assert_eq!(st.files[&a].deleted_at, 5);
        m.commit(&mut st, Op::Purge { file: a }, false).unwrap();
        assert!(st.files.is_empty());
    }

    fn copies(dir: &Path) -> Vec<PathBuf> {
        (0..3).map(|i| dir.join(format!("m{i}"))).collect()
    }

    fn open_copies(dir: &Path) -> Result<Master> {
        Master::open(&copies(dir), IoMode::Uring, 1 << 20)
    }

    #[test]
    fn a_lost_or_damaged_copy_is_replaced_by_the_newest_consistent_one() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        let before;
        {
            let m = open_copies(dir.path()).unwrap();
            let a = create(&m, "a");
            add_chunk(&m, a, None);
            create(&m, "b");
            before = summary(&m);
        }
        // The master directory removed before a start: nothing is lost.
        std::fs::remove_dir_all(&dirs[0]).unwrap();
        let m = open_copies(dir.path()).unwrap();
        assert_eq!(summary(&m), before);
        assert_ne!(m.recovery.from_copy, 0);
        assert_eq!(m.recovery.recreated, 1);
        assert_eq!(m.mirrors.live(), 3);
        create(&m, "c");
        create(&m, "d");
        let before = summary(&m);
        drop(m);
        // Damage in the middle of one copy's log: another copy is used.
        let log = LocalStore::open(&dirs[0])
            .unwrap()
            .list("oplog-")
            .unwrap()
            .pop()
            .unwrap();
        let path = dirs[0].join(&log);
        let mut data = std::fs::read(&path).unwrap();
        assert!(data.len() > 20, "{log} holds {} bytes", data.len());
        data[14] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        let m = open_copies(dir.path()).unwrap();
        assert_eq!(summary(&m), before);
        assert_eq!(m.recovery.from_copy, 1);
        assert_eq!(m.recovery.recreated, 1);
        drop(m);
        let m = open_copies(dir.path()).unwrap();
        assert_eq!(m.recovery.recreated, 0);
        assert_eq!(summary(&m), before);
    }

    #[test]
    fn a_lagging_copy_whose_start_checkpoint_failed_is_never_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        drop(open_copies(dir.path()).unwrap());
        {
            let m = open_copies(dir.path()).unwrap();
            create(&m, "a");
            m.sync_to(m.log_position().0).unwrap();
        }
        // Copy 0 lags (it missed the record), and the next start's
        // checkpoint cannot be written there: a directory sits on its name.
        let store = LocalStore::open(&dirs[0]).unwrap();
        let log = store.list("oplog-").unwrap().pop().unwrap();
        let seq = oplog::parse_log_name(&log).unwrap();
        std::fs::write(dirs[0].join(&log), b"").unwrap();
        std::fs::create_dir(dirs[0].join(checkpoint::name(seq + 1))).unwrap();
        let m = open_copies(dir.path()).unwrap();
        assert_ne!(m.recovery.from_copy, 0);
        assert_eq!(m.mirrors.live(), 2);
        drop(m);
        // No change followed: copy 0 must not pass for a current copy.
        let m = open_copies(dir.path()).unwrap();
        assert_ne!(m.recovery.from_copy, 0);
        assert!(m.state.lock().names.contains_key("a"));
    }

    #[test]
    fn copies_tied_on_generation_and_records_must_agree() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        {
            let m = open_copies(dir.path()).unwrap();
            create(&m, "a");
        }
        // Copy 0's last log holds as many records as the others, but
        // different ones.
        let store = LocalStore::open(&dirs[0]).unwrap();
        let log = store.list("oplog-").unwrap().pop().unwrap();
        let other = oplog::frame(&Op::Create {
            id: 0,
            name: "x".into(),
        });
        std::fs::write(dirs[0].join(&log), other).unwrap();
        let err = open_copies(dir.path()).err().unwrap();
        assert!(matches!(err, Error::Corruption { .. }), "{err}");
        assert!(err.to_string().contains("differ"), "{err}");
    }

    /// Three starts, a file created after each: the chosen copy then holds
    /// `checkpoint-2`, `oplog-2` ("b"), `checkpoint-3`, `oplog-3` ("c"), the
    /// others only generation 3; "a" is only in the checkpoints.
    fn three_generations(dirs: &[PathBuf]) {
        for name in ["a", "b", "c"] {
            let m = Master::open(dirs, IoMode::Uring, 1 << 20).unwrap();
            create(&m, name);
        }
    }

    fn remove_checkpoints(dir: &Path) {
        let store = LocalStore::open(dir).unwrap();
        for n in store.list("checkpoint-").unwrap() {
            store.delete(&n).unwrap();
        }
    }

    fn names(m: &Master) -> Vec<String> {
        m.state.lock().names.keys().cloned().collect()
    }

    #[test]
    fn a_copy_with_logs_but_no_checkpoint_is_refused() {
        // The only copy: refused, not started from "b" and "c" alone.
        let dir = tempfile::tempdir().unwrap();
        three_generations(&[dir.path().to_path_buf()]);
        remove_checkpoints(dir.path());
        let err = Master::open(&[dir.path().to_path_buf()], IoMode::Uring, 1 << 20)
            .err()
            .unwrap();
        assert!(err.to_string().contains("no checkpoint"), "{err}");
        // One of three: the others are used and it is re-created.
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        three_generations(&dirs);
        remove_checkpoints(&dirs[0]);
        let m = open_copies(dir.path()).unwrap();
        assert_eq!(names(&m), ["a", "b", "c"]);
        assert_ne!(m.recovery.from_copy, 0);
        assert_eq!(m.recovery.recreated, 1);
    }

    #[test]
    fn a_checkpoint_must_hold_its_names_generation() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().to_path_buf()];
        for name in ["a", "b"] {
            create(&Master::open(&dirs, IoMode::Uring, 1 << 20).unwrap(), name);
        }
        // checkpoint-1 (empty) under the name checkpoint-2: taken at its
        // word, "a" (in oplog-1) would be skipped.
        let (one, two) = (checkpoint::name(1), checkpoint::name(2));
        std::fs::copy(dir.path().join(one), dir.path().join(two)).unwrap();
        let m = open(dir.path());
        assert_eq!(m.recovery.checkpoint, 1);
        assert_eq!(names(&m), ["a", "b"]);
    }

    #[test]
    fn a_gap_in_the_logs_after_the_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().to_path_buf()];
        for name in ["a", "b"] {
            create(&Master::open(&dirs, IoMode::Uring, 1 << 20).unwrap(), name);
        }
        // checkpoint-2 unreadable and oplog-1 gone: checkpoint-1 and oplog-2
        // alone would drop "a".
        let ckpt = dir.path().join(checkpoint::name(2));
        let mut data = std::fs::read(&ckpt).unwrap();
        data[10] ^= 1;
        std::fs::write(&ckpt, data).unwrap();
        std::fs::remove_file(dir.path().join(oplog::log_name(1))).unwrap();
        let err = Master::open(&dirs, IoMode::Uring, 1 << 20).err().unwrap();
        assert!(err.to_string().contains("is missing before"), "{err}");
    }

    #[test]
    fn a_copy_removed_while_open_is_re_created_by_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        let m = open_copies(dir.path()).unwrap();
        create(&m, "a");
        std::fs::remove_dir_all(&dirs[1]).unwrap();
        create(&m, "b");
        // A stale file of a higher generation put back meanwhile is dropped.
        std::fs::create_dir(&dirs[1]).unwrap();
        let junk = dirs[1].join(oplog::log_name(99));
        std::fs::write(&junk, b"junk").unwrap();
        m.check_copies().unwrap();
        assert_eq!(m.mirrors.live(), 3);
        assert!(!junk.exists());
        create(&m, "c");
        let before = summary(&m);
        drop(m);
        // Only the re-created copy is left.
        std::fs::remove_dir_all(&dirs[0]).unwrap();
        std::fs::remove_dir_all(&dirs[2]).unwrap();
        let m = open_copies(dir.path()).unwrap();
        assert_eq!(summary(&m), before);
        assert_eq!(m.recovery.from_copy, 1);
    }

    #[test]
    fn a_damaged_copy_newer_than_every_readable_one_refuses_to_start() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = copies(dir.path());
        drop(open_copies(dir.path()).unwrap());
        let old = tempfile::tempdir().unwrap();
        for f in std::fs::read_dir(&dirs[1]).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), old.path().join(f.file_name())).unwrap();
        }
        {
            let m = open_copies(dir.path()).unwrap();
            create(&m, "a");
            create(&m, "b");
        }
        // Copy 0 is damaged, 1 and 2 are an older generation.
        for d in &dirs[1..] {
            std::fs::remove_dir_all(d).unwrap();
            std::fs::create_dir(d).unwrap();
            for f in std::fs::read_dir(old.path()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), d.join(f.file_name())).unwrap();
            }
        }
        let log = LocalStore::open(&dirs[0])
            .unwrap()
            .list("oplog-")
            .unwrap()
            .pop()
            .unwrap();
        let path = dirs[0].join(log);
        let mut data = std::fs::read(&path).unwrap();
        data[14] ^= 0xff;
        std::fs::write(&path, &data).unwrap();
        assert!(matches!(
            open_copies(dir.path()),
            Err(Error::Corruption { .. })
        ));
    }
}
