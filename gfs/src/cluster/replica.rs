//! One chunk replica on one chunkserver: its file, its in-memory checksum
//! table, verified reads, and the I/O requests of appends and version changes.
//!
//! The checksum table is kept in memory (as GFS keeps checksums in memory)
//! and also read back from disk with every read: the data is verified
//! against the stored hash and the stored entry against the in-memory one,
//! so a flipped byte in either is caught by the first read that touches it.

use super::chunk::{
    self, AppendSums, EncodedSums, Entry, Layout, Superblock, TailSlot, BLOCK, SLOT_LEN, SUPER_LEN,
};
use super::header_map::HeaderMap;
use super::server::Gate;
use crate::io::{Chain, Io, ReadReq};
use parking_lot::{Mutex, RwLock};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Why a replica could not serve a read.
#[derive(Debug)]
pub(crate) enum ReadFail {
    /// The bytes on disk do not match their checksums.
    Corrupt(String),
    /// The kernel failed the read.
    Io(io::Error),
    /// The replica holds fewer bytes than asked for.
    Short { have: u64 },
    /// The replica is known bad, stale, or its server is down.
    Unavailable(String),
}

impl std::fmt::Display for ReadFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFail::Corrupt(d) => write!(f, "corrupt: {d}"),
            ReadFail::Io(e) => write!(f, "I/O error: {e}"),
            ReadFail::Short { have } => write!(f, "replica holds only {have} bytes"),
            ReadFail::Unavailable(d) => write!(f, "unavailable: {d}"),
        }
    }
}

struct State {
    version: u64,
    len: u64,
    table: Vec<Entry>,
}

/// A replica file and what is known about it.
pub(crate) struct Replica {
    pub(crate) handle: u64,
    pub(crate) gate: Arc<Gate>,
    pub(crate) path: PathBuf,
    /// Key of this replica's file in the server's open-file cache.
    fd: u64,
    layout: Layout,
    state: RwLock<State>,
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
    /// (data offset; meaningless when not past `len`). See `zeros.rs`.
    zeroed_to: AtomicU64,
    /// For a log's last chunk: its header mapped, for the checksum entries
    /// of unsynced appends (see `header_map.rs`). Changed under `io_lock`.
    header: Mutex<Option<HeaderMap>>,
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

impl Drop for Replica {
    fn drop(&mut self) {
        self.gate.fds.forget(self.fd);
    }
}

/// A replica with its file open, for building I/O chains. Holding it keeps
/// the file open even if the cache evicts it.
pub(crate) struct Open<'r> {
    pub(crate) replica: &'r Replica,
    file: Arc<File>,
    /// The directory, when the replica's entry in it is not yet durable.
    dir: Option<File>,
    /// The tail slot of the replica as it is now (what a sync that appends
    /// nothing makes durable).
    slot: [u8; SLOT_LEN as usize],
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
    /// Set when the dropped tail was not a torn append but damage (see
    /// [`looks_torn`]): counted as a corruption.
    pub(crate) corrupt_tail: Option<String>,
}

/// Bytes per page: what a crash tears an unsynced write into.
const PAGE: usize = 4096;

