//! Tests of replicas: appends, reads, reloads, torn tails and damage.

use super::load::{looks_torn, PAGE};
use super::*;
use crate::cluster::fds::FdCache;
use crate::io::{Chain, Io, IoMode};
use std::path::Path;
use std::time::{Duration, Instant};

fn new_replica(dir: &Path, chunk_size: u64) -> (Arc<Replica>, Io) {
    new_replica_with(dir, Layout::new(chunk_size))
}

fn new_replica_with(dir: &Path, layout: Layout) -> (Arc<Replica>, Io) {
    let io = Io::new(IoMode::Uring);
    let gate = Arc::new(Gate::new(0, FdCache::new(16)));
    let (r, header) = Replica::create(gate, dir.join(file_name(5)), 5, 1, layout).unwrap();
    let o = r.open(false).unwrap();
    let mut c = Chain::new();
    o.init_chain(&mut c, &header);
    assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
    drop(o);
    (r, io)
}

fn append(io: &Io, r: &Replica, tail: &mut Vec<u8>, data: &[u8]) {
    let len = r.len();
    let sums = chunk::append_sums(r.layout.sum, len, tail, &[data]);
    let enc = sums.encoded();
    let o = r.open(true).unwrap();
    let mut c = Chain::new();
    let how = Append {
        sync: true,
        zeros: false,
        mapped_entries: false,
    };
    o.append_chain(&mut c, len, &[data], &enc, how);
    assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
    r.commit_append(len + data.len() as u64, &sums);
    sums.apply_tail(tail, &[data]);
}

fn read(io: &Io, r: &Replica, off: u64, len: usize) -> Result<Vec<u8>, ReadFail> {
    read_verified(
        io,
        &[ReadPiece {
            replica: r,
            offset: off,
            len,
        }],
    )
    .pop()
    .unwrap()
}

/// A first unsynced log append of `data` to an empty replica, as the
/// chunk layer writes one: zeros ahead and the data written, the entries
/// stored through the header map (mapped here). The caller holds the I/O
/// lock.
fn first_mapped_log_append(io: &Io, r: &Replica, data: &[u8]) {
    let sums = chunk::append_sums(r.layout.sum, 0, &[], &[data]);
    let enc = sums.encoded();
    let o = r.open(false).unwrap();
    assert!(o.map_header(), "entries go through the header map");
    let mut c = Chain::new();
    let how = Append {
        sync: false,
        zeros: true,
        mapped_entries: true,
    };
    o.append_chain(&mut c, 0, &[data], &enc, how);
    assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
    assert!(r.store_entries(&enc));
    r.commit_append(data.len() as u64, &sums);
}

#[test]
fn torn_means_missing_or_zero_pages() {
    let full = vec![7u8; 3 * PAGE + 10];
    assert!(!looks_torn(&full, full.len()));
    assert!(looks_torn(&full[..100], full.len()));
    let mut hole = full.clone();
    hole[PAGE..2 * PAGE].fill(0);
    assert!(looks_torn(&hole, hole.len()));
    let mut tail = full.clone();
    tail[3 * PAGE..].fill(0);
    assert!(looks_torn(&tail, tail.len()));
    let mut flipped = full;
    flipped[5] ^= 1;
    assert!(!looks_torn(&flipped, flipped.len()));
}

#[test]
fn names_roundtrip() {
    assert_eq!(parse_name(&file_name(0xabc)), Some(0xabc));
    assert_eq!(parse_name("0000000000000abc.tmp"), None);
    assert_eq!(parse_name("abc.chunk"), None);
}

#[test]
fn append_read_reload_and_detect_flips() {
    // Format 1 (seahash) replicas, as written before XXH3, still work.
    for sum in [chunk::BlockSum::Seahash, chunk::BlockSum::Xxh3] {
        append_read_reload_and_detect_flips_with(sum);
    }
}

