//! One object store's requests, timed and counted, run on the bridge: the
//! only place that talks to `object_store`.

use crate::bridge::Bridge;
use crate::config::S3Config;
use crate::error::{Error, Result};
use crate::stats::{Kind, Stats};
use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    ClientOptions, GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode,
    PutOptions, PutPayload, RetryConfig, UpdateVersion,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Object-store errors as they come.
pub(crate) type OsResult<T> = std::result::Result<T, object_store::Error>;

/// A connection to one bucket.
pub(crate) struct Client {
    store: Arc<dyn ObjectStore>,
    bridge: Bridge,
    pub(crate) stats: Arc<Stats>,
    pub(crate) location: String,
}

impl Client {
    pub(crate) fn connect(cfg: &S3Config) -> Result<Client> {
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&cfg.bucket)
            .with_region(&cfg.region)
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                max_retries: 1000,
                retry_timeout: cfg.timeout,
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(cfg.timeout.min(Duration::from_secs(30)))
                    .with_connect_timeout(Duration::from_secs(5)),
            );
        if let Some(e) = &cfg.endpoint {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        if let Some(c) = &cfg.credentials {
            b = b
                .with_access_key_id(&c.access_key_id)
                .with_secret_access_key(&c.secret_access_key);
            if let Some(t) = &c.session_token {
                b = b.with_token(t);
            }
        }
        let store = b
            .build()
            .map_err(|e| Error::Config(format!("{}: {e}", cfg.location())))?;
        let bridge = Bridge::new().map_err(|e| Error::Config(format!("runtime: {e}")))?;
        Ok(Client {
            store: Arc::new(store),
            bridge,
            stats: Arc::new(Stats::new()),
            location: cfg.location(),
        })
    }

    /// Runs one request of `kind` on the bridge, timing and counting it.
    fn call<T: Send + 'static>(
        &self,
        kind: Kind,
        f: impl std::future::Future<Output = OsResult<(T, u64)>> + Send + 'static,
    ) -> OsResult<T> {
        let start = Instant::now();
        let stats = self.stats.clone();
        let r = self
            .bridge
            .run(async move {
                let r = f.await;
                let (ok, bytes) = match &r {
                    Ok((_, n)) => (true, *n),
                    // A refusal the caller expects is an answer, not an error.
                    Err(object_store::Error::NotFound { .. })
                    | Err(object_store::Error::AlreadyExists { .. }) => (true, 0),
                    Err(_) => (false, 0),
                };
                stats.record(kind, ok, bytes, start.elapsed());
                r
            })
            .unwrap_or_else(|| {
                Err(object_store::Error::Generic {
                    store: "S3",
                    source: "the object store's runtime has stopped".into(),
                })
            });
        r.map(|(v, _)| v)
    }

    /// Stores `data` at `key`: `Create` fails if the key is taken, `Update`
    /// if the object's ETag is no longer the one given. Returns the new ETag.
    pub(crate) fn put(&self, key: &Path, data: Bytes, mode: PutMode) -> OsResult<Option<String>> {
        let (store, key) = (self.store.clone(), key.clone());
        let n = data.len() as u64;
        self.call(Kind::Put, async move {
            let opts = PutOptions {
                mode,
                ..PutOptions::default()
            };
            let r = store.put_opts(&key, PutPayload::from(data), opts).await?;
            Ok((r.e_tag, n))
        })
    }

    /// `Update` mode for an object last seen with `etag`.
    pub(crate) fn update(etag: Option<String>) -> PutMode {
        PutMode::Update(UpdateVersion {
            e_tag: etag,
            version: None,
        })
    }

    /// Bytes `offset..offset+len` of `key` (all of it with `None`).
    pub(crate) fn get(&self, key: &Path, range: Option<(u64, usize)>) -> OsResult<Bytes> {
        let (store, key) = (self.store.clone(), key.clone());
        self.call(Kind::Get, async move {
            let opts = GetOptions {
                range: range.map(|(o, l)| GetRange::Bounded(o..o + l as u64)),
                ..GetOptions::default()
            };
            let b = store.get_opts(&key, opts).await?.bytes().await?;
            let n = b.len() as u64;
            Ok((b, n))
        })
    }

    /// Several ranges of one object, fetched at once.
    pub(crate) fn get_many(&self, key: &Path, ranges: &[(u64, usize)]) -> OsResult<Vec<Bytes>> {
        let (store, key) = (self.store.clone(), key.clone());
        let ranges: Vec<_> = ranges.iter().map(|&(o, l)| o..o + l as u64).collect();
        self.call(Kind::Get, async move {
            let parts = futures::future::join_all(ranges.into_iter().map(|r| {
                let (store, key) = (store.clone(), key.clone());
                async move { store.get_range(&key, r).await }
            }))
            .await;
            let parts: Vec<Bytes> = parts.into_iter().collect::<OsResult<_>>()?;
            let n = parts.iter().map(|p| p.len() as u64).sum();
            Ok((parts, n))
        })
    }

    /// Whole objects, fetched a few at a time, in the order given.
    pub(crate) fn get_all(&self, keys: Vec<Path>) -> OsResult<Vec<Bytes>> {
        let store = self.store.clone();
        self.call(Kind::Get, async move {
            let parts: Vec<OsResult<Bytes>> = futures::stream::iter(keys)
                .map(|k| {
                    let store = store.clone();
                    async move { store.get(&k).await?.bytes().await }
                })
                .buffered(16)
                .collect()
                .await;
            let parts: Vec<Bytes> = parts.into_iter().collect::<OsResult<_>>()?;
            let n = parts.iter().map(|p| p.len() as u64).sum();
            Ok((parts, n))
        })
    }

    pub(crate) fn head(&self, key: &Path) -> OsResult<ObjectMeta> {
        let (store, key) = (self.store.clone(), key.clone());
        self.call(Kind::Head, async move { Ok((store.head(&key).await?, 0)) })
    }

    /// Every object under the directory `dir`, in key order.
    pub(crate) fn list(&self, dir: &Path) -> OsResult<Vec<ObjectMeta>> {
        let (store, dir) = (self.store.clone(), dir.clone());
        self.call(Kind::List, async move {
            let mut all: Vec<ObjectMeta> = store
                .list(Some(&dir))
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<OsResult<_>>()?;
            all.sort_by(|a, b| a.location.cmp(&b.location));
            Ok((all, 0))
        })
    }

    pub(crate) fn delete(&self, key: &Path) -> OsResult<()> {
        let (store, key) = (self.store.clone(), key.clone());
        self.call(
            Kind::Delete,
            async move { Ok((store.delete(&key).await?, 0)) },
        )
    }

    /// Deletes many objects (missing ones are not an error).
    pub(crate) fn delete_all(&self, keys: Vec<Path>) -> OsResult<()> {
        let store = self.store.clone();
        self.call(Kind::Delete, async move {
            let stream = futures::stream::iter(keys.into_iter().map(Ok)).boxed();
            let results: Vec<_> = store.delete_stream(stream).collect().await;
            for r in results {
                match r {
                    Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(((), 0))
        })
    }
}
