//! A snapshot's part on a tablet server (`TabletSnapshots`): a table's
//! tablets closed to writes for a moment, each one's cut taken then (its
//! files, and the highest sequence number its memtables hold); after the
//! writes go on, what the memtables held up to the cut written into new
//! SSTables; and every file of the cut pinned against GC until the
//! snapshot's manifest names them.
//!
//! Why a hold: sequence numbers are per server, so no number orders two
//! servers' writes. While every tablet of the table is closed at once, a
//! write acknowledged before the hold began is below every cut and one that
//! starts after it ended is above, on every server (see docs/snapshots.md).

use super::tablets::Served;
use super::TabletServer;
use crate::compaction::{write_outputs, OutputCtx, Router};
use crate::compaction_filter::CompactionFilter;
use crate::iterator::InternalIterator;
use crate::merge::MergingIterator;
use crate::metadata::TabletMeta;
use crate::protocol::{HeldTablet, TabletSnapshots, WriteHold};
use crate::tablet::{ClipIterator, TabletVersion};
use crate::{now_micros, Error, Result};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a caller may hold a table's writes.
const MAX_HOLD: Duration = Duration::from_secs(10);
/// How long a hold waits for one tablet's writers to finish.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// How long files stay pinned when nobody unpins them (a snapshot whose
/// taker died): after it they are GC's again.
const PIN_TTL: Duration = Duration::from_secs(3600);

/// Tablets captured at a hold's cut.
struct Captured {
    served: Arc<Served>,
    version: Arc<TabletVersion>,
    cut: u64,
}

/// A hold whose writes may still be held.
struct Held {
    /// Tells the holding thread to let the writes go.
    release: Sender<()>,
    /// Whether it let them go on being told (true) or by running out.
    done: Receiver<bool>,
    captured: Vec<Captured>,
    since: Instant,
}

/// Files pinned for one snapshot, and since when.
struct Pin {
    files: Vec<u64>,
    since: Instant,
}

/// The holds and pins of this server.
#[derive(Default)]
pub(super) struct Holds {
    next: AtomicU64,
    held: Mutex<HashMap<u64, Held>>,
    pins: Arc<Mutex<HashMap<u64, Pin>>>,
}

impl Holds {
    /// Every file pinned now (expired pins are dropped).
    pub(super) fn pinned(&self) -> Vec<u64> {
        let mut pins = self.pins.lock();
        pins.retain(|_, p| p.since.elapsed() < PIN_TTL);
        pins.values()
            .flat_map(|p| p.files.iter().copied())
            .collect()
    }

    fn pin(&self, hold: u64, files: impl IntoIterator<Item = u64>) {
        pin_into(&self.pins, hold, files);
    }
}

fn pin_into(pins: &Mutex<HashMap<u64, Pin>>, hold: u64, files: impl IntoIterator<Item = u64>) {
    pins.lock()
        .entry(hold)
        .or_insert_with(|| Pin {
            files: Vec::new(),
            since: Instant::now(),
        })
        .files
        .extend(files);
}

/// The highest sequence number a tablet's sources hold.
fn cut_of(v: &TabletVersion) -> u64 {
    let mems = std::iter::once(&v.mem).chain(&v.imm).map(|m| m.max_seq());
    let files = v.files.iter().map(|f| f.meta.max_seq);
    mems.chain(files).max().unwrap_or(0)
}

/// The holding thread: closes every tablet's gate, pins the files and
/// reports the cuts, then keeps the gates closed until told or `deadline`.
fn hold_thread(
    hold: u64,
    tablets: Vec<Arc<Served>>,
    deadline: Instant,
    pins: Arc<Mutex<HashMap<u64, Pin>>>,
    cuts: Sender<Result<Vec<Captured>>>,
    release: Receiver<()>,
    done: Sender<bool>,
) {
    let mut gates = Vec::with_capacity(tablets.len());
    for s in &tablets {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(CLOSE_WAIT);
        match s.close_within(wait) {
            Some(g) => gates.push(g),
            None => {
                let _ = cuts.send(Err(Error::Unavailable(format!(
                    "tablet {} stayed busy with writes; try the snapshot again",
                    s.tablet.id
                ))));
                return;
            }
        }
    }
    if tablets
        .iter()
        .any(|s| s.tablet.retired.load(Ordering::Acquire))
    {
        let _ = cuts.send(Err(Error::Unavailable(
            "a tablet split or moved while its writes were held; try again".into(),
        )));
        return;
    }
    let mut captured = Vec::with_capacity(tablets.len());
    for s in &tablets {
        // Pinned, then read again unchanged: a compaction that replaced a
        // file in between would have let GC take it unpinned.
        let version = loop {
            let v = s.tablet.version();
            pin_into(&pins, hold, v.files.iter().map(|f| f.meta.number));
            if Arc::ptr_eq(&v, &s.tablet.version()) {
                break v;
            }
        };
        captured.push(Captured {
            served: s.clone(),
            cut: cut_of(&version),
            version,
        });
    }
    if cuts.send(Ok(captured)).is_err() {
        return;
    }
    let told = match release.recv_deadline(deadline) {
        Ok(()) => true,
        Err(RecvTimeoutError::Disconnected) => true,
        Err(RecvTimeoutError::Timeout) => false,
    };
    drop(gates);
    let _ = done.send(told);
}

