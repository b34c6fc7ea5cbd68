//! A TCP proxy on loopback that makes a server look far away: every byte
//! is forwarded, in order, a fixed one-way delay after it arrived, in each
//! direction (so a request and its answer take two delays more). Bytes
//! that arrive while earlier ones wait are not held back further: a
//! stream of data is delayed, not slowed.
//!
//! Each connection gets four threads (a reader and a forwarder per
//! direction); they end when either side closes. Dropping the proxy stops
//! accepting and shuts down every connection it made.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running proxy.
pub struct DelayProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards each connection to
    /// `upstream`, `delay` later in each direction.
    pub fn start(upstream: SocketAddr, delay: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (s, c) = (Arc::clone(&stop), Arc::clone(&conns));
        let accept = std::thread::Builder::new()
            .name("delay-proxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    if let Err(e) = connect(client, upstream, delay, &c) {
                        eprintln!("delay proxy: a connection to {upstream} failed: {e}");
                    }
                }
            })?;
        Ok(DelayProxy {
            addr,
            stop,
            conns,
            accept: Some(accept),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// Starts forwarding between `client` and a new connection to `upstream`.
fn connect(
    client: TcpStream,
    upstream: SocketAddr,
    delay: Duration,
    conns: &Mutex<Vec<TcpStream>>,
) -> std::io::Result<()> {
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    if let Ok(mut c) = conns.lock() {
        c.push(client.try_clone()?);
        c.push(server.try_clone()?);
    }
    pipe(client.try_clone()?, server.try_clone()?, delay)?;
    pipe(server, client, delay)?;
    Ok(())
}

/// Forwards `from` to `to`, each chunk `delay` after it was read.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::Builder::new()
        .name("delay-proxy-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx
                            .send((Instant::now() + delay, buf[..n].to_vec()))
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
            // Dropping `tx` ends the forwarder once it has sent the rest.
        })?;
    std::thread::Builder::new()
        .name("delay-proxy-write".into())
        .spawn(move || {
            for (due, bytes) in rx {
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if to.write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        if let Ok(conns) = self.conns.lock() {
            for c in conns.iter() {
                let _ = c.shutdown(Shutdown::Both);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server's answer comes back through the proxy intact, in
    /// order, and no sooner than two delays after the request.
    #[test]
    fn forwards_in_order_two_delays_later() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = echo.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let delay = Duration::from_millis(30);
        let proxy = DelayProxy::start(upstream, delay).unwrap();
        let mut c = TcpStream::connect(proxy.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let sent: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let start = Instant::now();
        for part in sent.chunks(1000) {
            c.write_all(part).unwrap();
        }
        let mut got = vec![0u8; sent.len()];
        c.read_exact(&mut got).unwrap();
        assert!(start.elapsed() >= 2 * delay, "{:?}", start.elapsed());
        assert_eq!(got, sent);
        drop(c);
        drop(proxy);
        server.join().unwrap();
    }
}
