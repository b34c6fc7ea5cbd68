//! Background work of a tablet server: minor compactions (memtable →
//! SSTable), merging and major compactions, and splits. Every change of a
//! tablet's files is recorded in its METADATA row before it is used.

use super::commit::freeze;
use super::pressure::{self, delete_obsolete_logs};
use super::{Served, TabletServer};
use crate::client::Client;
use crate::compaction::{needs_merge, sst_name, stacked, write_outputs, OutputCtx, Router};
use crate::compaction_filter::CompactionFilter;
use crate::concat;
use crate::env::now_micros;
use crate::memtable::Memtable;
use crate::merge::MergingIterator;
use crate::metadata::{
    tablet_row_cells, tablet_row_key, SstMeta, TabletMeta, FAMILY_LOG, METADATA_ID, Q_EVENT,
};
use crate::protocol::{TabletLifecycle, TabletMaintenance};
use crate::tablet::{next_files_version, ClipIterator, Sst, Tablet, TabletVersion};
use crate::{Error, Mutation, Result};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Entries between two progress reports of a compaction.
const PROGRESS_EVERY: u64 = 16 << 10;

thread_local! {
    /// The background job this thread runs: its activity key and what it
    /// does, for progress reports from deep inside it.
    static JOB: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// One background worker: runs the most urgent job it can claim.
pub(super) fn background_loop(server: Arc<TabletServer>, i: usize) {
    let mut last_error: Option<Instant> = None;
    let key = format!("worker{i}");
    while server.is_serving() {
        match run_one_job(&server, &key) {
            Ok(true) => continue,
            Ok(false) => {
                let _ = server.wake_rx.recv_timeout(Duration::from_millis(500));
            }
            Err(e) => {
                if !server.is_serving() {
                    break;
                }
                if matches!(e, Error::ShuttingDown) {
                    // The engine stopping under a job (its METADATA
                    // update refused): not a failure, the job runs
                    // again after a restart.
                    log::debug!("{}: background job stopped: {e}", server.name);
                } else if last_error.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                    log::error!("{}: background compaction failed: {e}", server.name);
                }
                last_error = Some(Instant::now());
                let _ = server.wake_rx.recv_timeout(Duration::from_millis(200));
            }
        }
        server.activity.set(&key, None);
    }
}

