//! `bigtable-bench fs MOUNTPOINT`: the Figure 6 workloads through a mounted
//! filesystem with plain syscalls, one cell per file at `table/<row>/cf/0`,
//! beside the same workload on a FUSE passthrough (bindfs over tmpfs) and on
//! tmpfs itself.
//!
//! A write is open(O_CREAT|O_TRUNC)/write/close (fsync first with `--sync`),
//! making the row and family directories when the open finds them missing; a
//! read is open/read/close; the scan lists the table and reads every cell.
//! Close errors are checked, since closing is when the mount commits a cell.
//! After the six, a second sequential read of the unchanged cells ("warm
//! re-read") shows what the page cache gives against the first ("cold").

use super::common::{
    check_interrupted, fmt_bytes, fmt_rate, fmt_ratio, json_ratio, round3, Measured, Table,
    TempDir, VALUE_BYTES,
};
use super::cpu::{self, CpuUse};
use super::limits::{self, fuse_round_trips, through_fuse};
use super::workloads::{fig6_suite_marked, read_seq, Fig6, Fig6Results, KvStore, Plan, Written};
use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const FAMILY: &str = "cf";
const QUALIFIER: &str = "0";

/// One table directory used as a key/value store.
pub struct FsTable {
    dir: PathBuf,
    sync: bool,
}

fn create_dir_if_missing(path: &Path) -> Result<()> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("mkdir {}", path.display())),
    }
}

fn open_for_write(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
}

/// close(2) with its error reported: on the mount, closing commits the cell.
fn close_checked(file: File, path: &Path) -> Result<()> {
    nix::unistd::close(file.into_raw_fd()).with_context(|| format!("close {}", path.display()))
}

impl FsTable {
    /// Makes `root/name` with a `.schema` of `schema_text` (on a plain
    /// filesystem that is just a file, so every target has the same layout).
    pub fn create(root: &Path, name: &str, schema_text: &str, sync: bool) -> Result<FsTable> {
        let dir = root.join(name);
        fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
        let schema = dir.join(".schema");
        fs::write(&schema, schema_text).with_context(|| format!("writing {}", schema.display()))?;
        Ok(FsTable { dir, sync })
    }

    /// A table an earlier run made under `root` (e.g. before a remount).
    pub fn open(root: &Path, name: &str, sync: bool) -> FsTable {
        FsTable {
            dir: root.join(name),
            sync,
        }
    }

    fn cell_path(&self, key: &str) -> PathBuf {
        self.dir.join(key).join(FAMILY).join(QUALIFIER)
    }

    /// Removes every row, then the table (its dot-files are virtual on the mount).
    pub fn remove(&self) -> Result<()> {
        for entry in
            fs::read_dir(&self.dir).with_context(|| format!("listing {}", self.dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                // A real file on tmpfs; refused or virtual on the mount.
                let _ = fs::remove_file(&path);
            } else {
                fs::remove_dir_all(&path).with_context(|| format!("rm -r {}", path.display()))?;
            }
        }
        fs::remove_dir(&self.dir).with_context(|| format!("rmdir {}", self.dir.display()))
    }
}

impl FsTable {
    /// [`KvStore::put`], returning how long the close took (on the mount,
    /// the commit).
    pub fn put_timed(&self, key: &[u8], value: &[u8]) -> Result<std::time::Duration> {
        let key = std::str::from_utf8(key).context("row key is not UTF-8")?;
        let path = self.cell_path(key);
        let mut file = match open_for_write(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let row = self.dir.join(key);
                create_dir_if_missing(&row)?;
                create_dir_if_missing(&row.join(FAMILY))?;
                open_for_write(&path).with_context(|| format!("create {}", path.display()))?
            }
            Err(e) => return Err(e).with_context(|| format!("create {}", path.display())),
        };
        file.write_all(value)
            .with_context(|| format!("write {}", path.display()))?;
        if self.sync {
            file.sync_all()
                .with_context(|| format!("fsync {}", path.display()))?;
        }
        let t = Instant::now();
        close_checked(file, &path)?;
        Ok(t.elapsed())
    }
}

