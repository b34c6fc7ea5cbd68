//! Recovery of a dead tablet server's commit log (paper §6, "Commit-log
//! implementation").
//!
//! A server's log mixes the writes of all its tablets. Rather than have
//! every server that takes over one of those tablets read the whole log, the
//! log is first sorted by (table, row, column, timestamp, sequence number):
//! each log file is a piece, sorted on its own (pieces run in parallel) into
//! a *run* written to the file store in SSTable format, whose block index
//! lets a reader seek straight to one tablet's rows. A `DONE` file lists the
//! runs once all are written, so a sort interrupted by a crash is redone.
//! A recovering server then reads, from each run, only its tablet's key
//! range, and keeps the entries above the tablet's redo point.

use crate::key;
use crate::log::{list_logs, LogReader, LogRecord};
use crate::sstable::{Table, TableBuilder, TableOptions};
use crate::{BloomKind, Error, Result};
use gfs::{FileStore, ReadableFile};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where the sorted runs of log directory `log_dir` go.
pub fn runs_dir(log_dir: &str) -> String {
    format!("recovery/{}", log_dir.replace('/', "_"))
}

fn done_file(log_dir: &str) -> String {
    format!("{}/DONE", runs_dir(log_dir))
}

/// What a sort did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SortReport {
    pub runs: Vec<String>,
    /// Bytes of log read.
    pub log_bytes: u64,
    pub entries: u64,
}

/// A tablet's key in a run: the table id in front of the row, so runs sort
/// by table first. Returns None for a malformed key.
fn run_key(table: u64, internal: &[u8]) -> Option<Vec<u8>> {
    let mut k = key::decode(internal)?;
    let mut row = table.to_be_bytes().to_vec();
    row.extend_from_slice(&k.row);
    k.row = row;
    Some(k.encode())
}

/// Sorts the log in `log_dir` into runs (once; a finished sort is reused).
/// `threads` pieces are sorted at a time.
pub fn sort_log(store: &Arc<dyn FileStore>, log_dir: &str, threads: usize) -> Result<SortReport> {
    if let Some(runs) = finished_runs(&**store, log_dir)? {
        return Ok(SortReport {
            runs,
            ..SortReport::default()
        });
    }
    // Its server was declared dead, but may only be frozen: once the logs
    // are sealed, nothing it appends on waking is acknowledged unread.
    store.seal_logs(log_dir)?;
    let files = list_logs(&**store, log_dir)?;
    let dir = runs_dir(log_dir);
    let log_bytes = AtomicU64::new(0);
    let entries = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    let results: Vec<Result<Vec<String>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, files.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut made = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::AcqRel) as usize;
                        let Some((number, name)) = files.get(i) else {
                            return Ok(made);
                        };
                        let run = format!("{dir}/{number:016}.run");
                        let (bytes, n) = sort_piece(store, name, &run)?;
                        log_bytes.fetch_add(bytes, Ordering::Relaxed);
                        entries.fetch_add(n, Ordering::Relaxed);
                        if n > 0 {
                            made.push(run);
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::corruption("a log sorter panicked")))
            })
            .collect()
    });
    let mut runs = Vec::new();
    for r in results {
        runs.extend(r?);
    }
    runs.sort();
    // DONE appears whole or not at all.
    let list: String = runs.iter().map(|r| format!("{r}\n")).collect();
    store.replace(&done_file(log_dir), &[list.as_bytes()])?;
    Ok(SortReport {
        runs,
        log_bytes: log_bytes.into_inner(),
        entries: entries.into_inner(),
    })
}

