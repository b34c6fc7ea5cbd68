//! Whole-table tests: builder/reader roundtrips, seeks, filters, caching and
//! corruption handling, on gfs::MemStore (and a LocalStore for mapped reads).

use super::*;
use crate::iterator::InternalIterator;
use crate::key::{self, Kind};
use crate::Error;
use gfs::{FileStore, MemStore, ReadableFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Convenience: opens a table with an optional shared block cache.
fn open_table(
    store: &dyn gfs::FileStore,
    name: &str,
    file_number: u64,
    cache: Option<Arc<BlockCache>>,
) -> crate::Result<Arc<Table>> {
    Table::open(store.open(name)?, file_number, cache)
}

fn opts(block_size: usize, compression: Compression, bloom: BloomKind) -> TableOptions {
    TableOptions {
        block_size,
        compression,
        bloom,
        bloom_bits_per_key: 10,
    }
}

fn build(store: &MemStore, name: &str, entries: &Entries, o: TableOptions) -> TableInfo {
    fill(TableBuilder::new(store.create(name).unwrap(), o), entries)
}

fn fill(mut b: TableBuilder, entries: &Entries) -> TableInfo {
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap()
}

/// Sorted, unique entries over a few rows/columns with random versions.
fn random_entries(rng: &mut StdRng, n: usize, row_len: usize) -> Entries {
    let mut v: Entries = (0..n)
        .map(|_| {
            let mut row: Vec<u8> = (0..row_len).map(|_| rng.gen_range(0..4u8)).collect();
            row.push(rng.gen_range(b'a'..=b'z'));
            let fam = [b"anchor".as_slice(), b"contents"][rng.gen_range(0..2)];
            let q: Vec<u8> = (0..rng.gen_range(0..4)).map(|_| rng.gen()).collect();
            let k = key::encode(
                &row,
                fam,
                &q,
                rng.gen_range(0..1000),
                rng.gen_range(1..1 << 40),
                Kind::Put,
            );
            let val: Vec<u8> = (0..rng.gen_range(0..100)).map(|i| (i % 7) as u8).collect();
            (k, val)
        })
        .collect();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

fn scan(t: &Arc<Table>) -> Result<Entries, Error> {
    scan_from_first(t.iter())
}

/// Every entry `it` yields from the first on.
fn scan_from_first(mut it: impl InternalIterator) -> Result<Entries, Error> {
    it.seek_to_first()?;
    let mut out = Vec::new();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().to_vec()));
        it.next()?;
    }
    Ok(out)
}

fn check_seeks(t: &Arc<Table>, entries: &Entries) {
    let mut it = t.iter();
    for (i, (k, v)) in entries.iter().enumerate() {
        it.seek(k).unwrap();
        assert!(it.valid());
        assert_eq!(it.key(), k.as_slice());
        assert_eq!(it.value(), v.as_slice());
        // Just after k (k + 0x00 is the next possible key): lands on the next entry.
        let mut after = k.clone();
        after.push(0);
        it.seek(&after).unwrap();
        match entries.get(i + 1) {
            Some((nk, _)) => assert_eq!(it.key(), nk.as_slice()),
            None => assert!(!it.valid()),
        }
    }
    it.seek(b"").unwrap();
    assert_eq!(it.valid(), !entries.is_empty());
    it.seek(&[0xFF; 4]).unwrap();
    assert!(!it.valid());
}

#[test]
fn roundtrip_random_keys_block_sizes_and_compression() {
    let mut rng = StdRng::seed_from_u64(1);
    let entries = random_entries(&mut rng, 2000, 3);
    let max_seq = entries
        .iter()
        .map(|(k, _)| key::split(k).unwrap().seq)
        .max()
        .unwrap();
    let store = MemStore::new();
    for (n, block_size) in [64usize, 512, 4096, 65536].into_iter().enumerate() {
        for compression in [Compression::None, Compression::Lz4] {
            let name = format!("t{n}-{compression:?}");
            let info = build(
                &store,
                &name,
                &entries,
                opts(block_size, compression, BloomKind::RowColumn),
            );
            assert_eq!(info.entries, entries.len() as u64);
            assert_eq!(info.smallest, entries[0].0);
            assert_eq!(info.largest, entries.last().unwrap().0);
            assert_eq!(info.max_seq, max_seq);
            assert_eq!(info.file_size, store.size(&name).unwrap());

            let cache = Arc::new(super::BlockCache::new(1 << 20));
            let t = open_table(&store, &name, 7, Some(cache)).unwrap();
            assert_eq!(t.entries(), entries.len() as u64);
            assert_eq!(t.smallest(), entries[0].0.as_slice());
            assert_eq!(t.largest(), entries.last().unwrap().0.as_slice());
            assert_eq!(t.max_seq(), max_seq);
            assert_eq!(scan(&t).unwrap(), entries);
            check_seeks(&t, &entries);

            let m = Table::open_in_memory(store.open(&name).unwrap(), 8).unwrap();
            assert!(m.is_in_memory());
            assert_eq!(scan(&m).unwrap(), entries);
            check_seeks(&m, &entries);
        }
    }
}

#[test]
fn compression_shrinks_compressible_data() {
    let mut rng = StdRng::seed_from_u64(2);
    let entries = random_entries(&mut rng, 1000, 2);
    let (raw, lz) = raw_and_lz4_sizes(&entries);
    assert!(lz < raw * 3 / 4, "{lz} vs {raw}");
}

