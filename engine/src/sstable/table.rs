//! An open SSTable: footer, properties, filter and index held in memory, data
//! blocks read on demand through the block cache (or, for in-memory locality
//! groups, all held decompressed).

use super::block::{Block, BlockBytes, BlockIter};
use super::block_cache::BlockCache;
use super::bloom::BloomFilter;
use super::format::{
    block_checksum_ok, block_contents, corruption, unwrap_block, unwrap_read_block, BlockChecksum,
    BlockHandle, Footer, Properties, BLOCK_TRAILER_LEN, FOOTER_LEN,
};
use super::huge_buffer::HugeBuffer;
use super::last_block;
use super::sorted_keys::{SortedKeys, SortedKeysBuilder};
use crate::data::BloomKind;
use crate::iterator::InternalIterator;
use crate::own_lines;
use crate::value::Value;
use crate::{key, Result};
use gfs::ReadableFile;
use smallvec::SmallVec;
use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, open SSTable. Shared by iterators through `Arc`; read by
/// every request that reaches it, on every core, so on cache lines of its
/// own (see [`own_lines`]).
#[repr(align(64))]
pub struct Table {
    file: Arc<dyn ReadableFile>,
    file_number: u64,
    /// Names the table to [`last_block`], unique in the process.
    id: u64,
    size: u64,
    cache: Option<Arc<BlockCache>>,
    /// The index: every key of block `i` is <= separator `i`, and every key
    /// of block `i + 1` is above it.
    separators: SortedKeys,
    /// Where block `i` lies in the file.
    handles: Vec<BlockHandle>,
    filter: Option<BloomFilter>,
    props: Properties,
    checksum: BlockChecksum,
    /// All data blocks, decompressed, for tables opened in memory.
    mem_blocks: Option<Vec<Arc<Block>>>,
    /// The whole file mapped, where the store can map it: a block-cache
    /// miss then checks and parses the block in place instead of copying
    /// it out of the page cache.
    map: Option<Arc<gfs::Mapped>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("file_number", &self.file_number)
            .field("size", &self.size)
            .field("entries", &self.props.entries)
            .field("blocks", &self.handles.len())
            .field("in_memory", &self.mem_blocks.is_some())
            .finish()
    }
}

impl Table {
    /// Opens a table, reading and verifying its footer, properties, filter and
    /// index. `file_number` names it in the block cache and in errors.
    pub fn open(
        file: Arc<dyn ReadableFile>,
        file_number: u64,
        cache: Option<Arc<BlockCache>>,
    ) -> Result<Arc<Table>> {
        let size = file.len()?;
        let footer_off = size
            .checked_sub(FOOTER_LEN as u64)
            .ok_or_else(|| corruption(file_number, 0, "file shorter than a footer"))?;
        let footer_buf = file.read_at(footer_off, FOOTER_LEN)?;
        let footer = Footer::decode(&footer_buf, file_number, footer_off)?;
        let handles = meta_handles(&footer, footer_off, file_number)?;
        let ranges: Vec<(u64, usize)> = handles
            .iter()
            .map(|h| (h.offset, h.size as usize + BLOCK_TRAILER_LEN))
            .collect();
        let bufs = file.read_many(&ranges)?;
        let mut table = Table::from_meta(file, file_number, size, cache, &footer, bufs)?;
        table.check_data_handles()?;
        // SSTables are never written again: safe to map (see gfs::Mapped).
        table.map = table.file.map().filter(|m| m.len() as u64 == size);
        Ok(Arc::new(table))
    }

