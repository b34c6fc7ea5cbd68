//! Reads one decompressed block (see block_builder.rs for the layout).
//!
//! The block's checksum has been verified before it gets here, but every
//! offset and length is still bounds-checked: a bug or an undetected
//! corruption must become `Error::Corruption`, never a panic or a wrong slice.

use super::format::{corruption, get_varint_usize, read_u32_le};
use super::huge_buffer::HugeBuffer;
use super::sorted_keys::{SortedKeys, SortedKeysBuilder};
use crate::iterator::InternalIterator;
use crate::value::{Backing, Value};
use crate::{Error, Result};
use smallvec::SmallVec;
use std::sync::Arc;

/// A block's bytes: a buffer of its own, its range of a mapped table file,
/// or its range of an in-memory table's blocks.
pub enum BlockBytes {
    Owned(Vec<u8>),
    Mapped {
        file: Arc<gfs::Mapped>,
        start: usize,
        end: usize,
    },
    Shared {
        buf: Arc<HugeBuffer>,
        start: usize,
        end: usize,
    },
}

impl BlockBytes {
    /// `file[start..end]`, or `None` if that is not inside the file.
    pub fn mapped(file: Arc<gfs::Mapped>, start: usize, end: usize) -> Option<BlockBytes> {
        (start <= end && end <= file.len()).then_some(BlockBytes::Mapped { file, start, end })
    }
}

impl std::ops::Deref for BlockBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Owned(v) => v,
            // In range: checked by `mapped`, and the mapping never shrinks.
            BlockBytes::Mapped { file, start, end } => file.get(*start..*end).unwrap_or(&[]),
            // In range: made by `Table::open_in_memory` from the buffer's parts.
            BlockBytes::Shared { buf, start, end } => buf.get(*start..*end).unwrap_or(&[]),
        }
    }
}

/// A decompressed, immutable block shared by iterators and the block cache.
pub struct Block {
    data: BlockBytes,
    /// Where the restart array starts; entries live in `[0, restarts_off)`.
    restarts_off: usize,
    num_restarts: usize,
    /// The restart entries' keys: a seek's binary search reads these few
    /// contiguous lines instead of one entry per probe scattered over the
    /// block (with large values, a cache and a TLB miss each).
    restart_keys: SortedKeys,
    /// Per restart: where its entry's value lies, so that a seek landing
    /// on a restart positions without decoding the entry (a cache miss of
    /// its own in a block of large values).
    restart_entries: Vec<RestartEntry>,
    file_number: u64,
    offset: u64,
}

/// Where a restart's entry's value starts, and the offset of the entry
/// after it (where the value ends), with [`NEXT_IS_RESTART`] set if that is
/// the next restart's entry.
#[derive(Clone, Copy)]
struct RestartEntry {
    value: u32,
    next: u32,
}

impl RestartEntry {
    fn next_off(self) -> usize {
        (self.next & !NEXT_IS_RESTART) as usize
    }

    fn next_is_restart(self) -> bool {
        self.next & NEXT_IS_RESTART != 0
    }
}

/// Marks a restart whose interval holds its own entry alone (as with large
/// values, where every entry is a restart): a seek landing there need not
/// copy the restart's key, since the entry after it shares nothing.
/// Offsets stay below it (blocks are at most [`super::format::MAX_BLOCK_LEN`]).
const NEXT_IS_RESTART: u32 = 1 << 31;

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("file_number", &self.file_number)
            .field("offset", &self.offset)
            .field("len", &self.data.len())
            .field("num_restarts", &self.num_restarts)
            .finish()
    }
}

/// A value read from a block holds a range of its bytes.
impl Backing for Block {
    fn bytes(&self) -> &[u8] {
        &self.data
    }
}

impl Block {
    /// Checks the restart array of `data`, the block at `offset` of table
    /// `file_number` (both used only in error messages).
    pub fn new(data: Vec<u8>, file_number: u64, offset: u64) -> Result<Block> {
        Block::of_bytes(BlockBytes::Owned(data), file_number, offset)
    }

