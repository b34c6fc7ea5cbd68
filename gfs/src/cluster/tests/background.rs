//! Tests of the background work: scrub, throttled parallel re-replication,
//! readers moving to new copies, and damage found at load.

use super::super::*;
use super::{assert_plain, bytes, flip_data, handle_of, opts, read_all};
use std::os::unix::fs::FileExt;
use std::time::Instant;

const CHUNK: u64 = 128 << 10;

/// Polls `cond` every few milliseconds until it holds; false at the deadline.
fn wait(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

fn write_file(c: &Cluster, name: &str, data: &[u8]) {
    let mut w = c.create(name).unwrap();
    for piece in data.chunks(50_000) {
        w.append(piece).unwrap();
    }
    w.sync().unwrap();
}

#[test]
fn background_scrub_finds_repairs_and_reports_a_flipped_byte() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    o.scrub_rate = 64 << 20;
    o.scrub_idle = Duration::from_millis(30);
    o.scrub_interval = Duration::from_millis(50);
    let c = Cluster::open(o).unwrap();
    let data = bytes(11, 3 * CHUNK as usize - 100);
    write_file(&c, "sst/1.sst", &data);
    let (_, victim) = c.replica_files()[1].clone();
    flip_data(&victim, 70_000);
    let ok = wait(Duration::from_secs(60), || {
        let h = c.health();
        h.scrub.corruptions == 1 && h.scrub.repaired == 1 && h.under_replicated == 0
    });
    let h = c.health();
    assert!(ok, "{h:?}");
    assert_eq!(h.corruptions_detected, 1);
    assert!(h.scrub.pass >= 1 && h.scrub.total >= 9, "{:?}", h.scrub);
    assert_eq!(read_all(&c, "sst/1.sst"), data);
    // A later pass finds the new copy good and nothing else.
    let pass = h.scrub.pass;
    assert!(wait(Duration::from_secs(60), || {
        let s = c.health().scrub;
        s.pass > pass + 1 && s.last_pass_end.is_some()
    }));
    assert_eq!(c.health().scrub.corruptions, 1);
    let lines = c.status();
    let scrub = lines.iter().find(|l| l.starts_with("gfs scrub: ")).unwrap();
    assert!(scrub.contains(" corruptions=1 repaired=1 "), "{scrub}");
    assert!(!scrub.contains("last_pass_end=-"), "{scrub}");
    assert_plain(&lines);
}

#[test]
fn scrub_waits_for_idle_clients_and_keeps_to_its_rate() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 3);
    o.scrub_idle = Duration::from_secs(3600);
    let c = Cluster::open(o).unwrap();
    write_file(&c, "a", &bytes(1, 100_000));
    assert!(wait(Duration::from_secs(30), || c.health().scrub.state
        == "paused"));
    let s = c.health().scrub;
    assert_eq!((s.scanned, s.bytes), (0, 0), "{s:?}");
    drop(c);

    let dir = tempfile::tempdir().unwrap();
    let rate = 1 << 20;
    let mut o = opts(dir.path(), 3);
    o.scrub_rate = 0;
    let c = Cluster::open(o.clone()).unwrap();
    write_file(&c, "b", &bytes(2, 2 * CHUNK as usize + 7));
    assert_eq!(c.health().scrub.state, "off");
    drop(c);
    o.scrub_rate = rate;
    o.scrub_idle = Duration::from_millis(10);
    let c = Cluster::open(o).unwrap();
    assert!(wait(Duration::from_secs(60), || c
        .health()
        .scrub
        .last_pass_end
        .is_some()));
    let s = c.health().scrub;
    // Three replicas of three chunks, each header and data read once.
    assert_eq!((s.scanned, s.total), (9, 9), "{s:?}");
    assert!(s.bytes >= 3 * (2 * CHUNK + 7), "{s:?}");
    let floor = s.bytes as f64 / rate as f64;
    assert!(s.last_pass_secs >= floor * 0.95, "{s:?} floor {floor}");
}

