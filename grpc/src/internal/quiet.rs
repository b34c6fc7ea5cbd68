//! Refusals repeat as fast as a misconfigured peer retries (ten a second):
//! each peer's is logged once a minute, with how many were not.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(60);

/// Whether to log this refusal of `peer` now; `Some(n)`: yes, and `n`
/// more happened since the last one logged.
pub(crate) fn should_log(peer: &str) -> Option<u64> {
    static SEEN: OnceLock<Mutex<HashMap<String, (Instant, u64)>>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock();
    let now = Instant::now();
    match seen.get_mut(peer) {
        Some((last, quiet)) if now.duration_since(*last) < EVERY => {
            *quiet += 1;
            None
        }
        Some((last, quiet)) => {
            let n = *quiet;
            *last = now;
            *quiet = 0;
            Some(n)
        }
        None => {
            seen.insert(peer.to_string(), (now, 0));
            Some(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_logged_once_a_minute() {
        assert_eq!(should_log("quiet-test-peer"), Some(0));
        assert_eq!(should_log("quiet-test-peer"), None);
        assert_eq!(should_log("quiet-test-other"), Some(0));
    }
}
