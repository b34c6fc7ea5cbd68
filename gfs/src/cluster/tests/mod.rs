//! Tests of the whole cluster through [`FileStore`], and its fault drills.

use super::*;

mod background;
mod direct;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::time::Instant;

const CHUNK: u64 = 128 << 10;

pub(super) fn opts(dir: &Path, servers: usize) -> ClusterOptions {
    let mut o = ClusterOptions::new(
        dir.join("master"),
        (0..servers).map(|i| dir.join(format!("cs{i}"))).collect(),
    );
    o.chunk_size = CHUNK;
    o.heartbeat = Duration::from_millis(20);
    o.gc_delay = Duration::ZERO;
    o.min_free_bytes = 0;
    o.checkpoint_bytes = 16 << 10;
    o
}

pub(super) fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

pub(super) fn read_all(c: &Cluster, name: &str) -> Vec<u8> {
    let r = c.open(name).unwrap();
    r.read_at(0, r.len().unwrap() as usize).unwrap()
}

#[test]
fn roundtrip_across_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(c.replication(), 3);
    let data = bytes(1, 5 * CHUNK as usize + 12_345);
    let mut w = c.create("log/000001.log").unwrap();
    let mut off = 0u64;
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let mut pos = 0;
    while pos < data.len() {
        // Mostly small records, some larger than a chunk (split).
        let n = if rng.gen_bool(0.05) {
            rng.gen_range(40_000..150_000)
        } else {
            rng.gen_range(1..9000)
        }
        .min(data.len() - pos);
        let got = if rng.gen_bool(0.3) {
            let (a, b) = data[pos..pos + n].split_at(n / 2);
            w.append_sync(&[a, b]).unwrap()
        } else {
            w.append(&data[pos..pos + n]).unwrap()
        };
        assert_eq!(got, off, "offsets run on without gaps");
        off += n as u64;
        pos += n;
        assert_eq!(w.len(), off);
    }
    w.sync().unwrap();
    assert_eq!(c.size("log/000001.log").unwrap(), data.len() as u64);
    let r = c.open("log/000001.log").unwrap();
    assert_eq!(r.len().unwrap(), data.len() as u64);
    assert_eq!(read_all(&c, "log/000001.log"), data);
    // Ranges across chunk boundaries, in one batch, out of order.
    let ranges: Vec<(u64, usize)> = (0..40)
        .map(|_| {
            let len = rng.gen_range(0..3 * CHUNK as usize);
            (rng.gen_range(0..=(data.len() - len)) as u64, len)
        })
        .collect();
    for ((o, l), got) in ranges.iter().zip(r.read_many(&ranges).unwrap()) {
        assert_eq!(got[..], data[*o as usize..*o as usize + l]);
    }
    assert!(matches!(
        r.read_at(data.len() as u64 - 1, 2),
        Err(Error::ShortRead { .. })
    ));
    assert!(matches!(
        r.read_at(u64::MAX, 2),
        Err(Error::ShortRead { .. })
    ));
    // The namespace.
    assert!(matches!(
        c.create("log/000001.log"),
        Err(Error::AlreadyExists(_))
    ));
    assert!(matches!(c.create("../x"), Err(Error::InvalidName(..))));
    c.create("log/000002.log").unwrap();
    c.create("sst/1.sst").unwrap().append(b"abc").unwrap();
    assert_eq!(
        c.list("log/").unwrap(),
        vec!["log/000001.log", "log/000002.log"]
    );
    c.rename("sst/1.sst", "log/000002.log").unwrap();
    assert_eq!(read_all(&c, "log/000002.log"), b"abc");
    assert!(!c.exists("sst/1.sst").unwrap());
    let mut w = c.open_append("log/000002.log").unwrap();
    assert_eq!(w.len(), 3);
    assert_eq!(w.append_sync(&[b"def"]).unwrap(), 3);
    assert_eq!(read_all(&c, "log/000002.log"), b"abcdef");
    c.delete("log/000002.log").unwrap();
    assert!(matches!(c.open("log/000002.log"), Err(Error::NotFound(_))));
    assert!(matches!(c.delete("nope"), Err(Error::NotFound(_))));
    assert!(matches!(c.rename("nope", "x"), Err(Error::NotFound(_))));
    // The synced writes of every replica went through io_uring (unsynced
    // ones go by pwritev, see `Io::write`).
    if c.io_mode() == IoMode::Uring {
        let s = c.io_stats();
        assert!(s.uring_ops > 0, "{s:?}");
    }
    let h = c.health();
    assert_eq!((h.under_replicated, h.lost, h.state()), (0, 0, "ok"));
    let lines = c.status();
    assert!(
        lines[0].starts_with("gfs: state=ok chunkservers=3/3 replication=3"),
        "{lines:?}"
    );
    assert_eq!(lines.len(), 2 + 4 + 3 + 3, "{lines:?}");
    assert_plain(&lines);
}

