//! Record append: a record goes whole into the file's last chunk, on every
//! current replica in one submission (see the module comment of `mod.rs`).

use super::allocate::{extend_file, last_chunk};
use super::sync::{cut_chunk_zeros, master_durable, sync_file};
use super::versions::{drop_replicas_locked, new_version, write_set};
use super::{merge, note_syncs, note_write_error, open_all, run_opened, unavailable, Placed};
use crate::cluster::chunk::{self, BLOCK};
use crate::cluster::direct::DirectAppend;
use crate::cluster::lease::{Lease, Tick};
use crate::cluster::master::{ChunkCtl, KeptWriteSet};
use crate::cluster::replica::{read_verified, Append, Open, ReadPiece};
use crate::cluster::{bump, Inner};
use crate::io::Chain;
use crate::{Error, Result};
use smallvec::SmallVec;
use std::io;
use std::sync::atomic::Ordering;

/// An append's buffers (a log record's few: on the stack).
type Pieces<'a> = SmallVec<[&'a [u8]; 4]>;

/// Appends `bufs` at the end of file `id`; returns the file offset of the
/// first byte. `unsynced` holds the chunks this writer appended to without
/// syncing; a synced append syncs them in the same submission. A `log`'s
/// replicas keep zeros ahead of their data (see `zeros.rs`).
pub(crate) fn append(
    inner: &Inner,
    id: u64,
    name: &str,
    bufs: &[&[u8]],
    sync: bool,
    log: bool,
    unsynced: &mut Vec<u64>,
) -> Result<u64> {
    let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
    if total == 0 {
        let len = inner.master.file_len(id, name)?;
        if sync {
            sync_file(inner, id, name, unsynced)?;
        }
        return Ok(len);
    }
    let chunk_size = inner.opts.chunk_size;
    let mut rest: Pieces<'_> = bufs.iter().copied().filter(|b| !b.is_empty()).collect();
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
        let (ctl, start) = last_chunk(inner, id, name)?;
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
            extend_file(inner, id, name, Some((&ctl, len)))?;
            // A log's zeros ahead, or a direct write's padding.
            cut_chunk_zeros(inner, ctl.handle);
            continue;
        } else {
            room
        };
        let (piece, remainder) = if n == left {
            (std::mem::take(&mut rest), Pieces::new())
        } else {
            split(&rest, n as usize)
        };
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
        mutate(inner, &ctl, &mut m, name, len, &piece, how, &earlier)?;
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
        master_durable(inner, id)?;
    }
    first.ok_or_else(|| unavailable(name, "nothing appended"))
}

