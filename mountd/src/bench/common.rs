//! What every benchmark shares: keys and values, the multi-threaded runner with
//! its op and time caps, temporary directories, Ctrl-C handling and the table printer.

use anyhow::{bail, Context, Result};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes in one value, as in the paper's Figure 6.
pub const VALUE_BYTES: usize = 1000;

/// Parses a data size such as `64MiB`, `1GiB`, `1G`, `500k` or `1000000` (bytes).
/// Binary and decimal suffixes both mean powers of 1024, as `dd` users expect.
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num
        .parse()
        .map_err(|_| format!("{text:?} is not a size (e.g. 64MiB, 1GiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    let bytes = num * mult as f64;
    if !(bytes.is_finite() && bytes >= 1.0) {
        return Err(format!("{text:?} is not a positive size"));
    }
    Ok(bytes as u64)
}

/// Parses a duration in seconds (`10`, `2.5`, `30s`).
pub fn parse_secs(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim().trim_end_matches('s');
    let secs: f64 = t
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("{text:?} must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The row key of record `i`: 16 zero-padded decimal digits, so key order is
/// numeric order and a sequential writer appends at the end of the table.
pub fn row_key(i: u64) -> String {
    String::from_utf8_lossy(RowKey::new(i).as_bytes()).into_owned()
}

/// [`row_key`] built on the stack, for the loops that make a key per
/// operation: a `format!` and its allocation took a tenth of a cached point
/// read's time in the profile, charged to every store alike, which pulled
/// every ratio of a fast read toward 1.
pub struct RowKey {
    digits: [u8; 20],
    start: usize,
}

impl RowKey {
    pub fn new(mut i: u64) -> RowKey {
        let mut digits = [b'0'; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (i % 10) as u8;
            i /= 10;
            if i == 0 {
                break;
            }
        }
        // At least 16 digits, zero-padded; a u64 has at most 20.
        RowKey {
            digits,
            start: at.min(4),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

/// A small, fast PRNG (xorshift64*) so that generating random keys and
/// incompressible values costs little next to the operation measured.
pub struct FastRng(u64);

impl FastRng {
    pub fn new(seed: u64) -> FastRng {
        // splitmix64 of the seed: distinct seeds give unrelated, nonzero states.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        FastRng((z ^ (z >> 31)) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0); the modulo bias is negligible for n far below 2^64.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next_u64().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }
}

/// A seed that differs between runs (wall clock and pid).
pub fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ (u64::from(std::process::id()) << 40)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Ctrl-C and SIGTERM stop the running workload at its next operation, so that
/// temp dirs are removed and mounts unmounted on the way out.
pub fn install_signal_handlers() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { sigaction(sig, &action) } {
            eprintln!("warning: cannot install a {sig} handler: {e}");
        }
    }
}

/// Whether the user asked us to stop.
pub fn interrupted() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Fails once the user has interrupted the run (checked between workloads).
pub fn check_interrupted() -> Result<()> {
    if interrupted() {
        bail!("interrupted");
    }
    Ok(())
}

/// With `BIGTABLE_BENCH_MARKS` set, prints `mark <what> <CLOCK_MONOTONIC
/// seconds>` to stderr: the edges of a phase, to cut a profile taken with
/// `perf record -k CLOCK_MONOTONIC` to it (`perf report --time a,b`).
pub fn phase_mark(what: std::fmt::Arguments<'_>) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("BIGTABLE_BENCH_MARKS").is_some()) {
        return;
    }
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => eprintln!("mark {what} {}.{:09}", t.tv_sec(), t.tv_nsec()),
        Err(e) => eprintln!("mark {what}: no clock: {e}"),
    }
}

/// A directory created for one run and removed (with everything in it) on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<base>/<prefix>-<pid>-<random>`.
    pub fn new_in(base: &Path, prefix: &str) -> Result<TempDir> {
        let mut rng = FastRng::new(time_seed());
        for _ in 0..16 {
            let path = base.join(format!(
                "{prefix}-{}-{:08x}",
                std::process::id(),
                rng.next_u64() as u32
            ));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("creating {}", path.display()));
                }
            }
        }
        bail!(
            "could not create a fresh directory under {}",
            base.display()
        )
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            eprintln!("warning: could not remove {}: {e}", self.path.display());
        }
    }
}