/// File sizes of the entries written raw and with lz4 (4 KiB blocks); the
/// lz4 table must read back whole.
fn raw_and_lz4_sizes(entries: &Entries) -> (u64, u64) {
    let store = MemStore::new();
    let mut sizes = [0; 2];
    for (i, (name, c)) in [("raw", Compression::None), ("lz", Compression::Lz4)]
        .into_iter()
        .enumerate()
    {
        sizes[i] = build(&store, name, entries, opts(4096, c, BloomKind::None)).file_size;
    }
    let t = open_table(&store, "lz", 1, None).unwrap();
    assert_eq!(&scan(&t).unwrap(), entries);
    (sizes[0], sizes[1])
}

#[test]
fn incompressible_blocks_back_off_and_compressible_ones_still_shrink() {
    // 500 blocks of random values, then 500 of zeros: the writer stops
    // trying lz4 on the first half and resumes once a block shrinks again.
    let mut rng = StdRng::seed_from_u64(3);
    let entries: Entries = (0..4000u32)
        .map(|i| {
            let k = key::encode(format!("{i:08}").as_bytes(), b"cf", b"", 0, 1, Kind::Put);
            let v: Vec<u8> = if i < 2000 {
                (0..1000).map(|_| rng.gen()).collect()
            } else {
                vec![0; 1000]
            };
            (k, v)
        })
        .collect();
    let (raw, lz) = raw_and_lz4_sizes(&entries);
    // The zero half (~2 MB raw) must have compressed but for a few blocks.
    assert!(lz < raw * 6 / 10, "{lz} vs {raw}");
}

#[test]
fn version_1_tables_with_seahash_checksums_still_read() {
    let mut rng = StdRng::seed_from_u64(4);
    let entries = random_entries(&mut rng, 2000, 2);
    let store = MemStore::new();
    let v1 = TableBuilder::with_checksum(
        store.create("v1").unwrap(),
        opts(1024, Compression::Lz4, BloomKind::RowColumn),
        format::BlockChecksum::Seahash,
    );
    fill(v1, &entries);
    let t = open_table(&store, "v1", 1, None).unwrap();
    assert_eq!(scan(&t).unwrap(), entries);
    check_seeks(&t, &entries);
    // The same table in version 2: same layout, other checksums.
    build(
        &store,
        "v2",
        &entries,
        opts(1024, Compression::Lz4, BloomKind::RowColumn),
    );
    let read_all = |name: &str| {
        let f = store.open(name).unwrap();
        f.read_at(0, f.len().unwrap() as usize).unwrap()
    };
    let (a, b) = (read_all("v1"), read_all("v2"));
    assert_eq!(a.len(), b.len());
    assert_ne!(a, b);
}

#[test]
fn rows_with_64k_keys() {
    let mut rng = StdRng::seed_from_u64(3);
    let mut entries: Entries = (0..24)
        .map(|i| {
            let mut row: Vec<u8> = (0..crate::data::MAX_ROW_KEY - 1)
                .map(|_| rng.gen_range(0..3u8))
                .collect();
            row.push(i);
            let k = key::encode(&row, b"f", b"q", 5, 9, Kind::Put);
            (k, vec![i; 300])
        })
        .collect();
    entries.sort();
    let store = MemStore::new();
    for compression in [Compression::None, Compression::Lz4] {
        let name = format!("big-{compression:?}");
        build(
            &store,
            &name,
            &entries,
            opts(4096, compression, BloomKind::RowColumn),
        );
        let t = open_table(&store, &name, 1, None).unwrap();
        assert_eq!(t.num_blocks(), entries.len(), "one huge key per block");
        assert_eq!(scan(&t).unwrap(), entries);
        check_seeks(&t, &entries);
        for (k, _) in &entries {
            let row = key::decode(k).unwrap().row;
            assert!(t.may_contain_row(&row));
            assert!(t.may_contain_column(&row, b"f", b"q"));
        }
    }
}

#[test]
fn bloom_filters_no_false_negatives_low_false_positives() {
    let store = MemStore::new();
    let n = 5000u32;
    let entries: Entries = (0..n)
        .flat_map(|i| {
            let row = format!("row{i:08}");
            [b"a".as_slice(), b"b"].map(|q| {
                (
                    key::encode(row.as_bytes(), b"fam", q, 1, 1, Kind::Put),
                    b"v".to_vec(),
                )
            })
        })
        .collect();
    build(
        &store,
        "rc",
        &entries,
        opts(4096, Compression::Lz4, BloomKind::RowColumn),
    );
    build(
        &store,
        "r",
        &entries,
        opts(4096, Compression::Lz4, BloomKind::Row),
    );
    build(
        &store,
        "none",
        &entries,
        opts(4096, Compression::Lz4, BloomKind::None),
    );
    let rc = open_table(&store, "rc", 1, None).unwrap();
    let r = open_table(&store, "r", 2, None).unwrap();
    let none = open_table(&store, "none", 3, None).unwrap();
    assert_eq!(rc.bloom_kind(), BloomKind::RowColumn);
    assert_eq!(r.bloom_kind(), BloomKind::Row);
    assert_eq!(none.bloom_kind(), BloomKind::None);

    for i in 0..n {
        let row = format!("row{i:08}");
        for t in [&rc, &r, &none] {
            assert!(t.may_contain_row(row.as_bytes()));
            assert!(t.may_contain_column(row.as_bytes(), b"fam", b"a"));
            assert!(t.may_contain_column(row.as_bytes(), b"fam", b"b"));
        }
        // Present row, absent column: a row-only filter cannot tell.
        assert!(r.may_contain_column(row.as_bytes(), b"fam", b"zz"));
    }
    let fp = |f: &dyn Fn(u32) -> bool| (0..n).filter(|&i| f(i)).count() as f64 / n as f64;
    let row_fp = fp(&|i| rc.may_contain_row(format!("absent{i}").as_bytes()));
    let col_fp = fp(&|i| rc.may_contain_column(format!("row{i:08}").as_bytes(), b"fam", b"zz"));
    let row_only_fp = fp(&|i| r.may_contain_row(format!("absent{i}").as_bytes()));
    assert!(row_fp < 0.02, "row fp {row_fp}");
    assert!(col_fp < 0.02, "column fp {col_fp}");
    assert!(row_only_fp < 0.02, "row-only fp {row_only_fp}");
    assert!(none.may_contain_row(b"absent"));
}

