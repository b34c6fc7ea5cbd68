//! The three shapes a file takes in an object store: a file written once
//! (uploaded whole when it is synced), a log (each append one object,
//! created with put-if-absent under the next sequence number), and readers
//! of either.

use crate::client::Client;
use crate::disk_cache::{DiskCache, Lookup};
use crate::error::to_gfs;
use crate::shared::Shared;
use bytes::Bytes;
use gfs::{ReadableFile, Result, WritableFile};
use object_store::path::Path;
use object_store::PutMode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Joins buffers into one payload.
fn concat(bufs: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
    for b in bufs {
        v.extend_from_slice(b);
    }
    v
}

/// A file written once: bytes gather in memory and go up as one object,
/// created with put-if-absent, when the file is synced (an SSTable's
/// builder syncs it when it is finished). Appends after a sync upload the
/// whole file again, replacing the object only if it is still ours.
pub(crate) struct ObjectWriter {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
    pub(crate) buf: Vec<u8>,
    /// The ETag of the last upload, once there was one.
    pub(crate) uploaded: Option<Option<String>>,
    pub(crate) synced_len: usize,
}

impl ObjectWriter {
    fn upload(&mut self) -> Result<()> {
        self.shared.check_fenced(&self.name)?;
        if self.uploaded.is_some() && self.synced_len == self.buf.len() {
            return Ok(());
        }
        let mode = match &self.uploaded {
            None => PutMode::Create,
            Some(etag) => Client::update(etag.clone()),
        };
        let key = self.shared.keys.file(&self.name);
        let etag = self
            .shared
            .client
            .put(&key, Bytes::from(self.buf.clone()), mode)
            .map_err(|e| to_gfs(&self.name, e))?;
        self.uploaded = Some(etag);
        self.synced_len = self.buf.len();
        Ok(())
    }
}

impl WritableFile for ObjectWriter {
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        let at = self.buf.len() as u64;
        self.buf.extend_from_slice(data);
        Ok(at)
    }

    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        let at = self.buf.len() as u64;
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        Ok(at)
    }

    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        let at = self.append_vectored(bufs)?;
        self.upload()?;
        Ok(at)
    }

    fn sync(&mut self) -> Result<()> {
        self.upload()
    }

    fn len(&self) -> u64 {
        self.buf.len() as u64
    }
}

/// A log: created as an empty segment 0, then every append is one object,
/// `logs/NAME/SEQ`, created with put-if-absent, and stored before the
/// append returns (so it survives the
/// loss of the machine: syncing has nothing left to do). A taken name means
/// another daemon took the prefix over and sealed this log: the writer is
/// fenced and every later append fails too.
pub(crate) struct SegmentWriter {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
    pub(crate) next_seq: u64,
    pub(crate) len: u64,
    /// The bytes of the last append that failed without an answer: the
    /// store may have stored them all the same.
    pub(crate) unanswered: Option<Vec<u8>>,
}

impl WritableFile for SegmentWriter {
    fn append(&mut self, data: &[u8]) -> Result<u64> {
        let at = self.len;
        if data.is_empty() {
            // An empty segment marks a log's creation or seals it: an
            // append never writes one.
            return Ok(at);
        }
        self.shared.check_fenced(&self.name)?;
        loop {
            let key = self.shared.keys.segment(&self.name, self.next_seq);
            match self
                .shared
                .client
                .put(&key, Bytes::copy_from_slice(data), PutMode::Create)
            {
                Ok(_) => break,
                Err(object_store::Error::AlreadyExists { .. }) => {
                    // An append that failed without an answer may have been
                    // stored after all: if the taken segment holds exactly
                    // those bytes it is ours, and this append goes after it.
                    if let Some(failed) = self.unanswered.take() {
                        match self.shared.client.get(&key, None) {
                            Ok(b) if b[..] == failed[..] && !failed.is_empty() => {
                                self.next_seq += 1;
                                self.len += failed.len() as u64;
                                continue;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                self.unanswered = Some(failed);
                                return Err(to_gfs(&self.name, e));
                            }
                        }
                    }
                    // Shared by several daemons: a master sealed this one
                    // log (its server was declared dead); the others stay.
                    if self.shared.is_shared() {
                        return Err(crate::shared::sealed_error(&self.name));
                    }
                    self.shared.fence(&format!(
                        "log {} segment {} was taken by another daemon",
                        self.name, self.next_seq
                    ));
                    return Err(self.shared.fenced_error(&self.name));
                }
                Err(e) => {
                    self.unanswered = Some(data.to_vec());
                    return Err(to_gfs(&self.name, e));
                }
            }
        }
        self.unanswered = None;
        self.next_seq += 1;
        self.len += data.len() as u64;
        Ok(at)
    }

    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.append(&concat(bufs))
    }

    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.append(&concat(bufs))
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Reads a written-once object with ranged GETs, through the disk cache.
pub(crate) struct ObjectReader {
    pub(crate) shared: Arc<Shared>,
    pub(crate) name: String,
    pub(crate) key: Path,
    pub(crate) etag: String,
    pub(crate) size: u64,
    pub(crate) _open: crate::shared::OpenGuard,
}

