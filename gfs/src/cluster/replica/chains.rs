//! The I/O chains of a replica open for writing: a new replica's header,
//! appends (zeros ahead, data, checksum entries, tail slot, fdatasync),
//! syncs, version changes and table rewrites.

use super::{Append, Open};
use crate::cluster::chunk::{EncodedSums, SLOT_LEN};
use crate::cluster::direct::DirectAppend;
use crate::io::Chain;
use std::sync::atomic::Ordering;

impl Open<'_> {
    /// Whether this replica's append entries can go through its header map
    /// (see [`Replica::store_entries`]).
    pub(crate) fn map_header(&self) -> bool {
        self.replica.map_header(&self.file)
    }

    /// Stores an unsynced log append through the replica's mappings
    /// instead of writing it (see [`Replica::store_append`]); false if it
    /// must be written.
    pub(crate) fn store_append(&self, len: u64, bufs: &[&[u8]], sums: &EncodedSums) -> bool {
        self.replica.store_append(&self.file, len, bufs, sums)
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
            let limit = self.replica.layout.chunk_size;
            let mut to = self.replica.zeroed_to.load(Ordering::Acquire);
            if len + n > to || crate::zeros::ahead(to, len + n, n, limit).is_some() {
                // A renewal in flight may be writing zeros past `to`, where
                // this append writes its data or zeros of its own (which
                // move the mark, and later appends store past `to`). The
                // caller's I/O lock keeps another renewal from starting
                // until the chain has run.
                self.replica.wait_for_refill();
                to = self.replica.zeroed_to.load(Ordering::Acquire);
            }
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
            self.entries_chain(chain, sums);
        }
        if how.sync {
            // The whole file: a synced log append also makes the zeros
            // ahead durable, so the next ones overwrite written blocks and
            // their syncs commit no journal (see `zeros.rs`).
            self.sync_steps(chain, &sums.slot, None);
        }
    }

    /// Whether this replica was opened to take its appends around the
    /// page cache ([`Replica::open_append`]).
    pub(crate) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Adds the writes of an append around the page cache (see
    /// `direct.rs`): the whole pages of `d` through the `O_DIRECT` handle,
    /// then the checksum entries as [`Open::append_chain`] writes them.
    /// Adds nothing unless [`Open::is_direct`].
    pub(crate) fn direct_append_chain<'a>(
        &'a self,
        chain: &mut Chain<'a>,
        d: &'a DirectAppend,
        sums: &'a EncodedSums,
    ) {
        let Some(direct) = &self.direct else {
            return;
        };
        self.replica.direct.store(true, Ordering::Release);
        let data_off = self.replica.layout.data_off;
        chain.write(direct, data_off + d.at, &[d.buf.bytes()]);
        // The zeros padding the last page are cut like a log's zeros ahead
        // (at a sync, a seal or when the writer closes).
        let end = d.at + d.buf.bytes().len() as u64;
        self.replica.zeroed_to.store(end, Ordering::Release);
        self.entries_chain(chain, sums);
    }

    /// The checksum entries of an append: those of the blocks after the
    /// first, then the first block's (which makes the append part of the
    /// replica).
    fn entries_chain<'a>(&'a self, chain: &mut Chain<'a>, sums: &'a EncodedSums) {
        if !sums.rest.is_empty() {
            let off = self.replica.layout.entry_off(sums.first_block + 1);
            chain.write(&self.file, off, &[&sums.rest]);
        }
        if !sums.first.is_empty() {
            let off = self.replica.layout.entry_off(sums.first_block);
            chain.write(&self.file, off, &[&sums.first]);
        }
    }

    /// An fdatasync of the replica file (and of its directory, the first
    /// time, if opened `for_sync`); call [`Replica::synced`] once the chain
    /// has succeeded. It writes back the header and the data, not a log's
    /// zeros ahead (see [`Chain::sync_upto`]): the syncs of unsynced
    /// appends (the engine's lanes sync every megabyte) would write each
    /// page twice, as zeros and then as data.
    pub(crate) fn sync_chain<'a>(&'a self, chain: &mut Chain<'a>) {
        self.sync_steps(chain, &self.slot, Some(self.len));
    }

    /// The tail slot of the state being made durable (into the slot the
    /// last sync did not use), then the fdatasync: of the header and the
    /// first `data` bytes of data if given, else of the whole file.
    fn sync_steps<'a>(
        &'a self,
        chain: &mut Chain<'a>,
        slot: &'a [u8; SLOT_LEN as usize],
        data: Option<u64>,
    ) {
        let layout = &self.replica.layout;
        let i = self.replica.next_slot.fetch_xor(1, Ordering::AcqRel);
        if let Some(off) = layout.slot_off(i) {
            chain.write(&self.file, off, &[slot]);
        }
        match data {
            Some(len) => chain.sync_upto(&self.file, layout.data_off + len),
            None => chain.sync(&self.file, true),
        };
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