/// The default place for benchmark data: /var/tmp (on disk, unlike /tmp on
/// many systems), else the current directory.
pub fn default_base_dir() -> PathBuf {
    let var_tmp = PathBuf::from("/var/tmp");
    if var_tmp.is_dir() {
        var_tmp
    } else {
        PathBuf::from(".")
    }
}

/// One workload's result.
#[derive(Debug, Clone)]
pub struct Measured {
    pub ops: u64,
    /// Operations each thread completed (with [`Deal::Shares`], thread `t`
    /// ran the first of these of its [`share`]).
    pub per_thread: Vec<u64>,
    pub secs: f64,
    /// The time cap stopped it before every planned operation ran.
    pub capped: bool,
}

impl Measured {
    pub fn rate(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "ops": self.ops,
            "secs": round3(self.secs),
            "ops_per_sec": self.rate().round(),
            "capped": self.capped,
        })
    }
}

/// The median of `v` (the mean of the middle two for an even count); 0 if empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of `v`, `None` if it is empty (the side was not run).
pub fn median_of(v: Vec<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| median(v))
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Per-thread state handed to each operation.
pub struct Ctx {
    /// Which of the phase's threads this is.
    pub thread: usize,
    pub rng: FastRng,
    value: Vec<u8>,
}

impl Ctx {
    fn new(thread: usize, seed: u64) -> Ctx {
        Ctx {
            thread,
            rng: FastRng::new(seed ^ ((thread as u64 + 1) << 32)),
            value: vec![0; VALUE_BYTES],
        }
    }
    /// A fresh incompressible value (random bytes, new for every call).
    pub fn value(&mut self) -> &[u8] {
        self.rng.fill(&mut self.value);
        &self.value
    }
}

/// Records the first error of any thread and tells the others to stop.
struct Abort {
    flag: AtomicBool,
    first: Mutex<Option<anyhow::Error>>,
}

impl Abort {
    fn new() -> Abort {
        Abort {
            flag: AtomicBool::new(false),
            first: Mutex::new(None),
        }
    }
    fn record(&self, e: anyhow::Error) {
        self.flag.store(true, Ordering::SeqCst);
        if let Ok(mut slot) = self.first.lock() {
            slot.get_or_insert(e);
        }
    }
    fn should_stop(&self) -> bool {
        self.flag.load(Ordering::Relaxed) || interrupted()
    }
    fn into_result(self) -> Result<()> {
        match self.first.into_inner() {
            Ok(Some(e)) => Err(e),
            Ok(None) => Ok(()),
            Err(_) => bail!("a benchmark thread panicked"),
        }
    }
}

/// The share of `0..n` that thread `t` of `threads` works on: contiguous
/// ranges, as the paper's clients each took their own slice of the key space.
pub fn share(n: u64, threads: usize, t: usize) -> Range<u64> {
    let threads = threads.max(1) as u64;
    let t = t as u64;
    (n * t / threads)..(n * (t + 1) / threads)
}

/// How a phase's indices are dealt out to its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deal {
    /// Thread `t` runs its [`share`], in order, as the paper's clients each
    /// took their own slice: what a capped fill wrote is then a prefix of
    /// each share ([`super::workloads::Written::from_fill`]).
    Shares,
    /// Each thread runs its share in pieces of this many indices, and once
    /// it is done, takes pieces from the front of the share with the most
    /// left. A read pass over 64 MiB of cached data takes 10-50 ms, and with
    /// shares alone a pass lasted as long as its slowest thread: with more
    /// threads than cores the last of them ran alone while the other cores
    /// idled (the reads kept 1.5-1.8 of 2 CPUs busy). The threads still read
    /// apart from each other until the end (reading the same blocks at once
    /// would measure the stores' cache locks instead).
    Pieces(u64),
}

/// Hands out the index ranges of one phase (see [`Deal`]).
struct Dealer {
    deal: Deal,
    /// Each thread's share: where its next piece starts, and its end.
    next: Vec<AtomicU64>,
    ends: Vec<u64>,
}

