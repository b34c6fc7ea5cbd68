//! Zeros written ahead of a commit log's appends.
//!
//! An fdatasync after an append that grows a file must also commit the file
//! system's journal (new blocks, new size); one after an overwrite of blocks
//! already written only writes data. Measured on ext4 here: a 9,000-byte
//! append + fdatasync ran at about 4,100-5,400/s, the same overwriting
//! written zeros at about 7,400/s. So a file that is synced after many small
//! appends (a commit log) keeps a window of written zeros ahead of its data:
//! the sync that writes a window pays for its blocks once, and the next ones
//! until the window runs low only write data.
//!
//! Unsynced appends gain too: one that grows the file makes ext4 reserve a
//! block, zero the rest of a fresh page and update the size, on every page;
//! one window of zeros pays for that once per megabyte, and appends then
//! overwrite pages already in the page cache (the engine's unsynced
//! sequential writes ran 8-16% faster in alternating runs). The zeros are
//! overwritten long before writeback, so the disk sees the data once.
//!
//! Commit logs use this (`FileStore::create_log`): on the local store their
//! reader takes a zeroed header with zeros to the end of the file as the end;
//! on the chunk layer each replica of a log's chunk keeps its own window past
//! its data (a replica's length is read off its checksum table, so the zeros
//! are never part of it). On both, a background thread renews the window
//! before the appends reach its end ([`Renewer`]). Only small appends get zeros (see [`ahead`]): for
//! a large one the journal commit is a small part of its sync, and zeros
//! would double the bytes it writes.
//!
//! The zeros go out as separate writes of at most 64 KiB, never as one
//! megabyte-long write: ext4 caches a file in folios as large as the write
//! that made them, and every later small write into a folio walks all of
//! its 4 KiB blocks (`ext4_block_write_begin`, `block_commit_write`). Measured
//! here, 1000-byte appends into zeros written a megabyte at a time took
//! 2.4-3.4 µs each, more than into no zeros at all (1.5-2.3 µs); into zeros
//! written 32-128 KiB at a time 1.1-1.6 µs; 4-16 KiB at a time the extra
//! system calls cost more than they save.

use crate::io::{Io, IoMode};
use crossbeam_channel::Sender;
use parking_lot::Mutex;
use std::sync::Arc;
use std::thread::JoinHandle;

