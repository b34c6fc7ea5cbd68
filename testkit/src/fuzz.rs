//! How many cases the fuzz and crash-point tests run, from the environment:
//! `FUZZ_CASES=n` runs n cases per fuzz target and `CRASH_POINTS=n` visits n
//! crash points per power-loss test (each test has its own default, the
//! CI's). Also the damage fuzz targets do to valid bytes.

use proptest::test_runner::Config;
use std::str::FromStr;

/// Cases per fuzz target.
pub const FUZZ_CASES: &str = "FUZZ_CASES";
/// Crash points per power-loss test.
pub const CRASH_POINTS: &str = "CRASH_POINTS";

/// The number in environment variable `var`, or `default` when it is unset
/// or not a number.
pub fn env_count<T: FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `CRASH_POINTS`, or `default`.
pub fn crash_points(default: u64) -> u64 {
    env_count(CRASH_POINTS, default)
}

/// A proptest configuration of `FUZZ_CASES` cases (or `default`), saving
/// no failures to files (a failure prints its input).
pub fn config(default: u32) -> Config {
    with_cases(env_count(FUZZ_CASES, default))
}

/// [`config`] for targets whose every case is costly (it starts a cluster):
/// `FUZZ_CASES / divisor` cases, and never fewer than `default`.
pub fn config_scaled(default: u32, divisor: u32) -> Config {
    let cases = std::env::var(FUZZ_CASES)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|n: u32| (n / divisor.max(1)).max(default))
        .unwrap_or(default);
    with_cases(cases)
}

/// Damages `bytes` in one of four ways, by `how % 4`: flips the byte at
/// `at` (modulo the length) with `b` (at least 1), writes a huge length
/// there (0xFFFF_FFF0, little-endian, cut at the end), cuts the bytes
/// there, or inserts `b` there. Nothing happens to empty bytes.
pub fn damage(bytes: &mut Vec<u8>, how: u8, at: usize, b: u8) {
    if bytes.is_empty() {
        return;
    }
    let n = bytes.len();
    let at = at % n;
    match how % 4 {
        0 => bytes[at] ^= b.max(1),
        1 => {
            let v = 0xFFFF_FFF0u32.to_le_bytes();
            let end = (at + 4).min(n);
            bytes[at..end].copy_from_slice(&v[..end - at]);
        }
        2 => bytes.truncate(at),
        _ => bytes.insert(at, b),
    }
}

fn with_cases(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_flips_lengthens_cuts_or_inserts() {
        let fresh = || vec![1u8, 2, 3, 4, 5, 6];
        let mut b = fresh();
        damage(&mut b, 0, 7, 0);
        assert_eq!(b, [1, 3, 3, 4, 5, 6]);
        let mut b = fresh();
        damage(&mut b, 1, 4, 9);
        assert_eq!(b, [1, 2, 3, 4, 0xF0, 0xFF]);
        let mut b = fresh();
        damage(&mut b, 2, 2, 9);
        assert_eq!(b, [1, 2]);
        let mut b = fresh();
        damage(&mut b, 3, 0, 9);
        assert_eq!(b, [9, 1, 2, 3, 4, 5, 6]);
        let mut empty = Vec::new();
        damage(&mut empty, 3, 0, 9);
        assert!(empty.is_empty());
    }

    #[test]
    fn unset_or_garbled_variables_give_the_default() {
        assert_eq!(env_count("TESTKIT_NO_SUCH_VARIABLE", 5u32), 5);
        let c = config(17);
        assert!(c.failure_persistence.is_none());
        // The CI may set FUZZ_CASES; either way the scaled count is at least
        // the default.
        assert!(config_scaled(3, 16).cases >= 3);
        assert!(c.cases == 17 || std::env::var(FUZZ_CASES).is_ok());
    }
}