/// Whether a last block that fails its checksum is a torn append rather
/// than damage. An append writes its data, then its checksum entry; before
/// an fdatasync the kernel may persist any subset of their pages, so after a
/// machine crash the entry can cover data that never reached the disk. Such
/// data is missing (the file ends early) or reads as zeros (an unwritten
/// page). A block whose bytes are all present and no page of which is all
/// zeros was written whole: if it still fails, it changed on disk.
pub(crate) fn looks_torn(data: &[u8], want: usize) -> bool {
    data.len() < want || data.chunks(PAGE).any(|p| p.iter().all(|&b| b == 0))
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
            layout,
            state: RwLock::new(State {
                version,
                len: 0,
                table: vec![Entry::default(); layout.blocks as usize],
            }),
            io_lock: Mutex::new(()),
            bad: AtomicBool::new(false),
            dir_synced: AtomicBool::new(false),
            next_slot: AtomicU64::new(0),
            zeroed_to: AtomicU64::new(0),
            header: Mutex::new(None),
        };
        Ok((Arc::new(r), header))
    }

    /// Loads an existing replica file: checks the superblock, reads the table,
    /// and verifies the last block, dropping trailing blocks that fail (what a
    /// torn tail looks like). Cleans the table and file past the verified
    /// length so appends can continue there.
    pub(crate) fn load(
        gate: Arc<Gate>,
        io: &Io,
        path: &Path,
        handle: u64,
    ) -> Result<Loaded, String> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| format!("open: {e}"))?;
        let file_len = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
        let one = |off: u64, len: usize| -> Result<Vec<u8>, String> {
            let mut r = io.read_multi(&[ReadReq {
                file: &file,
                offset: off,
                len,
            }]);
            match r.pop() {
                Some(Ok(b)) => Ok(b),
                Some(Err(e)) => Err(format!("read at {off}: {e}")),
                None => Err("read returned nothing".into()),
            }
        };
        let sb = Superblock::decode(&one(0, SUPER_LEN as usize)?)?;
        if sb.handle != handle {
            return Err(format!("superblock names chunk {:016x}", sb.handle));
        }
        let layout = Layout::with_sum(sb.chunk_size, sb.sum);
        let raw = one(SUPER_LEN, layout.table_len() as usize)?;
        let mut table: Vec<Entry> = raw
            .chunks(chunk::ENTRY_LEN as usize)
            .map(|e| Entry::decode(e).unwrap_or(Entry { len: 0, hash: 1 }))
            .collect();
        table.resize(layout.blocks as usize, Entry::default());
        let claimed = chunk::length_from_table(&table).min(layout.chunk_size);
        let slots: Vec<Option<TailSlot>> = match layout.slots_off {
            Some(off) => {
                let raw = one(off, 2 * SLOT_LEN as usize)?;
                raw.chunks(SLOT_LEN as usize)
                    .map(TailSlot::decode)
                    .collect()
            }
            None => Vec::new(),
        };
        // Blocks below the floor are durable: every sync writes its slot, and
        // a sync starts only after the one before it has finished, so of two
        // slots the shorter describes a completed sync. With fewer than two
        // (a replica synced once at most) nothing is known and all of it is
        // checked, once: the slot written below makes the next load short.
        let valid: Vec<TailSlot> = slots.iter().flatten().copied().collect();
        let floor = match valid.as_slice() {
            [a, b] => a.len().min(b.len()).min(claimed),
            _ => 0,
        };
        let mut len = claimed;
        let mut corrupt_tail = None;
        let mut rescued = None;
        // Forward from the floor: a torn append can leave a later block whole
        // and an earlier one without its data, so the last block passing
        // proves nothing about the ones before it.
        const PIECE: u64 = 16 * BLOCK;
        let mut at = floor / BLOCK * BLOCK;
        'verify: while at < claimed {
            let piece_len = PIECE.min(claimed - at);
            let piece = one(layout.data_off + at, piece_len as usize)?;
            for (i, want_len) in (0..piece_len.div_ceil(BLOCK)).map(|i| {
                let start = i * BLOCK;
                (i, BLOCK.min(piece_len - start) as usize)
            }) {
                let start = at + i * BLOCK;
                let k = start / BLOCK;
                let lo = (i * BLOCK) as usize;
                let data = piece
                    .get(lo..(lo + want_len).min(piece.len()))
                    .unwrap_or(&[]);
                if data.len() == want_len && layout.sum.entry(data) == table[k as usize] {
                    continue;
                }
                // Counted even when a slot saves the block's start: a byte
                // that changed on disk is damage, whatever is kept of it.
                if corrupt_tail.is_none() && !looks_torn(data, want_len) {
                    corrupt_tail = Some(format!("block {k} fails its checksum at load"));
                }
                // A power cut in the middle of an append to this block: the
                // slot of the last completed sync still describes its synced
                // prefix. The longer slot is tried first (a sync that
                // finished writing its slot but not its data fails the check).
                let mut fits: Vec<&TailSlot> = valid
                    .iter()
                    .filter(|s| s.block == k && s.entry.len > 0)
                    .collect();
                fits.sort_by_key(|s| std::cmp::Reverse(s.entry.len));
                let found = fits.into_iter().find(|s| {
                    let n = s.entry.len as usize;
                    data.len() >= n && layout.sum.entry(&data[..n]) == s.entry
                });
                len = match found {
                    Some(s) => {
                        table[k as usize] = s.entry;
                        rescued = Some(*s);
                        s.len()
                    }
                    None => start,
                };
                break 'verify;
            }
            at += piece_len;
        }
        // The next sync must not overwrite the slot that best describes what
        // is on disk now: it takes an unused slot, or one describing more
        // than survived (a sync that did not complete), or the older one.
        let worth = |s: Option<&Option<TailSlot>>| match s.copied().flatten() {
            None => (0, 0),
            Some(s) if s.len() > len => (1, s.len()),
            Some(s) if rescued == Some(s) || table.get(s.block as usize) == Some(&s.entry) => {
                (3, s.len())
            }
            Some(s) => (2, s.len()),
        };
        let mut next_slot = u64::from(worth(slots.get(1)) < worth(slots.first()));
        // Entries past the verified length are garbage (or a torn tail).
        let used = len.div_ceil(BLOCK) as usize;
        for e in &mut table[used..] {
            *e = Entry::default();
        }
        let want_raw = chunk::encode_entries(&table);
        let mut chain = Chain::new();
        let mut dirty = false;
        if want_raw != raw {
            chain.write(&file, SUPER_LEN, &[&want_raw]);
            dirty = true;
        }
        // All of it was checked: a slot for it (made durable with the sync
        // below) lets the next load start at this length.
        let checked = (valid.len() < 2 && len > 0).then(|| {
            let last = table[(len - 1) as usize / BLOCK as usize];
            TailSlot::of(len, last).encode()
        });
        if let (Some(slot), Some(off)) = (&checked, layout.slot_off(next_slot)) {
            chain.write(&file, off, &[slot]);
            next_slot ^= 1;
            dirty = true;
        }
        // A header whose last sectors never reached the disk (a power cut
        // before the replica's first sync) reads back as zeros, which is what
        // a fresh header holds past the superblock and table.
        if file_len < layout.data_off {
            file.set_len(layout.data_off)
                .map_err(|e| format!("extending header: {e}"))?;
            dirty = true;
        }
        if dirty {
            chain.sync(&file, true);
            if let Some(Err(e)) = io.run_chains(&[chain]).pop() {
                return Err(format!("cleaning table: {e}"));
            }
        }
        if file_len > layout.data_off + len {
            file.set_len(layout.data_off + len)
                .map_err(|e| format!("truncate: {e}"))?;
        }
        let fd = gate.fds.new_id();
        gate.fds.insert(fd, file);
        let r = Replica {
            handle,
            gate,
            path: path.to_path_buf(),
            fd,
            layout,
            state: RwLock::new(State {
                version: sb.version,
                len,
                table,
            }),
            io_lock: Mutex::new(()),
            bad: AtomicBool::new(false),
            dir_synced: AtomicBool::new(true),
            next_slot: AtomicU64::new(next_slot),
            zeroed_to: AtomicU64::new(len),
            header: Mutex::new(None),
        };
        Ok(Loaded {
            replica: Arc::new(r),
            dropped_tail: claimed - len,
            corrupt_tail,
        })
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
        let slot = {
            let st = self.state.read();
            let last = st.len.saturating_sub(1) / BLOCK;
            let entry = st.table.get(last as usize).copied().unwrap_or_default();
            TailSlot::of(st.len, entry).encode()
        };
        Ok(Open {
            replica: self,
            file,
            dir,
            slot,
        })
    }

    /// Closes the replica's file now (it is being deleted).
    pub(crate) fn close(&self) {
        self.gate.fds.forget(self.fd);
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
        self.state.read().len
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
    /// map (made now if need be). Not under a power-cut model, which sees
    /// only writes and syncs. The caller holds the I/O lock.
    fn map_header(&self, file: &File) -> bool {
        if crate::power::installed() {
            return false;
        }
        let mut h = self.header.lock();
        if h.is_none() {
            *h = HeaderMap::of(file, self.layout.data_off);
        }
        h.is_some()
    }

    /// Stores an append's checksum entries through the header map, in the
    /// order the chain would write them (the first block's last); false if
    /// there is no map. Call once the append's data is written, under the
    /// I/O lock.
    pub(crate) fn store_entries(&self, sums: &EncodedSums) -> bool {
        let mut h = self.header.lock();
        let Some(map) = h.as_mut() else {
            return false;
        };
        let l = &self.layout;
        (sums.rest.is_empty() || map.store(l.entry_off(sums.first_block + 1), &sums.rest))
            && (sums.first.is_empty() || map.store(l.entry_off(sums.first_block), &sums.first))
    }

    /// Unmaps the header and cuts the zeros written ahead of a log's data
    /// (the chunk is sealed or the log closes), so the file holds only its
    /// data again. (A power-cut model sees only writes and syncs, so under
    /// one the zeros stay; loading cuts them too.)
    pub(crate) fn cut_zeros(&self) -> io::Result<()> {
        let _io = self.io_lock.lock();
        *self.header.lock() = None;
        let len = self.len();
        if self.zeroed_to.load(Ordering::Acquire) <= len || crate::power::installed() {
            return Ok(());
        }
        self.file()?.set_len(self.layout.data_off + len)?;
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

    /// Snapshot of what a read of `[offset, offset+len)` needs, or why it
    /// cannot be served.
    fn plan(&self, offset: u64, len: usize) -> Result<Plan, ReadFail> {
        if self.is_bad() {
            return Err(ReadFail::Unavailable("replica is marked bad".into()));
        }
        self.gate.check_read().map_err(ReadFail::Io)?;
        let st = self.state.read();
        let end = offset
            .checked_add(len as u64)
            .ok_or(ReadFail::Short { have: st.len })?;
        if end > st.len {
            return Err(ReadFail::Short { have: st.len });
        }
        if len == 0 {
            return Ok(Plan {
                first: 0,
                data_len: 0,
                entries: Vec::new(),
            });
        }
        let k0 = offset / BLOCK;
        let k1 = (end - 1) / BLOCK;
        let data_end = ((k1 + 1) * BLOCK).min(st.len);
        Ok(Plan {
            first: k0,
            data_len: (data_end - k0 * BLOCK) as usize,
            entries: st.table[k0 as usize..=k1 as usize].to_vec(),
        })
    }

    fn requests<'a>(&self, file: &'a File, p: &Plan, out: &mut Vec<ReadReq<'a>>) {
        out.push(ReadReq {
            file,
            offset: self.layout.data_off + p.first * BLOCK,
            len: p.data_len,
        });
        out.push(ReadReq {
            file,
            offset: self.layout.entry_off(p.first),
            len: p.entries.len() * chunk::ENTRY_LEN as usize,
        });
    }

    /// Checks the blocks read for a plan; returns the requested bytes.
    fn verify(
        &self,
        p: &Plan,
        offset: u64,
        len: usize,
        data: io::Result<Vec<u8>>,
        sums: io::Result<Vec<u8>>,
    ) -> Result<Vec<u8>, ReadFail> {
        let data = data.map_err(ReadFail::Io)?;
        let sums = sums.map_err(ReadFail::Io)?;
        if data.len() != p.data_len {
            return Err(ReadFail::Corrupt(format!(
                "file holds {} of {} data bytes",
                data.len(),
                p.data_len
            )));
        }
        for (i, want) in p.entries.iter().enumerate() {
            let k = p.first + i as u64;
            let on_disk = sums.get(i * 16..i * 16 + 16).unwrap_or(&[]);
            if on_disk != want.encode() {
                return Err(ReadFail::Corrupt(format!(
                    "checksum entry of block {k} damaged"
                )));
            }
            let start = i * BLOCK as usize;
            let end = (start + BLOCK as usize).min(data.len());
            if self.layout.sum.entry(&data[start.min(end)..end]) != *want {
                return Err(ReadFail::Corrupt(format!("block {k} fails its checksum")));
            }
        }
        // The piece asked for, copied out so that the buffer read goes back
        // whole: shrunk in place, it left holes the next read's larger
        // buffer did not fit, and the heap grew by fresh pages instead.
        let from = (offset - p.first * BLOCK) as usize;
        Ok(data[from..from + len].to_vec())
    }

    /// Reads `len` bytes at chunk offset `offset` without checking them
    /// against the checksum table, for a caller that checks them end to end
    /// (see [`crate::ReadableFile::read_at_checked`]): one read of just those
    /// bytes, where a checked read covers whole 64 KiB blocks and hashes them.
    pub(crate) fn read_unchecked(
        &self,
        io: &Io,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, ReadFail> {
        if self.is_bad() {
            return Err(ReadFail::Unavailable("replica is marked bad".into()));
        }
        self.gate.check_read().map_err(ReadFail::Io)?;
        let have = self.len();
        if offset.checked_add(len as u64).is_none_or(|end| end > have) {
            return Err(ReadFail::Short { have });
        }
        let file = self.file().map_err(ReadFail::Io)?;
        let data = io
            .read_multi(&[ReadReq {
                file: &file,
                offset: self.layout.data_off + offset,
                len,
            }])
            .pop()
            .unwrap_or_else(|| Err(io::Error::other("missing read result")));
        let stats = &self.gate.stats;
        match data {
            Ok(d) if d.len() == len => {
                stats.read(len);
                Ok(d)
            }
            Ok(d) => Err(ReadFail::Short {
                have: offset + d.len() as u64,
            }),
            Err(e) => {
                stats.read_error();
                Err(ReadFail::Io(e))
            }
        }
    }

    /// Re-reads one range while holding the write lock, so no append can be
    /// changing the last block or its entry under the check.
    fn read_locked(&self, io: &Io, offset: u64, len: usize) -> Result<Vec<u8>, ReadFail> {
        let _g = self.io_lock.lock();
        let p = self.plan(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let file = self.file().map_err(ReadFail::Io)?;
        let mut reqs = Vec::with_capacity(2);
        self.requests(&file, &p, &mut reqs);
        let mut res = io.read_multi(&reqs).into_iter();
        let (d, s) = (res.next(), res.next());
        let missing = || Err(io::Error::other("missing read result"));
        self.verify(
            &p,
            offset,
            len,
            d.unwrap_or_else(missing),
            s.unwrap_or_else(missing),
        )
    }

    /// Verifies the whole replica (header, table, padding, data) against what
    /// is known in memory; returns a description of the first problem.
    #[cfg(test)]
    pub(crate) fn scrub(&self, io: &Io) -> Result<(), String> {
        self.scrub_paced(io, &mut |_| true).map(|_| ())
    }

    /// [`Self::scrub`], calling `pace(bytes)` before each read; Ok(false)
    /// when `pace` said to stop before the end.
    pub(crate) fn scrub_paced(
        &self,
        io: &Io,
        pace: &mut dyn FnMut(u64) -> bool,
    ) -> Result<bool, String> {
        match self.scrub_once(io, pace) {
            Ok(done) => Ok(done),
            // Perhaps an append raced with us: check again with it excluded.
            Err(_) => {
                let _g = self.io_lock.lock();
                self.scrub_once(io, &mut |_| true)
            }
        }
    }

    fn scrub_once(&self, io: &Io, pace: &mut dyn FnMut(u64) -> bool) -> Result<bool, String> {
        self.gate.check_read().map_err(|e| e.to_string())?;
        let header_len = self.layout.data_off as usize;
        // Paced before the snapshot, so the header is read right after it.
        if !pace(header_len as u64) {
            return Ok(false);
        }
        let (version, len, table) = {
            let st = self.state.read();
            (st.version, st.len, st.table.clone())
        };
        let file = self.file().map_err(|e| format!("open: {e}"))?;
        let file = &*file;
        let header = io
            .read_multi(&[ReadReq {
                file,
                offset: 0,
                len: header_len,
            }])
            .pop()
            .ok_or("no header read")?
            .map_err(|e| format!("reading header: {e}"))?;
        if header.len() != header_len {
            return Err("header cut short".into());
        }
        let sb = Superblock::decode(&header)?;
        if sb.handle != self.handle || sb.version != version {
            return Err(format!(
                "superblock says chunk {:016x} v{}, expected v{version}",
                sb.handle, sb.version
            ));
        }
        let t_end = (SUPER_LEN + self.layout.table_len()) as usize;
        if header[SUPER_LEN as usize..t_end] != chunk::encode_entries(&table)[..] {
            return Err("checksum table damaged".into());
        }
        let mut pad_from = t_end;
        if let Some(off) = self.layout.slots_off {
            // Each slot is unused (zeros) or passes its own check.
            let slots_end = off as usize + 2 * SLOT_LEN as usize;
            for (i, raw) in header[off as usize..slots_end]
                .chunks(SLOT_LEN as usize)
                .enumerate()
            {
                if raw.iter().any(|&b| b != 0) && TailSlot::decode(raw).is_none() {
                    return Err(format!("tail slot {i} damaged"));
                }
            }
            pad_from = slots_end;
        }
        if header[pad_from..].iter().any(|&b| b != 0) {
            return Err("header padding damaged".into());
        }
        // The data, a megabyte per read: memory stays small and `pace` can
        // spread the reads out.
        const PIECE: u64 = 16 * BLOCK;
        let mut k = 0usize;
        let mut off = 0;
        while off < len {
            let n = PIECE.min(len - off);
            if !pace(n) {
                return Ok(false);
            }
            let piece = io
                .read_multi(&[ReadReq {
                    file,
                    offset: self.layout.data_off + off,
                    len: n as usize,
                }])
                .pop()
                .ok_or("no data read")?
                .map_err(|e| format!("reading data: {e}"))?;
            if (piece.len() as u64) < n {
                return Err("data cut short".into());
            }
            for block in piece.chunks(BLOCK as usize) {
                let want = table.get(k).copied().unwrap_or_default();
                if self.layout.sum.entry(block) != want {
                    return Err(format!("block {k} fails its checksum"));
                }
                k += 1;
            }
            off += n;
        }
        Ok(true)
    }
}

impl Open<'_> {
    /// Whether this replica's append entries can go through its header map
    /// (see [`Replica::store_entries`]).
    pub(crate) fn map_header(&self) -> bool {
        self.replica.map_header(&self.file)
    }

    /// The write of a new replica's header (see [`Replica::create`]); it is
    /// made durable by the replica's first sync.
    pub(crate) fn init_chain<'a>(&'a self, chain: &mut Chain<'a>, header: &'a [u8]) {
        chain.write(&self.file, 0, &[header]);
    }

    /// Adds the writes of appending `bufs` at `len` to `chain`: for a log
    /// (`how.zeros`), zeros ahead of the data when few are left (see
    /// `zeros.rs`; the caller holds the replica's I/O lock), then the data,
    /// then (unless `how.mapped_entries`) the entries of the blocks after the
    /// first, then the first block's entry (which is what makes the append
    /// part of the replica), then an fdatasync if `how.sync`.
    pub(crate) fn append_chain<'a>(
        &'a self,
        chain: &mut Chain<'a>,
        len: u64,
        bufs: &[&'a [u8]],
        sums: &'a EncodedSums,
        how: Append,
    ) {
        let data_off = self.replica.layout.data_off;
        if how.zeros {
            let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
            let to = self.replica.zeroed_to.load(Ordering::Acquire);
            let limit = self.replica.layout.chunk_size;
            if let Some(z) = crate::zeros::ahead(to, len + n, n, limit) {
                for (off, piece) in z.pieces {
                    chain.write(&self.file, data_off + off, &[piece]);
                }
                // Were the write to fail, the replica fails this append and
                // is dropped; a wrong mark only costs speed.
                self.replica.zeroed_to.store(z.upto, Ordering::Release);
            }
        }
        chain.write(&self.file, data_off + len, bufs);
        if !how.mapped_entries {
            if !sums.rest.is_empty() {
                let off = self.replica.layout.entry_off(sums.first_block + 1);
                chain.write(&self.file, off, &[&sums.rest]);
            }
            if !sums.first.is_empty() {
                let off = self.replica.layout.entry_off(sums.first_block);
                chain.write(&self.file, off, &[&sums.first]);
            }
        }
        if how.sync {
            self.sync_steps(chain, &sums.slot);
        }
    }

    /// An fdatasync of the replica file (and of its directory, the first
    /// time, if opened `for_sync`); call [`Replica::synced`] once the chain
    /// has succeeded.
    pub(crate) fn sync_chain<'a>(&'a self, chain: &mut Chain<'a>) {
        self.sync_steps(chain, &self.slot);
    }

    /// The tail slot of the state being made durable (into the slot the
    /// last sync did not use), then the fdatasync.
    fn sync_steps<'a>(&'a self, chain: &mut Chain<'a>, slot: &'a [u8; SLOT_LEN as usize]) {
        let layout = &self.replica.layout;
        let i = self.replica.next_slot.fetch_xor(1, Ordering::AcqRel);
        if let Some(off) = layout.slot_off(i) {
            chain.write(&self.file, off, &[slot]);
        }
        chain.sync(&self.file, true);
        if let Some(d) = &self.dir {
            chain.sync(d, false);
        }
    }

    /// The writes of a new version: the superblock, then an fdatasync.
    pub(crate) fn version_chain<'a>(&'a self, chain: &mut Chain<'a>, sb: &'a [u8]) {
        chain.write(&self.file, 0, &[sb]).sync(&self.file, true);
    }

    /// A write of table bytes (from [`Replica::table_bytes`]) at block `first`.
    pub(crate) fn table_chain<'a>(&'a self, chain: &mut Chain<'a>, first: u64, bytes: &'a [u8]) {
        chain.write(&self.file, self.replica.layout.entry_off(first), &[bytes]);
    }
}

