//! `bigtable-bench scale`: how the mount's walks and memory grow with a table.
//!
//! For each size it starts a fresh daemon (so its peak RSS belongs to that
//! size), imports a table of one 8-byte cell per row with one `.mutate`
//! batch, and times `ls`, `find`, `du -s`, `tar c`, `rsync -a`, `grep -r`, a
//! `.scan` and random `cat`s; the walks run beside bindfs over a tmpfs that
//! holds the same tree (rows as directories, a family directory, one file
//! each), with the kernel's dentries and inodes dropped before every walk on
//! either side. It prints each walk's time, ours/bindfs speed-up, the FUSE
//! requests per cell the daemon answered, and the daemon's RSS: peak, settled
//! after the walks, and after `echo 2 > /proc/sys/vm/drop_caches`.

use super::common::{check_interrupted, fmt_bytes, median, median_of, FastRng, Table, TempDir};
use super::fs_bench::{have_bindfs, mount_bindfs, mount_tmpfs, Mounted};
use super::limits::fuse_round_trips;
use anyhow::{bail, Context, Result};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TABLE: &str = "t";
const FAMILY: &str = "f";
const QUALIFIER: &str = "q";
/// Random cells read per size.
const CATS: u64 = 200;
/// A walk whose first run took less than this runs [`SHORT_WALK_ROUNDS`]
/// alternated rounds, and each side's median counts.
const SHORT_WALK_SECS: f64 = 0.25;
const SHORT_WALK_ROUNDS: usize = 5;

/// What `scale` was asked to do.
pub struct ScaleArgs {
    pub rows: Vec<u64>,
    pub work_base: PathBuf,
    /// The daemon binary (default: beside this one, else on the PATH).
    pub mountd: Option<PathBuf>,
    /// Extra `-o` options for the daemon.
    pub options: Option<String>,
    pub peers: bool,
    /// Only the walks whose command starts with one of these; empty: all.
    pub walks: Vec<String>,
}

fn row_name(i: u64) -> String {
    format!("row{i:010}")
}

/// The daemon binary: `given`, else `bigtable-mountd` beside this program,
/// else the one on the PATH.
pub fn mountd_binary(given: &Option<PathBuf>) -> PathBuf {
    if let Some(p) = given {
        return p.clone();
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("bigtable-mountd")));
    match beside {
        Some(p) if p.exists() => p,
        _ => PathBuf::from("bigtable-mountd"),
    }
}

/// A daemon this run started; unmounted on drop.
pub struct Daemon {
    pid: u32,
    _mount: Mounted,
}

impl Daemon {
    /// Mounts `data` at `mnt` with `bin` (and `extra` mount options).
    pub fn start(bin: &Path, data: &Path, mnt: &Path, extra: &Option<String>) -> Result<Daemon> {
        Daemon::start_with(bin, data, mnt, extra, |_| Ok(()))
    }