impl ObjectReader {
    fn check_range(&self, offset: u64, len: usize) -> Result<()> {
        if offset + len as u64 > self.size {
            return Err(gfs::Error::ShortRead {
                name: self.name.clone(),
                offset,
                wanted: len,
                available: self.size,
            });
        }
        Ok(())
    }

    fn cached(&self, cache: &DiskCache, offset: u64, len: usize) -> (String, Option<Vec<u8>>) {
        let key = DiskCache::key(self.key.as_ref(), &self.etag, offset, len);
        let stats = &self.shared.client.stats;
        match cache.get(&key) {
            Lookup::Hit(v) => {
                stats.cache_hits.fetch_add(1, Ordering::Relaxed);
                (key, Some(v))
            }
            Lookup::Miss => {
                stats.cache_misses.fetch_add(1, Ordering::Relaxed);
                (key, None)
            }
            Lookup::Corrupt => {
                stats.cache_misses.fetch_add(1, Ordering::Relaxed);
                stats.cache_corrupt.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "disk cache: a cached range of {} failed its checksum; fetching it again",
                    self.name
                );
                (key, None)
            }
        }
    }
}

impl ReadableFile for ObjectReader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        self.check_range(offset, len)?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let cache = self.shared.cache.as_ref();
        let mut cache_key = None;
        if let Some(c) = cache {
            let (k, hit) = self.cached(c, offset, len);
            if let Some(v) = hit {
                return Ok(v);
            }
            cache_key = Some(k);
        }
        let b = self
            .shared
            .client
            .get(&self.key, Some((offset, len)))
            .map_err(|e| to_gfs(&self.name, e))?;
        if let (Some(c), Some(k)) = (cache, cache_key) {
            c.put(&k, &b);
        }
        Ok(b.to_vec())
    }

    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        for &(o, l) in ranges {
            self.check_range(o, l)?;
        }
        let cache = self.shared.cache.as_ref();
        let mut out: Vec<Option<Vec<u8>>> = vec![None; ranges.len()];
        let mut keys = vec![None; ranges.len()];
        if let Some(c) = cache {
            for (i, &(o, l)) in ranges.iter().enumerate() {
                let (k, hit) = self.cached(c, o, l);
                out[i] = hit;
                keys[i] = Some(k);
            }
        }
        let missing: Vec<usize> = (0..ranges.len()).filter(|&i| out[i].is_none()).collect();
        if !missing.is_empty() {
            let want: Vec<(u64, usize)> = missing.iter().map(|&i| ranges[i]).collect();
            let got = self
                .shared
                .client
                .get_many(&self.key, &want)
                .map_err(|e| to_gfs(&self.name, e))?;
            for (&i, b) in missing.iter().zip(got) {
                if let (Some(c), Some(k)) = (cache, &keys[i]) {
                    c.put(k, &b);
                }
                out[i] = Some(b.to_vec());
            }
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    fn len(&self) -> Result<u64> {
        Ok(self.size)
    }
}

/// A log as it was when opened: its segments fetched and joined.
pub(crate) struct LogReader {
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
}

impl LogReader {
    /// Fetches every segment of `name` listed in `keys_of_log`.
    pub(crate) fn fetch(c: &Client, name: &str, segments: Vec<Path>) -> Result<LogReader> {
        let parts = c.get_all(segments).map_err(|e| to_gfs(name, e))?;
        Ok(LogReader {
            name: name.to_string(),
            bytes: concat(&parts.iter().map(|p| &p[..]).collect::<Vec<_>>()),
        })
    }
}

impl ReadableFile for LogReader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let end = offset as usize + len;
        if end > self.bytes.len() {
            return Err(gfs::Error::ShortRead {
                name: self.name.clone(),
                offset,
                wanted: len,
                available: self.bytes.len() as u64,
            });
        }
        Ok(self.bytes[offset as usize..end].to_vec())
    }

    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        ranges.iter().map(|&(o, l)| self.read_at(o, l)).collect()
    }

    fn len(&self) -> Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}
