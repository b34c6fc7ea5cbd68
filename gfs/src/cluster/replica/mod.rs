//! One chunk replica on one chunkserver: its file, its in-memory checksum
//! table, verified reads, and the I/O requests of appends and version changes.
//!
//! This file holds the replica and its state; `load.rs` opens an existing
//! replica file, drops a torn tail and reports damage, `read.rs` serves verified reads,
//! `scrub.rs` checks a whole replica, and `chains.rs` builds the I/O chains
//! of appends, syncs and version changes.
//!
//! The checksum table is kept in memory (as GFS keeps checksums in memory)
//! and also read back from disk with every read: the data is verified
//! against the stored hash and the stored entry against the in-memory one,
//! so a flipped byte in either is caught by the first read that touches it.

use super::chunk::{
    self, AppendSums, EncodedSums, Entry, Layout, Superblock, TailSlot, BLOCK, SLOT_LEN, SUPER_LEN,
};
use super::gate::Gate;
use crate::io::Io;
use crate::shared_map::SharedMap;
use crate::zeros::Renew;
use parking_lot::{Mutex, RwLock};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

mod chains;
mod load;
mod read;
mod scrub;
#[cfg(test)]
mod tests;

pub(crate) use read::{read_verified, ReadFail, ReadPiece};

struct State {
    version: u64,
    len: u64,
    table: Vec<Entry>,
}

/// A replica with the server that holds it.
pub(crate) type Placed = (usize, Arc<Replica>);

/// A replica file and what is known about it.
pub(crate) struct Replica {
    pub(crate) handle: u64,
    pub(crate) gate: Arc<Gate>,
    pub(crate) path: PathBuf,
    /// Key of this replica's file in the server's open-file cache.
    fd: u64,
    /// Key of its `O_DIRECT` handle there (see `direct.rs`).
    direct_fd: u64,
    /// Appends were written to it around the page cache: readers prefer
    /// another replica, whose recent data is in the page cache.
    direct: AtomicBool,
    layout: Layout,
    state: RwLock<State>,
    /// `state.len`, stored with it under the write lock: an append checks
    /// each replica's length, and a read lock is two locked instructions.
    len: AtomicU64,
    /// Held while this replica's file is being written, so a reader whose
    /// check failed can tell a concurrent append from real corruption.
    io_lock: Mutex<()>,
    /// Found corrupt, failed a write, or retired by the master: never served.
    bad: AtomicBool,
    /// False for a new replica until its first sync, which also fsyncs the
    /// directory so the file's entry is durable: creating a chunk costs no
    /// fsync until someone asks for durability.
    dir_synced: AtomicBool,
    /// The tail slot the next sync writes (0 or 1): never the one holding
    /// the last durable state.
    next_slot: AtomicU64,
    /// For a log's chunk: where the zeros written ahead of the data end
    /// (data offset; meaningless when not past `len`). See `zeros.rs`. For
    /// a replica written around the page cache: where the zeros padding
    /// its last page end (see `direct.rs`).
    zeroed_to: AtomicU64,
    /// Held while the background thread writes zeros past `zeroed_to`
    /// (see `zeros.rs`): an append that needs zeros beyond them, or a cut
    /// of them, waits for it. Taken under `io_lock`, never the other way.
    refilling: Mutex<()>,
    /// The zeros' renewal was asked for and is not done.
    refill_asked: AtomicBool,
    /// For a log's last chunk: its header mapped, for the checksum entries
    /// of unsynced appends (see `shared_map.rs`), with the file it maps.
    /// Changed under `io_lock`.
    header: Mutex<Option<HeaderMap>>,
    /// For a log's last chunk: the zeros ahead of its data mapped, for the
    /// data of unsynced appends. Changed under `io_lock`.
    /// Shared with a renewal of the zeros while it faults in the pages
    /// it wrote (see `Renew for Replica`), as stores go on.
    window: Mutex<Option<Arc<SharedMap>>>,
}

/// A replica's header mapped, and its file held open with it: the appends
/// that store through the mappings need no lookup in the server's
/// open-file cache (see [`Replica::store_mapped`]).
struct HeaderMap {
    map: SharedMap,
    file: Arc<File>,
}

