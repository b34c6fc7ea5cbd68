//! Mutations: chunk allocation, leases and versions, and record append.
//!
//! Every append is a GFS record append: it goes whole into the file's last
//! chunk, at the offset the primary picks (the chunk's current length). A
//! record that does not fit closes the chunk ("padding" in GFS terms: the
//! rest of the chunk stays unused) and goes to a new chunk. Unlike GFS the
//! unused space is not part of the file: each sealed chunk's length is in the
//! master's log, so file offsets run on without gaps and readers never see
//! padding.
//!
//! Since a sealed replica's file holds only its data (a log's zeros ahead
//! are cut when its chunk is sealed), closing a chunk early costs no disk
//! space, only chunk address space: so any append up to a
//! whole chunk is atomic (GFS limits record appends to a quarter chunk
//! because its padding is real). Only an append larger than a chunk is split.
//!
//! One append writes every replica in a single io_uring submission: per
//! replica a linked chain of data write, checksum writes and (for a synced
//! append) fdatasync. A replica that fails is dropped and the chunk's version
//! is bumped on the others, so the failed one is stale from then on; the
//! append succeeds if any replica took it. The record is acknowledged only
//! once it is on every current replica, which is why a retry is not needed
//! and the file never holds duplicates — at-least-once in the worst case
//! (a crash mid-append may leave one whole unacknowledged record), never a
//! torn record.

use super::chunk::{self, BLOCK};
use super::lease::Lease;
use super::master::ChunkCtl;
use super::oplog::Op;
use super::replica::{read_verified, Append, Open, ReadPiece, Replica};
use super::server::Health;
use super::{bump, Inner};
use crate::io::Chain;
use crate::{Error, Result};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Chunk handles reserved per log record (see [`Op::ReserveHandles`]).
const HANDLE_RESERVATION: u64 = 1024;

/// A replica with the server that holds it.
pub(crate) type Placed = (usize, Arc<Replica>);

fn unavailable(name: &str, why: impl Into<String>) -> Error {
    Error::io(name, io::Error::other(why.into()))
}

