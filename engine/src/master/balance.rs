//! The master's load-balancing and merge choices, as pure functions.
//!
//! Load is the number of tablets a server serves. The master moves one
//! tablet at a time from the most loaded server to the least loaded while
//! they differ by two or more, so in a steady state no server holds more
//! than one tablet above the mean. Among the busiest server's tablets it
//! moves the one with the most requests since the last round, so hot
//! tablets spread out. The root tablet stays where it is.

/// One tablet as the balancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TabletLoad {
    pub id: u64,
    pub table: u64,
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
    pub bytes: u64,
    /// Requests since the last balancing round.
    pub requests: u64,
    pub movable: bool,
    /// Whether all its files lie inside its range. A tablet still sharing
    /// its parent's files (after a split, until its major compaction) must
    /// not merge: its neighbour's view of those files may be older than its
    /// own (deletes it compacted away would come back).
    pub clean: bool,
}

/// One live server and its tablets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLoad {
    pub name: String,
    pub tablets: Vec<TabletLoad>,
}

/// A tablet to move: (tablet id, from, to).
pub type Move = (u64, String, String);

/// The next move, if the load is uneven.
pub fn next_move(servers: &[ServerLoad]) -> Option<Move> {
    let busiest = servers
        .iter()
        .max_by_key(|s| (s.tablets.len(), s.name.clone()))?;
    let idlest = servers
        .iter()
        .min_by_key(|s| (s.tablets.len(), s.name.clone()))?;
    if busiest.tablets.len() < idlest.tablets.len() + 2 {
        return None;
    }
    let t = busiest
        .tablets
        .iter()
        .filter(|t| t.movable)
        .max_by_key(|t| (t.requests, t.bytes, t.id))?;
    Some((t.id, busiest.name.clone(), idlest.name.clone()))
}

/// Adjacent tablets of one table to merge: both below `merge_bytes`.
/// `tablets` are one table's tablets in row order; returns the left one's
/// index.
pub fn next_merge(tablets: &[TabletLoad], merge_bytes: u64) -> Option<usize> {
    tablets.windows(2).position(|w| {
        w[0].movable
            && w[1].movable
            && w[0].clean
            && w[1].clean
            && w[0].end.as_ref() == Some(&w[1].start)
            && w[0].bytes < merge_bytes
            && w[1].bytes < merge_bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most that [`next_move`] leaves any server above the mean.
    fn bound_above_mean(servers: &[ServerLoad]) -> f64 {
        let n = servers.len().max(1) as f64;
        let mean = servers.iter().map(|s| s.tablets.len()).sum::<usize>() as f64 / n;
        let max = servers.iter().map(|s| s.tablets.len()).max().unwrap_or(0) as f64;
        max - mean
    }

    fn t(id: u64, requests: u64) -> TabletLoad {
        TabletLoad {
            id,
            table: 1,
            start: vec![id as u8],
            end: Some(vec![id as u8 + 1]),
            bytes: 10,
            requests,
            movable: true,
            clean: true,
        }
    }

    fn s(name: &str, ids: std::ops::Range<u64>) -> ServerLoad {
        ServerLoad {
            name: name.into(),
            tablets: ids.map(|i| t(i, i % 3)).collect(),
        }
    }

    #[test]
    fn moves_until_no_server_is_more_than_one_above_the_mean() {
        let mut servers = vec![s("a", 0..9), s("b", 9..9), s("c", 9..10)];
        let mut moves = 0;
        while let Some((id, from, to)) = next_move(&servers) {
            let fi = servers.iter().position(|x| x.name == from).unwrap();
            let ti = servers.iter().position(|x| x.name == to).unwrap();
            let p = servers[fi].tablets.iter().position(|x| x.id == id).unwrap();
            let tab = servers[fi].tablets.remove(p);
            servers[ti].tablets.push(tab);
            moves += 1;
            assert!(moves < 20);
        }
        assert!(bound_above_mean(&servers) <= 1.0, "{servers:?}");
        let counts: Vec<usize> = servers.iter().map(|x| x.tablets.len()).collect();
        assert_eq!(counts.iter().sum::<usize>(), 10);
        assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
    }

    #[test]
    fn the_hottest_movable_tablet_moves_first() {
        let mut a = s("a", 0..3);
        a.tablets[1].requests = 100;
        a.tablets[2].movable = false;
        a.tablets[2].requests = 1000;
        let servers = vec![a, s("b", 3..3)];
        assert_eq!(next_move(&servers), Some((1, "a".into(), "b".into())));
    }

    #[test]
    fn only_small_neighbours_merge() {
        let mut ts = vec![t(0, 0), t(1, 0), t(2, 0)];
        ts[0].bytes = 1000;
        assert_eq!(next_merge(&ts, 100), Some(1));
        ts[1].clean = false;
        assert_eq!(
            next_merge(&ts, 100),
            None,
            "a tablet sharing files never merges"
        );
        ts[1].clean = true;
        ts[2].bytes = 1000;
        assert_eq!(next_merge(&ts, 100), None);
    }
}
