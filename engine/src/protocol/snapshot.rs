//! What taking a snapshot asks of a tablet server: hold a table's writes
//! for a moment so every server's cut is taken at one instant, then write
//! what the memtables held at the cut and keep the files from GC until the
//! snapshot's manifest names them ([`crate::snapshot`]).

use crate::Result;
use serde::{Deserialize, Serialize};

/// One tablet as it was at a hold's cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTablet {
    /// Every entry of the tablet committed before the cut has a sequence
    /// number at most this; every later one, a higher one.
    pub cut: u64,
    /// The tablet's descriptor ([`crate::protocol::TabletMeta::encode`]):
    /// its range and files, no redo point.
    pub meta: Vec<u8>,
}

/// Writes held on one server: what [`TabletSnapshots::hold_writes`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteHold {
    /// Names the hold in the calls that follow.
    pub hold: u64,
    /// The table's tablets served there, each as it was at the cut (its
    /// files only; the memtables' part comes with the release).
    pub tablets: Vec<HeldTablet>,
}

/// Snapshots: a table's writes held, then released, then its files let go.
pub trait TabletSnapshots: Send + Sync {
    /// Closes every served tablet of `table` to writes (waiting for the
    /// writes inside to finish) for at most `hold_ms`, and returns their
    /// cuts. Writes wait meanwhile; past `hold_ms` they go on by themselves.
    fn hold_writes(&self, table: u64, hold_ms: u64) -> Result<WriteHold>;
    /// Lets the writes of `hold` go on, writes each held tablet's memtable
    /// entries up to its cut into new SSTables, and returns the tablets with
    /// all their files. Those files stay live for GC until [`unpin`] (or an
    /// hour). Fails, unpinning, if the hold had already run out: writes
    /// went on and the cut is no longer one instant.
    ///
    /// [`unpin`]: TabletSnapshots::unpin
    fn release_writes(&self, hold: u64) -> Result<Vec<HeldTablet>>;
    /// Lets GC have `hold`'s files again (once a manifest names them, or the
    /// snapshot was given up). Holding writes still, it releases them first.
    fn unpin(&self, hold: u64) -> Result<()>;
}