/// Every single-byte flip is either harmless to every answer or reported as
/// Corruption, at open or on read — never a different successful answer.
#[test]
fn every_byte_flip_is_detected() {
    let mut rng = StdRng::seed_from_u64(4);
    let entries = random_entries(&mut rng, 40, 1);
    let store = MemStore::new();
    build(
        &store,
        "t",
        &entries,
        opts(256, Compression::Lz4, BloomKind::RowColumn),
    );
    let size = store.size("t").unwrap() as usize;
    // Some blocks really are compressed, so lz4 framing is covered too.
    let raw = build(
        &store,
        "raw",
        &entries,
        opts(256, Compression::None, BloomKind::RowColumn),
    );
    assert!(size < raw.file_size as usize);
    let rows: Vec<Vec<u8>> = entries
        .iter()
        .map(|(k, _)| key::decode(k).unwrap().row)
        .collect();

    let check = |t: Result<Arc<Table>, Error>, offset: usize| -> usize {
        let t = match t {
            Err(Error::Corruption(_)) => return 1,
            Err(e) => panic!("flip at {offset}: non-corruption error at open: {e}"),
            Ok(t) => t,
        };
        let mut detected = 0;
        match scan(&t) {
            Ok(got) => assert_eq!(got, entries, "flip at {offset} changed a scan"),
            Err(Error::Corruption(_)) => detected = 1,
            Err(e) => panic!("flip at {offset}: {e}"),
        }
        let mut it = t.iter();
        for (k, v) in &entries {
            match it.seek(k) {
                Ok(()) => {
                    assert_eq!(it.key(), k.as_slice(), "flip at {offset}");
                    assert_eq!(it.value(), v.as_slice(), "flip at {offset}");
                }
                Err(Error::Corruption(_)) => detected = 1,
                Err(e) => panic!("flip at {offset}: {e}"),
            }
        }
        for row in &rows {
            assert!(t.may_contain_row(row), "flip at {offset}: false negative");
        }
        detected
    };
    for offset in 0..size {
        store.corrupt("t", offset).unwrap();
        let found = check(Table::open(store.open("t").unwrap(), 1, None), offset)
            + check(Table::open_in_memory(store.open("t").unwrap(), 1), offset);
        assert_eq!(found, 2, "flip at {offset} of {size} went unnoticed");
        store.corrupt("t", offset).unwrap(); // XOR again: restore
    }
    let t = open_table(&store, "t", 1, None).unwrap();
    assert_eq!(scan(&t).unwrap(), entries);
}

#[test]
fn mapped_tables_read_and_detect_damage_like_read_ones() {
    let mut rng = StdRng::seed_from_u64(12);
    let entries = random_entries(&mut rng, 300, 2);
    let dir = tempfile::tempdir().unwrap();
    let store = gfs::LocalStore::open_with(dir.path().join("data"), Default::default()).unwrap();
    for compression in [Compression::None, Compression::Lz4] {
        let name = format!("sst/{compression:?}.sst");
        let o = opts(512, compression, BloomKind::RowColumn);
        let info = fill(TableBuilder::new(store.create(&name).unwrap(), o), &entries);
        let cache = Arc::new(super::BlockCache::new(1 << 20));
        let t = open_table(&store, &name, 1, Some(cache.clone())).unwrap();
        assert!(
            t.is_mapped(),
            "a LocalStore table is read through a mapping"
        );
        let mem = MemStore::new();
        build(&mem, "m", &entries, o);
        assert!(!open_table(&mem, "m", 1, None).unwrap().is_mapped());
        assert_eq!(scan(&t).unwrap(), entries);
        check_seeks(&t, &entries);
        // The flips below rewrite the file: they go to a new one, as the
        // blocks cached above map the old one (a mapped file must never
        // shrink).
        drop(t);
        store.delete(&name).unwrap();
        let again = fill(TableBuilder::new(store.create(&name).unwrap(), o), &entries);
        assert_eq!(again.file_size, info.file_size);
        assert!(
            cache.stats().entries > 0,
            "cached blocks outlive their table"
        );
        // A flipped byte in a data block, on disk, is caught on a miss.
        let path = dir.path().join("data").join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        let mut caught = 0;
        for offset in (0..info.file_size as usize / 2).step_by(37) {
            bytes[offset] ^= 0x20;
            std::fs::write(&path, &bytes).unwrap();
            bytes[offset] ^= 0x20;
            let t = match open_table(&store, &name, 2 + offset as u64, None) {
                Ok(t) => t,
                Err(Error::Corruption(_)) => {
                    caught += 1;
                    continue;
                }
                Err(e) => panic!("flip at {offset}: {e}"),
            };
            assert!(t.is_mapped());
            match scan(&t) {
                Err(Error::Corruption(_)) => caught += 1,
                Ok(got) => panic!("flip at {offset} went unnoticed ({} entries)", got.len()),
                Err(e) => panic!("flip at {offset}: {e}"),
            }
        }
        assert!(caught > 0);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            scan(&open_table(&store, &name, 1000, None).unwrap()).unwrap(),
            entries
        );
    }
}