fn append_read_reload_and_detect_flips_with(sum: chunk::BlockSum) {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica_with(dir.path(), Layout::with_sum(4 * BLOCK, sum));
    let data: Vec<u8> = (0..(2 * BLOCK as usize + 500))
        .map(|i| (i * 31 % 256) as u8)
        .collect();
    let mut tail = Vec::new();
    for piece in data.chunks(40_000) {
        append(&io, &r, &mut tail, piece);
    }
    assert_eq!(r.len(), data.len() as u64);
    assert_eq!(read(&io, &r, 100, 70_000).unwrap(), data[100..70_100]);
    assert!(matches!(
        read(&io, &r, 0, data.len() + 1),
        Err(ReadFail::Short { .. })
    ));
    r.scrub(&io).unwrap();

    // Reload: same length, table and contents.
    let gate = Arc::new(Gate::new(0, FdCache::new(16)));
    let l = Replica::load(gate, &io, &r.path, 5).unwrap();
    assert_eq!(l.dropped_tail, 0);
    assert_eq!(l.replica.len(), data.len() as u64);
    assert_eq!(l.replica.version(), 1);
    assert_eq!(
        l.replica.layout().sum,
        sum,
        "the superblock names the block hash"
    );
    l.replica.scrub(&io).unwrap();
    drop(l);

    // Flip a data byte: the read that covers it and the scrub both notice.
    let file = OpenOptions::new()
        .write(true)
        .read(true)
        .open(&r.path)
        .unwrap();
    use std::os::unix::fs::FileExt;
    let at = r.layout.data_off + BLOCK + 7;
    let mut b = [0u8];
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[b[0] ^ 1], at).unwrap();
    assert!(matches!(
        read(&io, &r, BLOCK, 10),
        Err(ReadFail::Corrupt(_))
    ));
    assert!(read(&io, &r, 0, 100).is_ok(), "other blocks still verify");
    assert!(r.scrub(&io).is_err());
    file.write_all_at(&b, at).unwrap();
    // Flip a table entry byte.
    let at = r.layout.entry_off(0) + 9;
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[b[0] ^ 0x80], at).unwrap();
    assert!(matches!(read(&io, &r, 0, 1), Err(ReadFail::Corrupt(_))));
    file.write_all_at(&b, at).unwrap();
    // Flip padding and an unused entry: only the scrub can notice.
    for at in [r.layout.data_off - 1, r.layout.entry_off(3) + 2] {
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ 4], at).unwrap();
        assert!(r.scrub(&io).is_err(), "flip at {at}");
        file.write_all_at(&b, at).unwrap();
    }
    r.scrub(&io).unwrap();

    // Appends to a reloaded replica go on in its format.
    drop(r);
    let gate = Arc::new(Gate::new(0, FdCache::new(16)));
    let l = Replica::load(gate, &io, &dir.path().join(file_name(5)), 5).unwrap();
    append(&io, &l.replica, &mut tail, b"appended after a reload");
    let end = data.len();
    assert_eq!(
        read(&io, &l.replica, end as u64 - 10, 33).unwrap(),
        [&data[end - 10..], &b"appended after a reload"[..]].concat()
    );
    l.replica.scrub(&io).unwrap();
}

#[test]
fn load_drops_unverifiable_tail_and_ignores_uncommitted_entries() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let mut tail = Vec::new();
    append(&io, &r, &mut tail, &vec![1u8; BLOCK as usize + 10]);
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new().write(true).open(&r.path).unwrap();
    // An append torn before its first entry landed: data and a later
    // entry are there, but the length does not include them.
    file.write_all_at(&[9u8; 1000], r.layout.data_off + BLOCK + 10)
        .unwrap();
    file.write_all_at(
        &r.layout.sum.entry(&[3u8; 5]).encode(),
        r.layout.entry_off(2),
    )
    .unwrap();
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    assert_eq!((l.replica.len(), l.dropped_tail), (BLOCK + 10, 0));
    l.replica.scrub(&io).unwrap();
    // Now damage the last block: the reload walks back to the full block.
    file.write_all_at(&[7u8], r.layout.data_off + BLOCK + 3)
        .unwrap();
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    assert_eq!((l.replica.len(), l.dropped_tail), (BLOCK, 10));
    l.replica.scrub(&io).unwrap();
    assert_eq!(
        std::fs::metadata(&r.path).unwrap().len(),
        r.layout.data_off + BLOCK
    );
    // A superblock naming another chunk is refused.
    assert!(Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 6).is_err());
}

