//! A per-thread xorshift64 generator, for draws on hot paths where a
//! statistical spread is all that matters (a skiplist node's height, which
//! requests a tablet's load sample keeps): a few instructions and no lock,
//! where `rand::thread_rng`'s ChaCha costs a block of work per draw.

use std::cell::Cell;

thread_local! {
    /// The calling thread's state (0 until its first draw).
    static STATE: Cell<u64> = const { Cell::new(0) };
}

/// One generator's state, lent to [`with`]'s closure.
pub struct XorShift(u64);

impl XorShift {
    /// The next value (never 0).
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Runs `f` with the calling thread's generator: draw as many values as
/// needed for one touch of the thread-local state.
pub fn with<R>(f: impl FnOnce(&mut XorShift) -> R) -> R {
    STATE.with(|c| {
        let mut x = c.get();
        if x == 0 {
            // A distinct nonzero seed per thread: the address of its cell.
            x = (c as *const Cell<u64> as u64) | 1;
        }
        let mut g = XorShift(x);
        let r = f(&mut g);
        c.set(g.0);
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_spread_and_never_zero() {
        let mut low_bits = [0usize; 8];
        for _ in 0..80_000 {
            let x = with(|g| g.next_u64());
            assert_ne!(x, 0);
            low_bits[(x >> 32) as usize % 8] += 1;
        }
        assert!(
            low_bits.iter().all(|&n| n > 9_000 && n < 11_000),
            "{low_bits:?}"
        );
    }

    #[test]
    fn threads_draw_different_sequences() {
        let draw = || with(|g| (0..4).map(|_| g.next_u64()).collect::<Vec<_>>());
        let here = draw();
        let there = std::thread::spawn(draw).join().unwrap();
        assert_ne!(here, there);
    }
}
