//! The operator's console (`-o http=[HOST:]PORT`): `/metrics` in the
//! Prometheus text format, `/` a status page that refreshes itself, and
//! `/keyviz` the key visualizer's heatmap (with `/keyviz.svg` and
//! `/keyviz.json`). Every figure comes from where `.bigtable/` takes it:
//! the status files' text, the tablet servers' reports and the engine's
//! key visualizer, so the files and the pages never disagree.
//!
//! The pages show row keys: the console is off unless asked for, and a bare
//! port listens on loopback.

mod heatmap;
mod html;
mod metrics;
mod page;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

pub use metrics::render as render_metrics;

/// What the console shows.
#[derive(Clone)]
pub struct Sources {
    /// The mounted filesystem (its `.bigtable/` files).
    pub fs: Arc<fs::Fs>,
    /// The engine under it (servers, master, tablets).
    pub bt: engine::Bigtable,
}

/// Errors starting the console.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("console: cannot listen on {addr}: {why}")]
    Listen { addr: SocketAddr, why: String },
    #[error("console: {0}")]
    Thread(#[from] std::io::Error),
}

/// A running console; [`Console::stop`] ends it.
pub struct Console {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Console {
    /// Listens on `addr` and serves from `src` on a thread of its own
    /// (requests are few and small: one thread answers them in turn).
    pub fn start(src: Sources, addr: SocketAddr) -> Result<Console, Error> {
        let server = tiny_http::Server::http(addr).map_err(|e| Error::Listen {
            addr,
            why: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().ok_or_else(|| Error::Listen {
            addr,
            why: "not an IP address".into(),
        })?;
        let server = Arc::new(server);
        engine::keyviz::enable();
        let s = server.clone();
        let thread = std::thread::Builder::new()
            .name("bt-console".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    answer(&src, req);
                }
            })?;
        log::info!("serving the console (metrics, status page, key visualizer) on http://{bound}/");
        Ok(Console {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// Where it listens (the port chosen, when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening and waits for the thread.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One response: status, content type, body.
type Reply = (u16, &'static str, Vec<u8>);

fn route(src: &Sources, path: &str) -> Reply {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let metric = heatmap::Metric::from_query(query);
    match path {
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::render(src).into_bytes(),
        ),
        "/" => (
            200,
            "text/html; charset=utf-8",
            page::render(src).into_bytes(),
        ),
        "/keyviz" => (
            200,
            "text/html; charset=utf-8",
            heatmap::page(&engine::keyviz::global().heatmap(heatmap::ROWS), metric).into_bytes(),
        ),
        "/keyviz.svg" => (
            200,
            "image/svg+xml",
            heatmap::svg(&engine::keyviz::global().heatmap(heatmap::ROWS), metric).into_bytes(),
        ),
        "/keyviz.json" => (
            200,
            "application/json",
            heatmap::json(&engine::keyviz::global().heatmap(heatmap::ROWS)).into_bytes(),
        ),
        _ => (404, "text/plain; charset=utf-8", b"not found\n".to_vec()),
    }
}

fn answer(src: &Sources, req: tiny_http::Request) {
    let (code, ctype, body) = if *req.method() == tiny_http::Method::Get {
        route(src, req.url())
    } else {
        (405, "text/plain; charset=utf-8", b"GET only\n".to_vec())
    };
    let mut resp = tiny_http::Response::from_data(body).with_status_code(code);
    if let Ok(h) = tiny_http::Header::from_bytes(&b"Content-Type"[..], ctype.as_bytes()) {
        resp.add_header(h);
    }
    if let Err(e) = req.respond(resp) {
        log::debug!("console: answering a request: {e}");
    }
}
