//! Which version of a cell the kernel's page cache may hold, and which opens
//! may use it.
//!
//! A reader of a cell may use the page cache (no READ at all on a warm
//! re-read) only while the pages the kernel keeps are of the version the
//! store now holds. Pages are filled by READ replies of handles that do not
//! bypass the cache, and of any handle whose file is mapped (mmap faults
//! read with the mapping's handle, even one opened with direct I/O: a
//! writer's READs are noted as [`UNCOMMITTED`], pages no reader may use);
//! each such reply is noted here *after* it is sent (once
//! the reply is written the kernel has the pages), so a commit that drops
//! the note and then invalidates the inode can never leave pages of an old
//! version behind unnoticed: either the invalidation comes after the pages
//! (and drops them), or the note comes after the drop (and the next open
//! sees a version that is not the store's).
//!
//! The kernel keeps one size per inode and clamps every cached read to it,
//! and a writer's open moves that size (an `O_TRUNC` open sets it to 0 in the
//! kernel, a write past the end grows it) long before its close commits
//! anything. So cached readers and writers of one inode never overlap: a
//! reader reads around the cache while a writer has the cell open, and a
//! writer's open waits for the cached readers to close (they are mostly a
//! `cat`: open, read, close), up to a bound (`reader_wait`) that keeps a
//! reader holding its file open from stalling writers for good. Once one
//! writer has waited that long, later writers do not wait for the same
//! readers again.
//!
//! A reader's open may also hand the kernel the pages itself, before it
//! answers (a store notification): the read that follows then needs no READ
//! request, and no READ means the kernel does not mark the file's atime
//! stale, so a `stat` after reading (as `tar` does) needs no GETATTR either.
//! The store waits for the lock of each page it fills, and a page being read
//! stays locked until its READ is answered, possibly by the very thread
//! storing: so a store is only made by the one reader that may use the cache
//! ([`PageVersions::begin_store`]), and while it runs other readers read
//! around the cache.
//!
//! A warm re-read need not even ask the store (docs/mount.md, "Server
//! calls per file operation"): an open that read the newest version of a
//! cell [`PageVersions::confirm`]s it with the row's stamp taken before the
//! read, and a later reader's open whose row stamp is unchanged (no write
//! to the row was acknowledged since, by any way in: every such write drops
//! the row memo's row before it is acknowledged), whose pages are noted as
//! that very version, and while every other daemon's writes are known to
//! reach this one ([`PageVersions::writes_reported_until`]), opens on the
//! pages alone ([`PageVersions::confirmed`]). What no invalidation reports
//! (a version collected by a family's `max_age`) the caller rules out by
//! the family's rule.

use crate::row_memo::RowStamp;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Pages of more than one version may be cached: never trust them.
const MIXED: u64 = u64::MAX;

/// Pages filled by a writer's READ (its own mmap's faults): bytes no close
/// or fsync committed, never to be shown to a reader.
pub const UNCOMMITTED: u64 = MIXED;

/// Opens of one inode that hold it: readers through the cache, and writers.
#[derive(Default, Clone, Copy)]
struct Holders {
    cached_readers: usize,
    writers: usize,
    /// A writer gave up waiting for the cached readers open now.
    outwaited: bool,
    /// A reader's open is storing pages (see the module comment).
    storing: bool,
}

/// A version an open found to be its cell's newest.
#[derive(Clone, Copy)]
struct Newest {
    ts: u64,
    len: u64,
    /// The row's stamp taken before the read that found it.
    stamp: RowStamp,
}

/// Whether other daemons' writes are known to reach this one.
#[derive(Clone, Copy)]
enum Followed {
    /// No other daemon writes to this daemon's store.
    Alone,
    /// Every write another daemon acknowledges before this instant was
    /// reported to this daemon first (its leases last until then).
    Until(Instant),
}

/// See the module comment.
pub struct PageVersions {
    /// Inode → timestamp of the version its cached pages came from.
    by_ino: Mutex<HashMap<u64, u64>>,
    /// Inode → the version an open last found newest (see the module comment).
    newest: Mutex<HashMap<u64, Newest>>,
    followed: Mutex<Followed>,
    /// Opens answered on the pages alone.
    reopens: AtomicU64,
    /// Inode → the opens holding it (absent: none).
    holders: Mutex<HashMap<u64, Holders>>,
    /// Signalled when an inode's last cached reader closes.
    readers_gone: Condvar,
    /// Writers' opens that waited for readers, and those that gave up.
    waits: AtomicU64,
    waits_expired: AtomicU64,
    /// Opens that handed the kernel a cell's pages themselves.
    stores: AtomicU64,
}