    /// [`Block::new`] for bytes that may be a mapped file's.
    pub fn of_bytes(data: BlockBytes, file_number: u64, offset: u64) -> Result<Block> {
        let err = |what: &str| corruption(file_number, offset, what);
        let len = data.len();
        let n = len
            .checked_sub(4)
            .and_then(|at| read_u32_le(&data, at))
            .ok_or_else(|| err("block too short for its restart count"))? as usize;
        let restarts_off = n
            .checked_mul(4)
            .and_then(|b| len.checked_sub(4)?.checked_sub(b))
            .ok_or_else(|| err("restart count exceeds block size"))?;
        if n == 0 {
            return Err(err("block has no restart points"));
        }
        let mut block = Block {
            data,
            restarts_off,
            num_restarts: n,
            restart_keys: SortedKeys::default(),
            restart_entries: Vec::with_capacity(n),
            file_number,
            offset,
        };
        // Restart offsets must ascend inside the entry area, and restart
        // entries share nothing; checking once here lets seeks trust them.
        let mut keys = SortedKeysBuilder::with_capacity(n);
        let mut prev = None;
        for i in 0..n {
            let r = block.restart(i).ok_or_else(|| err("bad restart array"))?;
            if r > restarts_off || (r == restarts_off && restarts_off != 0) {
                return Err(err("restart point out of range"));
            }
            if prev.is_some_and(|p| r <= p) {
                return Err(err("restart points not ascending"));
            }
            prev = Some(r);
            if let Some(last) = block
                .restart_entries
                .last_mut()
                .filter(|e| e.next as usize == r)
            {
                last.next |= NEXT_IS_RESTART;
            }
            if restarts_off == 0 {
                // An empty block: its one restart points at no entry.
                keys.push(&[]);
                block
                    .restart_entries
                    .push(RestartEntry { value: 0, next: 0 });
                continue;
            }
            let (shared, non_shared, value_len, p) = block.entry_at(r)?;
            if shared != 0 {
                return Err(err("restart entry shares a prefix"));
            }
            // Both below the block's length, itself below 4 GiB (its restart
            // offsets are u32).
            let next = u32::try_from(p + non_shared + value_len)
                .ok()
                .filter(|&n| n < NEXT_IS_RESTART)
                .ok_or_else(|| err("block too large"))?;
            if !keys.push(&block.data[p..p + non_shared]) {
                return Err(err("block too large"));
            }
            // Below `next`, so it fits too.
            let value = (p + non_shared) as u32;
            block.restart_entries.push(RestartEntry { value, next });
        }
        block.restart_keys = keys.finish();
        Ok(block)
    }

    /// Bytes held: the data and what was parsed from it.
    pub fn size(&self) -> usize {
        self.data.len() + self.parsed_bytes()
    }

    /// Heap bytes of what was parsed from the data (the restart index).
    fn parsed_bytes(&self) -> usize {
        self.restart_keys.heap_bytes()
            + std::mem::size_of::<RestartEntry>() * self.restart_entries.len()
    }

    /// What holding the block costs the process, for the block cache: a
    /// block of a mapped file holds no copy of its bytes (they are the page
    /// cache's, which the kernel reclaims and rereads as it likes), so only
    /// what was parsed from them counts; an owned block counts its buffer.
    pub fn cache_charge(&self) -> usize {
        let data = match &self.data {
            BlockBytes::Owned(v) => v.len(),
            BlockBytes::Mapped { .. } => 0,
            BlockBytes::Shared { start, end, .. } => end - start,
        };
        data + self.parsed_bytes() + std::mem::size_of::<Block>()
    }

    /// Whether the bytes are a range of a mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.data, BlockBytes::Mapped { .. })
    }

    /// The number of the table file the block was read from (for errors).
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// The block's offset in that file (for errors).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn restart(&self, i: usize) -> Option<usize> {
        read_u32_le(&self.data, self.restarts_off + i * 4).map(|r| r as usize)
    }

    fn corrupt(&self, what: &str) -> Error {
        corruption(self.file_number, self.offset, what)
    }

    /// Decodes the entry header at `pos`: (shared, non_shared, value_len, key
    /// delta start). Guarantees the delta and value lie inside the entry area.
    fn entry_at(&self, pos: usize) -> Result<(usize, usize, usize, usize)> {
        let area = &self.data[..self.restarts_off];
        let parse = || -> Option<(usize, usize, usize, usize)> {
            let mut p = pos;
            let (shared, n) = get_varint_usize(area.get(p..)?)?;
            p += n;
            let (non_shared, n) = get_varint_usize(area.get(p..)?)?;
            p += n;
            let (value_len, n) = get_varint_usize(area.get(p..)?)?;
            p += n;
            let end = p.checked_add(non_shared)?.checked_add(value_len)?;
            (end <= area.len()).then_some((shared, non_shared, value_len, p))
        };
        parse().ok_or_else(|| self.corrupt("bad block entry"))
    }

    /// A cursor over the block, not yet positioned.
    pub fn iter(self: Arc<Self>) -> BlockIter {
        BlockIter::new(self)
    }
}

