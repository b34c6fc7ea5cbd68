//! Writes a table: data blocks as keys arrive, then the filter, properties,
//! index and footer (see docs/formats/engine.md).

use super::block::Block;
use super::block_builder::BlockBuilder;
use super::bloom::BloomBuilder;
use super::format::{
    block_trailer, compress_block, short_successor, shortest_separator, BlockChecksum, BlockHandle,
    Footer, Properties, BLOCK_RAW, BLOCK_TRAILER_LEN, MAX_BLOCK_LEN,
};
use super::{TableInfo, TableOptions, TimeRange, DATA_RESTART_BYTES, DATA_RESTART_INTERVAL};
use crate::data::{BloomKind, Compression};
use crate::iterator::InternalIterator;
use crate::{key, Error, Result};
use gfs::WritableFile;

/// One key plus value may not exceed this (a block holding it must stay far
/// below the format's limits; cell values are capped lower by the engine).
pub const MAX_ENTRY_LEN: usize = MAX_BLOCK_LEN / 2;

/// Data blocks that fail to shrink (already-compressed or random values)
/// make the writer stop trying for a while: after each failure the next
/// attempt waits twice as many blocks, up to this many; a success resets it.
/// Compressing a block only to store it raw costs as much as writing it.
const MAX_COMPRESSION_BACKOFF: u32 = 64;

/// Stored bytes gathered before one append. On the chunk layer every append
/// is a replicated write (lease, three replicas, a checksum entry each), so a
/// table goes out a megabyte at a time rather than a block at a time. Nothing
/// reads a table before [`TableBuilder::finish`] has written its footer.
const WRITE_BUFFER: usize = 1 << 20;

/// Appends blocks to the file and tracks the offset.
struct BlockWriter {
    file: Box<dyn WritableFile>,
    /// Offset of the next block (the file's length once `pending` is out).
    offset: u64,
    /// Stored blocks not yet appended (see [`WRITE_BUFFER`]).
    pending: Vec<u8>,
    scratch: Vec<u8>,
    checksum: BlockChecksum,
    /// Blocks to wait after the last failed compression, and how many are left.
    backoff: u32,
    skip: u32,
}

impl BlockWriter {
    /// Writes a data block, compressing it unless recent ones did not shrink.
    fn write_data(&mut self, raw: &[u8], compression: Compression) -> Result<BlockHandle> {
        if compression == Compression::None || self.skip > 0 {
            self.skip = self.skip.saturating_sub(1);
            return self.write(raw, Compression::None);
        }
        let handle = self.write(raw, compression)?;
        // A compressed block is stored at least 1/8 smaller than raw.
        if handle.size == raw.len() as u64 {
            self.backoff = (self.backoff * 2).clamp(1, MAX_COMPRESSION_BACKOFF);
            self.skip = self.backoff;
        } else {
            self.backoff = 0;
        }
        Ok(handle)
    }

    fn write(&mut self, raw: &[u8], compression: Compression) -> Result<BlockHandle> {
        let block_type = compress_block(raw, compression, &mut self.scratch);
        let stored: &[u8] = if block_type == BLOCK_RAW {
            raw
        } else {
            &self.scratch
        };
        let trailer = block_trailer(stored, block_type, self.checksum);
        let handle = BlockHandle {
            offset: self.offset,
            size: stored.len() as u64,
        };
        self.offset += (stored.len() + BLOCK_TRAILER_LEN) as u64;
        if self.pending.is_empty() && stored.len() >= WRITE_BUFFER {
            self.file.append_vectored(&[stored, &trailer])?;
        } else {
            self.pending.extend_from_slice(stored);
            self.pending.extend_from_slice(&trailer);
            if self.pending.len() >= WRITE_BUFFER {
                self.write_pending()?;
            }
        }
        Ok(handle)
    }