fn run_one_job(server: &TabletServer, key: &str) -> Result<bool> {
    JOB.with(|j| *j.borrow_mut() = None);
    // 0. Memtables the server's memory, its log or their age want out.
    pressure::relieve(server);
    let all = server.served_tablets();
    let say = |what: &str, s: &Served| {
        let text = format!("{what} tablet={} table={}", s.tablet.id, s.table.name);
        JOB.with(|j| *j.borrow_mut() = Some((key.to_string(), text.clone())));
        server.activity.set(key, Some(text))
    };
    // 1. Frozen memtables first: they hold writes back and pin the log.
    for s in &all {
        if !s.tablet.version().imm.is_empty() {
            if let Some(_c) = s.tablet.try_claim() {
                say("minor_compaction", s);
                let _t = telemetry::timer(telemetry::Latency::Compaction, "minor");
                flush_imm(server, s)?;
                return Ok(true);
            }
        }
    }
    // 2. Splits (never of the root tablet).
    for s in &all {
        if wants_split(server, s) {
            if let Some(_c) = s.tablet.try_claim() {
                say("split", s);
                if split(server, s)? {
                    return Ok(true);
                }
            }
        }
    }
    // 3. Merging compactions of groups with too many files on one key.
    let trigger = server.env.opts.merge_trigger;
    let target = server.env.opts.sstable_target_bytes;
    for s in &all {
        let v = s.tablet.version();
        let mut per_group: BTreeMap<&str, Vec<&SstMeta>> = BTreeMap::new();
        for f in &v.files {
            per_group
                .entry(f.meta.group.as_str())
                .or_default()
                .push(&f.meta);
        }
        if let Some((g, _)) = per_group
            .iter()
            .find(|(_, files)| needs_merge(files, trigger, target))
        {
            let g = g.to_string();
            if let Some(_c) = s.tablet.try_claim() {
                say("merging_compaction", s);
                let _t = telemetry::timer(telemetry::Latency::Compaction, "merging");
                merge_group(server, s, &g)?;
                return Ok(true);
            }
        }
    }
    // 4. Children still holding files their parent shared with a sibling:
    //    those wholly on the sibling's side are dropped (nothing to write);
    //    the rest are rewritten only once the tablet must be clean.
    for s in &all {
        let v = s.tablet.version();
        if !s.tablet.has_foreign_files(&v) {
            continue;
        }
        let all_of_them = must_be_clean(server, s, &v);
        if all_of_them || !s.tablet.outside_files(&v).is_empty() {
            if let Some(_c) = s.tablet.try_claim() {
                say("merging_compaction", s);
                let _t = telemetry::timer(telemetry::Latency::Compaction, "merging");
                rewrite_foreign(server, s, all_of_them)?;
                return Ok(true);
            }
        }
    }
    // 5. Periodic major compactions.
    for s in &all {
        let t = &s.tablet;
        let v = t.version();
        let groups = v
            .files
            .iter()
            .map(|f| f.meta.group.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len();
        let due = t.last_major.lock().elapsed() > server.env.opts.major_interval
            && v.files.len() > groups;
        if due {
            if let Some(_c) = t.try_claim() {
                say("major_compaction", s);
                let _t = telemetry::timer(telemetry::Latency::Compaction, "major");
                major_compact(server, s)?;
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Says how far the running compaction is: entries written of about
/// `total` read (fewer are written where collection drops some).
fn progress(server: &TabletServer, written: u64, total: u64) {
    JOB.with(|j| {
        if let Some((key, text)) = &*j.borrow() {
            server.activity.set(
                key,
                Some(format!(
                    "{text} entries_written={written} input_entries={total}"
                )),
            );
        }
    });
}

/// `next` with a progress report every so many entries.
fn reporting<'a>(
    server: &'a TabletServer,
    total: u64,
    mut next: impl FnMut() -> Result<Option<(Vec<u8>, Vec<u8>)>> + 'a,
) -> impl FnMut() -> Result<Option<(Vec<u8>, Vec<u8>)>> + 'a {
    let mut written = 0u64;
    move || {
        let e = next()?;
        if e.is_some() {
            written += 1;
            if written.is_multiple_of(PROGRESS_EVERY) {
                progress(server, written, total);
            }
        }
        Ok(e)
    }
}

fn output_ctx<'a>(
    server: &'a TabletServer,
    new_number: &'a dyn Fn() -> Result<u64>,
) -> OutputCtx<'a> {
    OutputCtx {
        store: &server.env.store,
        cache: &server.env.block_cache,
        target_bytes: server.env.opts.sstable_target_bytes,
        new_number,
    }
}

/// Writes a memtable's entries inside the tablet's range into SSTables.
pub(super) fn write_memtable(
    server: &TabletServer,
    s: &Served,
    m: &Arc<Memtable>,
) -> Result<Vec<Arc<Sst>>> {
    let schema = s.table.schema();
    let (lo, hi) = s.tablet.key_bounds();
    let clipped = ClipIterator::new(m.iter(), lo, hi);
    let mut filter = CompactionFilter::new(Box::new(clipped), false, schema.clone(), now_micros())?;
    if schema.logs_changes() {
        filter = filter.keeping_collected();
    }
    let new_number = || server.env.numbers.new_output();
    write_outputs(
        &output_ctx(server, &new_number),
        &Router::by_schema(&schema),
        reporting(server, m.len() as u64, || filter.next_entry()),
    )
}

/// Minor compaction: the oldest frozen memtable becomes SSTables. The
/// caller holds the tablet's claim.
pub(super) fn flush_imm(server: &TabletServer, s: &Served) -> Result<()> {
    let t = &s.tablet;
    let v = t.version();
    let Some(m) = v.imm.first().cloned() else {
        return Ok(());
    };
    server.core.wait_sealed(&m);
    let outputs = write_memtable(server, s, &m)?;
    let bytes = output_bytes(&outputs);
    let flushed = m.max_seq().max(t.flushed_seq.load(Ordering::Acquire));
    install(server, s, &[], outputs, flushed, |cur, files| {
        TabletVersion {
            files_version: next_files_version(),
            mem: cur.mem.clone(),
            imm: cur
                .imm
                .iter()
                .filter(|x| !Arc::ptr_eq(x, &m))
                .cloned()
                .collect(),
            files,
        }
    })?;
    server.counters.flushes.fetch_add(1, Ordering::Relaxed);
    server
        .counters
        .flushed_bytes
        .fetch_add(bytes, Ordering::Relaxed);
    server.stall.release();
    delete_obsolete_logs(server)
}

/// Bytes of a compaction's output files.
fn output_bytes(outputs: &[Arc<Sst>]) -> u64 {
    outputs.iter().map(|o| o.meta.size).sum()
}

/// Records a compaction's result in METADATA and installs the new version.
fn install(
    server: &TabletServer,
    s: &Served,
    inputs: &[Arc<Sst>],
    outputs: Vec<Arc<Sst>>,
    flushed_seq: u64,
    make: impl FnOnce(&TabletVersion, Vec<Arc<Sst>>) -> TabletVersion,
) -> Result<()> {
    let t = &s.tablet;
    let numbers: Vec<u64> = outputs.iter().map(|o| o.meta.number).collect();
    if t.retired.load(Ordering::Acquire) {
        // Split or unloaded while we worked: the output is garbage.
        server.env.numbers.release(numbers.iter().copied());
        for n in numbers {
            let _ = server.env.store.delete(&sst_name(n));
        }
        return Ok(());
    }
    let removed: Vec<u64> = inputs.iter().map(|f| f.meta.number).collect();
    let mut meta = s.meta(&server.log_dir);
    meta.files.retain(|f| !removed.contains(&f.number));
    meta.files.extend(outputs.iter().map(|o| o.meta.clone()));
    if let Some(r) = &mut meta.redo {
        r.seq = r.seq.max(flushed_seq);
    }
    let recorded = record(server, &meta, None);
    server.env.numbers.release(numbers);
    if let Err(e) = recorded {
        for o in &outputs {
            let _ = server.env.store.delete(&sst_name(o.meta.number));
        }
        return Err(e);
    }
    t.update(|cur| {
        let mut files: Vec<Arc<Sst>> = cur
            .files
            .iter()
            .filter(|f| !removed.contains(&f.meta.number))
            .cloned()
            .chain(outputs)
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.meta.max_seq));
        make(cur, files)
    });
    t.flushed_seq.fetch_max(flushed_seq, Ordering::AcqRel);
    Ok(())
}

