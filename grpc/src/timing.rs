//! Each call's latency by method (`bigtable_grpc_request_duration_seconds`),
//! as a tower layer around both services: from the request to the
//! response's headers (a streamed response's first message). The same
//! layer names the method in an empty UNIMPLEMENTED reply (`unserved.rs`),
//! so that a call goes through one boxed future, not two.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// The services, timed.
#[derive(Clone)]
pub(crate) struct Timed<S>(pub(crate) S);

impl<S, B, RB> tower::Service<http::Request<B>> for Timed<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        // A clone of the URI shares its bytes.
        let uri = req.uri().clone();
        let start = Instant::now();
        let f = self.0.call(req);
        Box::pin(async move {
            let mut r = f.await;
            // `/google.bigtable.v2.Bigtable/ReadRows` is timed as `ReadRows`.
            let method = uri.path().rsplit('/').next().unwrap_or("");
            telemetry::observe(telemetry::Latency::Grpc, method, start.elapsed());
            if let Ok(r) = &mut r {
                crate::unserved::name(uri.path(), r.headers_mut());
            }
            r
        })
    }
}
