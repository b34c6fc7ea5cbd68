//! TLS for both gRPC servers and the internal RPC's client, with rustls
//! (the `ring` provider; no OpenSSL), from PEM files that are read again
//! when they change (at most once a second, on the next connection), so
//! that certificates can be renewed without a restart. A file that no
//! longer parses is logged and the previous configuration kept.
//!
//! The handshake happens in a task of its own per connection, with a
//! deadline, so a client that never finishes it holds nothing but its
//! socket; a refused handshake (no certificate, another CA's, an expired
//! one) is logged with the peer's address, once a minute per address.

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// How long a TLS handshake may take.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Handshakes in progress at once, per listener; a connection beyond them
/// is closed at once.
const MAX_HANDSHAKES: usize = 128;
/// How often the files are looked at for changes.
const RECHECK: Duration = Duration::from_secs(1);

/// Where a listener's (and its clients') certificates are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA whose certificates peers must present (None: clients need
    /// none; only for the public API).
    pub ca: Option<PathBuf>,
    /// This daemon's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// A stamp of the files: what changes when one is rewritten.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    let mut paths = vec![&files.cert, &files.key];
    paths.extend(files.ca.as_ref());
    paths
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

struct Configs {
    server: Arc<ServerConfig>,
    client: Option<Arc<ClientConfig>>,
}

/// TLS settings read from files, reloaded when they change.
pub struct Tls {
    files: TlsFiles,
    /// Peers must present a certificate of the CA.
    require_client: bool,
    current: ArcSwap<Configs>,
    checked: Mutex<(Instant, Stamp)>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.files)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn roots(path: &Path) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for c in certs(path)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

fn build(files: &TlsFiles, require_client: bool) -> Result<Configs, String> {
    let chain = certs(&files.cert)?;
    let key = key(&files.key)?;
    let tls = |e: rustls::Error| format!("TLS with {}: {e}", files.cert.display());
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls)?;
    let roots = files.ca.as_deref().map(roots).transpose()?;
    let mut server = match &roots {
        Some(roots) => {
            let v = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
            let v = if require_client {
                v
            } else {
                v.allow_unauthenticated()
            };
            let v = v.build().map_err(|e| format!("client CA: {e}"))?;
            builder
                .with_client_cert_verifier(v)
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(tls)?
        }
        None => builder
            .with_no_client_auth()
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(tls)?,
    };
    server.alpn_protocols = vec![b"h2".to_vec()];
    // A client (the internal RPC's) trusts the same CA and presents the
    // same certificate.
    let client = match (&roots, require_client) {
        (Some(roots), true) => {
            let mut c = ClientConfig::builder_with_provider(provider())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .map_err(tls)?
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(chain, key)
                .map_err(tls)?;
            c.alpn_protocols = vec![b"h2".to_vec()];
            Some(Arc::new(c))
        }
        _ => None,
    };
    Ok(Configs {
        server: Arc::new(server),
        client,
    })
}

impl Tls {
    /// Reads `files`; with `require_client`, peers must present a
    /// certificate of `files.ca` (mutual TLS), else one is optional.
    pub fn load(files: TlsFiles, require_client: bool) -> Result<Arc<Tls>, String> {
        if require_client && files.ca.is_none() {
            return Err("mutual TLS needs the CA's certificate".into());
        }
        let configs = build(&files, require_client)?;
        Ok(Arc::new(Tls {
            checked: Mutex::new((Instant::now(), stamp(&files))),
            files,
            require_client,
            current: ArcSwap::from_pointee(configs),
        }))
    }

    /// Reads the files again if they changed since last looked at.
    fn refresh(&self) {
        let mut checked = self.checked.lock();
        if checked.0.elapsed() < RECHECK {
            return;
        }
        checked.0 = Instant::now();
        let now = stamp(&self.files);
        if now == checked.1 {
            return;
        }
        checked.1 = now;
        match build(&self.files, self.require_client) {
            Ok(c) => {
                self.current.store(Arc::new(c));
                log::info!("reloaded the TLS certificate {}", self.files.cert.display());
            }
            Err(e) => log::warn!("kept the previous TLS certificate: {e}"),
        }
    }

    fn acceptor(&self) -> TlsAcceptor {
        self.refresh();
        TlsAcceptor::from(self.current.load().server.clone())
    }

    fn connector(&self) -> Option<TlsConnector> {
        self.refresh();
        self.current.load().client.clone().map(TlsConnector::from)
    }
}

/// Logs a refused connection (once a minute per address and reason: the
/// reasons are rustls's, a small set).
fn log_refusal(what: &str, peer: std::net::IpAddr, why: &str) {
    telemetry::refused("tls", "handshake");
    let key = format!("{} {why}", crate::internal::quiet::ip_key(Some(peer)));
    if let Some(more) = crate::internal::quiet::should_log(&key) {
        log::warn!(
            "refused a connection to the {what} from {peer}: {why} \
             ({more} more refused since this was last logged)"
        );
    }
}

/// The TLS connections `listener` accepts, handshakes done (refused ones
/// logged). Called inside the server's runtime.
pub(crate) fn incoming(
    listener: std::net::TcpListener,
    tls: Arc<Tls>,
    conns: crate::guard::Conns,
    what: &'static str,
) -> std::io::Result<
    impl tokio_stream::Stream<
        Item = std::io::Result<crate::guard::Conn<tokio_rustls::server::TlsStream<TcpStream>>>,
    >,
> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        while !tx.is_closed() {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("accept on the {what}: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                log_refusal(what, peer.ip(), "too many TLS handshakes at once");
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            let conns = conns.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => {
                        if let Some(s) = conns.admit(s) {
                            let _ = tx.send(Ok(s)).await;
                        } else {
                            log_refusal(what, peer.ip(), "too many connections");
                        }
                    }
                    Ok(Err(e)) => log_refusal(what, peer.ip(), &format!("TLS: {e}")),
                    Err(_) => log_refusal(what, peer.ip(), "TLS handshake not done in time"),
                }
            });
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Dials peers of the internal RPC over mutual TLS: the server's
/// certificate must be the cluster CA's and name the host dialed.
#[derive(Clone)]
pub(crate) struct Connector {
    pub(crate) tls: Arc<Tls>,
}

type Dialed = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;

impl tower::Service<http::Uri> for Connector {
    type Response = Dialed;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Dialed>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
            let host = uri.host().ok_or_else(|| bad(format!("no host in {uri}")))?;
            let host = host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let port = uri
                .port_u16()
                .ok_or_else(|| bad(format!("no port in {uri}")))?;
            let connector = tls
                .connector()
                .ok_or_else(|| bad("no client certificate".into()))?;
            let name =
                ServerName::try_from(host.clone()).map_err(|e| bad(format!("{host}: {e}")))?;
            let dial = async {
                let tcp = TcpStream::connect((host.as_str(), port)).await?;
                let _ = tcp.set_nodelay(true);
                connector.connect(name, tcp).await
            };
            let s = tokio::time::timeout(HANDSHAKE, dial).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake")
            })??;
            Ok(hyper_util::rt::TokioIo::new(s))
        })
    }
}
