//! [`DiskModel`]: files in memory with a power-loss model, under the crash
//! stores of the crates above (`gfs::CrashStore`, `chubby::CrashDisk`),
//! which adapt it to their own file interfaces.
//!
//! # The model
//!
//! * **File data.** Each file has a synced length; a write grows the file
//!   but not its synced length, a sync moves the synced length to the end.
//!   The synced data belongs to the file, not to its name, so it follows
//!   renames. On a crash a file keeps its synced prefix; with torn writes on
//!   ([`DiskModel::set_torn_writes`]) it also keeps a random-length prefix of
//!   its unsynced tail, as when the kernel wrote back some pages of the last
//!   writes before the power went.
//! * **Names.** There are two namespaces: the one the running process sees
//!   ([`DiskModel::lookup`]) and the one a power cut leaves
//!   ([`DiskModel::durable_id`]). When a change of the first reaches the
//!   second is the adapter's contract: `gfs::CrashStore` makes a created
//!   name durable at its writer's first sync and renames and deletes at
//!   once; `chubby::CrashDisk` makes every change durable at a directory
//!   sync ([`DiskModel::sync_namespace`]).
//! * **Crash points.** Each operation is admitted first
//!   ([`DiskModel::admit`]): the `n`th of a kind can be made to fail once
//!   ([`DiskModel::fail_nth`]), and the power can be cut after the `n`th
//!   mutating one ([`DiskModel::power_off_after`]); once it is off every
//!   operation fails until [`DiskModel::crash`].
//! * **Handles.** A crash bumps [`DiskModel::epoch`], so an adapter can
//!   fail handles opened before it, as they would in a restarted program.

use crate::power::{PowerSwitch, Refused};
use crate::rng::SplitMix64;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A file's bytes and how many of them are durable.
#[derive(Debug, Default)]
pub struct ModelFile {
    pub data: Vec<u8>,
    pub synced: usize,
}

impl ModelFile {
    /// Makes everything written so far durable.
    pub fn sync(&mut self) {
        self.synced = self.data.len();
    }
}

/// What [`DiskModel::crash`] dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Files whose names were not durable and are gone.
    pub files_lost: usize,
    /// Unsynced bytes dropped across all surviving files.
    pub bytes_lost: u64,
    /// Files that kept part of their unsynced tail (torn writes).
    pub torn_files: usize,
}

/// Files with a power-loss model (see the module docs); `K` names the
/// kinds of operation the adapter counts and can fail.
pub struct DiskModel<K> {
    files: HashMap<u64, ModelFile>,
    /// Names as the running process sees them.
    live: BTreeMap<String, u64>,
    /// Names as they would be found after a power cut.
    durable: BTreeMap<String, u64>,
    next_id: u64,
    /// Bumped by every crash; handles of an older epoch are dead.
    epoch: u64,
    counts: HashMap<K, u64>,
    /// `(kind, n)`: the operation of `kind` whose count reaches `n` fails.
    fail_at: Vec<(K, u64)>,
    power: PowerSwitch,
    torn: bool,
    rng: SplitMix64,
}

impl<K: Copy + Eq + Hash> DiskModel<K> {
    /// An empty disk whose torn writes are drawn from `seed` (same seed,
    /// same tears).
    pub fn new(seed: u64) -> Self {
        DiskModel {
            files: HashMap::new(),
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            next_id: 1,
            epoch: 0,
            counts: HashMap::new(),
            fail_at: Vec::new(),
            power: PowerSwitch::default(),
            torn: false,
            rng: SplitMix64::new(seed),
        }
    }

    /// Whether a crash keeps a random prefix of each file's unsynced tail.
    pub fn set_torn_writes(&mut self, on: bool) {
        self.torn = on;
    }

    /// Makes the `n`th operation of `kind` from now (1 = the next one)
    /// fail, once.
    pub fn fail_nth(&mut self, kind: K, n: u64) {
        let at = self.count(kind) + n.max(1);
        self.fail_at.push((kind, at));
    }

    /// Lets `n` more mutating operations run; the next one and everything
    /// after it fail as if the machine had lost power, until [`Self::crash`].
    pub fn power_off_after(&mut self, n: u64) {
        self.power.off_after(n);
    }

    /// Whether a [`Self::power_off_after`] point has been reached.
    pub fn is_powered_off(&self) -> bool {
        self.power.is_off()
    }

    /// Mutating operations so far.
    pub fn mutations(&self) -> u64 {
        self.power.mutations()
    }