    /// The same, with `prepare` applied to the command first (e.g. to
    /// start it on a simulated machine).
    pub fn start_with(
        bin: &Path,
        data: &Path,
        mnt: &Path,
        extra: &Option<String>,
        prepare: impl FnOnce(&mut Command) -> Result<()>,
    ) -> Result<Daemon> {
        let pidfile = data.with_extension("pid");
        let mut opts = format!("pidfile={},log=warn", pidfile.display());
        if let Some(e) = extra {
            opts.push(',');
            opts.push_str(e);
        }
        let mut cmd = Command::new(bin);
        cmd.arg(data).arg(mnt).arg("-o").arg(&opts);
        prepare(&mut cmd)?;
        let out = cmd
            .output()
            .with_context(|| format!("starting {}", bin.display()))?;
        if !out.status.success() {
            bail!(
                "{} failed: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let mount = Mounted::new(mnt);
        let pid = fs::read_to_string(&pidfile)
            .with_context(|| format!("reading {}", pidfile.display()))?
            .trim()
            .parse()
            .context("pid file")?;
        Ok(Daemon { pid, _mount: mount })
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Unmounts, then waits (up to a minute) for the daemon to exit, so
    /// that another can open its data directory.
    pub fn stop(self) -> Result<()> {
        let pid = self.pid;
        drop(self);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() >= deadline {
                bail!("the daemon (pid {pid}) still runs a minute after its unmount");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// (resident, peak resident) bytes, from /proc/<pid>/status.
    fn rss(&self) -> (u64, u64) {
        let text = fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
                .map_or(0, |kb| kb * 1024)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The resident size once it stops changing (by more than 1 MiB over a
    /// second), or after 30 s.
    fn settled_rss(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = self.rss().0;
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = self.rss().0;
            if now.abs_diff(last) < (1 << 20) || Instant::now() >= deadline {
                return now;
            }
            last = now;
        }
    }
}

/// The daemon's `fuse_requests` counter less the requests no caller waits
/// for (each is a round trip of a walk's limit), and its time running
/// requests in seconds (`fuse_handling_us`); 0 where unknown.
fn daemon_counts(mnt: &Path) -> (u64, f64) {
    let text = fs::read_to_string(mnt.join(".bigtable/stats")).unwrap_or_default();
    let get = |k: &str| super::limits::stat(&text, k).unwrap_or(0);
    let waited = get("fuse_requests").saturating_sub(super::limits::unwaited_requests(&text));
    (waited, get("fuse_handling_us") as f64 / 1e6)
}

fn drop_caches() {
    // Needs root; without it the walks run warm on both sides alike.
    let _ = fs::write("/proc/sys/vm/drop_caches", "2\n");
}

/// What one run of a walk took: wall seconds, and the CPU seconds of the
/// walking programs (user and system, the kernel's work in their context
/// included: every FUSE reply the walker's system calls take in).
#[derive(Clone, Copy)]
struct Timed {
    wall: f64,
    cpu: f64,
}

/// CPU seconds of this process's children that have ended and been waited
/// for.
fn children_cpu() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        secs(u.user_time()) + secs(u.system_time())
    })
}

/// Runs `sh -c script` in `dir`, output discarded; its times.
fn timed(dir: &Path, script: &str) -> Result<Timed> {
    let cpu = children_cpu();
    let start = Instant::now();
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {script}"))?;
    let wall = start.elapsed().as_secs_f64();
    if !status.status.success() {
        bail!(
            "{script:?} in {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&status.stderr).trim()
        );
    }
    Ok(Timed {
        wall,
        cpu: (children_cpu() - cpu).max(0.0),
    })
}

/// The walks, each a shell command run inside the table directory.
/// `{tmp}` is a scratch directory (on tmpfs) for rsync's copy; a walk that
/// copies is left out where the copy would not fit in memory.
const WALKS: [(&str, &str); 6] = [
    ("ls", "ls | wc -l"),
    ("find -type f", "find . -type f | wc -l"),
    ("du -s", "du -s ."),
    ("tar c", "tar cf - . | wc -c"),
    ("rsync -a", "rsync -a ./ {tmp}/copy/ && rm -rf {tmp}/copy"),
    ("grep -r", "grep -r -c x . | wc -l"),
];

/// Writes the batch text: one `set` a row.
fn write_batch(path: &Path, rows: u64) -> Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    for i in 0..rows {
        writeln!(
            w,
            "set {} {FAMILY}:{QUALIFIER} v{:07}",
            row_name(i),
            i % 10_000_000
        )?;
    }
    w.flush()?;
    Ok(())
}

/// The same tree as a plain directory: `<row>/f/q` holding the same value.
fn write_tree(root: &Path, rows: u64) -> Result<()> {
    fs::create_dir_all(root)?;
    fs::write(root.join(".schema"), format!("{FAMILY}\n"))?;
    for i in 0..rows {
        let fam = root.join(row_name(i)).join(FAMILY);
        fs::create_dir_all(&fam)?;
        fs::write(fam.join(QUALIFIER), format!("v{:07}", i % 10_000_000))?;
        if i % 65_536 == 0 {
            check_interrupted()?;
        }
    }
    Ok(())
}

/// Memory a tmpfs tree of `rows` rows takes, about: three inodes and
/// dentries and a page of data per row.
const TREE_BYTES_PER_ROW: u64 = 8 << 10;

/// Whether the bindfs tree of `rows` rows fits in half the memory available.
fn tree_fits(rows: u64) -> Result<(), String> {
    let available = super::vm_memory::meminfo().map_or(u64::MAX, |(available, _)| available);
    let need = rows.saturating_mul(TREE_BYTES_PER_ROW);
    if need > available / 2 {
        return Err(format!(
            "the same tree on tmpfs needs about {} and half of the memory available is {}",
            fmt_bytes(need >> 20 << 20),
            fmt_bytes((available / 2) >> 20 << 20)
        ));
    }
    Ok(())
}

/// Copies the batch into `.mutate` in 128 KiB writes; checks the close.
fn import(batch: &Path, table: &Path) -> Result<f64> {
    let start = Instant::now();
    let mut src = File::open(batch)?;
    let mut dst = OpenOptions::new()
        .write(true)
        .open(table.join(".mutate"))
        .context("opening .mutate")?;
    let mut buf = vec![0u8; 128 << 10];
    loop {
        let n = src.read(&mut buf)?;
        if n == 0 {
            break;
        }
        dst.write_all(&buf[..n]).context("writing the batch")?;
    }
    dst.sync_all().context("committing the batch")?;
    drop(dst);
    Ok(start.elapsed().as_secs_f64())
}

/// Reads `CATS` random cells; mean seconds per cat.
fn random_cats(table: &Path, rows: u64) -> Result<f64> {
    let mut rng = FastRng::new(rows);
    let start = Instant::now();
    for _ in 0..CATS {
        let p = table
            .join(row_name(rng.below(rows)))
            .join(FAMILY)
            .join(QUALIFIER);
        fs::read(&p).with_context(|| format!("cat {}", p.display()))?;
    }
    Ok(start.elapsed().as_secs_f64() / CATS as f64)
}

/// One walk's times (seconds) at one size.
struct Walk {
    name: &'static str,
    ours: f64,
    bindfs: Option<f64>,
    /// The same walk on the tmpfs under bindfs, without FUSE: the walking
    /// program's and the kernel's own work.
    tmpfs: Option<f64>,
    /// Our FUSE requests per cell that the walk waited for (RELEASE excluded).
    per_cell: f64,
    /// Seconds the daemon spent running the walk's requests (a round's mean).
    handling: f64,
    /// CPU seconds of the walking programs on our mount (see [`Timed`]).
    cpu: f64,
    /// The same on tmpfs.
    tmpfs_cpu: Option<f64>,
}

impl Walk {
    /// The fastest any FUSE filesystem making our requests could walk: the
    /// walk on tmpfs plus one round trip per request (none if not measured).
    fn limit(&self, rows: u64, round_trips: Option<f64>) -> Option<f64> {
        let rt = round_trips.filter(|r| *r > 0.0)?;
        Some(self.tmpfs? + self.per_cell * rows as f64 / rt)
    }

    /// The walk with the daemon's own code free: a walk is one caller, who
    /// waits through every request, so its time less the daemon's time
    /// running them (the kernel's part of each request and the walker's
    /// own work left).
    fn code_free(&self) -> Option<f64> {
        let rest = self.ours - self.handling;
        (self.handling > 0.0 && rest > 0.0).then_some(rest)
    }

    /// The walk with the daemon answering in no time: the walking
    /// programs' own CPU on our mount (with the kernel's work on our
    /// replies, which runs in their context), less what of it ran beside
    /// the rest (a pipeline's programs overlap: on tmpfs, by their CPU
    /// over the walk's wall time).
    fn walker_floor(&self) -> Option<f64> {
        let overlap = self
            .tmpfs
            .zip(self.tmpfs_cpu)
            .map_or(0.0, |(wall, cpu)| (cpu - wall).max(0.0));
        let floor = self.cpu - overlap;
        (self.cpu > 0.0 && floor > 0.0).then_some(floor)
    }
}

struct SizeResult {
    rows: u64,
    import: f64,
    walks: Vec<Walk>,
    /// FUSE round trips per second, one caller (see [`fuse_round_trips`]).
    round_trips: Option<f64>,
    scan: f64,
    cat: f64,
    rss_before: u64,
    rss_peak: u64,
    rss_settled: u64,
    rss_dropped: u64,
}

fn run_size(args: &ScaleArgs, rows: u64) -> Result<SizeResult> {
    let work = TempDir::new_in(&args.work_base, "bigtable-bench-scale")?;
    let (data, mnt) = (work.path().join("data"), work.path().join("mnt"));
    fs::create_dir(&data)?;
    fs::create_dir(&mnt)?;
    let daemon = Daemon::start(&mountd_binary(&args.mountd), &data, &mnt, &args.options)?;
    let table = mnt.join(TABLE);
    fs::create_dir(&table).context("mkdir table")?;
    fs::write(table.join(".schema"), format!("{FAMILY}\n")).context("writing .schema")?;
    let rss_before = daemon.settled_rss();

    let batch = work.path().join("batch.txt");
    write_batch(&batch, rows)?;
    eprintln!("{rows} rows: importing ...");
    let import = import(&batch, &table)?;
    fs::remove_file(&batch)?;

    // The passthrough: bindfs over a tmpfs holding the same tree.
    let scratch = work.path().join("scratch");
    fs::create_dir(&scratch)?;
    let bytes = rows * 8 * 4096 + (256 << 20);
    let _scratch_fs = mount_tmpfs(&scratch, bytes).ok();
    let backing = scratch.join("backing");
    let target = work.path().join("bindfs");
    fs::create_dir(&target)?;
    let room = tree_fits(rows);
    if let Err(why) = &room {
        eprintln!("{rows} rows: no bindfs: {why}");
    }
    let bindfs = if args.peers && have_bindfs() && room.is_ok() {
        eprintln!("{rows} rows: building the same tree on tmpfs ...");
        write_tree(&backing.join(TABLE), rows)?;
        Some(mount_bindfs(&backing, &target)?)
    } else {
        None
    };

    let tmp = scratch.display().to_string();
    let mut walks = Vec::new();
    let chosen = |name: &str| {
        args.walks.is_empty()
            || args
                .walks
                .iter()
                .any(|w| name.split(' ').next() == Some(w.as_str()))
    };
    for (name, script) in WALKS.into_iter().filter(|(n, _)| chosen(n)) {
        check_interrupted()?;
        // rsync's copy lands on the scratch tmpfs: a tree as large as the
        // bindfs one, which must not push the machine out of memory.
        if script.contains("{tmp}") {
            if let Err(why) = &room {
                eprintln!("{rows} rows: no {name}: its copy would not fit: {why}");
                continue;
            }
        }
        let script = script.replace("{tmp}", &tmp);
        eprintln!("{rows} rows: {name} ...");
        // A walk of milliseconds is at the mercy of one preemption on a
        // shared machine: it runs in alternated rounds (ours, bindfs,
        // tmpfs), each after `drop_caches`, and each side's median counts.
        let (mut ours, mut theirs, mut tmpfs) = (Vec::new(), Vec::new(), Vec::new());
        let (mut requests, mut handling) = (0, 0.0);
        loop {
            drop_caches();
            let before = daemon_counts(&mnt);
            ours.push(timed(&table, &script)?);
            let after = daemon_counts(&mnt);
            requests += after.0.saturating_sub(before.0);
            handling += (after.1 - before.1).max(0.0);
            if let Some(b) = &bindfs {
                drop_caches();
                theirs.push(timed(&b.path().join(TABLE), &script)?);
                drop_caches();
                tmpfs.push(timed(&backing.join(TABLE), &script)?);
            }
            if ours.len() >= SHORT_WALK_ROUNDS || ours[0].wall >= SHORT_WALK_SECS {
                break;
            }
        }
        let rounds = ours.len();
        let walls = |t: &[Timed]| t.iter().map(|t| t.wall).collect::<Vec<_>>();
        let cpus = |t: &[Timed]| t.iter().map(|t| t.cpu).collect::<Vec<_>>();
        let (cpu, tmpfs_cpu) = (median(cpus(&ours)), median_of(cpus(&tmpfs)));
        let (ours, theirs, tmpfs) = (
            median(walls(&ours)),
            median_of(walls(&theirs)),
            median_of(walls(&tmpfs)),
        );
        let per_cell = requests as f64 / rounds as f64 / rows as f64;
        let handling = handling / rounds as f64;
        // Printed at once: a later walk that fails must not take this one's
        // figures with it (the tables come only when the size is done).
        eprintln!(
            "{rows} rows: {name}: ours {}, bindfs {}, {per_cell:.1} requests per cell ({})",
            secs(ours),
            theirs.map_or("-".into(), secs),
            if rounds > 1 {
                format!("medians of {rounds} alternated rounds")
            } else {
                "one run".to_string()
            }
        );
        walks.push(Walk {
            name,
            ours,
            bindfs: theirs,
            tmpfs,
            per_cell,
            handling,
            cpu,
            tmpfs_cpu,
        });
    }
    drop(bindfs);
    let round_trips = match fuse_round_trips(&mnt, 1) {
        Ok((_, rate)) => Some(rate),
        Err(e) => {
            eprintln!("{rows} rows: FUSE round trip not measured: {e:#}");
            None
        }
    };

    let start = Instant::now();
    let n = fs::read(table.join(".scan/all")).context("reading .scan/all")?;
    let scan = start.elapsed().as_secs_f64();
    if n.is_empty() {
        bail!(".scan/all returned nothing");
    }
    let cat = random_cats(&table, rows)?;

    let (_, rss_peak) = daemon.rss();
    let rss_settled = daemon.settled_rss();
    drop_caches();
    // The daemon hands memory back a second or two after the forgets stop.
    std::thread::sleep(Duration::from_secs(3));
    let rss_dropped = daemon.settled_rss();
    Ok(SizeResult {
        rows,
        import,
        walks,
        round_trips,
        scan,
        cat,
        rss_before,
        rss_peak,
        rss_settled,
        rss_dropped,
    })
}

fn secs(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1}ms", s * 1000.0)
    } else {
        format!("{s:.2}s")
    }
}

