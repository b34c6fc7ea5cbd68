//! The write path: rows routed to a served tablet, row locks, back-pressure,
//! then the commit log. A synced write goes through group commit (one log
//! write and one fsync for many writers, paper §6); an unsynced one numbers
//! its own rows under the commit lock and writes them into an idle log
//! lane's file once it has let go of the lock, so two unsynced writers log at
//! once, one into each lane. Either way each writer then inserts its
//! own entries into the memtables, in parallel with the others and with the
//! next log write, and `publish.rs` makes them visible in order.

use super::publish::{Batch, Publisher};
use super::reads::{cell_of, row_matches};
use super::{Served, TabletServer};
use crate::changes::{self, watermark::Stamps};
use crate::data::*;
use crate::group_commit::{GroupCommit, GroupCommitStats, Turn};
use crate::key;
use crate::log::{CommitLog, Encoded, LogRecord};
use crate::memtable::Memtable;
use crate::mutation;
use crate::protocol::{TabletLifecycle, TabletWrites};
use crate::schema::CHANGES_FAMILY;
use crate::tablet::{Tablet, TabletVersion};
use crate::txn::{Guard, Reach, RowOp, RowTxn, TxnOutcome};
use crate::{Error, Result};
use chubby::Sequencer;
use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writers wait while a tablet has this many memtables waiting to be written out.
const MAX_IMMUTABLE: usize = 4;

/// How long a writer that finds the commit lock taken yields its core
/// before it sleeps on the lock. The lock is held for one log write, but
/// with more writers than cores its holder is often off its core: 4
/// unsynced writers on 2 cores that slept at once spent about 30% of their
/// CPU going to sleep and waking each other. Yielding lets the holder run.
/// (Measured with 4 writers on 2 cores: 200 µs gained a little over half
/// of what 1 ms did; a synced batch holds the lock for its fsync, so
/// waiting behind one still ends in sleep.)
const YIELD_FOR_COMMIT_LOCK: Duration = Duration::from_micros(500);

/// Log appends at least this slow (on average) are where a second batch
/// is written while the first is out, when `log_puts_in_flight` is 0: a
/// PUT that waits on a far store rather than on this machine's cores.
const PIPELINE_ABOVE: Duration = Duration::from_millis(5);

/// The longest a synced batch's leader waits for the writers the last
/// batch released (and at most a quarter of a batch's time): they come
/// back within a wake-up, or are not coming.
const GATHER_CAP: Duration = Duration::from_micros(200);

/// How group commit shapes its batches (see [`crate::Options`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct CommitShape {
    pub(super) window: Duration,
    pub(super) adaptive_window: bool,
    pub(super) puts_in_flight: usize,
}

/// One row's part of a write: its tablet, its entries and their log record,
/// both with sequence numbers 0.. that the commit leader rebases.
struct Pending {
    tablet: Arc<Tablet>,
    entries: Vec<Entry>,
    /// Encoded before the commit lock is taken.
    encoded: Encoded,
    ops: u64,
    /// Bytes of its entries' keys and values.
    bytes: usize,
}

/// What one caller commits.
struct WriteGroup {
    rows: Vec<Pending>,
    bytes: usize,
    /// Sequence numbers from this batch on must exceed this (a tablet loaded
    /// from elsewhere brings the numbers it already used).
    floor: u64,
}

/// The commit log, group commit, the sequence counters and the commit lock.
pub(super) struct CommitCore {
    log: CommitLog,
    /// Batches the writes that wait for a sync (see [`CommitCore::commit`]).
    group: GroupCommit<WriteGroup, Ticket>,
    /// Next sequence number to assign (touched only under `open`).
    next_seq: AtomicU64,
    /// The visible sequence number: reads use it as their snapshot.
    publisher: Arc<Publisher>,
    memtable_bytes: usize,
    /// Bytes committed since start, and how many between two wake-ups of
    /// a background thread to check the memtable budget (`pressure.rs`).
    written: AtomicU64,
    budget_step: u64,
    wake_tx: Sender<()>,
    /// Batches being written after their leader passed the lead on, and
    /// how many may be (see [`CommitCore::commit_grouped`]).
    out: Mutex<usize>,
    out_done: Condvar,
    /// 0: chosen by the recent PUT time.
    puts_in_flight: usize,
    /// The commit lock; false once the server is fenced (nothing more
    /// reaches the log). Held from numbering a batch to choosing its
    /// memtables, and by a freeze, so a memtable is sealed after the last
    /// batch that chose it.
    open: Mutex<bool>,
}

