//! Status figures as plain `key=value` words, the format of every file
//! under the mount's `.bigtable/` directory.

use crate::cache::CacheStats;
use crate::group_commit::GroupCommitStats;
use crate::log::CommitLogStats;

/// Something that prints as `key=value` words.
pub trait KeyValues {
    fn kv(&self, prefix: &str) -> String;
}

/// `s`'s figures, each key prefixed.
pub fn kv(s: &dyn KeyValues, prefix: &str) -> String {
    s.kv(prefix)
}

impl KeyValues for GroupCommitStats {
    fn kv(&self, p: &str) -> String {
        format!(
            "{p}batches={} {p}items={} {p}syncs={} {p}max_batch={}",
            self.batches, self.items, self.syncs, self.max_batch
        )
    }
}

impl KeyValues for CommitLogStats {
    fn kv(&self, p: &str) -> String {
        format!(
            "{p}appends={} {p}records={} {p}bytes={} {p}syncs={} {p}switches={} {p}rolls={} \
             {p}background_syncs={} {p}active_lane={} {p}files={}",
            self.appends,
            self.records,
            self.bytes,
            self.syncs,
            self.switches,
            self.rolls,
            self.background_syncs,
            self.active_lane,
            self.files
        )
    }
}

impl KeyValues for CacheStats {
    fn kv(&self, p: &str) -> String {
        format!(
            "{p}hits={} {p}misses={} {p}bytes={} {p}capacity={} {p}entries={}",
            self.hits, self.misses, self.bytes, self.capacity, self.entries
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_print_as_key_value_words() {
        let s = CacheStats {
            hits: 3,
            ..CacheStats::default()
        };
        let line = kv(&s, "block_cache_");
        assert!(line.starts_with("block_cache_hits=3 "));
        assert!(line.split(' ').all(|w| w
            .split_once('=')
            .is_some_and(|(k, v)| !k.is_empty() && !v.is_empty())));
    }
}