/// Sizes of the replica files of `c`, by path.
fn replica_sizes(c: &Cluster) -> Vec<u64> {
    c.replica_files()
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .collect()
}

#[test]
fn a_logs_replicas_keep_zeros_ahead_that_a_close_or_a_restart_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let data_off = chunk::Layout::new(CHUNK).data_off;
    let data = bytes(7, 3 * CHUNK as usize / 2);
    let records: Vec<&[u8]> = data.chunks(1000).collect();
    let first_len = CHUNK / 1000 * 1000;
    let last_len = data.len() as u64 - first_len;
    {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        let mut w = c.create_log("log/a").unwrap();
        for (i, r) in records.iter().enumerate() {
            if i % 10 == 0 {
                w.append_sync(&[r]).unwrap();
            } else {
                w.append(r).unwrap();
            }
        }
        assert_eq!(read_all(&c, "log/a"), data);
        // The first chunk, sealed with the last record that fit, had its
        // zeros cut; the last chunk's replicas hold zeros past their data,
        // never past the chunk's end.
        let sizes = replica_sizes(&c);
        assert_eq!(sizes.len(), 6, "two chunks of three replicas");
        let sealed = sizes.iter().filter(|&&s| s == data_off + first_len).count();
        assert_eq!(sealed, 3, "{sizes:?}");
        let ahead = sizes
            .iter()
            .filter(|&&s| {
                s > data_off + last_len && s <= data_off + CHUNK && s != data_off + first_len
            })
            .count();
        assert_eq!(
            ahead, 3,
            "zeros ahead on the last chunk's replicas: {sizes:?}"
        );
        // An ordinary file gets none.
        let mut f = c.create("sst/b").unwrap();
        f.append(b"abc").unwrap();
        drop(f);
        assert!(replica_sizes(&c).contains(&(data_off + 3)));
        // A writer that never closes (a killed process): the zeros stay.
        // (The unsynced appends' checksum entries went through the replicas'
        // header maps: the restart below finds them in the page cache.)
        std::mem::forget(w);
    }
    // A restart cuts them; the log reads back whole and takes more appends.
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(read_all(&c, "log/a"), data);
    let mut sizes = replica_sizes(&c);
    sizes.sort();
    let (sst, a, b) = (data_off + 3, data_off + last_len, data_off + first_len);
    assert_eq!(sizes, [sst, sst, sst, a, a, a, b, b, b]);
    // A clean close cuts them too.
    let mut w = c.create_log("log/c").unwrap();
    w.append_sync(&[b"tail"]).unwrap();
    assert!(
        replica_sizes(&c)
            .iter()
            .filter(|&&s| s > data_off + 4)
            .count()
            >= 3
    );
    drop(w);
    assert_eq!(
        replica_sizes(&c)
            .iter()
            .filter(|&&s| s == data_off + 4)
            .count(),
        3
    );
    assert_eq!(read_all(&c, "log/c"), b"tail");
}

/// System calls and io_uring requests `c` has made so far.
fn io_ops(c: &Cluster) -> u64 {
    let s = c.io_stats();
    s.syscall_ops + s.uring_ops
}

#[test]
fn unsynced_log_appends_inside_the_zeros_are_stores_that_readers_and_a_restart_see() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(11, 60_000);
    let records: Vec<&[u8]> = data.chunks(1000).collect();
    {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        let mut w = c.create_log("log/a").unwrap();
        // The first append writes the zeros ahead (and the header map).
        w.append_sync(&[records[0]]).unwrap();
        let r = c.open("log/a").unwrap();
        let mut appends_io = 0;
        for (i, rec) in records.iter().enumerate().skip(1) {
            let before = io_ops(&c);
            assert_eq!(w.append(rec).unwrap(), i as u64 * 1000);
            appends_io += io_ops(&c) - before;
            if i % 7 == 0 {
                // A reader sees each stored append at once, verified.
                let n = (i + 1) * 1000;
                assert_eq!(r.read_at(0, n).unwrap(), &data[..n]);
            }
        }
        // Inside the zeros no append wrote anything.
        assert_eq!(appends_io, 0, "I/O requests of unsynced appends");
        assert_eq!(read_all(&c, "log/a"), data);
        // A killed writer: the stores are in the page cache.
        std::mem::forget(w);
    }
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(read_all(&c, "log/a"), data);
    // Every replica holds the whole log.
    for (_, p) in c.replica_files() {
        let f = std::fs::read(p).unwrap();
        let off = chunk::Layout::new(CHUNK).data_off as usize;
        assert_eq!(&f[off..], &data[..]);
    }
}