struct Plan {
    first: u64,
    data_len: usize,
    entries: Vec<Entry>,
}

/// One range of a batched read: `len` bytes at `offset` within the chunk.
pub(crate) struct ReadPiece<'a> {
    pub(crate) replica: &'a Replica,
    pub(crate) offset: u64,
    pub(crate) len: usize,
}

/// Reads and verifies every piece (possibly on many replicas and servers)
/// in one batch of io_uring submissions: for each piece, the blocks that
/// cover it and their stored checksums. A piece that fails its check is read
/// once more under the replica's write lock before it is called corrupt.
pub(crate) fn read_verified(io: &Io, pieces: &[ReadPiece<'_>]) -> Vec<Result<Vec<u8>, ReadFail>> {
    let plans: Vec<Result<(Plan, Arc<File>), ReadFail>> = pieces
        .iter()
        .map(|p| {
            let plan = p.replica.plan(p.offset, p.len)?;
            let file = p.replica.file().map_err(ReadFail::Io)?;
            Ok((plan, file))
        })
        .collect();
    let mut reqs = Vec::new();
    for (p, plan) in pieces.iter().zip(&plans) {
        if let Ok((plan, file)) = plan {
            if p.len > 0 {
                p.replica.requests(file, plan, &mut reqs);
            }
        }
    }
    let mut res = io.read_multi(&reqs).into_iter();
    let missing = || Err(io::Error::other("missing read result"));
    pieces
        .iter()
        .zip(plans)
        .map(|(p, plan)| {
            let (plan, _file) = plan?;
            if p.len == 0 {
                return Ok(Vec::new());
            }
            let d = res.next().unwrap_or_else(missing);
            let s = res.next().unwrap_or_else(missing);
            let r = p.replica;
            let out = match r.verify(&plan, p.offset, p.len, d, s) {
                Err(ReadFail::Corrupt(_)) => r.read_locked(io, p.offset, p.len),
                other => other,
            };
            let stats = &r.gate.stats;
            match &out {
                Ok(b) => stats.read(b.len()),
                Err(ReadFail::Corrupt(_)) => stats.corrupt(),
                Err(ReadFail::Io(_)) => stats.read_error(),
                Err(_) => {}
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::fds::FdCache;
    use crate::io::IoMode;

    fn new_replica(dir: &Path, chunk_size: u64) -> (Arc<Replica>, Io) {
        new_replica_with(dir, Layout::new(chunk_size))
    }

    fn new_replica_with(dir: &Path, layout: Layout) -> (Arc<Replica>, Io) {
        let io = Io::new(IoMode::Uring);
        let gate = Arc::new(Gate::new(0, FdCache::new(16)));
        let (r, header) = Replica::create(gate, dir.join(file_name(5)), 5, 1, layout).unwrap();
        let o = r.open(false).unwrap();
        let mut c = Chain::new();
        o.init_chain(&mut c, &header);
        assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
        drop(o);
        (r, io)
    }

    fn append(io: &Io, r: &Replica, tail: &mut Vec<u8>, data: &[u8]) {
        let len = r.len();
        let sums = chunk::append_sums(r.layout.sum, len, tail, &[data]);
        let enc = sums.encoded();
        let o = r.open(true).unwrap();
        let mut c = Chain::new();
        let how = Append {
            sync: true,
            zeros: false,
            mapped_entries: false,
        };
        o.append_chain(&mut c, len, &[data], &enc, how);
        assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
        r.commit_append(len + data.len() as u64, &sums);
        sums.apply_tail(tail);
    }

    fn read(io: &Io, r: &Replica, off: u64, len: usize) -> Result<Vec<u8>, ReadFail> {
        read_verified(
            io,
            &[ReadPiece {
                replica: r,
                offset: off,
                len,
            }],
        )
        .pop()
        .unwrap()
    }

    #[test]
    fn torn_means_missing_or_zero_pages() {
        let full = vec![7u8; 3 * PAGE + 10];
        assert!(!looks_torn(&full, full.len()));
        assert!(looks_torn(&full[..100], full.len()));
        let mut hole = full.clone();
        hole[PAGE..2 * PAGE].fill(0);
        assert!(looks_torn(&hole, hole.len()));
        let mut tail = full.clone();
        tail[3 * PAGE..].fill(0);
        assert!(looks_torn(&tail, tail.len()));
        let mut flipped = full;
        flipped[5] ^= 1;
        assert!(!looks_torn(&flipped, flipped.len()));
    }

    #[test]
    fn names_roundtrip() {
        assert_eq!(parse_name(&file_name(0xabc)), Some(0xabc));
        assert_eq!(parse_name("0000000000000abc.tmp"), None);
        assert_eq!(parse_name("abc.chunk"), None);
    }

    #[test]
    fn append_read_reload_and_detect_flips() {
        // Format 1 (seahash) replicas, as written before XXH3, still work.
        for sum in [chunk::BlockSum::Seahash, chunk::BlockSum::Xxh3] {
            append_read_reload_and_detect_flips_with(sum);
        }
    }

    fn append_read_reload_and_detect_flips_with(sum: chunk::BlockSum) {
        let dir = tempfile::tempdir().unwrap();
        let (r, io) = new_replica_with(dir.path(), Layout::with_sum(4 * BLOCK, sum));
        let data: Vec<u8> = (0..(2 * BLOCK as usize + 500))
            .map(|i| (i * 31 % 256) as u8)
            .collect();
        let mut tail = Vec::new();
        for piece in data.chunks(40_000) {
            append(&io, &r, &mut tail, piece);
        }
        assert_eq!(r.len(), data.len() as u64);
        assert_eq!(read(&io, &r, 100, 70_000).unwrap(), data[100..70_100]);
        assert!(matches!(
            read(&io, &r, 0, data.len() + 1),
            Err(ReadFail::Short { .. })
        ));
        r.scrub(&io).unwrap();

        // Reload: same length, table and contents.
        let gate = Arc::new(Gate::new(0, FdCache::new(16)));
        let l = Replica::load(gate, &io, &r.path, 5).unwrap();
        assert_eq!(l.dropped_tail, 0);
        assert_eq!(l.replica.len(), data.len() as u64);
        assert_eq!(l.replica.version(), 1);
        assert_eq!(
            l.replica.layout().sum,
            sum,
            "the superblock names the block hash"
        );
        l.replica.scrub(&io).unwrap();
        drop(l);

        // Flip a data byte: the read that covers it and the scrub both notice.
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .open(&r.path)
            .unwrap();
        use std::os::unix::fs::FileExt;
        let at = r.layout.data_off + BLOCK + 7;
        let mut b = [0u8];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 1], at).unwrap();
        assert!(matches!(
            read(&io, &r, BLOCK, 10),
            Err(ReadFail::Corrupt(_))
        ));
        assert!(read(&io, &r, 0, 100).is_ok(), "other blocks still verify");
        assert!(r.scrub(&io).is_err());
        file.write_all_at(&b, at).unwrap();
        // Flip a table entry byte.
        let at = r.layout.entry_off(0) + 9;
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 0x80], at).unwrap();
        assert!(matches!(read(&io, &r, 0, 1), Err(ReadFail::Corrupt(_))));
        file.write_all_at(&b, at).unwrap();
        // Flip padding and an unused entry: only the scrub can notice.
        for at in [r.layout.data_off - 1, r.layout.entry_off(3) + 2] {
            file.read_exact_at(&mut b, at).unwrap();
            file.write_all_at(&[b[0] ^ 4], at).unwrap();
            assert!(r.scrub(&io).is_err(), "flip at {at}");
            file.write_all_at(&b, at).unwrap();
        }
        r.scrub(&io).unwrap();

        // Appends to a reloaded replica go on in its format.
        drop(r);
        let gate = Arc::new(Gate::new(0, FdCache::new(16)));
        let l = Replica::load(gate, &io, &dir.path().join(file_name(5)), 5).unwrap();
        append(&io, &l.replica, &mut tail, b"appended after a reload");
        let end = data.len();
        assert_eq!(
            read(&io, &l.replica, end as u64 - 10, 33).unwrap(),
            [&data[end - 10..], &b"appended after a reload"[..]].concat()
        );
        l.replica.scrub(&io).unwrap();
    }

    #[test]
    fn load_drops_unverifiable_tail_and_ignores_uncommitted_entries() {
        let dir = tempfile::tempdir().unwrap();
        let (r, io) = new_replica(dir.path(), 4 * BLOCK);
        let mut tail = Vec::new();
        append(&io, &r, &mut tail, &vec![1u8; BLOCK as usize + 10]);
        use std::os::unix::fs::FileExt;
        let file = OpenOptions::new().write(true).open(&r.path).unwrap();
        // An append torn before its first entry landed: data and a later
        // entry are there, but the length does not include them.
        file.write_all_at(&[9u8; 1000], r.layout.data_off + BLOCK + 10)
            .unwrap();
        file.write_all_at(
            &r.layout.sum.entry(&[3u8; 5]).encode(),
            r.layout.entry_off(2),
        )
        .unwrap();
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        assert_eq!((l.replica.len(), l.dropped_tail), (BLOCK + 10, 0));
        l.replica.scrub(&io).unwrap();
        // Now damage the last block: the reload walks back to the full block.
        file.write_all_at(&[7u8], r.layout.data_off + BLOCK + 3)
            .unwrap();
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        assert_eq!((l.replica.len(), l.dropped_tail), (BLOCK, 10));
        l.replica.scrub(&io).unwrap();
        assert_eq!(
            std::fs::metadata(&r.path).unwrap().len(),
            r.layout.data_off + BLOCK
        );
        // A superblock naming another chunk is refused.
        assert!(Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 6).is_err());
    }

    #[test]
    fn a_synced_partial_block_survives_its_entry_landing_without_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let (r, io) = new_replica(dir.path(), 4 * BLOCK);
        let mut tail = Vec::new();
        append(&io, &r, &mut tail, &[1u8; 100]);
        append(&io, &r, &mut tail, &[2u8; 50]);
        // Each sync wrote its own slot: both are valid, the last one is 150.
        let header = std::fs::read(&r.path).unwrap();
        let off = r.layout.slots_off.unwrap() as usize;
        let slots: Vec<_> = header[off..off + 2 * SLOT_LEN as usize]
            .chunks(SLOT_LEN as usize)
            .map(|b| TailSlot::decode(b).unwrap().len())
            .collect();
        assert_eq!(slots, vec![100, 150]);
        // An unsynced append of 1000 bytes: after a power cut its entry for
        // block 0 is on disk but its data is not (the kernel wrote the pages
        // back out of order).
        use std::os::unix::fs::FileExt;
        let file = OpenOptions::new().write(true).open(&r.path).unwrap();
        let mut whole = vec![1u8; 100];
        whole.extend_from_slice(&[2u8; 50]);
        whole.extend_from_slice(&[3u8; 1000]);
        file.write_all_at(&r.layout.sum.entry(&whole).encode(), r.layout.entry_off(0))
            .unwrap();
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        assert_eq!(l.replica.len(), 150, "the synced prefix is kept");
        assert!(l.corrupt_tail.is_none());
        assert_eq!(read(&io, &l.replica, 0, 150).unwrap(), whole[..150]);
        l.replica.scrub(&io).unwrap();
        // The next sync goes to the slot that is not the one kept.
        assert_eq!(l.replica.next_slot.load(Ordering::Relaxed), 0);
        // A damaged slot is found by a scrub, and a load that finds one
        // checks the whole replica and writes a good slot in its place.
        file.write_all_at(&[0xff], off as u64 + 3).unwrap();
        assert!(l.replica.scrub(&io).unwrap_err().contains("tail slot"));
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        l.replica.scrub(&io).unwrap();
        assert_eq!(l.replica.len(), 150);
    }

    #[test]
    fn a_torn_append_that_kept_a_later_block_but_not_an_earlier_one_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (r, io) = new_replica(dir.path(), 4 * BLOCK);
        let mut tail = Vec::new();
        append(&io, &r, &mut tail, &[1u8; 100]);
        append(&io, &r, &mut tail, &[2u8; 50]);
        // An unsynced append of a block's worth: the power cut kept both
        // entries and the data in block 1, but not the rest of block 0.
        let more = vec![3u8; BLOCK as usize];
        let sums = chunk::append_sums(r.layout.sum, 150, &tail, &[&more]);
        let enc = sums.encoded();
        use std::os::unix::fs::FileExt;
        let file = OpenOptions::new().write(true).open(&r.path).unwrap();
        file.write_all_at(&more[(BLOCK - 150) as usize..], r.layout.data_off + BLOCK)
            .unwrap();
        file.write_all_at(&enc.first, r.layout.entry_off(0))
            .unwrap();
        file.write_all_at(&enc.rest, r.layout.entry_off(1)).unwrap();
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        assert_eq!(l.replica.len(), 150, "block 1 alone proves nothing");
        assert!(l.corrupt_tail.is_none(), "a torn append is not damage");
        l.replica.scrub(&io).unwrap();
    }
}
