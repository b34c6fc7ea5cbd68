//! The object store `--store s3` measures: SeaweedFS on loopback, in a fresh
//! directory on free ports with one bucket, started by the launcher the
//! tests use (`testkit::seaweed`, feature `bench-s3`), and a credentials
//! file for the mount. Dropping it kills the server.

use anyhow::Result;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The bucket the bench makes.
const BUCKET: &str = "bench";

/// A running S3 server and how to reach it.
#[cfg_attr(not(feature = "bench-s3"), allow(dead_code))]
pub struct S3Server {
    #[cfg(feature = "bench-s3")]
    _server: testkit::seaweed::Seaweed,
    /// Between the engine and the server when it is made to look far away.
    #[cfg(feature = "bench-s3")]
    proxy: Option<testkit::delay_proxy::DelayProxy>,
    endpoint: String,
    credentials: PathBuf,
}

impl S3Server {
    /// Starts SeaweedFS (`BIGTABLE_WEED`, else `weed` on the PATH) and
    /// writes its keys to a credentials file in `work`.
    pub fn start(work: &Path) -> Result<S3Server> {
        S3Server::start_on(work, "127.0.0.1")
    }

    /// The same, listening on address `host` of this machine.
    #[cfg(feature = "bench-s3")]
    pub fn start_on(work: &Path, host: &str) -> Result<S3Server> {
        use anyhow::Context;
        use testkit::seaweed::{Seaweed, ACCESS_KEY, SECRET_KEY};
        // The launcher panics, saying why, when the server does not come up.
        let server =
            std::panic::catch_unwind(|| Seaweed::start_on(BUCKET, host)).map_err(|_| {
                anyhow::anyhow!(
                    "SeaweedFS did not start (why is above; BIGTABLE_WEED names `weed`)"
                )
            })?;
        let credentials = work.join("s3-credentials");
        std::fs::write(
            &credentials,
            format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"),
        )
        .with_context(|| format!("writing {}", credentials.display()))?;
        // The daemon refuses a credentials file others can read.
        std::fs::set_permissions(
            &credentials,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
        Ok(S3Server {
            endpoint: server.endpoint.clone(),
            _server: server,
            proxy: None,
            credentials,
        })
    }

    /// Puts a proxy in front of the server that delays each direction by
    /// `delay`: every later [`S3Server::mount_options`] goes through it.
    #[cfg(feature = "bench-s3")]
    pub fn delay(&mut self, delay: Duration) -> Result<()> {
        use anyhow::Context;
        let upstream: std::net::SocketAddr = self
            .endpoint
            .trim_start_matches("http://")
            .parse()
            .with_context(|| format!("the S3 endpoint {}", self.endpoint))?;
        let proxy = testkit::delay_proxy::DelayProxy::start(upstream, delay)
            .context("starting the delaying proxy")?;
        self.endpoint = format!("http://{}", proxy.addr());
        self.proxy = Some(proxy);
        Ok(())
    }

    #[cfg(not(feature = "bench-s3"))]
    pub fn delay(&mut self, _: Duration) -> Result<()> {
        anyhow::bail!("--s3-delay-ms needs the bench built with --features bench-s3")
    }

    #[cfg(not(feature = "bench-s3"))]
    pub fn start_on(_: &Path, _: &str) -> Result<S3Server> {
        anyhow::bail!(
            "--store s3 needs the bench built with the S3 server launcher: \
             cargo build --release -p mountd --features bench-s3"
        )
    }

    /// The mount options of a store under `prefix` in the bench's bucket.
    pub fn mount_options(&self, prefix: &str) -> String {
        format!(
            "store=s3://{BUCKET}/{prefix},s3_endpoint={},s3_credentials={}",
            self.endpoint,
            self.credentials.display()
        )
    }
}