#[test]
fn a_synced_partial_block_survives_its_entry_landing_without_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let mut tail = Vec::new();
    append(&io, &r, &mut tail, &[1u8; 100]);
    append(&io, &r, &mut tail, &[2u8; 50]);
    // Each sync wrote its own slot: both are valid, the last one is 150.
    let header = std::fs::read(&r.path).unwrap();
    let off = r.layout.slots_off.unwrap() as usize;
    let slots: Vec<_> = header[off..off + 2 * SLOT_LEN as usize]
        .chunks(SLOT_LEN as usize)
        .map(|b| TailSlot::decode(b).unwrap().len())
        .collect();
    assert_eq!(slots, vec![100, 150]);
    // An unsynced append of 1000 bytes: after a power cut its entry for
    // block 0 is on disk but its data is not (the kernel wrote the pages
    // back out of order).
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new().write(true).open(&r.path).unwrap();
    let mut whole = vec![1u8; 100];
    whole.extend_from_slice(&[2u8; 50]);
    whole.extend_from_slice(&[3u8; 1000]);
    file.write_all_at(&r.layout.sum.entry(&whole).encode(), r.layout.entry_off(0))
        .unwrap();
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    assert_eq!(l.replica.len(), 150, "the synced prefix is kept");
    assert!(l.corrupt.is_none());
    assert_eq!(read(&io, &l.replica, 0, 150).unwrap(), whole[..150]);
    l.replica.scrub(&io).unwrap();
    // The next sync goes to the slot that is not the one kept.
    assert_eq!(l.replica.next_slot.load(Ordering::Relaxed), 0);
    // A damaged slot is found by a scrub, and a load that finds one
    // checks the whole replica and writes a good slot in its place.
    file.write_all_at(&[0xff], off as u64 + 3).unwrap();
    assert!(l.replica.scrub(&io).unwrap_err().contains("tail slot"));
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    l.replica.scrub(&io).unwrap();
    assert_eq!(l.replica.len(), 150);
}

#[test]
fn a_torn_append_that_kept_a_later_block_but_not_an_earlier_one_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let mut tail = Vec::new();
    append(&io, &r, &mut tail, &[1u8; 100]);
    append(&io, &r, &mut tail, &[2u8; 50]);
    // An unsynced append of a block's worth: the power cut kept both
    // entries and the data in block 1, but not the rest of block 0.
    let more = vec![3u8; BLOCK as usize];
    let sums = chunk::append_sums(r.layout.sum, 150, &tail, &[&more]);
    let enc = sums.encoded();
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new().write(true).open(&r.path).unwrap();
    file.write_all_at(&more[(BLOCK - 150) as usize..], r.layout.data_off + BLOCK)
        .unwrap();
    file.write_all_at(&enc.first, r.layout.entry_off(0))
        .unwrap();
    file.write_all_at(&enc.rest, r.layout.entry_off(1)).unwrap();
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    assert_eq!(l.replica.len(), 150, "block 1 alone proves nothing");
    assert!(l.corrupt.is_none(), "a torn append is not damage");
    l.replica.scrub(&io).unwrap();
}