impl Default for PageVersions {
    fn default() -> Self {
        PageVersions {
            by_ino: Mutex::default(),
            newest: Mutex::default(),
            followed: Mutex::new(Followed::Alone),
            reopens: AtomicU64::new(0),
            holders: Mutex::default(),
            readers_gone: Condvar::new(),
            waits: AtomicU64::new(0),
            waits_expired: AtomicU64::new(0),
            stores: AtomicU64::new(0),
        }
    }
}

impl PageVersions {
    /// A READ reply from version `ts` of `ino` was sent.
    pub fn filled(&self, ino: u64, ts: u64) {
        let mut g = self.by_ino.lock();
        let e = g.entry(ino).or_insert(ts);
        if *e != ts {
            *e = MIXED;
        }
    }

    /// Whether any pages the kernel may hold for `ino` are of version `ts`.
    pub fn agree(&self, ino: u64, ts: u64) -> bool {
        self.by_ino.lock().get(&ino).is_none_or(|&v| v == ts)
    }

    /// Forgets `ino` before its pages are invalidated; true if the kernel
    /// may hold pages of it.
    pub fn drop_ino(&self, ino: u64) -> bool {
        let had = self.by_ino.lock().remove(&ino).is_some();
        self.newest.lock().remove(&ino);
        had
    }

    /// An open of `ino` found version `ts` (`len` bytes) newest, by a read
    /// (or a value kept from one) begun at `stamp`.
    pub fn confirm(&self, ino: u64, ts: u64, len: u64, stamp: RowStamp) {
        self.newest.lock().insert(ino, Newest { ts, len, stamp });
    }

    /// The version (timestamp, size) of `ino` that a reader may open on
    /// the kernel's pages alone, its row's stamp being `stamp` now: the one
    /// an open confirmed under that very stamp, if the pages the kernel
    /// may hold are noted as that version and other daemons' writes are
    /// known to reach this daemon now.
    pub fn confirmed(&self, ino: u64, stamp: RowStamp) -> Option<(u64, u64)> {
        let (ts, len) = self.newest_known(ino, stamp)?;
        (self.by_ino.lock().get(&ino) == Some(&ts)).then_some((ts, len))
    }

    /// The version (timestamp, size) of `ino` an open confirmed newest
    /// under its row's stamp `stamp` now, while other daemons' writes are
    /// known to reach this daemon: still the newest (a stat is answered by
    /// it, whatever pages the kernel holds).
    pub fn newest_known(&self, ino: u64, stamp: RowStamp) -> Option<(u64, u64)> {
        let n = *self.newest.lock().get(&ino)?;
        if n.stamp != stamp || !self.writes_reported_now() {
            return None;
        }
        Some((n.ts, n.len))
    }

    /// Whether every write another daemon acknowledges reaches this daemon
    /// first now (or no other daemon shares the store): only then may what
    /// the daemon kept answer for the store.
    pub fn writes_reported_now(&self) -> bool {
        match *self.followed.lock() {
            Followed::Alone => true,
            Followed::Until(t) => Instant::now() < t,
        }
    }

    /// Other daemons share the store: every write one of them acknowledges
    /// before `until` reaches this daemon first (its leases at all of them
    /// last until then); past it, no open is answered on the pages alone.
    pub fn writes_reported_until(&self, until: Instant) {
        *self.followed.lock() = Followed::Until(until);
    }

    /// An open was answered on the pages alone.
    pub fn reopened(&self) {
        self.reopens.fetch_add(1, Ordering::Relaxed);
    }

    /// Opens answered on the pages alone.
    pub fn reopens(&self) -> u64 {
        self.reopens.load(Ordering::Relaxed)
    }

    /// A reader of `ino` asks to use the cache: registered and true unless a
    /// writer has the inode open.
    pub fn reader_opened(&self, ino: u64) -> bool {
        let mut g = self.holders.lock();
        let h = g.entry(ino).or_default();
        if h.writers > 0 || h.storing {
            return false;
        }
        h.cached_readers += 1;
        true
    }

