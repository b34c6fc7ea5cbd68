//! Making a file's appends durable (its unsynced chunks fdatasynced in one
//! submission, then the master's records), and cutting the zeros a log's
//! replicas keep ahead of their data (and those padding the last page of a
//! replica written around the page cache; see `direct.rs`).

use super::versions::write_set;
use super::{note_syncs, open_all, run_opened, Placed};
use crate::cluster::Inner;
use crate::{Error, Result};
use std::io;

/// Makes everything appended to file `id` durable: the chunks written
/// without sync, and the master's records of the file.
pub(crate) fn sync_file(inner: &Inner, id: u64, name: &str, unsynced: &mut Vec<u64>) -> Result<()> {
    if !unsynced.is_empty() {
        let targets: Vec<(u64, Vec<Placed>)> = unsynced
            .iter()
            .map(|&h| (h, write_set(inner, h).map(|w| w.0).unwrap_or_default()))
            .collect();
        sync_chunks(inner, name, &targets)?;
        unsynced.clear();
    }
    master_durable(inner, id)
}

/// fdatasync of every replica of the given chunks, one submission; a
/// chunk all of whose replicas fail is an error.
pub(super) fn sync_chunks(inner: &Inner, name: &str, targets: &[(u64, Vec<Placed>)]) -> Result<()> {
    // Replicas written around the page cache lose the zeros padding their
    // last page first, so that what is made durable is just their data.
    // Log replicas unmap the window their unsynced appends were stored
    // into, so that writeback finds their pages unmapped.
    for (h, reps) in targets {
        for (s, r) in reps {
            if !r.is_direct() {
                r.unmap_window();
            } else if let Err(e) = r.cut_zeros() {
                log::debug!("gfs: chunkserver {s}: chunk {h:016x} keeps its padding: {e}");
            }
        }
    }
    let opens = open_all(
        targets
            .iter()
            .flat_map(|(_, reps)| reps.iter().map(|p| &*p.1)),
        true,
    );
    let mut res = run_opened(inner, &opens, |_, o, c| o.sync_chain(c)).into_iter();
    for (h, reps) in targets {
        let (any, last_err) = note_syncs(inner, *h, reps, &mut res);
        if !any {
            let e = last_err.unwrap_or_else(|| io::Error::other("no replica to sync"));
            return Err(Error::io(name, e));
        }
    }
    Ok(())
}

/// Cuts the zeros the replicas of file `id`'s last chunk keep past their
/// data (its writer is closing; earlier chunks had theirs cut when they
/// were sealed): a log's zeros ahead, a direct write's padding.
pub(crate) fn cut_zeros(inner: &Inner, id: u64) {
    let last = {
        let st = inner.master.state.lock();
        st.files.get(&id).and_then(|f| f.chunks.last().copied())
    };
    if let Some(handle) = last {
        cut_chunk_zeros(inner, handle);
    }
}

/// Cuts the zeros of chunk `handle`'s replicas, so each file holds only
/// its data. Best effort: a replica that keeps them loses them when it
/// is next loaded.
pub(super) fn cut_chunk_zeros(inner: &Inner, handle: u64) {
    for (s, r) in write_set(inner, handle).map(|w| w.0).unwrap_or_default() {
        if let Err(e) = r.cut_zeros() {
            log::debug!("gfs: chunkserver {s}: chunk {handle:016x} keeps its zeros: {e}");
        }
    }
}

pub(crate) fn master_durable(inner: &Inner, id: u64) -> Result<()> {
    let lsn = inner
        .master
        .state
        .lock()
        .files
        .get(&id)
        .map_or(0, |f| f.lsn);
    inner.master.sync_to(lsn)
}