/// An internal key and its value, as logged.
type Entry = (Vec<u8>, Vec<u8>);

/// One writer's part of a logged batch: its entries, to insert into the
/// memtables chosen when they were logged. Dropping it inserts them too: nothing in the
/// log may stay out of a memtable, or the batch would never be published.
pub(super) struct Ticket {
    rows: Vec<(Arc<Memtable>, Vec<Entry>)>,
    batch: Option<Arc<Batch>>,
    publisher: Arc<Publisher>,
}

impl Ticket {
    fn insert(&mut self) {
        for (mem, entries) in self.rows.drain(..) {
            for (k, v) in entries {
                mem.insert(&k, &v);
            }
        }
        if let Some(batch) = self.batch.take() {
            self.publisher.done(&batch);
        }
    }

    /// Inserts this writer's entries, then waits until its whole batch is
    /// visible to reads.
    pub(super) fn finish(mut self) {
        let last = self.batch.as_ref().map(|b| b.last());
        self.insert();
        if let Some(last) = last {
            self.publisher.wait(last);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.insert();
    }
}

impl CommitCore {
    pub(super) fn new(
        log: CommitLog,
        memtable_bytes: usize,
        memtable_budget: u64,
        wake_tx: Sender<()>,
        shape: CommitShape,
    ) -> CommitCore {
        // Only where each append is a request to a remote store: the
        // window and pipelining shape PUTs, not local writes. Where each
        // batch is an fsync, `auto` gathers the writers the last one
        // released instead.
        let remote = log.durable_appends();
        let auto = shape.adaptive_window && shape.window.is_zero();
        CommitCore {
            group: GroupCommit::new(8 << 20, |g: &WriteGroup| g.bytes)
                .with_window(shape.window)
                .with_adaptive_window(remote && auto)
                .with_gathering((!remote && auto).then_some(GATHER_CAP)),
            puts_in_flight: if remote { shape.puts_in_flight } else { 1 },
            out: Mutex::new(0),
            out_done: Condvar::new(),
            log,
            next_seq: AtomicU64::new(1),
            publisher: Arc::default(),
            memtable_bytes,
            written: AtomicU64::new(0),
            budget_step: (memtable_budget / 8).max(1),
            wake_tx,
            open: Mutex::new(true),
        }
    }

    /// Bytes committed since start (to all tablets).
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Closes the log to writers; a batch being written completes first,
    /// including one written after it let go of the commit lock.
    pub(super) fn fence(&self) {
        let mut open = self.open.lock();
        *open = false;
        self.log.wait_inline();
    }

    /// Every entry up to here is in its memtable.
    pub(super) fn visible_seq(&self) -> u64 {
        self.publisher.visible()
    }

    /// Waits until every write that may still be inserting into the frozen
    /// memtable `m` has done so.
    pub(super) fn wait_sealed(&self, m: &Memtable) {
        self.publisher.wait(m.sealed());
    }

    pub(super) fn sync(&self) -> Result<()> {
        self.log.append(Vec::new(), 0, true)
    }

    pub(super) fn group_stats(&self) -> GroupCommitStats {
        self.group.stats()
    }

    /// Commits one caller's rows. A synced write waits for an fsync, which
    /// group commit shares; an unsynced one logs its own rows (handing them
    /// to a leader and being woken again cost more than its own write),
    /// except where every append is a request to a remote store: there
    /// batching is what pays, synced or not.
    fn commit(&self, group: WriteGroup, sync: bool) -> Result<Ticket> {
        if sync || self.log.durable_appends() {
            self.commit_grouped(group, true)
        } else {
            self.commit_one(group)
        }
    }