/// Writes a tablet's descriptor (and this server as its location) to its
/// METADATA row, fenced by this server's lock; the root tablet's goes to
/// its file. `event` is added to the row's event log.
pub(super) fn record(server: &TabletServer, meta: &TabletMeta, event: Option<&str>) -> Result<()> {
    record_as(server, meta, event, true, &server.client)
}

/// [`record`], naming this server as the location only if
/// `serving`, through `client` (loads and unloads, which the master waits
/// for, use one that gives up soon: if METADATA's server is dead, the
/// master must get back to recovering it).
pub(super) fn record_as(
    server: &TabletServer,
    meta: &TabletMeta,
    event: Option<&str>,
    serving: bool,
    client: &Client,
) -> Result<()> {
    if !server.lease.held() {
        server.fence();
        return Err(server.not_serving(meta.id));
    }
    if meta.table == METADATA_ID && meta.start.is_empty() {
        return server.env.root.save(meta);
    }
    let location = if serving { server.name.as_bytes() } else { b"" };
    let mut mutations = tablet_row_cells(meta, location);
    if let Some(e) = event {
        mutations.push(Mutation::SetCell {
            family: FAMILY_LOG.into(),
            qualifier: Q_EVENT.to_vec(),
            timestamp: None,
            value: format!("{} {e}", server.name).into_bytes(),
        });
    }
    let key = tablet_row_key(meta.table, meta.end.as_deref());
    client.write_metadata(&key, mutations, Some(&server.lease.sequencer))
}