/// A cluster whose chunks hold several windows of zeros (see `zeros.rs`).
fn big_chunk_opts(dir: &Path) -> ClusterOptions {
    let mut o = opts(dir, 3);
    o.chunk_size = 8 << 20;
    o
}

#[test]
fn a_logs_zeros_are_renewed_in_the_background_before_the_appends_reach_their_end() {
    let dir = tempfile::tempdir().unwrap();
    let data_off = chunk::Layout::new(8 << 20).data_off;
    let c = Cluster::open(big_chunk_opts(dir.path())).unwrap();
    let mut w = c.create_log("log/a").unwrap();
    // The first append writes the first window itself.
    w.append_sync(&[&bytes(1, 1000)]).unwrap();
    let first = replica_sizes(&c);
    assert_eq!(first.len(), 3);
    let window_end = first.iter().copied().min().unwrap() - data_off;
    assert!(window_end >= 1 << 20, "{first:?}");
    // Unsynced appends into the window until fewer than EARLY bytes of
    // zeros are left ahead of the data.
    let mut end = 1000;
    let mut seed = 2;
    while window_end - end >= crate::zeros::EARLY {
        w.append(&bytes(seed, 1000)).unwrap();
        end += 1000;
        seed += 1;
    }
    // With no further append, every replica gets a window past the data.
    let deadline = Instant::now() + Duration::from_secs(30);
    let renewed = loop {
        let sizes = replica_sizes(&c);
        if sizes.iter().all(|&s| s >= data_off + end + (1 << 20)) {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::yield_now();
    };
    assert!(renewed, "{:?} for data ending at {end}", replica_sizes(&c));
    let written = read_all(&c, "log/a");
    assert_eq!(written.len() as u64, end);
    // A clean close cuts them.
    drop(w);
    assert!(replica_sizes(&c).iter().all(|&s| s == data_off + end));
}

#[test]
fn appends_that_outrun_the_renewal_of_the_zeros_lose_nothing_to_it() {
    let dir = tempfile::tempdir().unwrap();
    // Records just under the size that gets zeros and just over it (those
    // write no zeros of their own), so the appends reach the end of each
    // window, and go past it, while its renewal may still be writing.
    let data = bytes(17, 6 << 20);
    let mut records: Vec<&[u8]> = Vec::new();
    let mut rest = &data[..];
    for size in [60_000, 70_000, 1_000, 65_537].into_iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let (r, more) = rest.split_at(size.min(rest.len()));
        records.push(r);
        rest = more;
    }
    {
        let c = Cluster::open(big_chunk_opts(dir.path())).unwrap();
        let mut w = c.create_log("log/a").unwrap();
        for (i, r) in records.iter().enumerate() {
            if i % 25 == 0 {
                w.append_sync(&[r]).unwrap();
            } else {
                w.append(r).unwrap();
            }
        }
        assert_eq!(read_all(&c, "log/a"), data);
        // A killed writer: what the stores left in the page cache counts.
        std::mem::forget(w);
    }
    let c = Cluster::open(big_chunk_opts(dir.path())).unwrap();
    assert_eq!(read_all(&c, "log/a"), data);
    let off = chunk::Layout::new(8 << 20).data_off as usize;
    let files = c.replica_files();
    assert_eq!(files.len(), 3);
    for (_, p) in files {
        let f = std::fs::read(&p).unwrap();
        assert!(f[off..] == data[..], "{} differs from the log", p.display());
    }
}

