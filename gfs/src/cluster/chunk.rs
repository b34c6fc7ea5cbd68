//! The on-disk format of one chunk replica.
//!
//! A replica is one file:
//!
//! ```text
//! [superblock: 64 B][checksum table: 16 B per 64 KiB block][2 tail slots: 24 B each][zeros to 4 KiB][data]
//! ```
//!
//! The superblock names the chunk (handle), its version, the chunk size and
//! the format, and carries its own seahash. Each table entry holds the length
//! of data the block holds and the hash of those bytes ([`BlockSum`]: XXH3
//! from format 2 on, seahash in format 1, still read and appended to);
//! entries of blocks past the end are all zeros. Keeping data and checksums
//! in one file lets one fdatasync make both durable. Every byte of the file
//! is covered by some check (the superblock hash, the table compared with its
//! in-memory copy, the zero padding, the data hashes), so any flipped byte is
//! noticed by a scrub.
//!
//! An append writes the data first, then the entries of every block it
//! touched except the first, and the first block's entry last. The length of
//! a replica is read off the table (it ends at the first entry that is not a
//! full block), so until that last 16-byte write lands the append is not part
//! of the replica: a process killed mid-append leaves the old length, never
//! half a record. (An unsynced append to a log's chunk stores its entries
//! through a mapping of the header once its data is written, in the same
//! order: see `shared_map.rs`.)
//!
//! That last write overwrites the entry of a block that may already hold
//! synced data. Before an fdatasync the kernel may write back the pages of a
//! file in any order, so after a power cut the new entry can be on disk
//! without the data it covers (or the reverse), and the synced prefix of the
//! block would no longer verify. Two *tail slots* after the table keep it:
//! every sync writes, just before its fdatasync, the entry of the partial
//! last block as it will be once the sync completes, alternating between the
//! two slots, so the slot the previous sync made durable is never
//! overwritten before the next sync completes. At load, a last block that
//! fails its table entry is checked against the slots (see
//! [`TailSlot`]). A layout with no room for the slots between the table and
//! the data (a chunk size of 252 + 256·n blocks) works without them.

use seahash::SeaHasher;
use smallvec::SmallVec;
use std::hash::Hasher;
use xxhash_rust::xxh3::Xxh3;

/// Bytes covered by one checksum.
pub(crate) const BLOCK: u64 = 64 << 10;
pub(crate) const SUPER_LEN: u64 = 64;
pub(crate) const ENTRY_LEN: u64 = 16;
/// Data starts on a page boundary so block reads are page aligned.
const ALIGN: u64 = 4096;
const MAGIC: &[u8; 8] = b"GFSCHNK1";

/// The hash of a replica's data blocks, named by its superblock's format.
/// XXH3 runs about 4× faster than seahash here, and a read of a 64 KiB
/// piece that straddles two blocks hashes 128 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockSum {
    /// Format 1.
    Seahash,
    /// Format 2: what new replicas use.
    Xxh3,
}

impl BlockSum {
    pub(crate) const CURRENT: BlockSum = BlockSum::Xxh3;

    fn format(self) -> u32 {
        match self {
            BlockSum::Seahash => 1,
            BlockSum::Xxh3 => 2,
        }
    }

    fn for_format(format: u32) -> Option<BlockSum> {
        match format {
            1 => Some(BlockSum::Seahash),
            2 => Some(BlockSum::Xxh3),
            _ => None,
        }
    }

    /// The table entry of a block holding `data`.
    pub(crate) fn entry(self, data: &[u8]) -> Entry {
        Entry {
            len: data.len() as u32,
            hash: match self {
                BlockSum::Seahash => seahash::hash(data),
                // AVX2 where the CPU has it (see the engine's block checksum).
                BlockSum::Xxh3 => xxh3::hash64_with_seed(data, 0),
            },
        }
    }

