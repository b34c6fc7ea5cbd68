//! [`S3Store`]: the file layer's [`FileStore`] on an S3-compatible bucket.

use crate::client::Client;
use crate::config::S3Config;
use crate::disk_cache::DiskCache;
use crate::error::{is_timeout, to_gfs, Error, Result};
use crate::files::{LogReader, ObjectReader, ObjectWriter, SegmentWriter};
use crate::keys::Keys;
use crate::owner::{self, Claim};
use crate::shared::{segments, OpenGuard, Shared};
use bytes::Bytes;
use gfs::{FileStore, ReadableFile, WritableFile};
use object_store::PutMode;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Files in an S3-compatible object store.
pub struct S3Store {
    shared: Arc<Shared>,
}

/// How often a daemon looks at `OWNER` to learn it was fenced.
const OWNER_CHECK: Duration = Duration::from_secs(3);

impl S3Store {
    /// Connects, checks that the bucket answers with these keys (failing at
    /// once, with what is wrong, when it does not), then takes the prefix
    /// over and seals its logs, unless several daemons share it
    /// ([`S3Config::shared`]).
    pub fn open(cfg: S3Config) -> Result<S3Store> {
        let location = cfg.location();
        // The first request waits at most a few seconds: a wrong endpoint
        // must fail a mount at once, not after the write time limit.
        let mut probe_cfg = cfg.clone();
        probe_cfg.timeout = cfg.timeout.min(Duration::from_secs(5));
        let keys = Keys::new(&cfg.prefix);
        let probe = Client::connect(&probe_cfg)?;
        probe
            .list(&keys.files_dir_for("OWNER-probe"))
            .map_err(|e| explain(&location, probe_cfg.timeout, e))?;
        drop(probe);
        let client = Client::connect(&cfg)?;
        let claim = if cfg.shared {
            log::info!("{location}: shared with the other daemons of the cluster");
            None
        } else {
            Some(take_over(&client, &keys, &location, cfg.timeout)?)
        };
        let cache = match &cfg.cache_dir {
            Some(d) => Some(
                DiskCache::open(d, cfg.disk_cache_bytes)
                    .map_err(|e| Error::Config(format!("cache_dir={}: {e}", d.display())))?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            client,
            keys,
            cache,
            claim,
            fenced: AtomicBool::new(false),
            open: Mutex::new(HashMap::new()),
            etags: Mutex::new(HashMap::new()),
        });
        if !shared.is_shared() {
            watch_owner(Arc::downgrade(&shared));
        }
        Ok(S3Store { shared })
    }

    /// This daemon's epoch on the prefix (0 when several daemons share it).
    pub fn epoch(&self) -> u64 {
        self.shared.claim.as_ref().map_or(0, |c| c.epoch)
    }

    /// Whether another daemon has taken the prefix over.
    pub fn is_fenced(&self) -> bool {
        self.shared.fenced.load(Ordering::Acquire)
    }

    fn read_whole(&self, name: &str) -> gfs::Result<Vec<u8>> {
        let f = self.open(name)?;
        let n = f.len()? as usize;
        f.read_at(0, n)
    }
}

/// Takes the prefix over: a new epoch in `OWNER`, then every log sealed.
fn take_over(c: &Client, keys: &Keys, location: &str, limit: Duration) -> Result<Claim> {
    let claim = owner::claim(c, keys).map_err(|e| explain(location, limit, e))?;
    let sealed = owner::seal_logs(c, keys, "").map_err(|e| explain(location, limit, e))?;
    match &claim.previous {
        Some(p) => log::info!(
            "{location}: took the prefix over at epoch {} (was: {p}); sealed {sealed} logs",
            claim.epoch
        ),
        None => log::info!("{location}: a new prefix, epoch {}", claim.epoch),
    }
    Ok(claim)
}