    /// Operations of `kind` so far.
    pub fn count(&self, kind: K) -> u64 {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// How many crashes there have been.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Counts one operation of `kind` (a crash point if it `mutates`) and
    /// decides whether it may run.
    pub fn admit(&mut self, kind: K, mutates: bool) -> Result<(), Refused> {
        self.power.check()?;
        if mutates {
            self.power.admit()?;
        }
        let n = self.counts.entry(kind).or_insert(0);
        *n += 1;
        let n = *n;
        if let Some(i) = self
            .fail_at
            .iter()
            .position(|&(k, at)| k == kind && at == n)
        {
            self.fail_at.swap_remove(i);
            return Err(Refused::Injected);
        }
        Ok(())
    }

    /// Fails once the power is off, for operations that are not counted.
    pub fn check_power(&self) -> Result<(), Refused> {
        self.power.check()
    }

    /// A new empty file with no name yet ([`Self::link`] gives it one).
    pub fn new_file(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.files.insert(id, ModelFile::default());
        id
    }

    pub fn file(&self, id: u64) -> Option<&ModelFile> {
        self.files.get(&id)
    }

    pub fn file_mut(&mut self, id: u64) -> Option<&mut ModelFile> {
        self.files.get_mut(&id)
    }

    /// The file `name` means to the running process.
    pub fn lookup(&self, name: &str) -> Option<u64> {
        self.live.get(name).copied()
    }

    /// Points `name` at file `id` for the running process.
    pub fn link(&mut self, name: &str, id: u64) {
        self.live.insert(name.to_string(), id);
    }

    /// Removes `name` for the running process; returns the file it meant.
    pub fn unlink(&mut self, name: &str) -> Option<u64> {
        self.live.remove(name)
    }

    /// The file `name` would mean after a power cut now.
    pub fn durable_id(&self, name: &str) -> Option<u64> {
        self.durable.get(name).copied()
    }

    /// Makes `name` mean file `id` after a power cut too.
    pub fn make_durable(&mut self, name: &str, id: u64) {
        self.durable.insert(name.to_string(), id);
    }

    /// Makes `name` mean nothing after a power cut.
    pub fn forget_durable(&mut self, name: &str) {
        self.durable.remove(name);
    }

    /// Makes every name as the process sees it durable (a directory sync).
    pub fn sync_namespace(&mut self) {
        self.durable = self.live.clone();
    }

    /// The names the process sees that start with `prefix`, sorted.
    pub fn names(&self, prefix: &str) -> Vec<String> {
        self.live
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// How many bytes of `name` would survive a crash now (`None` if the
    /// name itself would not).
    pub fn durable_len(&self, name: &str) -> Option<u64> {
        let id = self.durable.get(name)?;
        self.files.get(id).map(|f| f.synced as u64)
    }

    /// Loses power and restarts: the namespace becomes the durable one, each
    /// file is cut to its synced length (plus a torn tail if enabled), the
    /// epoch moves on, and the power is back on with no faults pending.
    pub fn crash(&mut self) -> CrashReport {
        let mut report = CrashReport {
            files_lost: self
                .live
                .iter()
                .filter(|(n, id)| self.durable.get(*n) != Some(id))
                .count(),
            ..CrashReport::default()
        };
        let keep: Vec<u64> = self.durable.values().copied().collect();
        self.files.retain(|id, _| keep.contains(id));
        for f in self.files.values_mut() {
            let unsynced = f.data.len() - f.synced;
            let kept = if self.torn && unsynced > 0 {
                self.rng.up_to(unsynced as u64) as usize
            } else {
                0
            };
            if kept > 0 {
                report.torn_files += 1;
            }
            report.bytes_lost += (unsynced - kept) as u64;
            f.data.truncate(f.synced + kept);
            f.synced = f.data.len();
        }
        self.live = self.durable.clone();
        self.epoch += 1;
        self.power.restore();
        self.fail_at.clear();
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    enum Op {
        Write,
        Read,
    }

    fn write(d: &mut DiskModel<Op>, name: &str, bytes: &[u8]) {
        d.admit(Op::Write, true).unwrap();
        let id = match d.lookup(name) {
            Some(id) => id,
            None => {
                let id = d.new_file();
                d.link(name, id);
                id
            }
        };
        d.file_mut(id).unwrap().data.extend_from_slice(bytes);
    }

    #[test]
    fn a_crash_keeps_synced_data_under_durable_names() {
        let mut d = DiskModel::new(0);
        write(&mut d, "a", b"one");
        let a = d.lookup("a").unwrap();
        d.file_mut(a).unwrap().sync();
        d.sync_namespace();
        write(&mut d, "a", b"two");
        write(&mut d, "b", b"bee");
        assert_eq!(d.durable_len("a"), Some(3));
        assert_eq!(d.durable_len("b"), None);
        let r = d.crash();
        assert_eq!((r.files_lost, r.bytes_lost, r.torn_files), (1, 3, 0));
        assert_eq!(d.names(""), vec!["a".to_string()]);
        assert_eq!(d.file(a).unwrap().data, b"one");
        assert_eq!(d.epoch(), 1);
    }

    #[test]
    fn torn_writes_keep_a_prefix_of_the_tail() {
        let mut torn = 0;
        for seed in 0..20 {
            let mut d = DiskModel::new(seed);
            d.set_torn_writes(true);
            write(&mut d, "f", b"0123");
            let id = d.lookup("f").unwrap();
            d.file_mut(id).unwrap().sync();
            d.make_durable("f", id);
            write(&mut d, "f", b"456789");
            torn += d.crash().torn_files;
            let data = &d.file(id).unwrap().data;
            assert!((4..=10).contains(&data.len()));
            assert_eq!(&data[..], &b"0123456789"[..data.len()]);
        }
        assert!(torn > 0);
    }

    #[test]
    fn faults_and_the_power_cut() {
        let mut d: DiskModel<Op> = DiskModel::new(0);
        d.fail_nth(Op::Read, 2);
        assert!(d.admit(Op::Read, false).is_ok());
        assert_eq!(d.admit(Op::Read, false), Err(Refused::Injected));
        assert!(d.admit(Op::Read, false).is_ok());
        assert_eq!(d.count(Op::Read), 3);
        d.power_off_after(1);
        assert!(d.admit(Op::Write, true).is_ok());
        assert_eq!(d.admit(Op::Write, true), Err(Refused::PowerLost));
        assert_eq!(d.admit(Op::Read, false), Err(Refused::PowerOff));
        assert!(d.is_powered_off());
        assert_eq!(d.mutations(), 1);
        d.crash();
        assert!(d.check_power().is_ok());
    }
}