    /// Appends what is gathered. On an error the table is abandoned.
    fn write_pending(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.file.append(&self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }
}

/// Builds one SSTable from keys added in strictly ascending order.
pub struct TableBuilder {
    writer: BlockWriter,
    opts: TableOptions,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    /// Handle of the last flushed block, waiting for the next key so that the
    /// index can hold a short separator instead of the full last key.
    pending_handle: Option<BlockHandle>,
    /// (offset, first key) of every data block, to pick the middle key.
    block_starts: Vec<(u64, Vec<u8>)>,
    /// The middle entry's key when the table has only one block.
    single_block_mid: Option<Vec<u8>>,
    last_key: Vec<u8>,
    smallest: Vec<u8>,
    entries: u64,
    max_seq: u64,
    timestamps: Option<TimeRange>,
    /// Off only to write tables as they were before timestamps were recorded.
    record_timestamps: bool,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    /// Data blocks' bytes before compression, of those written so far.
    raw_block_bytes: u64,
    bloom: Option<BloomBuilder>,
    last_row: Vec<u8>,
    last_column: Vec<u8>,
    /// Set after a write error (the file is in an unknown state), or when the
    /// file given was not empty (block offsets must start at 0).
    failed: bool,
}

impl TableBuilder {
    /// A builder writing a new table into `file`, which must be empty.
    pub fn new(file: Box<dyn WritableFile>, opts: TableOptions) -> TableBuilder {
        let offset = file.len();
        // A table starts at offset 0 of its own file; anything else is a
        // caller bug, reported by the first add or finish.
        let failed = offset != 0;
        let bloom =
            (opts.bloom != BloomKind::None).then(|| BloomBuilder::new(opts.bloom_bits_per_key));
        TableBuilder {
            writer: BlockWriter {
                file,
                offset,
                pending: Vec::new(),
                scratch: Vec::new(),
                checksum: BlockChecksum::CURRENT,
                backoff: 0,
                skip: 0,
            },
            opts,
            data_block: BlockBuilder::new(DATA_RESTART_INTERVAL, DATA_RESTART_BYTES),
            index_block: BlockBuilder::new(1, usize::MAX),
            pending_handle: None,
            block_starts: Vec::new(),
            single_block_mid: None,
            last_key: Vec::new(),
            smallest: Vec::new(),
            entries: 0,
            max_seq: 0,
            timestamps: None,
            record_timestamps: true,
            raw_key_bytes: 0,
            raw_value_bytes: 0,
            raw_block_bytes: 0,
            bloom,
            last_row: Vec::new(),
            last_column: Vec::new(),
            failed,
        }
    }

    /// A builder writing an older format version (tests of readers).
    #[cfg(test)]
    pub(crate) fn with_checksum(
        file: Box<dyn WritableFile>,
        opts: TableOptions,
        checksum: BlockChecksum,
    ) -> TableBuilder {
        let mut b = TableBuilder::new(file, opts);
        b.writer.checksum = checksum;
        b
    }

    /// A builder writing properties without the cell timestamps, as
    /// builders did before they recorded them (tests of readers).
    #[cfg(test)]
    pub(crate) fn without_timestamps(
        file: Box<dyn WritableFile>,
        opts: TableOptions,
    ) -> TableBuilder {
        let mut b = TableBuilder::new(file, opts);
        b.record_timestamps = false;
        b
    }

    /// Adds an entry; `key` must be a well-formed internal key greater than
    /// every key added before.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        if self.failed {
            return Err(Error::invalid(
                "table builder failed earlier (write error or non-empty file)",
            ));
        }
        if self.entries > 0 && key <= self.last_key.as_slice() {
            return Err(Error::invalid("sstable keys must be strictly ascending"));
        }
        let parts =
            key::split(key).ok_or_else(|| Error::invalid("not a well-formed internal key"))?;
        if key.len().saturating_add(value.len()) > MAX_ENTRY_LEN {
            return Err(Error::invalid(format!(
                "sstable entry of {} bytes is too large",
                key.len().saturating_add(value.len())
            )));
        }
        if let Some(handle) = self.pending_handle.take() {
            let sep = shortest_separator(&self.last_key, key);
            self.add_index_entry(&sep, handle);
        }
        if let Some(bloom) = &mut self.bloom {
            if self.entries == 0 || parts.row_enc != self.last_row.as_slice() {
                bloom.add(parts.row_enc);
                self.last_row.clear();
                self.last_row.extend_from_slice(parts.row_enc);
            }
            if self.opts.bloom == BloomKind::RowColumn
                && (self.entries == 0 || parts.column_enc != self.last_column.as_slice())
            {
                bloom.add(parts.column_enc);
                self.last_column.clear();
                self.last_column.extend_from_slice(parts.column_enc);
            }
        }
        if self.entries == 0 {
            self.smallest = key.to_vec();
        }
        if self.data_block.is_empty() {
            self.block_starts.push((self.writer.offset, key.to_vec()));
        }
        self.max_seq = self.max_seq.max(parts.seq);
        if parts.kind == key::Kind::Put && self.record_timestamps {
            self.timestamps = Some(TimeRange::widen(self.timestamps, parts.timestamp));
        }
        self.raw_key_bytes += key.len() as u64;
        self.raw_value_bytes += value.len() as u64;
        self.data_block.add(key, value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.entries += 1;
        if self.data_block.size_estimate() >= self.opts.block_size {
            self.flush()?;
        }
        Ok(())
    }