#[test]
fn open_readers_use_a_re_copied_replica() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    let data = bytes(3, 50_000);
    write_file(&c, "one-chunk", &data);
    let r = c.open("one-chunk").unwrap();
    assert_eq!(r.read_at(0, data.len()).unwrap(), data);
    let holders: Vec<usize> = c.replica_files().iter().map(|(s, _)| *s).collect();
    assert_eq!(holders.len(), 3);
    let spare = (0..4).find(|s| !holders.contains(s)).unwrap();
    c.set_offline(holders[0], true);
    // The heartbeat has failed the server once its replicas are forgotten.
    assert!(wait(Duration::from_secs(30), || c.health().servers
        [holders[0]]
        .replicas
        == 0));
    assert!(c.wait_for_repair(Duration::from_secs(60)));
    assert!(c.replica_files().iter().any(|(s, _)| *s == spare));
    let before = c.health().servers[spare].reads;
    for i in 0..12 {
        assert_eq!(
            r.read_at(i * 100, 100).unwrap(),
            data[i as usize * 100..][..100]
        );
    }
    let after = c.health().servers[spare].reads;
    assert!(after > before, "the new copy served none of 12 reads");
}

#[test]
fn re_replication_is_throttled_and_copies_several_chunks_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let rate = 1 << 20;
    let mut o = opts(dir.path(), 4);
    o.repair_rate = rate;
    o.repair_parallel = 3;
    let c = Cluster::open(o).unwrap();
    let data = bytes(4, 8 * CHUNK as usize);
    write_file(&c, "big", &data);
    let on0 = c.replica_files().iter().filter(|(s, _)| *s == 0).count();
    assert!(on0 >= 4, "{on0} chunks on server 0");
    let bytes0 = c.health().servers[0].bytes;
    let t0 = Instant::now();
    c.set_offline(0, true);
    let mut most = 0;
    let mut lines_seen = false;
    let ok = wait(Duration::from_secs(120), || {
        let h = c.health();
        if h.servers[0].replicas != 0 {
            return false;
        }
        most = most.max(h.repairing.len());
        if !h.repairing.is_empty() {
            let lines = c.status();
            lines_seen |= lines.iter().any(|l| l.starts_with("gfs copying: chunk="));
        }
        h.under_replicated == 0 && h.repair_queue == 0 && h.repairing.is_empty()
    });
    let took = t0.elapsed().as_secs_f64();
    let h = c.health();
    assert!(ok, "{h:?}");
    assert_eq!(h.repair_bytes, bytes0, "{h:?}");
    assert!(
        took >= h.repair_bytes as f64 / rate as f64 * 0.95,
        "{took}s"
    );
    assert!((2..=3).contains(&most), "{most} copies at once");
    assert!(lines_seen);
    assert_eq!(read_all(&c, "big"), data);
}

#[test]
fn a_damaged_last_block_at_load_is_corruption_but_a_torn_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(5, CHUNK as usize + 5000);
    let last_chunk = |c: &Cluster| -> Vec<PathBuf> {
        let files = c.replica_files();
        let h = files.iter().map(|(_, p)| handle_of(p)).max().unwrap();
        files
            .into_iter()
            .map(|(_, p)| p)
            .filter(|p| handle_of(p) == h)
            .collect()
    };
    let victims = {
        let c = Cluster::open(opts(dir.path(), 3)).unwrap();
        write_file(&c, "f", &data);
        last_chunk(&c)
    };
    // Damage: the block's bytes are all there but one differs.
    flip_data(&victims[0], 100);
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    let h = c.health();
    assert_eq!(h.corruptions_detected, 1, "{h:?}");
    assert_eq!(h.servers.iter().map(|s| s.corrupt).sum::<u64>(), 1);
    assert!(c.wait_for_repair(Duration::from_secs(60)));
    assert_eq!(read_all(&c, "f"), data);
    let victims = last_chunk(&c);
    drop(c);
    // A torn append: the entry is there, the data never reached the disk.
    let off = chunk::Layout::new(CHUNK).data_off + 1000;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&victims[1])
        .unwrap();
    f.set_len(off).unwrap();
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(c.health().corruptions_detected, 0);
    assert!(c.wait_for_repair(Duration::from_secs(60)));
    assert_eq!(read_all(&c, "f"), data);
}

