//! Running the services (data, table admin, instance admin) on one HTTP/2
//! listener (plain text) on a thread of its own with a small tokio
//! runtime, beside the mount's threads.

use crate::admin::AdminService;
use crate::data::DataService;
use crate::gen::admin::bigtable_table_admin_server::BigtableTableAdminServer;
use crate::gen::data::bigtable_server::BigtableServer;
use crate::gen::instance_admin::bigtable_instance_admin_server::BigtableInstanceAdminServer;
use crate::instance_admin::InstanceAdmin;
use crate::shared::Shared;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;

/// Largest request or response message (the API's clients allow 256 MiB).
pub(crate) const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// Errors starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address does not parse.
    #[error("invalid gRPC address {0:?}: expected PORT, HOST:PORT or [V6]:PORT")]
    BadAddress(String),
    /// The listener could not be bound (port in use, no such address, ...).
    #[error("gRPC listener on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// The server's thread or tokio runtime could not be started.
    #[error("gRPC runtime: {0}")]
    Runtime(std::io::Error),
}

/// `PORT` (loopback), `HOST:PORT` or `[V6]:PORT`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, Error> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Some(port) = s.strip_prefix("localhost:") {
        let port = port.parse().map_err(|_| Error::BadAddress(s.into()))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse().map_err(|_| Error::BadAddress(s.into()))
}

/// A running server; dropping it (or [`Running::stop`]) shuts it down.
pub struct Running {
    /// The address listened on (with the port chosen when asked for port 0).
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets calls in flight finish, and waits.
    pub fn stop(mut self) {
        self.shutdown();
    }
    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A listener bound now, so that the caller learns of a taken port at once
/// (and may be inside another runtime, where `block_on` is not allowed).
pub(crate) fn bind(addr: SocketAddr) -> Result<(std::net::TcpListener, SocketAddr), Error> {
    let bind = || -> std::io::Result<(std::net::TcpListener, SocketAddr)> {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        let local = l.local_addr()?;
        Ok((l, local))
    };
    bind().map_err(|source| Error::Bind { addr, source })
}

/// The connections `listener` accepts, with TCP_NODELAY: without it a small
/// streamed response waits for the client's delayed ACK (~40 ms a call).
/// Called inside the server's runtime.
/// Each is counted against `conns` (one over the cap is closed at once).
pub(crate) fn incoming(
    listener: std::net::TcpListener,
    conns: crate::guard::Conns,
) -> std::io::Result<
    impl tokio_stream::Stream<Item = std::io::Result<crate::guard::Conn<tokio::net::TcpStream>>>,
> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    Ok(
        tokio_stream::wrappers::TcpListenerStream::new(listener).filter_map(move |s| match s {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                conns.admit(s).map(Ok)
            }
            Err(e) => Some(Err(e)),
        }),
    )
}

/// Runs the server `serve` makes (it is given the signal to stop) on `rt`,
/// in a thread of its own, until the returned [`Running`] is stopped.
pub(crate) fn run<F>(
    rt: tokio::runtime::Runtime,
    thread: &str,
    addr: SocketAddr,
    serve: impl FnOnce(oneshot::Receiver<()>) -> F + Send + 'static,
) -> Result<Running, Error>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            if let Err(e) = rt.block_on(serve(stop_rx)) {
                log::error!("the server on {addr}: {e}");
            }
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
        })
        .map_err(Error::Runtime)?;
    Ok(Running {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// Serves both services on `addr` (port 0: any free port; see
/// `Running::addr`) with the default limits.
pub fn start(shared: Shared, addr: SocketAddr) -> Result<Running, Error> {
    start_with(shared, addr, &crate::Limits::default(), None)
}

/// The public API's methods whose requests carry data (large allowed).
fn data_method(method: &str) -> bool {
    matches!(
        method,
        "MutateRow" | "MutateRows" | "CheckAndMutateRow" | "ReadModifyWriteRow"
    )
}

/// Serves both services on `addr`, bounded by `limits`, over TLS when
/// `tls` is given (a handler finds the client's certificate, if it
/// presented one of `grpc_client_ca`, with `Request::peer_certs`).
pub fn start_with(
    shared: Shared,
    addr: SocketAddr,
    limits: &crate::Limits,
    tls: Option<Arc<crate::Tls>>,
) -> Result<Running, Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(32)
        .thread_name("bt-grpc")
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let (listener, addr) = bind(addr)?;
    let shared = Arc::new(shared);
    // Announced sizes beyond the largest the guard lets through are
    // refused on the message's 5-byte header.
    let largest = limits.max_request.max(limits.max_control);
    let data = BigtableServer::new(DataService {
        shared: shared.clone(),
    })
    .max_decoding_message_size(largest)
    .max_encoding_message_size(MAX_MESSAGE);
    let instance_admin = BigtableInstanceAdminServer::new(InstanceAdmin {
        shared: shared.clone(),
    })
    .max_decoding_message_size(largest)
    .max_encoding_message_size(MAX_MESSAGE);
    let admin = BigtableTableAdminServer::new(AdminService { shared })
        .max_decoding_message_size(largest)
        .max_encoding_message_size(MAX_MESSAGE);
    let limits = limits.clone();
    let running = run(rt, "bt-grpc-main", addr, move |stop| async move {
        let router = crate::guard::server(tonic::transport::Server::builder(), &limits)
            .layer(crate::guard::Guard::new(&limits, data_method))
            .layer(tower::layer::layer_fn(crate::timing::Timed))
            .add_service(data)
            .add_service(admin)
            .add_service(instance_admin);
        let stop = async {
            let _ = stop.await;
        };
        let conns = crate::guard::Conns::new(&limits);
        match tls {
            Some(tls) => {
                let incoming = crate::tls::incoming(listener, tls, conns, "gRPC API")?;
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
            None => {
                let incoming = incoming(listener, conns)?;
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
        }
        .map_err(std::io::Error::other)
    })?;
    log::info!("serving the Bigtable v2 gRPC API on {addr}");
    Ok(running)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("8086").unwrap().to_string(), "127.0.0.1:8086");
        assert_eq!(
            parse_addr("localhost:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert_eq!(parse_addr("0.0.0.0:9").unwrap().to_string(), "0.0.0.0:9");
        assert_eq!(parse_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(parse_addr("nope").is_err());
    }
}