impl Dealer {
    fn new(n: u64, threads: usize, deal: Deal) -> Dealer {
        let shares: Vec<Range<u64>> = (0..threads).map(|t| share(n, threads, t)).collect();
        Dealer {
            deal,
            next: shares.iter().map(|r| AtomicU64::new(r.start)).collect(),
            ends: shares.iter().map(|r| r.end).collect(),
        }
    }

    /// The next range for thread `t`.
    fn take(&self, t: usize) -> Option<Range<u64>> {
        let size = match self.deal {
            Deal::Shares => u64::MAX,
            Deal::Pieces(size) => size.max(1),
        };
        if let Some(r) = self.piece(t, size) {
            return Some(r);
        }
        if self.deal == Deal::Shares {
            return None;
        }
        loop {
            let most = (0..self.ends.len())
                .map(|j| (self.left(j), j))
                .max()
                .filter(|&(left, _)| left > 0)?;
            if let Some(r) = self.piece(most.1, size) {
                return Some(r);
            }
        }
    }

    /// How many indices of share `j` no thread has taken yet.
    fn left(&self, j: usize) -> u64 {
        self.ends[j].saturating_sub(self.next[j].load(Ordering::Relaxed))
    }

    /// Up to `size` indices from the front of share `j`.
    fn piece(&self, j: usize, size: u64) -> Option<Range<u64>> {
        let end = self.ends[j];
        if self.next[j].load(Ordering::Relaxed) >= end {
            return None;
        }
        // Never past `2 * end`: a share's whole (`u64::MAX`) cannot overflow.
        let start = self.next[j].fetch_add(size.min(end), Ordering::Relaxed);
        (start < end).then(|| start..start.saturating_add(size).min(end))
    }
}

/// Runs `ops` operations over `threads` threads, dealt out as `deal` says;
/// each thread calls `op(ctx, i)` for the indices it is dealt, in order.
/// Stops early at `time_cap`, on Ctrl-C, or at the first error (which is
/// returned).
pub fn run_ops<F>(
    threads: usize,
    ops: u64,
    time_cap: Duration,
    deal: Deal,
    op: F,
) -> Result<Measured>
where
    F: Fn(&mut Ctx, u64) -> Result<()> + Sync,
{
    run_dealt(
        threads,
        ops,
        time_cap,
        deal,
        |ctx, range, deadline, abort| {
            let mut n = 0u64;
            for i in range {
                if abort.should_stop() || Instant::now() >= deadline {
                    return Ok(n);
                }
                op(ctx, i).map_err(|e| e.context(format!("operation {i}")))?;
                n += 1;
            }
            Ok(n)
        },
    )
}

/// Runs `f(thread, range, deadline)` on the ranges of `0..n` dealt out as
/// `deal` says; `f` returns how many items it handled (e.g. cells scanned)
/// and should stop at the deadline. For scans, where one call covers many
/// items.
pub fn run_ranges<F>(
    threads: usize,
    n: u64,
    time_cap: Duration,
    deal: Deal,
    f: F,
) -> Result<Measured>
where
    F: Fn(usize, Range<u64>, Instant) -> Result<u64> + Sync,
{
    run_dealt(threads, n, time_cap, deal, |ctx, range, deadline, _| {
        f(ctx.thread, range, deadline)
    })
}