#[test]
fn a_replica_failing_between_stored_appends_is_dropped_and_the_others_keep_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    let mut w = c.create_log("log/a").unwrap();
    w.append_sync(&[b"head"]).unwrap();
    let mut want = b"head".to_vec();
    let append = |w: &mut Box<dyn WritableFile>, want: &mut Vec<u8>, seed: u64| {
        let b = bytes(seed, 1000);
        w.append(&b).unwrap();
        want.extend_from_slice(&b);
    };
    for seed in 0..20 {
        append(&mut w, &mut want, seed);
    }
    let holders: Vec<usize> = c.inner.master.state.lock().chunks[&0].locations.clone();
    assert_eq!(holders.len(), 3);
    // One replica's disk fails while its appends are stores into mappings:
    // the next append is still acknowledged, by the other two, and the
    // failed one leaves the chunk.
    c.inject_fault(holders[1], Some(Fault::IoError));
    for seed in 20..40 {
        append(&mut w, &mut want, seed);
    }
    // Which path meets the failed disk first (an append's failover, or a
    // background sync of the mapped window that drops the replica) depends
    // on timing: either way the replica leaves the chunk, soon.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let left = loop {
        let locs = c.inner.master.state.lock().chunks[&0].locations.clone();
        if !locs.contains(&holders[1]) {
            break true;
        }
        if std::time::Instant::now() >= deadline {
            break false;
        }
        std::thread::yield_now();
    };
    assert!(left, "{:?}", c.health());
    let h = c.health();
    assert!(h.write_failovers + h.replicas_dropped > 0, "{h:?}");
    assert_eq!(read_all(&c, "log/a"), want);
    w.sync().unwrap();
    // Back: the chunk is copied to a good server, appends go on there too.
    c.inject_fault(holders[1], None);
    assert!(
        c.wait_for_repair(Duration::from_secs(30)),
        "{:?}",
        c.health()
    );
    for seed in 40..60 {
        append(&mut w, &mut want, seed);
    }
    assert_eq!(read_all(&c, "log/a"), want);
    std::mem::forget(w);
    drop(c);
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    assert_eq!(read_all(&c, "log/a"), want);
}

/// Every status line is `prefix: key=value key=value ...`, no debug output.
pub(super) fn assert_plain(lines: &[String]) {
    for l in lines {
        let (_, fields) = l
            .split_once(": ")
            .unwrap_or_else(|| panic!("no prefix: {l}"));
        for kv in fields.split(' ') {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("{kv:?} in {l}"));
            assert!(
                !k.is_empty() && !v.is_empty() && !v.contains(['{', '}', '"']),
                "{kv:?} in {l}"
            );
        }
    }
}

#[test]
fn readers_follow_a_growing_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 2)).unwrap();
    let mut w = c.create("log/live").unwrap();
    let r = c.open("log/live").unwrap();
    let rec = |i: u32| vec![(i % 251) as u8; 1000];
    let reader = {
        let r = r.clone();
        std::thread::spawn(move || {
            let mut seen = 0u64;
            while seen < 400 * 1000 {
                let len = r.len().unwrap();
                while seen + 1000 <= len {
                    assert_eq!(r.read_at(seen, 1000).unwrap(), rec((seen / 1000) as u32));
                    seen += 1000;
                }
                std::thread::yield_now();
            }
        })
    };
    for i in 0..400 {
        w.append(&rec(i)).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn restart_recovers_from_checkpoint_and_log_with_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let a = bytes(3, 3 * CHUNK as usize + 77);
    let b = bytes(4, 50_000);
    {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        let mut w = c.create("a").unwrap();
        for piece in a.chunks(10_000) {
            w.append(piece).unwrap();
        }
        w.sync().unwrap();
        c.checkpoint().unwrap();
        let mut w = c.create("b").unwrap();
        w.append_sync(&[&b]).unwrap();
        c.create("gone").unwrap();
    }
    // The last log record ("create gone") is torn by a crash mid-write, in
    // every copy of the master's files.
    for master in opts(dir.path(), 3).master_dirs() {
        let mut logs: Vec<_> = std::fs::read_dir(&master)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("oplog-")
            })
            .collect();
        logs.sort();
        let last = logs.pop().unwrap();
        let len = std::fs::metadata(&last).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&last)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
    }
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(read_all(&c, "a"), a);
    assert_eq!(read_all(&c, "b"), b);
    assert!(!c.exists("gone").unwrap());
    assert!(
        c.status()[1].contains("torn_tail_bytes="),
        "{:?}",
        c.status()
    );
    assert_ne!(c.inner.master.recovery.torn_bytes, 0);
    // Appends continue where the file ended.
    let mut w = c.open_append("b").unwrap();
    assert_eq!(w.append_sync(&[b"more"]).unwrap(), b.len() as u64);
    drop(w);
    drop(c);
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(c.size("b").unwrap(), b.len() as u64 + 4);
    assert_eq!(c.health().under_replicated, 0);
}

/// Flips one byte in `path` at a random offset.
pub(super) fn flip(path: &Path, rng: &mut impl Rng) -> u64 {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = f.metadata().unwrap().len();
    let at = rng.gen_range(0..len);
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= rng.gen_range(1..=255u8);
    f.write_all_at(&b, at).unwrap();
    at
}

