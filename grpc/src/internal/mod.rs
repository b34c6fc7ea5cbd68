//! The internal service between daemons of one cluster
//! (`bigtable.internal.v1.Cluster`): the engine's tablet-server and master
//! protocol (`engine::protocol`) over gRPC. A daemon serves it for its own
//! tablet servers and master, and installs a [`remote::Dialer`] in its
//! engine so that its client and master reach those of the other daemons.
//!
//! Every call carries the cluster's shared secret when one is configured
//! (see [`Secret`]); the messages are the engine's types in bincode.

mod auth;
pub(crate) mod codec;
mod coherence;
mod depth;
mod follow;
mod frame;
#[cfg(test)]
mod frame_attacks;
mod frame_client;
mod frame_server;
mod lanes;
pub(crate) mod messages;
mod nonces;
pub(crate) mod quiet;
mod remote;
mod secret;
mod service;

pub use coherence::{CoherenceStats, Sink};
pub use nonces::DEFAULT_REPLAY_CACHE;
pub use remote::Dialer;
pub use secret::{Secret, MIN_SECRET_BYTES, TOKEN_WINDOW_SECS};

use crate::guard::{self, Guard, Limits};
use crate::server::{self, Error, Running, MAX_MESSAGE};
use crate::tls::Tls;
use engine::Bigtable;
use service::{ClusterService, Target};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// HTTP/2 flow-control windows, both ways. The default (64 KiB) holds a
/// quarter of one scan message: the sender would stop for a window update
/// (a round trip) four times per message.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// The generated client and server.
mod gen {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/bigtable.internal.v1.Cluster.rs"));
}

/// Decodes `bytes` as each message of the service, with the bounds the
/// server and client decode with; returns how many decoded. For the fuzz
/// test (grpc/tests/decoder_fuzz.rs).
#[doc(hidden)]
pub fn decode_any(bytes: &[u8]) -> usize {
    use codec::decode_bounded as d;
    [
        d::<messages::Call>(bytes).is_ok(),
        d::<messages::ScanCall>(bytes).is_ok(),
        d::<messages::Reply>(bytes).is_ok(),
        d::<messages::ScanChunk>(bytes).is_ok(),
    ]
    .iter()
    .filter(|ok| **ok)
    .count()
}

/// The body of a `Scan` request (for raw clients in tests).
#[doc(hidden)]
pub fn encode_scan_call(server: &str, tablet: u64, spec: &engine::ScanSpec) -> Vec<u8> {
    bincode::serialize(&messages::ScanCall {
        server: server.to_string(),
        tablet,
        spec: spec.clone(),
    })
    .unwrap_or_default()
}

/// The body of a `Control` request reading a row (for raw clients in tests).
#[doc(hidden)]
pub fn encode_read_row(server: &str, tablet: u64, row: &[u8], spec: &engine::ScanSpec) -> Vec<u8> {
    bincode::serialize(&messages::Call {
        server: Some(server.to_string()),
        op: messages::Op::ReadRow {
            tablet,
            row: row.to_vec(),
            spec: Box::new(spec.clone()),
        },
    })
    .unwrap_or_default()
}

/// The body of a `Call` request applying mutations (for raw clients in tests).
#[doc(hidden)]
pub fn encode_apply(server: &str, tablet: u64, ms: Vec<engine::RowMutation>) -> Vec<u8> {
    bincode::serialize(&messages::Call {
        server: Some(server.to_string()),
        op: messages::Op::Apply {
            tablet,
            ms,
            sync: false,
            fence: None,
        },
    })
    .unwrap_or_default()
}

/// How a node takes and makes calls.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster's shared secret (None: calls carry no token).
    pub secret: Option<Secret>,
    /// What one caller may cost the listener.
    pub limits: Limits,
    /// The address other daemons dial, which their tokens name (None: the
    /// address listened on).
    pub advertise: Option<String>,
    /// Nonces of admitted calls remembered in the token window.
    pub replay_cache: usize,
    /// Mutual TLS: peers (both ways) must present a certificate of the
    /// cluster's CA (None: plain text).
    pub tls: Option<Arc<Tls>>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            secret: None,
            limits: Limits::default(),
            advertise: None,
            replay_cache: DEFAULT_REPLAY_CACHE,
            tls: None,
        }
    }
}

/// Whether a route carries data (large requests allowed): only `Call`,
/// whose operations are writes and point reads; `Control` and `Scan`
/// requests are small.
fn data_route(method: &str) -> bool {
    method == "Call"
}

/// A daemon's end of the internal service: the listener serving its
/// servers and master, and the runtime its calls to other daemons use.
pub struct Node {
    /// The address listened on (with the port chosen when asked for port 0).
    pub addr: SocketAddr,
    target: Target,
    secret: Option<Secret>,
    served: Arc<AtomicU64>,
    rt: tokio::runtime::Handle,
    running: Running,
    tls: Option<Arc<Tls>>,
    frames: Arc<frame_server::FrameServer>,
    coherence: Arc<coherence::Coherence>,
}

impl Node {
    /// Listens on `listen` (port 0: any free port) with the default limits.
    /// Calls are refused as "starting" until [`Node::attach`] names the
    /// daemon's cluster.
    pub fn start(listen: SocketAddr, secret: Option<Secret>) -> Result<Node, Error> {
        Node::start_with(
            listen,
            Config {
                secret,
                ..Config::default()
            },
        )
    }

