//! The client side of [`super::Cluster`]: [`WritableFile`] and
//! [`ReadableFile`] over chunks.
//!
//! A reader caches the file's chunk list with each chunk's replicas, spreads
//! reads over the replicas, and on a failed check (corruption, I/O error,
//! stale or short replica) reports the replica and takes the bytes from
//! another one; the caller never sees the failure unless every replica fails.

use super::master::ChunkCtl;
use super::replica::{read_verified, ReadFail, ReadPiece};
use super::write::{append, cut_zeros, sync_file, Placed};
use super::{bump, Inner};
use crate::{Error, ReadableFile, Result, WritableFile};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Appends to one file.
pub(crate) struct Writer {
    inner: Arc<Inner>,
    id: u64,
    name: String,
    len: u64,
    /// Chunks appended to without a sync since the last one.
    unsynced: Vec<u64>,
    /// A commit log: its replicas keep zeros ahead of the data, cut when
    /// the writer closes.
    log: bool,
}

impl Writer {
    pub(crate) fn new(inner: Arc<Inner>, id: u64, name: &str, len: u64, log: bool) -> Writer {
        inner.master.open_handle(id);
        Writer {
            inner,
            id,
            name: name.to_string(),
            len,
            unsynced: Vec::new(),
            log,
        }
    }

    fn write(&mut self, bufs: &[&[u8]], sync: bool) -> Result<u64> {
        let _t = telemetry::timer(telemetry::Latency::Chunk, "append");
        self.inner.scrub.client_io();
        let off = append(
            &self.inner,
            self.id,
            &self.name,
            bufs,
            sync,
            self.log,
            &mut self.unsynced,
        )?;
        let n: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.len = self.len.max(off + n);
        Ok(off)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A log's zeros ahead, or the padding of a direct write.
        cut_zeros(&self.inner, self.id);
        self.inner.master.close_handle(self.id);
    }
}

impl WritableFile for Writer {
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.write(bufs, false)
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> Result<u64> {
        self.write(bufs, true)
    }
    fn sync(&mut self) -> Result<()> {
        let _t = telemetry::timer(telemetry::Latency::Chunk, "sync");

        sync_file(&self.inner, self.id, &self.name, &mut self.unsynced)
    }
    fn len(&self) -> u64 {
        self.len
    }
}

/// One chunk as a reader sees it.
struct ChunkView {
    handle: u64,
    start: u64,
    ctl: Arc<ChunkCtl>,
    replicas: Vec<Placed>,
}

impl ChunkView {
    /// Readable bytes: the committed length (final once sealed).
    fn len(&self) -> u64 {
        self.ctl.len.load(Ordering::Acquire)
    }
}

struct View {
    chunks: Vec<ChunkView>,
    /// `Counters::placements` when the view was taken.
    placements: u64,
}

impl View {
    fn len(&self) -> u64 {
        self.chunks.last().map_or(0, |c| c.start + c.len())
    }
}

/// Reads one file at offsets.
pub(crate) struct Reader {
    inner: Arc<Inner>,
    id: u64,
    name: String,
    view: RwLock<Arc<View>>,
    /// Rotates the replica tried first, spreading reads.
    next: AtomicUsize,
}

impl Reader {
    pub(crate) fn new(inner: Arc<Inner>, id: u64, name: &str) -> Reader {
        inner.master.open_handle(id);
        let view = view(&inner, id).unwrap_or(View {
            chunks: Vec::new(),
            placements: 0,
        });
        Reader {
            inner,
            id,
            name: name.to_string(),
            view: RwLock::new(Arc::new(view)),
            next: AtomicUsize::new(0),
        }
    }

    fn refresh(&self) -> Result<Arc<View>> {
        let v =
            Arc::new(view(&self.inner, self.id).ok_or_else(|| Error::NotFound(self.name.clone()))?);
        *self.view.write() = v.clone();
        Ok(v)
    }

    fn short(&self, offset: u64, wanted: usize, available: u64) -> Error {
        Error::ShortRead {
            name: self.name.clone(),
            offset,
            wanted,
            available,
        }
    }