#[test]
fn a_damaged_entry_in_the_middle_is_corruption_and_nothing_is_cut() {
    use std::os::unix::fs::FileExt;
    // 196 KiB: three full blocks and a partial fourth.
    let data: Vec<u8> = (0..196 << 10).map(|i| (i % 251) as u8 + 1).collect();
    // Block 1's entry: a reserved byte, then its length made one no entry
    // can have (over a block) and one only a zero hash may have (zero).
    for (byte, flip) in [(5, 0x01), (2, 0x02), (2, 0x01)] {
        let dir = tempfile::tempdir().unwrap();
        let (r, io) = new_replica(dir.path(), 4 * BLOCK);
        append(&io, &r, &mut Vec::new(), &data);
        let at = r.layout.entry_off(1) + byte;
        let file = OpenOptions::new()
            .write(true)
            .read(true)
            .open(&r.path)
            .unwrap();
        let mut b = [0u8];
        file.read_exact_at(&mut b, at).unwrap();
        file.write_all_at(&[b[0] ^ flip], at).unwrap();
        let before = std::fs::read(&r.path).unwrap();
        let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
        let why = l.corrupt.as_deref().unwrap_or_default();
        assert!(why.contains("block 1"), "byte {byte} ^ {flip:#x}: {why:?}");
        assert_eq!(l.dropped_tail, 0);
        assert!(l.replica.is_bad(), "a damaged replica is never served");
        assert!(matches!(
            read(&io, &l.replica, 0, 10),
            Err(ReadFail::Unavailable(_))
        ));
        // Not a byte of the file changed: same length, the later entries
        // and the data after block 1 are all there.
        assert_eq!(std::fs::read(&r.path).unwrap(), before);
        assert_eq!(before.len() as u64, r.layout.data_off + data.len() as u64);
        assert_eq!(&before[r.layout.data_off as usize..], &data[..]);
    }
}

#[test]
fn a_power_cut_model_over_another_directory_leaves_the_header_map_and_zero_cuts_alone() {
    // Another test's model, as when tests run in parallel: it covers none
    // of this replica's files, so nothing here may behave as under one.
    let other = tempfile::tempdir().unwrap();
    let _model = crate::PowerCut::install(other.path(), 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let data = [5u8; 1000];
    {
        let _io = r.lock_io();
        first_mapped_log_append(&io, &r, &data);
    }
    let size = || std::fs::metadata(&r.path).unwrap().len();
    assert!(size() > r.layout.data_off + 1000, "zeros written ahead");
    assert_eq!(read(&io, &r, 0, 1000).unwrap(), data);
    r.cut_zeros().unwrap();
    assert_eq!(size(), r.layout.data_off + 1000, "and cut at the close");
}

/// An unsynced append of `data` to a log's replica at `len` (`tail`: the
/// bytes of its last block so far): stored through the mappings where it
/// fits in the zeros ahead, else written with them. Whether it was stored.
fn unsynced_log_append(r: &Replica, io: &Io, len: u64, tail: &[u8], data: &[u8]) -> bool {
    let sums = chunk::append_sums(r.layout.sum, len, tail, &[data]);
    let enc = sums.encoded();
    let o = r.open(false).unwrap();
    let _io = r.lock_io();
    assert!(o.map_header());
    let stored = o.store_append(len, &[data], &enc);
    if !stored {
        let mut c = Chain::new();
        let how = Append {
            sync: false,
            zeros: true,
            mapped_entries: true,
        };
        o.append_chain(&mut c, len, &[data], &enc, how);
        assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
        assert!(r.store_entries(&enc));
    }
    r.commit_append(len + data.len() as u64, &sums);
    stored
}

#[test]
fn an_append_is_stored_only_inside_zeros_that_are_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let data = [9u8; 1000];
    let append = |len: u64, tail: &[u8]| unsynced_log_append(&r, &io, len, tail, &data);
    // No zeros yet: written (with the zeros); then stored inside them.
    assert!(!append(0, &[]));
    assert!(append(1000, &data));
    assert_eq!(read(&io, &r, 0, 2000).unwrap(), [data, data].concat());
    // A mark past the end of the file (as a failed write of the zeros
    // would leave) is never mapped: the append is written instead.
    r.cut_zeros().unwrap();
    r.zeroed_to.store(3 * BLOCK, Ordering::Release);
    assert!(!append(2000, &[data, data].concat()));
    assert_eq!(read(&io, &r, 0, 3000).unwrap(), [data, data, data].concat());
}