    /// Stored bytes so far plus the block being built, at the ratio the
    /// written blocks were stored at (nothing before the first is written):
    /// compactions cut output files when this reaches their target size.
    /// Stored, not raw, because merges judge how many files a rewrite
    /// leaves by stored sizes: a pending block counted raw cut files at a
    /// fraction of a target smaller than a block, and merging such files
    /// wrote as many again, forever.
    pub fn estimated_size(&self) -> u64 {
        let stored = self.writer.offset;
        let pending = self.data_block.size_estimate() as u64;
        match self.raw_block_bytes {
            0 => stored,
            raw => stored.saturating_add(
                u64::try_from(u128::from(pending) * u128::from(stored) / u128::from(raw))
                    .unwrap_or(u64::MAX),
            ),
        }
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    fn add_index_entry(&mut self, separator: &[u8], handle: BlockHandle) {
        let mut v = Vec::with_capacity(20);
        handle.encode_varint(&mut v);
        self.index_block.add(separator, &v);
    }

    fn flush(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        if self.block_starts.len() == 1 && self.data_block.entries() as u64 == self.entries {
            // Possibly the only block: remember its middle key while it is raw.
            self.single_block_mid = middle_entry_key(self.data_block.finish());
        }
        let block = self.data_block.finish();
        self.raw_block_bytes += block.len() as u64;
        let res = self.writer.write_data(block, self.opts.compression);
        self.data_block.reset();
        match res {
            Ok(handle) => {
                self.pending_handle = Some(handle);
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                Err(e)
            }
        }
    }

    /// Writes the rest of the table and syncs the file.
    pub fn finish(mut self) -> Result<TableInfo> {
        if self.failed {
            return Err(Error::invalid(
                "table builder failed earlier (write error or non-empty file)",
            ));
        }
        self.flush()?;
        if let Some(handle) = self.pending_handle.take() {
            let sep = short_successor(&self.last_key);
            self.add_index_entry(&sep, handle);
        }
        let data_end = self.writer.offset;

        let filter = match &self.bloom {
            // Filter bits are random: never worth compressing.
            Some(b) => self.writer.write(&b.finish(), Compression::None)?,
            None => BlockHandle::default(),
        };
        let props = Properties {
            entries: self.entries,
            max_seq: self.max_seq,
            timestamps: self.timestamps,
            data_blocks: self.block_starts.len() as u64,
            data_end,
            raw_key_bytes: self.raw_key_bytes,
            raw_value_bytes: self.raw_value_bytes,
            bloom: self.opts.bloom,
            smallest: self.smallest.clone(),
            largest: if self.entries > 0 {
                self.last_key.clone()
            } else {
                Vec::new()
            },
            mid_key: self.mid_key(data_end).unwrap_or_default(),
        };
        let properties = self.writer.write(&props.encode(), Compression::None)?;
        let index = self
            .writer
            .write(self.index_block.finish(), self.opts.compression)?;
        let footer = Footer {
            filter,
            properties,
            index,
            checksum: self.writer.checksum,
        };
        self.writer.pending.extend_from_slice(&footer.encode());
        self.writer.write_pending()?;
        self.writer.file.sync()?;
        Ok(TableInfo {
            file_size: self.writer.offset + super::format::FOOTER_LEN as u64,
            entries: self.entries,
            smallest: props.smallest,
            largest: props.largest,
            max_seq: self.max_seq,
            timestamps: self.timestamps,
        })
    }

    /// A key strictly greater than the smallest, near the middle of the data:
    /// the first key of the block holding the middle byte (or of the second
    /// block), or the middle entry of a single-block table.
    fn mid_key(&mut self, data_end: u64) -> Option<Vec<u8>> {
        if self.entries < 2 {
            return None;
        }
        if self.block_starts.len() == 1 {
            return self.single_block_mid.take();
        }
        let half = data_end / 2;
        let i = self
            .block_starts
            .partition_point(|(off, _)| *off <= half)
            .clamp(2, self.block_starts.len())
            - 1;
        self.block_starts.get(i).map(|(_, k)| k.clone())
    }
}

/// The key of the entry at position `n / 2` of a raw block holding n >= 2 entries.
fn middle_entry_key(raw: &[u8]) -> Option<Vec<u8>> {
    let block = std::sync::Arc::new(Block::new(raw.to_vec(), 0, 0).ok()?);
    let mut it = block.iter();
    let mut keys = 0usize;
    it.seek_to_first().ok()?;
    while it.valid() {
        keys += 1;
        it.next().ok()?;
    }
    if keys < 2 {
        return None;
    }
    it.seek_to_first().ok()?;
    for _ in 0..keys / 2 {
        it.next().ok()?;
    }
    it.valid().then(|| it.key().to_vec())
}
