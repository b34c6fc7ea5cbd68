//! Which version of a cell the kernel's page cache may hold.
//!
//! A reader of a cell may use the page cache (no READ at all on a warm
//! re-read) only while the pages the kernel keeps are of the version the
//! store now holds. Pages are filled by READ replies of handles that do not
//! bypass the cache; each such reply is noted here *after* it is sent (once
//! the reply is written the kernel has the pages), so a commit that drops
//! the note and then invalidates the inode can never leave pages of an old
//! version behind unnoticed: either the invalidation comes after the pages
//! (and drops them), or the note comes after the drop (and the next open
//! sees a version that is not the store's).

use parking_lot::Mutex;
use std::collections::HashMap;

/// Pages of more than one version may be cached: never trust them.
const MIXED: u64 = u64::MAX;

/// See the module comment.
#[derive(Default)]
pub struct PageVersions {
    /// Inode → timestamp of the version its cached pages came from.
    by_ino: Mutex<HashMap<u64, u64>>,
    /// Inode → open handles reading it through the cache.
    readers: Mutex<HashMap<u64, usize>>,
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
        self.by_ino.lock().remove(&ino).is_some()
    }

    /// A handle reading `ino` through the cache was opened.
    pub fn reader_opened(&self, ino: u64) {
        *self.readers.lock().entry(ino).or_default() += 1;
    }

    /// A handle reading `ino` through the cache was released.
    pub fn reader_closed(&self, ino: u64) {
        let mut g = self.readers.lock();
        if let Some(n) = g.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                g.remove(&ino);
            }
        }
    }

    /// Whether a handle reads `ino` through the cache now.
    pub fn has_readers(&self, ino: u64) -> bool {
        self.readers.lock().contains_key(&ino)
    }

    /// Inodes with pages noted (for `.bigtable/stats`).
    pub fn len(&self) -> usize {
        self.by_ino.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    fn readers_are_counted_per_inode() {
        let p = PageVersions::default();
        p.reader_opened(1);
        p.reader_opened(1);
        p.reader_closed(1);
        assert!(p.has_readers(1));
        p.reader_closed(1);
        assert!(!p.has_readers(1));
        p.reader_closed(1);
        assert!(!p.has_readers(2));
    }
}