/// Writes a captured tablet's memtable entries up to its cut into new
/// SSTables, pinned under `hold`; returns its descriptor with them.
fn write_cut(server: &TabletServer, hold: u64, c: &Captured) -> Result<HeldTablet> {
    let t = &c.served.tablet;
    let v = &c.version;
    let mut files: Vec<_> = v.files.iter().map(|f| f.meta.clone()).collect();
    if !(v.mem.is_empty() && v.imm.iter().all(|m| m.is_empty())) {
        let schema = c.served.table.schema();
        let mems = std::iter::once(&v.mem).chain(&v.imm);
        let children: Vec<Box<dyn InternalIterator>> = mems
            .map(|m| Box::new(m.iter()) as Box<dyn InternalIterator>)
            .collect();
        let (lo, hi) = t.key_bounds();
        let limited = ClipIterator::new(MergingIterator::new(children), lo, hi).up_to(c.cut);
        let mut filter =
            CompactionFilter::new(Box::new(limited), false, schema.clone(), now_micros())?;
        let numbers = &server.env.numbers;
        let made = Mutex::new(Vec::new());
        let new_number = || {
            let n = numbers.new_output()?;
            server.holds.pin(hold, [n]);
            made.lock().push(n);
            Ok(n)
        };
        let ctx = OutputCtx {
            store: &server.env.store,
            cache: &server.env.block_cache,
            target_bytes: server.env.opts.sstable_target_bytes,
            new_number: &new_number,
        };
        let outputs = write_outputs(&ctx, &Router::by_schema(&schema), || filter.next_entry());
        // Pinned as they were made: no longer outputs in flight (on an
        // error the caller unpins them, and GC takes them).
        numbers.release(made.into_inner());
        files.extend(outputs?.iter().map(|o| o.meta.clone()));
    }
    let meta = TabletMeta {
        id: t.id,
        table: t.table_id,
        start: t.start.clone(),
        end: t.end.clone(),
        files,
        redo: None,
    };
    Ok(HeldTablet {
        cut: c.cut,
        meta: meta.encode(),
    })
}

impl TabletSnapshots for TabletServer {
    fn hold_writes(&self, table: u64, hold_ms: u64) -> Result<WriteHold> {
        let hold = self.holds.next.fetch_add(1, Ordering::Relaxed) + 1;
        let deadline = Instant::now() + Duration::from_millis(hold_ms).min(MAX_HOLD);
        let mut tablets: Vec<Arc<Served>> = self
            .served_tablets()
            .into_iter()
            .filter(|s| s.table.id == table && !s.tablet.retired.load(Ordering::Acquire))
            .collect();
        tablets.sort_by_key(|s| s.tablet.id);
        let (cuts_tx, cuts_rx) = bounded(1);
        let (release_tx, release_rx) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let pins = self.holds.pins.clone();
        std::thread::Builder::new()
            .name(format!("{}-hold{hold}", self.name))
            .spawn(move || hold_thread(hold, tablets, deadline, pins, cuts_tx, release_rx, done_tx))
            .map_err(|e| Error::Unavailable(format!("cannot start a hold: {e}")))?;
        let captured = match cuts_rx.recv() {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                self.holds.pins.lock().remove(&hold);
                return Err(e);
            }
            Err(_) => {
                self.holds.pins.lock().remove(&hold);
                return Err(Error::Unavailable("the hold's thread ended".into()));
            }
        };
        let reply = WriteHold {
            hold,
            tablets: captured
                .iter()
                .map(|c| HeldTablet {
                    cut: c.cut,
                    meta: TabletMeta {
                        id: c.served.tablet.id,
                        table,
                        start: c.served.tablet.start.clone(),
                        end: c.served.tablet.end.clone(),
                        files: c.version.files.iter().map(|f| f.meta.clone()).collect(),
                        redo: None,
                    }
                    .encode(),
                })
                .collect(),
        };
        let mut held = self.holds.held.lock();
        // A hold its taker never released (it died) keeps the memtables it
        // captured: dropped once it can no longer be released anyway.
        held.retain(|_, h| h.since.elapsed() < 2 * MAX_HOLD);
        held.insert(
            hold,
            Held {
                release: release_tx,
                done: done_rx,
                captured,
                since: Instant::now(),
            },
        );
        Ok(reply)
    }

    fn release_writes(&self, hold: u64) -> Result<Vec<HeldTablet>> {
        let held = self.holds.held.lock().remove(&hold).ok_or_else(|| {
            Error::Unavailable(format!("no hold {hold} on {} (it ran out)", self.name))
        })?;
        let _ = held.release.send(());
        if !held.done.recv().unwrap_or(false) {
            self.holds.pins.lock().remove(&hold);
            return Err(Error::Unavailable(
                "the hold on writes ran out before the snapshot's cut was taken everywhere".into(),
            ));
        }
        let mut out = Vec::with_capacity(held.captured.len());
        for c in &held.captured {
            match write_cut(self, hold, c) {
                Ok(t) => out.push(t),
                Err(e) => {
                    self.holds.pins.lock().remove(&hold);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn unpin(&self, hold: u64) -> Result<()> {
        if let Some(held) = self.holds.held.lock().remove(&hold) {
            let _ = held.release.send(());
        }
        self.holds.pins.lock().remove(&hold);
        Ok(())
    }
}
