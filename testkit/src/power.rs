//! Power cuts: the [`PowerSwitch`] a crash model counts mutating operations
//! with (so that a test can cut the power after the Nth and visit every
//! crash point of a workload), and the [`UndoLog`] of a real file, which
//! takes its unsynced writes back as a power cut would.

use crate::rng::SplitMix64;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Why a crash model refused an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The power went at an earlier operation and is still off.
    PowerOff,
    /// This operation is where the power went.
    PowerLost,
    /// The test asked for this operation to fail.
    Injected,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refused::PowerOff => "power is off",
            Refused::PowerLost => "power lost",
            Refused::Injected => "injected fault",
        })
    }
}

/// Counts mutating operations and cuts the power after a chosen number.
#[derive(Debug, Default)]
pub struct PowerSwitch {
    /// Mutating operations left before the power goes off.
    left: Option<u64>,
    off: bool,
    mutations: u64,
}

impl PowerSwitch {
    /// Fails once the power is off (for operations that change nothing).
    pub fn check(&self) -> Result<(), Refused> {
        if self.off {
            return Err(Refused::PowerOff);
        }
        Ok(())
    }

    /// Counts one mutating operation; the one the cut falls on and every
    /// one after it fail.
    pub fn admit(&mut self) -> Result<(), Refused> {
        self.check()?;
        if let Some(left) = self.left.as_mut() {
            if *left == 0 {
                self.off = true;
                self.left = None;
                return Err(Refused::PowerLost);
            }
            *left -= 1;
        }
        self.mutations += 1;
        Ok(())
    }

    /// Lets `n` more mutating operations run; the next one loses the power.
    pub fn off_after(&mut self, n: u64) {
        self.left = Some(n);
    }

    pub fn is_off(&self) -> bool {
        self.off
    }

    /// Mutating operations admitted so far (to size a sweep of crash points).
    pub fn mutations(&self) -> u64 {
        self.mutations
    }

    /// The machine restarted: the power is on, with no cut pending.
    pub fn restore(&mut self) {
        self.off = false;
        self.left = None;
    }
}

/// What a disk writes atomically.
pub const SECTOR: u64 = 512;

/// One write not yet made durable: what it overwrote and what it wrote.
struct Undo {
    offset: u64,
    /// Bytes the write overwrote (the part that was inside the file).
    old: Vec<u8>,
    /// Bytes the write put there.
    new: Vec<u8>,
    /// The file's length before the write.
    len_before: u64,
}

/// The writes to one file since its last sync, with what each overwrote.
pub struct UndoLog {
    /// A handle of our own: the undo goes to the same inode even after the
    /// file was renamed or its writer closed it.
    file: File,
    undo: Vec<Undo>,
}

impl UndoLog {
    /// A log for the file `file` (a read-write handle on it).
    pub fn new(file: File) -> UndoLog {
        UndoLog {
            file,
            undo: Vec::new(),
        }
    }

    /// Notes a write of `bufs` at `offset` about to be made to a file now
    /// `len_before` bytes long, reading what it will overwrite.
    pub fn record(&mut self, offset: u64, bufs: &[&[u8]], len_before: u64) -> io::Result<()> {
        let new_len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = (offset + new_len).min(len_before);
        let mut old = vec![0u8; end.saturating_sub(offset) as usize];
        self.file.read_exact_at(&mut old, offset)?;
        self.undo.push(Undo {
            offset,
            old,
            new: bufs.concat(),
            len_before,
        });
        Ok(())
    }

    /// The file was synced: its writes are durable.
    pub fn clear(&mut self) {
        self.undo.clear();
    }

    /// Writes not yet synced.
    pub fn len(&self) -> usize {
        self.undo.len()
    }

    pub fn is_empty(&self) -> bool {
        self.undo.is_empty()
    }

    /// Undoes every write; with `torn`, then replays a random version of
    /// each sector they touched: the kernel is taken to have written back
    /// some of the dirty data before the power went, in any order, so each
    /// sector shows its synced content or its content after one of the
    /// writes that touched it; a file grown past its synced length keeps
    /// the length of its furthest surviving piece, and sectors below that
    /// which survived in no version read as zeros. Returns whether any
    /// unsynced piece survived.
    pub fn roll_back(&self, torn: Option<&mut SplitMix64>) -> io::Result<bool> {
        for u in self.undo.iter().rev() {
            self.file.write_all_at(&u.old, u.offset)?;
            self.file.set_len(u.len_before)?;
        }
        let Some(rng) = torn else {
            return Ok(false);
        };
        let sectors = |u: &Undo| {
            let end = u.offset + u.new.len() as u64;
            (u.offset / SECTOR)..end.div_ceil(SECTOR)
        };
        // How many writes touched each sector, then how many of them it keeps.
        let mut versions: HashMap<u64, (u64, u64)> = HashMap::new();
        for u in &self.undo {
            for sec in sectors(u) {
                versions.entry(sec).or_default().0 += 1;
            }
        }
        let mut order: Vec<u64> = versions.keys().copied().collect();
        order.sort_unstable();
        for sec in order {
            if let Some(v) = versions.get_mut(&sec) {
                v.1 = rng.next_u64() % (v.0 + 1);
            }
        }
        let mut seen: HashMap<u64, u64> = HashMap::new();
        let mut kept = false;
        for u in &self.undo {
            for sec in sectors(u) {
                let n = seen.entry(sec).or_default();
                *n += 1;
                if *n > versions.get(&sec).map_or(0, |v| v.1) {
                    continue;
                }
                let from = (sec * SECTOR).max(u.offset);
                let to = ((sec + 1) * SECTOR).min(u.offset + u.new.len() as u64);
                let piece = &u.new[(from - u.offset) as usize..(to - u.offset) as usize];
                self.file.write_all_at(piece, from)?;
                kept = true;
            }
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cut_falls_on_the_operation_after_n() {
        let mut p = PowerSwitch::default();
        p.off_after(2);
        assert!(p.admit().is_ok() && p.admit().is_ok());
        assert_eq!(p.admit(), Err(Refused::PowerLost));
        assert_eq!(p.admit(), Err(Refused::PowerOff));
        assert_eq!(p.check(), Err(Refused::PowerOff));
        assert_eq!(p.mutations(), 2);
        p.restore();
        assert!(!p.is_off());
        assert!(p.admit().is_ok());
    }

    #[test]
    fn rolling_back_restores_the_synced_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        let mut log = UndoLog::new(f.try_clone().unwrap());
        log.record(8, &[b"ab", b"cd"], 10).unwrap();
        f.write_all_at(b"abcd", 8).unwrap();
        assert_eq!(log.len(), 1);
        assert!(!log.roll_back(None).unwrap());
        assert_eq!(std::fs::read(&p).unwrap(), b"0123456789");
    }
}