    /// Commits `group` with the others queued meanwhile: the caller that
    /// gets the lead writes the batch for all of them (LevelDB's
    /// `DBImpl::Write`).
    ///
    /// Where appends are PUTs to a store far away, a leader may hand the
    /// lead on once its batch is numbered and has a log lane, and write it
    /// while the next batch gathers and takes the other lane (at most
    /// [`CommitCore::max_out`] batches out, one per lane). Each batch is
    /// still one object; a writer is acknowledged only once every earlier
    /// batch is done (stored, or failed and never made visible: see
    /// [`Ticket::finish`]). Writes out at once touch different rows (a
    /// writer holds its rows' locks until acknowledged), so recovering a
    /// later batch whose earlier one was never stored applies no row's
    /// write without that row's earlier writes; and nothing of either was
    /// acknowledged.
    fn commit_grouped(&self, group: WriteGroup, sync: bool) -> Result<Ticket> {
        match self.group.submit(group, sync) {
            Turn::Done(ticket) => ticket,
            Turn::Lead(mut leader) => {
                let max = self.max_out();
                if max <= 1 {
                    let (groups, sync) = leader.take();
                    let written = self.lead(groups, sync, None);
                    return leader.finish(written);
                }
                // Wait for a batch to come back before gathering this one,
                // so it takes everything queued meanwhile.
                let _out = self.out_slot(max);
                let (groups, sync) = leader.take();
                let written = self.lead(groups, sync, Some(&mut || leader.pass_on()));
                leader.finish(written)
            }
        }
    }

    /// How many batches may be out at once now.
    fn max_out(&self) -> usize {
        match self.puts_in_flight {
            0 if self.group.write_time() >= PIPELINE_ABOVE => 2,
            0 => 1,
            n => n.min(2),
        }
    }

    /// Waits until fewer than `max` batches are out, and counts one more
    /// until the guard is dropped.
    fn out_slot(&self, max: usize) -> OutSlot<'_> {
        let mut n = self.out.lock();
        while *n >= max {
            self.out_done.wait(&mut n);
        }
        *n += 1;
        OutSlot(self)
    }

    pub(super) fn log(&self) -> &CommitLog {
        &self.log
    }

    /// Commits one unsynced write alone, like a batch of one (logged after
    /// the commit lock is released when a log lane is idle).
    fn commit_one(&self, group: WriteGroup) -> Result<Ticket> {
        self.lead(vec![group], false, None)?
            .pop()
            .ok_or_else(|| Error::corruption("commit: no ticket for a write"))
    }

