//! The nonces of the calls admitted in the token window, so that a call
//! captured on the wire and sent again is refused. Kept per second of the
//! tokens' time and forgotten once that second is out of the window (a
//! token that old is refused on its time anyway). Bounded: when `max` are
//! held, a new call is refused as UNAVAILABLE (retryable) until old ones
//! leave the window, rather than the memory growing or a replay passing.

use super::secret::TOKEN_WINDOW_SECS;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};

/// The default number of nonces held (about 16,000 calls a second
/// sustained over the window; some 20 MiB at most).
pub const DEFAULT_REPLAY_CACHE: usize = 1_000_000;

/// Whether a call's nonce may be admitted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fresh {
    Yes,
    Replayed,
    Full,
}

pub(crate) struct Nonces {
    inner: Mutex<Inner>,
    max: usize,
}

#[derive(Default)]
struct Inner {
    by_sec: BTreeMap<u64, HashSet<u64>>,
    held: usize,
}

impl Nonces {
    pub(crate) fn new(max: usize) -> Nonces {
        Nonces {
            inner: Mutex::default(),
            max,
        }
    }

    /// Records `nonce` of a token made at `secs`, unless it was seen.
    pub(crate) fn admit(&self, secs: u64, nonce: u64, now: u64) -> Fresh {
        let mut g = self.inner.lock();
        let oldest = now.saturating_sub(TOKEN_WINDOW_SECS);
        while let Some(entry) = g.by_sec.first_entry() {
            if *entry.key() >= oldest {
                break;
            }
            let gone = entry.remove().len();
            g.held -= gone;
        }
        if g.by_sec.get(&secs).is_some_and(|s| s.contains(&nonce)) {
            return Fresh::Replayed;
        }
        if g.held >= self.max {
            return Fresh::Full;
        }
        g.by_sec.entry(secs).or_default().insert(nonce);
        g.held += 1;
        Fresh::Yes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_admitted_once_in_the_window() {
        let n = Nonces::new(10);
        assert_eq!(n.admit(100, 1, 100), Fresh::Yes);
        assert_eq!(n.admit(100, 1, 101), Fresh::Replayed);
        assert_eq!(n.admit(101, 1, 101), Fresh::Yes, "another second's token");
    }

    #[test]
    fn the_cache_is_bounded_and_empties_as_time_passes() {
        let n = Nonces::new(3);
        for i in 0..3 {
            assert_eq!(n.admit(100, i, 100), Fresh::Yes);
        }
        assert_eq!(n.admit(100, 9, 100), Fresh::Full);
        assert_eq!(
            n.admit(100, 0, 100),
            Fresh::Replayed,
            "a replay is still a replay"
        );
        // Once second 100 is out of the window, its nonces are forgotten.
        let later = 101 + TOKEN_WINDOW_SECS;
        assert_eq!(n.admit(later, 9, later), Fresh::Yes);
        assert_eq!(n.inner.lock().held, 1);
    }
}