/// Runs every size; prints the tables and one JSON line per size, and
/// returns those lines.
pub fn run(args: &ScaleArgs) -> Result<Vec<serde_json::Value>> {
    let mut results = Vec::new();
    for &rows in &args.rows {
        let r = run_size(args, rows.max(1))?;
        // Shown at once: a later, larger size may take hours or be cut short.
        eprintln!("{}", render(std::slice::from_ref(&r)));
        results.push(r);
    }
    println!("{}", render(&results));
    let mut lines = Vec::new();
    for r in &results {
        let walks: Vec<serde_json::Value> = r
            .walks
            .iter()
            .map(|w| {
                let limit = w.limit(r.rows, r.round_trips);
                serde_json::json!({
                    "walk": w.name, "secs": w.ours, "bindfs_secs": w.bindfs,
                    "speedup": w.bindfs.map(|b| b / w.ours), "requests_per_cell": w.per_cell,
                    "tmpfs_secs": w.tmpfs, "limit_secs": limit,
                    "limit_speedup": w.bindfs.zip(limit).map(|(b, l)| b / l),
                    "handling_secs": w.handling,
                    "code_free_speedup": w.bindfs.zip(w.code_free()).map(|(b, l)| b / l),
                    "walker_cpu_secs": w.cpu, "tmpfs_walker_cpu_secs": w.tmpfs_cpu,
                    "walker_floor_speedup": w.bindfs.zip(w.walker_floor()).map(|(b, l)| b / l),
                })
            })
            .collect();
        let line = serde_json::json!({
            "bench": "scale", "rows": r.rows, "import_secs": r.import,
            "walks": walks, "scan_secs": r.scan, "cat_secs": r.cat,
            "fuse_round_trips_per_sec": r.round_trips, "rss_start": r.rss_before, "rss_peak": r.rss_peak,
            "rss_settled": r.rss_settled, "rss_after_drop_caches": r.rss_dropped,
        });
        println!("{line}");
        lines.push(line);
    }
    Ok(lines)
}