    /// Logs one batch (by a group-commit leader, or by
    /// [`CommitCore::commit_one`]): under the commit lock, assign sequence
    /// numbers, take a log lane, choose each row's memtable (freezing the
    /// ones this batch fills); then write the log once. Each writer then
    /// inserts its own entries ([`Ticket::finish`]) while the next batch is
    /// being logged. `pass_on`, when given, is called before a batch that
    /// took a lane is written: the next batch may then be written meanwhile.
    fn lead(
        &self,
        groups: Vec<WriteGroup>,
        sync: bool,
        pass_on: Option<&mut dyn FnMut()>,
    ) -> Result<Vec<Ticket>> {
        // Where appends are durable as they return, a synced batch needs no
        // sync (nor to wait for the other lane's write to sync it too).
        let sync = sync && !self.log.durable_appends();
        let open = self.lock_commit();
        if !*open {
            return Err(Error::NotServing {
                server: self.log.dir().to_string(),
                tablet: 0,
            });
        }
        let mut seq = self.next_seq.load(Ordering::Acquire);
        let mut rows_per_group = Vec::with_capacity(groups.len());
        let mut tablets = Vec::new();
        let mut payloads = Vec::new();
        let mut entries = Vec::new();
        // What this batch adds to each tablet's memtable.
        let mut incoming: Vec<(Arc<Tablet>, usize)> = Vec::new();
        for g in groups {
            seq = seq.max(g.floor + 1);
            rows_per_group.push(g.rows.len());
            for mut p in g.rows {
                let malformed = || Error::corruption("malformed key in a write");
                for (k, _) in p.entries.iter_mut() {
                    key::rebase_seq(k, seq).ok_or_else(malformed)?;
                }
                p.encoded.rebase(seq).ok_or_else(malformed)?;
                seq += p.ops;
                match incoming.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &p.tablet)) {
                    Some((_, b)) => *b += p.bytes,
                    None => incoming.push((p.tablet.clone(), p.bytes)),
                }
                tablets.push(p.tablet);
                payloads.push(p.encoded.into_payload());
                entries.push(p.entries);
            }
        }
        let last = seq - 1;
        // An unsynced batch takes an idle lane's file now and writes it once
        // the commit lock is released, beside the next batch's write into
        // the other lane. A synced one writes under the lock, after every
        // such write is done (its sync must cover them).
        let mut deferred = None;
        if !payloads.is_empty() || sync {
            let max_seq = if payloads.is_empty() { 0 } else { last };
            let slot = if sync {
                None
            } else {
                self.log.reserve_inline()
            };
            match slot {
                Some(slot) => deferred = Some((slot, payloads, max_seq)),
                None => {
                    if sync {
                        self.log.wait_inline();
                    }
                    self.log.append(payloads, max_seq, sync)?;
                }
            }
        }
        self.next_seq.store(seq, Ordering::Release);
        let mems: Vec<Arc<Memtable>> = tablets.iter().map(|t| t.current().mem.clone()).collect();
        let mut total = 0;
        for (tablet, bytes) in incoming {
            if tablet.current().mem.approximate_bytes() + bytes >= self.memtable_bytes {
                self.freeze_locked(&tablet, last);
            }
            total += bytes as u64;
        }
        let before = self.written.fetch_add(total, Ordering::Relaxed);
        if before / self.budget_step != (before + total) / self.budget_step {
            let _ = self.wake_tx.try_send(());
        }
        let batch = self.publisher.begin(last, rows_per_group.len());
        let mut rows = mems.into_iter().zip(entries);
        let tickets = rows_per_group
            .into_iter()
            .map(|n| Ticket {
                rows: rows.by_ref().take(n).collect(),
                batch: Some(Arc::clone(&batch)),
                publisher: Arc::clone(&self.publisher),
            })
            .collect::<Vec<Ticket>>();
        drop(open);
        if let Some((slot, payloads, max_seq)) = deferred {
            if let Some(pass_on) = pass_on {
                pass_on();
            }
            if let Err(e) = slot.write(payloads, max_seq) {
                // Not logged: the batch completes without entering a memtable.
                for mut t in tickets {
                    t.rows.clear();
                }
                return Err(e);
            }
        }
        Ok(tickets)
    }

    /// Takes the commit lock. A writer that finds it taken yields its core
    /// for up to [`YIELD_FOR_COMMIT_LOCK`] before it sleeps on the lock.
    fn lock_commit(&self) -> MutexGuard<'_, bool> {
        if let Some(open) = self.open.try_lock() {
            return open;
        }
        let start = Instant::now();
        loop {
            std::thread::yield_now();
            if let Some(open) = self.open.try_lock() {
                return open;
            }
            if start.elapsed() >= YIELD_FOR_COMMIT_LOCK {
                return self.open.lock();
            }
        }
    }

    /// Freezes the tablet's memtable so a minor compaction writes it out.
    pub(super) fn freeze(&self, t: &Tablet) {
        let _open = self.lock_commit();
        let last = self.next_seq.load(Ordering::Acquire).saturating_sub(1);
        self.freeze_locked(t, last);
    }

    /// Freezes under the commit lock: no batch after `last` can have chosen
    /// the memtable, so it is complete once `last` is visible.
    fn freeze_locked(&self, t: &Tablet, last: u64) {
        t.update(|cur| {
            if cur.mem.is_empty() {
                return clone_version(cur);
            }
            cur.mem.seal(last);
            let mut imm = cur.imm.clone();
            imm.push(cur.mem.clone());
            TabletVersion {
                files_version: cur.files_version,
                mem: Arc::new(Memtable::new()),
                imm,
                files: cur.files.clone(),
            }
        });
        let _ = self.wake_tx.try_send(());
    }
}

/// One batch out (see [`CommitCore::out_slot`]).
struct OutSlot<'a>(&'a CommitCore);

impl Drop for OutSlot<'_> {
    fn drop(&mut self) {
        let mut n = self.0.out.lock();
        *n = n.saturating_sub(1);
        self.0.out_done.notify_one();
    }
}

pub(super) fn clone_version(v: &TabletVersion) -> TabletVersion {
    TabletVersion {
        files_version: v.files_version,
        mem: v.mem.clone(),
        imm: v.imm.clone(),
        files: v.files.clone(),
    }
}

impl TabletWrites for TabletServer {
    /// Applies validated row mutations, all in tablet `tablet`. With a
    /// `fence`, the write is refused unless that lock is still held (how
    /// METADATA refuses a server that has been declared dead).
    fn apply(
        &self,
        tablet: u64,
        ms: &[RowMutation],
        sync: bool,
        fence: Option<&Sequencer>,
    ) -> Result<Written> {
        if ms.is_empty() {
            return Ok(Written::default());
        }
        let s = route(self, tablet, ms.iter().map(|m| m.row.as_slice()))?;
        // Outside the gate: a split or unload holds the claim the flush
        // needs while it waits to close the gate.
        wait_for_room(self, &s);
        let _gate = s.admit();
        if fence.is_some_and(|f| !self.env.lock.check_sequencer(f)) {
            return Err(Error::Lock(
                "the writer's lock is no longer held (fenced)".into(),
            ));
        }
        let _locks = self
            .row_locks
            .lock(s.table.id, ms.iter().map(|m| m.row.as_slice()));
        commit_rows(self, &s, ms, sync)
    }