    /// Opens a table by reading the whole file once and keeping every data
    /// block decompressed in memory (in-memory locality groups). Every block's
    /// checksum is verified here, so later reads cannot fail.
    pub fn open_in_memory(file: Arc<dyn ReadableFile>, file_number: u64) -> Result<Arc<Table>> {
        let size = file.len()?;
        let all_len = usize::try_from(size)
            .map_err(|_| corruption(file_number, 0, "file too large for memory"))?;
        let all = file.read_at(0, all_len)?;
        let footer_off = size
            .checked_sub(FOOTER_LEN as u64)
            .ok_or_else(|| corruption(file_number, 0, "file shorter than a footer"))?;
        // Handles were checked against the file size, but slice defensively.
        let slice = |h: &BlockHandle| -> Result<Vec<u8>> {
            let start = usize::try_from(h.offset).ok();
            let end = h.end().and_then(|e| usize::try_from(e).ok());
            start
                .zip(end)
                .and_then(|(s, e)| all.get(s..e))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| corruption(file_number, h.offset, "block beyond end of file"))
        };
        let footer_buf = usize::try_from(footer_off)
            .ok()
            .and_then(|o| all.get(o..))
            .ok_or_else(|| corruption(file_number, footer_off, "short read of footer"))?;
        let footer = Footer::decode(footer_buf, file_number, footer_off)?;
        let handles = meta_handles(&footer, footer_off, file_number)?;
        let bufs = handles.iter().map(slice).collect::<Result<Vec<_>>>()?;
        let mut table = Table::from_meta(file, file_number, size, None, &footer, bufs)?;
        table.check_data_handles()?;
        let datas = table
            .handles
            .iter()
            .map(|h| unwrap_block(slice(h)?, table.checksum, file_number, h.offset))
            .collect::<Result<Vec<_>>>()?;
        // All blocks in one buffer of huge pages: reads probe them at random.
        let (buf, starts) = HugeBuffer::concat(&datas);
        drop(datas);
        let buf = Arc::new(buf);
        let ends = starts.iter().skip(1).copied().chain([buf.len()]);
        let mut blocks = Vec::with_capacity(table.handles.len());
        for ((h, &start), end) in table.handles.iter().zip(&starts).zip(ends) {
            let data = BlockBytes::Shared {
                buf: Arc::clone(&buf),
                start,
                end,
            };
            blocks.push(Arc::new(Block::of_bytes(data, file_number, h.offset)?));
        }
        table.mem_blocks = Some(blocks);
        Ok(Arc::new(table))
    }

    /// Decodes the index, properties and filter from their raw blocks (in
    /// the order [`meta_handles`] returns them).
    fn from_meta(
        file: Arc<dyn ReadableFile>,
        file_number: u64,
        size: u64,
        cache: Option<Arc<BlockCache>>,
        footer: &Footer,
        bufs: Vec<Vec<u8>>,
    ) -> Result<Table> {
        let mut bufs = bufs.into_iter();
        let mut next = |h: &BlockHandle| -> Result<Vec<u8>> {
            let buf = bufs
                .next()
                .ok_or_else(|| corruption(file_number, h.offset, "missing metadata block"))?;
            unwrap_block(buf, footer.checksum, file_number, h.offset)
        };
        let index_raw = next(&footer.index)?;
        let props_raw = next(&footer.properties)?;
        let mut props = Properties::decode(&props_raw).ok_or_else(|| {
            corruption(
                file_number,
                footer.properties.offset,
                "bad properties block",
            )
        })?;
        // Compared by every read that reaches the file, on every core.
        props.smallest = own_lines::vec(std::mem::take(&mut props.smallest));
        props.largest = own_lines::vec(std::mem::take(&mut props.largest));
        let filter =
            if footer.filter.size > 0 {
                let raw = next(&footer.filter)?;
                Some(BloomFilter::decode(raw).ok_or_else(|| {
                    corruption(file_number, footer.filter.offset, "bad filter block")
                })?)
            } else {
                None
            };
        let index_block = Arc::new(Block::new(index_raw, file_number, footer.index.offset)?);
        let mut separators = SortedKeysBuilder::default();
        let mut handles = Vec::new();
        let mut it = index_block.iter();
        it.seek_to_first()?;
        while it.valid() {
            let handle = BlockHandle::decode_varint(it.value()).ok_or_else(|| {
                corruption(
                    file_number,
                    footer.index.offset,
                    "bad block handle in index",
                )
            })?;
            if !separators.push(it.key()) {
                return Err(corruption(
                    file_number,
                    footer.index.offset,
                    "index too large",
                ));
            }
            handles.push(handle);
            it.next()?;
        }
        Ok(Table {
            file,
            file_number,
            id: last_block::new_table_id(),
            size,
            cache,
            separators: separators.finish(),
            handles,
            filter,
            props,
            checksum: footer.checksum,
            mem_blocks: None,
            map: None,
        })
    }

    /// Checks the index against the properties: data blocks must tile
    /// `[0, data_end)` in order, so no read can leave the data area.
    fn check_data_handles(&self) -> Result<()> {
        let err = |what: &str| corruption(self.file_number, 0, what);
        if self.handles.len() as u64 != self.props.data_blocks {
            return Err(err("index and properties disagree on the block count"));
        }
        let mut expect = 0u64;
        for (i, h) in self.handles.iter().enumerate() {
            if i > 0 && self.separators.key(i) <= self.separators.key(i - 1) {
                return Err(err("index separators not ascending"));
            }
            if h.offset != expect {
                return Err(err("data blocks do not tile the file"));
            }
            expect = h.end().ok_or_else(|| err("block handle overflows"))?;
        }
        if expect != self.props.data_end || self.props.data_end > self.size {
            return Err(err("data area does not match the properties"));
        }
        if self.props.entries > 0
            && (self.props.smallest > self.props.largest || self.handles.is_empty())
        {
            return Err(err("bad key range in properties"));
        }
        Ok(())
    }

    /// The number naming the table in the block cache and in errors.
    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// Size of the file in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of data blocks (where [`Table::approximate_offset_of`] ends).
    pub fn data_size(&self) -> u64 {
        self.props.data_end
    }

    /// Number of entries.
    pub fn entries(&self) -> u64 {
        self.props.entries
    }

    /// The smallest key (empty for an empty table).
    pub fn smallest(&self) -> &[u8] {
        &self.props.smallest
    }

    /// The largest key (empty for an empty table).
    pub fn largest(&self) -> &[u8] {
        &self.props.largest
    }

    /// Whether the table may hold a key in `[lo, hi)`: its key range meets
    /// that span. Costs two comparisons against in-memory keys, so point
    /// reads ask it before the Bloom filter's probes into a cold bit array.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.props.entries > 0
            && key::less(&self.props.smallest, hi)
            && !key::less(&self.props.largest, lo)
    }

    /// The largest sequence number of any entry.
    pub fn max_seq(&self) -> u64 {
        self.props.max_seq
    }

    /// The timestamps of its cells; `None` when it holds none, or was
    /// written before tables recorded them.
    pub fn timestamps(&self) -> Option<super::TimeRange> {
        self.props.timestamps
    }

    /// Number of data blocks.
    pub fn num_blocks(&self) -> usize {
        self.handles.len()
    }

    /// Whether every block is held decompressed (an in-memory locality group).
    pub fn is_in_memory(&self) -> bool {
        self.mem_blocks.is_some()
    }

    /// Whether block-cache misses read the file through a mapping.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// What the table's filter answers.
    pub fn bloom_kind(&self) -> BloomKind {
        if self.filter.is_some() {
            self.props.bloom
        } else {
            BloomKind::None
        }
    }

    /// Memory held besides cached blocks: index, filter, in-memory blocks.
    pub fn memory_usage(&self) -> usize {
        let index = self.separators.heap_bytes() + 16 * self.handles.len();
        let blocks: usize = self
            .mem_blocks
            .as_ref()
            .map_or(0, |b| b.iter().map(|b| b.size()).sum());
        index + self.filter.as_ref().map_or(0, |f| f.size()) + blocks
    }

    /// Whether `row` (raw user bytes) might have entries here; never a false "no".
    pub fn may_contain_row(&self, row: &[u8]) -> bool {
        self.may_contain_row_enc(&key::row_prefix(row))
    }

    /// As [`Table::may_contain_row`], given the encoded row (`key::split(k).row_enc`).
    pub fn may_contain_row_enc(&self, row_enc: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain(row_enc))
    }

    /// Whether the column might have entries here; with a row-only filter this
    /// is the row answer.
    pub fn may_contain_column(&self, row: &[u8], family: &[u8], qualifier: &[u8]) -> bool {
        let Some(f) = &self.filter else {
            return true;
        };
        if self.props.bloom != BloomKind::RowColumn {
            return self.may_contain_row(row);
        }
        let col = key::column_prefix(row, family, qualifier);
        // The column prefix starts with the row's encoding (each 0 byte
        // escaped to two, plus a two-byte terminator); asking about both
        // lowers the false-positive rate at no risk of a false "no".
        let row_len = row.len() + row.iter().filter(|&&b| b == 0).count() + 2;
        f.may_contain(&col) && col.get(..row_len).is_none_or(|r| f.may_contain(r))
    }

    /// Whether any of the columns `cols` (each `key::column_prefix` of the
    /// row whose encoding is `row_enc`) might have entries here; never a false
    /// "no". The caller encodes the keys once for every table it asks.
    pub fn may_contain_any_column(&self, row_enc: &[u8], cols: &[&[u8]]) -> bool {
        let Some(f) = &self.filter else {
            return true;
        };
        // The filter saves a block's load; the thread's last block costs
        // none, so a row in it is looked for there, unfiltered.
        if self.block_at_hand(row_enc).is_some() {
            return true;
        }
        if !f.may_contain(row_enc) {
            return false;
        }
        self.props.bloom != BloomKind::RowColumn || cols.iter().any(|c| f.may_contain(c))
    }

    /// The block this thread read last in this table, if `target` falls in
    /// it: the index search's answer, found with two comparisons.
    fn block_at_hand(&self, target: &[u8]) -> Option<usize> {
        let seps = &self.separators;
        last_block::index(self.id).filter(|&j| {
            j < self.handles.len()
                && !key::less(seps.key(j), target)
                && j.checked_sub(1)
                    .is_none_or(|p| key::less(seps.key(p), target))
        })
    }

    /// Approximate file offset where `key` would be: the start of the block
    /// that would hold it, or the end of the data for keys past the last.
    pub fn approximate_offset_of(&self, key: &[u8]) -> u64 {
        // The last block's separator may lie well past its last key.
        if key > self.largest() {
            return self.props.data_end;
        }
        let i = self.separators.count_below(key);
        self.handles
            .get(i)
            .map_or(self.props.data_end, |h| h.offset)
    }

    /// A key near the middle of the data, strictly greater than the smallest
    /// (`None` with fewer than two entries): where to split.
    pub fn mid_key(&self) -> Option<Vec<u8>> {
        (!self.props.mid_key.is_empty()).then(|| self.props.mid_key.clone())
    }

    /// A two-level iterator over the table.
    pub fn iter(self: &Arc<Self>) -> TableIterator {
        TableIterator {
            table: Arc::clone(self),
            block_idx: usize::MAX,
            data: None,
            upper: None,
            fill_cache: true,
        }
    }

    /// An iterator for compactions: blocks not in the cache are read without
    /// being added to it, as LevelDB does, so that rewriting files that are
    /// about to be deleted does not evict the blocks reads are using.
    pub fn iter_uncached(self: &Arc<Self>) -> TableIterator {
        TableIterator {
            fill_cache: false,
            ..self.iter()
        }
    }

    /// An iterator for keys below `upper`: it ends (becomes invalid) instead
    /// of loading a block that can hold only keys at or above it, so a point
    /// read that ends a block does not read the next one. Keys at or above
    /// `upper` in a block already loaded are still returned.
    /// It borrows the table: a point read makes one per table, and a shared
    /// count of references bumped by every read bounces between cores.
    pub fn iter_below(&self, upper: &[u8]) -> TableIterator<&Table> {
        TableIterator {
            table: self,
            block_idx: usize::MAX,
            data: None,
            upper: Some(SmallVec::from_slice(upper)),
            fill_cache: true,
        }
    }

    /// The contents of the stored block at `offset` (`len` bytes with its
    /// trailer) of the mapped file, checked: a range of the mapping if the
    /// block is stored raw.
    fn mapped_block(&self, map: &Arc<gfs::Mapped>, offset: u64, len: usize) -> Result<BlockBytes> {
        let outside = || corruption(self.file_number, offset, "block outside the file");
        let start = usize::try_from(offset).map_err(|_| outside())?;
        let raw = start
            .checked_add(len)
            .and_then(|end| map.get(start..end))
            .ok_or_else(outside)?;
        Ok(
            match block_contents(raw, self.checksum, self.file_number, offset)? {
                Cow::Borrowed(data) => BlockBytes::mapped(map.clone(), start, start + data.len())
                    .ok_or_else(outside)?,
                Cow::Owned(data) => BlockBytes::Owned(data),
            },
        )
    }

    /// Block `i`, from this thread's last block of the table if it is that
    /// one (counted as a cache hit: it is one, found sooner), else as
    /// [`Table::block`] finds it, remembered for the thread's next read.
    fn block_of_thread(&self, i: usize, fill_cache: bool) -> Result<Arc<Block>> {
        if let Some(b) = last_block::get(self.id, i) {
            if let Some(cache) = &self.cache {
                cache.count_hit();
            }
            return Ok(b);
        }
        let b = self.block(i, fill_cache)?;
        last_block::remember(self.id, i, &b);
        Ok(b)
    }

    /// Data block `i` (in index order), from memory, the cache or the file
    /// (then added to the cache if `fill_cache`).
    fn block(&self, i: usize, fill_cache: bool) -> Result<Arc<Block>> {
        let Some(&h) = self.handles.get(i) else {
            return Err(corruption(self.file_number, 0, "block index out of range"));
        };
        if let Some(blocks) = &self.mem_blocks {
            return blocks
                .get(i)
                .cloned()
                .ok_or_else(|| corruption(self.file_number, h.offset, "in-memory block missing"));
        }
        if let Some(cache) = &self.cache {
            if let Some(b) = cache.get(self.file_number, h.offset) {
                return Ok(b);
            }
        }
        // check_data_handles bounded the size by the file size.
        let len = h.size as usize + BLOCK_TRAILER_LEN;
        let data = match &self.map {
            Some(map) => self.mapped_block(map, h.offset, len)?,
            None => {
                // The block's own checksum covers it end to end: a store
                // that checks its copies too (the chunk layer) need not.
                let mut ok = false;
                let raw = self.file.read_at_checked(h.offset, len, &mut |raw| {
                    ok = block_checksum_ok(raw, self.checksum);
                    ok
                })?;
                BlockBytes::Owned(unwrap_read_block(
                    raw,
                    self.checksum,
                    self.file_number,
                    h.offset,
                    ok,
                )?)
            }
        };
        let block = Arc::new(Block::of_bytes(data, self.file_number, h.offset)?);
        if let Some(cache) = self.cache.as_ref().filter(|_| fill_cache) {
            cache.insert(self.file_number, h.offset, block.clone());
        }
        Ok(block)
    }
}