/// A block of a mapped file is charged its restart index in the block
/// cache, not its bytes: a cache a quarter of the table's size keeps every
/// block. A damaged block is still caught when it is first loaded into the
/// cache, and is not cached.
#[test]
fn mapped_blocks_are_charged_their_index_and_checked_when_cached() {
    let mut rng = StdRng::seed_from_u64(13);
    // Large values, as the bench's: every entry is a restart.
    let entries: Entries = random_entries(&mut rng, 400, 2)
        .into_iter()
        .map(|(k, _)| (k, (0..900).map(|_| rng.gen()).collect()))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let store = gfs::LocalStore::open_with(dir.path().join("data"), Default::default()).unwrap();
    let o = opts(8 << 10, Compression::None, BloomKind::RowColumn);
    let info = fill(
        TableBuilder::new(store.create("sst/a.sst").unwrap(), o),
        &entries,
    );
    let capacity = info.file_size / 4;
    let cache = Arc::new(super::BlockCache::new(capacity));
    let t = open_table(&store, "sst/a.sst", 1, Some(cache.clone())).unwrap();
    assert!(t.is_mapped());
    assert_eq!(scan(&t).unwrap(), entries);
    let s = cache.stats();
    assert_eq!(s.entries, t.num_blocks() as u64, "every block stays cached");
    assert!(s.bytes <= capacity, "{s:?}");
    let block = cache.get(1, 0).unwrap();
    assert!(block.is_mapped());
    assert!(
        block.cache_charge() * 4 < block.size(),
        "charged {} of {} bytes",
        block.cache_charge(),
        block.size()
    );
    assert_eq!(scan(&t).unwrap(), entries);
    assert_eq!(
        cache.stats().misses,
        s.misses,
        "a second pass hits every block"
    );
    check_seeks(&t, &entries);

    // The same table with a flipped byte in its first block's first value.
    let path = dir.path().join("data/sst/a.sst");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x01;
    std::fs::write(dir.path().join("data/sst/b.sst"), &bytes).unwrap();
    let cache = Arc::new(super::BlockCache::new(capacity));
    let t = open_table(&store, "sst/b.sst", 2, Some(cache.clone())).unwrap();
    assert!(t.is_mapped());
    for _ in 0..2 {
        match t.iter().seek(&entries[0].0) {
            Err(Error::Corruption(_)) => {}
            other => panic!("a damaged block read as {other:?}"),
        }
        assert!(cache.get(2, 0).is_none(), "a damaged block is not cached");
    }
    let last = &entries[entries.len() - 1];
    let mut it = t.iter();
    it.seek(&last.0).unwrap();
    assert_eq!(
        (it.key(), it.value()),
        (last.0.as_slice(), last.1.as_slice())
    );
}

#[test]
fn truncated_and_random_files_are_corruption_not_panics() {
    let mut rng = StdRng::seed_from_u64(5);
    let entries = random_entries(&mut rng, 30, 1);
    let store = MemStore::new();
    build(
        &store,
        "t",
        &entries,
        opts(200, Compression::Lz4, BloomKind::Row),
    );
    let size = store.size("t").unwrap() as usize;
    let good = store.open("t").unwrap().read_at(0, size).unwrap();
    for len in 0..size {
        let name = format!("trunc{len}");
        store.create(&name).unwrap().append(&good[..len]).unwrap();
        let r = Table::open(store.open(&name).unwrap(), 1, None);
        assert!(matches!(r, Err(Error::Corruption(_))), "len {len}: {r:?}");
        store.delete(&name).unwrap();
    }
    for i in 0..500 {
        let name = format!("rand{i}");
        let len = rng.gen_range(0..400);
        let mut data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        if i % 2 == 0 && len >= 68 {
            // A genuine footer tail keeps the reader going past the magic check.
            data[len - 68..].copy_from_slice(&good[size - 68..]);
        }
        store.create(&name).unwrap().append(&data).unwrap();
        for t in [
            Table::open(store.open(&name).unwrap(), 1, None),
            Table::open_in_memory(store.open(&name).unwrap(), 1),
        ]
        .into_iter()
        .flatten()
        {
            let _ = scan(&t);
        }
    }
}

/// Counts reads, to check that a lookup costs one block read.
struct CountingFile {
    inner: Arc<dyn ReadableFile>,
    reads: Arc<AtomicUsize>,
}