    /// A streaming hasher of this kind, over nothing yet.
    pub(crate) fn hasher(self) -> BlockHasher {
        match self {
            BlockSum::Seahash => BlockHasher::Seahash(SeaHasher::new()),
            BlockSum::Xxh3 => BlockHasher::Xxh3(Box::new(Xxh3::new())),
        }
    }
}

/// The hash of a partial block, fed as appends arrive; equals
/// [`BlockSum::entry`] of the bytes fed.
#[derive(Clone)]
pub(crate) enum BlockHasher {
    Seahash(SeaHasher),
    Xxh3(Box<Xxh3>),
}

impl BlockHasher {
    fn sum(&self) -> BlockSum {
        match self {
            BlockHasher::Seahash(_) => BlockSum::Seahash,
            BlockHasher::Xxh3(_) => BlockSum::Xxh3,
        }
    }

    fn write(&mut self, data: &[u8]) {
        match self {
            BlockHasher::Seahash(h) => h.write(data),
            BlockHasher::Xxh3(h) => h.update(data),
        }
    }

    fn finish(&self) -> u64 {
        match self {
            BlockHasher::Seahash(h) => h.finish(),
            BlockHasher::Xxh3(h) => h.digest(),
        }
    }
}

/// Bytes of one tail slot.
pub(crate) const SLOT_LEN: u64 = 24;

/// Where things are in a replica file of a given chunk size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) chunk_size: u64,
    pub(crate) blocks: u64,
    /// Offset of chunk byte 0 in the file (also the header length).
    pub(crate) data_off: u64,
    /// Offset of the two tail slots, if the padding has room for them.
    pub(crate) slots_off: Option<u64>,
    /// How the data blocks are hashed.
    pub(crate) sum: BlockSum,
}

impl Layout {
    /// The layout of a new replica.
    pub(crate) fn new(chunk_size: u64) -> Layout {
        Layout::with_sum(chunk_size, BlockSum::CURRENT)
    }

    /// The layout of a replica whose blocks are hashed with `sum`.
    pub(crate) fn with_sum(chunk_size: u64, sum: BlockSum) -> Layout {
        let blocks = chunk_size.div_ceil(BLOCK);
        let table_end = SUPER_LEN + blocks * ENTRY_LEN;
        let data_off = table_end.div_ceil(ALIGN) * ALIGN;
        Layout {
            chunk_size,
            blocks,
            data_off,
            slots_off: (data_off - table_end >= 2 * SLOT_LEN).then_some(table_end),
            sum,
        }
    }

    /// File offset of tail slot `i` (0 or 1), if the layout has slots.
    pub(crate) fn slot_off(&self, i: u64) -> Option<u64> {
        self.slots_off.map(|o| o + (i % 2) * SLOT_LEN)
    }

    /// File offset of block `k`'s table entry.
    pub(crate) fn entry_off(&self, k: u64) -> u64 {
        SUPER_LEN + k * ENTRY_LEN
    }

    /// Bytes of the table region (entries only, without padding).
    pub(crate) fn table_len(&self) -> u64 {
        self.blocks * ENTRY_LEN
    }
}

/// Identity and version of a replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Superblock {
    pub(crate) handle: u64,
    pub(crate) version: u64,
    pub(crate) chunk_size: u64,
    pub(crate) sum: BlockSum,
}