/// The handles of the index, properties and (if any) filter blocks, checked
/// to lie before the footer.
fn meta_handles(footer: &Footer, footer_off: u64, file_number: u64) -> Result<Vec<BlockHandle>> {
    let mut hs = vec![footer.index, footer.properties];
    if footer.filter.size > 0 {
        hs.push(footer.filter);
    }
    for h in &hs {
        if h.end().is_none_or(|end| end > footer_off)
            || h.size > super::format::MAX_BLOCK_LEN as u64
        {
            return Err(corruption(
                file_number,
                h.offset,
                "metadata block handle out of range",
            ));
        }
    }
    Ok(hs)
}

/// Iterates a table: the in-memory index picks the block, a [`BlockIter`]
/// walks it. Owns an `Arc<Table>`, so it is `'static` and `Send`.
pub struct TableIterator<T: Deref<Target = Table> = Arc<Table>> {
    table: T,
    /// Index of the block `data` walks (`usize::MAX` when none).
    block_idx: usize,
    data: Option<BlockIter>,
    /// See [`Table::iter_below`].
    upper: Option<SmallVec<[u8; 64]>>,
    /// See [`Table::iter_uncached`].
    fill_cache: bool,
}

impl<T: Deref<Target = Table>> TableIterator<T> {
    fn invalidate(&mut self) {
        // Keep the block iterator (and its key buffer) but drop its position.
        if let Some(d) = &mut self.data {
            d.clear();
        }
    }