/// Stores an append's checksum entries through a header map, in the order
/// a chain writes them (the first block's last, as it is what makes the
/// append part of the replica); false if the map does not reach them.
fn store_sums(map: &SharedMap, layout: &Layout, sums: &EncodedSums) -> bool {
    (sums.rest.is_empty() || map.store(layout.entry_off(sums.first_block + 1), &sums.rest))
        && (sums.first.is_empty() || map.store(layout.entry_off(sums.first_block), &sums.first))
}

/// How an append is written to a replica.
#[derive(Clone, Copy)]
pub(crate) struct Append {
    pub(crate) sync: bool,
    /// Zeros ahead of the data (a log; see `zeros.rs`).
    pub(crate) zeros: bool,
    /// The checksum entries are stored through the header map once the
    /// data is written ([`Replica::store_entries`]), not written by the chain.
    pub(crate) mapped_entries: bool,
}

impl Renew for Replica {
    /// Renews the zeros ahead of a log's data by the protocol of [`Renew`],
    /// with the I/O lock as the appends' lock. A failed write leaves the
    /// mark, and the next append past it writes its own zeros (and meets
    /// the error itself).
    fn renew(&self, io: &Io) {
        let io_guard = self.io_lock.lock();
        self.refill_asked.store(false, Ordering::Release);
        let to = self.zeroed_to.load(Ordering::Acquire);
        let Some(z) = crate::zeros::refill(to, self.len(), self.layout.chunk_size) else {
            return;
        };
        if self.is_bad() || self.gate.check_write().is_err() {
            return;
        }
        let Ok(file) = self.file() else {
            return;
        };
        // Under a power-cut model appends write their own zeros, in order
        // with their data (the model sees writes and syncs, not stores).
        if crate::power::covers(&file) {
            return;
        }
        let _refilling = self.refilling.lock();
        drop(io_guard);
        let off = self.layout.data_off;
        for (at, piece) in z.pieces {
            if let Err(e) = io.write(&file, off + at, &[piece], false) {
                log::debug!("gfs: chunk {:016x}: zeros ahead: {e}", self.handle);
                return;
            }
        }
        self.zeroed_to.store(z.upto, Ordering::Release);
        // The appends' window reaches over the new zeros: fault their pages
        // in here, not one by one in the appends' stores.
        let window = self.window.lock().clone();
        if let Some(w) = window {
            // SAFETY: the file holds the zeros just written, and no cut runs
            // while `refilling` is held (`cut_zeros` waits for it).
            unsafe { w.populate(off + to, z.upto - to) };
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.gate.fds.forget(self.fd);
        self.gate.fds.forget(self.direct_fd);
    }
}

/// A replica with its file open, for building I/O chains. Holding it keeps
/// the file open even if the cache evicts it.
pub(crate) struct Open<'r> {
    pub(crate) replica: &'r Replica,
    file: Arc<File>,
    /// The `O_DIRECT` handle, if appends go around the page cache.
    direct: Option<Arc<File>>,
    /// The directory, when the replica's entry in it is not yet durable.
    dir: Option<File>,
    /// The tail slot of the replica as it is now (what a sync that appends
    /// nothing makes durable).
    slot: [u8; SLOT_LEN as usize],
    /// The replica's length as it is now (the end of what such a sync
    /// makes durable).
    len: u64,
}

/// The file name of a replica of chunk `handle`.
pub(crate) fn file_name(handle: u64) -> String {
    format!("{handle:016x}.chunk")
}

/// Parses a replica file name back into its handle.
pub(crate) fn parse_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".chunk")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// What loading a replica file found.
pub(crate) struct Loaded {
    pub(crate) replica: Arc<Replica>,
    /// Bytes dropped from the end because the last blocks did not verify
    /// (a torn tail after a machine crash, or corruption there).
    pub(crate) dropped_tail: u64,
    /// Damage found, counted as a corruption: a dropped tail that was not a
    /// torn append (see `looks_torn`), or a table entry that does not
    /// decode. In the second case nothing is dropped and the replica comes
    /// back marked bad, for the good copies to replace.
    pub(crate) corrupt: Option<String>,
}