    /// The chunk list to read `ranges` from, taken afresh if replicas moved
    /// since, or if a range lies past the end of the cached one.
    fn view_for(&self, ranges: &[(u64, usize)]) -> Result<Arc<View>> {
        let mut view = self.view.read().clone();
        let mut refreshed = false;
        if view.placements != self.inner.counters.placements.load(Ordering::Acquire) {
            // Replicas were dropped or copied since: read from the current set.
            // A file purged meanwhile keeps its old view.
            if let Ok(v) = self.refresh() {
                view = v;
                refreshed = true;
            }
        }
        for &(off, len) in ranges {
            let end = off.checked_add(len as u64);
            if end.is_none_or(|e| e > view.len()) && !refreshed {
                view = self.refresh()?;
                refreshed = true;
            }
            match end {
                Some(e) if e <= view.len() => {}
                _ => return Err(self.short(off, len, view.len())),
            }
        }
        Ok(view)
    }

    /// The replica a read at `spin` of chunk `chunk` tries first among
    /// those not tried and not known bad: one written through the page
    /// cache if there is one (the others' recent data is on disk only; see
    /// `direct.rs`).
    fn pick<'v>(view: &'v View, chunk: usize, spin: usize, tried: &[usize]) -> Option<&'v Placed> {
        let reps = &view.chunks.get(chunk)?.replicas;
        let n = reps.len();
        let mut usable = (0..n)
            .map(|k| &reps[(spin + chunk + k) % n])
            .filter(|(s, r)| !tried.contains(s) && !r.is_bad());
        let first = usable.next()?;
        if !first.1.is_direct() {
            return Some(first);
        }
        usable.find(|(_, r)| !r.is_direct()).or(Some(first))
    }

    /// [`ReadableFile::read_at_checked`] within one chunk: the bytes of one
    /// replica, unchecked; `None` if they could not be read or failed
    /// `check` (a replica whose own checksums then fail is reported).
    fn read_one_unchecked(
        &self,
        offset: u64,
        len: usize,
        check: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Option<Vec<u8>>> {
        let view = self.view_for(&[(offset, len)])?;
        let end = offset + len as u64;
        let ci = view.chunks.partition_point(|c| c.start + c.len() <= offset);
        let Some(c) = view.chunks.get(ci).filter(|c| c.start + c.len() >= end) else {
            return Ok(None);
        };
        let spin = self.next.fetch_add(1, Ordering::Relaxed);
        let Some((server, replica)) = Self::pick(&view, ci, spin, &[]) else {
            return Ok(None);
        };
        let at = offset - c.start;
        let Ok(bytes) = replica.read_unchecked(&self.inner.io, at, len) else {
            // The checked read that follows finds out why, and reports it.
            return Ok(None);
        };
        if check(&bytes) {
            return Ok(Some(bytes));
        }
        // These bytes are not what was written: let the replica's own
        // checksums judge its copy, so a damaged replica is reported and
        // replaced rather than skipped.
        let piece = ReadPiece {
            replica,
            offset: at,
            len,
        };
        if let Some(Err(f)) = read_verified(&self.inner.io, &[piece]).pop() {
            self.inner.report_read_failure(c.handle, *server, &f);
            bump(&self.inner.counters.read_retries);
        }
        Ok(None)
    }

    fn read_ranges(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        let _t = telemetry::timer(telemetry::Latency::Chunk, "read");
        self.inner.scrub.client_io();
        let mut view = self.view_for(ranges)?;
        // Split every range into per-chunk pieces.
        struct Piece {
            range: usize,
            chunk: usize,
            off: u64,
            len: usize,
            dst: usize,
            tried: Vec<usize>,
        }
        let mut pieces = Vec::new();
        for (i, &(off, len)) in ranges.iter().enumerate() {
            let end = off + len as u64;
            let mut pos = off;
            let first = view.chunks.partition_point(|c| c.start + c.len() <= off);
            for (ci, c) in view.chunks.iter().enumerate().skip(first) {
                if pos >= end {
                    break;
                }
                let c_end = c.start + c.len();
                if c_end <= pos {
                    continue;
                }
                let n = (c_end.min(end) - pos) as usize;
                pieces.push(Piece {
                    range: i,
                    chunk: ci,
                    off: pos - c.start,
                    len: n,
                    dst: (pos - off) as usize,
                    tried: Vec::new(),
                });
                pos += n as u64;
            }
        }
        // A range read in one piece takes that piece's buffer as it is.
        let mut parts = vec![0usize; ranges.len()];
        for p in &pieces {
            parts[p.range] += 1;
        }
        let mut out: Vec<Vec<u8>> = ranges
            .iter()
            .zip(&parts)
            .map(|(&(_, l), &n)| if n == 1 { Vec::new() } else { vec![0u8; l] })
            .collect();
        let mut pending: Vec<usize> = (0..pieces.len()).collect();
        let spin = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last_fail: Option<ReadFail> = None;
        let mut fresh = false;
        while !pending.is_empty() {
            // A replica for each piece: not tried yet, not known bad.
            let mut chosen: Vec<(usize, Placed)> = Vec::new();
            let mut stuck = false;
            for &p in &pending {
                let piece = &pieces[p];
                match Self::pick(&view, piece.chunk, spin, &piece.tried) {
                    Some(pl) => chosen.push((p, pl.clone())),
                    None => stuck = true,
                }
            }
            if stuck {
                if fresh {
                    break;
                }
                // Replicas may have been replaced: look again once.
                let handles: Vec<u64> = view.chunks.iter().map(|c| c.handle).collect();
                view = self.refresh()?;
                fresh = true;
                let same = view.chunks.len() >= handles.len()
                    && view
                        .chunks
                        .iter()
                        .zip(&handles)
                        .all(|(c, h)| c.handle == *h);
                if !same {
                    return Err(Error::Corruption {
                        name: self.name.clone(),
                        detail: "chunk list changed under a read".into(),
                    });
                }
                continue;
            }
            let batch: Vec<ReadPiece<'_>> = chosen
                .iter()
                .map(|(p, (_, r))| ReadPiece {
                    replica: r,
                    offset: pieces[*p].off,
                    len: pieces[*p].len,
                })
                .collect();
            let results = read_verified(&self.inner.io, &batch);
            let mut again = Vec::new();
            for ((p, (s, _)), res) in chosen.iter().zip(results) {
                let piece = &mut pieces[*p];
                match res {
                    Ok(bytes) if parts[piece.range] == 1 => out[piece.range] = bytes,
                    Ok(bytes) => {
                        out[piece.range][piece.dst..piece.dst + piece.len].copy_from_slice(&bytes);
                    }
                    Err(f) => {
                        let handle = view.chunks[piece.chunk].handle;
                        self.inner.report_read_failure(handle, *s, &f);
                        bump(&self.inner.counters.read_retries);
                        piece.tried.push(*s);
                        last_fail = Some(f);
                        again.push(*p);
                    }
                }
            }
            pending = again;
        }
        if pending.is_empty() {
            return Ok(out);
        }
        Err(match last_fail {
            Some(ReadFail::Corrupt(d)) => Error::Corruption {
                name: self.name.clone(),
                detail: format!("every replica failed; last: {d}"),
            },
            Some(f) => Error::io(
                &self.name,
                std::io::Error::other(format!("every replica failed; last: {f}")),
            ),
            None => Error::io(
                &self.name,
                std::io::Error::other("no live replica of a chunk"),
            ),
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.inner.master.close_handle(self.id);
    }
}

impl ReadableFile for Reader {
    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut v = self.read_ranges(&[(offset, len)])?;
        v.pop().ok_or_else(|| self.short(offset, len, 0))
    }
    fn read_at_checked(
        &self,
        offset: u64,
        len: usize,
        check: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<Vec<u8>> {
        self.inner.scrub.client_io();
        if len > 0 {
            if let Some(bytes) = self.read_one_unchecked(offset, len, check)? {
                return Ok(bytes);
            }
        }
        let bytes = self.read_at(offset, len)?;
        check(&bytes);
        Ok(bytes)
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> Result<Vec<Vec<u8>>> {
        self.read_ranges(ranges)
    }
    fn len(&self) -> Result<u64> {
        self.inner.master.file_len(self.id, &self.name)
    }
}

/// The chunks of file `id` (live or in the trash) with their replicas.
fn view(inner: &Inner, id: u64) -> Option<View> {
    let st = inner.master.state.lock();
    let placements = inner.counters.placements.load(Ordering::Acquire);
    let f = st.files.get(&id)?;
    let mut start = 0;
    let mut chunks = Vec::with_capacity(f.chunks.len());
    for h in &f.chunks {
        let c = st.chunks.get(h)?;
        let replicas = c
            .locations
            .iter()
            .filter_map(|&s| inner.servers[s].replica(*h).map(|r| (s, r)))
            .collect();
        let len = c
            .sealed_len
            .unwrap_or_else(|| c.ctl.len.load(Ordering::Acquire));
        chunks.push(ChunkView {
            handle: *h,
            start,
            ctl: c.ctl.clone(),
            replicas,
        });
        start += len;
    }
    Some(View { chunks, placements })
}