/// Looks at `OWNER` every few seconds; a newer epoch fences this store.
fn watch_owner(shared: Weak<Shared>) {
    let spawned = std::thread::Builder::new()
        .name("s3-owner".into())
        .spawn(move || loop {
            std::thread::sleep(OWNER_CHECK);
            let Some(s) = shared.upgrade() else {
                return;
            };
            if s.fenced.load(Ordering::Acquire) {
                return;
            }
            match s.client.get(&s.keys.owner(), None) {
                Ok(body) => s.fence_unless_ours(&body),
                Err(e) => log::debug!("{}: reading OWNER: {e}", s.client.location),
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the object store's owner check: {e}");
    }
}

/// Turns the first request's failure into what a person must fix.
fn explain(location: &str, limit: Duration, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let text = e.to_string();
    // The status as the client words it: a bare "404" also turns up in the
    // text's durations and addresses ("in 5.09664046s").
    let status = |code: u16| text.contains(&format!("status code: {code}"));
    let hint = if text.contains("InvalidAccessKeyId")
        || text.contains("SignatureDoesNotMatch")
        || text.contains("AccessDenied")
        || status(403)
        || matches!(e, E::PermissionDenied { .. } | E::Unauthenticated { .. })
    {
        "the store refused these credentials (check AWS_ACCESS_KEY_ID / s3_credentials)"
    } else if text.contains("NoSuchBucket") {
        "the bucket does not exist (create it first)"
    } else if status(404) || matches!(e, E::NotFound { .. }) {
        "not found: check the bucket name and s3_endpoint"
    } else if is_timeout(&text) {
        return Error::Unreachable {
            location: location.to_string(),
            secs: limit.as_secs(),
            detail: format!("is s3_endpoint right and the store up? ({text})"),
        };
    } else {
        "the store refused the request"
    };
    Error::Refused {
        location: location.to_string(),
        detail: format!("{hint}: {text}"),
    }
}

impl FileStore for S3Store {
    fn create(&self, name: &str) -> gfs::Result<Box<dyn WritableFile>> {
        self.shared.check_fenced(name)?;
        if self.exists(name)? {
            return Err(gfs::Error::AlreadyExists(name.to_string()));
        }
        Ok(Box::new(ObjectWriter {
            shared: self.shared.clone(),
            name: name.to_string(),
            buf: Vec::new(),
            uploaded: None,
            synced_len: 0,
        }))
    }

    fn create_log(&self, name: &str) -> gfs::Result<Box<dyn WritableFile>> {
        let s = &self.shared;
        s.check_fenced(name)?;
        match s.client.head(&s.keys.file(name)) {
            Ok(_) => return Err(gfs::Error::AlreadyExists(name.to_string())),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(to_gfs(name, e)),
        }
        // The log exists from here on, empty, as a created file does on a
        // disk (the engine lists a dead server's logs to recover and to
        // collect them): its segment 0 is empty, and put-if-absent makes
        // the name ours.
        match s
            .client
            .put(&s.keys.segment(name, 0), Bytes::new(), PutMode::Create)
        {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(gfs::Error::AlreadyExists(name.to_string()))
            }
            Err(e) => return Err(to_gfs(name, e)),
        }
        // A daemon that took the prefix over (or a master recovering this
        // directory's server) sealed only the logs it listed after writing
        // its claim (or seal mark). If neither is there now that segment 0
        // is stored, any later one lists this log and seals it; if one is,
        // this log may be one the recovery never reads: take no appends.
        if s.is_shared() {
            s.check_unsealed(name)?;
        } else {
            s.confirm_owner(name)?;
        }
        Ok(Box::new(SegmentWriter {
            shared: s.clone(),
            name: name.to_string(),
            next_seq: 1,
            len: 0,
            unanswered: None,
        }))
    }

    fn open_append(&self, name: &str) -> gfs::Result<Box<dyn WritableFile>> {
        self.shared.check_fenced(name)?;
        let (segs, size, next) = segments(&self.shared.client, &self.shared.keys, name)?;
        if segs.is_empty() {
            return Err(if self.exists(name)? {
                gfs::Error::Io {
                    name: name.to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::Unsupported,
                        "an object written once takes no appends",
                    ),
                }
            } else {
                gfs::Error::NotFound(name.to_string())
            });
        }
        Ok(Box::new(SegmentWriter {
            shared: self.shared.clone(),
            name: name.to_string(),
            next_seq: next,
            len: size,
            unanswered: None,
        }))
    }

    fn open(&self, name: &str) -> gfs::Result<Arc<dyn ReadableFile>> {
        let s = &self.shared;
        let key = s.keys.file(name);
        match s.client.head(&key) {
            Ok(meta) => {
                return Ok(Arc::new(ObjectReader {
                    shared: s.clone(),
                    name: name.to_string(),
                    key,
                    etag: meta.e_tag.unwrap_or_default(),
                    size: meta.size,
                    _open: OpenGuard::new(s, name),
                }))
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(to_gfs(name, e)),
        }
        let (segs, _, _) = segments(&s.client, &s.keys, name)?;
        if segs.is_empty() {
            return Err(gfs::Error::NotFound(name.to_string()));
        }
        Ok(Arc::new(LogReader::fetch(&s.client, name, segs)?))
    }

    fn delete(&self, name: &str) -> gfs::Result<()> {
        self.shared.check_fenced(name)?;
        self.shared.etags.lock().remove(name);
        if self.shared.open.lock().contains_key(name) {
            if !self.exists(name)? {
                return Err(gfs::Error::NotFound(name.to_string()));
            }
            if let Some(e) = self.shared.open.lock().get_mut(name) {
                e.1 = true;
                return Ok(());
            }
            // The last reader went meanwhile: delete now.
        }
        self.shared.delete_now(name)
    }

    fn rename(&self, from: &str, to: &str) -> gfs::Result<()> {
        // Object stores have no rename: the new name is written whole (by
        // compare-and-swap, as `replace` does), then the old one deleted.
        let bytes = self.read_whole(from)?;
        self.replace(to, &[&bytes])?;
        self.delete(from)
    }

    fn replace(&self, name: &str, bufs: &[&[u8]]) -> gfs::Result<()> {
        let s = &self.shared;
        s.check_fenced(name)?;
        let key = s.keys.file(name);
        // Sharing daemons take turns writing a descriptor (its tablet moves
        // between them), so the ETag this one last wrote proves nothing:
        // only the one just read counts. Stale writers are kept out by
        // their lock-service lease instead.
        let known = if s.is_shared() {
            None
        } else {
            s.etags.lock().get(name).cloned()
        };
        let mode = match known {
            Some(etag) => Client::update(etag),
            None => match s.client.head(&key) {
                Ok(meta) => Client::update(meta.e_tag),
                Err(object_store::Error::NotFound { .. }) => PutMode::Create,
                Err(e) => return Err(to_gfs(name, e)),
            },
        };
        let mut body = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
        for b in bufs {
            body.extend_from_slice(b);
        }
        match s.client.put(&key, Bytes::from(body), mode) {
            Ok(etag) => {
                s.etags.lock().insert(name.to_string(), etag);
                Ok(())
            }
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. })
                if s.is_shared() =>
            {
                Err(gfs::Error::Io {
                    name: name.to_string(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "another daemon replaced this file at the same moment",
                    ),
                })
            }
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => {
                s.fence(&format!("{name} was replaced by another daemon"));
                Err(s.fenced_error(name))
            }
            Err(e) => Err(to_gfs(name, e)),
        }
    }

    fn exists(&self, name: &str) -> gfs::Result<bool> {
        let s = &self.shared;
        match s.client.head(&s.keys.file(name)) {
            Ok(_) => return Ok(true),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(to_gfs(name, e)),
        }
        Ok(!segments(&s.client, &s.keys, name)?.0.is_empty())
    }

    fn size(&self, name: &str) -> gfs::Result<u64> {
        let s = &self.shared;
        match s.client.head(&s.keys.file(name)) {
            Ok(m) => return Ok(m.size),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(to_gfs(name, e)),
        }
        let (segs, size, _) = segments(&s.client, &s.keys, name)?;
        if segs.is_empty() {
            return Err(gfs::Error::NotFound(name.to_string()));
        }
        Ok(size)
    }

    fn list(&self, prefix: &str) -> gfs::Result<Vec<String>> {
        let s = &self.shared;
        let mut names = BTreeSet::new();
        let files = s
            .client
            .list(&s.keys.files_dir_for(prefix))
            .map_err(|e| to_gfs(prefix, e))?;
        for m in files {
            if let Some(n) = s.keys.file_name(m.location.as_ref()) {
                if n.starts_with(prefix) {
                    names.insert(n.to_string());
                }
            }
        }
        let logs = s
            .client
            .list(&s.keys.logs_dir_for(prefix))
            .map_err(|e| to_gfs(prefix, e))?;
        for m in logs {
            if let Some((n, _)) = s.keys.segment_of(m.location.as_ref()) {
                if n.starts_with(prefix) {
                    names.insert(n.to_string());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn durable_appends(&self) -> bool {
        true
    }

    fn shared_by_daemons(&self) -> bool {
        self.shared.is_shared()
    }

    fn seal_logs(&self, dir: &str) -> gfs::Result<usize> {
        let s = &self.shared;
        if !s.is_shared() {
            return Ok(0);
        }
        let dir = dir.trim_end_matches('/');
        // The mark first, then the listing: a log created after the listing
        // finds the mark when it checks (see `create_log`).
        s.client
            .put(&s.keys.seal(dir), Bytes::new(), PutMode::Overwrite)
            .map_err(|e| to_gfs(dir, e))?;
        let n =
            owner::seal_logs(&s.client, &s.keys, &format!("{dir}/")).map_err(|e| to_gfs(dir, e))?;
        log::info!("{}: sealed {n} logs of {dir}", s.client.location);
        Ok(n)
    }

    fn status(&self) -> Vec<String> {
        let s = &self.shared;
        let mut lines = s
            .client
            .stats
            .lines(&s.client.location, s.cache.as_ref().map(DiskCache::usage));
        lines.push(match &s.claim {
            Some(c) => format!(
                "s3_owner epoch={} fenced={}",
                c.epoch,
                s.fenced.load(Ordering::Acquire)
            ),
            None => "s3_owner shared=true fenced=false".to_string(),
        });
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.to_string().into(),
        }
    }

    fn explained(text: &str) -> String {
        explain("s3://b/p", Duration::from_secs(5), generic(text)).to_string()
    }

    #[test]
    fn a_status_is_read_from_the_status_not_from_any_digits() {
        // A store that never answered, whose retries took a time with
        // "404" among its digits: unreachable, not "not found".
        let away = "Error performing list request: Error performing GET \
                    http://127.0.0.1:1/b?list-type=2 in 5.09664046s, after 21 retries, \
                    max_retries: 1000, retry_timeout: 5s - HTTP error: error sending request";
        assert!(explained(away).contains("no answer"), "{}", explained(away));
        let missing = "Error performing list request: Server returned non-2xx status code: \
                       404 Not Found: ";
        assert!(
            explained(missing).contains("not found"),
            "{}",
            explained(missing)
        );
        let refused = "Server returned non-2xx status code: 403 Forbidden: ";
        assert!(
            explained(refused).contains("credentials"),
            "{}",
            explained(refused)
        );
        let bucket = "Server returned error response: <Code>NoSuchBucket</Code>";
        assert!(
            explained(bucket).contains("does not exist"),
            "{}",
            explained(bucket)
        );
    }
}
