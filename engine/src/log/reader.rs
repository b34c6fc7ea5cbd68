//! Reads records back from a log file, verifying every fragment.
//!
//! What can be wrong with a log file, and what the reader does:
//! - the file ends inside a record (a write torn by a crash): the partial
//!   record is dropped and `torn_tail` is set — expected after a crash, so it
//!   is counted but not warned about;
//! - a fragment fails its checksum or has an impossible length (damage in the
//!   middle): the rest of that block is dropped, the region is counted and
//!   logged, and reading resumes at the next block boundary, where a header
//!   is guaranteed to start;
//! - fragments that continue a record whose start was lost are dropped with
//!   the region they belong to.
//!
//! A payload is returned only if every one of its fragments verified.

use super::format::{checksum, kind, BLOCK_SIZE, FIRST, FULL, HEADER_SIZE, LAST, MIDDLE};
use crate::Result;
use gfs::ReadableFile;
use std::sync::Arc;

/// What a reader returned and what it had to skip.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Records returned.
    pub records: u64,
    /// Bytes (headers included) that belonged to no returned record: damaged
    /// regions and the torn tail.
    pub bytes_dropped: u64,
    /// The file ended inside a record.
    pub torn_tail: bool,
    /// Separate damaged regions in the middle of the file.
    pub corrupt_regions: u32,
}

enum Physical {
    /// A verified fragment at `block[start..end]`.
    Fragment { ty: u8, start: usize, end: usize },
    /// An unusable region of `bytes`; reading continues after it.
    Bad { bytes: u64, reason: &'static str },
    /// End of file; `torn` bytes at the end belonged to an incomplete fragment.
    Eof { torn: u64 },
}

/// Sequential reader of one log file.
pub struct LogReader {
    file: Arc<dyn ReadableFile>,
    name: String,
    file_len: u64,
    block: Vec<u8>,
    /// File offset of `block[0]`.
    block_start: u64,
    /// Position of the next header within `block`.
    pos: usize,
    /// File offset of the next block to load.
    next_block: u64,
    report: ReadReport,
    /// Inside a damaged region: further drops extend it instead of starting a new one.
    in_bad_region: bool,
}

impl LogReader {
    /// Reads `file` (named `name` in messages) from its start up to its
    /// length at this moment.
    pub fn new(file: Arc<dyn ReadableFile>, name: impl Into<String>) -> Result<Self> {
        let file_len = file.len()?;
        Ok(LogReader {
            file,
            name: name.into(),
            file_len,
            block: Vec::new(),
            block_start: 0,
            pos: 0,
            next_block: 0,
            report: ReadReport::default(),
            in_bad_region: false,
        })
    }

