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
//! append) fdatasync. An unsynced append to a log that falls inside the
//! zeros its replicas keep ahead is instead stored into their mapped pages,
//! data then entries (see `shared_map.rs`): no system call at all. A replica that fails is dropped and the chunk's version
//! is bumped on the others, so the failed one is stale from then on; the
//! append succeeds if any replica took it. The record is acknowledged only
//! once it is on every current replica, which is why a retry is not needed
//! and the file never holds duplicates — at-least-once in the worst case
//! (a crash mid-append may leave one whole unacknowledged record), never a
//! torn record.
//!
//! `append.rs` is the record append itself; `allocate.rs` gives a file its
//! chunks and places their replicas; `versions.rs` keeps each chunk's set
//! of current replicas (dropping failed ones behind a new version); and
//! `sync.rs` makes appends durable and cuts a closing log's zeros.

use super::replica::{Open, Replica};
use super::server::Health;
use super::Inner;
use crate::io::Chain;
use crate::Error;
use std::io;

mod allocate;
mod append;
mod sync;
mod versions;

pub(crate) use allocate::create_replicas;
pub(crate) use append::append;
pub(crate) use sync::{cut_zeros, sync_file};
pub(crate) use versions::{drop_replicas_locked, forget_replica, write_set};

pub(crate) use super::replica::Placed;

fn unavailable(name: &str, why: impl Into<String>) -> Error {
    Error::io(name, io::Error::other(why.into()))
}

/// Accounts a failed write to server `s`: a full disk stops new
/// placements there; other errors make the heartbeat look at it now.
pub(crate) fn note_write_error(inner: &Inner, s: usize, e: &io::Error) {
    let server = &inner.servers[s];
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
        inner.heartbeat_signal.notify();
    }
}

/// Runs one chain per opened replica in one submission (`fill` builds
/// the chain of the `i`th) and returns each replica's outcome.
fn run_opened<'o, 'r>(
    inner: &Inner,
    opens: &'o [io::Result<Open<'r>>],
    mut fill: impl FnMut(usize, &'o Open<'r>, &mut Chain<'o>),
) -> Vec<io::Result<()>> {
    let chains: Vec<Chain<'o>> = opens
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut c = Chain::new();
            if let Ok(o) = o {
                fill(i, o, &mut c);
            }
            c
        })
        .collect();
    let res = inner.io.run_chains(&chains);
    drop(chains);
    merge(opens, res)
}

/// Takes one chunk's sync outcomes (one per replica of `reps`, in
/// order): marks the replicas that synced, reports those that failed.
/// Returns whether any synced, and the last failure.
fn note_syncs(
    inner: &Inner,
    handle: u64,
    reps: &[Placed],
    res: &mut impl Iterator<Item = io::Result<()>>,
) -> (bool, Option<io::Error>) {
    let (mut any, mut last_err) = (false, None);
    for (s, r) in reps {
        match res.next() {
            Some(Ok(())) => {
                r.synced();
                any = true;
            }
            Some(Err(e)) => {
                note_write_error(inner, *s, &e);
                inner.report_bad(handle, *s, &format!("sync failed: {e}"), false);
                last_err = Some(e);
            }
            None => {}
        }
    }
    (any, last_err)
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