impl ReadableFile for CountingFile {
    fn read_at(&self, offset: u64, len: usize) -> gfs::Result<Vec<u8>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_at(offset, len)
    }
    fn read_many(&self, ranges: &[(u64, usize)]) -> gfs::Result<Vec<Vec<u8>>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_many(ranges)
    }
    fn len(&self) -> gfs::Result<u64> {
        self.inner.len()
    }
}

/// A table of `entries` opened through a file that counts its reads.
fn counted_table(
    entries: &Entries,
    o: TableOptions,
    cache: Option<Arc<super::BlockCache>>,
) -> (Arc<Table>, Arc<AtomicUsize>) {
    let store = MemStore::new();
    build(&store, "t", entries, o);
    let reads = Arc::new(AtomicUsize::new(0));
    let file = Arc::new(CountingFile {
        inner: store.open("t").unwrap(),
        reads: reads.clone(),
    });
    (Table::open(file, 3, cache).unwrap(), reads)
}

type CachedTable = (
    Entries,
    Arc<super::BlockCache>,
    Arc<Table>,
    Arc<AtomicUsize>,
);

/// 3000 random entries in 1 KiB blocks, opened with an 8 MiB block cache
/// and a count of file reads.
fn cached_table(seed: u64) -> CachedTable {
    let mut rng = StdRng::seed_from_u64(seed);
    let entries = random_entries(&mut rng, 3000, 2);
    let cache = Arc::new(super::BlockCache::new(8 << 20));
    let (t, reads) = counted_table(
        &entries,
        opts(1024, Compression::Lz4, BloomKind::RowColumn),
        Some(cache.clone()),
    );
    (entries, cache, t, reads)
}

#[test]
fn point_lookup_reads_one_block_and_cache_counts_hits() {
    let (entries, cache, t, reads) = cached_table(6);
    assert!(t.num_blocks() > 50);
    assert_eq!(
        reads.load(Ordering::SeqCst),
        2,
        "footer, then the metadata in one batch"
    );

    let probe = &entries[entries.len() / 3].0;
    let mut it = t.iter();
    it.seek(probe).unwrap();
    assert_eq!(it.key(), probe.as_slice());
    assert_eq!(reads.load(Ordering::SeqCst), 3, "one data block read");
    assert_eq!((cache.stats().hits, cache.stats().misses), (0, 1));

    // A second iterator finds the block in the cache.
    let mut it2 = t.iter();
    it2.seek(probe).unwrap();
    assert_eq!(reads.load(Ordering::SeqCst), 3);
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    assert!(cache.stats().bytes > 0);

    // Seeking again within the block the iterator holds costs nothing.
    it2.seek(probe).unwrap();
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));

    // A full scan misses once per remaining block, then hits everywhere.
    assert_eq!(scan(&t).unwrap().len(), entries.len());
    let s = cache.stats();
    assert_eq!(s.misses, t.num_blocks() as u64);
    assert_eq!(scan(&t).unwrap().len(), entries.len());
    assert_eq!(cache.stats().misses, s.misses);
    assert_eq!(cache.stats().hits, s.hits + t.num_blocks() as u64);
}

#[test]
fn point_reads_in_key_order_read_each_block_once_and_count_the_rest_as_hits() {
    let (entries, cache, t, reads) = cached_table(8);
    let before = reads.load(Ordering::SeqCst);
    // A new iterator per read, as point reads make them.
    for (k, v) in &entries {
        let mut it = t.iter();
        it.seek(k).unwrap();
        assert_eq!((it.key(), it.value()), (k.as_slice(), v.as_slice()));
    }
    // Each block read once; every other read counted as a hit.
    let blocks = t.num_blocks() as u64;
    assert_eq!((reads.load(Ordering::SeqCst) - before) as u64, blocks);
    let s = cache.stats();
    assert_eq!((s.misses, s.hits), (blocks, entries.len() as u64 - blocks));
    // A key between blocks' keys, above all and below all.
    let mut it = t.iter();
    it.seek(&[0xFF; 4]).unwrap();
    assert!(!it.valid());
    it.seek(b"").unwrap();
    assert_eq!(it.key(), entries[0].0.as_slice());
}

#[test]
fn a_threads_last_block_is_never_another_tables() {
    // Two tables of the same file number (as two stores in one process).
    let mut rng = StdRng::seed_from_u64(9);
    let (a, b) = (
        random_entries(&mut rng, 2000, 2),
        random_entries(&mut rng, 2000, 2),
    );
    let o = opts(1024, Compression::Lz4, BloomKind::RowColumn);
    let (ta, _) = counted_table(&a, o, None);
    let (tb, _) = counted_table(&b, o, None);
    for i in 0..a.len().min(b.len()) {
        for (t, e) in [(&ta, &a), (&tb, &b)] {
            let mut it = t.iter();
            it.seek(&e[i].0).unwrap();
            assert_eq!(it.key(), e[i].0.as_slice());
            assert_eq!(it.value(), e[i].1.as_slice());
        }
    }
}

