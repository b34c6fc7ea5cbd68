//! What one client may cost a gRPC server (the public API's and the
//! internal RPC's) before it is authenticated or its request is decoded:
//! a request's body is bounded per method (small for control calls), all
//! requests being received at once share one budget of bytes, and a body
//! must arrive within a deadline. Without these, twelve streams that each
//! stop one byte short of a 255 MiB message held 3 GiB until the daemon was
//! OOM-killed; now each is refused with RESOURCE_EXHAUSTED (or
//! DEADLINE_EXCEEDED) and its bytes are freed.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::Status;

/// The limits of one server (options `rpc_*`; see docs/mount.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest data request (a write or a batch), in bytes.
    pub max_request: usize,
    /// Largest control, admin or read request, in bytes.
    pub max_control: usize,
    /// Bytes of requests being received at once, the whole server.
    pub buffer: usize,
    /// Streams one connection may have open at once.
    pub max_streams: u32,
    /// How long a request's body may take to arrive once its headers have.
    pub body_timeout: Duration,
    /// Largest HTTP/2 header list a client may send.
    pub max_header_list: u32,
    /// Connections open at once, the whole server; more are closed at once.
    pub max_connections: usize,
    /// How long a new connection may stay silent before it is closed.
    pub header_timeout: Duration,
}

/// The default largest data request: a cell of the engine's largest value
/// (64 MiB) with room for its keys.
pub const DEFAULT_MAX_REQUEST: usize = 80 << 20;
/// The default largest control request.
pub const DEFAULT_MAX_CONTROL: usize = 4 << 20;
/// The default budget of bytes being received at once.
pub const DEFAULT_BUFFER: usize = 256 << 20;
/// The default streams per connection.
pub const DEFAULT_MAX_STREAMS: u32 = 64;
/// The default deadline for a request's body.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// The default header list (tokens and routing headers are far smaller).
pub const DEFAULT_MAX_HEADER_LIST: u32 = 16 << 10;
/// The default number of connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The default time a new connection may stay silent.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request: DEFAULT_MAX_REQUEST,
            max_control: DEFAULT_MAX_CONTROL,
            buffer: DEFAULT_BUFFER,
            max_streams: DEFAULT_MAX_STREAMS,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_header_list: DEFAULT_MAX_HEADER_LIST,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
        }
    }
}

/// Counts a refusal of these limits in `bigtable_refused_calls_total`
/// (port `rpc`: both gRPC servers).
pub(crate) fn count(reason: &str) {
    telemetry::refused("rpc", reason);
}

/// Whether a method (the last part of its path) carries data (large
/// requests allowed) rather than control.
pub(crate) type Classify = fn(&str) -> bool;

/// Sets the HTTP/2 limits on a server being built.
pub(crate) fn server<L>(
    b: tonic::transport::Server<L>,
    limits: &Limits,
) -> tonic::transport::Server<L> {
    b.max_concurrent_streams(limits.max_streams)
        .http2_max_header_list_size(limits.max_header_list)
        // A peer that stops answering pings is dropped with its streams.
        .http2_keepalive_interval(Some(Duration::from_secs(5)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        // Streams opened and reset at once (the "rapid reset" attack).
        .http2_max_pending_accept_reset_streams(Some(32))
        .http2_max_local_error_reset_streams(Some(256))
}

/// The connections a server holds: each takes a permit of the server's
/// cap (released when it closes), and must send its first bytes within
/// the header timeout, else it is closed (an idle TCP connection used to
/// stay open for good, before HTTP/2 keep-alive even started).
#[derive(Clone)]
pub(crate) struct Conns {
    permits: Arc<tokio::sync::Semaphore>,
    header_timeout: Duration,
}

impl Conns {
    pub(crate) fn new(limits: &Limits) -> Conns {
        Conns {
            permits: Arc::new(tokio::sync::Semaphore::new(limits.max_connections)),
            header_timeout: limits.header_timeout,
        }
    }

    /// `io`, counted; None (and `io` closed) when the server holds as many
    /// as it may. Called inside the server's runtime.
    pub(crate) fn admit<T>(&self, io: T) -> Option<Conn<T>> {
        Some(self.wrap(io, self.permit()?))
    }

    /// A place for one more connection, if the server has one.
    pub(crate) fn permit(&self) -> Option<Permit> {
        let p = self.permits.clone().try_acquire_owned().ok();
        if p.is_none() {
            count("connections");
        }
        p
    }

    /// `io`, counted by `permit`. Called inside the server's runtime.
    pub(crate) fn wrap<T>(&self, io: T, permit: Permit) -> Conn<T> {
        Conn {
            io,
            first: Some(Box::pin(tokio::time::sleep(self.header_timeout))),
            _permit: permit,
        }
    }
}

/// One connection's place in a server's cap.
pub(crate) type Permit = tokio::sync::OwnedSemaphorePermit;

/// A connection a server holds (see [`Conns`]).
pub(crate) struct Conn<T> {
    io: T,
    /// Until the first bytes come.
    first: Option<Pin<Box<tokio::time::Sleep>>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Conn<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if let Some(d) = this.first.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                count("too_slow");
                return Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "a connection that sent nothing in time",
                )));
            }
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.first = None;
        }
        r
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Conn<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for Conn<T> {
    type ConnectInfo = T::ConnectInfo;
    fn connect_info(&self) -> T::ConnectInfo {
        self.io.connect_info()
    }
}