    /// Runs validated row transactions, all in tablet `tablet`, in order.
    fn apply_txns(&self, tablet: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>> {
        let s = route(self, tablet, txns.iter().map(|t| t.row.as_slice()))?;
        wait_for_room(self, &s);
        let _gate = s.admit();
        let mut out = Vec::with_capacity(txns.len());
        // Plain transactions are committed together; one that reads the row
        // first flushes what is pending so it sees earlier ones.
        let mut plain: Vec<RowMutation> = Vec::new();
        for t in txns {
            let simple = t.guard.is_none() && t.ops.iter().all(|o| matches!(o, RowOp::Mutate(_)));
            if simple {
                plain.push(RowMutation {
                    row: t.row.clone(),
                    mutations: t
                        .ops
                        .iter()
                        .filter_map(|o| match o {
                            RowOp::Mutate(m) => Some(m.clone()),
                            _ => None,
                        })
                        .collect(),
                });
                out.push(TxnOutcome {
                    guard_held: true,
                    results: Vec::new(),
                });
                continue;
            }
            flush_plain(self, &s, &mut plain, sync)?;
            let _lock = self
                .row_locks
                .lock(s.table.id, std::iter::once(t.row.as_slice()));
            let (m, outcome) = resolve_txn(self, &s, t)?;
            if !m.mutations.is_empty() {
                commit_rows(self, &s, &[&m], sync)?;
            }
            out.push(outcome);
        }
        flush_plain(self, &s, &mut plain, sync)?;
        Ok(out)
    }
}

/// Makes every later sequence number exceed `floor`, and waits until
/// reads see everything up to it.
pub(super) fn raise_floor(server: &TabletServer, floor: u64) -> Result<()> {
    let group = WriteGroup {
        rows: Vec::new(),
        bytes: 0,
        floor,
    };
    server.core.commit_grouped(group, false).map(Ticket::finish)
}

/// The served tablet `id` if it holds every row of `rows`.
fn route<'r>(
    server: &TabletServer,
    id: u64,
    mut rows: impl Iterator<Item = &'r [u8]>,
) -> Result<Arc<Served>> {
    let s = server.served(id)?;
    if rows.all(|r| s.tablet.contains(r)) {
        Ok(s)
    } else {
        Err(server.not_serving(id))
    }
}

/// Commits validated row mutations. The caller holds the tablet's gate
/// (shared) and the rows' locks.
fn commit_rows<M: Borrow<RowMutation>>(
    server: &TabletServer,
    s: &Served,
    ms: &[M],
    sync: bool,
) -> Result<Written> {
    if s.tablet.retired.load(Ordering::Acquire) {
        return Err(server.not_serving(s.tablet.id));
    }
    let mut rows = Vec::with_capacity(ms.len());
    let mut written = Written::default();
    // A change-logged table's writes hold their commit timestamps open
    // until visible: the change log's watermark stays below them.
    let logs_changes = s.table.schema().logs_changes();
    let mut stamps = Stamps {
        inflight: &server.inflight,
        ts: Vec::new(),
    };
    for m in ms {
        let m = m.borrow();
        let ts = if logs_changes {
            let ts = server.inflight.stamp(|| server.env.next_timestamp());
            stamps.ts.push(ts);
            ts
        } else {
            server.env.next_timestamp()
        };
        // Timestamps only grow, but a row may name its own.
        written.timestamp = written.timestamp.max(ts);
        written.bytes += mutation::value_bytes(m);
        let mut entries = mutation::to_entries(m, 0, ts);
        if logs_changes {
            // In the same log record as the change: logged, and lost, with it.
            entries.push(change_entry(m, ts));
        }
        let ops = entries.len() as u64;
        rows.push(pending(s, entries, ops)?);
    }
    crate::keyviz::record_writes(
        &s.table.name,
        ms.iter().map(|m| &m.borrow().row),
        rows.iter().map(|p| p.bytes as u64),
    );
    let bytes = commit_pending(server, rows, sync)?;
    drop(stamps);
    server.counters.writes.add(ms.len() as u64);
    s.requests.add(ms.len() as u64);
    s.load.bytes.add(bytes as u64);
    for m in ms {
        s.load.touch(&m.borrow().row);
    }
    Ok(written)
}