/// A cursor over one block. Its key lives in a buffer reused across entries
/// (and across blocks, via [`BlockIter::reset`]), so stepping does not
/// allocate; the buffer is inline up to the usual key length, so a cursor
/// made for one point read does not allocate either.
pub struct BlockIter {
    block: Arc<Block>,
    /// Offset of the next entry to decode.
    next_off: usize,
    key: SmallVec<[u8; 64]>,
    /// The key is restart `at_restart`'s, read from the restart index where
    /// it lies rather than copied into `key` (a point read lands on a
    /// restart and copies nothing).
    key_in_index: bool,
    value_off: usize,
    value_len: usize,
    valid: bool,
    /// The restart whose entry the cursor is at ([`NOT_AT_RESTART`] when
    /// unknown): stepping on to the next restart's entry needs only the
    /// restart index.
    at_restart: usize,
}

const NOT_AT_RESTART: usize = usize::MAX;

impl BlockIter {
    /// A cursor over `block`, not yet positioned.
    pub fn new(block: Arc<Block>) -> BlockIter {
        BlockIter {
            block,
            next_off: 0,
            key: SmallVec::new(),
            key_in_index: false,
            value_off: 0,
            value_len: 0,
            valid: false,
            at_restart: NOT_AT_RESTART,
        }
    }

    /// Points the iterator at another block (unpositioned), keeping buffers.
    pub fn reset(&mut self, block: Arc<Block>) {
        self.block = block;
        self.next_off = 0;
        self.valid = false;
        self.key_in_index = false;
        self.at_restart = NOT_AT_RESTART;
    }

    /// Drops the position (the iterator becomes invalid), keeping the block.
    pub fn clear(&mut self) {
        self.valid = false;
        self.key_in_index = false;
        self.at_restart = NOT_AT_RESTART;
        self.next_off = self.block.restarts_off;
    }

    /// The block being read.
    pub fn block(&self) -> &Arc<Block> {
        &self.block
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.key_in_index = false;
        self.valid = false;
        self.at_restart = NOT_AT_RESTART;
        self.next_off = self.block.restart(i).unwrap_or(self.block.restarts_off);
    }

    /// Positions at restart `i`'s entry from the restart index alone, without
    /// reading the entry (with large values, a cache miss of its own).
    /// False, changing nothing, if there is no such entry.
    fn position_at_restart(&mut self, i: usize) -> bool {
        let b = &self.block;
        let Some(&e) = b.restart_entries.get(i).filter(|_| b.restarts_off != 0) else {
            return false;
        };
        self.key_in_index = true;
        self.value_off = e.value as usize;
        self.value_len = e.next_off() - self.value_off;
        self.next_off = e.next_off();
        self.valid = true;
        self.at_restart = i;
        true
    }

    fn parse_next(&mut self) -> Result<()> {
        if self.key_in_index {
            // Stepping off a restart's entry: its key is the next one's base.
            self.key.clear();
            self.key
                .extend_from_slice(self.block.restart_keys.key(self.at_restart));
            self.key_in_index = false;
        }
        self.at_restart = NOT_AT_RESTART;
        let pos = self.next_off;
        if pos >= self.block.restarts_off {
            self.valid = false;
            return Ok(());
        }
        let parsed = self.block.entry_at(pos);
        let (shared, non_shared, value_len, p) = match parsed {
            Ok(e) => e,
            Err(e) => {
                self.valid = false;
                return Err(e);
            }
        };
        if shared > self.key.len() {
            self.valid = false;
            return Err(self
                .block
                .corrupt("entry shares more than the previous key"));
        }
        self.key.truncate(shared);
        self.key
            .extend_from_slice(&self.block.data[p..p + non_shared]);
        self.value_off = p + non_shared;
        self.value_len = value_len;
        self.next_off = self.value_off + value_len;
        self.valid = true;
        Ok(())
    }
}