impl KvStore for FsTable {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.put_timed(key, value).map(drop)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let key = std::str::from_utf8(key).context("row key is not UTF-8")?;
        let path = self.cell_path(key);
        match fs::read(&path) {
            Ok(v) => Ok(Some(v.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64> {
        let mut rows = Vec::new();
        for entry in
            fs::read_dir(&self.dir).with_context(|| format!("listing {}", self.dir.display()))?
        {
            let name = entry?.file_name();
            let bytes = name.as_encoded_bytes();
            if !bytes.starts_with(b".") && bytes >= start && bytes < end {
                rows.push(name);
            }
        }
        rows.sort();
        let mut cells = 0u64;
        for row in rows {
            let family = self.dir.join(&row).join(FAMILY);
            for entry in
                fs::read_dir(&family).with_context(|| format!("listing {}", family.display()))?
            {
                let path = entry?.path();
                let value = fs::read(&path).with_context(|| format!("read {}", path.display()))?;
                if value.len() != VALUE_BYTES {
                    bail!(
                        "{}: {} bytes, wrote {VALUE_BYTES}",
                        path.display(),
                        value.len()
                    );
                }
                cells += 1;
            }
            if super::common::scan_should_stop(deadline) {
                break;
            }
        }
        Ok(cells)
    }

    fn flush(&self) -> Result<()> {
        // Nothing to ask of a filesystem: its daemon compacts on its own.
        Ok(())
    }

    fn forget_cached(&self) -> Result<()> {
        // The kernel's pages go (the names and attributes stay), as a long
        // run's would: the reads that follow reach the filesystem. Root
        // only, and for every filesystem alike.
        if !super::common::drop_page_cache() {
            eprintln!("warning: cannot drop the page cache (not root): random reads re-read pages");
        }
        Ok(())
    }
}

/// The six workloads and the warm re-read on one target.
pub struct FsResults {
    pub fig6: Fig6Results,
    /// A second sequential read of the cells `fig6`'s sequential read read.
    pub reread: Measured,
    /// What each workload cost the mount (none on other filesystems).
    pub costs: Vec<(Fig6, Cost)>,
    /// What the warm re-read cost the mount.
    pub reread_cost: Option<Cost>,
}

/// The FUSE requests whose tablet-server calls the bench shows apart
/// (`calls_<op>` of `.bigtable/stats`); the rest are summed as "other".
const CALLERS: [&str; 8] = [
    "lookup",
    "getattr",
    "mkdir",
    "create",
    "open",
    "flush",
    "release",
    "readdirplus",
];

/// The kinds of FUSE request the bench shows apart (`fuse_<op>` of
/// `.bigtable/stats`); the rest are summed as "other".
const REQUESTS: [&str; 12] = [
    "lookup",
    "getattr",
    "mkdir",
    "create",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "getxattr",
    "setattr",
    "readdirplus",
];

/// FUSE requests and tablet-server calls a workload made, from the
/// mount's `.bigtable/stats` (they include the few of reading it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    pub fuse_requests: u64,
    /// Of those, the ones the caller did not wait for (see
    /// [`limits::unwaited_requests`]).
    pub unwaited: u64,
    pub store_calls: u64,
    /// The calls made by each request of [`CALLERS`] (none from a mount
    /// whose stats do not say).
    pub calls_by_request: [u64; CALLERS.len()],
    /// The requests of each kind of [`REQUESTS`].
    pub requests_by_kind: [u64; REQUESTS.len()],
    /// The daemon's, the callers' and the machine's CPU time.
    pub cpu: CpuUse,
}

impl Cost {
    /// The mount's counters now; None if `root` is no bigtable mount.
    pub fn read(root: &Path) -> Option<Cost> {
        let text = fs::read_to_string(root.join(".bigtable/stats")).ok()?;
        let get = |k: &str| limits::stat(&text, k);
        Some(Cost {
            fuse_requests: get("fuse_requests")?,
            unwaited: limits::unwaited_requests(&text),
            store_calls: get("store_tablet_calls")?,
            calls_by_request: CALLERS.map(|op| get(&format!("calls_{op}")).unwrap_or(0)),
            requests_by_kind: REQUESTS.map(|op| get(&format!("fuse_{op}")).unwrap_or(0)),
            cpu: CpuUse::now(&text),
        })
    }

    pub fn since(self, before: Cost) -> Cost {
        fn minus<const N: usize>(mut a: [u64; N], b: [u64; N]) -> [u64; N] {
            for (n, b) in a.iter_mut().zip(b) {
                *n = n.saturating_sub(b);
            }
            a
        }
        Cost {
            fuse_requests: self.fuse_requests.saturating_sub(before.fuse_requests),
            unwaited: self.unwaited.saturating_sub(before.unwaited),
            store_calls: self.store_calls.saturating_sub(before.store_calls),
            calls_by_request: minus(self.calls_by_request, before.calls_by_request),
            requests_by_kind: minus(self.requests_by_kind, before.requests_by_kind),
            cpu: self.cpu.since(before.cpu),
        }
    }

    /// Microseconds per file of `m`: the daemon's user and system CPU
    /// time, the callers', every CPU's busy time, the daemon's time running
    /// requests; and the share of the machine's CPUs busy meanwhile.
    fn cpu_per_file(&self, m: &Measured) -> Option<([f64; 5], f64)> {
        let c = &self.cpu;
        (m.ops > 0 && c.busy_us > 0).then(|| {
            let n = m.ops as f64;
            let per = [
                c.daemon_user_us,
                c.daemon_system_us,
                c.callers_us,
                c.busy_us,
                c.handling_us,
            ]
            .map(|us| us as f64 / n);
            (per, c.busy_share(m.secs, cpu::cpus()))
        })
    }

    /// The FUSE requests per file of `m` by kind, e.g. `lookup 4.0,
    /// mkdir 2.0, …` (the other kinds as `other`).
    fn requests_by_kind(&self, m: &Measured) -> Option<String> {
        per_file_parts(m, &REQUESTS, &self.requests_by_kind, self.fuse_requests)
    }

    /// The calls per file of `m` by the request that made them, e.g.
    /// `lookup 2.0, flush 1.0` (calls of other requests as `other`).
    fn by_request(&self, m: &Measured) -> Option<String> {
        per_file_parts(m, &CALLERS, &self.calls_by_request, self.store_calls)
    }

    /// (requests, calls) per file of `m`.
    fn per_file(self, m: &Measured) -> Option<(f64, f64)> {
        (m.ops > 0).then(|| {
            let n = m.ops as f64;
            (self.fuse_requests as f64 / n, self.store_calls as f64 / n)
        })
    }

    /// Requests per file of `m` that its caller waited for: the round
    /// trips of its limit.
    fn waited_per_file(self, m: &Measured) -> Option<f64> {
        (m.ops > 0).then(|| self.fuse_requests.saturating_sub(self.unwaited) as f64 / m.ops as f64)
    }
}

/// `counts` of `names` (of `total` in all; the rest as `other`) per file
/// of `m`, those of at least 0.05 a file: `lookup 2.0, flush 1.0`.
fn per_file_parts(m: &Measured, names: &[&str], counts: &[u64], total: u64) -> Option<String> {
    if m.ops == 0 {
        return None;
    }
    let n = m.ops as f64;
    let other = total.saturating_sub(counts.iter().sum());
    let parts: Vec<String> = names
        .iter()
        .zip(counts)
        .map(|(op, c)| (*op, *c))
        .chain(std::iter::once(("other", other)))
        .filter(|(_, c)| *c as f64 / n >= 0.05)
        .map(|(op, c)| format!("{op} {:.1}", c as f64 / n))
        .collect();
    Some(if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    })
}

/// Reads the mount's counters at each mark of a suite and keeps each
/// workload's share.
struct CostMeter<'a> {
    root: &'a Path,
    last: Option<Cost>,
    costs: Vec<(Fig6, Cost)>,
}