/// XORs one byte of a replica file's data area (`at` bytes into the chunk).
pub(super) fn flip_data(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let at = chunk::Layout::new(CHUNK).data_off + at;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

pub(super) fn handle_of(path: &Path) -> u64 {
    let name = path.file_name().unwrap().to_str().unwrap();
    replica::parse_name(name).unwrap()
}

#[test]
fn checked_reads_take_one_copy_and_report_a_replica_that_fails_the_callers_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    o.heartbeat = Duration::from_secs(3600);
    // Reads rotate over replicas all written through the page cache (with
    // direct writes they keep to the one that is; see `tests/direct.rs`).
    o.direct_writes = false;
    let c = Cluster::open(o).unwrap();
    let want = bytes(21, 100_000);
    let mut w = c.create("sst/000001.sst").unwrap();
    w.append(&want).unwrap();
    w.sync().unwrap();
    drop(w);
    let r = c.open("sst/000001.sst").unwrap();
    let (off, len) = (70_000usize, 20_000usize);
    let part = &want[off..off + len];
    let read =
        |check: &mut dyn FnMut(&[u8]) -> bool| r.read_at_checked(off as u64, len, check).unwrap();
    // Bytes that pass: one call of the check, and the bytes asked for.
    let mut calls = 0;
    let got = read(&mut |b| {
        calls += 1;
        b == part
    });
    assert_eq!((got.as_slice(), calls), (part, 1));
    // A check that never passes is not the replicas' fault: the bytes of a
    // checked read come back, and no replica is reported.
    let mut calls = 0;
    let got = read(&mut |_| {
        calls += 1;
        false
    });
    assert_eq!((got.as_slice(), calls), (part, 2));
    assert_eq!(c.health().corruptions_detected, 0);
    // One replica's byte flipped under the range: whichever replica a read
    // takes, the caller gets the right bytes, and the rotation reaches the
    // damaged one, which its own checksums then condemn.
    let (_, victim) = c.replica_files().swap_remove(1);
    flip_data(&victim, off as u64 + 1234);
    let mut failed = 0;
    for _ in 0..6 {
        let mut first = true;
        let got = read(&mut |b| {
            let ok = b == part;
            failed += usize::from(first && !ok);
            first = false;
            ok
        });
        assert_eq!(got, part);
    }
    assert_eq!(failed, 1, "the damaged copy is read once, then never again");
    assert_eq!(c.health().corruptions_detected, 1);
    c.repair_now();
    let h = c.health();
    assert_eq!((h.under_replicated, h.pending_reports), (0, 0), "{h:?}");
    assert_eq!(read_all(&c, "sst/000001.sst"), want);
}

#[test]
fn thousand_byte_flips_are_detected_served_around_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    // Repairs are driven by the test (scrub, then repair), not by timers;
    // small chunks make many chunks, so each round flips many replicas.
    o.heartbeat = Duration::from_secs(3600);
    o.chunk_size = 64 << 10;
    let c = Cluster::open(o).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    // A log-like file (many small synced records) and a data file.
    let log = bytes(6, 5 * CHUNK as usize / 2 + 3000);
    let mut w = c.create("log/000007.log").unwrap();
    for piece in log.chunks(700) {
        w.append_sync(&[piece]).unwrap();
    }
    let sst = bytes(7, 5 * CHUNK as usize / 2 - 5000);
    let mut w = c.create("sst/000008.sst").unwrap();
    for piece in sst.chunks(30_000) {
        w.append(piece).unwrap();
    }
    w.sync().unwrap();
    let files = [("log/000007.log", &log), ("sst/000008.sst", &sst)];
    let mut flips = 0u64;
    while flips < 1000 {
        // At most one damaged replica per chunk per round: two good ones remain.
        let mut by_chunk: HashMap<u64, Vec<PathBuf>> = HashMap::new();
        for (_, p) in c.replica_files() {
            by_chunk.entry(handle_of(&p)).or_default().push(p);
        }
        let mut handles: Vec<u64> = by_chunk.keys().copied().collect();
        handles.sort_unstable();
        for h in &handles {
            assert_eq!(by_chunk[h].len(), 3, "chunk {h:x} fully replicated");
        }
        let mut round = 0;
        for h in handles {
            if flips == 1000 {
                break;
            }
            let reps = &by_chunk[&h];
            flip(&reps[rng.gen_range(0..reps.len())], &mut rng);
            flips += 1;
            round += 1;
        }
        // Reads return the right bytes whichever replica they hit.
        for (name, want) in files {
            let r = c.open(name).unwrap();
            for _ in 0..4 {
                let len = rng.gen_range(1..60_000);
                let off = rng.gen_range(0..want.len() - len);
                assert_eq!(
                    r.read_at(off as u64, len).unwrap()[..],
                    want[off..off + len]
                );
            }
            assert_eq!(&read_all(&c, name), want);
        }
        // What reads did not touch, the scrub finds; every flip is found once.
        c.scrub();
        assert_eq!(
            c.health().corruptions_detected,
            flips,
            "round of {round} flips"
        );
        c.repair_now();
        let h = c.health();
        assert_eq!((h.under_replicated, h.pending_reports), (0, 0), "{h:?}");
    }
    let h = c.health();
    assert_eq!(h.corruptions_detected, 1000);
    assert!(h.repaired >= 1000, "{h:?}");
    assert_eq!(c.scrub(), 0);
    for (name, want) in files {
        assert_eq!(&read_all(&c, name), want);
    }
}