impl Inner {
    /// Appends `bufs` at the end of file `id`; returns the file offset of the
    /// first byte. `unsynced` holds the chunks this writer appended to without
    /// syncing; a synced append syncs them in the same submission. A `log`'s
    /// replicas keep zeros ahead of their data (see `zeros.rs`).
    pub(crate) fn append(
        &self,
        id: u64,
        name: &str,
        bufs: &[&[u8]],
        sync: bool,
        log: bool,
        unsynced: &mut Vec<u64>,
    ) -> Result<u64> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if total == 0 {
            let len = self.file_len(id, name)?;
            if sync {
                self.sync_file(id, name, unsynced)?;
            }
            return Ok(len);
        }
        let chunk_size = self.opts.chunk_size;
        let mut rest: Vec<&[u8]> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
        let mut left = total;
        let mut first = None;
        let mut rounds = 0;
        while left > 0 {
            rounds += 1;
            if rounds > 10_000 {
                return Err(unavailable(
                    name,
                    "append keeps losing races for the last chunk",
                ));
            }
            let (ctl, start) = self.last_chunk(id, name)?;
            let mut m = ctl.m.lock();
            if ctl.sealed.load(Ordering::Acquire) {
                continue;
            }
            let len = ctl.len.load(Ordering::Acquire);
            let cap = chunk_size.min(ctl.capacity.load(Ordering::Acquire));
            let room = cap.saturating_sub(len);
            let n = if left <= room {
                left
            } else if left <= chunk_size || room == 0 {
                // Does not fit: close this chunk and continue in a new one.
                self.extend_file(id, name, Some((&ctl, len)))?;
                if log {
                    self.cut_chunk_zeros(ctl.handle);
                }
                continue;
            } else {
                room
            };
            let (piece, remainder) = split(&rest, n as usize);
            let earlier: Vec<u64> = if sync {
                unsynced
                    .iter()
                    .copied()
                    .filter(|&h| h != ctl.handle)
                    .collect()
            } else {
                Vec::new()
            };
            let how = Append {
                sync,
                zeros: log,
                mapped_entries: log && !sync,
            };
            self.mutate(&ctl, &mut m, name, len, &piece, how, &earlier)?;
            drop(m);
            if sync {
                unsynced.clear();
            } else if !unsynced.contains(&ctl.handle) {
                unsynced.push(ctl.handle);
            }
            first.get_or_insert(start + len);
            rest = remainder;
            left -= n;
        }
        if sync {
            self.master_durable(id)?;
        }
        first.ok_or_else(|| unavailable(name, "nothing appended"))
    }

    /// Makes everything appended to file `id` durable: the chunks written
    /// without sync, and the master's records of the file.
    pub(crate) fn sync_file(&self, id: u64, name: &str, unsynced: &mut Vec<u64>) -> Result<()> {
        if !unsynced.is_empty() {
            let targets: Vec<(u64, Vec<Placed>)> = unsynced
                .iter()
                .map(|&h| (h, self.write_set(h).map(|w| w.0).unwrap_or_default()))
                .collect();
            self.sync_chunks(name, &targets)?;
            unsynced.clear();
        }
        self.master_durable(id)
    }

    /// fdatasync of every replica of the given chunks, one submission; a
    /// chunk all of whose replicas fail is an error.
    fn sync_chunks(&self, name: &str, targets: &[(u64, Vec<Placed>)]) -> Result<()> {
        let opens = open_all(
            targets
                .iter()
                .flat_map(|(_, reps)| reps.iter().map(|p| &*p.1)),
            true,
        );
        let chains: Vec<Chain<'_>> = opens
            .iter()
            .map(|o| {
                let mut c = Chain::new();
                if let Ok(o) = o {
                    o.sync_chain(&mut c);
                }
                c
            })
            .collect();
        let res = self.io.run_chains(&chains);
        drop(chains);
        let mut res = merge(&opens, res).into_iter();
        for (h, reps) in targets {
            let mut any = false;
            let mut last_err = None;
            for (s, r) in reps {
                match res.next() {
                    Some(Ok(())) => {
                        r.synced();
                        any = true;
                    }
                    Some(Err(e)) => {
                        self.note_write_error(*s, &e);
                        self.report_bad(*h, *s, &format!("sync failed: {e}"), false);
                        last_err = Some(e);
                    }
                    None => {}
                }
            }
            if !any {
                let e = last_err.unwrap_or_else(|| io::Error::other("no replica to sync"));
                return Err(Error::io(name, e));
            }
        }
        Ok(())
    }

    /// Cuts the zeros the replicas of log `id`'s last chunk keep ahead of
    /// their data (its writer is closing; earlier chunks had theirs cut when
    /// they were sealed).
    pub(crate) fn cut_zeros(&self, id: u64) {
        let last = {
            let st = self.master.state.lock();
            st.files.get(&id).and_then(|f| f.chunks.last().copied())
        };
        if let Some(handle) = last {
            self.cut_chunk_zeros(handle);
        }
    }

    /// Cuts the zeros of chunk `handle`'s replicas, so each file holds only
    /// its data. Best effort: a replica that keeps them loses them when it
    /// is next loaded.
    fn cut_chunk_zeros(&self, handle: u64) {
        for (s, r) in self.write_set(handle).map(|w| w.0).unwrap_or_default() {
            if let Err(e) = r.cut_zeros() {
                log::debug!("gfs: chunkserver {s}: chunk {handle:016x} keeps its zeros: {e}");
            }
        }
    }

    pub(crate) fn master_durable(&self, id: u64) -> Result<()> {
        let lsn = self.master.state.lock().files.get(&id).map_or(0, |f| f.lsn);
        self.master.sync_to(lsn)
    }

    pub(crate) fn file_len(&self, id: u64, name: &str) -> Result<u64> {
        let st = self.master.state.lock();
        if !st.files.contains_key(&id) {
            return Err(Error::NotFound(name.to_string()));
        }
        Ok(st.file_len(id))
    }

    /// The file's last chunk and the file offset where it starts; gives the
    /// file its first chunk if it has none.
    fn last_chunk(&self, id: u64, name: &str) -> Result<(Arc<ChunkCtl>, u64)> {
        loop {
            {
                let st = self.master.state.lock();
                let f = st
                    .files
                    .get(&id)
                    .ok_or_else(|| Error::NotFound(name.to_string()))?;
                if let Some((last, before)) = f.chunks.split_last() {
                    let start: u64 = before
                        .iter()
                        .filter_map(|h| st.chunks.get(h))
                        .map(|c| c.sealed_len.unwrap_or(0))
                        .sum();
                    let c = st
                        .chunks
                        .get(last)
                        .ok_or_else(|| unavailable(name, "chunk missing from the master"))?;
                    return Ok((c.ctl.clone(), start));
                }
            }
            self.extend_file(id, name, None)?;
        }
    }

    /// Chunkservers for `n` new replicas, least loaded first, none in `exclude`.
    pub(crate) fn place(&self, n: usize, exclude: &[usize], salt: u64) -> Vec<usize> {
        let count = self.servers.len().max(1);
        let mut c: Vec<(usize, usize, usize)> = self
            .servers
            .iter()
            .filter(|s| s.placeable() && !exclude.contains(&s.id))
            .map(|s| {
                let spin = (s.id + salt as usize) % count;
                (s.replica_count(), spin, s.id)
            })
            .collect();
        c.sort_unstable();
        c.into_iter().take(n).map(|(.., id)| id).collect()
    }

    /// Creates empty replicas of chunk `handle` on `servers` (headers
    /// written in one submission; made durable by their first sync);
    /// returns the ones that worked.
    pub(crate) fn create_replicas(
        &self,
        handle: u64,
        version: u64,
        servers: &[usize],
        layout: chunk::Layout,
        tmp: bool,
    ) -> Vec<Placed> {
        let mut made = Vec::new();
        for &s in servers {
            match self.servers[s].new_replica(handle, version, layout, tmp) {
                Ok((r, header)) => made.push((s, r, header)),
                Err(e) => self.note_write_error(s, &e),
            }
        }
        let opens = open_all(made.iter().map(|m| &*m.1), false);
        let chains: Vec<Chain<'_>> = opens
            .iter()
            .zip(&made)
            .map(|(o, (_, _, header))| {
                let mut c = Chain::new();
                if let Ok(o) = o {
                    o.init_chain(&mut c, header);
                }
                c
            })
            .collect();
        let res = self.io.run_chains(&chains);
        drop(chains);
        let res = merge(&opens, res);
        drop(opens);
        let mut ok = Vec::new();
        for ((s, r, ..), res) in made.into_iter().zip(res) {
            match res {
                Ok(()) => ok.push((s, r)),
                Err(e) => {
                    self.note_write_error(s, &e);
                    self.servers[s].discard(&r);
                }
            }
        }
        ok
    }

    /// Adds a chunk at the end of file `id`. With `prev` (the current last
    /// chunk, whose lock the caller holds, and its length) that chunk is
    /// sealed at that length in the same log record. Returns Ok also when
    /// another writer extended the file first.
    fn extend_file(&self, id: u64, name: &str, prev: Option<(&Arc<ChunkCtl>, u64)>) -> Result<()> {
        let handle = {
            let mut st = self.master.state.lock();
            if st.next_handle >= st.reserved {
                let upto = st.next_handle + HANDLE_RESERVATION;
                self.master
                    .commit(&mut st, Op::ReserveHandles { upto }, true)?;
            }
            let h = st.next_handle;
            st.next_handle += 1;
            st.allocating.insert(h);
            h
        };
        let res = self.extend_with(id, name, prev, handle);
        self.master.state.lock().allocating.remove(&handle);
        res
    }

    fn extend_with(
        &self,
        id: u64,
        name: &str,
        prev: Option<(&Arc<ChunkCtl>, u64)>,
        handle: u64,
    ) -> Result<()> {
        let servers = self.place(self.replication, &[], handle);
        if servers.is_empty() {
            // No chunkserver can take a new chunk: all full or down.
            return Err(Error::io(name, io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        let made = self.create_replicas(handle, 1, &servers, self.layout, false);
        if made.is_empty() {
            return Err(unavailable(
                name,
                "creating a chunk failed on every chunkserver",
            ));
        }
        let discard = |made: &[Placed]| {
            for (s, r) in made {
                self.servers[*s].discard(r);
            }
        };
        let mut st = self.master.state.lock();
        let Some(f) = st.files.get(&id) else {
            drop(st);
            discard(&made);
            return Err(Error::NotFound(name.to_string()));
        };
        let still_last = match (prev, f.chunks.last()) {
            (None, None) => true,
            (Some((ctl, _)), Some(&h)) => h == ctl.handle,
            _ => false,
        };
        if !still_last {
            drop(st);
            discard(&made);
            return Ok(());
        }
        let op = Op::AddChunk {
            file: id,
            handle,
            prev_len: prev.map(|p| p.1),
        };
        if let Err(e) = self.master.commit(&mut st, op, false) {
            drop(st);
            discard(&made);
            return Err(e);
        }
        let lease = Lease::new(made[0].0, Instant::now(), self.opts.lease);
        if let Some(c) = st.chunks.get_mut(&handle) {
            c.locations = made.iter().map(|(s, _)| *s).collect();
            c.ctl
                .capacity
                .store(self.opts.chunk_size, Ordering::Release);
            let mut m = c.ctl.m.lock();
            m.tail = Some(Vec::new());
            m.tail_hash = None;
            m.lease = Some(lease);
        }
        for (s, r) in made {
            self.servers[s].add(r);
        }
        Ok(())
    }

    /// The replicas of chunk `handle` that can take writes and serve reads,
    /// and the servers listed for it whose replica cannot (to be dropped).
    pub(crate) fn write_set(&self, handle: u64) -> Result<(Vec<Placed>, Vec<usize>)> {
        let st = self.master.state.lock();
        let c = st
            .chunks
            .get(&handle)
            .ok_or_else(|| Error::NotFound(format!("chunk {handle:016x}")))?;
        let mut ok = Vec::new();
        let mut missing = Vec::new();
        for &s in &c.locations {
            let server = &self.servers[s];
            match server.replica(handle) {
                // A higher version than the master's means the master failed
                // to log a version it had already given the replicas.
                Some(r) if server.serving() && !r.is_bad() && r.version() >= c.version => {
                    ok.push((s, r))
                }
                _ => missing.push(s),
            }
        }
        Ok((ok, missing))
    }

    /// Gives the chunk a new version on `replicas` (durably, one submission),
    /// then logs it; replicas that fail are dropped. The caller holds the
    /// chunk's lock. Returns the replicas now current.
    fn new_version(&self, handle: u64, replicas: &[Placed]) -> Result<Vec<Placed>> {
        let name = format!("chunk {handle:016x}");
        let v = {
            let st = self.master.state.lock();
            let c = st
                .chunks
                .get(&handle)
                .ok_or_else(|| Error::NotFound(name.clone()))?;
            let highest = replicas.iter().map(|(_, r)| r.version()).max().unwrap_or(0);
            c.version.max(highest) + 1
        };
        let sbs: Vec<[u8; 64]> = replicas.iter().map(|(_, r)| r.superblock(v)).collect();
        // Scrubs compare the superblock with the in-memory version: keep them
        // out until both agree again.
        let guards: Vec<_> = replicas.iter().map(|(_, r)| r.lock_io()).collect();
        let opens = open_all(replicas.iter().map(|p| &*p.1), false);
        let chains: Vec<Chain<'_>> = opens
            .iter()
            .zip(&sbs)
            .map(|(o, sb)| {
                let mut c = Chain::new();
                if let Ok(o) = o {
                    o.version_chain(&mut c, sb);
                }
                c
            })
            .collect();
        let res = self.io.run_chains(&chains);
        drop(chains);
        let res = merge(&opens, res);
        drop(opens);
        let mut ok = Vec::new();
        let mut failed = Vec::new();
        for ((s, r), res) in replicas.iter().zip(res) {
            match res {
                Ok(()) => {
                    r.set_version(v);
                    ok.push((*s, r.clone()));
                }
                Err(e) => {
                    self.note_write_error(*s, &e);
                    r.mark_bad();
                    failed.push(*s);
                }
            }
        }
        drop(guards);
        if ok.is_empty() {
            return Err(unavailable(&name, "no replica took the new version"));
        }
        bump(&self.counters.version_bumps);
        let mut st = self.master.state.lock();
        self.master
            .commit(&mut st, Op::SetVersion { handle, version: v }, true)?;
        if let Some(c) = st.chunks.get_mut(&handle) {
            c.locations = ok.iter().map(|(s, _)| *s).collect();
            bump(&self.counters.placements);
        }
        drop(st);
        for s in failed {
            self.forget_replica(handle, s);
        }
        Ok(ok)
    }

    /// Removes the replicas on `servers` from chunk `handle` and, if the chunk
    /// can still change, gives the rest a new version so the removed ones are
    /// stale. The caller holds the chunk's lock. Returns the current replicas.
    pub(crate) fn drop_replicas_locked(
        &self,
        ctl: &ChunkCtl,
        servers: &[usize],
    ) -> Result<Vec<Placed>> {
        let handle = ctl.handle;
        {
            let mut st = self.master.state.lock();
            if let Some(c) = st.chunks.get_mut(&handle) {
                let before = c.locations.len();
                c.locations.retain(|s| !servers.contains(s));
                let n = before - c.locations.len();
                bump(&self.counters.placements);
                self.counters
                    .replicas_dropped
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        for &s in servers {
            self.forget_replica(handle, s);
        }
        self.repair_signal.notify();
        let (reps, missing) = self.write_set(handle)?;
        if !missing.is_empty() {
            return self.drop_replicas_locked(ctl, &missing);
        }
        if ctl.sealed.load(Ordering::Acquire) || reps.is_empty() {
            return Ok(reps);
        }
        self.new_version(handle, &reps)
    }

    /// Marks a replica unusable and deletes it if its server can be told to
    /// (a server that is down is not: its replicas are sorted out by version
    /// when it comes back).
    pub(crate) fn forget_replica(&self, handle: u64, server: usize) {
        let s = &self.servers[server];
        if let Some(r) = s.replica(handle) {
            r.mark_bad();
        }
        if s.serving() && !s.gate.is_offline() {
            s.delete(handle);
        }
    }

    /// Bytes of the partial last block at `len`, read (verified) from a replica.
    fn load_tail(&self, handle: u64, len: u64, replicas: &[Placed]) -> Result<Vec<u8>> {
        let k = len % BLOCK;
        if k == 0 {
            return Ok(Vec::new());
        }
        for (s, r) in replicas {
            let piece = ReadPiece {
                replica: r,
                offset: len - k,
                len: k as usize,
            };
            match read_verified(&self.io, &[piece]).pop() {
                Some(Ok(b)) => return Ok(b),
                Some(Err(e)) => self.report_read_failure(handle, *s, &e),
                None => {}
            }
        }
        Err(unavailable(
            &format!("chunk {handle:016x}"),
            "no replica could supply the last block",
        ))
    }

    /// One append of `piece` at `len` in the chunk of `ctl`, whose lock `m`
    /// the caller holds. `earlier`: other chunks to fdatasync with it.
    #[allow(clippy::too_many_arguments)]
    fn mutate(
        &self,
        ctl: &ChunkCtl,
        m: &mut super::master::ChunkMut,
        name: &str,
        len: u64,
        piece: &[&[u8]],
        how: Append,
        earlier: &[u64],
    ) -> Result<()> {
        let sync = how.sync;
        let handle = ctl.handle;
        let (mut reps, mut gone) = self.write_set(handle)?;
        if m.tail.is_none() {
            m.tail = Some(self.load_tail(handle, len, &reps)?);
            m.tail_hash = None;
        }
        gone.extend(reps.iter().filter(|(_, r)| r.is_bad()).map(|(s, _)| *s));
        reps.retain(|(_, r)| !r.is_bad());
        // A replica that cannot take this write is dropped first, with a new
        // version on the rest: it must not come back as current later.
        let now = Instant::now();
        if !gone.is_empty() {
            reps = self.drop_replicas_locked(ctl, &gone)?;
            if let Some((s, _)) = reps.first() {
                m.lease = Some(Lease::new(*s, now, self.opts.lease));
            }
        }
        let lease_ok = m
            .lease
            .as_mut()
            .is_some_and(|l| l.extend(now, self.opts.lease));
        if !lease_ok {
            reps = self.new_version(handle, &reps)?;
            if let Some((s, _)) = reps.first() {
                m.lease = Some(Lease::new(*s, now, self.opts.lease));
            }
        }
        if reps.is_empty() {
            return Err(unavailable(
                name,
                format!("chunk {handle:016x} has no live replica"),
            ));
        }
        // Every replica of a chunk is made in one format (a copy takes its
        // source's), so one set of entries serves them all.
        let sum = reps[0].1.layout().sum;
        if let Some((s, r)) = reps.iter().find(|(_, r)| r.layout().sum != sum) {
            return Err(Error::Corruption {
                name: name.to_string(),
                detail: format!(
                    "chunk {handle:016x}: the replica on server {s} hashes its blocks with {:?}, another with {sum:?}",
                    r.layout().sum
                ),
            });
        }
        let tail = m.tail.as_deref().unwrap_or(&[]);
        let n: u64 = piece.iter().map(|b| b.len() as u64).sum();
        let (sums, next_hash) = chunk::append_sums_from(sum, len, tail, m.tail_hash.take(), piece);
        let enc = sums.encoded();
        let earlier_sets: Vec<(u64, Vec<Placed>)> = earlier
            .iter()
            .map(|&h| (h, self.write_set(h).map(|w| w.0).unwrap_or_default()))
            .collect();

        let guards: Vec<_> = reps.iter().map(|(_, r)| r.lock_io()).collect();
        let mut written: Vec<&Placed> = Vec::new();
        let mut failed: Vec<(usize, io::Error)> = Vec::new();
        for p in &reps {
            let r = &p.1;
            if len + n > r.chunk_size() {
                failed.push((
                    p.0,
                    io::Error::other("append beyond the replica's capacity"),
                ));
                continue;
            }
            if r.len() != len {
                failed.push((
                    p.0,
                    io::Error::other("replica length differs from the chunk's"),
                ));
                continue;
            }
            if let Err(e) = r.gate.check_write() {
                failed.push((p.0, e));
                continue;
            }
            written.push(p);
        }
        let earlier_reps = earlier_sets
            .iter()
            .flat_map(|(_, set)| set.iter().map(|p| &*p.1));
        let opens: Vec<io::Result<Open<'_>>> = written
            .iter()
            .map(|p| p.1.open(sync))
            .chain(earlier_reps.map(|r| r.open(true)))
            .collect();
        // An unsynced log append stores its entries through each replica's
        // header map once the data is written (see `header_map.rs`).
        let mapped: Vec<bool> = opens
            .iter()
            .take(written.len())
            .map(|o| how.mapped_entries && o.as_ref().is_ok_and(|o| o.map_header()))
            .collect();
        let chains: Vec<Chain<'_>> = opens
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let mut c = Chain::new();
                match o {
                    Ok(o) if i < written.len() => {
                        let how = Append {
                            mapped_entries: mapped[i],
                            ..how
                        };
                        o.append_chain(&mut c, len, piece, &enc, how)
                    }
                    Ok(o) => o.sync_chain(&mut c),
                    Err(_) => {}
                }
                c
            })
            .collect();
        let results = self.io.run_chains(&chains);
        drop(chains);
        let results = merge(&opens, results);
        drop(opens);
        let mut results = results.into_iter();
        let mut ok = 0;
        for (i, (s, r)) in written.into_iter().enumerate() {
            match results.next() {
                Some(Ok(())) => {
                    // The data is written: now the entries that make the
                    // append part of the replica.
                    if mapped[i] && !r.store_entries(&enc) {
                        failed.push((*s, io::Error::other("replica header unmapped")));
                        continue;
                    }
                    r.commit_append(len + n, &sums);
                    r.gate.stats.write(n);
                    if sync {
                        r.synced();
                    }
                    ok += 1;
                }
                Some(Err(e)) => failed.push((*s, e)),
                None => failed.push((*s, io::Error::other("missing completion"))),
            }
        }
        for (h, set) in &earlier_sets {
            let mut any = set.is_empty();
            for (s, r) in set {
                match results.next() {
                    Some(Ok(())) => {
                        r.synced();
                        any = true;
                    }
                    Some(Err(e)) => {
                        self.note_write_error(*s, &e);
                        self.report_bad(*h, *s, &format!("sync failed: {e}"), false);
                    }
                    None => {}
                }
            }
            if !any {
                drop(guards);
                return Err(unavailable(
                    name,
                    format!("no replica of chunk {h:016x} synced"),
                ));
            }
        }
        drop(guards);
        for (s, e) in &failed {
            self.note_write_error(*s, e);
        }
        if ok == 0 {
            // Nothing took the record: leave every replica as it was (their
            // tables may hold entries of the failed append past the end).
            self.restore_tables(&reps, &sums);
            let e = failed
                .into_iter()
                .next()
                .map(|(_, e)| e)
                .unwrap_or_else(|| io::Error::other("no replica written"));
            return Err(Error::io(name, e));
        }
        if !failed.is_empty() {
            bump(&self.counters.write_failovers);
            let servers: Vec<usize> = failed.iter().map(|(s, _)| *s).collect();
            log::warn!(
                "gfs: chunk {handle:016x}: write failed on chunkservers {servers:?}; dropping those replicas"
            );
            let reps = self.drop_replicas_locked(ctl, &servers)?;
            if let Some((s, _)) = reps.first() {
                m.lease = Some(Lease::new(*s, now, self.opts.lease));
            }
        }
        sums.apply_tail(m.tail.get_or_insert_with(Vec::new));
        m.tail_hash = Some(next_hash);
        ctl.len.store(len + n, Ordering::Release);
        Ok(())
    }

    /// Rewrites the checksum entries a failed append may have touched with
    /// what they held before. Best effort: a replica that fails this too is
    /// left for the scrub to find.
    fn restore_tables(&self, reps: &[Placed], sums: &chunk::AppendSums) {
        let count = sums.entries.len() as u64;
        if count == 0 {
            return;
        }
        let _guards: Vec<_> = reps.iter().map(|(_, r)| r.lock_io()).collect();
        let bytes: Vec<Vec<u8>> = reps
            .iter()
            .map(|(_, r)| r.table_bytes(sums.first_block, count))
            .collect();
        let opens = open_all(reps.iter().map(|p| &*p.1), false);
        let chains: Vec<Chain<'_>> = opens
            .iter()
            .zip(&bytes)
            .map(|(o, b)| {
                let mut c = Chain::new();
                if let Ok(o) = o {
                    o.table_chain(&mut c, sums.first_block, b);
                }
                c
            })
            .collect();
        let res = self.io.run_chains(&chains);
        drop(chains);
        for ((s, _), res) in reps.iter().zip(merge(&opens, res)) {
            if let Err(e) = res {
                log::warn!("gfs: chunkserver {s}: restoring checksums after a failed append: {e}");
            }
        }
    }

    /// Accounts a failed write to server `s`: a full disk stops new
    /// placements there; other errors make the heartbeat look at it now.
    pub(crate) fn note_write_error(&self, s: usize, e: &io::Error) {
        let server = &self.servers[s];
        server.gate.stats.write_error();
        if e.raw_os_error() == Some(libc::ENOSPC) || e.kind() == io::ErrorKind::StorageFull {
            if server.placeable() {
                log::warn!("gfs: chunkserver {s} ({}): disk full", server.dir.display());
                server.set_health(Health::Full("disk full (ENOSPC)".into()));
            }
        } else {
            log::warn!(
                "gfs: chunkserver {s} ({}): write error: {e}",
                server.dir.display()
            );
            self.heartbeat_signal.notify();
        }
    }
}

/// Opens every replica for a batch of chains.
fn open_all<'r>(
    reps: impl IntoIterator<Item = &'r Replica>,
    for_sync: bool,
) -> Vec<io::Result<Open<'r>>> {
    reps.into_iter().map(|r| r.open(for_sync)).collect()
}