    /// Makes `data` walk block `i`, reusing the current block if it is the same.
    fn load_block(&mut self, i: usize) -> Result<&mut BlockIter> {
        let same = self.block_idx == i && self.data.is_some();
        if !same {
            let block = match self.table.block_of_thread(i, self.fill_cache) {
                Ok(b) => b,
                Err(e) => {
                    self.block_idx = usize::MAX;
                    self.invalidate();
                    return Err(e);
                }
            };
            match &mut self.data {
                Some(d) => d.reset(block),
                None => self.data = Some(BlockIter::new(block)),
            }
            self.block_idx = i;
        }
        match &mut self.data {
            Some(d) => Ok(d),
            None => Err(corruption(self.table.file_number, 0, "no block loaded")),
        }
    }

    /// Moves forward over blocks until positioned at an entry or past the end.
    fn skip_exhausted_blocks(&mut self) -> Result<()> {
        while self.data.as_ref().is_some_and(|d| !d.valid()) {
            let next = self.block_idx.wrapping_add(1);
            if next >= self.table.handles.len() {
                return Ok(());
            }
            // Every key of the next block is above this block's separator.
            let sep = (self.block_idx < self.table.handles.len())
                .then(|| self.table.separators.key(self.block_idx));
            if let (Some(sep), Some(upper)) = (sep, self.upper.as_deref()) {
                if sep >= upper {
                    return Ok(());
                }
            }
            self.load_block(next)?.seek_to_first()?;
        }
        Ok(())
    }

