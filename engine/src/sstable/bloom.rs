//! The per-table Bloom filter.
//!
//! One 64-bit seahash per key; the k probes are derived from it by double
//! hashing (`h, h + d, h + 2d, ...` modulo the bit count, with `d` a rotation
//! of `h`), as LevelDB does with its 32-bit hash. Encoded as the bit array
//! followed by one byte holding k.

/// Collects key hashes while a table is written.
pub struct BloomBuilder {
    bits_per_key: usize,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    pub fn new(bits_per_key: usize) -> Self {
        BloomBuilder {
            bits_per_key: bits_per_key.max(1),
            hashes: Vec::new(),
        }
    }

    pub fn add(&mut self, key: &[u8]) {
        self.hashes.push(seahash::hash(key));
    }

    /// The encoded filter.
    pub fn finish(&self) -> Vec<u8> {
        // ln 2 * bits/key minimises the false-positive rate.
        let k = ((self.bits_per_key as f64 * 0.69) as usize).clamp(1, 30);
        // A floor of 64 bits keeps tiny tables from a very high rate.
        let bits = (self.hashes.len().saturating_mul(self.bits_per_key)).max(64);
        let bytes = bits.div_ceil(8);
        let nbits = (bytes * 8) as u64;
        let mut out = vec![0u8; bytes + 1];
        for &h in &self.hashes {
            for bit in probes(h, k, nbits) {
                out[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        out[bytes] = k as u8;
        out
    }
}

fn probes(h: u64, k: usize, nbits: u64) -> impl Iterator<Item = u64> {
    let delta = h.rotate_right(21) | 1;
    (0..k as u64).map(move |i| h.wrapping_add(i.wrapping_mul(delta)) % nbits)
}

/// A decoded filter, held in memory for the table's lifetime.
#[derive(Debug, Clone)]
pub struct BloomFilter {
    bits: Vec<u8>,
    k: usize,
}

impl BloomFilter {
    /// `None` if the encoding is malformed.
    pub fn decode(mut data: Vec<u8>) -> Option<BloomFilter> {
        let k = data.pop()? as usize;
        if data.is_empty() || !(1..=30).contains(&k) {
            return None;
        }
        Some(BloomFilter { bits: data, k })
    }

    pub fn may_contain(&self, key: &[u8]) -> bool {
        let nbits = (self.bits.len() * 8) as u64;
        probes(seahash::hash(key), self.k, nbits).all(|bit| {
            self.bits
                .get((bit / 8) as usize)
                .is_some_and(|b| b & (1 << (bit % 8)) != 0)
        })
    }

    /// Bytes held (for memory accounting).
    pub fn size(&self) -> usize {
        self.bits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_low_fp_rate() {
        let n = 10_000;
        let mut b = BloomBuilder::new(10);
        for i in 0..n {
            b.add(format!("key{i}").as_bytes());
        }
        let f = BloomFilter::decode(b.finish()).unwrap();
        for i in 0..n {
            assert!(f.may_contain(format!("key{i}").as_bytes()));
        }
        let fp = (0..n)
            .filter(|i| f.may_contain(format!("other{i}").as_bytes()))
            .count();
        let rate = fp as f64 / n as f64;
        assert!(rate < 0.02, "false-positive rate {rate}");
    }

    #[test]
    fn empty_and_malformed() {
        let f = BloomFilter::decode(BloomBuilder::new(10).finish()).unwrap();
        assert!(!f.may_contain(b"x"));
        assert!(BloomFilter::decode(vec![]).is_none());
        assert!(BloomFilter::decode(vec![0xFF, 0]).is_none());
        assert!(BloomFilter::decode(vec![0xFF, 31]).is_none());
        assert!(BloomFilter::decode(vec![7]).is_none());
    }
}