/// File `f` of 196 KiB in one chunk of four blocks (three full, a partial
/// fourth) on `replicas` servers: the options, the data, and the first
/// replica's server and file.
fn one_small_chunk(
    dir: &std::path::Path,
    replicas: usize,
    seed: u64,
) -> (ClusterOptions, Vec<u8>, (usize, PathBuf)) {
    let mut o = opts(dir, replicas);
    o.chunk_size = 4 * chunk::BLOCK;
    let data = bytes(seed, 196 << 10);
    let c = Cluster::open(o.clone()).unwrap();
    write_file(&c, "f", &data);
    let victim = c.replica_files()[0].clone();
    (o, data, victim)
}

/// Flips one reserved byte in block 1's checksum entry of a replica file.
fn flip_entry_byte(victim: &std::path::Path, chunk_size: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(victim)
        .unwrap();
    let at = chunk::Layout::new(chunk_size).entry_off(1) + 5;
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 1], at).unwrap();
}

#[test]
fn a_damaged_checksum_entry_at_load_is_corruption_and_the_chunk_is_copied_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (o, data, (victim_server, victim)) = one_small_chunk(dir.path(), 3, 8);
    let size = o.chunk_size;
    flip_entry_byte(&victim, size);
    let c = Cluster::open(o.clone()).unwrap();
    let h = c.health();
    assert_eq!(h.corruptions_detected, 1, "{h:?}");
    assert_eq!(h.servers[victim_server].corrupt, 1, "{h:?}");
    assert_eq!(read_all(&c, "f"), data, "served whole by the good copies");
    assert!(c.wait_for_repair(Duration::from_secs(60)));
    let h = c.health();
    assert_eq!(h.repaired, 1, "{h:?}");
    // The damaged file was replaced by a whole copy on its server: three
    // replicas of the whole chunk, every one verifying.
    let files = c.replica_files();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        files.contains(&(victim_server, victim.clone())),
        "{files:?}"
    );
    for (_, p) in &files {
        let len = std::fs::metadata(p).unwrap().len();
        assert_eq!(
            len,
            chunk::Layout::new(size).data_off + data.len() as u64,
            "{}",
            p.display()
        );
    }
    assert_eq!(c.scrub(), 0);
    assert_eq!(read_all(&c, "f"), data);
}

#[test]
fn a_damaged_checksum_entry_found_when_a_server_rejoins_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let size = 4 * chunk::BLOCK;
    let mut o = opts(dir.path(), 3);
    o.chunk_size = size;
    let c = Cluster::open(o).unwrap();
    let data = bytes(10, 196 << 10);
    write_file(&c, "f", &data);
    let victim = c.inner.servers[2]
        .dir
        .join("chunks")
        .join(replica::file_name(0));
    // Down, and its replicas forgotten (so only a rejoin sees the file).
    c.set_offline(2, true);
    assert!(wait(Duration::from_secs(30), || c.health().servers[2]
        .replicas
        == 0));
    flip_entry_byte(&victim, size);
    c.set_offline(2, false);
    assert!(wait(Duration::from_secs(30), || {
        let h = c.health();
        h.corruptions_detected == 1 && h.under_replicated == 0 && h.repair_queue == 0
    }));
    let h = c.health();
    assert_eq!((h.servers[2].corrupt, h.repaired), (1, 1), "{h:?}");
    assert_eq!(h.scrub.corruptions, 0, "found at load, not by a scrub");
    // Server 2 holds a fresh, whole copy again.
    let r = c.inner.servers[2].replica(0).unwrap();
    assert!(!r.is_bad());
    assert_eq!(r.len(), data.len() as u64);
    assert_eq!(c.scrub(), 0);
    assert_eq!(read_all(&c, "f"), data);
}