#[test]
fn a_row_in_the_threads_last_block_is_not_filtered() {
    let entries: Entries = (0..2000u32)
        .map(|i| {
            let row = format!("row{:08}", 2 * i);
            let k = key::encode(row.as_bytes(), b"fam", b"q", 1, 1, Kind::Put);
            (k, b"value".to_vec())
        })
        .collect();
    let o = opts(1024, Compression::Lz4, BloomKind::RowColumn);
    let (t, _) = counted_table(&entries, o, None);
    let asks = |row: &[u8]| {
        let col = key::column_prefix(row, b"fam", b"q");
        t.may_contain_any_column(&key::row_prefix(row), &[col.as_slice()])
    };
    // Absent rows (odd numbers, between present ones) the filter rules out.
    let absent: Vec<String> = (0..2000u32)
        .map(|i| format!("row{:08}", 2 * i + 1))
        .filter(|r| !asks(r.as_bytes()))
        .collect();
    assert!(absent.len() > 1900, "{} ruled out", absent.len());
    // Once a read left this thread in the row's block, the block is looked
    // in instead (and holds nothing of the row).
    let row = absent[absent.len() / 2].as_bytes();
    let mut it = t.iter();
    it.seek(&key::row_prefix(row)).unwrap();
    assert!(it.valid());
    assert!(asks(row));
    assert!(!it.key().starts_with(&key::row_prefix(row)));
    // Far from that block, the filter answers again.
    assert!(!asks(absent[0].as_bytes()));
}

#[test]
fn a_threads_last_block_does_not_keep_it_alive() {
    let mut rng = StdRng::seed_from_u64(10);
    let entries = random_entries(&mut rng, 500, 2);
    let o = opts(1024, Compression::Lz4, BloomKind::RowColumn);
    // No block cache: a block lives only while an iterator holds it.
    let (t, reads) = counted_table(&entries, o, None);
    let probe = &entries[entries.len() / 2].0;
    let mut it = t.iter();
    it.seek(probe).unwrap();
    let after_first = reads.load(Ordering::SeqCst);
    // While held, the next read finds it; once dropped, it is read again.
    let mut it2 = t.iter();
    it2.seek(probe).unwrap();
    assert_eq!(reads.load(Ordering::SeqCst), after_first);
    drop((it, it2));
    t.iter().seek(probe).unwrap();
    assert_eq!(reads.load(Ordering::SeqCst), after_first + 1);
}

#[test]
fn uncached_iterator_uses_the_cache_but_does_not_fill_it() {
    let (entries, cache, t, reads) = cached_table(7);
    // A point read caches its block.
    let probe = &entries[entries.len() / 2].0;
    t.iter().seek(probe).unwrap();
    assert_eq!(cache.stats().entries, 1);
    let before = reads.load(Ordering::SeqCst);
    assert_eq!(scan_from_first(t.iter_uncached()).unwrap(), entries);
    // Every block but the cached one came from the file, and none was added.
    assert_eq!(reads.load(Ordering::SeqCst) - before, t.num_blocks() - 1);
    assert_eq!(cache.stats().entries, 1);
}

#[test]
fn iter_below_does_not_read_the_next_block() {
    let mut rng = StdRng::seed_from_u64(8);
    let entries = random_entries(&mut rng, 3000, 2);
    let (t, reads) = counted_table(
        &entries,
        opts(1024, Compression::None, BloomKind::None),
        None,
    );
    // Every key, bounded just above itself: the walk from it yields it and
    // never reads a second block; unbounded, the last of a block does.
    let mut crossed = 0;
    for (i, (k, _)) in entries.iter().enumerate() {
        let mut upper = k.clone();
        upper.push(0);
        for bounded in [true, false] {
            let mut it: Box<dyn InternalIterator + '_> = if bounded {
                Box::new(t.iter_below(&upper))
            } else {
                Box::new(t.iter())
            };
            let before = reads.load(Ordering::SeqCst);
            it.seek(k).unwrap();
            assert_eq!(it.key(), k.as_slice());
            it.next().unwrap();
            let n = reads.load(Ordering::SeqCst) - before;
            if bounded {
                assert_eq!(n, 1, "entry {i}");
                assert!(!it.valid() || it.key() > upper.as_slice());
            } else {
                crossed += n - 1;
                assert_eq!(it.valid(), i + 1 < entries.len());
            }
        }
    }
    assert!(crossed + 1 >= t.num_blocks(), "{crossed}");
    // Bounded above everything, it walks the whole table.
    let all = scan_from_first(t.iter_below(&[0xff; 8])).unwrap();
    assert_eq!(all.len(), entries.len());
}

#[test]
fn offsets_and_mid_key() {
    let mut rng = StdRng::seed_from_u64(7);
    let entries = random_entries(&mut rng, 3000, 2);
    let store = MemStore::new();
    let info = build(
        &store,
        "t",
        &entries,
        opts(1024, Compression::None, BloomKind::None),
    );
    let t = open_table(&store, "t", 1, None).unwrap();
    let mut prev = 0;
    for (k, _) in &entries {
        let off = t.approximate_offset_of(k);
        assert!(off >= prev && off < info.file_size);
        prev = off;
    }
    assert_eq!(t.approximate_offset_of(&entries[0].0), 0);
    assert!(t.approximate_offset_of(&[0xFF; 8]) > prev);
    // Past the last key, though below the last block's separator (which
    // may lie far beyond it): all the data is below.
    let mut past = entries.last().unwrap().0.clone();
    past.push(0);
    assert_eq!(t.approximate_offset_of(&past), t.data_size());

    let mid = t.mid_key().unwrap();
    let pos = entries
        .iter()
        .position(|(k, _)| *k == mid)
        .expect("mid key is a real key");
    assert!(
        pos > entries.len() / 3 && pos < entries.len() * 2 / 3,
        "{pos}"
    );

    // One block: the middle entry. One entry: none.
    let small: Entries = entries[..5].to_vec();
    build(
        &store,
        "small",
        &small,
        opts(1 << 20, Compression::Lz4, BloomKind::None),
    );
    let s = open_table(&store, "small", 2, None).unwrap();
    assert_eq!(s.num_blocks(), 1);
    assert_eq!(s.mid_key().unwrap(), small[2].0);
    build(
        &store,
        "one",
        &entries[..1].to_vec(),
        TableOptions::default(),
    );
    assert_eq!(open_table(&store, "one", 3, None).unwrap().mid_key(), None);
}