impl CostMeter<'_> {
    fn mark(&mut self, done: Option<Fig6>) {
        let Some(before) = self.last else {
            return;
        };
        let now = Cost::read(self.root);
        if let (Some(w), Some(now)) = (done, now) {
            self.costs.push((w, now.since(before)));
        }
        self.last = now;
    }
}

impl FsResults {
    /// Warm re-read rate over the cold (first) sequential read rate.
    fn warm_over_cold(&self) -> Option<f64> {
        let cold = self.fig6.kv.seq_read.rate();
        (cold > 0.0).then(|| self.reread.rate() / cold)
    }
}

/// Runs all six workloads in three fresh tables under `root`, then re-reads
/// the sequential table; removes them after, even on error.
pub fn run_target(root: &Path, sync: bool, plan: Plan) -> Result<FsResults> {
    let tag = format!("bench-{}", std::process::id());
    let mut tables = Vec::new();
    let result = (|| {
        for (suffix, schema) in [
            ("seq", "cf\n"),
            ("rand", "cf\n"),
            ("mem", "cf in_memory=true\n"),
        ] {
            tables.push(FsTable::create(
                root,
                &format!("{tag}-{suffix}"),
                schema,
                sync,
            )?);
        }
        let mut meter = CostMeter {
            root,
            last: Cost::read(root),
            costs: Vec::new(),
        };
        let fig6 = fig6_suite_marked(&tables[0], &tables[1], &tables[2], plan, &mut |w| {
            meter.mark(w)
        })?;
        let written = Written::from_fill(plan.n, &fig6.kv.seq_write);
        // The reads from memory began from a dropped page cache: one pass,
        // not measured, reads the table into the kernel's pages again, so
        // that the measured one is the warm re-read it stands for.
        read_seq(&tables[0], &written, plan)?;
        let before = Cost::read(root);
        let reread = read_seq(&tables[0], &written, plan)?;
        let reread_cost = before.zip(Cost::read(root)).map(|(b, a)| a.since(b));
        Ok(FsResults {
            fig6,
            reread,
            costs: meter.costs,
            reread_cost,
        })
    })();
    for t in &tables {
        if let Err(e) = t.remove() {
            eprintln!("warning: cleaning up {}: {e:#}", t.dir.display());
        }
    }
    result
}