impl Replica {
    /// Creates a new replica file at `path` (which must not exist); returns
    /// it with the header to write (see [`Open::init_chain`]). The caller
    /// runs that write and only then uses the replica.
    pub(crate) fn create(
        gate: Arc<Gate>,
        path: PathBuf,
        handle: u64,
        version: u64,
        layout: Layout,
    ) -> io::Result<(Arc<Replica>, Vec<u8>)> {
        gate.check_write()?;
        crate::power::namespace(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        crate::power::created(&path);
        let fd = gate.fds.new_id();
        gate.fds.insert(fd, file);
        let direct_fd = gate.fds.new_id();
        let mut header = vec![0u8; layout.data_off as usize];
        header[..SUPER_LEN as usize].copy_from_slice(
            &Superblock {
                handle,
                version,
                chunk_size: layout.chunk_size,
                sum: layout.sum,
            }
            .encode(),
        );
        let r = Replica {
            handle,
            gate,
            path,
            fd,
            direct_fd,
            direct: AtomicBool::new(false),
            layout,
            state: RwLock::new(State {
                version,
                len: 0,
                table: vec![Entry::default(); layout.blocks as usize],
            }),
            len: AtomicU64::new(0),
            io_lock: Mutex::new(()),
            bad: AtomicBool::new(false),
            dir_synced: AtomicBool::new(false),
            next_slot: AtomicU64::new(0),
            zeroed_to: AtomicU64::new(0),
            refilling: Mutex::new(()),
            refill_asked: AtomicBool::new(false),
            header: Mutex::new(None),
            window: Mutex::new(None),
        };
        Ok((Arc::new(r), header))
    }
    /// The replica's file, opened (or reopened after eviction) as needed.
    pub(crate) fn file(&self) -> io::Result<Arc<File>> {
        self.gate.fds.get(self.fd, &self.path)
    }

    /// Opens the replica for writing chains; `for_sync` if a chain will
    /// sync it (a new replica's directory is then synced with it).
    pub(crate) fn open(&self, for_sync: bool) -> io::Result<Open<'_>> {
        // A server that is down takes nothing (a full one may still sync
        // and rewrite headers: only appends and new files need space).
        self.gate.check_read()?;
        let file = self.file()?;
        let dir = if !for_sync || self.dir_synced.load(Ordering::Acquire) {
            None
        } else {
            match self.path.parent() {
                Some(p) => Some(File::open(p)?),
                None => None,
            }
        };
        let (slot, len) = {
            let st = self.state.read();
            let last = st.len.saturating_sub(1) / BLOCK;
            let entry = st.table.get(last as usize).copied().unwrap_or_default();
            (TailSlot::of(st.len, entry).encode(), st.len)
        };
        Ok(Open {
            replica: self,
            file,
            direct: None,
            dir,
            slot,
            len,
        })
    }