#[test]
fn empty_table() {
    let store = MemStore::new();
    let info = build(&store, "e", &Vec::new(), TableOptions::default());
    assert_eq!(info.entries, 0);
    for t in [
        open_table(&store, "e", 1, None).unwrap(),
        Table::open_in_memory(store.open("e").unwrap(), 1).unwrap(),
    ] {
        assert_eq!(scan(&t).unwrap(), Vec::new());
        let mut it = t.iter();
        it.seek(b"a").unwrap();
        assert!(!it.valid());
        assert_eq!(t.mid_key(), None);
        assert!(t.smallest().is_empty());
        assert!(!t.may_contain_row(b"x"));
    }
}

#[test]
fn a_table_records_the_timestamps_of_its_cells() {
    let store = MemStore::new();
    let t_max = 1_800_000_000_000_000;
    let mut entries: Entries = vec![
        (
            key::encode(b"a", b"f", b"q", 700, 1, Kind::Put),
            b"x".to_vec(),
        ),
        (
            key::encode(b"b", b"f", b"q", t_max, 2, Kind::Put),
            b"y".to_vec(),
        ),
        (
            key::encode(b"c", b"f", b"q", 5, 3, Kind::Put),
            b"z".to_vec(),
        ),
        // Tombstones hold a marker, not a time: left out.
        (
            key::encode(b"d", b"", b"", key::TOMBSTONE_TS, 4, Kind::DeleteRow),
            Vec::new(),
        ),
    ];
    entries.sort();
    let info = build(&store, "t", &entries, TableOptions::default());
    let want = Some(TimeRange { min: 5, max: t_max });
    assert_eq!(info.timestamps, want);
    for t in [
        open_table(&store, "t", 1, None).unwrap(),
        Table::open_in_memory(store.open("t").unwrap(), 1).unwrap(),
    ] {
        assert_eq!(t.timestamps(), want);
    }
    // No cells, no range.
    let info = build(&store, "d", &entries[3..].to_vec(), TableOptions::default());
    assert_eq!(info.timestamps, None);
    assert_eq!(open_table(&store, "d", 2, None).unwrap().timestamps(), None);
    build(&store, "e", &Vec::new(), TableOptions::default());
    assert_eq!(open_table(&store, "e", 3, None).unwrap().timestamps(), None);
}

#[test]
fn tables_written_before_timestamps_were_recorded_still_read() {
    let mut rng = StdRng::seed_from_u64(9);
    let entries = random_entries(&mut rng, 2000, 2);
    let store = MemStore::new();
    let o = opts(1024, Compression::Lz4, BloomKind::Row);
    fill(
        TableBuilder::without_timestamps(store.create("old").unwrap(), o),
        &entries,
    );
    let new = build(&store, "new", &entries, o);
    assert!(new.timestamps.is_some());
    let old = open_table(&store, "old", 1, None).unwrap();
    assert_eq!(old.timestamps(), None, "unknown, not made up");
    assert_eq!(scan(&old).unwrap(), entries);
    check_seeks(&old, &entries);
    let t = Table::open_in_memory(store.open("old").unwrap(), 2).unwrap();
    assert_eq!(scan(&t).unwrap(), entries);
    // The old file is the new one without the timestamps field: nothing
    // else in its layout moved.
    let len = |name: &str| store.open(name).unwrap().len().unwrap();
    assert!(len("old") < len("new") && len("new") - len("old") <= 2 + 20);
}

#[test]
fn builder_rejects_bad_keys() {
    let store = MemStore::new();
    let mut b = TableBuilder::new(store.create("t").unwrap(), TableOptions::default());
    let k1 = key::encode(b"b", b"f", b"q", 1, 1, Kind::Put);
    let k0 = key::encode(b"a", b"f", b"q", 1, 1, Kind::Put);
    b.add(&k1, b"v").unwrap();
    assert!(matches!(b.add(&k1, b"v"), Err(Error::InvalidArgument(_))));
    assert!(matches!(b.add(&k0, b"v"), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        b.add(b"zzz not a key", b"v"),
        Err(Error::InvalidArgument(_))
    ));
    let mut w = store.create("nonempty").unwrap();
    w.append(b"junk").unwrap();
    let mut nb = TableBuilder::new(w, TableOptions::default());
    assert!(matches!(nb.add(&k0, b"v"), Err(Error::InvalidArgument(_))));
    assert!(nb.finish().is_err());
    // The builder is still usable after rejected input.
    let k2 = key::encode(b"c", b"f", b"q", 1, 1, Kind::Put);
    b.add(&k2, b"w").unwrap();
    assert_eq!(b.entries(), 2);
    let info = b.finish().unwrap();
    assert_eq!(info.entries, 2);
}

