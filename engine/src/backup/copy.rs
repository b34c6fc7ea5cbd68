//! Copying files between stores in pieces, checking what arrives: a file
//! is read in pieces of [`PIECE`] bytes, appended, synced at its end, and
//! its XXH3 computed on the way.

use super::progress::Job;
use crate::{Error, Result};
use gfs::FileStore;
use std::sync::atomic::Ordering;

/// Bytes read and written at a time.
const PIECE: usize = 4 << 20;

/// Copies `from` of `src` to `to` of `dst` (replacing a leftover of that
/// name), `size` bytes; returns their XXH3. Fails if `from` has another
/// size, or if `want` is given and the bytes' hash differs (then `to` is
/// deleted).
pub fn copy_file(
    src: &dyn FileStore,
    from: &str,
    dst: &dyn FileStore,
    to: &str,
    size: u64,
    want: Option<u64>,
    job: &Job,
) -> Result<u64> {
    let r = src.open(from)?;
    let len = r.len()?;
    if len != size {
        return Err(Error::corruption(format!(
            "{from}: {len} bytes where {size} were expected"
        )));
    }
    match dst.delete(to) {
        Ok(()) | Err(gfs::Error::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut w = dst.create(to)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut at = 0u64;
    let written = (|| {
        while at < size {
            let n = ((size - at) as usize).min(PIECE);
            let piece = r.read_at(at, n)?;
            h.update(&piece);
            w.append(&piece)?;
            at += n as u64;
            job.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
        }
        w.sync()?;
        Ok::<_, Error>(())
    })();
    drop(w);
    let sum = h.digest();
    let checked = written.and_then(|()| match want {
        Some(want) if want != sum => Err(Error::corruption(format!(
            "{from}: its bytes do not match the backup's checksum"
        ))),
        _ => Ok(()),
    });
    if let Err(e) = checked {
        let _ = dst.delete(to);
        return Err(e);
    }
    Ok(sum)
}
