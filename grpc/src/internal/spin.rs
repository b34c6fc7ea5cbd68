//! A caller's brief spin for its reply before it sleeps in `recv`. A
//! remote call's cost is mostly its wake-ups (internal-rpc.md, "A
//! client-only daemon's random reads, profiled"): the caller sleeping in
//! `recv` and woken by the reply is one of them. When the callee answers
//! within a few tens of microseconds, a caller that polls the socket
//! meanwhile never sleeps. It spins only while no other caller of this
//! process does (at most one core less than the machine has), and for at
//! most `BIGTABLE_RPC_SPIN_US` microseconds (default below; 0: never).

use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The spin's default budget.
const DEFAULT_US: u64 = 30;

/// Callers spinning now.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

struct Config {
    budget: Duration,
    /// Callers that may spin at once: the cores but one (the callee's,
    /// or whoever else runs), so a spinner never takes the last core.
    most: usize,
}

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| {
        let us = std::env::var("BIGTABLE_RPC_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(DEFAULT_US)
            .min(1_000);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            budget: Duration::from_micros(us),
            most: cores.saturating_sub(1),
        }
    })
}

/// Polls `s` until a byte of the reply is there or the budget is spent;
/// the caller then reads as it always does (at once, or sleeping in
/// `recv`). Whether it spun and the reply came meanwhile.
pub(crate) fn for_reply(s: &TcpStream) -> bool {
    let c = config();
    if c.budget.is_zero() {
        return false;
    }
    if SPINNING.fetch_add(1, Ordering::AcqRel) >= c.most {
        SPINNING.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    let came = poll(s, c.budget);
    SPINNING.fetch_sub(1, Ordering::AcqRel);
    came
}

fn poll(s: &TcpStream, budget: Duration) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let start = Instant::now();
    let mut byte = [0u8; 1];
    let came = loop {
        match s.peek(&mut byte) {
            // A reply, or the end of the stream: the read sees either at once.
            Ok(_) => break true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break false,
        }
        if start.elapsed() >= budget {
            break false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    };
    // A socket left non-blocking would make the read fail at once: a
    // connection that cannot be put back is not read at all.
    if s.set_nonblocking(false).is_err() {
        return false;
    }
    came
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn a_reply_already_there_is_seen_and_the_socket_blocks_again() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        assert!(!poll(&c, Duration::from_micros(50)), "nothing sent yet");
        s.write_all(b"x").unwrap();
        // A blocking peek waits for the byte; then the poll sees it at once.
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.peek(&mut [0u8; 1]).unwrap();
        assert!(poll(&c, Duration::from_micros(50)));
        // Blocking again: a read with a timeout waits rather than failing
        // with WouldBlock at once.
        c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut b = [0u8; 2];
        let mut r = &c;
        assert_eq!(std::io::Read::read(&mut r, &mut b).unwrap(), 1);
        let t = Instant::now();
        assert!(std::io::Read::read(&mut r, &mut b).is_err());
        assert!(
            t.elapsed() >= Duration::from_millis(15),
            "the socket stayed non-blocking"
        );
    }
}