/// Commits change records alone (no data: garbage collection's, whose
/// cells a compaction drops), one per `(row, ops)`, each at a commit
/// timestamp of its own held open until visible, like a write's. The
/// caller holds the tablet's claim, not its gate; no back-pressure wait
/// (the caller is what makes room).
pub(super) fn commit_records(
    server: &TabletServer,
    s: &Served,
    records: &[(Vec<u8>, Vec<Mutation>)],
    gc: bool,
) -> Result<()> {
    let _gate = s.admit();
    if s.tablet.retired.load(Ordering::Acquire) {
        return Err(server.not_serving(s.tablet.id));
    }
    let mut stamps = Stamps {
        inflight: &server.inflight,
        ts: Vec::new(),
    };
    let mut rows = Vec::with_capacity(records.len());
    for (row, ops) in records {
        let ts = server.inflight.stamp(|| server.env.next_timestamp());
        stamps.ts.push(ts);
        let entry = (
            key::encode(row, CHANGES_FAMILY.as_bytes(), b"", ts, 0, key::Kind::Put),
            changes::record::encode_value(ops, gc),
        );
        rows.push(pending(s, vec![entry], 1)?);
    }
    // Synced: the records are durable before the compaction that drops
    // their cells is installed.
    commit_pending(server, rows, true)?;
    drop(stamps);
    Ok(())
}

/// One row's entries as one commit-log record, encoded ahead of the lock.
fn pending(s: &Served, entries: Vec<Entry>, ops: u64) -> Result<Pending> {
    let record = LogRecord {
        table: s.table.id.to_string(),
        entries,
    };
    let encoded = record.encode_ahead()?;
    let entries = record.entries;
    Ok(Pending {
        tablet: s.tablet.clone(),
        bytes: entries.iter().map(|(k, v)| k.len() + v.len()).sum(),
        entries,
        encoded,
        ops,
    })
}

/// Commits `rows` and makes them visible; returns their bytes.
fn commit_pending(server: &TabletServer, rows: Vec<Pending>, sync: bool) -> Result<usize> {
    let bytes = rows.iter().map(|p| p.bytes).sum();
    let group = WriteGroup {
        rows,
        bytes,
        floor: 0,
    };
    server.core.commit(group, sync)?.finish();
    Ok(bytes)
}

/// The change record of `m` committed at `ts`, with the sequence number
/// after its ops'.
fn change_entry(m: &RowMutation, ts: u64) -> Entry {
    let ops = changes::record::resolved(m, ts);
    (
        key::encode(
            &m.row,
            CHANGES_FAMILY.as_bytes(),
            b"",
            ts,
            mutation::seq_count(m),
            key::Kind::Put,
        ),
        changes::record::encode_value(&ops, false),
    )
}

/// Back-pressure: wait while the tablet has too many frozen memtables.
/// METADATA never waits: its writers are the flushes that make room. The
/// caller must not hold the tablet's gate: a split or unload holds the
/// claim the flush needs while it closes the gate, and may retire the tablet
/// meanwhile. So the limit is soft:
/// writers that passed meanwhile, and a batch of transactions, may freeze
/// more.
fn wait_for_room(server: &TabletServer, s: &Served) {
    // METADATA never waits: writing memtables out records them there.
    if s.table.id == crate::metadata::METADATA_ID {
        return;
    }
    let budget = server.env.opts.memtable_budget;
    let full = || {
        s.tablet.version().imm.len() >= MAX_IMMUTABLE
            || server.pressure.over_limit(server.core.written(), budget)
    };
    if !full() {
        return;
    }
    server.counters.stalls.fetch_add(1, Ordering::Relaxed);
    server.wake();
    // A tablet split or unloaded meanwhile is never flushed again: stop
    // waiting, and the commit, under the gate, refuses it.
    let retired = || s.tablet.retired.load(Ordering::Acquire);
    server
        .stall
        .wait_while(|| full() && !retired() && server.is_serving());
}

