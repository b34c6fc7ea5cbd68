//! Replicas written around the page cache (`direct.rs`): what they hold,
//! what reads and loads see, and that damage to them is found.

use super::*;
use crate::cluster::replica::{read_verified, ReadPiece};

/// Every replica of `c` with its server, skipping bad ones.
fn replicas(c: &Cluster) -> Vec<(usize, Arc<replica::Replica>)> {
    c.inner
        .servers
        .iter()
        .flat_map(|s| {
            s.handles()
                .into_iter()
                .filter_map(|h| s.replica(h))
                .filter(|r| !r.is_bad())
                .map(|r| (s.id, r))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Appends `data` to a new file `name` in pieces of awkward sizes (none
/// a multiple of a page, some across chunks), then syncs it.
fn write_unaligned(c: &Cluster, name: &str, data: &[u8]) {
    let mut w = c.create(name).unwrap();
    let sizes = [1usize, 4095, 5000, 70_001, 3, 200_000, 4097, 12_345];
    let mut pos = 0;
    for n in sizes.iter().cycle() {
        if pos == data.len() {
            break;
        }
        let n = (*n).min(data.len() - pos);
        let (a, b) = data[pos..pos + n].split_at(n / 3);
        w.append_vectored(&[a, b]).unwrap();
        pos += n;
    }
    w.sync().unwrap();
}

/// Whether this machine's test directories take `O_DIRECT` (tmpfs before
/// Linux 6.6 does not): the tests below check the direct path only there.
fn direct_here(c: &Cluster) -> bool {
    c.inner.servers.iter().all(|s| s.gate.direct())
}

#[test]
fn replicas_written_around_the_page_cache_read_back_byte_exact_with_an_unaligned_tail() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(31, 3 * CHUNK as usize + 777);
    {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        write_unaligned(&c, "sst/1.sst", &data);
        let reps = replicas(&c);
        if direct_here(&c) {
            // Two replicas of every chunk went around the page cache.
            let mut per_chunk: HashMap<u64, usize> = HashMap::new();
            for (_, r) in &reps {
                *per_chunk.entry(r.handle).or_default() += usize::from(r.is_direct());
            }
            assert_eq!(per_chunk.len(), 4);
            assert!(per_chunk.values().all(|&n| n == 2), "{per_chunk:?}");
        } else {
            eprintln!("O_DIRECT refused here: checking the buffered fallback only");
        }
        // Each replica on its own, verified against its checksums, holds
        // exactly the chunk's bytes, the unaligned end included.
        let starts: HashMap<u64, u64> = {
            let st = c.inner.master.state.lock();
            let f = st.files.values().next().unwrap();
            let mut at = 0;
            f.chunks
                .iter()
                .map(|h| {
                    let start = at;
                    let c = &st.chunks[h];
                    at += c
                        .sealed_len
                        .unwrap_or_else(|| c.ctl.len.load(Ordering::Acquire));
                    (*h, start)
                })
                .collect()
        };
        for (s, r) in &reps {
            let start = starts[&r.handle] as usize;
            let len = r.len() as usize;
            let piece = ReadPiece {
                replica: r,
                offset: 0,
                len,
            };
            let got = read_verified(&c.inner.io, &[piece]).pop().unwrap();
            let got = got.unwrap_or_else(|e| panic!("server {s}: {e}"));
            assert_eq!(got, data[start..start + len], "server {s}");
            // And its last page, alone (the tail a later append rewrites).
            let tail_off = (len as u64).saturating_sub(100);
            let piece = ReadPiece {
                replica: r,
                offset: tail_off,
                len: len - tail_off as usize,
            };
            let got = read_verified(&c.inner.io, &[piece]).pop().unwrap().unwrap();
            assert_eq!(got, data[start + tail_off as usize..start + len]);
        }
        assert_eq!(read_all(&c, "sst/1.sst"), data);
        assert_eq!(c.health().corruptions_detected, 0);
        // The sync cut the zeros that padded the last direct write.
        assert_sizes(&c);
    }
    // A restart loads every replica (checking each past its last sync and
    // cutting the zeros that pad a direct write's last page).
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(read_all(&c, "sst/1.sst"), data);
    let h = c.health();
    assert_eq!(
        (h.corruptions_detected, h.under_replicated),
        (0, 0),
        "{h:?}"
    );
    assert_eq!(c.scrub(), 0);
    assert_sizes(&c);
}

/// Every replica file holds its header and its data, nothing past them.
fn assert_sizes(c: &Cluster) {
    let data_off = chunk::Layout::new(CHUNK).data_off;
    for (_, r) in replicas(c) {
        let size = std::fs::metadata(&r.path).unwrap().len();
        assert_eq!(size, data_off + r.len(), "{}", r.path.display());
    }
}

#[test]
fn reads_prefer_the_buffered_replica_and_appends_continue_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(32, 300_000);
    let (head, rest) = data.split_at(123_457);
    {
        let mut o = opts(dir.path(), 3);
        o.scrub_rate = 0;
        let c = Cluster::open(o).unwrap();
        write_unaligned(&c, "sst/2.sst", head);
        if direct_here(&c) {
            let reads = |s: usize| c.inner.servers[s].gate.stats.reads.load(Ordering::Relaxed);
            let before: Vec<u64> = (0..3).map(reads).collect();
            let r = c.open("sst/2.sst").unwrap();
            for _ in 0..6 {
                assert_eq!(r.read_at(1000, 5000).unwrap(), head[1000..6000]);
            }
            // One chunk: every read went to its replica written through
            // the page cache, none to the two written around it.
            let reps = replicas(&c);
            assert_eq!(reps.len(), 3);
            for (s, rep) in reps {
                let n = reads(s) - before[s];
                if rep.is_direct() {
                    assert_eq!(n, 0, "server {s} holds a direct replica");
                } else {
                    assert!(n >= 6, "server {s}: {n} reads");
                }
            }
        }
    }
    // Reopened for appending (the tail comes from a replica on disk).
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    let mut w = c.open_append("sst/2.sst").unwrap();
    w.append(rest).unwrap();
    w.sync().unwrap();
    drop(w);
    assert_eq!(read_all(&c, "sst/2.sst"), data);
    assert_eq!(c.scrub(), 0);
    assert_eq!(c.health().corruptions_detected, 0);
}

#[test]
fn a_flipped_byte_in_a_replica_written_around_the_page_cache_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    o.heartbeat = Duration::from_secs(3600);
    let c = Cluster::open(o).unwrap();
    let data = bytes(33, 200_001);
    write_unaligned(&c, "sst/3.sst", &data);
    let reps = replicas(&c);
    let victim = reps
        .iter()
        .find(|(_, r)| r.is_direct())
        .or_else(|| reps.first())
        .map(|(_, r)| r.clone())
        .unwrap();
    // In the last, partly filled page of the victim's data: the page a
    // direct append writes whole.
    let at = victim.len() - 3;
    flip_data(&victim.path, at);
    let piece = ReadPiece {
        replica: &victim,
        offset: at - 10,
        len: 12,
    };
    assert!(
        read_verified(&c.inner.io, &[piece]).pop().unwrap().is_err(),
        "the damaged replica fails its own check"
    );
    // The scrub finds it, the reader is served around it, repair replaces it.
    assert_eq!(read_all(&c, "sst/3.sst"), data);
    if direct_here(&c) {
        // Reads took the buffered replica: the scrub finds the damage.
        assert_eq!(c.scrub(), 1);
    } else {
        c.scrub();
    }
    assert_eq!(c.health().corruptions_detected, 1);
    c.repair_now();
    let h = c.health();
    assert_eq!((h.under_replicated, h.pending_reports), (0, 0), "{h:?}");
    assert_eq!(read_all(&c, "sst/3.sst"), data);
    assert_eq!(c.scrub(), 0);
}

#[test]
fn without_direct_writes_every_replica_is_buffered() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    o.direct_writes = false;
    let c = Cluster::open(o).unwrap();
    let data = bytes(34, 150_000);
    write_unaligned(&c, "sst/4.sst", &data);
    assert!(replicas(&c).iter().all(|(_, r)| !r.is_direct()));
    // A log never goes around the page cache either.
    let c2dir = tempfile::tempdir().unwrap();
    let c2 = Cluster::open(opts(c2dir.path(), 3)).unwrap();
    let mut w = c2.create_log("log/1.log").unwrap();
    w.append(&data).unwrap();
    w.sync().unwrap();
    assert!(replicas(&c2).iter().all(|(_, r)| !r.is_direct()));
    assert_eq!(read_all(&c, "sst/4.sst"), data);
}