impl Superblock {
    pub(crate) fn encode(&self) -> [u8; SUPER_LEN as usize] {
        let mut b = [0u8; SUPER_LEN as usize];
        b[0..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.handle.to_le_bytes());
        b[16..24].copy_from_slice(&self.version.to_le_bytes());
        b[24..32].copy_from_slice(&self.chunk_size.to_le_bytes());
        b[32..36].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        b[36..40].copy_from_slice(&self.sum.format().to_le_bytes());
        // 40..56 reserved, zero.
        let h = seahash::hash(&b[..56]);
        b[56..64].copy_from_slice(&h.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Superblock, String> {
        if b.len() < SUPER_LEN as usize {
            return Err(format!("superblock is {} bytes", b.len()));
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if seahash::hash(&b[..56]) != u64_at(56) {
            return Err("superblock checksum mismatch".into());
        }
        if &b[0..8] != MAGIC {
            return Err("bad magic".into());
        }
        let block = u32::from_le_bytes([b[32], b[33], b[34], b[35]]);
        let format = u32::from_le_bytes([b[36], b[37], b[38], b[39]]);
        let sum = BlockSum::for_format(format).filter(|_| u64::from(block) == BLOCK);
        let Some(sum) = sum else {
            return Err(format!("unsupported format {format} / block {block}"));
        };
        let sb = Superblock {
            handle: u64_at(8),
            version: u64_at(16),
            chunk_size: u64_at(24),
            sum,
        };
        if sb.chunk_size == 0 || !sb.chunk_size.is_multiple_of(BLOCK) {
            return Err(format!("bad chunk size {}", sb.chunk_size));
        }
        Ok(sb)
    }
}

/// Checksum of one block: how many bytes it holds and their hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) len: u32,
    pub(crate) hash: u64,
}

impl Entry {
    /// Unused entries are all zeros on disk.
    pub(crate) fn encode(&self) -> [u8; ENTRY_LEN as usize] {
        let mut b = [0u8; ENTRY_LEN as usize];
        if self.len > 0 {
            b[0..4].copy_from_slice(&self.len.to_le_bytes());
            b[8..16].copy_from_slice(&self.hash.to_le_bytes());
        }
        b
    }

    /// Decodes an entry; `None` if its reserved bytes are not zero or it
    /// claims more than a block (it cannot be a real entry).
    pub(crate) fn decode(b: &[u8]) -> Option<Entry> {
        if b.len() < ENTRY_LEN as usize || b[4..8] != [0; 4] {
            return None;
        }
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let mut h = [0u8; 8];
        h.copy_from_slice(&b[8..16]);
        let hash = u64::from_le_bytes(h);
        if u64::from(len) > BLOCK || (len == 0 && hash != 0) {
            return None;
        }
        Some(Entry { len, hash })
    }
}

/// What a sync made durable, kept in a tail slot: the replica's length as
/// the block it ends in and that block's entry (an empty entry when it ends
/// on a block boundary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TailSlot {
    pub(crate) block: u64,
    pub(crate) entry: Entry,
}

/// Keeps an all-zero slot from passing its check.
const SLOT_SEED: u64 = 0x7461_696c_736c_6f74;

impl TailSlot {
    /// The slot of a replica `len` bytes long whose last block has `entry`
    /// (ignored when `len` ends on a block boundary).
    pub(crate) fn of(len: u64, entry: Entry) -> TailSlot {
        TailSlot {
            block: len / BLOCK,
            entry: if len.is_multiple_of(BLOCK) {
                Entry::default()
            } else {
                entry
            },
        }
    }

    /// The replica length the slot describes.
    pub(crate) fn len(&self) -> u64 {
        self.block * BLOCK + u64::from(self.entry.len)
    }

    /// `[block u32][len u32][hash u64][seahash of the 16 bytes before ^ seed]`.
    pub(crate) fn encode(&self) -> [u8; SLOT_LEN as usize] {
        let mut b = [0u8; SLOT_LEN as usize];
        b[0..4].copy_from_slice(&(self.block as u32).to_le_bytes());
        b[4..8].copy_from_slice(&self.entry.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.entry.hash.to_le_bytes());
        let check = seahash::hash(&b[..16]) ^ SLOT_SEED;
        b[16..24].copy_from_slice(&check.to_le_bytes());
        b
    }

