//! The master's memory of tablet loads between balancing rounds: each
//! tablet's rate (requests a second, plus one for every [`BYTES_PER_UNIT`]
//! bytes they move) from the growth of its counters, smoothed; since when
//! it has been hot; when it last moved; and the rows it split hot tablets
//! at. The choices made from it are pure functions in `balance.rs`.

use super::balance::TabletLoad;
use crate::metadata::METADATA_ID;
use crate::protocol::ServedTablet;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Bytes moved that count as one request.
pub const BYTES_PER_UNIT: u64 = 4096;
/// A tablet that moved is not moved again for this long (so that noise in
/// the rates cannot bounce it between two servers).
pub const MOVE_COOLDOWN: Duration = Duration::from_secs(30);
/// Counters read closer together than this leave the rate as it was.
const MIN_INTERVAL: Duration = Duration::from_millis(500);
/// Load-split rows remembered.
const SPLITS_KEPT: usize = 1024;

/// When a tablet is hot, and how the rates are smoothed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadConfig {
    /// A rate above this is hot (0: nothing is).
    pub split_rate: u64,
    /// How long a tablet must stay hot before it is split.
    pub split_after: Duration,
    /// How long the two halves of a split are kept from merging back.
    pub split_cooldown: Duration,
}

#[derive(Debug, Clone)]
struct Seen {
    requests: u64,
    bytes: u64,
    at: Instant,
    /// Smoothed rate; None until two readings are far enough apart.
    rate: Option<f64>,
    hot_since: Option<Instant>,
    moved_at: Option<Instant>,
}

/// The master's load memory (see the module doc).
#[derive(Debug, Default)]
pub struct LoadTracker {
    tablets: HashMap<u64, Seen>,
    splits: VecDeque<(u64, Vec<u8>, Instant)>,
    /// Tablets a reported split made, whose start row (the split's row) is
    /// recorded in `splits` when a server first reports them.
    reported: VecDeque<(u64, Instant)>,
}

impl LoadTracker {
    /// Takes one server's reports of its tablets at `now`, as the
    /// balancer sees them.
    pub fn observe(
        &mut self,
        now: Instant,
        served: Vec<ServedTablet>,
        cfg: &LoadConfig,
    ) -> Vec<TabletLoad> {
        self.reported
            .retain(|(_, at)| now.saturating_duration_since(*at) < cfg.split_cooldown);
        served
            .into_iter()
            .map(|t| {
                if let Some(i) = self.reported.iter().position(|(id, _)| *id == t.id) {
                    if let Some((_, at)) = self.reported.remove(i) {
                        self.split(t.table_id, t.start.clone(), at);
                    }
                }
                let seen = self.tablets.entry(t.id).or_insert_with(|| Seen {
                    requests: t.requests,
                    bytes: t.traffic_bytes,
                    at: now,
                    rate: None,
                    hot_since: None,
                    moved_at: None,
                });
                let dt = now.saturating_duration_since(seen.at);
                if t.requests < seen.requests || t.traffic_bytes < seen.bytes {
                    // Loaded again (moved here): its counters started over.
                    (seen.requests, seen.bytes, seen.at) = (t.requests, t.traffic_bytes, now);
                } else if dt >= MIN_INTERVAL {
                    let units = (t.requests - seen.requests) as f64
                        + ((t.traffic_bytes - seen.bytes) / BYTES_PER_UNIT) as f64;
                    let now_rate = units / dt.as_secs_f64();
                    // Half the old rate, half the new: one busy second is
                    // not a hot tablet.
                    seen.rate = Some(seen.rate.map_or(now_rate, |r| (r + now_rate) / 2.0));
                    (seen.requests, seen.bytes, seen.at) = (t.requests, t.traffic_bytes, now);
                }
                let rate = seen.rate.unwrap_or(0.0).round() as u64;
                if cfg.split_rate > 0 && rate > cfg.split_rate {
                    seen.hot_since.get_or_insert(now);
                } else {
                    seen.hot_since = None;
                }
                let hot = seen
                    .hot_since
                    .is_some_and(|h| now.saturating_duration_since(h) >= cfg.split_after);
                let cooling = seen
                    .moved_at
                    .is_some_and(|m| now.saturating_duration_since(m) < MOVE_COOLDOWN);
                let root = t.table_id == METADATA_ID && t.start.is_empty();
                TabletLoad {
                    id: t.id,
                    table: t.table_id,
                    movable: !root,
                    measured: seen.rate.is_some(),
                    load: rate,
                    hot,
                    cooling,
                    split_row: t.load_split.filter(|_| hot && t.table_id != METADATA_ID),
                    start: t.start,
                    end: t.end,
                    bytes: t.bytes,
                    clean: t.clean,
                }
            })
            .collect()
    }