#[test]
fn removing_a_chunkserver_directory_under_write_load() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    assert_eq!(c.replication(), 3);
    let stop = Arc::new(AtomicBool::new(false));
    let rec = |w: usize, i: u64| -> Vec<u8> {
        let mut v = format!("w{w} r{i:08} ").into_bytes();
        v.resize(300 + (i as usize * 37) % 2000, (i % 251) as u8);
        v
    };
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let c = c.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let name = format!("log/{w}");
                let mut f = c.create(&name).unwrap();
                let mut acked: Vec<(u64, usize)> = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) || i < 200 {
                    let r = rec(w, i);
                    let off = if i.is_multiple_of(4) {
                        f.append_sync(&[&r]).unwrap()
                    } else {
                        f.append(&r).unwrap()
                    };
                    acked.push((off, r.len()));
                    i += 1;
                }
                (name, acked)
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|k| {
            let c = c.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    for w in 0..3 {
                        let Ok(r) = c.open(&format!("log/{w}")) else {
                            continue;
                        };
                        let len = r.len().unwrap();
                        if len > 0 {
                            let n = len.min(5000) as usize;
                            let got = r.read_at(len - n as u64, n).unwrap();
                            assert_eq!(got.len(), n);
                            let head = r.read_at(0, len.min(8) as usize).unwrap();
                            assert_eq!(head[..2], format!("w{w}").as_bytes()[..], "reader {k}");
                            reads += 1;
                        }
                    }
                }
                reads
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(150));
    let victim = dir.path().join("cs1");
    // New replica files may appear while it is being removed: repeat.
    while victim.exists() {
        let _ = std::fs::remove_dir_all(&victim);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<_> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    // No acknowledged append lost, every byte where it was acknowledged.
    for (w, (name, acked)) in results.iter().enumerate() {
        let data = read_all(&c, name);
        let mut expect = 0u64;
        for (i, &(off, len)) in acked.iter().enumerate() {
            assert_eq!(off, expect);
            assert_eq!(data[off as usize..off as usize + len], rec(w, i as u64)[..]);
            expect += len as u64;
        }
        assert_eq!(data.len() as u64, expect);
    }
    // A write into a replica file opened before the removal still succeeds
    // (the file lives on unlinked): if no write created one since, it is the
    // heartbeat that finds the directory gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !c.health().servers[1].state.starts_with("failed") && Instant::now() < deadline {
        c.heartbeat();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        c.wait_for_repair(Duration::from_secs(20)),
        "{:?}",
        c.health()
    );
    let h = c.health();
    assert!(
        h.servers[1].state.starts_with("failed"),
        "{:?}",
        h.servers[1]
    );
    assert_eq!((h.under_replicated, h.lost), (0, 0));
    assert!(h.repaired > 0);
    // Every chunk has three replicas, none on the removed directory.
    let mut count: HashMap<u64, usize> = HashMap::new();
    for (s, p) in c.replica_files() {
        assert_ne!(s, 1);
        *count.entry(handle_of(&p)).or_default() += 1;
    }
    assert!(count.values().all(|&n| n == 3), "{count:?}");
    assert!(
        c.status()[0].contains("chunkservers=3/4"),
        "{:?}",
        c.status()
    );
}