/// Bytes of the partial last block at `len`, read (verified) from a replica.
pub(super) fn load_tail(
    inner: &Inner,
    handle: u64,
    len: u64,
    replicas: &[Placed],
) -> Result<Vec<u8>> {
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
        match read_verified(&inner.io, &[piece]).pop() {
            Some(Ok(b)) => return Ok(b),
            Some(Err(e)) => inner.report_read_failure(handle, *s, &e),
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
pub(super) fn mutate(
    inner: &Inner,
    ctl: &ChunkCtl,
    m: &mut crate::cluster::master::ChunkMut,
    name: &str,
    len: u64,
    piece: &[&[u8]],
    how: Append,
    earlier: &[u64],
) -> Result<()> {
    let sync = how.sync;
    let handle = ctl.handle;
    // The last append's replicas serve again while the chunk's placement
    // stands still and none of them failed since.
    let placement = ctl.placement.load(Ordering::Acquire);
    let kept = m.write_set.take().filter(|w| {
        w.placement == placement
            && w.replicas
                .iter()
                .all(|(s, r)| !r.is_bad() && inner.servers[*s].serving())
    });
    let (mut reps, mut gone) = match kept {
        Some(w) => (w.replicas, Vec::new()),
        None => write_set(inner, handle)?,
    };
    if m.tail.is_none() {
        m.tail = Some(load_tail(inner, handle, len, &reps)?);
        m.tail_hash = None;
    }
    gone.extend(reps.iter().filter(|(_, r)| r.is_bad()).map(|(s, _)| *s));
    reps.retain(|(_, r)| !r.is_bad());
    // Kept for the next append only if this one changes nothing about them.
    let mut keep = gone.is_empty();
    // A replica that cannot take this write is dropped first, with a new
    // version on the rest: it must not come back as current later.
    let now = Tick::now();
    if !gone.is_empty() {
        reps = drop_replicas_locked(inner, ctl, &gone)?;
        if let Some((s, _)) = reps.first() {
            m.lease = Some(Lease::new(*s, now, inner.opts.lease));
        }
    }
    let lease_ok = m
        .lease
        .as_mut()
        .is_some_and(|l| l.extend(now, inner.opts.lease));
    if !lease_ok {
        keep = false;
        reps = new_version(inner, handle, &reps)?;
        if let Some((s, _)) = reps.first() {
            m.lease = Some(Lease::new(*s, now, inner.opts.lease));
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
        .map(|&h| (h, write_set(inner, h).map(|w| w.0).unwrap_or_default()))
        .collect();

    let guards: SmallVec<[_; 3]> = reps.iter().map(|(_, r)| r.lock_io()).collect();
    let mut written: SmallVec<[&Placed; 3]> = SmallVec::new();
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
    // An unsynced log append that every replica stores into its mappings
    // opens no file and submits no I/O (a replica that cannot store it
    // stops the search, and all go the usual way: storing the same bytes
    // again, or writing them, changes nothing).
    let fast = how.mapped_entries
        && earlier_sets.is_empty()
        && !written.is_empty()
        && written.iter().all(|p| p.1.store_mapped(len, piece, &enc));
    let (mapped, stored, results) = if fast {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        let earlier_reps = earlier_sets
            .iter()
            .flat_map(|(_, set)| set.iter().map(|p| &*p.1));
        // All replicas but one of a file that is not a log take an unsynced
        // append around the page cache, from one aligned copy (see
        // `direct.rs`); the sync that follows cuts the zeros padding its end.
        let direct = (!how.zeros && !sync && inner.opts.direct_writes && written.len() > 1)
            .then(|| DirectAppend::new(len, tail, BLOCK, piece))
            .flatten();
        let buffered = written.iter().position(|p| !p.1.is_direct()).unwrap_or(0);
        let opens: Vec<io::Result<Open<'_>>> = written
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let r = &p.1;
                let around = direct.is_some()
                    && i != buffered
                    && r.gate.direct()
                    && !crate::power::covers_path(&r.path);
                r.open_append(sync, around)
            })
            .chain(earlier_reps.map(|r| r.open(true)))
            .collect();
        // An unsynced log append stores its entries through each replica's
        // header map once the data is written, and where it fits in the
        // zeros ahead, its data too: no system call (see `shared_map.rs`).
        let mapped: Vec<bool> = opens
            .iter()
            .take(written.len())
            .map(|o| how.mapped_entries && o.as_ref().is_ok_and(|o| o.map_header()))
            .collect();
        let stored: Vec<bool> = opens
            .iter()
            .zip(&mapped)
            .map(|(o, &m)| m && o.as_ref().is_ok_and(|o| o.store_append(len, piece, &enc)))
            .collect();
        let results = run_opened(inner, &opens, |i, o, c| {
            if stored.get(i) == Some(&true) {
                // Stored into the mapped pages already.
            } else if let (true, Some(d)) = (i < written.len() && o.is_direct(), &direct) {
                o.direct_append_chain(c, d, &enc);
            } else if i < written.len() {
                let how = Append {
                    mapped_entries: mapped[i],
                    ..how
                };
                o.append_chain(c, len, piece, &enc, how)
            } else {
                o.sync_chain(c)
            }
        });
        drop(opens);
        (mapped, stored, results)
    };
    let mut results = results.into_iter();
    let mut ok = 0;
    for (i, (s, r)) in written.into_iter().enumerate() {
        let result = if fast { Some(Ok(())) } else { results.next() };
        match result {
            Some(Ok(())) => {
                // The data is written: now the entries that make the
                // append part of the replica.
                if !fast && mapped[i] && !stored[i] && !r.store_entries(&enc) {
                    failed.push((*s, io::Error::other("replica header unmapped")));
                    continue;
                }
                r.commit_append(len + n, &sums);
                r.gate.stats.write(n);
                if how.zeros && r.wants_zeros(len + n) {
                    inner.zeros.ask(r.clone());
                }
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
        let (synced, _) = note_syncs(inner, *h, set, &mut results);
        let any = synced || set.is_empty();
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
        note_write_error(inner, *s, e);
    }
    if ok == 0 {
        // Nothing took the record: leave every replica as it was (their
        // tables may hold entries of the failed append past the end).
        restore_tables(inner, &reps, &sums);
        let e = failed
            .into_iter()
            .next()
            .map(|(_, e)| e)
            .unwrap_or_else(|| io::Error::other("no replica written"));
        return Err(Error::io(name, e));
    }
    if failed.is_empty() && keep {
        m.write_set = Some(KeptWriteSet {
            placement,
            replicas: reps,
        });
    } else if !failed.is_empty() {
        bump(&inner.counters.write_failovers);
        let servers: Vec<usize> = failed.iter().map(|(s, _)| *s).collect();
        log::warn!(
            "gfs: chunk {handle:016x}: write failed on chunkservers {servers:?}; dropping those replicas"
        );
        let reps = drop_replicas_locked(inner, ctl, &servers)?;
        if let Some((s, _)) = reps.first() {
            m.lease = Some(Lease::new(*s, now, inner.opts.lease));
        }
    }
    sums.apply_tail(m.tail.get_or_insert_with(Vec::new), piece);
    m.tail_hash = Some(next_hash);
    ctl.len.store(len + n, Ordering::Release);
    Ok(())
}

/// Rewrites the checksum entries a failed append may have touched with
/// what they held before. Best effort: a replica that fails this too is
/// left for the scrub to find.
pub(super) fn restore_tables(inner: &Inner, reps: &[Placed], sums: &chunk::AppendSums) {
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
    let res = inner.io.run_chains(&chains);
    drop(chains);
    for ((s, _), res) in reps.iter().zip(merge(&opens, res)) {
        if let Err(e) = res {
            log::warn!("gfs: chunkserver {s}: restoring checksums after a failed append: {e}");
        }
    }
}

/// Splits `bufs` after `n` bytes.
fn split<'a>(bufs: &[&'a [u8]], mut n: usize) -> (Pieces<'a>, Pieces<'a>) {
    let mut head = Pieces::new();
    let mut tail = Pieces::new();
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
        assert_eq!(h.as_slice(), [&b"abc"[..], &b"de"[..]]);
        assert_eq!(t.as_slice(), [&b"fg"[..], &b"h"[..]]);
        let (h, t) = super::split(&[b"abc"], 3);
        assert_eq!((h.len(), t.len()), (1, 0));
    }
}