    /// The next record's payload, or `None` at the end of the file. Errors
    /// are I/O failures of the file layer; damage is skipped and reported.
    pub fn read_record(&mut self) -> Result<Option<Vec<u8>>> {
        let mut scratch: Vec<u8> = Vec::new();
        // Physical bytes (headers included) of the record being assembled.
        let mut partial: Option<u64> = None;
        loop {
            match self.read_physical()? {
                Physical::Fragment { ty, start, end } => {
                    let phys = (HEADER_SIZE + end - start) as u64;
                    match (ty, partial) {
                        (FULL, _) | (FIRST, _) => {
                            if let Some(p) = partial {
                                self.drop_bytes(p, "record without its last fragment");
                            }
                            self.in_bad_region = false;
                            if ty == FULL {
                                self.report.records += 1;
                                return Ok(Some(self.block[start..end].to_vec()));
                            }
                            scratch.clear();
                            scratch.extend_from_slice(&self.block[start..end]);
                            partial = Some(phys);
                        }
                        (MIDDLE, Some(p)) => {
                            scratch.extend_from_slice(&self.block[start..end]);
                            partial = Some(p + phys);
                        }
                        (LAST, Some(_)) => {
                            scratch.extend_from_slice(&self.block[start..end]);
                            self.report.records += 1;
                            return Ok(Some(scratch));
                        }
                        (MIDDLE, None) | (LAST, None) => {
                            self.drop_bytes(phys, "fragment without its first fragment");
                        }
                        _ => {
                            self.drop_bytes(phys + partial.unwrap_or(0), "unknown fragment type");
                            partial = None;
                            scratch.clear();
                        }
                    }
                }
                Physical::Bad { bytes, reason } => {
                    self.drop_bytes(bytes + partial.unwrap_or(0), reason);
                    partial = None;
                    scratch.clear();
                }
                Physical::Eof { torn } => {
                    let lost = torn + partial.unwrap_or(0);
                    if lost > 0 || partial.is_some() {
                        if !self.report.torn_tail {
                            log::debug!("{}: torn tail of {lost} bytes dropped", self.name);
                        }
                        self.report.torn_tail = true;
                        self.report.bytes_dropped += lost;
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// What has been read and skipped so far.
    pub fn report(&self) -> ReadReport {
        self.report
    }

    /// The file's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn drop_bytes(&mut self, bytes: u64, reason: &str) {
        if !self.in_bad_region {
            self.in_bad_region = true;
            self.report.corrupt_regions += 1;
        }
        self.report.bytes_dropped += bytes;
        log::warn!(
            "{}: dropped {bytes} bytes before offset {}: {reason}",
            self.name,
            self.block_start + self.pos as u64
        );
    }

    /// Loads the next block; false at the end of the file.
    fn load_block(&mut self) -> Result<bool> {
        if self.next_block >= self.file_len {
            return Ok(false);
        }
        let n = (self.file_len - self.next_block).min(BLOCK_SIZE as u64) as usize;
        self.block = self.file.read_at(self.next_block, n)?;
        self.block_start = self.next_block;
        self.next_block += n as u64;
        self.pos = 0;
        Ok(true)
    }

    /// Whether the current block is the partial block at the end of the file.
    fn in_short_last_block(&self) -> bool {
        self.next_block >= self.file_len && self.block.len() < BLOCK_SIZE
    }

    fn read_physical(&mut self) -> Result<Physical> {
        loop {
            let rest = self.block.len() - self.pos;
            if rest < HEADER_SIZE {
                // Where a header still fits, the bytes can only be the start of
                // one the crash cut off; past that point they are padding.
                let header_fits = BLOCK_SIZE - self.pos >= HEADER_SIZE;
                if self.load_block()? {
                    continue;
                }
                self.pos = self.block.len();
                let torn = if header_fits { rest as u64 } else { 0 };
                return Ok(Physical::Eof { torn });
            }
            let h = &self.block[self.pos..self.pos + HEADER_SIZE];
            let stored = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let len = u16::from_le_bytes([h[4], h[5]]) as usize;
            let ty = h[6];
            if h.iter().all(|&b| b == 0) {
                // Never written by the writer; zeros to the end of the file are
                // an unwritten tail (e.g. after a machine crash), else damage.
                if self.zeros_to_eof()? {
                    let torn = self.file_len - (self.block_start + self.pos as u64);
                    self.pos = self.block.len();
                    self.next_block = self.file_len;
                    return Ok(Physical::Eof { torn });
                }
                self.pos = self.block.len();
                return Ok(Physical::Bad {
                    bytes: rest as u64,
                    reason: "zeroed header",
                });
            }
            if HEADER_SIZE + len > rest {
                self.pos = self.block.len();
                if self.in_short_last_block() {
                    return Ok(Physical::Eof { torn: rest as u64 });
                }
                return Ok(Physical::Bad {
                    bytes: rest as u64,
                    reason: "fragment length past the end of its block",
                });
            }
            let start = self.pos + HEADER_SIZE;
            let end = start + len;
            if checksum(&self.block[self.pos + 6..end]) != stored {
                self.pos = self.block.len();
                return Ok(Physical::Bad {
                    bytes: rest as u64,
                    reason: "checksum mismatch",
                });
            }
            self.pos = end;
            return Ok(Physical::Fragment {
                ty: kind(ty),
                start,
                end,
            });
        }
    }

    /// Whether every byte from the current position to the end of the file is zero.
    fn zeros_to_eof(&self) -> Result<bool> {
        if self.block[self.pos..].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        let mut off = self.next_block;
        while off < self.file_len {
            let n = (self.file_len - off).min(BLOCK_SIZE as u64) as usize;
            if self.file.read_at(off, n)?.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            off += n as u64;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::writer::LogWriter;
    use super::*;
    use gfs::{FileStore, MemStore};

    fn payload(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
    }

    /// Writes `lens` as separate records; returns each record's starting file offset.
    fn write(store: &MemStore, name: &str, lens: &[usize]) -> Vec<u64> {
        let mut w = LogWriter::new(store.create(name).unwrap(), name);
        let mut starts = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            starts.push(w.len());
            w.add_records(&[payload(i, len)], i % 3 == 0).unwrap();
        }
        starts
    }

    fn read_all(store: &MemStore, name: &str) -> (Vec<Vec<u8>>, ReadReport) {
        let mut r = LogReader::new(store.open(name).unwrap(), name).unwrap();
        let mut out = Vec::new();
        while let Some(p) = r.read_record().unwrap() {
            out.push(p);
        }
        assert!(r.read_record().unwrap().is_none(), "EOF is sticky");
        (out, r.report())
    }

    #[test]
    fn roundtrip_small_large_and_empty() {
        let s = MemStore::new();
        let lens = [
            0,
            1,
            100,
            BLOCK_SIZE - HEADER_SIZE,
            BLOCK_SIZE,
            3 * BLOCK_SIZE + 5,
            10,
            200_000,
            7,
        ];
        write(&s, "l", &lens);
        let (got, rep) = read_all(&s, "l");
        assert_eq!(got.len(), lens.len());
        for (i, (g, &len)) in got.iter().zip(&lens).enumerate() {
            assert_eq!(g, &payload(i, len), "record {i}");
        }
        assert_eq!(
            rep,
            ReadReport {
                records: lens.len() as u64,
                ..Default::default()
            }
        );
    }

    #[test]
    fn many_records_in_one_append() {
        let s = MemStore::new();
        let mut w = LogWriter::new(s.create("l").unwrap(), "l");
        let batch: Vec<Vec<u8>> = (0..500).map(|i| payload(i, 50 + i * 3)).collect();
        w.add_records(&batch, true).unwrap();
        w.add_records(&[], true).unwrap();
        w.add_records(&batch[..2], false).unwrap();
        let (got, rep) = read_all(&s, "l");
        assert_eq!(got.len(), 502);
        assert_eq!(&got[..500], &batch[..]);
        assert_eq!(rep.bytes_dropped, 0);
    }

    /// Writes `lens`, then cuts the file at each offset `cuts` yields inside
    /// the last record (descending) and checks that exactly the earlier
    /// records come back.
    fn check_torn_last(lens: &[usize], cuts: impl Fn(usize, usize) -> Vec<usize>) -> usize {
        let s = MemStore::new();
        let starts = write(&s, "l", lens);
        let total = s.size("l").unwrap() as usize;
        let last_start = *starts.last().unwrap() as usize;
        let mut cuts = cuts(last_start, total);
        cuts.sort_unstable_by(|a, b| b.cmp(a));
        cuts.dedup();
        for &cut in &cuts {
            s.truncate("l", cut).unwrap();
            let (got, rep) = read_all(&s, "l");
            let n = lens.len() - 1;
            assert_eq!(got.len(), n, "cut at {cut}");
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g, &payload(i, lens[i]), "cut at {cut}");
            }
            assert_eq!(rep.corrupt_regions, 0, "cut at {cut}");
            // Cutting at the previous record's end, or in the block padding
            // before the last record's first header, loses nothing.
            let header = first_block(last_start as u64) as usize * BLOCK_SIZE;
            let header = header.max(last_start);
            assert_eq!(rep.torn_tail, cut > header, "cut at {cut}");
        }
        cuts.len()
    }

    #[test]
    fn torn_tail_at_every_offset_of_the_last_record() {
        let every = |from: usize, to: usize| (from..to).collect::<Vec<_>>();
        // Last record starts 50 bytes before a block boundary and crosses it.
        let n = check_torn_last(
            &[10, 20, BLOCK_SIZE - 50 - 2 * HEADER_SIZE - 30, 300],
            every,
        );
        assert_eq!(n, 300 + HEADER_SIZE * 2);
        // Last record starts after 3 bytes of block padding.
        check_torn_last(&[BLOCK_SIZE - 3 - HEADER_SIZE, 100], every);
        // Last record spans three blocks: every offset near a fragment
        // boundary, and a stride through the payloads.
        let lens = [1000, 30_000, 5, 2 * BLOCK_SIZE];
        check_torn_last(&lens, |from, to| {
            let mut v: Vec<usize> = (from..to).step_by(97).collect();
            for edge in [from, BLOCK_SIZE, 2 * BLOCK_SIZE, to] {
                v.extend(edge.saturating_sub(HEADER_SIZE + 2)..(edge + HEADER_SIZE + 2).min(to));
            }
            v.retain(|&c| c >= from && c < to);
            v
        });
    }

    #[test]
    fn zero_filled_tail_is_a_torn_tail() {
        let s = MemStore::new();
        write(&s, "l", &[100, 200]);
        let mut w = s.open_append("l").unwrap();
        w.append(&vec![0; BLOCK_SIZE + 10]).unwrap();
        let (got, rep) = read_all(&s, "l");
        assert_eq!(got.len(), 2);
        assert!(rep.torn_tail);
        assert_eq!(rep.corrupt_regions, 0);
    }

    /// A log written into zeros laid ahead of its data (`create_log` on
    /// the local store and the chunk layer) and cut by a crash: the zeros
    /// after the last record read as its end, not as damage; a record torn
    /// inside them (its header and part of its payload written, the rest
    /// still zeros) is never returned, and every record before it is.
    #[test]
    fn a_record_torn_inside_the_zeros_ahead_is_dropped_and_the_rest_kept() {
        let lens = [100, 2000, BLOCK_SIZE - 500, 300];
        let s = MemStore::new();
        write(&s, "l", &lens);
        let data = s.size("l").unwrap() as usize;
        let window = 1 << 20;
        let mut w = s.open_append("l").unwrap();
        w.append(&vec![0; window]).unwrap();
        drop(w);
        let (got, rep) = read_all(&s, "l");
        assert_eq!(got.len(), lens.len());
        assert_eq!(rep.corrupt_regions, 0, "{rep:?}");

        // The next record, framed where the writer would have put it, and
        // written up to each cut over the zeros.
        let torn = payload(9, 5000);
        let mut framed = Vec::new();
        let mut offset = data % BLOCK_SIZE;
        super::super::writer::frame(&torn, &mut framed, &mut offset);
        let whole = s.open("l").unwrap().read_at(0, data + window).unwrap();
        for cut in [
            1,
            HEADER_SIZE - 1,
            HEADER_SIZE,
            HEADER_SIZE + 1,
            2500,
            framed.len() - 1,
        ] {
            let mut bytes = whole.clone();
            bytes[data..data + cut].copy_from_slice(&framed[..cut]);
            let name = format!("cut{cut}");
            s.create(&name).unwrap().append(&bytes).unwrap();
            let (got, rep) = read_all(&s, &name);
            assert_eq!(got.len(), lens.len(), "cut at {cut}: {rep:?}");
            for (i, g) in got.iter().enumerate() {
                assert_eq!(g, &payload(i, lens[i]), "cut at {cut}");
            }
            assert!(rep.bytes_dropped > 0, "cut at {cut}: {rep:?}");
        }
    }

    /// Block index where record `i` (starting at file offset `start`) puts its header.
    fn first_block(start: u64) -> u64 {
        let s = start as usize;
        let in_block = s % BLOCK_SIZE;
        if BLOCK_SIZE - in_block < HEADER_SIZE {
            (s / BLOCK_SIZE + 1) as u64
        } else {
            (s / BLOCK_SIZE) as u64
        }
    }

    /// `bytes` (framed by the writer) as a log written before XXH3: every
    /// fragment's type without the flag and its checksum seahash.
    fn as_seahash_log(mut bytes: Vec<u8>) -> Vec<u8> {
        let mut at = 0;
        while at + HEADER_SIZE <= bytes.len() {
            let block_left = BLOCK_SIZE - at % BLOCK_SIZE;
            if block_left < HEADER_SIZE {
                at += block_left;
                continue;
            }
            let len = u16::from_le_bytes([bytes[at + 4], bytes[at + 5]]) as usize;
            bytes[at + 6] = kind(bytes[at + 6]);
            let h = seahash::hash(&bytes[at + 6..at + HEADER_SIZE + len]);
            bytes[at..at + 4].copy_from_slice(&((h ^ (h >> 32)) as u32).to_le_bytes());
            at += HEADER_SIZE + len;
        }
        bytes
    }

    #[test]
    fn logs_written_with_seahash_are_still_read_and_a_flipped_flag_is_damage() {
        let s = MemStore::new();
        let lens: Vec<usize> = (0..100)
            .map(|i| 300 + (i * 997) % (2 * BLOCK_SIZE))
            .collect();
        write(&s, "new", &lens);
        let total = s.size("new").unwrap() as usize;
        let bytes = s.open("new").unwrap().read_at(0, total).unwrap();
        assert_eq!(
            bytes[6] & super::super::format::XXH3,
            super::super::format::XXH3
        );
        let old = as_seahash_log(bytes.to_vec());
        assert_ne!(old, bytes.to_vec());
        s.create("old").unwrap().append(&old).unwrap();
        let want: Vec<Vec<u8>> = (0..lens.len()).map(|i| payload(i, lens[i])).collect();
        let (got, rep) = read_all(&s, "old");
        assert_eq!(got, want);
        assert_eq!(rep.corrupt_regions, 0);
        // The first fragment's flag flipped: its checksum is taken with the
        // other hash and does not verify.
        let mut flipped = bytes.to_vec();
        flipped[6] ^= super::super::format::XXH3;
        s.create("flipped").unwrap().append(&flipped).unwrap();
        let (got, rep) = read_all(&s, "flipped");
        assert!(!got.contains(&want[0]));
        assert_eq!(rep.corrupt_regions, 1);
    }

    #[test]
    fn flipped_byte_drops_the_damaged_block_only() {
        let s = MemStore::new();
        let lens: Vec<usize> = (0..200).map(|i| 500 + (i * 37) % 900).collect();
        let starts = write(&s, "l", &lens);
        for victim in [0usize, 57, 120, 199] {
            let name = format!("c{victim}");
            let total = s.size("l").unwrap() as usize;
            let bytes = s.open("l").unwrap().read_at(0, total).unwrap();
            s.create(&name).unwrap().append(&bytes).unwrap();
            // A byte inside the victim's payload, well past its header.
            let off = starts[victim] as usize + HEADER_SIZE + 20;
            s.corrupt(&name, off).unwrap();
            let bad_block = (off / BLOCK_SIZE) as u64;
            let expected: Vec<usize> = (0..lens.len())
                .filter(|&i| i < victim || first_block(starts[i]) > bad_block)
                .collect();
            let (got, rep) = read_all(&s, &name);
            let want: Vec<Vec<u8>> = expected.iter().map(|&i| payload(i, lens[i])).collect();
            assert_eq!(got, want, "victim {victim}");
            assert!(!got.contains(&payload(victim, lens[victim])));
            assert_eq!(rep.corrupt_regions, 1);
            assert!(rep.bytes_dropped as usize >= lens[victim]);
            assert!(!rep.torn_tail);
        }
    }

    #[test]
    fn corrupt_fragment_of_a_spanning_record() {
        let s = MemStore::new();
        let lens = [100, 3 * BLOCK_SIZE, 100, 100];
        let starts = write(&s, "l", &lens);
        // Damage the MIDDLE fragment in block 2: the big record is lost, and
        // its LAST fragment in block 3 is dropped as part of the same region.
        s.corrupt("l", 2 * BLOCK_SIZE + 100).unwrap();
        let (got, rep) = read_all(&s, "l");
        assert_eq!(got, vec![payload(0, 100), payload(2, 100), payload(3, 100)]);
        assert_eq!(rep.corrupt_regions, 1);
        assert!(rep.bytes_dropped >= (3 * BLOCK_SIZE) as u64 - starts[1]);
    }

    #[test]
    fn garbage_never_yields_a_record() {
        let s = MemStore::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let g: Vec<u8> = (0..3 * BLOCK_SIZE + 77)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        s.create("g").unwrap().append(&g).unwrap();
        let (got, rep) = read_all(&s, "g");
        assert!(got.is_empty());
        assert!(rep.corrupt_regions >= 1);
        assert!(rep.bytes_dropped > 0);
    }
}
