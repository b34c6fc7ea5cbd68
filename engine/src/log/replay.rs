//! Replay: read log files back and merge them into one stream by sequence number.
//!
//! Each file holds records in the order they were committed, so each is
//! sorted by sequence number; with two log lanes (see [`super::CommitLog`])
//! the files interleave in time and a record may be in both. A k-way merge on
//! each record's lowest sequence number restores commit order across files,
//! and copies of one record meet side by side, so duplicates are elided by
//! comparing each record with the previous one only.

use super::reader::LogReader;
use super::record::LogRecord;
use crate::key::SeqNo;
use crate::Result;
use gfs::FileStore;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What a replay read and skipped, summed over its files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Log files read.
    pub files: usize,
    /// Records decoded (every copy counted).
    pub records: u64,
    /// Records passed to the callback.
    pub applied: u64,
    /// Records whose entries all had `seq <= min_seq`.
    pub skipped: u64,
    /// Second copies of a record (written to both lanes) that were elided.
    pub duplicates: u64,
    /// Bytes of damaged regions and torn tails.
    pub bytes_dropped: u64,
    /// Files that ended inside a record.
    pub torn_tails: u32,
    /// Damaged regions, plus records that verified but did not decode.
    pub corrupt_regions: u32,
    /// Highest sequence number seen in any record (0 if none).
    pub max_seq: SeqNo,
}

struct Head {
    rec: LogRecord,
    lo: SeqNo,
    hi: SeqNo,
    /// Identity of the encoded record, to recognise its copy in the other lane.
    hash: u64,
}

struct Source {
    number: u64,
    reader: LogReader,
    head: Option<Head>,
    max_seq: SeqNo,
}

impl Source {
    /// Moves to the next decodable record; undecodable ones are reported and skipped.
    fn advance(&mut self, report: &mut ReplayReport) -> Result<()> {
        self.head = None;
        while let Some(p) = self.reader.read_record()? {
            let decoded = LogRecord::decode(&p)
                .ok()
                .and_then(|rec| rec.seq_range().map(|(lo, hi)| (rec, lo, hi)));
            match decoded {
                Some((rec, lo, hi)) => {
                    report.records += 1;
                    self.max_seq = self.max_seq.max(hi);
                    let hash = seahash::hash(&p);
                    self.head = Some(Head { rec, lo, hi, hash });
                    return Ok(());
                }
                None => {
                    log::warn!(
                        "{}: dropped a {}-byte record that verified but does not decode",
                        self.reader.name(),
                        p.len()
                    );
                    report.corrupt_regions += 1;
                    report.bytes_dropped += p.len() as u64;
                }
            }
        }
        let r = self.reader.report();
        report.bytes_dropped += r.bytes_dropped;
        report.corrupt_regions += r.corrupt_regions;
        report.torn_tails += u32::from(r.torn_tail);
        Ok(())
    }
}

/// Replays `files` (file number, name) and calls `f` with every record that
/// has an entry with `seq > min_seq`, in sequence order, each record once.
/// Also returns the highest sequence number found in each file.
pub(crate) fn replay_files(
    store: &dyn FileStore,
    files: &[(u64, String)],
    min_seq: SeqNo,
    mut f: impl FnMut(LogRecord) -> Result<()>,
) -> Result<(ReplayReport, Vec<(u64, SeqNo)>)> {
    let mut report = ReplayReport {
        files: files.len(),
        ..Default::default()
    };
    let mut sources = Vec::with_capacity(files.len());
    let mut heap = BinaryHeap::new();
    for (number, name) in files {
        let reader = LogReader::new(store.open(name)?, name.clone())?;
        let mut s = Source {
            number: *number,
            reader,
            head: None,
            max_seq: 0,
        };
        s.advance(&mut report)?;
        if let Some(h) = &s.head {
            heap.push(Reverse((h.lo, s.number, sources.len())));
        }
        sources.push(s);
    }

    let mut last: Option<(SeqNo, SeqNo, u64)> = None;
    while let Some(Reverse((_, _, i))) = heap.pop() {
        let src = &mut sources[i];
        let Some(head) = src.head.take() else {
            continue;
        };
        src.advance(&mut report)?;
        if let Some(h) = &src.head {
            heap.push(Reverse((h.lo, src.number, i)));
        }
        let id = (head.lo, head.hi, head.hash);
        if last == Some(id) {
            report.duplicates += 1;
            continue;
        }
        last = Some(id);
        report.max_seq = report.max_seq.max(head.hi);
        if head.hi > min_seq {
            report.applied += 1;
            f(head.rec)?;
        } else {
            report.skipped += 1;
        }
    }
    let maxima = sources.iter().map(|s| (s.number, s.max_seq)).collect();
    Ok((report, maxima))
}

/// Replays every log file under `dir` without opening it for writing: how
/// another server reads the log of a dead one.
pub fn replay_dir(
    store: &dyn FileStore,
    dir: &str,
    min_seq: SeqNo,
    f: impl FnMut(LogRecord) -> Result<()>,
) -> Result<ReplayReport> {
    let files = super::list_logs(store, dir)?;
    replay_files(store, &files, min_seq, f).map(|(r, _)| r)
}
