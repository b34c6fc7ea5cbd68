//! The physical limits the goals are measured against, each measured in the
//! run that uses it: the FUSE round trip (a request the daemon answers with
//! no work), the memory bus (copies between buffers), the page cache
//! (buffered writes) and the disk around it (`O_DIRECT` writes). The disk's
//! fsync rate is the engine's own probe.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long each limit is measured.
const PROBE_TIME: Duration = Duration::from_millis(500);

/// FUSE round trips per second with `threads` callers at once: each asks for
/// an extended attribute the daemon does not have (a `getxattr` it answers
/// `ENODATA` with no store work, and which the kernel never caches), on
/// `path` inside the mount. What one request of a file operation costs at
/// least, transport and kernel included.
/// Returns (requests made, requests per second).
pub fn fuse_round_trips(path: &Path, threads: usize) -> Result<(u64, f64)> {
    let c_path = CString::new(path.as_os_str().as_bytes()).context("path with NUL")?;
    let name = c"user.bigtable-bench.round-trip";
    let probe = || -> Result<()> {
        // SAFETY: both strings are NUL-terminated and live across the call; a
        // null buffer of size 0 only asks for the value's size.
        let r = unsafe { libc::getxattr(c_path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
        let err = std::io::Error::last_os_error();
        if r >= 0 || err.raw_os_error() != Some(libc::ENODATA) {
            bail!("getxattr on {}: {r} ({err})", path.display());
        }
        Ok(())
    };
    probe()?;
    let start = Instant::now();
    let counts = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<u64> {
                    let mut n = 0u64;
                    while start.elapsed() < PROBE_TIME {
                        for _ in 0..64 {
                            probe()?;
                        }
                        n += 64;
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("round-trip thread panicked"))?
            })
            .collect::<Result<Vec<u64>>>()
    })?;
    let secs = start.elapsed().as_secs_f64();
    let n: u64 = counts.iter().sum();
    Ok((n, n as f64 / secs.max(1e-9)))
}

/// Of the `fuse_requests` a mount's `.bigtable/stats` text counts, those
/// no caller waits for: RELEASE, which the kernel sends once the file's
/// last reference is gone and does not wait for (FORGET and RELEASEDIR,
/// sent the same way, are not in `fuse_requests`). A limit charges a round
/// trip only for the others.
pub fn unwaited_requests(stats: &str) -> u64 {
    stat(stats, "fuse_release").unwrap_or(0)
}

/// The number on the `key=` line of a mount's `.bigtable/stats` text.
pub fn stat(stats: &str, key: &str) -> Option<u64> {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('=')?.trim().parse().ok())
}

/// Bytes per second that `threads` threads copy between buffers of their own
/// (64 MiB each, larger than any cache): what the memory bus gives a
/// workload that moves each value once.
pub fn memory_bandwidth(threads: usize) -> f64 {
    memory_passes(threads, |src, dst| {
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(dst);
    })
}

/// Bytes per second that `threads` threads read (summed as words) from
/// buffers of their own of 64 MiB: what the memory bus gives a workload
/// that reads each value once and copies none (a scan).
pub fn memory_read_bandwidth(threads: usize) -> f64 {
    memory_passes(threads, |src, _| {
        let sum = std::hint::black_box(src)
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
            .fold(0u64, u64::wrapping_add);
        std::hint::black_box(sum);
    })
}

/// Bytes of `src` per second that `threads` threads pass through `pass`
/// (each its own 64 MiB `src` and `dst`) for [`PROBE_TIME`].
fn memory_passes(threads: usize, pass: impl Fn(&[u8], &mut [u8]) + Sync) -> f64 {
    const BUF: usize = 64 << 20;
    let threads = threads.max(1);
    // The clock starts when every thread has touched its buffers: their
    // page faults are not the memory bus.
    let ready = std::sync::Barrier::new(threads + 1);
    let (moved, secs) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (ready, pass) = (&ready, &pass);
                s.spawn(move || {
                    let src = vec![1u8; BUF];
                    let mut dst = vec![0u8; BUF];
                    dst.copy_from_slice(&src);
                    ready.wait();
                    let start = Instant::now();
                    let mut n = 0u64;
                    while start.elapsed() < PROBE_TIME {
                        pass(&src, &mut dst);
                        n += BUF as u64;
                    }
                    n
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        let moved: u64 = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
        (moved, start.elapsed().as_secs_f64())
    });
    moved as f64 / secs.max(1e-9)
}

/// The best of `runs` measurements of a bandwidth (at least one): a disk
/// or a page cache shared with other work measures below what it can do
/// more often than above, and a limit is what no program passes.
pub fn best_of(runs: usize, mut probe: impl FnMut() -> Result<f64>) -> Result<f64> {
    let mut best = probe()?;
    for _ in 1..runs {
        if let Ok(b) = probe() {
            best = best.max(b);
        }
    }
    Ok(best)
}