/// The times table and the memory table of `results`.
fn render(results: &[SizeResult]) -> String {
    let mut t = Table::new(&[
        "rows",
        "step",
        "ours",
        "bindfs",
        "ours faster by",
        "requests/cell",
        "tmpfs",
        "limit",
        "limit/ours",
    ]);
    // A step with a time of ours only.
    let only = |rows: &str, step: String, time: String| {
        let mut row = vec![rows.to_string(), step, time];
        row.resize(9, "-".into());
        row
    };
    for r in results {
        let n = r.rows.to_string();
        t.row(only(&n, "import (.mutate)".into(), secs(r.import)));
        for w in &r.walks {
            let limit = w.limit(r.rows, r.round_trips);
            t.row(vec![
                n.clone(),
                w.name.into(),
                secs(w.ours),
                w.bindfs.map_or("-".into(), secs),
                w.bindfs
                    .map_or("-".into(), |b| format!("{:.2}x", b / w.ours)),
                format!("{:.1}", w.per_cell),
                w.tmpfs.map_or("-".into(), secs),
                limit.map_or("-".into(), secs),
                limit.map_or("-".into(), |l| format!("{:.0}%", 100.0 * l / w.ours)),
            ]);
        }
        t.row(only(&n, ".scan/all".into(), secs(r.scan)));
        t.row(only(&n, "random cat (each)".into(), secs(r.cat)));
        if let Some(rt) = r.round_trips {
            let step = format!("FUSE round trip: {:.1}us", 1e6 / rt);
            t.row(only(&n, step, "-".into()));
        }
    }
    let mut m = Table::new(&[
        "rows",
        "RSS at start",
        "peak",
        "settled",
        "after drop_caches",
    ]);
    for r in results {
        m.row(vec![
            r.rows.to_string(),
            fmt_bytes(r.rss_before),
            fmt_bytes(r.rss_peak),
            fmt_bytes(r.rss_settled),
            fmt_bytes(r.rss_dropped),
        ]);
    }
    format!("{}\n{}", t.render(), m.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_middle_run() {
        assert_eq!(median(vec![0.030, 0.012, 0.011, 0.013, 0.047]), 0.013);
        assert_eq!(median(vec![3.0, 1.0]), 2.0);
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median_of(vec![]), None);
        assert_eq!(median_of(vec![0.5]), Some(0.5));
    }
}