    /// [`Replica::open`] for an append; `direct`: written around the page
    /// cache if the file opens so (else buffered, as always).
    pub(crate) fn open_append(&self, sync: bool, direct: bool) -> io::Result<Open<'_>> {
        let mut o = self.open(sync)?;
        if direct {
            match self.gate.fds.get_direct(self.direct_fd, &self.path) {
                Ok(f) => o.direct = Some(f),
                Err(e) => {
                    log::warn!(
                        "gfs: chunkserver {}: {}: O_DIRECT refused ({e}); writing through the page cache",
                        self.gate.server,
                        self.path.display()
                    );
                    self.gate.set_direct(false);
                }
            }
        }
        Ok(o)
    }

    /// Whether appends were written to this replica around the page cache
    /// (readers prefer another one).
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.load(Ordering::Acquire)
    }

    /// Closes the replica's file now (it is being deleted).
    pub(crate) fn close(&self) {
        self.gate.fds.forget(self.fd);
        self.gate.fds.forget(self.direct_fd);
    }

    pub(crate) fn version(&self) -> u64 {
        self.state.read().version
    }

    /// Where things are in the file, and how its blocks are hashed.
    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// The chunk size this replica was made with: its capacity.
    pub(crate) fn chunk_size(&self) -> u64 {
        self.layout.chunk_size
    }

    pub(crate) fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    pub(crate) fn is_bad(&self) -> bool {
        self.bad.load(Ordering::Acquire)
    }

    /// Never serve this replica again; returns whether it was news.
    pub(crate) fn mark_bad(&self) -> bool {
        !self.bad.swap(true, Ordering::AcqRel)
    }

    /// The in-memory checksum entries of `count` blocks from `first`, as
    /// they should lie on disk.
    pub(crate) fn table_bytes(&self, first: u64, count: u64) -> Vec<u8> {
        let st = self.state.read();
        let from = (first as usize).min(st.table.len());
        let to = (first + count).min(st.table.len() as u64) as usize;
        chunk::encode_entries(&st.table[from..to])
    }

    /// Takes the write lock of this replica (held across an append's I/O).
    pub(crate) fn lock_io(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.io_lock.lock()
    }

    /// Whether an unsynced log append's entries can go through the header
    /// map (made now if need be). Not under a power-cut model covering the
    /// file, which sees only writes and syncs (asked only when mapping, as
    /// asking costs a system call while any model is installed). The caller
    /// holds the I/O lock.
    fn map_header(&self, file: &Arc<File>) -> bool {
        let mut h = self.header.lock();
        if h.is_none() && !crate::power::covers(file) {
            // SAFETY: a replica file is created with its whole header and
            // is never cut below it (a load or a close cuts only data), so
            // every page of the mapping lies inside the file for the
            // mapping's life. The bytes are only written through `store`,
            // under the replica's I/O lock, as `pwrite`s of them would be.
            // `None` if the system refuses: appends then write their entries.
            *h = unsafe { SharedMap::range(file, 0, self.layout.data_off) }.map(|map| HeaderMap {
                map,
                file: file.clone(),
            });
        }
        h.is_some()
    }

    /// Stores an append's checksum entries through the header map, in the
    /// order the chain would write them (the first block's last); false if
    /// there is no map. Call once the append's data is written, under the
    /// I/O lock.
    pub(crate) fn store_entries(&self, sums: &EncodedSums) -> bool {
        let h = self.header.lock();
        let Some(HeaderMap { map, .. }) = h.as_ref() else {
            return false;
        };
        store_sums(map, &self.layout, sums)
    }

    /// Stores an unsynced log append through the mappings instead of
    /// writing it: its data into the zeros ahead of the replica's data (that
    /// window mapped now if need be), then its checksum entries into the
    /// header map, in the order a chain would write them. False if the
    /// append does not lie inside zeros already in the file, or a mapping
    /// is missing: the caller then writes it (again: the same bytes), as
    /// renewing the zeros needs anyway. The caller holds the I/O lock and
    /// has mapped the header (`map_header`).
    pub(crate) fn store_append(
        &self,
        file: &File,
        len: u64,
        bufs: &[&[u8]],
        sums: &EncodedSums,
    ) -> bool {
        self.store_through_maps(Some(file), len, bufs, sums)
    }

    /// [`Replica::store_append`] through the file the header map holds
    /// open, for an append that needs no file opened when it fits; false
    /// also while the header is not mapped (the caller then opens the
    /// replica and goes the usual way). The caller holds the I/O lock.
    pub(crate) fn store_mapped(&self, len: u64, bufs: &[&[u8]], sums: &EncodedSums) -> bool {
        self.store_through_maps(None, len, bufs, sums)
    }

    /// [`Replica::store_append`] with `file`, or without one the header
    /// map's. The header's lock is taken once for the whole store (each
    /// locked instruction after the data's copy waits for its stores to
    /// reach the cache: an append already pays that once per replica).
    fn store_through_maps(
        &self,
        file: Option<&File>,
        len: u64,
        bufs: &[&[u8]],
        sums: &EncodedSums,
    ) -> bool {
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let zeroed = self.zeroed_to.load(Ordering::Acquire);
        if len + n > zeroed {
            return false;
        }
        let header = self.header.lock();
        let Some(HeaderMap { map, file: mapped }) = header.as_ref() else {
            return false;
        };
        let file: &File = file.unwrap_or(mapped);
        let at = self.layout.data_off + len;
        let mut window = self.window.lock();
        if !window.as_ref().is_some_and(|m| m.reaches(at, n)) {
            // The window reaches to the chunk's end, so the zeros' renewals
            // need no new one: only a sync (or a cut) unmaps it.
            let reach = self.layout.data_off + self.layout.chunk_size;
            *window = None;
            // SAFETY: nothing is held yet: stores wait for `hold_to` below.
            *window = unsafe { SharedMap::reaching(file, at, reach - at, at) }.map(Arc::new);
        }
        // A renewal may be faulting pages of it in meanwhile (see
        // `SharedMap`): the stores go on.
        let Some(w) = window.as_deref() else {
            return false;
        };
        if !w.covers(at, n) {
            // The mark is set before the zeros' writes run: make sure they
            // did (a replica whose write failed is dropped, but a store
            // past the end of its file would kill the process).
            let end = self.layout.data_off + zeroed;
            if !file.metadata().is_ok_and(|m| m.len() >= end) {
                return false;
            }
            // SAFETY: the file holds `[at, end)` (just checked), and is cut
            // only by `cut_zeros`, which drops this mapping first under the
            // I/O lock the caller holds, and by a load, before any mapping.
            unsafe { w.hold_to(end) };
        }
        let stored = w.store_all(at, bufs);
        drop(window);
        stored && store_sums(map, &self.layout, sums)
    }

    /// Unmaps the window of zeros that unsynced appends store into, before
    /// a sync writes them back: writeback write-protects every dirty page
    /// still mapped, one TLB shootdown (an interrupt to every other CPU
    /// running this process) per page, where one unmap flushes the whole
    /// range once. The next unsynced append maps what is left of the
    /// window. (Measured on the engine's unsynced writes on three
    /// replicas: the shootdowns under the syncs were a tenth of all CPU.)
    pub(crate) fn unmap_window(&self) {
        // Most replicas synced (an SSTable's, a sealed chunk's) map nothing:
        // they need not wait for the I/O lock.
        if self.window.lock().is_none() {
            return;
        }
        let _io = self.io_lock.lock();
        *self.window.lock() = None;
    }

    /// After an append ending at `end` of a log's replica: whether the
    /// zeros ahead run low and nobody has asked for more yet (see
    /// `zeros.rs`). True at most once until [`Renew::renew`] ran.
    pub(crate) fn wants_zeros(&self, end: u64) -> bool {
        let to = self.zeroed_to.load(Ordering::Acquire);
        crate::zeros::runs_low(to, end, self.layout.chunk_size)
            && !self.refill_asked.swap(true, Ordering::AcqRel)
    }

    /// Waits for a refill of the zeros in flight (see
    /// [`Renew::renew`]); the caller holds the I/O lock, so no other
    /// starts until it lets go.
    pub(crate) fn wait_for_refill(&self) {
        drop(self.refilling.lock());
    }

    /// Unmaps the header and cuts the zeros written ahead of a log's data
    /// (the chunk is sealed or the log closes), so the file holds only its
    /// data again. (A power-cut model sees only writes and syncs, so under
    /// one covering the file the zeros stay; loading cuts them too.)
    pub(crate) fn cut_zeros(&self) -> io::Result<()> {
        let _io = self.io_lock.lock();
        self.wait_for_refill();
        *self.header.lock() = None;
        *self.window.lock() = None;
        let len = self.len();
        if self.zeroed_to.load(Ordering::Acquire) <= len {
            return Ok(());
        }
        let file = self.file()?;
        if crate::power::covers(&file) {
            return Ok(());
        }
        file.set_len(self.layout.data_off + len)?;
        self.zeroed_to.store(len, Ordering::Release);
        Ok(())
    }

    /// Records a completed append in memory.
    pub(crate) fn commit_append(&self, new_len: u64, sums: &AppendSums) {
        let mut st = self.state.write();
        for (i, e) in sums.entries.iter().enumerate() {
            if let Some(slot) = st.table.get_mut(sums.first_block as usize + i) {
                *slot = *e;
            }
        }
        st.len = new_len;
        self.len.store(new_len, Ordering::Release);
    }

    /// A sync chain of this replica succeeded.
    pub(crate) fn synced(&self) {
        self.dir_synced.store(true, Ordering::Release);
    }

    /// The superblock bytes for `version`.
    pub(crate) fn superblock(&self, version: u64) -> [u8; SUPER_LEN as usize] {
        Superblock {
            handle: self.handle,
            version,
            chunk_size: self.layout.chunk_size,
            sum: self.layout.sum,
        }
        .encode()
    }

    pub(crate) fn set_version(&self, version: u64) {
        self.state.write().version = version;
    }
}