/// The type of the filesystem holding `path`, from /proc/self/mounts.
pub fn fs_type_of(path: &Path) -> Option<String> {
    let path = fs::canonicalize(path).ok()?;
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (_, Some(point), Some(kind)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let point = PathBuf::from(unescape_mount(point));
        if path.starts_with(&point) {
            let depth = point.components().count();
            if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                best = Some((depth, kind.to_string()));
            }
        }
    }
    best.map(|(_, kind)| kind)
}

/// /proc/mounts writes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_mounted(path: &Path) -> bool {
    let Ok(path) = fs::canonicalize(path) else {
        return false;
    };
    fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .filter_map(|l| l.split(' ').nth(1))
                .any(|p| Path::new(&unescape_mount(p)) == path)
        })
        .unwrap_or(false)
}

fn run_quiet(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A mount made by this run; unmounted on drop (lazily if it is still busy).
pub struct Mounted {
    path: PathBuf,
}

impl Mounted {
    /// Takes over a mount made elsewhere (unmounted on drop).
    pub fn new(path: &Path) -> Mounted {
        Mounted {
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let p = &self.path;
        let tries: [&[&str]; 3] = [&["umount"], &["fusermount3", "-u"], &["umount", "-l"]];
        for t in tries {
            if !is_mounted(p) {
                return;
            }
            let _ = Command::new(t[0]).args(&t[1..]).arg(p).output();
        }
        if is_mounted(p) {
            eprintln!("warning: could not unmount {}", p.display());
        }
    }
}

/// Mounts a tmpfs of `bytes` at `path` (needs root).
pub fn mount_tmpfs(path: &Path, bytes: u64) -> Result<Mounted> {
    run_quiet(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            // No inode limit: by default tmpfs allows one inode per two
            // pages of memory (about 3 million on 24 GiB), fewer than a
            // million-row tree and its `rsync` copy hold.
            .arg(format!("size={bytes},nr_inodes=0,mode=0755"))
            .arg("tmpfs")
            .arg(path),
    )?;
    Ok(Mounted {
        path: path.to_path_buf(),
    })
}

/// Whether bindfs is on the PATH.
pub fn have_bindfs() -> bool {
    Command::new("bindfs")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Mounts a multithreaded bindfs of `source` at `target` (our mount is
/// multithreaded too; bindfs alone would serve one request at a time).
pub fn mount_bindfs(source: &Path, target: &Path) -> Result<Mounted> {
    run_quiet(
        Command::new("bindfs")
            .args(["--multithreaded", "--no-allow-other"])
            .arg(source)
            .arg(target),
    )?;
    let mounted = Mounted {
        path: target.to_path_buf(),
    };
    if !is_mounted(target) {
        bail!("bindfs returned but {} is not mounted", target.display());
    }
    Ok(mounted)
}

/// What `fs` was asked to do.
pub struct FsArgs {
    pub mountpoint: PathBuf,
    pub plan: Plan,
    pub sync: bool,
    /// Where the tmpfs and bindfs mount points are made.
    pub work_base: PathBuf,
    pub peers: bool,
}

struct PeerRun {
    passthrough: Option<Result<FsResults>>,
    tmpfs: Option<Result<FsResults>>,
    note: Vec<String>,
}

fn run_peers(args: &FsArgs) -> Result<PeerRun> {
    let mut note = Vec::new();
    let work = TempDir::new_in(&args.work_base, "bigtable-bench-fs")?;
    let tmpfs_dir = work.path().join("tmpfs");
    fs::create_dir(&tmpfs_dir)?;
    // Three tables of n cells plus directories, with room to spare.
    let bytes = 4 * args.plan.n * 4096 + (256 << 20);
    let (_tmpfs_mount, _shm_dir, tmpfs_root): (Option<Mounted>, Option<TempDir>, PathBuf) =
        match mount_tmpfs(&tmpfs_dir, bytes) {
            Ok(m) => (Some(m), None, tmpfs_dir.clone()),
            Err(e) => {
                // Not root: /dev/shm is a tmpfs every Linux user can write.
                let shm = TempDir::new_in(Path::new("/dev/shm"), "bigtable-bench-fs")
                    .with_context(|| format!("no tmpfs: mount failed ({e:#}) and /dev/shm too"))?;
                note.push(format!("tmpfs: mount refused ({e:#}); used /dev/shm"));
                let root = shm.path().to_path_buf();
                (None, Some(shm), root)
            }
        };
    let direct = tmpfs_root.join("direct");
    let backing = tmpfs_root.join("backing");
    fs::create_dir(&direct)?;
    fs::create_dir(&backing)?;

    let passthrough = if have_bindfs() {
        let target = work.path().join("bindfs");
        fs::create_dir(&target)?;
        match mount_bindfs(&backing, &target) {
            Ok(mounted) => {
                eprintln!("running on bindfs --multithreaded over tmpfs ...");
                let r = run_target(mounted.path(), args.sync, args.plan);
                drop(mounted);
                Some(r)
            }
            Err(e) => {
                note.push(format!("bindfs: mount failed, skipped: {e:#}"));
                None
            }
        }
    } else {
        note.push("bindfs: not installed (apt-get install bindfs), passthrough skipped".into());
        None
    };
    check_interrupted()?;
    eprintln!("running on tmpfs ...");
    let tmpfs = Some(run_target(&direct, args.sync, args.plan));
    Ok(PeerRun {
        passthrough,
        tmpfs,
        note,
    })
}

fn rate_of(r: &Option<Result<FsResults>>, w: Fig6) -> Option<f64> {
    match r {
        Some(Ok(r)) => Some(r.fig6.get(w).rate()),
        _ => None,
    }
}

fn json_of(r: &Option<Result<FsResults>>) -> serde_json::Value {
    match r {
        Some(Ok(r)) => {
            let mut obj = serde_json::Map::new();
            for w in Fig6::ALL {
                obj.insert(w.key().into(), r.fig6.get(w).json());
            }
            obj.insert("reread".into(), r.reread.json());
            obj.insert(
                "warm_over_cold".into(),
                json_ratio(r.warm_over_cold(), Some(1.0)),
            );
            serde_json::Value::Object(obj)
        }
        Some(Err(e)) => serde_json::json!({ "error": format!("{e:#}") }),
        None => serde_json::Value::Null,
    }
}

/// FUSE round trips per second on the mount with `threads` callers, checked
/// against the daemon's request counter where it has one (a kernel that
/// answered them itself would make the limit a fiction); None if not
/// measured.
fn measure_round_trips(mnt: &Path, threads: usize) -> Option<f64> {
    let before = Cost::read(mnt);
    let measured = fuse_round_trips(mnt, threads);
    let after = Cost::read(mnt);
    match (measured, before.zip(after)) {
        (Ok((n, rate)), Some((b, a))) if a.fuse_requests.saturating_sub(b.fuse_requests) >= n => {
            Some(rate)
        }
        (Ok((n, _)), Some((b, a))) => {
            eprintln!(
                "warning: {n} round trips made but the daemon counted {}: no limits",
                a.fuse_requests.saturating_sub(b.fuse_requests)
            );
            None
        }
        (Ok((_, rate)), None) => Some(rate),
        (Err(e), _) => {
            eprintln!("warning: FUSE round trip not measured: {e:#}");
            None
        }
    }
}

/// Runs the workloads on the mount (and the peers), prints the table and
/// the JSON line, and returns that line.
pub fn run(args: &FsArgs) -> Result<serde_json::Value> {
    if !args.mountpoint.is_dir() {
        bail!("{} is not a directory", args.mountpoint.display());
    }
    let kind = fs_type_of(&args.mountpoint).unwrap_or_else(|| "unknown".into());
    let plan = args.plan;
    eprintln!(
        "bigtable-bench fs: {} ({kind}), {} cells of {VALUE_BYTES} B per table ({}), {} threads, sync={}, time cap {:.0}s per workload",
        args.mountpoint.display(),
        plan.n,
        fmt_bytes(plan.n * VALUE_BYTES as u64),
        plan.threads,
        if args.sync { "on" } else { "off" },
        plan.time_cap.as_secs_f64()
    );
    if !kind.starts_with("fuse") {
        eprintln!(
            "note: {} is not a FUSE mount ({kind}); measuring it anyway",
            args.mountpoint.display()
        );
    }
    eprintln!("running on {} ...", args.mountpoint.display());
    let ours = run_target(&args.mountpoint, args.sync, plan)?;
    let round_trips = measure_round_trips(&args.mountpoint, plan.threads);
    let peers = if args.peers {
        run_peers(args)?
    } else {
        PeerRun {
            passthrough: None,
            tmpfs: None,
            note: vec!["peers: skipped (--no-peers)".into()],
        }
    };
    for r in [&peers.passthrough, &peers.tmpfs].into_iter().flatten() {
        if let Err(e) = r {
            eprintln!("warning: a peer failed: {e:#}");
        }
    }

    let mut table = Table::new(&[
        "workload (files/s)",
        "ours",
        "bindfs",
        "tmpfs",
        "ours/bindfs",
        "paper",
        "ours/paper",
        "requests/file (waited)",
        "calls/file",
        "limit",
        "ours/limit",
    ]);
    let mut workloads = serde_json::Map::new();
    for w in Fig6::ALL {
        let m: &Measured = ours.fig6.get(w);
        let cost = ours.costs.iter().find(|(x, _)| *x == w).map(|(_, c)| *c);
        let per_file = cost.and_then(|c| c.per_file(m));
        let waited = cost.and_then(|c| c.waited_per_file(m));
        let (pt, tf) = (rate_of(&peers.passthrough, w), rate_of(&peers.tmpfs, w));
        let limit = waited
            .zip(round_trips)
            .and_then(|(r, rt)| through_fuse(tf, r, rt));
        let fmt_opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
        table.row(vec![
            w.label().into(),
            fmt_rate(m),
            fmt_opt(pt),
            fmt_opt(tf),
            fmt_ratio(Some(m.rate()), pt),
            format!("{:.0}", w.paper()),
            fmt_ratio(Some(m.rate()), Some(w.paper())),
            per_file
                .zip(waited)
                .map_or("-".into(), |((r, _), w)| format!("{r:.1} ({w:.1})")),
            per_file.map_or("-".into(), |(_, c)| format!("{c:.1}")),
            fmt_opt(limit),
            fmt_ratio(Some(m.rate()), limit),
        ]);
        let mut j = m.json();
        if let serde_json::Value::Object(o) = &mut j {
            if let Some((r, c)) = per_file {
                o.insert("fuse_requests_per_file".into(), serde_json::json!(r));
                o.insert("store_calls_per_file".into(), serde_json::json!(c));
            }
            if let Some(w) = waited {
                o.insert("fuse_waited_per_file".into(), serde_json::json!(w));
            }
            if let Some(by) = cost.and_then(|c| c.requests_by_kind(m)) {
                o.insert("fuse_requests_by_kind".into(), serde_json::json!(by));
            }
            if let Some((c, ([user, system, callers, busy, handling], share))) =
                cost.and_then(|c| Some((c, c.cpu_per_file(m)?)))
            {
                o.insert(
                    "cpu_us_per_file".into(),
                    serde_json::json!({
                        "daemon_user": round3(user),
                        "daemon_system": round3(system),
                        "callers": round3(callers),
                        "busy": round3(busy),
                        "busy_share": round3(share),
                        "daemon_handling": round3(handling),
                        "without_daemon_code": c
                            .cpu
                            .without_daemon_code(m.ops, m.secs, plan.threads, cpu::cpus())
                            .map(f64::round),
                    }),
                );
            }
            o.insert("paper".into(), serde_json::json!(w.paper()));
            o.insert(
                "vs_paper".into(),
                json_ratio(Some(m.rate()), Some(w.paper())),
            );
            o.insert("vs_passthrough".into(), json_ratio(Some(m.rate()), pt));
            o.insert("vs_tmpfs".into(), json_ratio(Some(m.rate()), tf));
            o.insert("tmpfs".into(), serde_json::json!(tf.map(f64::round)));
            o.insert("limit".into(), serde_json::json!(limit.map(f64::round)));
            o.insert("vs_limit".into(), json_ratio(Some(m.rate()), limit));
        }
        workloads.insert(w.key().into(), j);
    }
    let reread = |r: &Option<Result<FsResults>>| match r {
        Some(Ok(r)) => Some(r.reread.rate()),
        _ => None,
    };
    let (pt, tf) = (reread(&peers.passthrough), reread(&peers.tmpfs));
    let fmt_opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.0}"));
    let reread_requests = ours
        .reread_cost
        .and_then(|c| c.per_file(&ours.reread))
        .map(|(r, _)| r);
    let reread_waited = ours
        .reread_cost
        .and_then(|c| c.waited_per_file(&ours.reread));
    let reread_limit = reread_waited
        .zip(round_trips)
        .and_then(|(r, rt)| through_fuse(tf, r, rt));
    table.row(vec![
        "re-read (warm)".into(),
        fmt_rate(&ours.reread),
        fmt_opt(pt),
        fmt_opt(tf),
        fmt_ratio(Some(ours.reread.rate()), pt),
        "-".into(),
        "-".into(),
        reread_requests
            .zip(reread_waited)
            .map_or("-".into(), |(r, w)| format!("{r:.1} ({w:.1})")),
        "-".into(),
        fmt_opt(reread_limit),
        fmt_ratio(Some(ours.reread.rate()), reread_limit),
    ]);
    println!("{}", table.render());
    println!(
        "(* = stopped at the time cap; rates are cells (files) per second; requests \
         and calls per file: FUSE requests (those the caller waited for: all but RELEASE) \
         and tablet-server calls, from .bigtable/stats)"
    );
    match round_trips {
        Some(rt) => println!(
            "FUSE round trip ({} threads, a getxattr the daemon answers with no work): {rt:.0}/s, \
             {:.1} us each; limit = 1 / (1/tmpfs + waited requests per file / that)",
            plan.threads,
            plan.threads as f64 * 1e6 / rt
        ),
        None => println!("FUSE round trip: not measured, no limits"),
    }
    println!("FUSE requests per file, by kind:");
    for (w, c) in &ours.costs {
        if let Some(by) = c.requests_by_kind(ours.fig6.get(*w)) {
            println!("  {}: {by}", w.label());
        }
    }
    println!(
        "Per file, us: the daemon's time running requests, its CPU time (user + system), \
         the callers' CPU time, all CPUs busy (the share of the {} CPUs busy); with one \
         caller or the CPUs full, the rate if the daemon's own code cost nothing:",
        cpu::cpus()
    );
    for (w, c) in &ours.costs {
        let m = ours.fig6.get(*w);
        if let Some(([user, system, callers, busy, handling], share)) = c.cpu_per_file(m) {
            let bound = c
                .cpu
                .without_daemon_code(m.ops, m.secs, plan.threads, cpu::cpus())
                .map_or(String::new(), |b| format!("; {b:.0} files/s"));
            println!(
                "  {}: handling {handling:.1}, CPU {user:.1} + {system:.1}, callers {callers:.1}, \
                 busy {busy:.1} ({:.0}%){bound}",
                w.label(),
                share * 100.0
            );
        }
    }
    println!("tablet-server calls per file, by the FUSE request that made them:");
    for (w, c) in &ours.costs {
        if let Some(by) = c.by_request(ours.fig6.get(*w)) {
            println!("  {}: {by}", w.label());
        }
    }
    let warm = |r: Option<f64>| r.map_or("-".to_string(), |v| format!("{v:.2}x"));
    let peer_warm = |r: &Option<Result<FsResults>>| match r {
        Some(Ok(r)) => r.warm_over_cold(),
        _ => None,
    };
    println!(
        "warm re-read / cold sequential read: ours {}, bindfs {}, tmpfs {}",
        warm(ours.warm_over_cold()),
        warm(peer_warm(&peers.passthrough)),
        warm(peer_warm(&peers.tmpfs))
    );
    for n in &peers.note {
        println!("{n}");
    }
    let line = serde_json::json!({
        "bench": "fs",
        "mountpoint": args.mountpoint.display().to_string(),
        "fs_type": kind,
        "threads": plan.threads,
        "cells_per_table": plan.n,
        "value_bytes": VALUE_BYTES,
        "sync": args.sync,
        "time_cap_secs": plan.time_cap.as_secs_f64(),
        "workloads": workloads,
        "reread": ours.reread.json(),
        "reread_requests_per_file": reread_requests,
        "reread_waited_per_file": reread_waited,
        "reread_tmpfs": tf.map(f64::round),
        "reread_limit": reread_limit.map(f64::round),
        "fuse_round_trips_per_sec": round_trips.map(f64::round),
        "warm_over_cold": json_ratio(ours.warm_over_cold(), Some(1.0)),
        "mem_fill": ours.fig6.mem_fill.json(),
        "passthrough": json_of(&peers.passthrough),
        "tmpfs": json_of(&peers.tmpfs),
    });
    println!("{line}");
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn fs_table_layout_and_cleanup() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "fs-bench-test").unwrap();
        let t = FsTable::create(dir.path(), "t", "cf\n", false).unwrap();
        let value = vec![7u8; VALUE_BYTES];
        t.put(b"0000000000000001", &value).unwrap();
        t.put(b"0000000000000001", &value).unwrap(); // overwrite: dirs exist
        t.put(b"0000000000000002", &value).unwrap();
        let cell = dir.path().join("t/0000000000000001/cf/0");
        assert_eq!(fs::read(&cell).unwrap(), value);
        assert_eq!(
            fs::read_to_string(dir.path().join("t/.schema")).unwrap(),
            "cf\n"
        );
        assert_eq!(t.get(b"0000000000000002").unwrap(), Some(VALUE_BYTES));
        assert_eq!(t.get(b"0000000000000003").unwrap(), None);
        let far = Instant::now() + Duration::from_secs(5);
        assert_eq!(t.scan(b"0", b"1", far).unwrap(), 2);
        assert_eq!(t.scan(b"0000000000000002", b"1", far).unwrap(), 1);
        t.remove().unwrap();
        assert!(!dir.path().join("t").exists());
    }

    #[test]
    fn target_runs_all_six_workloads() {
        let dir = TempDir::new_in(&std::env::temp_dir(), "fs-bench-test").unwrap();
        let plan = Plan {
            n: 200,
            threads: 2,
            time_cap: Duration::from_secs(20),
            min_read: Duration::ZERO,
        };
        let r = run_target(dir.path(), false, plan).unwrap();
        for w in Fig6::ALL {
            assert_eq!(r.fig6.get(w).ops, 200, "{w:?}");
        }
        assert_eq!(r.reread.ops, 200);
        // Tables removed afterwards.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn requests_per_file_by_kind() {
        let stats = |lookups: u64, others: u64| {
            let mut c = Cost {
                fuse_requests: lookups + others,
                ..Cost::default()
            };
            c.requests_by_kind[0] = lookups;
            c
        };
        // 10 files: 40 lookups and 30 requests of kinds not shown apart
        // (less than 0.05 a file is left out).
        let cost = stats(41, 30).since(stats(1, 0));
        let m = Measured {
            ops: 10,
            per_thread: vec![10],
            secs: 1.0,
            capped: false,
        };
        assert_eq!(cost.requests_by_kind(&m).unwrap(), "lookup 4.0, other 3.0");
        assert_eq!(cost.per_file(&m), Some((7.0, 0.0)));
        let none = Measured { ops: 0, ..m };
        assert_eq!(cost.requests_by_kind(&none), None);
    }

    #[test]
    fn mount_table_lookup() {
        assert_eq!(unescape_mount(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mount("/plain"), "/plain");
        // The root filesystem always has a type.
        assert!(fs_type_of(Path::new("/")).is_some());
    }
}