/// How far past a synced append's end the zeros reach.
const WINDOW: u64 = 1 << 20;
/// A synced append ending closer than this to the zeros' end first writes
/// the next window.
const LOW: u64 = 64 << 10;
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Zeros to write, up to file offset `upto`: each of `pieces` (file offset,
/// zeros of at most 64 KiB) as a write of its own.
pub(crate) struct Zeros {
    pub(crate) upto: u64,
    pub(crate) pieces: Vec<(u64, &'static [u8])>,
}

/// The zeros to write before a log append of `len` bytes ending at file
/// offset `end`, when zeros are already written up to `zeroed_to`, never
/// past `limit` (the most the file may hold); None if enough lie ahead, the
/// append is large or the file is full.
pub(crate) fn ahead(zeroed_to: u64, end: u64, len: u64, limit: u64) -> Option<Zeros> {
    if end + LOW <= zeroed_to || len > LOW {
        return None;
    }
    let at = zeroed_to.max(end);
    let upto = window_end(end, limit);
    (upto > at).then(|| between(at, upto))
}

/// Where a window of zeros past data ending at `end` stops.
fn window_end(end: u64, limit: u64) -> u64 {
    (end + WINDOW)
        .next_multiple_of(ZEROS.len() as u64)
        .min(limit)
}

/// The zeros of file offsets `[at, upto)`, in writes of at most 64 KiB.
fn between(at: u64, upto: u64) -> Zeros {
    let mut pieces = Vec::new();
    let mut off = at;
    while off < upto {
        let n = (upto - off).min(ZEROS.len() as u64);
        pieces.push((off, &ZEROS[..n as usize]));
        off += n;
    }
    Zeros { upto, pieces }
}

/// A log's zeros are renewed by a background thread ([`Renewer`]) once
/// fewer than this lie ahead of its data: early enough that appends rarely
/// reach the end and write zeros themselves.
pub(crate) const EARLY: u64 = WINDOW / 2;

/// Whether the zeros written up to `zeroed_to` ahead of data ending at
/// `end` run low: some lie ahead (past them an append writes its own, see
/// [`ahead`]), fewer than [`EARLY`], and the file may hold more (`limit`).
pub(crate) fn runs_low(zeroed_to: u64, end: u64, limit: u64) -> bool {
    zeroed_to > end && zeroed_to - end < EARLY && zeroed_to < limit
}

/// The zeros that renew a window that [`runs_low`]: from where they stop
/// to a window past `end`, never past `limit`.
pub(crate) fn refill(zeroed_to: u64, end: u64, limit: u64) -> Option<Zeros> {
    runs_low(zeroed_to, end, limit).then(|| between(zeroed_to, window_end(end, limit)))
}

/// A log whose zeros ahead a [`Renewer`] renews.
///
/// The protocol, for a log with a lock its appends hold while they decide
/// and write zeros (the replica's I/O lock, the local log's `deciding`)
/// and a second one held while zeros are written in the background
/// (`refilling`): `renew` decides what to write ([`refill`]) under the
/// first, takes the second before letting the first go, writes, and only
/// then moves the log's mark of where the zeros end. An append that writes
/// past the mark (its data, whatever its size) or writes zeros of its own
/// ([`ahead`], which moves the mark) first waits for the second, so zeros
/// never land on data; appends into the zeros already written go on
/// meanwhile.
pub(crate) trait Renew: Send + Sync {
    /// Writes the zeros due now, if any (see [`refill`]), through `io`.
    fn renew(&self, io: &Io);
}

/// The thread that renews logs' zeros ahead of their data, off the
/// appends' path. Written by the append that ran out, a window costs it
/// about a third of a millisecond per copy while it holds the commit log
/// and every writer behind it waits (three copies on the chunk layer).
/// The thread starts with the first request.
pub(crate) struct Renewer {
    mode: IoMode,
    /// The queue and its thread, once started.
    queue: Mutex<Option<Queue>>,
}

type Queue = (Sender<Arc<dyn Renew>>, JoinHandle<()>);

impl Renewer {
    /// A renewer writing through an [`Io`] of `mode`.
    pub(crate) fn new(mode: IoMode) -> Renewer {
        Renewer {
            mode,
            queue: Mutex::new(None),
        }
    }

    /// Has `log`'s zeros renewed soon. A log asks once until renewed.
    /// If no thread can be started, nothing happens: the log's appends
    /// write their zeros when they reach the end, as without one.
    pub(crate) fn ask(&self, log: Arc<dyn Renew>) {
        let mut q = self.queue.lock();
        if q.is_none() {
            let (tx, rx) = crossbeam_channel::unbounded::<Arc<dyn Renew>>();
            let mode = self.mode;
            let spawned = std::thread::Builder::new()
                .name("gfs-zeros".into())
                .spawn(move || {
                    let io = Io::new(mode);
                    for log in rx {
                        log.renew(&io);
                    }
                });
            match spawned {
                Ok(t) => *q = Some((tx, t)),
                Err(e) => {
                    log::debug!("gfs: no thread for zeros ahead: {e}");
                    return;
                }
            }
        }
        if let Some((tx, _)) = q.as_ref() {
            // The thread lives until the sender is dropped.
            let _ = tx.send(log);
        }
    }
}

impl Drop for Renewer {
    /// Lets the thread finish what is queued, and waits for it.
    fn drop(&mut self) {
        if let Some((tx, t)) = self.queue.get_mut().take() {
            drop(tx);
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the zeros start and end, checked against their buffers.
    fn span(z: Option<Zeros>) -> Option<(u64, u64)> {
        z.map(|z| {
            // Contiguous pieces of at most 64 KiB up to `upto`.
            let at = z.pieces.first().map_or(z.upto, |p| p.0);
            let mut next = at;
            for &(off, buf) in &z.pieces {
                assert_eq!(off, next);
                assert!(!buf.is_empty() && buf.len() <= ZEROS.len());
                next += buf.len() as u64;
            }
            assert_eq!(next, z.upto);
            (at, z.upto)
        })
    }

    #[test]
    fn a_window_is_written_once_and_renewed_when_it_runs_low() {
        let first = span(ahead(0, 100, 100, u64::MAX)).unwrap();
        assert_eq!(first.0, 100);
        assert!(first.1 >= 100 + WINDOW);
        // Appends inside the window write no zeros.
        assert_eq!(span(ahead(first.1, first.1 - LOW - 1, 100, u64::MAX)), None);
        // Close to its end: the next window starts where the zeros stop.
        let next = span(ahead(first.1, first.1 - 10, 100, u64::MAX)).unwrap();
        assert_eq!(next.0, first.1);
        // Unsynced appends that went past the zeros: they start after the data.
        let past = span(ahead(first.1, first.1 + 5000, 100, u64::MAX)).unwrap();
        assert_eq!(past.0, first.1 + 5000);
    }

    #[test]
    fn a_refill_extends_the_zeros_only_while_some_lie_ahead_and_few_do() {
        // Plenty ahead, or none (an append past them writes its own): nothing.
        assert_eq!(span(refill(WINDOW, 100, u64::MAX)), None);
        assert_eq!(span(refill(WINDOW, WINDOW, u64::MAX)), None);
        assert_eq!(span(refill(WINDOW, WINDOW + 10, u64::MAX)), None);
        // Fewer than EARLY ahead: from where they stop to a window past the data.
        let end = WINDOW - EARLY + 1;
        let (at, upto) = span(refill(WINDOW, end, u64::MAX)).unwrap();
        assert_eq!(at, WINDOW);
        assert!(upto >= end + WINDOW);
        // Never past the limit.
        assert!(!runs_low(WINDOW, end, WINDOW));
        assert_eq!(span(refill(WINDOW, end, WINDOW)), None);
        assert_eq!(
            span(refill(WINDOW, end, WINDOW + 4096)),
            Some((WINDOW, WINDOW + 4096))
        );
    }

    #[test]
    fn a_large_append_gets_no_zeros() {
        assert_eq!(span(ahead(0, LOW + 1, LOW + 1, u64::MAX)), None);
        assert!(ahead(0, LOW, LOW, u64::MAX).is_some());
    }

    #[test]
    fn zeros_stop_at_the_limit() {
        let limit = 3 * WINDOW / 2;
        assert_eq!(span(ahead(0, WINDOW, 100, limit)), Some((WINDOW, limit)));
        // At the limit: nothing more to write.
        assert_eq!(span(ahead(limit, limit - 10, 100, limit)), None);
        assert_eq!(span(ahead(0, limit, 100, limit)), None);
    }
}