#[test]
fn an_append_while_a_renewal_holds_the_window_is_stored_all_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let data = [5u8; 1000];
    let append = |len: u64, tail: &[u8]| unsynced_log_append(&r, &io, len, tail, &data);
    assert!(!append(0, &[]), "the first append writes the zeros");
    assert!(append(1000, &data), "the second is stored into them");
    // A renewal faulting pages in shares the window; stores go on.
    let shared = r.window.lock().clone().unwrap();
    // SAFETY: the replica's file holds its zeros; nothing cuts it here.
    assert!(unsafe { shared.populate(0, 4 * BLOCK) });
    assert!(append(2000, &[data, data].concat()), "stored meanwhile");
    drop(shared);
    assert!(append(3000, &[data, data, data].concat()), "stored after");
    let all = [data, data, data, data].concat();
    assert_eq!(read(&io, &r, 0, 4000).unwrap(), all);
}

#[test]
fn a_sync_finds_the_window_unmapped_and_the_next_append_maps_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let data = [3u8; 1000];
    let append = |len: u64, tail: &[u8]| unsynced_log_append(&r, &io, len, tail, &data);
    assert!(!append(0, &[]), "the first append writes the zeros");
    assert!(append(1000, &data), "the second is stored into them");
    assert!(r.window.lock().is_some());
    r.unmap_window();
    assert!(r.window.lock().is_none(), "unmapped before the sync");
    let o = r.open(true).unwrap();
    let mut c = Chain::new();
    o.sync_chain(&mut c);
    assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
    drop(o);
    assert!(
        append(2000, &[data, data].concat()),
        "stored into a new mapping"
    );
    assert!(r.window.lock().is_some());
    let all = [data, data, data].concat();
    assert_eq!(read(&io, &r, 0, 3000).unwrap(), all);
    // What was stored through the unmapped window reached the file.
    r.cut_zeros().unwrap();
    let l = Replica::load(Arc::new(Gate::new(0, FdCache::new(16))), &io, &r.path, 5).unwrap();
    assert!(l.corrupt.is_none());
    assert_eq!(l.replica.len(), 3000);
    assert_eq!(read(&io, &l.replica, 0, 3000).unwrap(), all);
}

#[test]
fn an_append_past_the_zeros_waits_for_their_renewal_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 64 * BLOCK);
    let first = [1u8; 1000];
    assert!(!unsynced_log_append(&r, &io, 0, &[], &first));
    let to = r.zeroed_to.load(Ordering::Acquire);
    assert!(to >= 1 << 20, "the first append wrote a window: {to}");
    // Appends until the zeros run low: a renewal is due.
    // All the data so far; an append is given its last block's bytes.
    let mut all = first.to_vec();
    let tail = |all: &[u8]| all[all.len() / BLOCK as usize * BLOCK as usize..].to_vec();
    let mut len = 1000;
    while !r.wants_zeros(len) {
        let rec = [2u8; 1000];
        assert!(unsynced_log_append(&r, &io, len, &tail(&all), &rec));
        all.extend_from_slice(&rec);
        len += 1000;
    }
    // Play a renewal in flight: it holds `refilling` and will write zeros
    // from `to` on. An append large enough to write no zeros of its own,
    // running past `to`, must wait for it rather than be overwritten.
    let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    let refilling = r.refilling.lock();
    let appended = std::thread::scope(|s| {
        let t = s.spawn(|| {
            let mut at = len;
            let mut all = all.clone();
            while at + big.len() as u64 <= to {
                let rec = [3u8; 1000];
                unsynced_log_append(&r, &io, at, &tail(&all), &rec);
                all.extend_from_slice(&rec);
                at += 1000;
            }
            unsynced_log_append(&r, &io, at, &tail(&all), &big);
            at
        });
        // Give the append time to reach the zeros' end (were it not to
        // wait, its data would now be in the file, under the zeros below).
        let deadline = Instant::now() + Duration::from_millis(200);
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let file = r.file().unwrap();
        let off = r.layout.data_off;
        let zeros = vec![0u8; 256 << 10];
        io.write(&file, off + to, &[&zeros], false).unwrap();
        r.zeroed_to
            .store(to + zeros.len() as u64, Ordering::Release);
        drop(refilling);
        t.join().unwrap()
    });
    let at = appended;
    assert!(at < to && at + big.len() as u64 > to);
    assert_eq!(read(&io, &r, at, big.len()).unwrap(), big);
}