#[test]
fn a_stale_replica_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    let first = bytes(8, 40_000);
    let mut w = c.create("f").unwrap();
    w.append_sync(&[&first]).unwrap();
    // Chunkserver 2 goes down and misses writes to the same chunk.
    c.set_offline(2, true);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.health().servers[2].state.starts_with("failed") {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = bytes(9, 10_000);
    w.append_sync(&[&second]).unwrap();
    let want = [first.clone(), second.clone()].concat();
    assert_eq!(read_all(&c, "f"), want);
    let stale = c.inner.servers[2]
        .dir
        .join("chunks")
        .join(replica::file_name(0));
    assert!(stale.exists());
    c.set_offline(2, false);
    // Back, it holds a stale replica: the master deletes it when the
    // server reports it, or a repair that comes first (the chunk lost a
    // replica when the server failed) copies the current one over it.
    // Which comes first is the machine's timing; neither serves it.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let h = c.health();
        if h.stale_replicas_deleted > 0 || h.repaired > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{h:?}");
        assert_eq!(read_all(&c, "f"), want);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(c.wait_for_repair(Duration::from_secs(5)));
    for _ in 0..20 {
        assert_eq!(read_all(&c, "f"), want);
    }
    // The replica on server 2 now is a fresh copy at the current version.
    let r = c.inner.servers[2].replica(0).unwrap();
    let v = c.inner.master.state.lock().chunks[&0].version;
    assert_eq!((r.version(), r.len()), (v, want.len() as u64));
}

#[test]
fn a_stale_replica_found_at_restart_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let first = bytes(10, 30_000);
    let second = bytes(11, 30_000);
    let saved = dir.path().join("saved");
    {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        let mut w = c.create("f").unwrap();
        w.append_sync(&[&first]).unwrap();
        // A copy of chunkserver 0's disk as it is now.
        drop(w);
        drop(c);
        copy_dir(&dir.path().join("cs0"), &saved);
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        let mut w = c.open_append("f").unwrap();
        w.append_sync(&[&second]).unwrap();
    }
    // The old disk comes back in place of the current one.
    std::fs::remove_dir_all(dir.path().join("cs0")).unwrap();
    std::fs::rename(&saved, dir.path().join("cs0")).unwrap();
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(c.health().stale_replicas_deleted, 1);
    for _ in 0..10 {
        assert_eq!(read_all(&c, "f"), [first.clone(), second.clone()].concat());
    }
    assert!(c.wait_for_repair(Duration::from_secs(5)));
    assert_eq!(c.scrub(), 0);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn disk_full_and_io_errors_on_one_server_are_survived_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    let mut w = c.create("f").unwrap();
    let mut want = Vec::new();
    let mut append = |w: &mut Box<dyn WritableFile>, n: usize, seed: u64| {
        let b = bytes(seed, n);
        w.append_sync(&[&b]).unwrap();
        want.extend_from_slice(&b);
    };
    append(&mut w, 20_000, 1);
    let holders: Vec<usize> = c.inner.master.state.lock().chunks[&0].locations.clone();
    c.inject_fault(holders[0], Some(Fault::DiskFull));
    append(&mut w, 20_000, 2);
    let h = c.health();
    assert!(h.servers[holders[0]].state.starts_with("full"), "{h:?}");
    assert!(h.servers[holders[0]].write_errors > 0);
    assert!(h.write_failovers > 0);
    c.inject_fault(holders[1], Some(Fault::IoError));
    append(&mut w, 300_000, 3);
    let bad = [holders[0], holders[1]];
    assert_eq!(read_all(&c, "f"), want);
    // New chunks avoid both; with two of four servers out, each chunk can
    // only have two replicas.
    let st = c.inner.master.state.lock();
    for h in &st.files[&0].chunks[1..] {
        let locs = &st.chunks[h].locations;
        assert!(locs.iter().all(|s| !bad.contains(s)), "{locs:?}");
    }
    drop(st);
    let lines = c.status();
    assert!(lines[0].starts_with("gfs: state=degraded"), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("state=full")), "{lines:?}");
    // Faults cleared: the servers return and replication is restored.
    c.inject_fault(holders[0], None);
    c.inject_fault(holders[1], None);
    assert!(
        c.wait_for_repair(Duration::from_secs(10)),
        "{:?}",
        c.health()
    );
    assert_eq!(read_all(&c, "f"), want);
    assert_eq!(c.health().state(), "ok");
}