/// Merging compaction of one locality group: of its newest files where
/// they stack up on one key, else (too many files) of all of them, so
/// that the merge leaves fewer (the newest few could be full-size files
/// that a merge writes out again as many).
fn merge_group(server: &TabletServer, s: &Served, group: &str) -> Result<()> {
    let v = s.tablet.version();
    let trigger = server.env.opts.merge_trigger;
    let in_group: Vec<Arc<Sst>> = v
        .files
        .iter()
        .filter(|f| f.meta.group == group)
        .cloned()
        .collect();
    let metas: Vec<&SstMeta> = in_group.iter().map(|f| &f.meta).collect();
    let take = if stacked(&metas) > trigger {
        trigger / 2 + 1
    } else {
        in_group.len()
    };
    let inputs: Vec<Arc<Sst>> = in_group.into_iter().take(take).collect();
    if inputs.len() == v.files.len() {
        // Merging every file is a major compaction: do that instead.
        return major_compact(server, s);
    }
    let router = Router::fixed(&s.table.schema(), group);
    rewrite_files(server, s, &inputs, false, &router)?;
    server.counters.merges.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Whether a tablet holding files it shares with a sibling must rewrite
/// them now: to split again (past the split size; see [`wants_split`]) or
/// to be merged with a neighbour (below the merge size; the master merges
/// only tablets that share no file). Otherwise the shared files stay: both
/// halves read them clipped to their ranges, the collector keeps a file
/// while any tablet's METADATA row names it, and the halves' own merging
/// and major compactions rewrite them in passing. Rewriting both halves
/// after every split wrote every split tablet's data once more.
fn must_be_clean(server: &TabletServer, s: &Served, v: &TabletVersion) -> bool {
    let bytes = s.tablet.sstable_bytes(v);
    bytes > server.env.opts.split_bytes || bytes < server.env.opts.merge_bytes
}

/// Rewrites, clipped to the tablet's range, the files it shares with a
/// sibling since a split (a merging compaction of just those, one per
/// locality group), so that the parent's files can go; with `all` false,
/// only those holding no key of its range, which it drops without writing.
/// Files wholly inside the range stay as they are: a major compaction here
/// rewrote every file of both children after each split, as many bytes
/// again as a sequential load wrote.
fn rewrite_foreign(server: &TabletServer, s: &Served, all: bool) -> Result<()> {
    let v = s.tablet.version();
    let foreign = if all {
        s.tablet.foreign_files(&v)
    } else {
        s.tablet.outside_files(&v)
    };
    let mut by_group: BTreeMap<&str, Vec<Arc<Sst>>> = BTreeMap::new();
    for f in &foreign {
        by_group
            .entry(f.meta.group.as_str())
            .or_default()
            .push(Arc::clone(f));
    }
    let schema = s.table.schema();
    for (group, inputs) in by_group {
        rewrite_files(server, s, &inputs, false, &Router::fixed(&schema, group))?;
        server.counters.merges.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Major compaction: every SSTable of the tablet into one set per group;
/// deleted and collected data is dropped. The caller holds the claim.
fn major_compact(server: &TabletServer, s: &Served) -> Result<()> {
    let v = s.tablet.version();
    *s.tablet.last_major.lock() = Instant::now();
    if v.files.is_empty() {
        return Ok(());
    }
    let router = Router::by_schema(&s.table.schema());
    rewrite_files(server, s, &v.files, true, &router)?;
    server.counters.majors.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Merges `inputs` (clipped to the tablet's range, filtered as a major or
/// a merging compaction) into new SSTables routed by `router`, and
/// installs them in their place.
fn rewrite_files(
    server: &TabletServer,
    s: &Served,
    inputs: &[Arc<Sst>],
    major: bool,
    router: &Router,
) -> Result<()> {
    let t = &s.tablet;
    // Disjoint inputs (a sequential load's files) are read in turn.
    let iters = concat::sources(inputs.iter().map(|f| concat::Uncached(f.clone())));
    let (lo, hi) = t.key_bounds();
    let clipped = ClipIterator::new(MergingIterator::new(iters), lo, hi);
    let schema = s.table.schema();
    let mut filter = CompactionFilter::new(Box::new(clipped), major, schema.clone(), now_micros())?;
    if schema.logs_changes() {
        filter = filter.reporting_collected(super::gc_changes::MAX_REPORTED_BYTES);
    }
    let new_number = || server.env.numbers.new_output();
    let total = inputs.iter().map(|f| f.meta.entries).sum();
    let outputs = write_outputs(
        &output_ctx(server, &new_number),
        router,
        reporting(server, total, || filter.next_entry()),
    )?;
    server
        .counters
        .compacted_bytes
        .fetch_add(output_bytes(&outputs), Ordering::Relaxed);
    // Their records are durable before the cells go.
    let collected = filter.take_collected();
    if !collected.is_empty() {
        super::gc_changes::commit_collected(server, s, collected)?;
    }
    install(
        server,
        s,
        inputs,
        outputs,
        t.flushed_seq.load(Ordering::Acquire),
        |cur, files| TabletVersion {
            files_version: next_files_version(),
            mem: cur.mem.clone(),
            imm: cur.imm.clone(),
            files,
        },
    )
}

/// Splits a tablet near the middle of its data (see [`Tablet::split_row`];
/// paper §5.3: the server commits the split to METADATA, then tells the
/// master). The caller holds the claim. Returns false when no good split
/// row exists.
fn split(server: &TabletServer, s: &Arc<Served>) -> Result<bool> {
    let Some(row) = s.tablet.split_row(&s.tablet.version()) else {
        return Ok(false);
    };
    split_at(server, s, row)
}

/// Splits a tablet at `row`, which must lie strictly inside it. The
/// caller holds the claim. Returns false if the tablet retired meanwhile.
fn split_at(server: &TabletServer, s: &Arc<Served>, row: Vec<u8>) -> Result<bool> {
    let t = &s.tablet;
    // Numbered before the gate closes: taking a number may wait for
    // the lock service.
    let (id_a, id_b) = (server.env.numbers.next_id()?, server.env.numbers.next_id()?);
    let _gate = s.close();
    if t.retired.load(Ordering::Acquire) {
        return Ok(false);
    }
    freeze(server, t);
    let v = t.version();
    let flushed = t.flushed_seq.load(Ordering::Acquire);
    let make = |id: u64, start: Vec<u8>, end: Option<Vec<u8>>| {
        Arc::new(Tablet::new(
            id,
            t.table_id,
            start,
            end,
            flushed,
            TabletVersion {
                files_version: next_files_version(),
                mem: Arc::new(Memtable::new()),
                imm: v.imm.clone(),
                files: v.files.clone(),
            },
        ))
    };
    let a = make(id_a, t.start.clone(), Some(row.clone()));
    let b = make(id_b, row.clone(), t.end.clone());
    let served = |x: Arc<Tablet>| Arc::new(Served::new(x, s.table.clone()));
    let (a, b) = (served(a), served(b));
    let key_of = |x: &Tablet| x.start.escape_ascii().to_string();
    // The left half's new row first, then the right half takes over the
    // parent's row: a crash between leaves overlapping rows, which any
    // reader of METADATA resolves to this split.
    record(
        server,
        &a.meta(&server.log_dir),
        Some(&format!("split from {} at {}", t.id, key_of(&b.tablet))),
    )?;
    if server
        .env
        .hooks
        .split_stops_after_left
        .load(Ordering::Acquire)
    {
        log::warn!("{}: test hook: dying in the middle of a split", server.name);
        server.kill()?;
        return Err(server.not_serving(t.id));
    }
    record(
        server,
        &b.meta(&server.log_dir),
        Some(&format!("split from {}", t.id)),
    )?;
    server.tablets.split(t.id, a.clone(), b.clone());
    t.retired.store(true, Ordering::Release);
    server.counters.splits.fetch_add(1, Ordering::Relaxed);
    if !server
        .env
        .hooks
        .drop_split_notifications
        .load(Ordering::Acquire)
    {
        if let Some(m) = server.env.active_master() {
            m.tablet_split(&server.name, t.id, &[a.tablet.id, b.tablet.id]);
        }
    }
    server.wake();
    Ok(true)
}

/// Whether a tablet is to be split: past the split size, and holding no
/// file it shares with a sibling. Until a split's halves have rewritten
/// their shared files, their sizes count those files whole (HBase does
/// not split a region holding references either).
fn wants_split(server: &TabletServer, s: &Served) -> bool {
    let t = &s.tablet;
    let v = t.version();
    !is_root(t) && t.sstable_bytes(&v) > server.env.opts.split_bytes && !t.has_foreign_files(&v)
}

impl TabletMaintenance for TabletServer {
    /// Freezes and writes out the memtables of the tablets of `table` (all
    /// tablets if None).
    fn flush(&self, table: Option<u64>) -> Result<()> {
        self.live()?;
        for s in self.served_tablets() {
            if table.is_some_and(|id| id != s.table.id) {
                continue;
            }
            let _c = s.tablet.claim();
            if s.tablet.retired.load(Ordering::Acquire) {
                continue;
            }
            freeze(self, &s.tablet);
            // Flush what is frozen now, oldest first; memtables frozen later
            // (by writes during the flush, such as this flush's own METADATA
            // records when the tablet is a METADATA tablet) are not waited
            // for, or a METADATA tablet with small memtables never finishes.
            let frozen = s.tablet.version().imm.clone();
            while s
                .tablet
                .version()
                .imm
                .iter()
                .any(|m| frozen.iter().any(|f| Arc::ptr_eq(f, m)))
            {
                flush_imm(self, &s)?;
            }
        }
        // A tablet that split or moved meanwhile was skipped above (its
        // children took its memtable); the log still holds what it had, so
        // syncing the log keeps the promise that a flush makes every earlier
        // write durable.
        self.core.sync()
    }

    /// Compacts the served tablets of `table`.
    fn compact(&self, table: u64, major: bool) -> Result<()> {
        self.flush(Some(table))?;
        for s in self.served_tablets() {
            if s.table.id != table {
                continue;
            }
            let _c = s.tablet.claim();
            if s.tablet.retired.load(Ordering::Acquire) {
                continue;
            }
            if major {
                major_compact(self, &s)?;
            } else {
                let group = s
                    .tablet
                    .version()
                    .files
                    .first()
                    .map(|f| f.meta.group.clone());
                if let Some(g) = group {
                    merge_group(self, &s, &g)?;
                }
            }
        }
        Ok(())
    }

    /// Splits the served tablets of `table` at each of `rows` that falls
    /// strictly inside one of them (a new table's initial splits).
    fn split_at_rows(&self, table: u64, rows: &[Vec<u8>]) -> Result<()> {
        self.live()?;
        for row in rows {
            let inside = |t: &Tablet| {
                t.start.as_slice() < row.as_slice()
                    && t.end.as_ref().is_none_or(|e| row.as_slice() < e.as_slice())
            };
            let holder = self
                .served_tablets()
                .into_iter()
                .find(|s| s.table.id == table && inside(&s.tablet));
            if let Some(s) = holder {
                let _c = s.tablet.claim();
                // Checked again under the claim: a split may have raced.
                if !s.tablet.retired.load(Ordering::Acquire) && inside(&s.tablet) {
                    split_at(self, &s, row.clone())?;
                }
            }
        }
        Ok(())
    }

    /// Splits the served tablets of `table` past the split threshold now;
    /// their halves split again, if they are still too large, once they
    /// have rewritten the files they share.
    fn split_now(&self, table: u64) -> Result<()> {
        self.live()?;
        loop {
            let mut did = false;
            for s in self.served_tablets() {
                if s.table.id != table {
                    continue;
                }
                if wants_split(self, &s) {
                    let _c = s.tablet.claim();
                    if !s.tablet.retired.load(Ordering::Acquire) && split(self, &s)? {
                        did = true;
                    }
                }
            }
            if !did {
                return Ok(());
            }
        }
    }
}

pub(super) fn is_root(t: &Tablet) -> bool {
    t.table_id == METADATA_ID && t.start.is_empty()
}