#[test]
fn a_synced_append_that_writes_zeros_waits_for_their_renewal_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 64 * BLOCK);
    let mut all = vec![1u8; 1000];
    assert!(!unsynced_log_append(&r, &io, 0, &[], &all));
    let to = r.zeroed_to.load(Ordering::Acquire);
    let tail = |all: &[u8]| all[all.len() / BLOCK as usize * BLOCK as usize..].to_vec();
    // Play a renewal in flight, as in the test above.
    let refilling = r.refilling.lock();
    let (start, rec) = std::thread::scope(|s| {
        let t = s.spawn(|| {
            // Stores up to close to the zeros' end.
            let mut len = all.len() as u64;
            while len + 1000 + (32 << 10) <= to {
                let rec = [2u8; 1000];
                assert!(unsynced_log_append(&r, &io, len, &tail(&all), &rec));
                all.extend_from_slice(&rec);
                len += 1000;
            }
            // A synced append this close to the end writes zeros past it
            // itself (and moves the mark): it must wait for the renewal.
            let rec = [3u8; 1000];
            let sums = chunk::append_sums(r.layout.sum, len, &tail(&all), &[&rec]);
            let enc = sums.encoded();
            let o = r.open(true).unwrap();
            let guard = r.lock_io();
            let mut c = Chain::new();
            let how = Append {
                sync: true,
                zeros: true,
                mapped_entries: false,
            };
            o.append_chain(&mut c, len, &[&rec], &enc, how);
            assert!(io.run_chains(&[c]).into_iter().all(|r| r.is_ok()));
            r.commit_append(len + 1000, &sums);
            drop(guard);
            drop(o);
            all.extend_from_slice(&rec);
            len += 1000;
            // Then unsynced appends past where the renewal writes.
            let start = len;
            let rec: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
            for piece in rec.chunks(1000) {
                assert!(unsynced_log_append(&r, &io, len, &tail(&all), piece));
                all.extend_from_slice(piece);
                len += piece.len() as u64;
            }
            (start, rec)
        });
        // Give the appends time to run (were the synced one not to wait,
        // the last ones' data would now be where the zeros below go).
        let deadline = Instant::now() + Duration::from_millis(200);
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let file = r.file().unwrap();
        let zeros = vec![0u8; 256 << 10];
        io.write(&file, r.layout.data_off + to, &[&zeros], false)
            .unwrap();
        // What the renewal would mark, unless the append moved it further.
        r.zeroed_to
            .fetch_max(to + zeros.len() as u64, Ordering::AcqRel);
        drop(refilling);
        t.join().unwrap()
    });
    assert!(start + (rec.len() as u64) > to);
    assert!(
        read(&io, &r, start, rec.len()).unwrap() == rec,
        "overwritten by the renewal"
    );
}

#[test]
fn an_unsynced_log_append_goes_through_the_file_its_header_map_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (r, io) = new_replica(dir.path(), 4 * BLOCK);
    let first = [5u8; 1000];
    let sums = chunk::append_sums(r.layout.sum, 0, &[], &[&first]);
    let enc = sums.encoded();
    let _io = r.lock_io();
    // Nothing mapped yet: the caller must open the replica.
    assert!(!r.store_mapped(0, &[&first], &enc));
    first_mapped_log_append(&io, &r, &first);
    // The server's open-file cache lets go of the file: the header map
    // still holds it, and the next append is stored through it.
    r.close();
    let next = [6u8; 1000];
    let mut tail = first.to_vec();
    let sums = chunk::append_sums(r.layout.sum, 1000, &tail, &[&next]);
    assert!(r.store_mapped(1000, &[&next], &sums.encoded()));
    r.commit_append(2000, &sums);
    sums.apply_tail(&mut tail, &[&next]);
    drop(_io);
    assert_eq!(read(&io, &r, 0, 2000).unwrap(), [first, next].concat());
}