#[test]
fn estimated_size_tracks_stored_output() {
    // Keys in order, values that lz4 shrinks several times over.
    let entries: Entries = (0..4000u32)
        .map(|i| {
            let row = format!("row{i:06}");
            let k = key::encode(row.as_bytes(), b"f", b"q", 1, u64::from(i) + 1, Kind::Put);
            (k, vec![b'x'; 200])
        })
        .collect();
    let raw: u64 = entries
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as u64)
        .sum();
    for compression in [Compression::None, Compression::Lz4] {
        let store = MemStore::new();
        let mut b = TableBuilder::new(
            store.create("t").unwrap(),
            opts(64 << 10, compression, BloomKind::None),
        );
        b.add(&entries[0].0, &entries[0].1).unwrap();
        assert_eq!(b.estimated_size(), 0, "nothing is stored before a block is");
        let mut last = 0;
        for (k, v) in &entries[1..] {
            b.add(k, v).unwrap();
            last = b.estimated_size();
        }
        let info = b.finish().unwrap();
        // Within one stored block and the index of the file's true size.
        let slack = info.file_size / 4 + 1024;
        assert!(
            last <= info.file_size + slack && info.file_size <= last + slack,
            "{compression:?}: estimated {last}, stored {}",
            info.file_size
        );
        if compression == Compression::Lz4 {
            assert!(last < raw / 3, "estimated {last} of {raw} raw bytes");
        }
    }
}

#[test]
fn table_iterator_is_static_and_send() {
    fn assert_send_static<T: Send + 'static>(_: &T) {}
    let store = MemStore::new();
    let entries = random_entries(&mut StdRng::seed_from_u64(9), 50, 1);
    build(&store, "t", &entries, TableOptions::default());
    let t = open_table(&store, "t", 1, None).unwrap();
    let it = t.iter();
    assert_send_static(&it);
    drop(t); // the iterator keeps the table alive
    let mut it = it;
    let handle = std::thread::spawn(move || {
        it.seek_to_first().unwrap();
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next().unwrap();
        }
        n
    });
    assert_eq!(handle.join().unwrap(), entries.len());
}

#[test]
fn overlaps_compares_the_span_with_the_key_range() {
    let k = |row: &[u8]| key::encode(row, b"cf", b"q", 5, 1, Kind::Put);
    let entries: Entries = [b"b".as_slice(), b"d", b"f"]
        .iter()
        .map(|row| (k(row), b"v".to_vec()))
        .collect();
    let store = MemStore::new();
    build(&store, "t", &entries, TableOptions::default());
    let t = open_table(&store, "t", 1, None).unwrap();
    assert!(t.overlaps(b"a", b"c"), "span holds the smallest key");
    assert!(t.overlaps(b"e", b"z"), "span holds the largest key");
    assert!(t.overlaps(b"c", b"e"), "span inside the range");
    assert!(t.overlaps(&k(b"f"), b"z"), "span starts at the largest key");
    assert!(!t.overlaps(b"a", &k(b"b")), "end is exclusive");
    assert!(!t.overlaps(b"g", b"z"), "span after the largest key");
    build(&store, "empty", &Vec::new(), TableOptions::default());
    let e = open_table(&store, "empty", 2, None).unwrap();
    assert!(!e.overlaps(b"", &[0xFF; 4]), "an empty table holds nothing");
}

/// A writer that counts appends and hands everything to another.
struct CountingWriter {
    inner: Box<dyn gfs::WritableFile>,
    appends: Arc<AtomicUsize>,
}

impl gfs::WritableFile for CountingWriter {
    fn append(&mut self, data: &[u8]) -> gfs::Result<u64> {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.inner.append(data)
    }
    fn append_vectored(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.inner.append_vectored(bufs)
    }
    fn append_sync(&mut self, bufs: &[&[u8]]) -> gfs::Result<u64> {
        self.appends.fetch_add(1, Ordering::Relaxed);
        self.inner.append_sync(bufs)
    }
    fn sync(&mut self) -> gfs::Result<()> {
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
}

#[test]
fn a_table_goes_out_a_megabyte_at_a_time() {
    let mut rng = StdRng::seed_from_u64(9);
    // About 3 MiB in 4 KiB blocks of values that do not compress.
    let entries: Entries = (0..3000u32)
        .map(|i| {
            let k = key::encode(format!("r{i:06}").as_bytes(), b"f", b"q", 1, 1, Kind::Put);
            (k, (0..1000).map(|_| rng.gen()).collect())
        })
        .collect();
    let store = MemStore::new();
    let appends = Arc::new(AtomicUsize::new(0));
    let file = Box::new(CountingWriter {
        inner: store.create("t").unwrap(),
        appends: appends.clone(),
    });
    let info = fill(
        TableBuilder::new(file, opts(4096, Compression::Lz4, BloomKind::Row)),
        &entries,
    );
    assert_eq!(info.file_size, store.size("t").unwrap());
    let n = appends.load(Ordering::Relaxed);
    assert!(
        (3..=4).contains(&n),
        "{n} appends for {} bytes",
        info.file_size
    );
    let t = open_table(&store, "t", 1, None).unwrap();
    assert_eq!(scan(&t).unwrap(), entries);
    check_seeks(&t, &entries);
}