    /// Whether the reader that just opened `ino` through the cache may store
    /// its pages: it is the only such reader (so no READ of the inode can be
    /// waiting, with a page locked, for a FUSE thread), no pages are noted,
    /// and no other store runs. If so, readers opening meanwhile bypass the
    /// cache until [`PageVersions::end_store`].
    pub fn begin_store(&self, ino: u64) -> bool {
        let mut g = self.holders.lock();
        let Some(h) = g.get_mut(&ino) else {
            return false;
        };
        if h.cached_readers != 1 || h.writers > 0 || h.storing {
            return false;
        }
        if self.by_ino.lock().contains_key(&ino) {
            return false;
        }
        h.storing = true;
        true
    }

    /// The store begun by [`PageVersions::begin_store`] is over: the kernel
    /// holds pages of version `stored` (if it was sent).
    pub fn end_store(&self, ino: u64, stored: Option<u64>) {
        if let Some(ts) = stored {
            self.filled(ino, ts);
            self.stores.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(h) = self.holders.lock().get_mut(&ino) {
            h.storing = false;
        }
    }

    /// A handle reading `ino` through the cache was released.
    pub fn reader_closed(&self, ino: u64) {
        let mut g = self.holders.lock();
        if let Some(h) = g.get_mut(&ino) {
            h.cached_readers = h.cached_readers.saturating_sub(1);
            if h.cached_readers == 0 {
                h.outwaited = false;
                self.readers_gone.notify_all();
            }
            if h.cached_readers == 0 && h.writers == 0 {
                g.remove(&ino);
            }
        }
    }

    /// A writer opens `ino`: from now on new readers bypass the cache; waits
    /// up to `limit` for the cached readers to close. False if some were
    /// still open at the limit.
    pub fn writer_opened(&self, ino: u64, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut g = self.holders.lock();
        let h = g.entry(ino).or_default();
        h.writers += 1;
        if h.cached_readers == 0 {
            return true;
        }
        if h.outwaited {
            return false;
        }
        self.waits.fetch_add(1, Ordering::Relaxed);
        while g.get(&ino).is_some_and(|h| h.cached_readers > 0) {
            if self.readers_gone.wait_until(&mut g, deadline).timed_out() {
                if let Some(h) = g.get_mut(&ino).filter(|h| h.cached_readers > 0) {
                    h.outwaited = true;
                    self.waits_expired.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                return true;
            }
        }
        true
    }

    /// A writer of `ino` was released.
    pub fn writer_closed(&self, ino: u64) {
        let mut g = self.holders.lock();
        if let Some(h) = g.get_mut(&ino) {
            h.writers = h.writers.saturating_sub(1);
            if h.cached_readers == 0 && h.writers == 0 {
                g.remove(&ino);
            }
        }
    }

    /// Writers' opens that waited for cached readers, and those that gave up.
    pub fn reader_waits(&self) -> (u64, u64) {
        (
            self.waits.load(Ordering::Relaxed),
            self.waits_expired.load(Ordering::Relaxed),
        )
    }

    /// Opens that handed the kernel a cell's pages themselves.
    pub fn stores(&self) -> u64 {
        self.stores.load(Ordering::Relaxed)
    }

    /// Whether a handle reads `ino` through the cache now.
    pub fn has_readers(&self, ino: u64) -> bool {
        self.holders
            .lock()
            .get(&ino)
            .is_some_and(|h| h.cached_readers > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_agree_until_a_second_version_fills() {
        let p = PageVersions::default();
        assert!(p.agree(1, 10), "no pages: anything agrees");
        p.filled(1, 10);
        assert!(p.agree(1, 10));
        assert!(!p.agree(1, 11));
        p.filled(1, 11);
        assert!(
            !p.agree(1, 10) && !p.agree(1, 11),
            "mixed pages agree with nothing"
        );
        assert!(p.drop_ino(1));
        assert!(!p.drop_ino(1));
        assert!(p.agree(1, 11));
    }

    #[test]
    fn only_a_sole_reader_stores_and_others_read_around_it() {
        let p = PageVersions::default();
        assert!(!p.begin_store(1), "no reader is open");
        assert!(p.reader_opened(1));
        assert!(p.begin_store(1));
        assert!(!p.reader_opened(1), "a store runs: read around the cache");
        assert!(!p.begin_store(1), "one store at a time");
        p.end_store(1, Some(7));
        assert!(
            p.agree(1, 7) && !p.agree(1, 8),
            "the stored version is noted"
        );
        assert!(p.reader_opened(1));
        assert!(!p.begin_store(1), "two readers, and pages are noted");
        p.reader_closed(1);
        p.reader_closed(1);
        assert!(p.reader_opened(1));
        assert!(
            !p.begin_store(1),
            "pages are noted: the kernel may have them"
        );
        p.reader_closed(1);

        assert!(p.reader_opened(2));
        assert!(p.reader_opened(2));
        assert!(!p.begin_store(2), "another reader's READ may hold a page");
    }

    #[test]
    fn a_confirmed_version_holds_while_its_stamp_pages_and_leases_do() {
        let memo = crate::row_memo::RowMemo::default();
        let p = PageVersions::default();
        let stamp = memo.stamp("t", b"r");
        p.confirm(1, 10, 5, stamp);
        assert_eq!(p.confirmed(1, stamp), None, "no pages noted");
        p.filled(1, 10);
        assert_eq!(p.confirmed(1, stamp), Some((10, 5)));
        assert_eq!(p.confirmed(2, stamp), None, "another inode");
        memo.forget_row("t", b"r");
        assert_eq!(p.confirmed(1, memo.stamp("t", b"r")), None, "a write");
        let stamp = memo.stamp("t", b"r");
        p.confirm(1, 10, 5, stamp);
        p.writes_reported_until(Instant::now() + Duration::from_secs(600));
        assert_eq!(p.confirmed(1, stamp), Some((10, 5)));
        p.writes_reported_until(Instant::now());
        assert_eq!(p.confirmed(1, stamp), None, "the leases ended");
        p.writes_reported_until(Instant::now() + Duration::from_secs(600));
        p.filled(1, 11);
        assert_eq!(p.confirmed(1, stamp), None, "mixed pages");
        p.drop_ino(1);
        p.filled(1, 10);
        assert_eq!(p.confirmed(1, stamp), None, "dropped with the pages");
    }

    #[test]
    fn readers_are_counted_per_inode() {
        let p = PageVersions::default();
        assert!(p.reader_opened(1));
        assert!(p.reader_opened(1));
        p.reader_closed(1);
        assert!(p.has_readers(1));
        p.reader_closed(1);
        assert!(!p.has_readers(1));
        p.reader_closed(1);
        assert!(!p.has_readers(2));
    }

    #[test]
    fn a_writer_keeps_readers_off_the_cache_until_it_closes() {
        let p = PageVersions::default();
        assert!(p.writer_opened(1, Duration::ZERO));
        assert!(!p.reader_opened(1), "a writer is open");
        assert!(p.reader_opened(2), "other inodes are not affected");
        p.writer_closed(1);
        assert!(p.reader_opened(1));
    }

    #[test]
    fn a_writer_waits_for_cached_readers_and_gives_up_at_its_limit() {
        let p = std::sync::Arc::new(PageVersions::default());
        assert!(p.reader_opened(1));
        assert!(
            !p.writer_opened(1, Duration::from_millis(10)),
            "the reader stayed open"
        );
        p.writer_closed(1);
        assert!(
            !p.writer_opened(1, Duration::from_secs(600)),
            "a reader one writer gave up on is not waited for again"
        );
        p.writer_closed(1);
        assert_eq!(p.waits_expired.load(Ordering::Relaxed), 1);
        p.reader_closed(1);
        assert!(p.reader_opened(1));
        let closer = {
            let p = p.clone();
            std::thread::spawn(move || {
                // Close once the writer below is waiting (new readers are
                // refused from then on).
                while p.reader_opened(1) {
                    p.reader_closed(1);
                    std::thread::yield_now();
                }
                p.reader_closed(1);
            })
        };
        assert!(
            p.writer_opened(1, Duration::from_secs(600)),
            "woken by the reader's close"
        );
        closer.join().expect("closer");
        assert!(!p.has_readers(1));
    }
}
