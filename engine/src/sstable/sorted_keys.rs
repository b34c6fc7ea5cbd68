//! Sorted keys held for binary search: a block's restart keys and a table's
//! index separators.
//!
//! The keys lie end to end in one buffer, and each has an 8-byte "head" (its
//! first bytes after the prefix every key shares) in an array of its own. A
//! probe compares heads, a few contiguous cache lines for hundreds of keys,
//! and reads a whole key only where heads tie. Keys in separate allocations
//! would cost a cache (and often TLB) miss per probe instead.

use std::cmp::Ordering;

/// The big-endian value of the first 8 bytes of `s`, zero-padded.
fn head(s: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = s.len().min(8);
    b[..n].copy_from_slice(&s[..n]);
    u64::from_be_bytes(b)
}

/// Collects keys in ascending order; [`SortedKeysBuilder::finish`] indexes them.
#[derive(Default)]
pub struct SortedKeysBuilder {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl SortedKeysBuilder {
    pub fn with_capacity(keys: usize) -> Self {
        SortedKeysBuilder {
            bytes: Vec::new(),
            ends: Vec::with_capacity(keys),
        }
    }

    /// Appends `key`, which must not sort below the previous one. False,
    /// appending nothing, once the keys would pass 4 GiB.
    pub fn push(&mut self, key: &[u8]) -> bool {
        let Some(end) = self
            .bytes
            .len()
            .checked_add(key.len())
            .and_then(|e| u32::try_from(e).ok())
        else {
            return false;
        };
        self.bytes.extend_from_slice(key);
        self.ends.push(end);
        true
    }

    pub fn finish(self) -> SortedKeys {
        let mut keys = SortedKeys {
            bytes: self.bytes,
            ends: self.ends,
            common_len: 0,
            heads: Vec::new(),
        };
        if let Some(last) = keys.len().checked_sub(1) {
            // Keys are sorted, so what the first and last share, all share.
            let (first, last) = (keys.key(0), keys.key(last));
            keys.common_len = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        }
        keys.heads = (0..keys.len())
            .map(|i| head(keys.key(i).get(keys.common_len..).unwrap_or(&[])))
            .collect();
        keys
    }
}

/// Ascending keys with a cache-friendly binary search.
#[derive(Default)]
pub struct SortedKeys {
    bytes: Vec<u8>,
    /// Where each key ends in `bytes`.
    ends: Vec<u32>,
    /// Length of the prefix every key shares.
    common_len: usize,
    /// Per key: the 8 bytes after the common prefix (zero-padded, big-endian).
    heads: Vec<u64>,
}

impl SortedKeys {
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Key `i` (empty past the end).
    pub fn key(&self, i: usize) -> &[u8] {
        let start = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).map_or(0, |&e| e as usize),
            None => 0,
        };
        let end = self.ends.get(i).map_or(start, |&e| e as usize);
        self.bytes.get(start..end).unwrap_or(&[])
    }

    /// How many keys are below `target` (the index of the first key >= it).
    pub fn count_below(&self, target: &[u8]) -> usize {
        let n = self.heads.len();
        if n == 0 {
            return 0;
        }
        let common = &self.key(0)[..self.common_len];
        let t = &target[..target.len().min(common.len())];
        match crate::key::compare(t, &common[..t.len()]) {
            Ordering::Less => return 0,
            Ordering::Greater => return n,
            // A proper prefix of every key is below them all.
            Ordering::Equal if target.len() < common.len() => return 0,
            Ordering::Equal => {}
        }
        // Unequal heads order the keys (a shorter key pads with zeros and
        // is then a prefix of the other); equal heads need the whole keys.
        // The heads alone are searched with the standard library's
        // partition point, which picks each half without a branch: a
        // search that branched on each comparison mispredicted about half
        // of them, and was a fifth of a cached random point read.
        let u = head(&target[common.len()..]);
        let mut lo = self.heads.partition_point(|&h| h < u);
        // Ties are rare: only then is the run of equal heads measured.
        let mut hi = match self.heads.get(lo) {
            Some(&h) if h == u => lo + self.heads[lo..].partition_point(|&h| h == u),
            _ => lo,
        };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if crate::key::less(self.key(mid), target) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Bytes held (for cache weighing and memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.bytes.len() + 4 * self.ends.len() + 8 * self.heads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn build(keys: &[Vec<u8>]) -> SortedKeys {
        let mut b = SortedKeysBuilder::with_capacity(keys.len());
        for k in keys {
            assert!(b.push(k));
        }
        b.finish()
    }

    #[test]
    fn count_below_matches_partition_point() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for prefix in [&b""[..], b"row/", b"\x00\x00"] {
            for n in [0usize, 1, 2, 7, 300] {
                // Short alphabets make ties of heads, prefixes of other keys
                // and keys longer than a head common.
                let mut keys: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        let mut k = prefix.to_vec();
                        let len = rng.gen_range(0..14);
                        k.extend((0..len).map(|_| rng.gen_range(0..3u8)));
                        k
                    })
                    .collect();
                keys.sort();
                keys.dedup();
                let s = build(&keys);
                assert_eq!(s.len(), keys.len());
                for (i, k) in keys.iter().enumerate() {
                    assert_eq!(s.key(i), k.as_slice());
                }
                for _ in 0..400 {
                    let mut t = prefix[..rng.gen_range(0..=prefix.len())].to_vec();
                    t.extend((0..rng.gen_range(0..14)).map(|_| rng.gen_range(0..4u8)));
                    let want = keys.partition_point(|k| k.as_slice() < t.as_slice());
                    assert_eq!(s.count_below(&t), want, "target {t:?}");
                }
            }
        }
    }

    #[test]
    fn empty_set_and_out_of_range_keys() {
        let s = SortedKeysBuilder::default().finish();
        assert_eq!(s.len(), 0);
        assert_eq!(s.count_below(b"x"), 0);
        assert_eq!(s.key(0), b"");
        let s = build(&[b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(s.key(2), b"");
        assert_eq!(s.count_below(b""), 0);
        assert_eq!(s.count_below(b"c"), 2);
    }
}
