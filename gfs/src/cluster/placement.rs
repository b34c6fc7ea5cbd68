//! The cluster's chunkservers, and where new replicas go: on the least
//! loaded placeable servers, ties broken by a per-chunk spin so that equal
//! servers take turns.

use super::server::ChunkServer;
use std::ops::Deref;

/// The chunkservers, by id (a server's id is its index).
pub(crate) struct Servers(Vec<ChunkServer>);

impl Servers {
    pub(crate) fn new(servers: Vec<ChunkServer>) -> Servers {
        Servers(servers)
    }

    /// Chunkservers for `n` new replicas, least loaded first, none in `exclude`.
    pub(crate) fn place(&self, n: usize, exclude: &[usize], salt: u64) -> Vec<usize> {
        let count = self.0.len().max(1);
        let mut c: Vec<(usize, usize, usize)> = self
            .0
            .iter()
            .filter(|s| s.placeable() && !exclude.contains(&s.id))
            .map(|s| {
                let spin = (s.id + salt as usize) % count;
                (s.replica_count(), spin, s.id)
            })
            .collect();
        c.sort_unstable();
        c.into_iter().take(n).map(|(.., id)| id).collect()
    }
}

/// Read access to the servers as a slice (`servers[id]`, `iter()`).
impl Deref for Servers {
    type Target = [ChunkServer];

    fn deref(&self) -> &[ChunkServer] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Servers {
    type Item = &'a ChunkServer;
    type IntoIter = std::slice::Iter<'a, ChunkServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