/// The bytes being received, the whole server.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicUsize,
    max: usize,
}

impl Budget {
    pub(crate) fn charge(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + n <= self.max).then_some(u + n)
            })
            .is_ok()
    }
    pub(crate) fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The tower layer that bounds each request's body.
#[derive(Clone)]
pub(crate) struct Guard {
    limits: Limits,
    budget: Arc<Budget>,
    data: Classify,
}

impl Guard {
    /// The budget of bytes being received, to share with another transport.
    pub(crate) fn budget(&self) -> Arc<Budget> {
        self.budget.clone()
    }

    pub(crate) fn new(limits: &Limits, data: Classify) -> Guard {
        Guard {
            budget: Arc::new(Budget {
                used: AtomicUsize::new(0),
                max: limits.buffer,
            }),
            limits: limits.clone(),
            data,
        }
    }
}

impl<S> tower::Layer<S> for Guard {
    type Service = Guarded<S>;
    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            inner,
            guard: self.clone(),
        }
    }
}

/// A service whose requests' bodies are bounded.
#[derive(Clone)]
pub(crate) struct Guarded<S> {
    inner: S,
    guard: Guard,
}

impl<S> tower::Service<http::Request<tonic::body::Body>> for Guarded<S>
where
    S: tower::Service<http::Request<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> S::Future {
        let method = req.uri().path().rsplit('/').next().unwrap_or("");
        let g = &self.guard;
        let max = if (g.data)(method) {
            g.limits.max_request
        } else {
            g.limits.max_control
        };
        let what = format!("{method} requests");
        let (parts, body) = req.into_parts();
        let body = Bounded {
            inner: body,
            // The gRPC frame's 5-byte header on top of the message.
            left: max + 5,
            max,
            what,
            charged: 0,
            budget: g.budget.clone(),
            deadline: Some(Box::pin(tokio::time::sleep(g.limits.body_timeout))),
            timeout: g.limits.body_timeout,
        };
        self.inner.call(http::Request::from_parts(
            parts,
            tonic::body::Body::new(body),
        ))
    }
}

/// A request body that may not exceed its method's size, the server's
/// budget or its deadline.
struct Bounded {
    inner: tonic::body::Body,
    left: usize,
    max: usize,
    what: String,
    charged: usize,
    budget: Arc<Budget>,
    /// None once the body is complete.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    timeout: Duration,
}

impl Bounded {
    fn finish(&mut self) {
        self.deadline = None;
        self.budget.release(std::mem::take(&mut self.charged));
    }

    fn refuse(&mut self, reason: &str, s: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        count(reason);
        self.finish();
        Poll::Ready(Some(Err(s)))
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        self.budget.release(self.charged);
    }
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        let Some(deadline) = this.deadline.as_mut() else {
            // Complete (or refused): nothing more is read.
            return Poll::Ready(None);
        };
        if deadline.as_mut().poll(cx).is_ready() {
            let s = Status::deadline_exceeded(format!(
                "the request's body did not arrive within {:?}",
                this.timeout
            ));
            return this.refuse("too_slow", s);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len();
                    if n > this.left {
                        let s = Status::resource_exhausted(format!(
                            "{} are limited to {} bytes",
                            this.what, this.max
                        ));
                        return this.refuse("too_large", s);
                    }
                    this.left -= n;
                    if !this.budget.charge(n) {
                        let s = Status::resource_exhausted(
                            "the server is receiving too many requests at once; retry",
                        );
                        return this.refuse("over_budget", s);
                    }
                    this.charged += n;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(Status::from_error(e.into()))))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.deadline.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let b = Budget {
            used: AtomicUsize::new(0),
            max: 10,
        };
        assert!(b.charge(6));
        assert!(!b.charge(5));
        assert!(b.charge(4));
        b.release(6);
        assert!(b.charge(6));
    }
}