/// Sorts one log file into one run; returns (log bytes, entries).
fn sort_piece(store: &Arc<dyn FileStore>, name: &str, run: &str) -> Result<(u64, u64)> {
    let file = store.open(name)?;
    let bytes = file.len()?;
    let mut reader = LogReader::new(file, name)?;
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    while let Some(payload) = reader.read_record()? {
        let Ok(rec) = LogRecord::decode(&payload) else {
            log::warn!("{name}: skipping an undecodable log record");
            continue;
        };
        let Ok(table) = rec.table.parse::<u64>() else {
            continue;
        };
        for (k, v) in rec.entries {
            let rk = run_key(table, &k)
                .ok_or_else(|| Error::corruption(format!("{name}: a malformed key")))?;
            entries.push((rk, v));
        }
    }
    let report = reader.report();
    if report.bytes_dropped > 0 {
        log::warn!("{name}: recovery dropped a damaged or torn region: {report:?}");
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    // A record written by both log writers appears twice.
    entries.dedup_by(|a, b| a.0 == b.0);
    let n = entries.len() as u64;
    if n == 0 {
        return Ok((bytes, 0));
    }
    // Small blocks: a recovering server reads its tablet's range at about
    // this granularity.
    let opts = TableOptions {
        block_size: 4 << 10,
        bloom: BloomKind::None,
        ..TableOptions::default()
    };
    // A sort interrupted by a crash may have left this run half written.
    delete_if_present(&**store, run)?;
    let mut b = TableBuilder::new(store.create(run)?, opts);
    for (k, v) in &entries {
        b.add(k, v)?;
    }
    b.finish()?;
    Ok((bytes, n))
}

/// The runs of a finished sort, or None if the sort has not finished.
fn finished_runs(store: &dyn FileStore, log_dir: &str) -> Result<Option<Vec<String>>> {
    let done = done_file(log_dir);
    if !store.exists(&done)? {
        return Ok(None);
    }
    let f = store.open(&done)?;
    let len = f.len()?;
    let text = f.read_at(0, len as usize)?;
    Ok(Some(
        String::from_utf8_lossy(&text)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    ))
}

/// Counts the bytes read through it.
struct Counted {
    inner: Arc<dyn ReadableFile>,
    read: Arc<AtomicU64>,
}

impl ReadableFile for Counted {
    fn read_at(&self, offset: u64, len: usize) -> gfs::Result<Vec<u8>> {
        self.read.fetch_add(len as u64, Ordering::Relaxed);
        self.inner.read_at(offset, len)
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> gfs::Result<Vec<Vec<u8>>> {
        let n: usize = ranges.iter().map(|r| r.1).sum();
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        self.inner.read_many(ranges)
    }
    fn len(&self) -> gfs::Result<u64> {
        self.inner.len()
    }
}

/// Calls `f` with every entry of `table`'s rows in `[start, end)` whose
/// sequence number is above `after_seq`, from the sorted runs of `log_dir`
/// (run after run: sorted within each, not across them).
/// Returns the bytes of runs read. Fails if the log has not been sorted.
pub fn read_tablet(
    store: &Arc<dyn FileStore>,
    log_dir: &str,
    table: u64,
    start: &[u8],
    end: Option<&[u8]>,
    after_seq: u64,
    mut f: impl FnMut(Vec<u8>, Vec<u8>),
) -> Result<u64> {
    let runs = finished_runs(&**store, log_dir)?
        .ok_or_else(|| Error::Unavailable(format!("the log {log_dir} is not sorted yet")))?;
    let prefixed = |row: &[u8]| {
        let mut r = table.to_be_bytes().to_vec();
        r.extend_from_slice(row);
        key::row_start(&r)
    };
    let lo = prefixed(start);
    let hi = match end {
        Some(e) => prefixed(e),
        None => key::row_start(&(table + 1).to_be_bytes()),
    };
    let read = Arc::new(AtomicU64::new(0));
    for (i, run) in runs.iter().enumerate() {
        let file: Arc<dyn ReadableFile> = Arc::new(Counted {
            inner: store.open(run)?,
            read: read.clone(),
        });
        let t = Table::open(file, u64::MAX - i as u64, None)?;
        let mut it = t.iter();
        crate::iterator::InternalIterator::seek(&mut it, &lo)?;
        use crate::iterator::InternalIterator as _;
        while it.valid() && it.key() < hi.as_slice() {
            let mut k = key::decode(it.key())
                .ok_or_else(|| Error::corruption(format!("{run}: a malformed key")))?;
            if k.seq > after_seq {
                k.row.drain(..8);
                f(k.encode(), it.value().to_vec());
            }
            it.next()?;
        }
    }
    Ok(read.load(Ordering::Relaxed))
}

fn delete_if_present(store: &dyn FileStore, name: &str) -> Result<()> {
    match store.delete(name) {
        Ok(()) | Err(gfs::Error::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the runs of `log_dir` and the log itself.
pub fn remove(store: &dyn FileStore, log_dir: &str) -> Result<()> {
    let mut names = store.list(&format!("{}/", runs_dir(log_dir)))?;
    names.extend(store.list(&format!("{log_dir}/"))?);
    for n in names {
        match store.delete(&n) {
            Ok(()) | Err(gfs::Error::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{CommitLog, CommitLogOptions};

    fn entry(row: &[u8], seq: u64) -> (Vec<u8>, Vec<u8>) {
        (
            key::encode(row, b"f", b"q", 1, seq, key::Kind::Put),
            format!("v{seq}").into_bytes(),
        )
    }

    #[test]
    fn a_tablet_reads_only_its_range_above_its_redo_point() {
        let store: Arc<dyn FileStore> = Arc::new(gfs::MemStore::new());
        let log = CommitLog::open(
            store.clone(),
            "logs/dead",
            CommitLogOptions {
                roll_size: 4 << 10,
                ..CommitLogOptions::default()
            },
        )
        .unwrap();
        let mut seq = 1;
        for i in 0..200u32 {
            for table in [1u64, 2] {
                let row = format!("row{i:04}");
                log.append_records(
                    &[LogRecord {
                        table: table.to_string(),
                        entries: vec![entry(row.as_bytes(), seq)],
                    }],
                    false,
                )
                .unwrap();
                seq += 1;
            }
        }
        log.append_records(&[], true).unwrap();
        drop(log);
        let report = sort_log(&store, "logs/dead", 2).unwrap();
        assert!(report.runs.len() > 1, "several pieces: {report:?}");
        // A lane busy with a roll or sync sends an append to the other lane,
        // which writes again what it had not synced: a record may be in two
        // files (each file's run has it once), the more so on a busy machine.
        assert!(report.entries >= 400, "{report:?}");
        // Table 2, rows [row0100, row0150), above seq 250.
        let mut got = Vec::new();
        let read = read_tablet(
            &store,
            "logs/dead",
            2,
            b"row0100",
            Some(b"row0150"),
            250,
            |k, v| got.push((key::decode(&k).unwrap(), v)),
        )
        .unwrap();
        // Runs are read one after another (the loader fills a memtable), so
        // rows come sorted within each log file, not across them.
        let mut rows: Vec<String> = got
            .iter()
            .map(|(k, _)| String::from_utf8(k.row.clone()).unwrap())
            .collect();
        rows.sort();
        rows.dedup();
        let want: Vec<String> = (125..150).map(|i| format!("row{i:04}")).collect();
        assert_eq!(rows, want);
        assert!(got.iter().all(|(k, _)| k.seq > 250 && k.seq % 2 == 0));
        assert!(
            read < report.log_bytes / 2,
            "read {read} of {}",
            report.log_bytes
        );
        // A second sort reuses the first.
        assert_eq!(sort_log(&store, "logs/dead", 2).unwrap().runs, report.runs);
        remove(&*store, "logs/dead").unwrap();
        assert!(store.list("recovery/").unwrap().is_empty());
        assert!(store.list("logs/dead/").unwrap().is_empty());
    }
}