/// The threads of [`run_ops`] and [`run_ranges`]: each runs `f` with its
/// own [`Ctx`] (one for all its ranges: a random workload's keys go on
/// from one piece to the next) on the ranges it is dealt until there are
/// none, the deadline passes or a thread fails; a range handled short of
/// its end ends the thread's work.
fn run_dealt<F>(threads: usize, n: u64, time_cap: Duration, deal: Deal, f: F) -> Result<Measured>
where
    F: Fn(&mut Ctx, Range<u64>, Instant, &Abort) -> Result<u64> + Sync,
{
    let threads = threads.max(1);
    let abort = Abort::new();
    let dealer = Dealer::new(n, threads, deal);
    let done: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let seed = time_seed();
    let start = Instant::now();
    let deadline = start + time_cap;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (abort, dealer, done, f) = (&abort, &dealer, &done, &f);
            s.spawn(move || {
                let mut ctx = Ctx::new(t, seed);
                let mut items = 0u64;
                while let Some(range) = dealer.take(t) {
                    if abort.should_stop() || Instant::now() >= deadline {
                        break;
                    }
                    let want = range.end - range.start;
                    match f(&mut ctx, range, deadline, abort) {
                        Ok(k) => {
                            items += k;
                            if k < want {
                                break;
                            }
                        }
                        Err(e) => {
                            abort.record(e);
                            break;
                        }
                    }
                }
                done[t].store(items, Ordering::Relaxed);
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    abort.into_result()?;
    check_interrupted()?;
    let per_thread: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
    let items = per_thread.iter().sum();
    Ok(Measured {
        ops: items,
        per_thread,
        secs,
        capped: items < n,
    })
}

/// Whether a scan running until `deadline` should stop now.
pub fn scan_should_stop(deadline: Instant) -> bool {
    interrupted() || Instant::now() >= deadline
}

/// A plain-text table with right-aligned numeric columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (c, cell) in r.iter().enumerate().take(cols) {
                width[c] = width[c].max(cell.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut out = String::new();
            for (c, w) in width.iter().enumerate() {
                let cell = r.get(c).map(String::as_str).unwrap_or("");
                if c == 0 {
                    out.push_str(&format!("{cell:<w$}"));
                } else {
                    out.push_str(&format!("  {cell:>w$}"));
                }
            }
            out.trim_end().to_string()
        };
        let mut out = line(&self.header);
        out.push('\n');
        out.push_str(&"-".repeat(width.iter().sum::<usize>() + 2 * (cols - 1)));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// An operation rate for the table: `123456` or `123456*` when the time cap cut it short.
pub fn fmt_rate(m: &Measured) -> String {
    format!("{:.0}{}", m.rate(), if m.capped { "*" } else { "" })
}

/// `ours / theirs` as `1.23x`, or `-` when either side is missing.
pub fn fmt_ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match ratio(ours, theirs) {
        Some(r) => format!("{r:.2}x"),
        None => "-".to_string(),
    }
}

pub fn ratio(ours: Option<f64>, theirs: Option<f64>) -> Option<f64> {
    match (ours, theirs) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// A ratio for the JSON line (two decimals, or null).
pub fn json_ratio(ours: Option<f64>, theirs: Option<f64>) -> serde_json::Value {
    match ratio(ours, theirs) {
        Some(r) => serde_json::json!((r * 100.0).round() / 100.0),
        None => serde_json::Value::Null,
    }
}

/// Human-readable bytes (`64MiB`).
pub fn fmt_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, size) in UNITS {
        if b >= size && b & (size - 1) == 0 {
            return format!("{}{name}", b / size);
        }
    }
    for (name, size) in UNITS {
        if b >= size {
            return format!("{:.1}{name}", b as f64 / size as f64);
        }
    }
    format!("{b}B")
}