impl InternalIterator for BlockIter {
    fn valid(&self) -> bool {
        self.valid
    }

    fn key(&self) -> &[u8] {
        if self.key_in_index {
            self.block.restart_keys.key(self.at_restart)
        } else {
            &self.key
        }
    }

    fn value(&self) -> &[u8] {
        // In range: entry_at checked value_off + value_len <= restarts_off.
        self.block
            .data
            .get(self.value_off..self.value_off + self.value_len)
            .unwrap_or(&[])
    }

    fn shared_value(&self) -> Value {
        Value::of_block(&self.block, self.value_off, self.value_off + self.value_len)
    }

    fn seek_to_first(&mut self) -> Result<()> {
        if self.position_at_restart(0) {
            return Ok(());
        }
        self.seek_to_restart(0);
        self.parse_next()
    }

    /// Positions at the first entry with key >= `target` (invalid if none).
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.valid = false;
        let b = &self.block;
        // The first restart whose key is >= target: the entry sought lies
        // after the restart before it, up to and including this one.
        let first = b.restart_keys.count_below(target);
        let before = first.checked_sub(1);
        // When no entry lies between that restart and the one before, the
        // entry sought is the restart's own: its key and value are known
        // from the restart index, and the entry's bytes need not be read
        // (with large values, every entry is a restart).
        let direct = before.is_none_or(|i| {
            b.restart_entries
                .get(i)
                .is_some_and(|e| e.next_is_restart())
        });
        if direct && self.position_at_restart(first) {
            return Ok(());
        }
        let b = &self.block;
        match before {
            None => self.seek_to_restart(0),
            Some(before) => {
                // That restart's key is below target: start after its entry,
                // with its key (known) as the prefix base, unless the entry
                // after it is the next restart's, which shares nothing.
                let (next, fresh) = match b.restart_entries.get(before) {
                    Some(&e) => (e.next_off(), e.next_is_restart()),
                    None => (b.restarts_off, true),
                };
                self.key.clear();
                self.key_in_index = false;
                if !fresh {
                    self.key.extend_from_slice(b.restart_keys.key(before));
                }
                self.next_off = next;
            }
        }
        loop {
            self.parse_next()?;
            if !self.valid || self.key() >= target {
                return Ok(());
            }
        }
    }

    fn next(&mut self) -> Result<()> {
        // The entry after a restart's that the next restart begins: known
        // from the restart index.
        let i = self.at_restart;
        let next_is_restart = self.valid
            && i != NOT_AT_RESTART
            && self
                .block
                .restart_entries
                .get(i)
                .is_some_and(|e| e.next_is_restart());
        if next_is_restart && self.position_at_restart(i + 1) {
            return Ok(());
        }
        self.parse_next()
    }
}

#[cfg(test)]
mod tests {
    use super::super::block_builder::BlockBuilder;
    use super::*;
    use rand::{Rng, SeedableRng};

    fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
        build_with(entries, interval, usize::MAX)
    }

    fn build_with(entries: &[(Vec<u8>, Vec<u8>)], interval: usize, bytes: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(interval, bytes);
        for (k, v) in entries {
            b.add(k, v);
        }
        Arc::new(Block::new(b.finish().to_vec(), 7, 0).unwrap())
    }

    fn sorted_entries(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut keys: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = rng.gen_range(0..12);
                (0..len).map(|_| rng.gen_range(b'a'..b'e')).collect()
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .map(|k| {
                let v = k.repeat(2);
                (k, v)
            })
            .collect()
    }

    #[test]
    fn scan_and_seek_match_model() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for (interval, bytes) in [
            (1, usize::MAX),
            (2, usize::MAX),
            (16, usize::MAX),
            (16, 0),
            (16, 40),
        ] {
            let entries = sorted_entries(&mut rng, 300);
            let block = build_with(&entries, interval, bytes);
            let restarts = if bytes == 0 {
                entries.len().max(1)
            } else {
                block.num_restarts
            };
            assert_eq!(block.num_restarts, restarts);
            if bytes == 40 {
                assert!(
                    block.num_restarts > entries.len() / 16 + 1,
                    "byte limit restarts sooner"
                );
            }
            let mut it = block.clone().iter();
            it.seek_to_first().unwrap();
            for (k, v) in &entries {
                assert!(it.valid());
                assert_eq!(it.key(), k.as_slice());
                assert_eq!(it.value(), v.as_slice());
                it.next().unwrap();
            }
            assert!(!it.valid());
            for _ in 0..500 {
                let len = rng.gen_range(0..12);
                let t: Vec<u8> = (0..len).map(|_| rng.gen_range(b'a'..b'f')).collect();
                it.seek(&t).unwrap();
                // The value and the entry after it too: a seek that lands on
                // a restart positions from the restart index alone.
                match entries
                    .iter()
                    .position(|(k, _)| k.as_slice() >= t.as_slice())
                {
                    Some(i) => {
                        assert_eq!(it.key(), entries[i].0.as_slice());
                        assert_eq!(it.value(), entries[i].1.as_slice());
                        assert_eq!(&*it.shared_value(), entries[i].1.as_slice());
                        it.next().unwrap();
                        match entries.get(i + 1) {
                            Some((k, v)) => {
                                assert_eq!((it.key(), it.value()), (k.as_slice(), v.as_slice()))
                            }
                            None => assert!(!it.valid()),
                        }
                    }
                    None => assert!(!it.valid()),
                }
            }
        }
    }

    /// Keys sharing a long prefix, some of them prefixes of others, and
    /// zero bytes where the 8-byte heads pad: seeks still land right.
    #[test]
    fn seeks_with_a_common_prefix_and_padded_heads() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for round in 0..200 {
            let common: Vec<u8> = b"row0000"[..rng.gen_range(0..7)].to_vec();
            let mut keys: Vec<Vec<u8>> = (0..rng.gen_range(1..80))
                .map(|_| {
                    let mut k = common.clone();
                    let len = rng.gen_range(0..14);
                    k.extend((0..len).map(|_| [0u8, 1, b'a', 0xff][rng.gen_range(0..4)]));
                    k
                })
                .collect();
            keys.sort();
            keys.dedup();
            let entries: Vec<(Vec<u8>, Vec<u8>)> =
                keys.iter().map(|k| (k.clone(), vec![7; 40])).collect();
            let bytes = [0, 64, usize::MAX][round % 3];
            let block = build_with(&entries, 16, bytes);
            let mut it = block.iter();
            for _ in 0..100 {
                let mut t = common[..rng.gen_range(0..=common.len())].to_vec();
                if rng.gen_bool(0.2) {
                    t.push(rng.gen());
                }
                t.extend(
                    (0..rng.gen_range(0..14)).map(|_| [0u8, 1, b'a', 0xff][rng.gen_range(0..4)]),
                );
                it.seek(&t).unwrap();
                match keys.iter().find(|k| k.as_slice() >= t.as_slice()) {
                    Some(k) => assert_eq!(it.key(), k.as_slice(), "round {round} target {t:?}"),
                    None => assert!(!it.valid()),
                }
            }
        }
    }

    #[test]
    fn empty_block() {
        let block = build(&[], 16);
        let mut it = block.iter();
        it.seek_to_first().unwrap();
        assert!(!it.valid());
        it.seek(b"x").unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(10);
        let good = build(&sorted_entries(&mut rng, 40), 4);
        for round in 0..3000 {
            let data: Vec<u8> = if round % 2 == 0 {
                let len = rng.gen_range(0..64);
                (0..len).map(|_| rng.gen()).collect()
            } else {
                // Mutate a real block: more likely to get past the restart checks.
                let mut d = good.data.to_vec();
                for _ in 0..rng.gen_range(1..4) {
                    let i = rng.gen_range(0..d.len());
                    d[i] = rng.gen();
                }
                d
            };
            let Ok(block) = Block::new(data, 1, 0) else {
                continue;
            };
            let mut it = Arc::new(block).iter();
            let mut steps = 0;
            if it.seek_to_first().is_ok() {
                while it.valid() && steps < 1000 {
                    let _ = (it.key().len(), it.value().len());
                    if it.next().is_err() {
                        break;
                    }
                    steps += 1;
                }
            }
            let _ = it.seek(b"cc");
        }
    }
}