pub(super) fn freeze(server: &TabletServer, t: &Tablet) {
    server.core.freeze(t);
}

fn flush_plain(
    server: &TabletServer,
    s: &Served,
    plain: &mut Vec<RowMutation>,
    sync: bool,
) -> Result<()> {
    if plain.is_empty() {
        return Ok(());
    }
    let _locks = server
        .row_locks
        .lock(s.table.id, plain.iter().map(|m| m.row.as_slice()));
    commit_rows(server, s, plain, sync)?;
    plain.clear();
    Ok(())
}

/// Evaluates a transaction's guard and read-modify-write ops against the
/// row as it is now (the caller holds the row lock), giving the plain
/// mutation to commit.
fn resolve_txn(server: &TabletServer, s: &Served, t: &RowTxn) -> Result<(RowMutation, TxnOutcome)> {
    let mut m = RowMutation::new(t.row.clone());
    let held = match &t.guard {
        None => true,
        Some(Guard::Cell(c)) => {
            let cur = cell_of(server, s, &t.row, &c.family, &c.qualifier)?;
            mutation::check(c, cur.as_ref().map(|c| &c.value[..]))
        }
        Some(Guard::Filter(f)) => row_matches(server, s, &t.row, f)?,
    };
    let ops = if held { &t.ops } else { &t.otherwise };
    let superseded = superseded_rmw(ops);
    // Values this transaction has written so far, for later ops of the same column.
    let mut overlay: HashMap<(String, Vec<u8>), Option<Vec<u8>>> = HashMap::new();
    // Per column, the timestamp its read-modify-write value goes at when
    // not the transaction's own (see `Current::stamp`).
    let mut stamps: HashMap<(String, Vec<u8>), u64> = HashMap::new();
    let mut results = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (family, qualifier, new) = match op {
            RowOp::Mutate(mu) => {
                match mu {
                    Mutation::SetCell {
                        family,
                        qualifier,
                        value,
                        ..
                    } => {
                        let key = (family.clone(), qualifier.clone());
                        stamps.remove(&key);
                        overlay.insert(key, Some(value.clone()));
                    }
                    Mutation::DeleteCells {
                        family, qualifier, ..
                    } => {
                        let key = (family.clone(), qualifier.clone());
                        stamps.remove(&key);
                        overlay.remove(&key);
                    }
                    Mutation::DeleteFamily { family } => {
                        stamps.retain(|(f, _), _| f != family);
                        overlay.retain(|(f, _), _| f != family);
                    }
                    Mutation::DeleteRow => {
                        stamps.clear();
                        overlay.clear();
                    }
                    // Aggregate families refuse read-modify-write ops,
                    // so no later op reads this column.
                    Mutation::AddToCell { .. } => {}
                }
                m.mutations.push(mu.clone());
                continue;
            }
            RowOp::Increment {
                family,
                qualifier,
                delta,
            } => {
                let old = current_value(server, s, t, &m, &overlay, family, qualifier)?;
                note_stamp(&mut stamps, family, qualifier, old.stamp);
                (
                    family,
                    qualifier,
                    mutation::increment(old.value.as_deref(), *delta)?,
                )
            }
            RowOp::Append {
                family,
                qualifier,
                data,
            } => {
                // Extended in place: N appends of one column cost O(N)
                // bytes, not a new copy of the growing value each.
                let key = (family.clone(), qualifier.clone());
                let old = match overlay.remove(&key) {
                    Some(v) => v,
                    None => {
                        let old = current_value(server, s, t, &m, &overlay, family, qualifier)?;
                        note_stamp(&mut stamps, family, qualifier, old.stamp);
                        old.value
                    }
                };
                let mut new = old.unwrap_or_default();
                let size = new.len().saturating_add(data.len());
                if size > server.env.opts.max_value_size {
                    return Err(Error::ValueTooLarge {
                        size,
                        limit: server.env.opts.max_value_size,
                    });
                }
                new.extend_from_slice(data);
                (family, qualifier, new)
            }
        };
        if superseded[i] {
            // A later op of this transaction replaces the value (at the
            // same timestamp): only that one is written and reported.
            overlay.insert((family.clone(), qualifier.clone()), Some(new));
            results.push(Vec::new());
            continue;
        }
        overlay.insert((family.clone(), qualifier.clone()), Some(new.clone()));
        m.mutations.push(Mutation::SetCell {
            family: family.clone(),
            qualifier: qualifier.clone(),
            timestamp: stamps.get(&(family.clone(), qualifier.clone())).copied(),
            value: new.clone(),
        });
        results.push(new);
    }
    Ok((
        m,
        TxnOutcome {
            guard_held: held,
            results,
        },
    ))
}