    /// Listens on `listen` as `config` says.
    pub fn start_with(listen: SocketAddr, config: Config) -> Result<Node, Error> {
        let Config {
            secret,
            limits,
            advertise,
            replay_cache,
            tls,
        } = config;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(64)
            .thread_name("bt-internal")
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        let (listener, addr) = server::bind(listen)?;
        let advertised: Arc<str> = advertise.unwrap_or_else(|| addr.to_string()).into();
        let target: Target = Arc::default();
        let served = Arc::new(AtomicU64::new(0));
        let coherence = Arc::new(coherence::Coherence::new(advertised.clone()));
        let largest = limits.max_request.max(limits.max_control);
        let service = gen::cluster_server::ClusterServer::new(ClusterService {
            target: target.clone(),
            coherence: coherence.clone(),
            secret: secret.clone(),
            served: served.clone(),
            inline: Default::default(),
        })
        .max_decoding_message_size(largest)
        .max_encoding_message_size(MAX_MESSAGE);
        let secret_check = secret.clone();
        let handle = rt.handle().clone();
        let server_tls = tls.clone();
        let guard_layer = Guard::new(&limits, data_route);
        // One replay cache and one budget, whichever transport a call takes.
        let nonces = Arc::new(nonces::Nonces::new(replay_cache));
        let frames = frame_server::FrameServer::new(
            target.clone(),
            coherence.clone(),
            secret.clone(),
            advertised.clone(),
            nonces.clone(),
            served.clone(),
            limits.clone(),
            guard_layer.budget(),
        );
        let frames_in = frames.clone();
        let running = server::run(rt, "bt-internal-main", addr, move |stop| async move {
            let router = guard::server(tonic::transport::Server::builder(), &limits)
                .initial_stream_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .layer(guard_layer)
                // The token is checked on the headers, before a byte of the
                // body is read or decoded.
                .layer(auth::Authenticate {
                    secret: secret_check,
                    target: advertised,
                    nonces,
                })
                .add_service(service);
            let stop = async {
                let _ = stop.await;
            };
            let conns = guard::Conns::new(&limits);
            match server_tls {
                Some(tls) => {
                    let incoming = crate::tls::incoming(listener, tls, conns, "internal RPC")?;
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
                None => {
                    let header_timeout = limits.header_timeout;
                    let incoming =
                        frame_server::incoming(listener, conns, header_timeout, frames_in)?;
                    router.serve_with_incoming_shutdown(incoming, stop).await
                }
            }
            .map_err(std::io::Error::other)
        })?;
        log::info!("serving the cluster's internal RPC on {addr}");
        Ok(Node {
            addr,
            target,
            secret,
            served,
            rt: handle,
            running,
            tls,
            frames,
            coherence,
        })
    }

    /// Serves `bt`'s tablet servers and master from now on, and lets `bt`
    /// reach the other daemons' (with `dial_local`, its own too: every
    /// request then crosses the network protocol).
    pub fn attach(&self, bt: &Bigtable, dial_local: bool) {
        let _ = self.target.set(bt.clone());
        let dialer = Dialer::new(
            bt.lock_service(),
            self.rt.clone(),
            self.secret.clone(),
            self.tls.clone(),
        );
        bt.set_dialer(Box::new(dialer), dial_local);
        // Cache coherence: its own connections to the other daemons.
        let c = &self.coherence;
        let _ = c.bt.set(bt.clone());
        let _ = c.dialer.set(Arc::new(Dialer::new(
            bt.lock_service(),
            self.rt.clone(),
            self.secret.clone(),
            self.tls.clone(),
        )));
        bt.set_after_write(Box::new(coherence::Hook(c.clone())));
        follow::start(c, bt.lock_service());
    }

    /// From now on, other daemons' writes invalidate what `sink` (the
    /// mount's kernel caches) holds (docs/coherence.md).
    pub fn follow(&self, sink: Sink) {
        let _ = self.coherence.sink.set(sink);
        // Whatever was cached before could have missed invalidations.
        self.coherence.drop_all();
    }

    /// The cache-coherence figures (`.bigtable/status`, benchmarks).
    pub fn coherence_stats(&self) -> &CoherenceStats {
        &self.coherence.stats
    }

    /// Tablet server `name` of the daemon at `addr`, called with this
    /// node's secret (for operators' tools and tests).
    pub fn dial_server(
        &self,
        addr: &str,
        name: &str,
    ) -> Option<Arc<dyn engine::protocol::TabletService>> {
        Dialer::without_directory(self.rt.clone(), self.secret.clone(), self.tls.clone())
            .server_at(addr, name)
    }

    /// Calls (and scans) this node has admitted since it started.
    pub fn calls_served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Stops serving and waits for the calls in flight.
    pub fn stop(self) {
        self.coherence.stopped.store(true, Ordering::Release);
        self.frames.stop();
        self.running.stop();
    }
}

/// A framed request (`frame.rs`) as a daemon with `secret` would send it
/// to the daemon advertised as `target`, on a new connection (for raw
/// clients in tests).
#[doc(hidden)]
pub fn encode_frame(secret: Option<&Secret>, route: &str, target: &str, body: &[u8]) -> Vec<u8> {
    let token = secret
        .map(|s| s.token(route, target, body).0)
        .unwrap_or_default();
    frame::request(route, token.as_bytes(), body, true)
}
