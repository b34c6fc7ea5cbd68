//! The write path: rows routed to a served tablet, row locks, back-pressure,
//! then group commit (one log write for many writers, paper §6).

use super::{Served, TabletServer};
use crate::data::*;
use crate::key;
use crate::log::{CommitLog, LogRecord};
use crate::memtable::Memtable;
use crate::mutation;
use crate::tablet::{Tablet, TabletVersion};
use crate::txn::{Guard, RowOp, RowTxn, TxnOutcome};
use crate::{Error, Result};
use chubby::Sequencer;
use crossbeam_channel::Sender;
use parking_lot::{Mutex, MutexGuard};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Writers wait while a tablet has this many memtables waiting to be written out.
const MAX_IMMUTABLE: usize = 4;

/// The row-lock stripes a write holds (one, for a single row, without a Vec).
#[allow(dead_code)] // held for their Drop
enum RowLocks<'a> {
    One(MutexGuard<'a, ()>),
    Many(Vec<MutexGuard<'a, ()>>),
}

/// One row's part of a write: its tablet and its log record (entries encoded
/// with sequence numbers 0.. that the commit leader rebases).
pub(super) struct Pending {
    tablet: Arc<Tablet>,
    record: LogRecord,
    ops: u64,
}

/// What one caller hands to group commit.
pub(super) struct WriteGroup {
    rows: Vec<Pending>,
    pub(super) bytes: usize,
    /// Sequence numbers from this batch on must exceed this (a tablet loaded
    /// from elsewhere brings the numbers it already used).
    floor: u64,
}

/// What the group-commit leader needs: the log and the sequence counters.
pub(super) struct CommitCore {
    log: CommitLog,
    /// Next sequence number to assign (touched only by the commit leader).
    next_seq: AtomicU64,
    /// Every entry up to here is in its memtable: reads use it as their snapshot.
    visible_seq: AtomicU64,
    memtable_bytes: usize,
    wake_tx: Sender<()>,
    /// False once the server is fenced: nothing more reaches the log.
    open: Mutex<bool>,
}

impl CommitCore {
    pub(super) fn new(log: CommitLog, memtable_bytes: usize, wake_tx: Sender<()>) -> CommitCore {
        CommitCore {
            log,
            next_seq: AtomicU64::new(1),
            visible_seq: AtomicU64::new(0),
            memtable_bytes,
            wake_tx,
            open: Mutex::new(true),
        }
    }

    /// Closes the log to writers; a batch being written completes first.
    pub(super) fn fence(&self) {
        *self.open.lock() = false;
    }

    pub(super) fn visible_seq(&self) -> u64 {
        self.visible_seq.load(Ordering::Acquire)
    }

    pub(super) fn sync(&self) -> Result<()> {
        self.log.append(&[], true)
    }

    pub(super) fn log(&self) -> &CommitLog {
        &self.log
    }

    /// Freezes the tablet's memtable between batches: a leader inserts into
    /// the memtable it read while holding the commit lock, and a memtable
    /// frozen under it would be written out while still being filled.
    pub(super) fn freeze(&self, t: &Tablet) {
        let _between_batches = self.open.lock();
        freeze(t, &self.wake_tx);
    }

    /// Run by the group-commit leader for one batch: assign sequence numbers,
    /// write the log once, fill the memtables, publish.
    pub(super) fn lead(&self, groups: Vec<WriteGroup>, sync: bool) -> Result<Vec<()>> {
        let open = self.open.lock();
        if !*open {
            return Err(Error::NotServing {
                server: self.log.dir().to_string(),
                tablet: 0,
            });
        }
        let n = groups.len();
        let mut seq = self.next_seq.load(Ordering::Acquire);
        let mut tablets = Vec::new();
        let mut records = Vec::new();
        for g in groups {
            seq = seq.max(g.floor + 1);
            for mut p in g.rows {
                for (k, _) in p.record.entries.iter_mut() {
                    key::rebase_seq(k, seq)
                        .ok_or_else(|| Error::corruption("malformed key in a write"))?;
                }
                seq += p.ops;
                tablets.push(p.tablet);
                records.push(p.record);
            }
        }
        if !records.is_empty() || sync {
            self.log.append(&records, sync)?;
        }
        let mut touched: Vec<&Arc<Tablet>> = Vec::new();
        for (tablet, rec) in tablets.iter().zip(records) {
            let mem = tablet.version().mem.clone();
            for (k, v) in rec.entries {
                mem.insert(&k, &v);
            }
            if !touched.iter().any(|t| Arc::ptr_eq(t, tablet)) {
                touched.push(tablet);
            }
        }
        self.next_seq.store(seq, Ordering::Release);
        self.visible_seq.store(seq - 1, Ordering::Release);
        drop(open);
        for t in touched {
            if t.version().mem.approximate_bytes() >= self.memtable_bytes {
                freeze(t, &self.wake_tx);
            }
        }
        Ok(vec![(); n])
    }
}

/// Freezes the tablet's memtable so a minor compaction writes it out. The
/// caller is the commit leader, or holds the commit lock
/// ([`CommitCore::freeze`]).
fn freeze(t: &Tablet, wake: &Sender<()>) {
    t.update(|cur| {
        if cur.mem.is_empty() {
            return clone_version(cur);
        }
        let mut imm = cur.imm.clone();
        imm.push(cur.mem.clone());
        TabletVersion {
            files_version: cur.files_version,
            mem: Arc::new(Memtable::new()),
            imm,
            files: cur.files.clone(),
        }
    });
    let _ = wake.try_send(());
}

pub(super) fn clone_version(v: &TabletVersion) -> TabletVersion {
    TabletVersion {
        files_version: v.files_version,
        mem: v.mem.clone(),
        imm: v.imm.clone(),
        files: v.files.clone(),
    }
}

impl TabletServer {
    /// Makes every later sequence number exceed `floor`, and waits until
    /// reads see everything up to it.
    pub(super) fn raise_floor(&self, floor: u64) -> Result<()> {
        self.commit.submit(
            WriteGroup {
                rows: Vec::new(),
                bytes: 0,
                floor,
            },
            false,
        )
    }

    fn stripe(&self, table: u64, row: &[u8]) -> usize {
        let h = seahash::hash(row) ^ table.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h % self.row_locks.len() as u64) as usize
    }

    /// Locks the stripes of all `rows`, in index order so lockers never deadlock.
    fn lock_rows<'a, 'r>(
        &'a self,
        table: u64,
        rows: impl Iterator<Item = &'r [u8]>,
    ) -> RowLocks<'a> {
        let mut idx: Vec<usize> = Vec::new();
        let mut rows = rows.map(|r| self.stripe(table, r));
        let Some(first) = rows.next() else {
            return RowLocks::Many(Vec::new());
        };
        let Some(second) = rows.next() else {
            return RowLocks::One(self.row_locks[first].lock());
        };
        idx.extend([first, second]);
        idx.extend(rows);
        idx.sort_unstable();
        idx.dedup();
        RowLocks::Many(idx.into_iter().map(|i| self.row_locks[i].lock()).collect())
    }

    /// The served tablet `id` if it holds every row of `rows`.
    fn route<'r>(&self, id: u64, mut rows: impl Iterator<Item = &'r [u8]>) -> Result<Arc<Served>> {
        let s = self.served(id)?;
        if rows.all(|r| s.tablet.contains(r)) {
            Ok(s)
        } else {
            Err(self.not_serving(id))
        }
    }

    /// Commits validated row mutations. The caller holds the tablet's gate
    /// (shared) and the rows' locks.
    fn commit_rows<M: Borrow<RowMutation>>(&self, s: &Served, ms: &[M], sync: bool) -> Result<()> {
        if s.tablet.retired.load(Ordering::Acquire) {
            return Err(self.not_serving(s.tablet.id));
        }
        let mut rows = Vec::with_capacity(ms.len());
        for m in ms {
            let m = m.borrow();
            let ts = self.env.next_timestamp();
            let entries = mutation::to_entries(m, 0, ts);
            rows.push(Pending {
                tablet: s.tablet.clone(),
                record: LogRecord {
                    table: s.table.id.to_string(),
                    entries,
                },
                ops: m.mutations.len() as u64,
            });
        }
        self.wait_for_room(s);
        let bytes = rows
            .iter()
            .flat_map(|p| p.record.entries.iter())
            .map(|(k, v)| k.len() + v.len())
            .sum();
        self.commit.submit(
            WriteGroup {
                rows,
                bytes,
                floor: 0,
            },
            sync,
        )?;
        self.counters
            .writes
            .fetch_add(ms.len() as u64, Ordering::Relaxed);
        s.requests.fetch_add(ms.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Back-pressure: wait while the tablet has too many frozen memtables.
    /// METADATA never waits: its writers are the flushes that make room.
    fn wait_for_room(&self, s: &Served) {
        let full = || {
            s.table.id != crate::metadata::METADATA_ID
                && s.tablet.version().imm.len() >= MAX_IMMUTABLE
        };
        if !full() {
            return;
        }
        self.counters.stalls.fetch_add(1, Ordering::Relaxed);
        self.wake();
        let mut g = self.stall_lock.lock();
        while full() && self.is_serving() {
            self.stall_cv.wait_for(&mut g, Duration::from_millis(50));
        }
    }

    pub(super) fn freeze(&self, t: &Tablet) {
        self.core.freeze(t);
    }

    /// Applies validated row mutations, all in tablet `tablet`. With a
    /// `fence`, the write is refused unless that lock is still held (how
    /// METADATA refuses a server that has been declared dead).
    pub fn apply(
        &self,
        tablet: u64,
        ms: &[RowMutation],
        sync: bool,
        fence: Option<&Sequencer>,
    ) -> Result<()> {
        if ms.is_empty() {
            return Ok(());
        }
        let s = self.route(tablet, ms.iter().map(|m| m.row.as_slice()))?;
        let _gate = s.gate.read();
        if fence.is_some_and(|f| !self.env.lock.check_sequencer(f)) {
            return Err(Error::Lock(
                "the writer's lock is no longer held (fenced)".into(),
            ));
        }
        let _locks = self.lock_rows(s.table.id, ms.iter().map(|m| m.row.as_slice()));
        self.commit_rows(&s, ms, sync)
    }

    /// Runs validated row transactions, all in tablet `tablet`, in order.
    pub fn apply_txns(&self, tablet: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>> {
        let s = self.route(tablet, txns.iter().map(|t| t.row.as_slice()))?;
        let _gate = s.gate.read();
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
            self.flush_plain(&s, &mut plain, sync)?;
            let _lock = self.lock_rows(s.table.id, std::iter::once(t.row.as_slice()));
            let (m, outcome) = self.resolve_txn(&s, t)?;
            if !m.mutations.is_empty() {
                self.commit_rows(&s, &[&m], sync)?;
            }
            out.push(outcome);
        }
        self.flush_plain(&s, &mut plain, sync)?;
        Ok(out)
    }

    fn flush_plain(&self, s: &Served, plain: &mut Vec<RowMutation>, sync: bool) -> Result<()> {
        if plain.is_empty() {
            return Ok(());
        }
        let _locks = self.lock_rows(s.table.id, plain.iter().map(|m| m.row.as_slice()));
        self.commit_rows(s, plain, sync)?;
        plain.clear();
        Ok(())
    }

    /// Evaluates a transaction's guard and read-modify-write ops against the
    /// row as it is now (the caller holds the row lock), giving the plain
    /// mutation to commit.
    fn resolve_txn(&self, s: &Served, t: &RowTxn) -> Result<(RowMutation, TxnOutcome)> {
        let mut m = RowMutation::new(t.row.clone());
        let held = match &t.guard {
            None => true,
            Some(Guard::Cell(c)) => {
                let cur = self.cell_of(s, &t.row, &c.family, &c.qualifier)?;
                mutation::check(c, cur.as_ref().map(|c| c.value.as_slice()))
            }
            Some(Guard::Filter(f)) => self.row_matches(s, &t.row, f)?,
        };
        let ops = if held { &t.ops } else { &t.otherwise };
        // Values this transaction has written so far, for later ops of the same column.
        let mut overlay: HashMap<(String, Vec<u8>), Option<Vec<u8>>> = HashMap::new();
        let mut results = Vec::new();
        for op in ops {
            let (family, qualifier, new) = match op {
                RowOp::Mutate(mu) => {
                    match mu {
                        Mutation::SetCell {
                            family,
                            qualifier,
                            value,
                            ..
                        } => {
                            overlay
                                .insert((family.clone(), qualifier.clone()), Some(value.clone()));
                        }
                        Mutation::DeleteCells {
                            family, qualifier, ..
                        } => {
                            overlay.remove(&(family.clone(), qualifier.clone()));
                        }
                        Mutation::DeleteFamily { family } => {
                            overlay.retain(|(f, _), _| f != family)
                        }
                        Mutation::DeleteRow => overlay.clear(),
                    }
                    m.mutations.push(mu.clone());
                    continue;
                }
                RowOp::Increment {
                    family,
                    qualifier,
                    delta,
                } => {
                    let old = self.current_value(s, t, &m, &overlay, family, qualifier)?;
                    (
                        family,
                        qualifier,
                        mutation::increment(old.as_deref(), *delta)?,
                    )
                }
                RowOp::Append {
                    family,
                    qualifier,
                    data,
                } => {
                    let old = self.current_value(s, t, &m, &overlay, family, qualifier)?;
                    let new = mutation::append(old.as_deref(), data, self.env.opts.max_value_size)?;
                    (family, qualifier, new)
                }
            };
            overlay.insert((family.clone(), qualifier.clone()), Some(new.clone()));
            m.mutations.push(Mutation::SetCell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp: None,
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

    /// The value a read-modify-write op starts from: what this transaction
    /// wrote to the column, else what is stored (unless this transaction
    /// deleted it).
    fn current_value(
        &self,
        s: &Served,
        t: &RowTxn,
        pending: &RowMutation,
        overlay: &HashMap<(String, Vec<u8>), Option<Vec<u8>>>,
        family: &str,
        qualifier: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        if let Some(v) = overlay.get(&(family.to_string(), qualifier.to_vec())) {
            return Ok(v.clone());
        }
        let deleted = pending.mutations.iter().any(|m| match m {
            Mutation::DeleteRow => true,
            Mutation::DeleteFamily { family: f } => f == family,
            Mutation::DeleteCells {
                family: f,
                qualifier: q,
                range,
            } => f == family && q == qualifier && *range == TimeRange::ALL,
            Mutation::SetCell { .. } => false,
        });
        if deleted {
            return Ok(None);
        }
        Ok(self.cell_of(s, &t.row, family, qualifier)?.map(|c| c.value))
    }
}