/// The value a read-modify-write op starts from, and where its result goes.
struct Current {
    value: Option<Vec<u8>>,
    /// The stored version's timestamp, if the value is one and it is not
    /// older than now: the result must go at that timestamp, replacing it
    /// (a version at the server's time would lie behind it, and reads
    /// would never see the result). Cloud Bigtable writes a
    /// read-modify-write at the later of its time and the version's.
    stamp: Option<u64>,
}

/// Keeps `stamp` as where column `family:qualifier`'s read-modify-write
/// results go for the rest of the transaction.
fn note_stamp(
    stamps: &mut HashMap<(String, Vec<u8>), u64>,
    family: &str,
    qualifier: &[u8],
    stamp: Option<u64>,
) {
    if let Some(ts) = stamp {
        stamps.insert((family.to_string(), qualifier.to_vec()), ts);
    }
}

/// The value a read-modify-write op starts from: what this transaction
/// wrote to the column, else what is stored (unless this transaction
/// deleted it).
fn current_value(
    server: &TabletServer,
    s: &Served,
    t: &RowTxn,
    pending: &RowMutation,
    overlay: &HashMap<(String, Vec<u8>), Option<Vec<u8>>>,
    family: &str,
    qualifier: &[u8],
) -> Result<Current> {
    if let Some(v) = overlay.get(&(family.to_string(), qualifier.to_vec())) {
        return Ok(Current {
            value: v.clone(),
            stamp: None,
        });
    }
    let deleted = pending.mutations.iter().any(|m| match m {
        Mutation::DeleteRow => true,
        Mutation::DeleteFamily { family: f } => f == family,
        Mutation::DeleteCells {
            family: f,
            qualifier: q,
            range,
        } => f == family && q == qualifier && *range == TimeRange::ALL,
        Mutation::SetCell { .. } | Mutation::AddToCell { .. } => false,
    });
    if deleted {
        return Ok(Current {
            value: None,
            stamp: None,
        });
    }
    let stored = cell_of(server, s, &t.row, family, qualifier)?;
    let now = crate::env::now_micros();
    Ok(Current {
        stamp: stored.as_ref().map(|c| c.timestamp).filter(|&ts| ts >= now),
        value: stored.map(|c| c.value.into_vec()),
    })
}

/// For each op, whether it is an increment or append whose value a later
/// increment or append of the same column replaces, with no op touching the
/// column between them: its value need not be written (all of a
/// transaction's versions share one timestamp, so only the last shows).
fn superseded_rmw(ops: &[RowOp]) -> Vec<bool> {
    let mut out = vec![false; ops.len()];
    // The last read-modify-write op of each column not yet followed by
    // another op touching the column.
    let mut open: HashMap<(&str, &[u8]), usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        match op.reach() {
            Reach::ReadModifyWrite(family, qualifier) => {
                if let Some(prev) = open.insert((family, qualifier), i) {
                    out[prev] = true;
                }
            }
            Reach::Column(family, qualifier) => {
                open.remove(&(family, qualifier));
            }
            Reach::Family(family) => open.retain(|(f, _), _| *f != family),
            Reach::Row => open.clear(),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_of_a_columns_appends_and_increments_is_written() {
        let app = |q: &[u8]| RowOp::Append {
            family: "f".into(),
            qualifier: q.to_vec(),
            data: b"x".to_vec(),
        };
        let inc = |q: &[u8]| RowOp::Increment {
            family: "f".into(),
            qualifier: q.to_vec(),
            delta: 1,
        };
        let set = |q: &[u8]| {
            RowOp::Mutate(Mutation::SetCell {
                family: "f".into(),
                qualifier: q.to_vec(),
                timestamp: None,
                value: Vec::new(),
            })
        };
        let ops = vec![
            app(b"a"),
            inc(b"n"),
            app(b"a"),
            app(b"b"),
            set(b"a"),
            app(b"a"),
            inc(b"n"),
            RowOp::Mutate(Mutation::DeleteRow),
            inc(b"n"),
        ];
        assert_eq!(
            superseded_rmw(&ops),
            vec![true, true, false, false, false, false, false, false, false]
        );
    }
}
