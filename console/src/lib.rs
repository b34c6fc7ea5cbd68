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
mod http;
mod metrics;
mod page;
mod tls;

use engine::access::{Identity, Tokens, R};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

pub use metrics::render as render_metrics;

/// What the console shows, and to whom.
#[derive(Clone)]
pub struct Sources {
    /// The mounted filesystem (its `.bigtable/` files).
    pub fs: std::sync::Arc<fs::Fs>,
    /// The engine under it (servers, master, tablets).
    pub bt: engine::Bigtable,
    /// Bearer tokens naming viewers (the gRPC API's, `grpc_tokens=`).
    pub tokens: Tokens,
    /// Host names the console answers to besides IP addresses and
    /// `localhost` (`http_hosts=`).
    pub hosts: Vec<String>,
}

/// Errors starting the console.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("console: cannot listen on {addr}: {why}")]
    Listen { addr: SocketAddr, why: String },
    #[error("console: {0}")]
    Thread(#[from] std::io::Error),
    #[error("console: {0}")]
    Tls(String),
}

/// A running console; [`Console::stop`] ends it.
pub struct Console {
    server: http::Server,
}

impl Console {
    /// Listens on `addr` and serves from `src` on a few threads of its own,
    /// over TLS with `tls`'s certificate chain and key files (PEM).
    pub fn start(
        src: Sources,
        addr: SocketAddr,
        tls: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<Console, Error> {
        let tls = match tls {
            Some((cert, key)) => Some(tls::config(cert, key).map_err(Error::Tls)?),
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = std::net::TcpListener::bind(addr).map_err(|e| Error::Listen {
            addr,
            why: e.to_string(),
        })?;
        engine::keyviz::enable();
        let server = http::Server::start(listener, tls, move |req| answer(&src, req))?;
        log::info!(
            "serving the console (metrics, status page, key visualizer) on {scheme}://{}/",
            server.addr
        );
        Ok(Console { server })
    }

    /// Where it listens (the port chosen, when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Stops listening and waits for the threads.
    pub fn stop(self) {
        self.server.stop();
    }
}

/// One response: status, content type, body.
type Reply = http::Reply;

/// Who looks: the identity of an `Authorization: Bearer` token, or, with
/// none, no one in particular (the "other" class of every mode).
fn viewer(src: &Sources, req: &http::Request) -> Result<Identity, Reply> {
    match req.header("authorization") {
        None => Ok(Identity::new(u32::MAX, u32::MAX)),
        Some(h) => engine::access::bearer(h.as_bytes())
            .and_then(|t| src.tokens.lookup(t))
            .cloned()
            .ok_or_else(|| {
                telemetry::refused("console", "unauthenticated");
                (
                    401,
                    "text/plain; charset=utf-8",
                    b"unknown token\n".to_vec(),
                )
            }),
    }
}

/// Whether `Host:` names this console: an IP address (which no other site
/// can claim, unlike a name a DNS rebinding points here), `localhost`, or a
/// name given by `http_hosts=`.
pub fn host_allowed(host: &str, extra: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((ip, _)) => ip,
            None => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        }),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok()
        || name == "localhost"
        || name.ends_with(".localhost")
        || extra.iter().any(|h| h.eq_ignore_ascii_case(&name))
}

/// The tables `who` may read (the only ones whose keys it is shown).
pub fn readable_tables(src: &Sources, who: &Identity) -> BTreeSet<String> {
    src.bt
        .list_tables()
        .into_iter()
        .filter(|t| src.bt.schema(t).is_ok_and(|s| who.on_table(&s, R)))
        .collect()
}

fn heatmap(readable: &BTreeSet<String>) -> engine::keyviz::Heatmap {
    let mut h = engine::keyviz::global().heatmap(heatmap::ROWS);
    h.tables.retain(|t| readable.contains(&t.table));
    h
}

fn route(src: &Sources, path: &str, who: &Identity) -> Reply {
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
            page::render(src, &readable_tables(src, who)).into_bytes(),
        ),
        "/keyviz" => (
            200,
            "text/html; charset=utf-8",
            heatmap::page(&heatmap(&readable_tables(src, who)), metric).into_bytes(),
        ),
        "/keyviz.svg" => (
            200,
            "image/svg+xml",
            heatmap::svg(&heatmap(&readable_tables(src, who)), metric).into_bytes(),
        ),
        "/keyviz.json" => (
            200,
            "application/json",
            heatmap::json(&heatmap(&readable_tables(src, who))).into_bytes(),
        ),
        _ => (404, "text/plain; charset=utf-8", b"not found\n".to_vec()),
    }
}

fn answer(src: &Sources, req: &http::Request) -> Reply {
    let text = "text/plain; charset=utf-8";
    if !req
        .header("host")
        .is_some_and(|h| host_allowed(h, &src.hosts))
    {
        log::info!("console: refused Host {:?}", req.header("host"));
        telemetry::refused("console", "host");
        return (421, text, b"unknown Host (see http_hosts=)\n".to_vec());
    }
    if req.method != "GET" {
        return (405, text, b"GET only\n".to_vec());
    }
    match viewer(src, req) {
        Ok(who) => route(src, &req.path, &who),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let extra = vec!["console.example.org".to_string()];
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "[::1]:9090",
            "localhost:9090",
            "LOCALHOST",
            "10.1.2.3:80",
            "console.example.org:9090",
            "a.localhost",
        ] {
            assert!(host_allowed(ok, &extra), "{ok}");
        }
        for bad in [
            "evil.example.com:9090",
            "evil.example.com",
            "",
            "localhost.evil.com",
            "[::1",
        ] {
            assert!(!host_allowed(bad, &extra), "{bad}");
        }
    }
}