#[test]
fn a_sole_copy_with_a_damaged_checksum_entry_is_kept_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (o, data, (_, victim)) = one_small_chunk(dir.path(), 1, 9);
    let size = o.chunk_size;
    flip_entry_byte(&victim, size);
    let before = std::fs::read(&victim).unwrap();
    for _ in 0..2 {
        let c = Cluster::open(o.clone()).unwrap();
        let h = c.health();
        assert_eq!((h.corruptions_detected, h.lost), (1, 1), "{h:?}");
        // Nothing wrong is served, and nothing is cut or deleted: the
        // file waits, whole, for someone to look at it.
        assert!(c.open("f").unwrap().read_at(0, data.len()).is_err());
        c.heartbeat();
        c.repair_now();
        drop(c);
        assert_eq!(std::fs::read(&victim).unwrap(), before);
    }
}

#[test]
fn the_master_directory_removed_while_open_and_before_a_start_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let master = dir.path().join("master");
    let a = bytes(6, CHUNK as usize + 99);
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    write_file(&c, "a", &a);
    // The heartbeat may write there meanwhile: repeat until it is gone.
    while master.exists() {
        let _ = std::fs::remove_dir_all(&master);
    }
    let b = bytes(7, 1000);
    write_file(&c, "b", &b);
    // The heartbeat notices and writes a checkpoint and a new log there.
    assert!(wait(Duration::from_secs(30), || {
        c.status()
            .iter()
            .any(|l| l.starts_with("gfs master copy 0: ") && l.ends_with(" state=ok"))
            && has_checkpoint(&master)
    }));
    c.rename("b", "b2").unwrap();
    drop(c);
    std::fs::remove_dir_all(&master).unwrap();
    let c = Cluster::open(opts(dir.path(), 3)).unwrap();
    assert_eq!(read_all(&c, "a"), a);
    assert_eq!(read_all(&c, "b2"), b);
    assert!(!c.exists("b").unwrap());
    let h = c.status();
    assert!(h[1].contains(" copies=4 copies_ok=4 "), "{h:?}");
    assert!(h[1].contains(" copies_recreated=1 "), "{h:?}");
    assert!(has_checkpoint(&master));
}

fn has_checkpoint(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("checkpoint-") && !n.ends_with(".tmp"))
        })
}

/// Rewrites a replica file (its cluster closed) as format 1 wrote it:
/// seahash block sums, and no tail slots (so a load checks every block).
fn rewrite_as_seahash(path: &Path) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut raw = [0u8; chunk::SUPER_LEN as usize];
    f.read_exact_at(&mut raw, 0).unwrap();
    let mut sb = chunk::Superblock::decode(&raw).unwrap();
    assert_eq!(sb.sum, chunk::BlockSum::Xxh3, "new replicas use XXH3");
    sb.sum = chunk::BlockSum::Seahash;
    f.write_all_at(&sb.encode(), 0).unwrap();
    let layout = chunk::Layout::with_sum(sb.chunk_size, sb.sum);
    for k in 0..layout.blocks {
        let mut e = [0u8; chunk::ENTRY_LEN as usize];
        f.read_exact_at(&mut e, layout.entry_off(k)).unwrap();
        let entry = chunk::Entry::decode(&e).unwrap();
        if entry.len == 0 {
            continue;
        }
        let mut data = vec![0u8; entry.len as usize];
        f.read_exact_at(&mut data, layout.data_off + k * chunk::BLOCK)
            .unwrap();
        f.write_all_at(&sb.sum.entry(&data).encode(), layout.entry_off(k))
            .unwrap();
    }
    if let Some(off) = layout.slots_off {
        f.write_all_at(&[0u8; 2 * chunk::SLOT_LEN as usize], off)
            .unwrap();
    }
}

/// The block hash a replica file's superblock names.
fn block_sum_of(path: &Path) -> chunk::BlockSum {
    let mut raw = [0u8; chunk::SUPER_LEN as usize];
    let f = std::fs::File::open(path).unwrap();
    f.read_exact_at(&mut raw, 0).unwrap();
    chunk::Superblock::decode(&raw).unwrap().sum
}

