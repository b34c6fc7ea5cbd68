//! The check of a call's credentials on its headers, as a tower layer in
//! front of the service: a call without a valid token (for this route, to
//! this daemon, in the window, with a nonce not seen before) is answered
//! UNAUTHENTICATED before a byte of its body is read, let alone decoded
//! (a tonic interceptor would do the same, but it is not told the route,
//! which the token covers). The handler then compares the body with the
//! digest the token covers.

use super::nonces::{Fresh, Nonces};
use super::secret::{now_secs, Secret};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tonic::Status;

/// The layer; `secret` None lets every call through.
#[derive(Clone)]
pub(crate) struct Authenticate {
    pub(crate) secret: Option<Secret>,
    /// This daemon's advertised address, which tokens must name.
    pub(crate) target: Arc<str>,
    pub(crate) nonces: Arc<Nonces>,
}

impl<S> tower::Layer<S> for Authenticate {
    type Service = Authenticated<S>;
    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            auth: self.clone(),
        }
    }
}

/// The service behind the check.
#[derive(Clone)]
pub(crate) struct Authenticated<S> {
    inner: S,
    auth: Authenticate,
}

/// The caller's IP, as the connection recorded it.
pub(crate) fn peer_ip<B>(req: &http::Request<B>) -> Option<IpAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let x = req.extensions();
    x.get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .or_else(|| {
            x.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
        .map(|a| a.ip())
}

/// Logs a refusal of `peer` (once a minute per address).
pub(crate) fn log_refusal(peer: Option<IpAddr>, why: &str) {
    telemetry::refused("cluster", "unauthenticated");
    let peer = super::quiet::ip_key(peer);
    if let Some(more) = super::quiet::should_log(&peer) {
        log::warn!(
            "refused an internal call from {peer}: {why} \
             ({more} more refused since this was last logged)"
        );
    }
}

impl Authenticate {
    fn check<B>(&self, req: &mut http::Request<B>) -> Result<(), Status> {
        let Some(secret) = &self.secret else {
            return Ok(());
        };
        let method = req.uri().path().rsplit('/').next().unwrap_or("");
        let now = now_secs();
        let refuse = |why: &str| {
            log_refusal(peer_ip(req), why);
            Status::unauthenticated(why.to_string())
        };
        let claims = secret
            .check(req.headers(), method, &self.target, now)
            .map_err(refuse)?;
        match self.nonces.admit(claims.secs, claims.nonce.value(), now) {
            Fresh::Yes => {}
            Fresh::Replayed => {
                telemetry::refused("cluster", "replayed");
                return Err(refuse("a replayed call (its nonce was seen)"));
            }
            Fresh::Full => {
                if let Some(more) = super::quiet::should_log("the replay cache") {
                    log::warn!(
                        "refused internal calls: the replay cache is full \
                         (cluster_replay_cache; {more} more since this was last logged)"
                    );
                }
                return Err(Status::unavailable(
                    "too many calls in the last minute to check for replays; retry",
                ));
            }
        }
        req.extensions_mut().insert(claims);
        Ok(())
    }
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S> tower::Service<http::Request<tonic::body::Body>> for Authenticated<S>
where
    S: tower::Service<
        http::Request<tonic::body::Body>,
        Response = http::Response<tonic::body::Body>,
    >,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<tonic::body::Body>) -> Self::Future {
        if let Err(status) = self.auth.check(&mut req) {
            let answer = status.into_http();
            return Box::pin(async move { Ok(answer) });
        }
        Box::pin(self.inner.call(req))
    }
}
