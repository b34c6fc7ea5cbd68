//! Where the objects go and how to reach them: `s3://BUCKET[/PREFIX]`, the
//! endpoint, the region, the credentials and the time limits.

use crate::credentials::Credentials;
use crate::error::{Error, Result};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How to reach one bucket and prefix. `Debug` never shows the secrets.
#[derive(Clone)]
pub struct S3Config {
    /// The bucket (3 to 63 characters).
    pub bucket: String,
    /// The key prefix every object of this store goes under (no leading or
    /// trailing slash; empty: the bucket's root).
    pub prefix: String,
    /// The endpoint of a store other than AWS (`http://127.0.0.1:8333`).
    pub endpoint: Option<String>,
    /// The region (default `us-east-1`; most other stores ignore it).
    pub region: String,
    /// The keys; `None` takes them from the usual AWS environment variables.
    pub credentials: Option<Credentials>,
    /// How long a request is retried (with backoff) before it fails: a store
    /// that stays away longer fails writes with an error instead of hanging.
    pub timeout: Duration,
    /// Where fetched ranges are cached on local disk (`None`: no disk cache).
    pub cache_dir: Option<PathBuf>,
    /// Bytes the disk cache may hold.
    pub disk_cache_bytes: u64,
    /// Several daemons serve tables from this prefix at once (they share a
    /// lock service that says which is alive): none takes the prefix over,
    /// and a dead server's logs are sealed one directory at a time when
    /// they are recovered. Otherwise (the default) the daemon that opens
    /// the prefix owns it and fences any other.
    pub shared: bool,
}

/// Default time a request is retried before it fails.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default size of the disk cache.
pub const DEFAULT_DISK_CACHE: u64 = 1 << 30;

impl S3Config {
    /// Parses `s3://BUCKET[/PREFIX]`; everything else takes its default.
    pub fn from_url(url: &str) -> Result<S3Config> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| {
            Error::Config(format!("{url}: an S3 location is s3://BUCKET[/PREFIX]"))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid {
            return Err(Error::Config(format!(
                "{url}: a bucket name is 3 to 63 lower-case letters, digits, '-' or '.'"
            )));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|p| p == "." || p == "..") {
            return Err(Error::Config(format!(
                "{url}: '.' and '..' are not prefixes"
            )));
        }
        Ok(S3Config {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            endpoint: None,
            region: "us-east-1".to_string(),
            credentials: None,
            timeout: DEFAULT_TIMEOUT,
            cache_dir: None,
            disk_cache_bytes: DEFAULT_DISK_CACHE,
            shared: false,
        })
    }

    /// `s3://BUCKET/PREFIX`, as users wrote it (no secrets in it).
    pub fn location(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("location", &self.location())
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("credentials", &self.credentials.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .field("cache_dir", &self.cache_dir)
            .field("disk_cache_bytes", &self.disk_cache_bytes)
            .field("shared", &self.shared)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bucket_and_prefix() {
        let c = S3Config::from_url("s3://my-bucket/tables/prod/").unwrap();
        assert_eq!(
            (c.bucket.as_str(), c.prefix.as_str()),
            ("my-bucket", "tables/prod")
        );
        assert_eq!(c.location(), "s3://my-bucket/tables/prod");
        let c = S3Config::from_url("s3://abc").unwrap();
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("abc", ""));
    }

    #[test]
    fn refuses_bad_locations() {
        for bad in [
            "http://b/p",
            "s3://ab",
            "s3://Upper",
            "s3://b_u_c",
            "s3://bucket/../x",
        ] {
            assert!(S3Config::from_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_hides_secrets() {
        let mut c = S3Config::from_url("s3://bucket").unwrap();
        c.credentials = Some(Credentials {
            access_key_id: "AKIDSECRET".into(),
            secret_access_key: "verysecret".into(),
            session_token: Some("tok3n".into()),
        });
        let shown = format!("{c:?}");
        for s in ["AKIDSECRET", "verysecret", "tok3n"] {
            assert!(!shown.contains(s), "{shown}");
        }
    }
}
