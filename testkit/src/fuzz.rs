//! How many cases the fuzz and crash-point tests run, from the environment:
//! `FUZZ_CASES=n` runs n cases per fuzz target and `CRASH_POINTS=n` visits n
//! crash points per power-loss test (each test has its own default, the
//! CI's).

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