    /// Forgets tablets no longer served anywhere (split, merged, dropped).
    pub fn retain(&mut self, served: &HashSet<u64>) {
        self.tablets.retain(|id, _| served.contains(id));
    }

    /// Tablet `id` moved at `now`.
    pub fn moved(&mut self, id: u64, now: Instant) {
        if let Some(s) = self.tablets.get_mut(&id) {
            s.moved_at = Some(now);
        }
    }

    /// A hot tablet of `table` was split at `row` at `now`.
    pub fn split(&mut self, table: u64, row: Vec<u8>, now: Instant) {
        self.splits.push_back((table, row, now));
        while self.splits.len() > SPLITS_KEPT {
            self.splits.pop_front();
        }
    }

    /// A server reported splitting a tablet into `children` (in row order)
    /// at `now`: an operator's `split`, a load split or a size split. The
    /// rows between them, learned when the children are first reported,
    /// count as splits made at `now`, so that the master's merge of small
    /// tablets does not undo an operator's split within the cooldown.
    pub fn split_reported(&mut self, children: &[u64], now: Instant) {
        for id in children.iter().skip(1) {
            self.reported.push_back((*id, now));
        }
        while self.reported.len() > SPLITS_KEPT {
            self.reported.pop_front();
        }
    }

    /// Whether `table` was split at `row` within `cooldown` (its halves
    /// must not merge back yet).
    pub fn split_recently(&self, table: u64, row: &[u8], now: Instant, cooldown: Duration) -> bool {
        self.splits.iter().any(|(t, r, at)| {
            *t == table && r == row && now.saturating_duration_since(*at) < cooldown
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(id: u64, requests: u64, bytes: u64) -> ServedTablet {
        ServedTablet {
            id,
            table_id: 7,
            start: b"a".to_vec(),
            end: None,
            bytes: 0,
            requests,
            clean: true,
            files: vec![],
            traffic_bytes: bytes,
            load_split: Some(b"m".to_vec()),
        }
    }

    const CFG: LoadConfig = LoadConfig {
        split_rate: 100,
        split_after: Duration::from_secs(3),
        split_cooldown: Duration::from_secs(600),
    };

    #[test]
    fn rates_come_from_counter_growth_and_bytes_count_too() {
        let mut tr = LoadTracker::default();
        let t0 = Instant::now();
        let l = tr.observe(t0, vec![served(1, 0, 0)], &CFG);
        assert!(!l[0].measured, "one reading has no rate");
        let l = tr.observe(
            t0 + Duration::from_secs(1),
            vec![served(1, 50, 50 * BYTES_PER_UNIT)],
            &CFG,
        );
        assert!(l[0].measured);
        assert_eq!(l[0].load, 100);
        // Too soon after the last reading: the rate stays.
        let l = tr.observe(
            t0 + Duration::from_millis(1100),
            vec![served(1, 1000, 50 * BYTES_PER_UNIT)],
            &CFG,
        );
        assert_eq!(l[0].load, 100);
    }

    #[test]
    fn a_tablet_is_hot_only_after_staying_above_the_rate() {
        let mut tr = LoadTracker::default();
        let t0 = Instant::now();
        let mut hot_at = None;
        for s in 0..10u64 {
            let l = tr.observe(
                t0 + Duration::from_secs(s),
                vec![served(1, s * 500, 0)],
                &CFG,
            );
            if l[0].hot && hot_at.is_none() {
                hot_at = Some(s);
                assert_eq!(l[0].split_row, Some(b"m".to_vec()));
            }
            if !l[0].hot {
                assert_eq!(l[0].split_row, None, "only a hot tablet names a split row");
            }
        }
        // Rated at 1 s, hot from then, split_after (3 s) later.
        assert_eq!(hot_at, Some(4));
        // A quiet spell resets it: it must stay hot as long again.
        let t1 = t0 + Duration::from_secs(10);
        let mut l = Vec::new();
        for s in 0..4u64 {
            l = tr.observe(t1 + Duration::from_secs(s), vec![served(1, 4500, 0)], &CFG);
        }
        assert!(!l[0].hot);
    }

    #[test]
    fn a_moved_tablet_cools_and_its_restarted_counters_are_no_negative_rate() {
        let mut tr = LoadTracker::default();
        let t0 = Instant::now();
        tr.observe(t0, vec![served(1, 1000, 0)], &CFG);
        tr.observe(t0 + Duration::from_secs(1), vec![served(1, 1100, 0)], &CFG);
        tr.moved(1, t0 + Duration::from_secs(1));
        let l = tr.observe(t0 + Duration::from_secs(2), vec![served(1, 5, 0)], &CFG);
        assert!(l[0].cooling);
        assert_eq!(l[0].load, 100, "the rate before the move stays");
        let l = tr.observe(t0 + Duration::from_secs(40), vec![served(1, 5, 0)], &CFG);
        assert!(!l[0].cooling);
    }

    #[test]
    fn load_splits_are_remembered_for_the_cooldown() {
        let mut tr = LoadTracker::default();
        let t0 = Instant::now();
        tr.split(7, b"m".to_vec(), t0);
        assert!(tr.split_recently(7, b"m", t0 + Duration::from_secs(1), CFG.split_cooldown));
        assert!(!tr.split_recently(7, b"n", t0, CFG.split_cooldown));
        assert!(!tr.split_recently(8, b"m", t0, CFG.split_cooldown));
        assert!(!tr.split_recently(7, b"m", t0 + CFG.split_cooldown, CFG.split_cooldown));
    }

    #[test]
    fn a_reported_split_is_remembered_at_its_second_halfs_start() {
        // An operator's `split t m`: the server reports children 11 and 12;
        // the next round sees 12 start at "m", and the small-tablet merge
        // must leave the two halves apart for the cooldown.
        let mut tr = LoadTracker::default();
        let t0 = Instant::now();
        tr.split_reported(&[11, 12], t0);
        assert!(
            !tr.split_recently(7, b"m", t0, CFG.split_cooldown),
            "the row is not known yet"
        );
        let mut right = served(12, 0, 0);
        right.start = b"m".to_vec();
        let mut left = served(11, 0, 0);
        left.end = Some(b"m".to_vec());
        let later = t0 + Duration::from_secs(2);
        let loads = tr.observe(later, vec![left, right], &CFG);
        assert!(tr.split_recently(7, b"m", later, CFG.split_cooldown));
        assert!(
            !tr.split_recently(7, b"a", later, CFG.split_cooldown),
            "the first half's start is no split"
        );
        let merge = super::super::balance::next_merge(&loads, 1 << 20, 0, |row| {
            tr.split_recently(7, row, later, CFG.split_cooldown)
        });
        assert_eq!(merge, None, "an operator's split is not merged back");
        assert!(!tr.split_recently(7, b"m", t0 + CFG.split_cooldown, CFG.split_cooldown));
        // Reported children never seen are forgotten after the cooldown.
        tr.split_reported(&[20, 21], t0);
        tr.observe(t0 + CFG.split_cooldown, vec![], &CFG);
        assert!(tr.reported.is_empty());
    }
}