    /// A slot whose check passes, or `None` (zeros, torn or damaged).
    pub(crate) fn decode(b: &[u8]) -> Option<TailSlot> {
        let b = b.get(..SLOT_LEN as usize)?;
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        if seahash::hash(&b[..16]) ^ SLOT_SEED != u64_at(16) {
            return None;
        }
        let block = u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if u64::from(len) >= BLOCK || (len == 0 && u64_at(8) != 0) {
            return None;
        }
        Some(TailSlot {
            block,
            entry: Entry {
                len,
                hash: u64_at(8),
            },
        })
    }
}

/// Encodes a run of entries as they lie in the table.
pub(crate) fn encode_entries(entries: &[Entry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

/// The replica length a table claims: full blocks up to the first entry that
/// is not full. Whatever follows that entry is not part of the replica.
pub(crate) fn length_from_table(table: &[Entry]) -> u64 {
    for (k, e) in table.iter().enumerate() {
        if u64::from(e.len) != BLOCK {
            return k as u64 * BLOCK + u64::from(e.len);
        }
    }
    table.len() as u64 * BLOCK
}

/// What an append of `bufs` at chunk length `len` does to the table.
pub(crate) struct AppendSums {
    /// First block touched (the one holding offset `len`).
    pub(crate) first_block: u64,
    /// New entries of blocks `first_block..` (one or two for the small
    /// appends of a log: on the stack).
    pub(crate) entries: SmallVec<[Entry; 2]>,
    /// The partial last block after the append is the old tail followed by
    /// the appended bytes' last `tail_new` (true), or those alone (false:
    /// the append completed a block). Kept as a change rather than a copy:
    /// a 1000-byte append must not copy the ~32 KiB tail in front of it,
    /// nor its own bytes twice.
    pub(crate) extends_tail: bool,
    tail_new: usize,
    /// The tail slot's length and entry after the append.
    tail_len: u64,
    tail_entry: Entry,
}

impl AppendSums {
    /// Turns the tail before the append into the tail after it; `bufs` are
    /// the appended bytes these sums were computed over.
    pub(crate) fn apply_tail(&self, tail: &mut Vec<u8>, bufs: &[&[u8]]) {
        if !self.extends_tail {
            tail.clear();
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut skip = total.saturating_sub(self.tail_new);
        for b in bufs {
            match b.get(skip..) {
                Some(rest) => {
                    tail.extend_from_slice(rest);
                    skip = 0;
                }
                None => skip -= b.len(),
            }
        }
    }
}

/// The entries of an [`AppendSums`] as written: the first block's entry
/// alone (it goes last) and the rest as one run.
pub(crate) struct EncodedSums {
    pub(crate) first_block: u64,
    pub(crate) first: SmallVec<[u8; ENTRY_LEN as usize]>,
    pub(crate) rest: Vec<u8>,
    /// The tail slot of the replica after the append.
    pub(crate) slot: [u8; SLOT_LEN as usize],
}

impl AppendSums {
    pub(crate) fn encoded(&self) -> EncodedSums {
        EncodedSums {
            first_block: self.first_block,
            first: self
                .entries
                .first()
                .map(|e| SmallVec::from_slice(&e.encode()))
                .unwrap_or_default(),
            rest: encode_entries(self.entries.get(1..).unwrap_or(&[])),
            slot: TailSlot::of(self.tail_len, self.tail_entry).encode(),
        }
    }
}

/// As [`append_sums`], given also `state`: when known, the streaming hash of
/// exactly `tail`, so that the tail is not hashed again on every small
/// append (a 64 KiB block took ~60 appends of 1000 bytes, each rehashing
/// all of it). Returns the state of the new tail as well.
pub(crate) fn append_sums_from(
    sum: BlockSum,
    len: u64,
    tail: &[u8],
    state: Option<BlockHasher>,
    bufs: &[&[u8]],
) -> (AppendSums, BlockHasher) {
    debug_assert_eq!(tail.len() as u64, len % BLOCK);
    let mut hasher = state.filter(|h| h.sum() == sum).unwrap_or_else(|| {
        let mut h = sum.hasher();
        h.write(tail);
        h
    });
    let mut entries: SmallVec<[Entry; 2]> = SmallVec::new();
    let touched = bufs.iter().any(|b| !b.is_empty());
    // Length of the partial block being filled, and what of it this append wrote.
    let mut cur_len = tail.len();
    let mut extends_tail = true;
    let mut tail_new = 0;
    for b in bufs {
        let mut rest: &[u8] = b;
        while !rest.is_empty() {
            let take = rest.len().min(BLOCK as usize - cur_len);
            hasher.write(&rest[..take]);
            cur_len += take;
            if cur_len as u64 == BLOCK {
                entries.push(Entry {
                    len: BLOCK as u32,
                    hash: hasher.finish(),
                });
                cur_len = 0;
                extends_tail = false;
                tail_new = 0;
                hasher = sum.hasher();
            } else {
                tail_new += take;
            }
            rest = &rest[take..];
        }
    }
    if touched && cur_len > 0 {
        entries.push(Entry {
            len: cur_len as u32,
            hash: hasher.finish(),
        });
    }
    let first_block = len / BLOCK;
    let (tail_len, tail_entry) = match entries.last() {
        Some(e) => {
            let block = first_block + entries.len() as u64 - 1;
            (block * BLOCK + u64::from(e.len), *e)
        }
        // Nothing appended: the slot describes the tail as it was.
        None => (first_block * BLOCK + tail.len() as u64, sum.entry(tail)),
    };
    let sums = AppendSums {
        first_block,
        entries,
        extends_tail,
        tail_new,
        tail_len,
        tail_entry,
    };
    (sums, hasher)
}

/// Computes the new checksums of an append, given `tail`: the bytes already
/// in the partial block at `len` (exactly `len % BLOCK` of them).
pub(crate) fn append_sums(sum: BlockSum, len: u64, tail: &[u8], bufs: &[&[u8]]) -> AppendSums {
    append_sums_from(sum, len, tail, None, bufs).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_sums_match_whole_block_sums() {
        for sum in [BlockSum::Seahash, BlockSum::Xxh3] {
            streaming_sums_match_whole_block_sums_with(sum);
        }
    }

    fn streaming_sums_match_whole_block_sums_with(sum: BlockSum) {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut len = 0u64;
        let mut tail: Vec<u8> = Vec::new();
        let mut state = None;
        for (i, size) in [1usize, 7, 1000, 65_536, 3, 70_000, 999, 131_072, 8]
            .iter()
            .enumerate()
        {
            let piece = &data[len as usize..len as usize + size];
            let halves = piece.split_at(size / 2);
            let bufs: [&[u8]; 2] = [halves.0, halves.1];
            // Hashing the tail afresh is the reference for carrying the state.
            let want = append_sums(sum, len, &tail, &bufs);
            // Every third append starts without a state, as after a restart.
            let st = if i % 3 == 2 { None } else { state.clone() };
            let (got, next) = append_sums_from(sum, len, &tail, st, &bufs);
            assert_eq!(got.first_block, want.first_block);
            assert_eq!(got.entries, want.entries, "append {i}");
            let (mut got_tail, mut want_tail) = (tail.clone(), tail.clone());
            got.apply_tail(&mut got_tail, &bufs);
            want.apply_tail(&mut want_tail, &bufs);
            assert_eq!(got_tail, want_tail);
            // The tail after it is the block the data's end lies in.
            let end = len + *size as u64;
            assert_eq!(got_tail, data[(end - end % BLOCK) as usize..end as usize]);
            tail = got_tail;
            state = Some(next);
            len += *size as u64;
        }
    }

    #[test]
    fn layout_is_page_aligned() {
        let l = Layout::new(64 << 20);
        assert_eq!(l.blocks, 1024);
        assert_eq!(l.data_off, 20480);
        assert_eq!(l.entry_off(3), 64 + 48);
        let small = Layout::new(128 << 10);
        assert_eq!((small.blocks, small.data_off), (2, 4096));
    }

    #[test]
    fn superblock_roundtrip_and_every_flip_detected() {
        for sum in [BlockSum::Seahash, BlockSum::Xxh3] {
            let sb = Superblock {
                handle: 0xdead_beef,
                version: 7,
                chunk_size: 1 << 20,
                sum,
            };
            let b = sb.encode();
            assert_eq!(Superblock::decode(&b).unwrap(), sb);
            for i in 0..b.len() {
                let mut c = b;
                c[i] ^= 0x10;
                assert!(Superblock::decode(&c).is_err(), "flip at {i} undetected");
            }
            assert!(Superblock::decode(&b[..10]).is_err());
        }
    }

    #[test]
    fn formats_name_the_block_sums() {
        // Format 1 (seahash) is what replicas written before XXH3 carry.
        assert_eq!(BlockSum::for_format(1), Some(BlockSum::Seahash));
        assert_eq!(BlockSum::for_format(2), Some(BlockSum::Xxh3));
        assert_eq!(BlockSum::for_format(3), None);
        assert_eq!(Layout::new(1 << 20).sum, BlockSum::CURRENT);
        let data = [9u8; 1000];
        assert_eq!(BlockSum::Seahash.entry(&data).hash, seahash::hash(&data));
        assert_eq!(
            BlockSum::Xxh3.entry(&data).hash,
            xxhash_rust::xxh3::xxh3_64(&data)
        );
        let mut sb = Superblock {
            handle: 1,
            version: 1,
            chunk_size: 1 << 20,
            sum: BlockSum::Xxh3,
        }
        .encode();
        // An unknown format with a valid superblock hash is refused by name.
        sb[36..40].copy_from_slice(&9u32.to_le_bytes());
        let h = seahash::hash(&sb[..56]);
        sb[56..64].copy_from_slice(&h.to_le_bytes());
        let err = Superblock::decode(&sb).unwrap_err();
        assert!(err.contains("unsupported format 9"), "{err}");
    }

    /// The examples in docs/formats/chunk-layer.md, byte for byte.
    #[test]
    fn superblock_bytes_are_as_documented() {
        let sb = Superblock {
            handle: 1,
            version: 1,
            chunk_size: 64 << 20,
            sum: BlockSum::Xxh3,
        }
        .encode();
        let mut want = Vec::new();
        want.extend_from_slice(b"GFSCHNK1");
        want.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0]);
        want.extend_from_slice(&[0, 0, 1, 0, 2, 0, 0, 0]);
        want.extend_from_slice(&[0; 16]);
        want.extend_from_slice(&[0x58, 0x06, 0x58, 0xde, 0xb3, 0x25, 0x9d, 0x08]);
        assert_eq!(sb[..], want[..]);
        let e = BlockSum::Xxh3.entry(b"hello");
        let hash = [0xfd, 0xdc, 0x62, 0x5c, 0x55, 0xe8, 0x55, 0x95];
        assert_eq!(
            e.encode()[..],
            [&[5, 0, 0, 0, 0, 0, 0, 0][..], &hash].concat()
        );
        let slot = TailSlot::of(5, e).encode();
        let check = [0x05, 0x5a, 0x38, 0x61, 0x2b, 0xf2, 0xac, 0x03];
        assert_eq!(
            slot[..],
            [&[0, 0, 0, 0, 5, 0, 0, 0][..], &hash, &check].concat()
        );
        // The layouts table, and the table sizes that leave no room for slots.
        let l = Layout::new(64 << 20);
        assert_eq!((l.slots_off, l.data_off), (Some(16448), 20480));
        assert_eq!(Layout::new(1 << 20).slots_off, Some(320));
        for blocks in [250, 251, 252, 506, 507, 508] {
            assert_eq!(Layout::new(blocks * BLOCK).slots_off, None, "{blocks}");
        }
        for blocks in [249, 253, 505, 509] {
            assert!(Layout::new(blocks * BLOCK).slots_off.is_some(), "{blocks}");
        }
    }

    #[test]
    fn entries_roundtrip_and_reject_garbage() {
        let e = BlockSum::CURRENT.entry(b"hello");
        assert_eq!(Entry::decode(&e.encode()), Some(e));
        assert_eq!(Entry::decode(&[0; 16]), Some(Entry::default()));
        let mut bad = e.encode();
        bad[5] = 1;
        assert_eq!(Entry::decode(&bad), None);
        let mut huge = e.encode();
        huge[0..4].copy_from_slice(&(BLOCK as u32 + 1).to_le_bytes());
        assert_eq!(Entry::decode(&huge), None);
    }

    #[test]
    fn length_stops_at_first_partial_block() {
        let full = Entry {
            len: BLOCK as u32,
            hash: 1,
        };
        let part = Entry { len: 10, hash: 2 };
        assert_eq!(length_from_table(&[]), 0);
        assert_eq!(length_from_table(&[full, full]), 2 * BLOCK);
        assert_eq!(length_from_table(&[full, part, full]), BLOCK + 10);
        // A later entry written before the first one of an append: ignored.
        assert_eq!(length_from_table(&[part, full]), 10);
        assert_eq!(length_from_table(&[Entry::default(), full]), 0);
    }

    #[test]
    fn append_sums_match_whole_block_hashes() {
        for sum in [BlockSum::Seahash, BlockSum::Xxh3] {
            append_sums_match_whole_block_hashes_with(sum);
        }
    }

    fn append_sums_match_whole_block_hashes_with(sum: BlockSum) {
        let data: Vec<u8> = (0..(3 * BLOCK as usize + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        // Appended in uneven pieces, the sums must equal hashing whole blocks.
        let mut len = 0u64;
        let mut tail = Vec::new();
        let mut table = vec![Entry::default(); 4];
        for piece in [7usize, 70_000, 1, 100_000, 0, 26_700] {
            let bufs: Vec<&[u8]> = vec![&data[len as usize..len as usize + piece]];
            let s = append_sums(sum, len, &tail, &bufs);
            for (i, e) in s.entries.iter().enumerate() {
                table[s.first_block as usize + i] = *e;
            }
            len += piece as u64;
            s.apply_tail(&mut tail, &bufs);
            assert_eq!(tail.len() as u64, len % BLOCK);
            assert_eq!(tail, data[(len - len % BLOCK) as usize..len as usize]);
        }
        assert_eq!(len, data.len() as u64);
        for (k, e) in table.iter().enumerate() {
            let end = ((k + 1) * BLOCK as usize).min(data.len());
            assert_eq!(*e, sum.entry(&data[k * BLOCK as usize..end]), "block {k}");
        }
        assert_eq!(length_from_table(&table), len);
        // An empty append changes nothing.
        assert!(append_sums(sum, len, &tail, &[]).entries.is_empty());
    }

    #[test]
    fn tail_slots_roundtrip_and_refuse_zeros_and_damage() {
        let e = BlockSum::CURRENT.entry(&[5u8; 300]);
        let s = TailSlot::of(3 * BLOCK + 300, e);
        assert_eq!((s.block, s.len()), (3, 3 * BLOCK + 300));
        let b = s.encode();
        assert_eq!(TailSlot::decode(&b), Some(s));
        assert_eq!(TailSlot::decode(&[0u8; SLOT_LEN as usize]), None);
        for i in 0..b.len() {
            let mut d = b;
            d[i] ^= 0x10;
            assert_eq!(TailSlot::decode(&d), None, "flip at {i}");
        }
        // A replica ending on a block boundary: an empty entry.
        let s = TailSlot::of(2 * BLOCK, e);
        assert_eq!((s.block, s.len()), (2, 2 * BLOCK));
        assert_eq!(TailSlot::decode(&s.encode()), Some(s));
        assert!(Layout::new(64 << 20).slots_off.is_some());
        assert!(Layout::new(252 * BLOCK).slots_off.is_none());
    }
}