/// The fastest a file operation of `requests` FUSE requests can go: the
/// same operation on tmpfs (`tmpfs_rate` per second, the kernel's and the
/// program's own work; none if not measured) plus that many round trips at
/// `round_trips` per second.
pub fn through_fuse(tmpfs_rate: Option<f64>, requests: f64, round_trips: f64) -> Option<f64> {
    let kernel = match tmpfs_rate {
        Some(r) if r > 0.0 => 1.0 / r,
        Some(_) => return None,
        None => 0.0,
    };
    let secs = kernel + requests / round_trips;
    (round_trips > 0.0 && secs > 0.0).then(|| 1.0 / secs)
}

/// Bytes per second written into the page cache by one thread appending
/// 1 MiB writes to a new file in `dir` (not synced; removed after): what a
/// copy of the data costs a store whose writes the disk absorbs later.
pub fn page_cache_write_bandwidth(dir: &Path) -> Result<f64> {
    const TOTAL: usize = 256 << 20;
    let path = dir.join("page-cache-probe");
    let buf = vec![7u8; 1 << 20];
    let result = (|| {
        let mut f = std::fs::File::create(&path).context("page cache probe")?;
        let start = Instant::now();
        for _ in 0..TOTAL / buf.len() {
            f.write_all(&buf).context("page cache probe")?;
        }
        Ok(TOTAL as f64 / start.elapsed().as_secs_f64().max(1e-9))
    })();
    let _ = std::fs::remove_file(&path);
    result
}

/// Bytes per second written around the page cache (`O_DIRECT`, 1 MiB
/// aligned writes) to a scratch file in `dir`: what the chunk layer's
/// direct replicas cost the disk. An error where `dir` refuses `O_DIRECT`.
pub fn direct_write_bandwidth(dir: &Path) -> Result<f64> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const TOTAL: u64 = 64 << 20;
    const CHUNK: usize = 1 << 20;
    const ALIGN: usize = 4096;
    let path = dir.join("direct-write-probe");
    // Safe alignment: an oversized vector used from its first aligned byte.
    let raw = vec![7u8; CHUNK + ALIGN];
    let at = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
    let buf = &raw[at..at + CHUNK];
    let result = (|| {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
            .context("direct write probe")?;
        let start = Instant::now();
        for off in (0..TOTAL).step_by(CHUNK) {
            f.write_all_at(buf, off).context("direct write probe")?;
        }
        Ok(TOTAL as f64 / start.elapsed().as_secs_f64().max(1e-9))
    })();
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_and_page_cache_are_measured() {
        let bw = memory_bandwidth(2);
        eprintln!("memory copies, 2 threads: {:.1} GB/s", bw / 1e9);
        assert!(bw > 0.0);
        let read = memory_read_bandwidth(2);
        eprintln!("memory reads, 2 threads: {:.1} GB/s", read / 1e9);
        assert!(read > 0.0);
        let dir = tempfile::tempdir().unwrap();
        assert!(page_cache_write_bandwidth(dir.path()).unwrap() > 0.0);
        assert!(!dir.path().join("page-cache-probe").exists());
        // tmpfs (where a tempdir may live) refuses O_DIRECT on older kernels.
        if let Ok(bw) = direct_write_bandwidth(dir.path()) {
            assert!(bw > 0.0);
        }
        assert!(!dir.path().join("direct-write-probe").exists());
    }

    #[test]
    fn the_best_of_several_probes_is_kept_and_a_failed_one_skipped() {
        let mut runs = [Ok(3.0), Err(anyhow::anyhow!("busy")), Ok(5.0), Ok(4.0)].into_iter();
        assert_eq!(best_of(4, || runs.next().unwrap()).unwrap(), 5.0);
        assert!(best_of(3, || Err(anyhow::anyhow!("refused"))).is_err());
    }

    #[test]
    fn releases_are_the_requests_nobody_waits_for() {
        let stats = "fuse_requests=100\nfuse_releasedir=3\nfuse_release=7\nfuse_open=9\n";
        assert_eq!(unwaited_requests(stats), 7);
        assert_eq!(unwaited_requests("fuse_requests=100\n"), 0);
    }

    #[test]
    fn a_file_operation_costs_tmpfs_plus_its_round_trips() {
        // 10 µs on tmpfs plus 4 round trips of 10 µs: 50 µs, 20,000/s.
        let r = through_fuse(Some(100_000.0), 4.0, 100_000.0).unwrap();
        assert!((r - 20_000.0).abs() < 1e-6, "{r}");
        let r = through_fuse(None, 2.0, 100_000.0).unwrap();
        assert!((r - 50_000.0).abs() < 1e-6, "{r}");
        assert_eq!(through_fuse(Some(0.0), 2.0, 100_000.0), None);
        assert_eq!(through_fuse(None, 2.0, 0.0), None);
    }
}