/// Writes out dirty pages and makes the kernel drop its page cache (root
/// only: false elsewhere), so that the reads that follow are cold.
pub fn drop_page_cache() -> bool {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "1\n").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_is_dealt_once() {
        for deal in [
            Deal::Shares,
            Deal::Pieces(1),
            Deal::Pieces(7),
            Deal::Pieces(1000),
        ] {
            let seen: Vec<AtomicU64> = (0..1003).map(|_| AtomicU64::new(0)).collect();
            let m = run_ops(4, 1003, Duration::from_secs(60), deal, |ctx, i| {
                // A thread that is slow on its own share: others take it over.
                if ctx.thread == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
                seen[i as usize].fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
            assert_eq!(m.ops, 1003, "{deal:?}");
            assert!(!m.capped);
            assert!(
                seen.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                "{deal:?}"
            );
            if deal == Deal::Shares {
                assert_eq!(m.per_thread, vec![250, 251, 251, 251]);
            }
        }
    }

    #[test]
    fn pieces_start_in_each_threads_share_and_go_in_order() {
        let d = Dealer::new(100, 2, Deal::Pieces(30));
        assert_eq!(d.take(1), Some(50..80));
        assert_eq!(d.take(1), Some(80..100));
        // Thread 1's share is done: it takes the front of thread 0's.
        assert_eq!(d.take(1), Some(0..30));
        assert_eq!(d.take(0), Some(30..50));
        assert_eq!(d.take(0), None);
        assert_eq!(d.take(1), None);
        let d = Dealer::new(10, 2, Deal::Shares);
        assert_eq!(d.take(0), Some(0..5));
        assert_eq!(d.take(0), None, "a share is dealt once");
        assert_eq!(d.take(1), Some(5..10));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("500k").unwrap(), 500 << 10);
        assert_eq!(parse_size("1000000").unwrap(), 1_000_000);
        assert_eq!(parse_size("1.5m").unwrap(), 3 << 19);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn secs_parse() {
        assert_eq!(parse_secs("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_secs("2.5s").unwrap(), Duration::from_millis(2500));
        assert!(parse_secs("-1").is_err());
    }

    #[test]
    fn keys_sort_numerically() {
        assert_eq!(row_key(42), "0000000000000042");
        assert_eq!(row_key(42).len(), 16);
        assert!(row_key(9) < row_key(10));
        for i in [0, 7, 42, 9_999_999_999_999_999, 10u64.pow(16), u64::MAX] {
            assert_eq!(RowKey::new(i).as_bytes(), format!("{i:016}").as_bytes());
        }
    }

    #[test]
    fn shares_cover_everything_once() {
        let n = 1001;
        let mut next = 0;
        for t in 0..7 {
            let r = share(n, 7, t);
            assert_eq!(r.start, next);
            next = r.end;
        }
        assert_eq!(next, n);
    }

    #[test]
    fn values_are_fresh_and_incompressible() {
        let mut ctx = Ctx::new(0, 1);
        let a = ctx.value().to_vec();
        let b = ctx.value().to_vec();
        assert_eq!(a.len(), VALUE_BYTES);
        assert_ne!(a, b);
        // Random bytes: nearly every byte value appears in 1000 bytes.
        let mut seen = [false; 256];
        for &x in &a {
            seen[x as usize] = true;
        }
        assert!(seen.iter().filter(|&&s| s).count() > 200);
    }

    #[test]
    fn runner_counts_every_op_and_reports_errors() {
        let m = run_ops(3, 100, Duration::from_secs(10), Deal::Shares, |_, _| Ok(())).unwrap();
        assert_eq!(m.ops, 100);
        assert!(!m.capped);
        let err = run_ops(2, 100, Duration::from_secs(10), Deal::Pieces(8), |_, i| {
            if i == 70 {
                bail!("boom")
            }
            Ok(())
        });
        assert!(format!("{:#}", err.unwrap_err()).contains("boom"));
    }

    #[test]
    fn runner_stops_at_time_cap() {
        let m = run_ops(
            2,
            u64::MAX / 2,
            Duration::from_millis(50),
            Deal::Pieces(1000),
            |_, _| {
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            },
        )
        .unwrap();
        assert!(m.capped);
        assert!(m.secs < 2.0);
    }

    #[test]
    fn ranges_sum_items() {
        let m = run_ranges(4, 40, Duration::from_secs(5), Deal::Shares, |_, r, _| {
            Ok(r.end - r.start)
        })
        .unwrap();
        assert_eq!(m.ops, 40);
    }

    #[test]
    fn temp_dir_is_removed() {
        let base = std::env::temp_dir();
        let path = {
            let d = TempDir::new_in(&base, "bench-test").unwrap();
            std::fs::write(d.path().join("f"), b"x").unwrap();
            d.path().to_path_buf()
        };
        assert!(!path.exists());
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new(&["workload", "ops/s"]);
        t.row(vec!["scan".into(), "15".into()]);
        let s = t.render();
        assert!(s.contains("scan         15"), "{s}");
    }

    #[test]
    fn bytes_format() {
        assert_eq!(fmt_bytes(64 << 20), "64MiB");
        assert_eq!(fmt_bytes(1 << 30), "1GiB");
        assert_eq!(fmt_bytes(1500), "1.5KiB");
    }
}
