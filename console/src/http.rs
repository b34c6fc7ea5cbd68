//! A small HTTP/1.x server for the console: a listener thread hands each
//! connection to one of a few worker threads; each connection has read and
//! write timeouts and carries one request (`Connection: close`), so a
//! client that never sends or never reads holds a worker at most that long.
//! With a certificate and key, every connection is TLS (rustls).

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Worker threads answering requests.
pub const WORKERS: usize = 4;
/// Connections accepted but not yet taken by a worker; more are closed.
const QUEUE: usize = 64;
/// How long a connection may take to send its request or read a response.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest request head read.
const MAX_HEAD: u64 = 16 * 1024;

/// A request as the console needs it.
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Status, content type, body.
pub type Reply = (u16, &'static str, Vec<u8>);

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    /// Serves `handle` on `listener`.
    pub fn start(
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        handle: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx): (Sender<TcpStream>, Receiver<TcpStream>) = bounded(QUEUE);
        let handle = Arc::new(handle);
        let mut threads = Vec::new();
        for i in 0..WORKERS {
            let rx = rx.clone();
            let handle = handle.clone();
            let tls = tls.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("bt-console-{i}"))
                    .spawn(move || {
                        for s in rx {
                            let _ = s.set_read_timeout(Some(TIMEOUT));
                            let _ = s.set_write_timeout(Some(TIMEOUT));
                            match &tls {
                                None => serve(s, &*handle),
                                Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                                    Ok(c) => serve(rustls::StreamOwned::new(c, s), &*handle),
                                    Err(e) => log::warn!("console: TLS: {e}"),
                                },
                            }
                        }
                    })?,
            );
        }
        let s = stop.clone();
        threads.push(
            std::thread::Builder::new()
                .name("bt-console".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if s.load(Ordering::SeqCst) {
                            break;
                        }
                        let Ok(conn) = conn else { continue };
                        // A full queue: the connection is closed at once.
                        if let Err(TrySendError::Disconnected(_)) = tx.try_send(conn) {
                            break;
                        }
                    }
                })?,
        );
        Ok(Server {
            addr,
            stop,
            threads,
        })
    }

    /// Stops accepting, lets the workers finish, and waits.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the listener's accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn read_request(s: &mut impl Read) -> Option<Request> {
    let mut r = BufReader::new(s.take(MAX_HEAD));
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    Some(Request {
        method,
        path,
        headers,
    })
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        421 => "Misdirected Request",
        _ => "Error",
    }
}

fn serve(mut s: impl Read + Write, handle: &dyn Fn(&Request) -> Reply) {
    let (code, ctype, body) = match read_request(&mut s) {
        Some(req) => handle(&req),
        None => (400, "text/plain; charset=utf-8", b"bad request\n".to_vec()),
    };
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    if code == 401 {
        head.push_str("WWW-Authenticate: Bearer\r\n");
    }
    head.push_str("\r\n");
    if let Err(e) = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(&body))
        .and_then(|()| s.flush())
    {
        log::debug!("console: answering a request: {e}");
    }
}
