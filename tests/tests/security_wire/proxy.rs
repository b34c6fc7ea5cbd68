//! A TCP proxy on loopback that stands where an attacker on the network
//! would: it records what the client sends (to replay it, or to search it
//! for a value), and can rewrite bytes either way in flight.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

/// Which way bytes go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Way {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

type Rules = Arc<Mutex<Vec<(Way, Vec<u8>, Vec<u8>)>>>;

pub struct Proxy {
    /// Where clients connect.
    pub addr: String,
    /// Bytes each connection's client sent, in order of connection.
    pub sent: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Bytes each connection's server sent.
    pub received: Arc<Mutex<Vec<Vec<u8>>>>,
    rules: Rules,
}

/// A free loopback port (bound, then released for the daemon to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    way: Way,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
    i: usize,
    rules: Rules,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut chunk = buf[..n].to_vec();
        for (w, from_b, to_b) in rules.lock().unwrap().iter() {
            if *w != way {
                continue;
            }
            let mut at = 0;
            while let Some(p) = chunk[at..]
                .windows(from_b.len())
                .position(|x| x == from_b.as_slice())
            {
                chunk[at + p..at + p + to_b.len()].copy_from_slice(to_b);
                at += p + to_b.len();
            }
        }
        log.lock().unwrap()[i].extend_from_slice(&chunk);
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

impl Proxy {
    /// Listens on `listen`, forwarding every connection to `upstream`.
    pub fn start(listen: &str, upstream: String) -> Proxy {
        let l = TcpListener::bind(listen).unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let sent: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let received: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let rules: Rules = Arc::default();
        let (s, r, ru) = (sent.clone(), received.clone(), rules.clone());
        thread::spawn(move || {
            for c in l.incoming() {
                let Ok(c) = c else { continue };
                let Ok(u) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = c.set_nodelay(true);
                let _ = u.set_nodelay(true);
                let i = {
                    let mut s = s.lock().unwrap();
                    s.push(Vec::new());
                    r.lock().unwrap().push(Vec::new());
                    s.len() - 1
                };
                let (c2, u2) = (c.try_clone().unwrap(), u.try_clone().unwrap());
                let (s, r, ru1, ru2) = (s.clone(), r.clone(), ru.clone(), ru.clone());
                thread::spawn(move || pump(c, u, Way::Up, s, i, ru1));
                thread::spawn(move || pump(u2, c2, Way::Down, r, i, ru2));
            }
        });
        Proxy {
            addr,
            sent,
            received,
            rules,
        }
    }

    /// Rewrites `from` into `to` (the same length) in bytes going `way`.
    pub fn rewrite(&self, way: Way, from: &[u8], to: &[u8]) {
        assert_eq!(from.len(), to.len());
        self.rules
            .lock()
            .unwrap()
            .push((way, from.to_vec(), to.to_vec()));
    }

    /// Stops rewriting.
    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// Whether `needle` crossed the proxy either way.
    pub fn saw(&self, needle: &[u8]) -> bool {
        let has = |v: &Vec<Vec<u8>>| {
            v.iter()
                .any(|b| b.windows(needle.len()).any(|w| w == needle))
        };
        has(&self.sent.lock().unwrap()) || has(&self.received.lock().unwrap())
    }
}
