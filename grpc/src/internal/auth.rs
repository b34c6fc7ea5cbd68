//! The check of a call's credentials on its headers, as a tower layer in
//! front of the service: a call without a valid token is answered
//! UNAUTHENTICATED before a byte of its body is read, let alone decoded
//! (a tonic interceptor would do the same, but it is not told the route,
//! which the token covers).

use super::secret::Secret;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The layer; `secret` None lets every call through.
#[derive(Clone)]
pub(crate) struct Authenticate {
    pub(crate) secret: Option<Secret>,
}

impl<S> tower::Layer<S> for Authenticate {
    type Service = Authenticated<S>;
    fn layer(&self, inner: S) -> Authenticated<S> {
        Authenticated {
            inner,
            secret: self.secret.clone(),
        }
    }
}

/// The service behind the check.
#[derive(Clone)]
pub(crate) struct Authenticated<S> {
    inner: S,
    secret: Option<Secret>,
}

/// The caller's IP, as the connection recorded it.
pub(crate) fn peer_ip<B>(req: &http::Request<B>) -> Option<IpAddr> {
    use tonic::transport::server::TcpConnectInfo;
    req.extensions()
        .get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .map(|a| a.ip())
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
        if let Some(secret) = &self.secret {
            let method = req.uri().path().rsplit('/').next().unwrap_or("");
            match secret.check(req.headers(), method, peer_ip(&req)) {
                Ok(claims) => {
                    req.extensions_mut().insert(claims);
                }
                Err(status) => {
                    let answer = status.into_http();
                    return Box::pin(async move { Ok(answer) });
                }
            }
        }
        Box::pin(self.inner.call(req))
    }
}