    fn with_reset_on_error(&mut self, r: Result<()>) -> Result<()> {
        if r.is_err() {
            self.invalidate();
        }
        r
    }
}

impl<T: Deref<Target = Table> + Send> InternalIterator for TableIterator<T> {
    fn seek_to_first(&mut self) -> Result<()> {
        if self.table.handles.is_empty() {
            self.invalidate();
            return Ok(());
        }
        let r = self
            .load_block(0)
            .and_then(|d| d.seek_to_first())
            .and_then(|_| self.skip_exhausted_blocks());
        self.with_reset_on_error(r)
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self
            .table
            .block_at_hand(target)
            .unwrap_or_else(|| self.table.separators.count_below(target));
        if i >= self.table.handles.len() {
            self.invalidate();
            return Ok(());
        }
        let r = self
            .load_block(i)
            .and_then(|d| d.seek(target))
            .and_then(|_| self.skip_exhausted_blocks());
        self.with_reset_on_error(r)
    }

    fn next(&mut self) -> Result<()> {
        let stepped = match &mut self.data {
            Some(d) if d.valid() => d.next(),
            // Not positioned: nothing to step (and no block to skip to).
            _ => return Ok(()),
        };
        let r = stepped.and_then(|_| self.skip_exhausted_blocks());
        self.with_reset_on_error(r)
    }

    fn valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }

    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }

    fn shared_value(&self) -> Value {
        self.data
            .as_ref()
            .map_or(Value::new(), |d| d.shared_value())
    }
}