#[test]
fn seahash_replicas_from_before_xxh3_are_read_scrubbed_and_copied_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let data = bytes(6, 2 * CHUNK as usize + 7000);
    let files = {
        let c = Cluster::open(opts(dir.path(), 4)).unwrap();
        write_file(&c, "old", &data);
        c.replica_files()
    };
    for (_, p) in &files {
        rewrite_as_seahash(p);
    }
    let c = Cluster::open(opts(dir.path(), 4)).unwrap();
    assert_eq!(c.health().corruptions_detected, 0, "{:?}", c.health());
    assert_eq!(read_all(&c, "old"), data);
    assert_eq!(c.scrub(), 0);
    // New files get XXH3 beside the old ones.
    write_file(&c, "new", &data[..5000]);
    let old: Vec<u64> = files.iter().map(|(_, p)| handle_of(p)).collect();
    for (_, p) in c.replica_files() {
        let want = if old.contains(&handle_of(&p)) {
            chunk::BlockSum::Seahash
        } else {
            chunk::BlockSum::Xxh3
        };
        assert_eq!(block_sum_of(&p), want, "{}", p.display());
    }
    // A server goes: its replicas are copied from seahash sources, in seahash.
    let lost = files.iter().filter(|(s, _)| *s == 0).count();
    assert!(lost > 0, "server 0 held no replica");
    c.set_offline(0, true);
    let copies = || -> Vec<PathBuf> {
        c.replica_files()
            .into_iter()
            .filter(|(_, p)| old.contains(&handle_of(p)) && !files.iter().any(|(_, f)| f == p))
            .map(|(_, p)| p)
            .collect()
    };
    // Done once the master has dropped server 0's replicas and copied them.
    let done = wait(Duration::from_secs(60), || {
        let h = c.health();
        h.servers[0].replicas == 0
            && h.under_replicated == 0
            && h.repair_queue == 0
            && h.repairing.is_empty()
            && copies().len() == lost
    });
    assert!(done, "{:?}", c.health());
    let copies = copies();
    assert_eq!(copies.len(), lost, "one copy per replica lost");
    for p in &copies {
        assert_eq!(block_sum_of(p), chunk::BlockSum::Seahash, "{}", p.display());
    }
    assert_eq!(c.scrub(), 0);
    assert_eq!(read_all(&c, "old"), data);
}

#[test]
fn appends_after_a_re_copy_reach_the_new_replica() {
    // A writer keeps the replicas of its last append for the next one: a
    // copy installed since must join them. The copy is paced slowly, so
    // that appends made while it runs keep a set without it.
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(dir.path(), 4);
    o.repair_rate = 4 << 10;
    let c = Cluster::open(o).unwrap();
    let mut w = c.create_log("log/b").unwrap();
    w.append_sync(&[b"head"]).unwrap();
    let mut want = b"head".to_vec();
    let mut append = |w: &mut Box<dyn WritableFile>, seed: u64| {
        let b = bytes(seed, 1000);
        w.append(&b).unwrap();
        want.extend_from_slice(&b);
    };
    for seed in 0..20 {
        append(&mut w, seed);
    }
    let locations = |c: &Cluster| c.inner.master.state.lock().chunks[&0].locations.clone();
    let holders = locations(&c);
    assert_eq!(holders.len(), 3);
    let spare = (0..4).find(|s| !holders.contains(s)).unwrap();
    let failed = |c: &Cluster, s: usize| c.health().servers[s].replicas == 0;
    c.set_offline(holders[0], true);
    assert!(wait(Duration::from_secs(30), || failed(&c, holders[0])));
    for seed in 20..25 {
        append(&mut w, seed);
    }
    assert!(
        !locations(&c).contains(&spare),
        "the copy was not slow enough"
    );
    assert!(
        c.wait_for_repair(Duration::from_secs(60)),
        "{:?}",
        c.health()
    );
    assert!(locations(&c).contains(&spare), "{:?}", locations(&c));
    for seed in 25..40 {
        append(&mut w, seed);
    }
    w.sync().unwrap();
    // Only the copy is left to read from: it must hold every append.
    for &s in &holders[1..] {
        c.set_offline(s, true);
        assert!(wait(Duration::from_secs(30), || failed(&c, s)));
    }
    assert_eq!(read_all(&c, "log/b"), want);
    std::mem::forget(w);
}