/// The outcome of each chain, where a replica that could not be opened
/// (its chain was empty) fails with that error.
fn merge(opens: &[io::Result<Open<'_>>], res: Vec<io::Result<()>>) -> Vec<io::Result<()>> {
    opens
        .iter()
        .zip(res)
        .map(|(o, r)| match o {
            Ok(_) => r,
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        })
        .collect()
}

/// Splits `bufs` after `n` bytes.
fn split<'a>(bufs: &[&'a [u8]], mut n: usize) -> (Vec<&'a [u8]>, Vec<&'a [u8]>) {
    let mut head = Vec::new();
    let mut tail = Vec::new();
    for b in bufs {
        if n == 0 {
            tail.push(*b);
        } else if b.len() <= n {
            head.push(*b);
            n -= b.len();
        } else {
            head.push(&b[..n]);
            tail.push(&b[n..]);
            n = 0;
        }
    }
    (head, tail)
}

#[cfg(test)]
mod tests {
    #[test]
    fn split_cuts_inside_a_buffer() {
        let (h, t) = super::split(&[b"abc", b"defg", b"h"], 5);
        assert_eq!(h, vec![&b"abc"[..], &b"de"[..]]);
        assert_eq!(t, vec![&b"fg"[..], &b"h"[..]]);
        let (h, t) = super::split(&[b"abc"], 3);
        assert_eq!((h.len(), t.len()), (1, 0));
    }
}
