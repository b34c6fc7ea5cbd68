#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Faults in the chunk layer under a real mount (issue 4): bytes flipped in
//! replica files, a chunkserver directory removed under load, and kill -9
//! during writes and during re-replication. Small chunks and memtables make
//! the data reach SSTables and span many chunks within seconds.
//!
//! `CHUNKS_SEED=<n>` replays the random choices of a run (each test prints
//! its seed).

use rand::distributions::Alphanumeric;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tests::{tail, wait_until, Mount};

/// Chunk size of every test: two 64 KiB checksum blocks per chunk.
const CHUNK: u64 = 128 << 10;
const CHUNK_OPT: &str = "chunk_size=128k";
/// Bytes covered by one checksum (gfs/src/cluster/chunk.rs).
const BLOCK: u64 = 64 << 10;

fn seed() -> u64 {
    let s = std::env::var("CHUNKS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("CHUNKS_SEED={s}");
    s
}

// ---------------------------------------------------------------------------
// `.bigtable/status`

/// The `key=value` fields of the `gfs:`, `gfs master:` and `gfs repair:`
/// status lines (their keys are distinct).
type Status = HashMap<String, String>;

fn gfs_status(m: &Mount) -> Status {
    let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
    let mut out = Status::new();
    for line in text.lines() {
        let fields = line
            .strip_prefix("gfs: ")
            .or_else(|| line.strip_prefix("gfs repair: "))
            .or_else(|| line.strip_prefix("gfs master: "));
        for kv in fields.into_iter().flat_map(|f| f.split(' ')) {
            if let Some((k, v)) = kv.split_once('=') {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    assert!(
        out.contains_key("under_replicated") && out.contains_key("corruptions_detected"),
        "no gfs lines in .bigtable/status:\n{text}"
    );
    out
}

fn num(s: &Status, key: &str) -> u64 {
    s.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("status has no number {key}: {s:?}"))
}

/// Every chunk at its replication factor and nothing waiting for repair.
fn fully_replicated(s: &Status) -> bool {
    num(s, "under_replicated") == 0
        && num(s, "lost") == 0
        && num(s, "queue") == 0
        && num(s, "pending_reports") == 0
        && s.get("copying").map(String::as_str) == Some("-")
}

/// Waits until the status is fully replicated (and `state=ok` if
/// `all_servers_up`); fails the test with the status and log on timeout.
fn wait_repaired(m: &Mount, timeout: Duration, all_servers_up: bool) -> Status {
    let mut last = Status::new();
    let ok = wait_until(timeout, || {
        last = gfs_status(m);
        fully_replicated(&last)
            && (!all_servers_up || last.get("state").map(String::as_str) == Some("ok"))
    });
    assert!(
        ok,
        "replication not restored within {timeout:?}: {last:?}\nstatus:\n{}\nlog tail:\n{}",
        fs::read_to_string(m.path(".bigtable/status")).unwrap_or_default(),
        tail(&m.log_text(), 30)
    );
    last
}

/// Waits (at most `cap`) until the chunkservers stop writing: pending
/// minor compactions and log appends have landed.
fn settle(m: &Mount, cap: Duration) {
    let writes = |m: &Mount| -> (u64, String) {
        let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
        let mut sum = 0;
        let mut compactions = String::new();
        for l in text.lines() {
            if l.starts_with("gfs chunkserver ") {
                for kv in l.split(' ') {
                    if let Some(v) = kv.strip_prefix("writes=") {
                        sum += v.parse::<u64>().unwrap_or(0);
                    }
                }
            } else if l.starts_with("compactions ") {
                compactions = l.to_string();
            }
        }
        (sum, compactions)
    };
    let mut prev = writes(m);
    let mut stable = 0;
    wait_until(cap, || {
        std::thread::sleep(Duration::from_millis(80));
        let now = writes(m);
        stable = if now == prev { stable + 1 } else { 0 };
        prev = now;
        stable >= 3
    });
}

// ---------------------------------------------------------------------------
// Cells

/// Reads every path (relative to the mount) with one `cat` each, in one
/// shell; fails the test if any `cat` fails.
fn cat_all(m: &Mount, paths: &[String]) -> Vec<Vec<u8>> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"for f in "$@"; do cat -- "$f" || exit 1; printf '\0'; done"#)
        .arg("sh")
        .args(paths)
        .current_dir(&m.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "a cat failed ({}): {}\nlog tail:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        tail(&m.log_text(), 30)
    );
    let mut v: Vec<Vec<u8>> = out.stdout.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    assert_eq!(
        v.pop(),
        Some(Vec::new()),
        "output must end with a separator"
    );
    assert_eq!(v.len(), paths.len());
    v
}

/// Reads every cell with `cat` and compares it with what was written.
/// Makes the kernel drop its page cache, names and inodes, so that the
/// next reads through the mount reach the store (root only: false
/// elsewhere).
fn forget_kernel_caches() -> bool {
    fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Reads every cell of `want` back from the store (not from the kernel's
/// pages, where root can make it drop them) and checks its value.
fn check_cells(m: &Mount, want: &BTreeMap<String, Vec<u8>>, when: &str) {
    forget_kernel_caches();
    let paths: Vec<String> = want.keys().cloned().collect();
    let got = cat_all(m, &paths);
    let bad: Vec<&String> = paths
        .iter()
        .zip(&got)
        .filter(|(p, g)| want[*p] != **g)
        .map(|(p, _)| p)
        .collect();
    assert!(
        bad.is_empty(),
        "{when}: {} of {} cells read back wrong, e.g. {}\nlog tail:\n{}",
        bad.len(),
        paths.len(),
        bad[0],
        tail(&m.log_text(), 30)
    );
}

/// A value that names its cell and write, padded with random letters (which
/// lz4 cannot shrink much, so the data fills chunks).
fn value(rng: &mut StdRng, tag: &str, min: usize, max: usize) -> Vec<u8> {
    let mut v = format!("{tag} ").into_bytes();
    let n = rng.gen_range(min..max);
    v.extend(rng.sample_iter(Alphanumeric).take(n));
    v
}

/// Writes `data` to `path` with open/write/close; Ok only if close succeeded.
fn write_and_close(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(path)?;
    f.write_all(data)?;
    let fd = f.into_raw_fd();
    // SAFETY: fd is the descriptor we own, closed exactly once here.
    if unsafe { libc::close(fd) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Replica files (format: gfs/src/cluster/chunk.rs)
//
// [superblock: 64 B][checksum table: 16 B per 64 KiB block][zeros to 4 KiB][data]

#[derive(Debug, Clone)]
struct ReplicaFile {
    path: PathBuf,
    server: String,
    handle: u64,
    version: u64,
    /// Offset of chunk byte 0 in the file (the header's length).
    data_off: u64,
    /// Committed length, as the table on disk says.
    len: u64,
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

fn parse_replica(path: &Path, server: &str) -> Option<ReplicaFile> {
    let name = path.file_name()?.to_str()?;
    let handle = u64::from_str_radix(name.strip_suffix(".chunk")?, 16).ok()?;
    let bytes = fs::read(path).ok()?;
    if bytes.len() < 64 || &bytes[0..8] != b"GFSCHNK1" {
        return None;
    }
    let chunk_size = u64_at(&bytes, 24);
    let blocks = chunk_size.div_ceil(BLOCK);
    let data_off = (64 + blocks * 16).div_ceil(4096) * 4096;
    let mut len = blocks * BLOCK;
    for k in 0..blocks {
        let at = (64 + k * 16) as usize;
        let e = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as u64;
        if e != BLOCK {
            len = k * BLOCK + e;
            break;
        }
    }
    let len = len.min((bytes.len() as u64).saturating_sub(data_off));
    Some(ReplicaFile {
        path: path.to_path_buf(),
        server: server.to_string(),
        handle,
        version: u64_at(&bytes, 16),
        data_off,
        len,
    })
}

/// Every replica file of every chunkserver directory under `data`.
fn replica_files(data: &Path) -> Vec<ReplicaFile> {
    let mut out = Vec::new();
    for cs in fs::read_dir(data).unwrap().flatten() {
        let server = cs.file_name().to_string_lossy().into_owned();
        if !server.starts_with("chunkserver-") {
            continue;
        }
        for f in fs::read_dir(cs.path().join("chunks"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Some(r) = parse_replica(&f.path(), &server) {
                out.push(r);
            }
        }
    }
    out.sort_by(|a, b| (a.handle, &a.server).cmp(&(b.handle, &b.server)));
    out
}

/// One flipped byte.
#[derive(Debug, Clone)]
struct Flip {
    path: PathBuf,
    handle: u64,
    offset: u64,
    original: u8,
    flipped: u8,
    /// In the data region (else in the superblock, table or padding).
    data: bool,
}

impl Flip {
    /// The byte now on disk, or None if the replica file is gone.
    fn on_disk(&self) -> Option<u8> {
        let f = fs::File::open(&self.path).ok()?;
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, self.offset).ok()?;
        Some(b[0])
    }

    /// The corruption is still there.
    fn present(&self) -> bool {
        self.on_disk() == Some(self.flipped)
    }
}

fn flip_byte(path: &Path, offset: u64, mask: u8) -> Option<(u8, u8)> {
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).ok()?;
    let new = b[0] ^ mask;
    f.write_all_at(&[new], offset).ok()?;
    Some((b[0], new))
}

/// Corrupts one replica of every chunk whose replicas agree (same version
/// and length on `replication` servers) with 1 to `max_flips` single-byte
/// flips, most in the data region and some in the header. A chunk that still
/// carries an earlier, undetected flip is only flipped again on that same
/// replica, so at least one good replica always remains.
fn flip_round(
    data: &Path,
    rng: &mut StdRng,
    replication: usize,
    max_flips: usize,
    earlier: &[Flip],
) -> Vec<Flip> {
    let mut by_handle: BTreeMap<u64, Vec<ReplicaFile>> = BTreeMap::new();
    for r in replica_files(data) {
        by_handle.entry(r.handle).or_default().push(r);
    }
    let present: Vec<&Flip> = earlier.iter().filter(|f| f.present()).collect();
    let dirty: HashMap<u64, PathBuf> = present.iter().map(|f| (f.handle, f.path.clone())).collect();
    // A byte flipped again would record a corrupt byte as the original.
    let mut taken: HashSet<(PathBuf, u64)> =
        present.iter().map(|f| (f.path.clone(), f.offset)).collect();
    let mut out = Vec::new();
    for (h, reps) in by_handle {
        let agree = reps.len() == replication
            && reps
                .iter()
                .all(|r| r.version == reps[0].version && r.len == reps[0].len);
        if !agree || reps[0].len == 0 {
            continue;
        }
        let victim = match dirty.get(&h) {
            Some(p) => match reps.iter().find(|r| &r.path == p) {
                Some(r) => r.clone(),
                None => continue,
            },
            None => reps[rng.gen_range(0..reps.len())].clone(),
        };
        for _ in 0..rng.gen_range(1..=max_flips) {
            let (offset, in_data) = if rng.gen_bool(0.85) {
                (victim.data_off + rng.gen_range(0..victim.len), true)
            } else {
                (rng.gen_range(0..victim.data_off), false)
            };
            if !taken.insert((victim.path.clone(), offset)) {
                continue;
            }
            let mask = rng.gen_range(1..=255u8);
            if let Some((original, flipped)) = flip_byte(&victim.path, offset, mask) {
                out.push(Flip {
                    path: victim.path.clone(),
                    handle: h,
                    offset,
                    original,
                    flipped,
                    data: in_data,
                });
            }
        }
    }
    out
}

/// Opens the chunk layer of a stopped mount's data directory directly, as an
/// fsck would.
fn open_cluster(data: &Path) -> Arc<gfs::Cluster> {
    let mut o = gfs::ClusterOptions::for_data_dir(data);
    o.chunk_size = CHUNK;
    o.min_free_bytes = 32 << 20;
    gfs::Cluster::open(o).unwrap()
}

// ---------------------------------------------------------------------------
// 1. Flipped bytes

#[test]
fn flipped_bytes_in_replicas_never_reach_readers_and_are_repaired() {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed());
    // No block or scan cache: every cat reads the chunk layer, and the
    // client rotates over the replicas, so flipped blocks are read. With
    // direct replicas reads would prefer each chunk's buffered replica and
    // leave flips elsewhere to the scrub (gfs's own tests flip direct
    // replicas): `nodirect` keeps every replica in the readers' rotation.
    let mut m = Mount::with_options(&[
        "memtable=256k",
        CHUNK_OPT,
        "cache=0",
        "scan_cache=0",
        "nodirect",
    ]);
    m.table("t", "f\n");
    let (rows, quals) = (40, 10);
    for r in 0..rows {
        fs::create_dir_all(m.path(&format!("t/r{r:03}/f"))).unwrap();
    }
    let cells: Vec<String> = (0..rows)
        .flat_map(|r| (0..quals).map(move |q| format!("t/r{r:03}/f/q{q}")))
        .collect();
    let mut want = BTreeMap::new();
    let mut flips: Vec<Flip> = Vec::new();
    let (mut found_mounted, mut found_remount) = (0, 0);
    let (rounds, cycles) = (4, 4);
    for round in 0..rounds {
        // Two to three memtables' worth of new values: minor (and later
        // merging) compactions put them in SSTables; the log holds them too.
        for c in &cells {
            let v = value(&mut rng, &format!("{c} round {round}"), 500, 1500);
            fs::write(m.path(c), &v).unwrap();
            want.insert(c.clone(), v);
        }
        settle(&m, Duration::from_secs(5));
        let mut found_round = 0;
        for cycle in 0..cycles {
            let before = num(&gfs_status(&m), "corruptions_detected");
            let new = flip_round(&m.data, &mut rng, 3, 5, &flips);
            let replicas: HashSet<&PathBuf> = new.iter().map(|f| &f.path).collect();
            eprintln!(
                "round {round}.{cycle}: {} flips in {} replicas ({} in headers)",
                new.len(),
                replicas.len(),
                new.iter().filter(|f| !f.data).count()
            );
            assert!(new.len() >= 10, "too few chunks to corrupt: {}", new.len());
            flips.extend(new);

            // Every read through the mount returns the right bytes, and the
            // status counts the corrupt replicas the reads ran into.
            check_cells(&m, &want, &format!("round {round}.{cycle}, mounted"));
            let s = gfs_status(&m);
            let found = num(&s, "corruptions_detected") - before;
            eprintln!("round {round}.{cycle}: {found} corrupt replicas found by the reads");
            found_round += found;
            // The bad replicas are dropped and copied afresh.
            wait_repaired(&m, Duration::from_secs(20), true);
        }
        // Reads reach only some chunks (the newest SSTables), but they must
        // find something.
        assert!(found_round > 0, "round {round}: no corruption detected");
        found_mounted += found_round;

        // A remount replays the commit log and reopens the SSTables through
        // the chunk layer: those reads must be right as well.
        m.remount();
        check_cells(&m, &want, &format!("round {round}, after remount"));
        let s = wait_repaired(&m, Duration::from_secs(20), true);
        found_remount += num(&s, "corruptions_detected");
    }
    let mounted_secs = started.elapsed().as_secs_f64();

    // The mount only finds what it reads. A scrub (here run directly on the
    // stopped store) must find every flip that is left, and repair it.
    m.stop();
    let (left, scrub_found, scrub_again) = {
        let c = open_cluster(&m.data);
        // Replicas that still hold a flip once the store is open (opening
        // deletes those whose superblock or last block fails).
        let left: HashSet<&PathBuf> = flips
            .iter()
            .filter(|f| f.present())
            .map(|f| &f.path)
            .collect();
        let found = c.scrub();
        assert!(
            c.wait_for_repair(Duration::from_secs(20)),
            "{:?}",
            c.health()
        );
        let again = c.scrub();
        let h = c.health();
        assert_eq!(h.lost, 0, "{h:?}");
        (left.len(), found, again)
    };
    assert_eq!(scrub_again, 0, "the scrub after repair still finds damage");
    assert!(
        scrub_found >= left,
        "{left} replicas still hold a flip, the scrub found only {scrub_found}"
    );
    // Every data-region flip is gone: its replica was replaced by a good copy
    // (or deleted with its file). Header flips are covered by the scrub above.
    let survivors: Vec<&Flip> = flips
        .iter()
        .filter(|f| f.data && f.on_disk().is_some_and(|b| b != f.original))
        .collect();
    if !survivors.is_empty() {
        let all = replica_files(&m.data);
        let detail: Vec<String> = survivors
            .iter()
            .map(|f| {
                let peers: Vec<String> = all
                    .iter()
                    .filter(|r| r.handle == f.handle)
                    .map(|r| {
                        let b = Flip {
                            path: r.path.clone(),
                            ..(*f).clone()
                        }
                        .on_disk();
                        format!("{} v{} len {} byte {b:?}", r.server, r.version, r.len)
                    })
                    .collect();
                format!("{f:?} now {:?}; replicas: {peers:?}", f.on_disk())
            })
            .collect();
        panic!("flips never repaired:\n{}", detail.join("\n"));
    }

    m.start();
    check_cells(&m, &want, "after scrub");
    let s = wait_repaired(&m, Duration::from_secs(20), true);
    let replicas: HashSet<&PathBuf> = flips.iter().map(|f| &f.path).collect();
    eprintln!(
        "{} flips ({} in headers) in {} replica files over {} cycles; corrupt replicas detected by mounted reads: \
         {found_mounted}, at remount: {found_remount}, by the final scrub: {scrub_found} (of {left} left); \
         {mounted_secs:.1} s mounted, {:.1} s in all; state={} under_replicated={}",
        flips.len(),
        flips.iter().filter(|f| !f.data).count(),
        replicas.len(),
        rounds * cycles,
        started.elapsed().as_secs_f64(),
        s["state"],
        s["under_replicated"]
    );
}

// ---------------------------------------------------------------------------
// A write (and read) load through the mount

/// The value writer `w` writes in its `i`th write: it names both and is
/// padded with letters derived from them.
fn load_value(w: usize, i: u32) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(((w as u64) << 32) | u64::from(i));
    value(&mut rng, &format!("writer {w} write {i}"), 200, 1200)
}

/// A write whose close returned: the cell (relative path) and its value's
/// writer and number.
type Closed = (String, usize, u32);

/// Writer threads creating new cells in their own rows (`t/w<w>/f/c<i>`),
/// and reader threads reading cells whose close returned.
///
/// Each cell is written once, so no reader races a writer on the same cell:
/// the mount shows such a reader the writer's unclosed bytes (an fs-level
/// problem, also with store=local, that these tests are not about).
struct Load {
    stop: Arc<AtomicBool>,
    closed: Arc<Mutex<Vec<Closed>>>,
    reads: Arc<AtomicU64>,
    /// Failed reads, wrong values, and (unless tolerated) failed writes.
    errors: Arc<Mutex<Vec<String>>>,
    threads: Vec<JoinHandle<()>>,
}

struct LoadSpec {
    writers: usize,
    readers: usize,
    /// Write numbers (and cell names) start here, so loads do not collide.
    first: u32,
    /// The daemon will be killed: a writer stops at its first error.
    expect_death: bool,
}

impl Load {
    fn start(m: &Mount, spec: LoadSpec) -> Load {
        let mut load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            closed: Arc::new(Mutex::new(Vec::new())),
            reads: Arc::new(AtomicU64::new(0)),
            errors: Arc::new(Mutex::new(Vec::new())),
            threads: Vec::new(),
        };
        for w in 0..spec.writers {
            fs::create_dir_all(m.path(&format!("t/w{w}/f"))).unwrap();
        }
        let mut threads = Vec::new();
        for w in 0..spec.writers {
            let (stop, closed, errors) =
                (load.stop.clone(), load.closed.clone(), load.errors.clone());
            let mnt = m.mnt.clone();
            threads.push(std::thread::spawn(move || {
                let mut i = spec.first;
                while !stop.load(Ordering::SeqCst) {
                    let rel = format!("t/w{w}/f/c{i}");
                    match write_and_close(&mnt.join(&rel), &load_value(w, i)) {
                        Ok(()) => closed.lock().unwrap().push((rel, w, i)),
                        Err(e) => {
                            if !spec.expect_death {
                                errors.lock().unwrap().push(format!("write {rel}: {e}"));
                            }
                            break;
                        }
                    }
                    i += 1;
                }
            }));
        }
        for r in 0..spec.readers {
            let (stop, closed, reads, errors) = (
                load.stop.clone(),
                load.closed.clone(),
                load.reads.clone(),
                load.errors.clone(),
            );
            let mnt = m.mnt.clone();
            threads.push(std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(r as u64);
                while !stop.load(Ordering::SeqCst) {
                    let pick = {
                        let c = closed.lock().unwrap();
                        (!c.is_empty()).then(|| c[rng.gen_range(0..c.len())].clone())
                    };
                    let Some((rel, w, i)) = pick else {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    };
                    let problem = match fs::read(mnt.join(&rel)) {
                        Err(e) => Some(format!("read {rel}: {e}")),
                        Ok(v) if v != load_value(w, i) => Some(format!(
                            "read {rel}: wrong value {:?}",
                            String::from_utf8_lossy(&v[..v.len().min(40)])
                        )),
                        Ok(_) => None,
                    };
                    reads.fetch_add(1, Ordering::SeqCst);
                    if let Some(p) = problem {
                        errors.lock().unwrap().push(p);
                    }
                }
            }));
        }
        load.threads = threads;
        load
    }

    fn closes(&self) -> usize {
        self.closed.lock().unwrap().len()
    }

    /// Waits until `n` more writes than now have closed.
    fn wait_for_more(&self, m: &Mount, n: usize, timeout: Duration) {
        let target = self.closes() + n;
        assert!(
            wait_until(timeout, || self.closes() >= target),
            "the load stalled at {} closed writes (wanted {target}); errors: {:?}\nlog tail:\n{}",
            self.closes(),
            self.errors.lock().unwrap(),
            tail(&m.log_text(), 30)
        );
    }

    /// Stops and joins every thread; returns the closed writes, the errors
    /// and the number of reads.
    fn finish(mut self) -> (Vec<Closed>, Vec<String>, u64) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
        let closed = self.closed.lock().unwrap().clone();
        let errors = self.errors.lock().unwrap().clone();
        (closed, errors, self.reads.load(Ordering::SeqCst))
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A failed assertion must not leave threads writing into the mount.
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Every write whose close returned reads back whole with `cat`.
fn check_closed(m: &Mount, closed: &[Closed]) {
    let want: BTreeMap<String, Vec<u8>> = closed
        .iter()
        .map(|(p, w, i)| (p.clone(), load_value(*w, *i)))
        .collect();
    check_cells(m, &want, "closed writes");
}

/// A fresh mount with four chunkservers (DATA_DIR/chunkserver-0..3) and
/// three replicas per chunk, so a lost directory can be made up for.
fn mount_with_spare(opts: &[&str]) -> Mount {
    let mut m = Mount::with_options(opts);
    m.stop();
    fs::create_dir(m.data.join("chunkserver-3")).unwrap();
    m.start();
    let s = gfs_status(&m);
    assert_eq!(s["chunkservers"], "4/4", "{s:?}");
    assert_eq!(s["replication"], "3", "{s:?}");
    m
}

/// Fills the table with `n` cells of prefill rows (several SSTables' worth).
fn prefill(m: &Mount, rng: &mut StdRng, n: usize) -> BTreeMap<String, Vec<u8>> {
    let mut want = BTreeMap::new();
    for k in 0..n {
        let row = format!("t/p{:03}/f", k / 10);
        if k % 10 == 0 {
            fs::create_dir_all(m.path(&row)).unwrap();
        }
        let p = format!("{row}/q{}", k % 10);
        let v = value(rng, &p, 500, 1500);
        fs::write(m.path(&p), &v).unwrap();
        want.insert(p, v);
    }
    want
}

// ---------------------------------------------------------------------------
// 2. A chunkserver directory removed under load

#[test]
fn removing_a_chunkserver_directory_under_load_fails_no_read_and_loses_no_write() {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed());
    let mut m = mount_with_spare(&["memtable=256k", CHUNK_OPT, "cache=1m"]);
    m.table("t", "f\n");
    let old = prefill(&m, &mut rng, 600);
    let load = Load::start(
        &m,
        LoadSpec {
            writers: 2,
            readers: 2,
            first: 0,
            expect_death: false,
        },
    );
    load.wait_for_more(&m, 200, Duration::from_secs(20));

    let victim = m.data.join("chunkserver-1");
    let held = fs::read_dir(victim.join("chunks")).unwrap().count();
    remove_dir(&victim);
    let removed_at = Instant::now();
    assert!(
        wait_until(Duration::from_secs(10), || gfs_status(&m)["chunkservers"]
            == "3/4"),
        "the removed chunkserver was not noticed: {:?}",
        gfs_status(&m)
    );
    let noticed = removed_at.elapsed();
    // Its chunks are copied to the spare while the load goes on.
    let s = wait_repaired(&m, Duration::from_secs(30), false);
    let restored = removed_at.elapsed();
    load.wait_for_more(&m, 200, Duration::from_secs(20));
    let (closed, errors, reads) = load.finish();
    assert!(
        errors.is_empty(),
        "{} failures: {:?}",
        errors.len(),
        &errors[..errors.len().min(10)]
    );
    assert!(num(&s, "repaired") > 0, "nothing was re-replicated: {s:?}");

    check_closed(&m, &closed);
    check_cells(&m, &old, "after the removal");
    let s = gfs_status(&m);
    assert!(fully_replicated(&s), "{s:?}");

    // The copies are complete and durable: the store opens on the three
    // directories left, healthy.
    m.remount();
    let s2 = wait_repaired(&m, Duration::from_secs(20), true);
    assert_eq!(s2["chunkservers"], "3/3", "{s2:?}");
    check_closed(&m, &closed);
    check_cells(&m, &old, "after remounting without the removed directory");
    eprintln!(
        "removed a chunkserver holding {held} replicas: noticed after {:.1} s, replication restored after \
         {:.1} s ({} chunks copied, {} bytes); {reads} reads during the load, none failed; {} closed writes \
         and {} older cells checked; {:.1} s",
        noticed.as_secs_f64(),
        restored.as_secs_f64(),
        num(&s, "repaired"),
        num(&s, "copied_bytes"),
        closed.len(),
        old.len(),
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------
// 3. kill -9 during appends and during re-replication

#[test]
fn kill_9_during_appends_loses_no_closed_write() {
    let started = Instant::now();
    let mut m = Mount::with_options(&["memtable=256k", CHUNK_OPT]);
    m.table("t", "f\n");
    let mut all: Vec<Closed> = Vec::new();
    for round in 0..3u32 {
        let load = Load::start(
            &m,
            LoadSpec {
                writers: 4,
                readers: 0,
                first: round * 1_000_000,
                expect_death: true,
            },
        );
        load.wait_for_more(&m, 300, Duration::from_secs(20));
        m.kill9();
        let (closed, _, _) = load.finish();
        all.extend(closed);
        m.start();
        let s = wait_repaired(&m, Duration::from_secs(20), true);
        // The master came back from its checkpoint and log.
        assert!(
            num(&s, "recovered_from_checkpoint") > 0 || num(&s, "replayed_records") > 0,
            "{s:?}"
        );
        check_closed(&m, &all);
        eprintln!(
            "kill -9 #{round}: {} closed writes checked; master replayed {} records, torn tail {} bytes; \
             stale replicas deleted {}, orphans {}",
            all.len(),
            num(&s, "replayed_records"),
            num(&s, "torn_tail_bytes"),
            num(&s, "stale_deleted"),
            num(&s, "orphans_deleted")
        );
    }
    eprintln!("{:.1} s", started.elapsed().as_secs_f64());
}

/// Polls the status without pause until the daemon is re-replicating
/// (`up` chunkservers and chunks short of replicas, and if `bumped`, some
/// chunk's version already raised), then kills it; returns the status seen
/// last and whether it was caught in the act.
fn kill_during_repair(m: &mut Mount, up: &str, bumped: bool) -> (Status, bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut s = gfs_status(m);
    let mut caught = false;
    while Instant::now() < deadline {
        s = gfs_status(m);
        if s["chunkservers"] == up
            && num(&s, "under_replicated") > 0
            && (!bumped || num(&s, "version_bumps") > 0)
        {
            caught = true;
            break;
        }
    }
    m.kill9();
    (s, caught)
}

#[test]
fn kill_9_during_re_replication_loses_nothing_and_stale_replicas_are_never_served() {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed());
    let mut m = mount_with_spare(&["memtable=256k", CHUNK_OPT]);
    m.table("t", "f\n");
    let old = prefill(&m, &mut rng, 600);
    let mut closed: Vec<Closed> = Vec::new();

    // Phase 1: a directory goes away under load (moved out of DATA_DIR), the
    // daemon dies while copying its chunks, and the directory is back for the
    // restart, holding replicas that missed the appends made without it.
    let load = Load::start(
        &m,
        LoadSpec {
            writers: 4,
            readers: 0,
            first: 0,
            expect_death: true,
        },
    );
    load.wait_for_more(&m, 100, Duration::from_secs(20));
    // Take the directory holding a replica of the newest chunk: it is the
    // last chunk of a file (a log being appended), which is not sealed, so
    // dropping the replica raises the chunk's version on the others.
    let newest = replica_files(&m.data)
        .into_iter()
        .max_by_key(|r| r.handle)
        .unwrap();
    let dir = m.data.join(&newest.server);
    let away = m.data.with_file_name("chunkserver.away");
    fs::rename(&dir, &away).unwrap();
    let (at_kill, caught) = kill_during_repair(&mut m, "3/4", true);
    closed.extend(load.finish().0);
    assert!(
        caught,
        "never saw re-replication in progress: {at_kill:?}\nlog tail:\n{}",
        tail(&m.log_text(), 30)
    );
    fs::rename(&away, &dir).unwrap();
    m.start();
    let s = wait_repaired(&m, Duration::from_secs(30), true);
    assert_eq!(s["chunkservers"], "4/4", "{s:?}");
    check_closed(&m, &closed);
    check_cells(&m, &old, "after the restart with the directory back");
    // The chunks appended to while it was away had their version bumped:
    // its replicas of them are stale, deleted, never served.
    assert!(
        num(&s, "stale_deleted") > 0,
        "the returning directory's out-of-date replicas were not found stale: {s:?}"
    );
    eprintln!(
        "phase 1: took {}; killed while re-replicating (under_replicated={} queue={} copying={} repaired={} \
         version_bumps={}); after the restart: {} stale replicas deleted, {} orphans deleted, {} copies made; \
         {} closed writes checked",
        newest.server,
        at_kill["under_replicated"],
        at_kill["queue"],
        at_kill["copying"],
        at_kill["repaired"],
        at_kill["version_bumps"],
        num(&s, "stale_deleted"),
        num(&s, "orphans_deleted"),
        num(&s, "repaired"),
        closed.len()
    );

    // Phase 2: a directory is deleted for good under load, the daemon dies
    // while copying its chunks, and restarts on the three directories left:
    // the restart finishes the job.
    let load = Load::start(
        &m,
        LoadSpec {
            writers: 4,
            readers: 0,
            first: 1_000_000,
            expect_death: true,
        },
    );
    load.wait_for_more(&m, 100, Duration::from_secs(20));
    remove_dir(&m.data.join("chunkserver-2"));
    let (at_kill, caught) = kill_during_repair(&mut m, "3/4", false);
    closed.extend(load.finish().0);
    assert!(
        caught,
        "never saw re-replication in progress: {at_kill:?}\nlog tail:\n{}",
        tail(&m.log_text(), 30)
    );
    m.start();
    let s = wait_repaired(&m, Duration::from_secs(30), true);
    assert_eq!(s["chunkservers"], "3/3", "{s:?}");
    check_closed(&m, &closed);
    check_cells(&m, &old, "after the restart without the directory");
    // No temporary copy of an interrupted re-replication is left behind.
    let leftovers: Vec<PathBuf> = ["chunkserver-0", "chunkserver-1", "chunkserver-3"]
        .iter()
        .flat_map(|d| {
            fs::read_dir(m.data.join(d).join("chunks"))
                .unwrap()
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    eprintln!(
        "phase 2: killed while re-replicating (under_replicated={} queue={} copying={} repaired={}); after the \
         restart: {} copies made; {} closed writes + {} older cells checked; {:.1} s",
        at_kill["under_replicated"],
        at_kill["queue"],
        at_kill["copying"],
        at_kill["repaired"],
        num(&s, "repaired"),
        closed.len(),
        old.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Removes a directory the daemon may be writing into meanwhile (new
/// replicas, the master's copy): repeats until it is gone.
fn remove_dir(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while dir.exists() {
        let _ = fs::remove_dir_all(dir);
        assert!(Instant::now() < deadline, "cannot remove {}", dir.display());
    }
}

// ---------------------------------------------------------------------------
// 4. Hardening: scrub, readers on new copies, damage at load, master copies,
//    throttled re-replication, readable status

/// The `key=value` fields of the status line starting with `prefix`.
fn status_line(m: &Mount, prefix: &str) -> Status {
    let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line in .bigtable/status:\n{text}"));
    line[prefix.len()..]
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every chunk-layer status line is `prefix: key=value ...`: no debug output.
fn assert_plain_status(m: &Mount) {
    let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
    let mut n = 0;
    for l in text.lines().filter(|l| l.starts_with("gfs")) {
        n += 1;
        let (_, fields) = l
            .split_once(": ")
            .unwrap_or_else(|| panic!("no prefix: {l}"));
        for kv in fields.split(' ') {
            let ok = kv.split_once('=').is_some_and(|(k, v)| {
                !k.is_empty() && !v.is_empty() && !v.contains(['{', '}', '"'])
            });
            assert!(ok, "{kv:?} is not key=value in {l:?}");
        }
    }
    assert!(n >= 8, "too few gfs lines:\n{text}");
}

/// Writes `n` cells in rows `<prefix>NNN` of table t and returns them.
fn fill(m: &Mount, rng: &mut StdRng, prefix: &str, n: usize) -> BTreeMap<String, Vec<u8>> {
    let mut want = BTreeMap::new();
    for k in 0..n {
        let row = format!("t/{prefix}{:03}/f", k / 10);
        if k % 10 == 0 {
            fs::create_dir_all(m.path(&row)).unwrap();
        }
        let p = format!("{row}/q{}", k % 10);
        let v = value(rng, &p, 500, 1500);
        write_and_close(&m.path(&p), &v).unwrap();
        want.insert(p, v);
    }
    want
}

#[test]
fn background_scrub_waits_for_idle_clients_then_finds_and_repairs_damage() {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed());
    let rate: u64 = 4 << 20;
    let mut m = Mount::with_options(&[
        "memtable=256k",
        CHUNK_OPT,
        "cache=0",
        "scan_cache=0",
        "scrub_rate=4m",
        "scrub_idle=5",
        "scrub_interval=1",
    ]);
    m.table("t", "f\n");
    let mut want = fill(&m, &mut rng, "a", 400);
    // While a client writes without pause the scrub reads nothing.
    let writer = {
        let p = m.path("t/a000/f/busy");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) {
                write_and_close(&p, format!("busy {i}").as_bytes()).unwrap();
                i += 1;
            }
            i
        });
        (stop, t)
    };
    assert!(
        wait_until(Duration::from_secs(30), || status_line(&m, "gfs scrub: ")
            ["state"]
            == "paused"),
        "{:?}",
        status_line(&m, "gfs scrub: ")
    );
    let before = status_line(&m, "gfs scrub: ");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(1) {
        let now = status_line(&m, "gfs scrub: ");
        assert_eq!(
            now["pass_bytes"], before["pass_bytes"],
            "scrubbed under load: {now:?}"
        );
        assert_eq!(now["pass"], before["pass"], "{now:?}");
    }
    writer.0.store(true, Ordering::Relaxed);
    let busy_writes = writer.1.join().unwrap();
    want.remove("t/a000/f/busy");
    settle(&m, Duration::from_secs(10));

    // Idle now: passes complete, at no more than the rate.
    let pass = num(&status_line(&m, "gfs scrub: "), "pass");
    let mut s = Status::new();
    assert!(
        wait_until(Duration::from_secs(120), || {
            s = status_line(&m, "gfs scrub: ");
            num(&s, "pass") > pass + 1 && s["last_pass_end"] != "-"
        }),
        "{s:?}"
    );
    let secs: f64 = s["last_pass_secs"].parse().unwrap();
    let bytes = num(&s, "last_pass_bytes");
    assert!(bytes > 0, "{s:?}");
    assert!(
        secs * rate as f64 >= bytes as f64 * 0.95,
        "faster than the rate: {s:?}"
    );

    // Damage no client reads: only the scrub can find it, and it is repaired.
    // Counted before the flips: a running pass may find one at once.
    let found_before = num(&status_line(&m, "gfs scrub: "), "corruptions");
    let flips = flip_round(&m.data, &mut rng, 3, 1, &[]);
    assert!(flips.len() >= 5, "too few chunks: {}", flips.len());
    assert!(
        wait_until(Duration::from_secs(120), || flips
            .iter()
            .all(|f| !f.present())),
        "flips left: {:?}\n{:?}",
        flips.iter().filter(|f| f.present()).collect::<Vec<_>>(),
        status_line(&m, "gfs scrub: ")
    );
    let st = wait_repaired(&m, Duration::from_secs(60), true);
    let replaced = flips
        .iter()
        .filter(|f| f.on_disk() == Some(f.original))
        .count() as u64;
    let s = status_line(&m, "gfs scrub: ");
    let found = num(&s, "corruptions") - found_before;
    assert!(
        replaced > 0 && found >= replaced,
        "{replaced} replaced, {found} found: {s:?}"
    );
    assert!(num(&s, "repaired") > 0, "{s:?}");
    check_cells(&m, &want, "after the scrub");
    assert_plain_status(&m);
    eprintln!(
        "scrub: {busy_writes} writes kept it paused; a pass read {bytes} bytes in {secs:.2} s ({:.2} MiB/s, budget 4 MiB/s); \
         {} flipped replicas, {found} found by the scrub, {replaced} replaced by good copies, corruptions_detected={}; {:.1} s",
        bytes as f64 / secs / (1 << 20) as f64,
        flips.len(),
        st["corruptions_detected"],
        started.elapsed().as_secs_f64()
    );
    m.stop();
}

#[test]
fn open_readers_move_to_a_re_copied_replica() {
    let mut rng = StdRng::seed_from_u64(seed());
    let m = mount_with_spare(&["memtable=256k", CHUNK_OPT, "cache=0", "scan_cache=0"]);
    let servers_up = |n: &str| {
        assert!(
            wait_until(Duration::from_secs(30), || gfs_status(&m)["chunkservers"]
                == n),
            "chunkservers never {n}: {:?}",
            gfs_status(&m)
        );
    };
    // The spare is out while the data is written, so it holds no replica of
    // it; it comes back empty.
    let spare = m.data.join("chunkserver-3");
    remove_dir(&spare);
    servers_up("3/4");
    m.table("t", "f\n");
    let want = fill(&m, &mut rng, "r", 600);
    settle(&m, Duration::from_secs(10));
    // Every SSTable is open (and its replica list taken) before the loss:
    // read from the store, not the kernel's pages of the writes (a
    // re-read of a cell nothing wrote since opens on them alone).
    if !forget_kernel_caches() {
        eprintln!("skipped: only root can make the kernel drop its caches");
        return;
    }
    check_cells(&m, &want, "before");
    fs::create_dir(&spare).unwrap();
    servers_up("4/4");
    let spare_reads = |m: &Mount| {
        let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
        let l = text
            .lines()
            .find(|l| l.starts_with("gfs chunkserver 3: "))
            .unwrap()
            .to_string();
        l.split(' ')
            .find_map(|kv| kv.strip_prefix("reads="))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap()
    };
    let before = spare_reads(&m);
    remove_dir(&m.data.join("chunkserver-1"));
    servers_up("3/4");
    let s = wait_repaired(&m, Duration::from_secs(60), false);
    assert!(num(&s, "repaired") > 0, "{s:?}");
    for round in 0..3 {
        check_cells(&m, &want, &format!("after the copy, round {round}"));
    }
    let after = spare_reads(&m);
    assert!(
        after > before,
        "the spare holds {} copies but served no read of open files ({before} -> {after})",
        num(&s, "repaired")
    );
    eprintln!(
        "open readers: the re-copied replicas on the spare served {} reads",
        after - before
    );
}

#[test]
fn a_damaged_last_block_found_at_start_is_counted_but_a_torn_one_is_not() {
    let mut rng = StdRng::seed_from_u64(seed());
    let mut m = Mount::with_options(&["memtable=256k", CHUNK_OPT, "scrub_rate=0"]);
    m.table("t", "f\n");
    let want = fill(&m, &mut rng, "l", 300);
    m.stop();
    // Chunks whose three replicas agree and whose last block is partly
    // filled, with no all-zero page (so damage there is not a torn write).
    let mut by_handle: BTreeMap<u64, Vec<ReplicaFile>> = BTreeMap::new();
    for r in replica_files(&m.data) {
        by_handle.entry(r.handle).or_default().push(r);
    }
    let mut picks = by_handle.into_values().filter(|reps| {
        let r = &reps[0];
        let tail = r.len % BLOCK;
        reps.len() == 3
            && reps
                .iter()
                .all(|x| x.len == r.len && x.version == r.version)
            && tail > 200
            && {
                let bytes = fs::read(&r.path).unwrap();
                let start = (r.data_off + r.len - tail) as usize;
                let end = (r.data_off + r.len) as usize;
                bytes[start..end]
                    .chunks(4096)
                    .all(|p| p.iter().any(|&b| b != 0))
            }
    });
    let damaged = picks.next().expect("a chunk to damage")[0].clone();
    let torn = picks.next().expect("a chunk to tear")[1].clone();
    // Damage: a byte of the last block changes, all bytes still there.
    let at = damaged.data_off + damaged.len - 7;
    flip_byte(&damaged.path, at, 0x20).unwrap();
    // A torn append: the table covers bytes that never reached the disk.
    fs::OpenOptions::new()
        .write(true)
        .open(&torn.path)
        .unwrap()
        .set_len(torn.data_off + torn.len - 100)
        .unwrap();
    m.start();
    let s = gfs_status(&m);
    assert_eq!(num(&s, "corruptions_detected"), 1, "{s:?}");
    let server = damaged.server.strip_prefix("chunkserver-").unwrap();
    let cs = status_line(&m, &format!("gfs chunkserver {server}: "));
    assert_eq!(num(&cs, "corrupt"), 1, "{cs:?}");
    wait_repaired(&m, Duration::from_secs(60), true);
    check_cells(&m, &want, "after the damaged and torn tails");
    assert!(
        m.log_text().contains("fails its checksum at load"),
        "{}",
        tail(&m.log_text(), 20)
    );
    // Both chunks are whole again on three replicas (unless their file was
    // deleted meanwhile, e.g. a replayed commit log).
    let fixed = replica_files(&m.data);
    for old in [&damaged, &torn] {
        let reps: Vec<&ReplicaFile> = fixed.iter().filter(|r| r.handle == old.handle).collect();
        assert!(
            reps.is_empty() || (reps.len() == 3 && reps.iter().all(|r| r.len == old.len)),
            "chunk {:016x} of {} bytes: {reps:?}",
            old.handle,
            old.len
        );
    }
}

#[test]
fn losing_the_master_directory_while_mounted_and_before_a_mount_loses_nothing() {
    let mut rng = StdRng::seed_from_u64(seed());
    let mut m = Mount::with_options(&["memtable=256k", CHUNK_OPT]);
    m.table("t", "f\n");
    let mut want = fill(&m, &mut rng, "m", 200);
    let master = m.data.join("master");
    remove_dir(&master);
    // Writes go on (to the copies), and the copy is made again.
    want.extend(fill(&m, &mut rng, "n", 200));
    let mut s = Status::new();
    assert!(
        wait_until(Duration::from_secs(30), || {
            s = status_line(&m, "gfs master: ");
            s["copies"] == "4"
                && s["copies_ok"] == "4"
                && fs::read_dir(&master)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with("checkpoint-") && !n.ends_with(".tmp")
                    })
        }),
        "{s:?}"
    );
    assert_eq!(status_line(&m, "gfs master copy 0: ")["state"], "ok");
    check_cells(&m, &want, "after losing the master directory");
    want.extend(fill(&m, &mut rng, "o", 100));
    m.stop();
    // Gone before a mount: the newest copy in a chunkserver directory is used.
    remove_dir(&master);
    m.start();
    check_cells(&m, &want, "after mounting without the master directory");
    let s = status_line(&m, "gfs master: ");
    assert_eq!(s["copies_recreated"], "1", "{s:?}");
    assert_ne!(s["recovered_from_copy"], "0", "{s:?}");
    assert!(master.is_dir());
    // Removed while mounted and the daemon killed before it re-creates it.
    want.extend(fill(&m, &mut rng, "q", 100));
    remove_dir(&master);
    m.kill9();
    m.start();
    check_cells(&m, &want, "after kill -9 without the master directory");
    // And with the master directory and one chunkserver's copy gone.
    m.stop();
    remove_dir(&master);
    remove_dir(&m.data.join("chunkserver-0/master"));
    m.start();
    check_cells(&m, &want, "after losing two of four copies");
    assert_plain_status(&m);
}

#[test]
fn re_replication_keeps_to_its_rate_and_copies_several_chunks_at_once() {
    let mut rng = StdRng::seed_from_u64(seed());
    let rate: u64 = 1 << 20;
    let m = mount_with_spare(&[
        "memtable=256k",
        CHUNK_OPT,
        "repair_rate=1m",
        "repair_parallel=3",
    ]);
    m.table("t", "f\n");
    let want = fill(&m, &mut rng, "p", 800);
    settle(&m, Duration::from_secs(10));
    let victim = m.data.join("chunkserver-2");
    let held: u64 = replica_files(&m.data)
        .iter()
        .filter(|r| r.server == "chunkserver-2")
        .map(|r| r.len)
        .sum();
    assert!(held > 2 * CHUNK, "too little on the victim: {held}");
    remove_dir(&victim);
    let t0 = Instant::now();
    let mut most = 0;
    let mut progress_line = String::new();
    let mut last = Status::new();
    let done = wait_until(Duration::from_secs(120), || {
        let text = fs::read_to_string(m.path(".bigtable/status")).unwrap();
        last = gfs_status(&m);
        let copying = last.get("copying").cloned().unwrap_or_default();
        if copying != "-" {
            most = most.max(copying.split(',').count());
        }
        if let Some(l) = text.lines().find(|l| l.starts_with("gfs copying: ")) {
            progress_line = l.to_string();
        }
        last["chunkservers"] == "3/4" && fully_replicated(&last)
    });
    let took = t0.elapsed().as_secs_f64();
    assert!(done, "{last:?}");
    let copied = num(&last, "copied_bytes");
    assert!(copied > 0, "{last:?}");
    assert!(
        took * rate as f64 >= copied as f64 * 0.95,
        "{copied} bytes in {took:.2} s"
    );
    assert!((2..=3).contains(&most), "{most} copies at once");
    assert!(progress_line.contains(" copied_bytes="), "{progress_line}");
    assert_eq!(last["parallel"], "3");
    check_cells(&m, &want, "after re-replication");
    eprintln!(
        "re-replication: {} chunks, {copied} bytes in {took:.2} s ({:.2} MiB/s, budget 1 MiB/s), up to {most} at once",
        last["repaired"],
        copied as f64 / took / (1 << 20) as f64
    );
}