#[test]
fn deleted_files_are_collected_lazily_and_open_readers_keep_reading() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 2);
    o.heartbeat = Duration::from_secs(3600);
    let c = Cluster::open(o).unwrap();
    let data = bytes(12, 3 * CHUNK as usize);
    c.create("x").unwrap().append(&data).unwrap();
    c.create("y").unwrap().append(b"keep").unwrap();
    let before = c.replica_files().len();
    let r = c.open("x").unwrap();
    c.delete("x").unwrap();
    assert!(!c.exists("x").unwrap());
    assert_eq!(c.collect_garbage().unwrap(), 0, "an open reader holds it");
    assert_eq!(r.read_at(0, data.len()).unwrap(), data);
    drop(r);
    assert_eq!(c.collect_garbage().unwrap(), 1);
    let after = c.replica_files().len();
    assert_eq!(after, 2, "{before} -> {after}: only y's chunk remains");
    // An orphan replica (a chunk allocated just before a crash) is removed.
    let (r, header) = c.inner.servers[0]
        .new_replica(999, 1, c.inner.layout, false)
        .unwrap();
    let o = r.open(false).unwrap();
    let mut chain = crate::io::Chain::new();
    o.init_chain(&mut chain, &header);
    assert!(c
        .inner
        .io
        .run_chains(&[chain])
        .into_iter()
        .all(|r| r.is_ok()));
    drop(o);
    let orphan = r.path.clone();
    drop(r);
    drop(c);
    let c = Cluster::open(opts(dir.path(), 2)).unwrap();
    assert!(!orphan.exists());
    assert_eq!(c.health().orphans_deleted, 1);
    assert_eq!(read_all(&c, "y"), b"keep");
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 2);
    o.chunk_size = 1000;
    assert!(Cluster::open(o).is_err());
    let mut o = opts(dir.path(), 2);
    o.replication = 3;
    assert!(Cluster::open(o).is_err());
    let o = ClusterOptions::new(dir.path().join("m"), vec![]);
    assert!(Cluster::open(o).is_err());
}

#[test]
fn for_data_dir_finds_chunkservers() {
    let dir = tempfile::tempdir().unwrap();
    let o = ClusterOptions::for_data_dir(dir.path());
    assert_eq!(o.master_dir, dir.path().join("master"));
    assert_eq!(o.chunkserver_dirs.len(), 3);
    assert_eq!(o.replication(), 3);
    for i in [0, 1, 2, 10] {
        std::fs::create_dir(dir.path().join(format!("chunkserver-{i}"))).unwrap();
    }
    let o = ClusterOptions::for_data_dir(dir.path());
    assert_eq!(o.chunkserver_dirs.len(), 4);
    assert_eq!(o.chunkserver_dirs[3], dir.path().join("chunkserver-10"));
}

#[test]
fn when_every_server_is_full_appends_fail_with_enospc_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 2)).unwrap();
    let data = bytes(13, 70_000);
    let mut w = c.create("f").unwrap();
    w.append_sync(&[&data]).unwrap();
    for s in 0..2 {
        c.inject_fault(s, Some(Fault::DiskFull));
    }
    for n in [10, CHUNK as usize] {
        match w.append_sync(&[&vec![1u8; n]]) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{source}")
            }
            other => panic!("expected ENOSPC, got {other:?}"),
        }
    }
    assert!(matches!(
        c.create("g").unwrap().append(b"x"),
        Err(Error::Io { .. })
    ));
    assert_eq!(read_all(&c, "f"), data);
    for s in 0..2 {
        c.inject_fault(s, None);
    }
    c.heartbeat();
    assert_eq!(w.append_sync(&[b"more"]).unwrap(), data.len() as u64);
    assert_eq!(c.scrub(), 0, "failed appends left no damage behind");
    assert_eq!(read_all(&c, "f").len(), data.len() + 4);
}

#[test]
fn the_chunk_size_may_change_between_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut want = Vec::new();
    for (round, size) in [(0u64, CHUNK), (1, 64 << 10), (2, 4 * CHUNK)]
        .into_iter()
        .enumerate()
    {
        let mut o = opts(dir.path(), 4);
        o.chunk_size = size.1;
        o.replication = 3;
        let c = Cluster::open(o).unwrap();
        let mut w = if round == 0 {
            c.create("f").unwrap()
        } else {
            c.open_append("f").unwrap()
        };
        for i in 0..20u64 {
            let b = bytes(size.0 * 100 + i, 9000);
            w.append(&b).unwrap();
            want.extend_from_slice(&b);
        }
        w.sync().unwrap();
        assert_eq!(read_all(&c, "f"), want);
        // Copies keep each chunk's own size.
        c.set_offline(round, true);
        c.heartbeat();
        assert!(
            c.wait_for_repair(Duration::from_secs(10)),
            "{:?}",
            c.health()
        );
        assert_eq!(c.scrub(), 0);
        assert_eq!(read_all(&c, "f"), want);
    }
}
