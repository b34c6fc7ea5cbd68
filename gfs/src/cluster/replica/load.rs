//! Loading a replica file: the superblock and table checked, and a tail
//! that does not verify dropped (a torn append after a machine crash) or
//! reported (damage). A damaged table entry is reported and nothing is
//! dropped: the replica is kept as it is, unused.

use super::{Loaded, Replica, State};
use crate::cluster::chunk::{
    self, Entry, Layout, Superblock, TailSlot, BLOCK, SLOT_LEN, SUPER_LEN,
};
use crate::cluster::gate::Gate;
use crate::io::{Chain, Io, ReadReq};
use parking_lot::{Mutex, RwLock};
use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

/// Bytes per page: what a crash tears an unsynced write into.
pub(super) const PAGE: usize = 4096;

/// What an entry that does not decode stands for in memory: a whole block
/// (the table goes on past it) whose hash is unknown.
const WHOLE_UNKNOWN: Entry = Entry {
    len: BLOCK as u32,
    hash: 0,
};

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
    /// Loads an existing replica file: checks the superblock, reads the table,
    /// and verifies the blocks past the last sync, dropping trailing blocks
    /// that fail (what a torn tail looks like). Cleans the table and file past
    /// the verified length so appends can continue there. A table entry that
    /// does not decode is damage: the replica comes back marked bad with the
    /// file untouched.
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
        let mut raw = one(SUPER_LEN, layout.table_len() as usize)?;
        // Header sectors that never reached the disk (a power cut before the
        // first sync) read as zeros, as they are extended below.
        raw.resize(layout.table_len() as usize, 0);
        let decoded: Vec<Option<Entry>> = raw
            .chunks(chunk::ENTRY_LEN as usize)
            .map(Entry::decode)
            .collect();
        let mut table: Vec<Entry> = decoded.iter().map(|e| e.unwrap_or(WHOLE_UNKNOWN)).collect();
        let claimed = chunk::length_from_table(&table).min(layout.chunk_size);
        // Only encoded entries are ever written to the table (zeros for a
        // block not in use), each in one write, at a multiple of 16 bytes:
        // inside one sector, which a crash leaves old or new as a whole. So
        // an entry that does not decode is no torn append but damage.
        // Dropping the blocks from it on would throw away good data the rest
        // of the table still describes: the file is left exactly as it is
        // and the replica is never served, for the good copies to replace.
        if let Some(k) = decoded.iter().position(Option::is_none) {
            let st = State {
                version: sb.version,
                len: claimed,
                table,
            };
            let r = Replica::loaded(gate, path, handle, file, layout, st, 0);
            r.mark_bad();
            return Ok(Loaded {
                replica: Arc::new(r),
                dropped_tail: 0,
                corrupt: Some(format!("the checksum entry of block {k} is damaged")),
            });
        }
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
        let st = State {
            version: sb.version,
            len,
            table,
        };
        let r = Replica::loaded(gate, path, handle, file, layout, st, next_slot);
        Ok(Loaded {
            replica: Arc::new(r),
            dropped_tail: claimed - len,
            corrupt: corrupt_tail,
        })
    }

    /// The replica of a loaded file, in `state`.
    fn loaded(
        gate: Arc<Gate>,
        path: &Path,
        handle: u64,
        file: File,
        layout: Layout,
        state: State,
        next_slot: u64,
    ) -> Replica {
        let fd = gate.fds.new_id();
        gate.fds.insert(fd, file);
        let direct_fd = gate.fds.new_id();
        Replica {
            handle,
            gate,
            path: path.to_path_buf(),
            fd,
            direct_fd,
            direct: AtomicBool::new(false),
            layout,
            zeroed_to: AtomicU64::new(state.len),
            len: AtomicU64::new(state.len),
            refilling: Mutex::new(()),
            refill_asked: AtomicBool::new(false),
            state: RwLock::new(state),
            io_lock: Mutex::new(()),
            bad: AtomicBool::new(false),
            dir_synced: AtomicBool::new(true),
            next_slot: AtomicU64::new(next_slot),
            header: Mutex::new(None),
            window: Mutex::new(None),
        }
    }
}
