//! Refusals repeat as fast as a misconfigured peer retries (ten a second),
//! and an attacker can make them from many ports: each peer *address*
//! (its IP, not IP and port) is logged once a minute, with how many were
//! not. The table is bounded: when it is full, entries older than a minute
//! are dropped, and if none is, the new peer counts under one shared entry
//! (so the log says "other peers" rather than the memory growing).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const EVERY: Duration = Duration::from_secs(60);
/// Peers remembered at once.
const MAX_PEERS: usize = 1024;
/// Where refusals of peers beyond [`MAX_PEERS`] are counted.
const OTHERS: &str = "other peers";

/// The key a peer's refusals are counted under: its IP when `addr` is a
/// socket address, else `addr` as given (a dialed `HOST:PORT`).
pub(crate) fn peer_key(addr: &str) -> String {
    match addr.parse::<std::net::SocketAddr>() {
        Ok(a) => a.ip().to_string(),
        Err(_) => addr.to_string(),
    }
}

/// The key of a peer known by its IP.
pub(crate) fn ip_key(ip: Option<IpAddr>) -> String {
    ip.map_or_else(|| "an unknown peer".to_string(), |ip| ip.to_string())
}

/// Whether to log this refusal of `peer` now; `Some(n)`: yes, and `n`
/// more happened since the last one logged.
pub(crate) fn should_log(peer: &str) -> Option<u64> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(Seen::new(MAX_PEERS)))
        .lock()
        .should_log(peer, Instant::now())
}

/// The key a peer's unproven answers are counted under: apart from its
/// refused calls (keyed by [`ip_key`]), so that one kind's log does not
/// silence the other's for a minute (daemons on one host share an IP).
fn unproven_key(addr: &str) -> String {
    format!("answers of {}", peer_key(addr))
}

/// Logs (once a minute per peer) and refuses what `addr` sent.
pub(crate) fn unproven(addr: &str, what: &str) -> tonic::Status {
    if let Some(more) = should_log(&unproven_key(addr)) {
        log::warn!(
            "{addr} does not prove it knows the cluster secret ({what}): its answers are \
             ignored ({more} more since this was last logged)"
        );
    }
    tonic::Status::unauthenticated(format!(
        "{addr} does not prove it knows the cluster secret ({what})"
    ))
}

struct Seen {
    peers: HashMap<String, (Instant, u64)>,
    max: usize,
}

impl Seen {
    fn new(max: usize) -> Seen {
        Seen {
            peers: HashMap::new(),
            max,
        }
    }

    fn should_log(&mut self, peer: &str, now: Instant) -> Option<u64> {
        if !self.peers.contains_key(peer) && self.peers.len() >= self.max {
            self.peers
                .retain(|_, (last, _)| now.duration_since(*last) < EVERY);
        }
        let key = if self.peers.contains_key(peer) || self.peers.len() < self.max {
            peer
        } else {
            OTHERS
        };
        match self.peers.get_mut(key) {
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
                self.peers.insert(key.to_string(), (now, 0));
                Some(0)
            }
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

    #[test]
    fn a_peers_unproven_answer_does_not_silence_its_refused_calls() {
        let _ = unproven("10.9.8.7:5000", "a reply");
        assert_eq!(should_log(&ip_key("10.9.8.7".parse().ok())), Some(0));
        assert_eq!(unproven_key("10.9.8.7:5001"), unproven_key("10.9.8.7:5000"));
    }

    #[test]
    fn ports_of_one_address_are_one_peer() {
        assert_eq!(peer_key("10.1.2.3:5000"), peer_key("10.1.2.3:5001"));
        assert_eq!(peer_key("[::1]:7"), "::1");
        assert_eq!(peer_key("db-1:7100"), "db-1:7100");
    }

    #[test]
    fn the_table_is_bounded() {
        let mut s = Seen::new(4);
        let t0 = Instant::now();
        for i in 0..4 {
            assert_eq!(s.should_log(&format!("p{i}"), t0), Some(0));
        }
        // Full of recent peers: a new one counts as "others".
        assert_eq!(s.should_log("p9", t0), Some(0));
        assert_eq!(s.should_log("p10", t0), None);
        assert_eq!(s.peers.len(), 5, "four peers and the others' entry");
        // A minute on, old entries make room.
        let later = t0 + EVERY;
        assert_eq!(s.should_log("p11", later), Some(0));
        assert_eq!(s.peers.len(), 1);
    }
}
