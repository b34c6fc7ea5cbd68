//! The paper's Figure 6 workloads, written once against a small key/value
//! trait so that the engine, RocksDB and fjall run exactly the same code: the
//! same keys in the same order, the same values, threads, caps and sync setting.

use super::common::{row_key, run_ops, run_ranges, share, Deal, Measured, RowKey, VALUE_BYTES};
use anyhow::{bail, Result};
use std::ops::Range;
use std::time::{Duration, Instant};

/// The six workloads of Figure 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fig6 {
    SeqWrite,
    RandWrite,
    SeqRead,
    RandRead,
    RandReadMem,
    Scan,
}

impl Fig6 {
    pub const ALL: [Fig6; 6] = [
        Fig6::SeqWrite,
        Fig6::RandWrite,
        Fig6::SeqRead,
        Fig6::RandRead,
        Fig6::RandReadMem,
        Fig6::Scan,
    ];
    pub fn label(self) -> &'static str {
        match self {
            Fig6::SeqWrite => "sequential write",
            Fig6::RandWrite => "random write",
            Fig6::SeqRead => "sequential read",
            Fig6::RandRead => "random read",
            Fig6::RandReadMem => "random read (mem)",
            Fig6::Scan => "scan",
        }
    }
    /// The key in the JSON line.
    pub fn key(self) -> &'static str {
        match self {
            Fig6::SeqWrite => "seq_write",
            Fig6::RandWrite => "rand_write",
            Fig6::SeqRead => "seq_read",
            Fig6::RandRead => "rand_read",
            Fig6::RandReadMem => "rand_read_mem",
            Fig6::Scan => "scan",
        }
    }
    /// Figure 6, one tablet server: 1000-byte values read or written per second.
    pub fn paper(self) -> f64 {
        match self {
            Fig6::RandRead => 1212.0,
            Fig6::RandReadMem => 10811.0,
            Fig6::RandWrite => 8850.0,
            Fig6::SeqRead => 4425.0,
            Fig6::SeqWrite => 8547.0,
            Fig6::Scan => 15385.0,
        }
    }
}

/// What the workloads need of a store.
pub trait KvStore: Sync {
    /// Writes one value (synced if the store was opened with sync).
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// The length of the value under `key`, or `None` if absent.
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;
    /// Counts the entries with keys in `[start, end)`, giving up at `deadline`.
    fn scan(&self, start: &[u8], end: &[u8], deadline: Instant) -> Result<u64>;
    /// Moves written data out of memory into the store's sorted files, so that
    /// reads measure the read path rather than a memtable.
    fn flush(&self) -> Result<()>;
    /// Writes one value without waiting for durability, or `None` if the
    /// store has no such write (see [`fill_rest`]).
    fn put_unsynced(&self, _key: &[u8], _value: &[u8]) -> Option<Result<()>> {
        None
    }
    /// Drops what a cache in front of the store holds of the values read
    /// or written so far (a mount's pages in the kernel), so that the
    /// random reads that follow measure the store, as the paper's do, not
    /// a re-read of what the sequential read just brought in.
    fn forget_cached(&self) -> Result<()> {
        Ok(())
    }
    /// Whether the store runs no background work now (a flush or a
    /// compaction the writes left), for a phase to start on a settled store.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    fn background_idle(&self) -> Result<bool> {
        Ok(true)
    }
    /// How many sorted files (SSTables, segments) hold the store's data
    /// now, or `None` where it does not say: a settled store's reads
    /// depend on how many it left.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    fn files(&self) -> Result<Option<usize>> {
        Ok(None)
    }
}

/// The keys a capped sequential fill actually wrote: each thread a prefix of its share.
#[derive(Debug, Clone)]
pub struct Written {
    ranges: Vec<Range<u64>>,
}

impl Written {
    /// From a fill of `n` keys over `m.per_thread.len()` threads.
    pub fn from_fill(n: u64, m: &Measured) -> Written {
        let threads = m.per_thread.len();
        let ranges = m
            .per_thread
            .iter()
            .enumerate()
            .map(|(t, &done)| {
                let s = share(n, threads, t);
                s.start..(s.start + done).min(s.end)
            })
            .collect();
        Written { ranges }
    }
    /// Every one of the `n` keys.
    pub fn all(n: u64) -> Written {
        Written {
            ranges: std::iter::once(0..n).collect(),
        }
    }
    pub fn total(&self) -> u64 {
        self.ranges.iter().map(|r| r.end - r.start).sum()
    }
    /// The `k`-th written key index in key order (`k < total()`).
    pub fn nth(&self, mut k: u64) -> u64 {
        for r in &self.ranges {
            let len = r.end - r.start;
            if k < len {
                return r.start + k;
            }
            k -= len;
        }
        self.ranges.last().map(|r| r.end).unwrap_or(0)
    }
}

/// Results of the five key/value workloads on one store.
#[derive(Debug, Clone)]
pub struct KvResults {
    pub seq_write: Measured,
    pub rand_write: Measured,
    pub seq_read: Measured,
    pub rand_read: Measured,
    pub scan: Measured,
    /// Time the flush between the writes and the reads took (not in any rate).
    pub flush_secs: f64,
}

impl KvResults {
    pub fn get(&self, w: Fig6) -> Option<&Measured> {
        match w {
            Fig6::SeqWrite => Some(&self.seq_write),
            Fig6::RandWrite => Some(&self.rand_write),
            Fig6::SeqRead => Some(&self.seq_read),
            Fig6::RandRead => Some(&self.rand_read),
            Fig6::Scan => Some(&self.scan),
            Fig6::RandReadMem => None,
        }
    }
}

/// Parameters shared by every store's run.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Keys in the key space (= data size / value size).
    pub n: u64,
    pub threads: usize,
    pub time_cap: Duration,
    /// A read phase (sequential, random, scan) that ends sooner is run
    /// again, whole, until its passes add up to this (zero: once).
    pub min_read: Duration,
}

/// The engine's `min_read`: a pass over 64 MiB of cached data takes 10–50
/// ms, where one thread's late start or a compaction's moment decides the
/// figure. Every store of a run gets the same.
pub const ENGINE_MIN_READ: Duration = Duration::from_millis(500);

/// At most this many passes of one read phase (a scan of 64 MiB of cached
/// cells takes 7 ms: 50 passes measured 0.3 s of the half second).
const MAX_READ_PASSES: u32 = 200;

/// Reads are dealt out in pieces of this many keys, so that every thread
/// reads until the pass is done (see [`Deal::Pieces`]); a sequential read
/// still reads each piece in key order (a 64 KiB block holds about 60).
const READ_PIECES: Deal = Deal::Pieces(256);

/// A scan pass is dealt out as this many key ranges per thread.
const SCAN_PIECES_PER_THREAD: u64 = 8;

impl Plan {
    /// The plan with read phases of at least `min_read`.
    pub fn reading_at_least(self, min_read: Duration) -> Plan {
        Plan { min_read, ..self }
    }
}

/// Runs `pass` until its passes took `plan.min_read` (or one was capped),
/// and reports them as one: their operations over their time. Passes after
/// the first read what the first brought into the caches.
fn passes(plan: Plan, mut pass: impl FnMut() -> Result<Measured>) -> Result<Measured> {
    let mut total = pass()?;
    let mut n = 1;
    while total.secs < plan.min_read.as_secs_f64() && !total.capped && n < MAX_READ_PASSES {
        let m = pass()?;
        total.ops += m.ops;
        total.secs += m.secs;
        total.capped = m.capped;
        for (t, ops) in total.per_thread.iter_mut().zip(m.per_thread) {
            *t += ops;
        }
        n += 1;
    }
    Ok(total)
}

/// Writes `n` keys in order (each thread its own contiguous range, as the paper's clients).
pub fn fill_seq(store: &dyn KvStore, plan: Plan) -> Result<Measured> {
    run_ops(
        plan.threads,
        plan.n,
        plan.time_cap,
        Deal::Shares,
        |ctx, i| store.put(RowKey::new(i).as_bytes(), ctx.value()),
    )
}

/// Writes `n` values under uniformly random keys of the key space.
pub fn fill_random(store: &dyn KvStore, plan: Plan) -> Result<Measured> {
    run_ops(
        plan.threads,
        plan.n,
        plan.time_cap,
        Deal::Shares,
        |ctx, _| store.put(RowKey::new(ctx.rng.below(plan.n)).as_bytes(), ctx.value()),
    )
}

/// The keys the reads of `store` use after a sequential fill that wrote
/// `written` of `n`: all of them, once the keys a time-capped fill left are
/// written unsynced and unmeasured, if the store can (else those written).
/// Synced fills reach very different counts in their cap (a peer's hundreds
/// of writes a second against our thousands), and reads of different data
/// sizes would not compare stores.
pub fn fill_rest(store: &dyn KvStore, n: u64, written: Written) -> Result<Written> {
    if written.total() >= n {
        return Ok(written);
    }
    let mut rng = super::common::FastRng::new(n);
    let mut value = vec![0u8; VALUE_BYTES];
    let mut next = 0;
    let end = std::iter::once(n..n);
    for r in written.ranges.iter().cloned().chain(end) {
        for i in next..r.start {
            rng.fill(&mut value);
            match store.put_unsynced(RowKey::new(i).as_bytes(), &value) {
                Some(done) => done?,
                None => return Ok(written),
            }
        }
        next = r.end;
    }
    Ok(Written::all(n))
}

/// A read of `key` found the value it wrote.
pub fn check_found(key: &[u8], len: Option<usize>) -> Result<()> {
    let key = || String::from_utf8_lossy(key).into_owned();
    match len {
        Some(VALUE_BYTES) => Ok(()),
        Some(other) => bail!("key {}: value of {other} bytes, wrote {VALUE_BYTES}", key()),
        None => bail!("key {} was written but is not found", key()),
    }
}

/// Reads every written key, each piece of keys a thread is dealt in key
/// order.
pub fn read_seq(store: &dyn KvStore, written: &Written, plan: Plan) -> Result<Measured> {
    run_ops(
        plan.threads,
        written.total(),
        plan.time_cap,
        READ_PIECES,
        |_, k| {
            let key = RowKey::new(written.nth(k));
            check_found(key.as_bytes(), store.get(key.as_bytes())?)
        },
    )
}

/// Reads as many keys as were written, each chosen uniformly among them.
pub fn read_random(store: &dyn KvStore, written: &Written, plan: Plan) -> Result<Measured> {
    let total = written.total();
    run_ops(plan.threads, total, plan.time_cap, READ_PIECES, |ctx, _| {
        let key = RowKey::new(written.nth(ctx.rng.below(total)));
        check_found(key.as_bytes(), store.get(key.as_bytes())?)
    })
}

/// One pass over every written key with the store's scanner, split into key
/// ranges the threads are dealt. Counts entries; fewer than written (uncapped) is an error.
pub fn scan_all(store: &dyn KvStore, written: &Written, plan: Plan) -> Result<Measured> {
    let total = written.total();
    let pieces = Deal::Pieces(total.div_ceil(plan.threads.max(1) as u64 * SCAN_PIECES_PER_THREAD));
    let m = run_ranges(
        plan.threads,
        total,
        plan.time_cap,
        pieces,
        |_, r, deadline| {
            if r.is_empty() {
                return Ok(0);
            }
            let start = row_key(written.nth(r.start));
            let end = row_key(written.nth(r.end - 1) + 1);
            store.scan(start.as_bytes(), end.as_bytes(), deadline)
        },
    )?;
    // A scan that stopped short of the deadline must have seen every key once.
    let timed_out = m.secs >= plan.time_cap.as_secs_f64();
    if m.ops > total || (m.ops < total && !timed_out) {
        bail!("scan returned {} entries, {} were written", m.ops, total);
    }
    Ok(m)
}

/// One read workload of the suite on `store` (passes until they took
/// `plan.min_read`): the sequential or random reads or the scan of the
/// keys `written`; an error for a write workload.
pub fn read_phase(w: Fig6, store: &dyn KvStore, written: &Written, plan: Plan) -> Result<Measured> {
    match w {
        Fig6::SeqRead => passes(plan, || read_seq(store, written, plan)),
        Fig6::RandRead | Fig6::RandReadMem => passes(plan, || read_random(store, written, plan)),
        Fig6::Scan => passes(plan, || scan_all(store, written, plan)),
        Fig6::SeqWrite | Fig6::RandWrite => bail!("{} is not a read", w.label()),
    }
}

/// Told where a suite is: after each workload `Some(it)`, after a stretch
/// that is none of them (the rest of a fill, a flush) `None`, so that a
/// caller can measure each workload's cost (the mount's requests per file).
pub type Mark<'a> = &'a mut dyn FnMut(Option<Fig6>);

/// The five key/value workloads, in the paper's order of phases: both fills,
/// the rest of a capped sequential fill ([`fill_rest`]), a flush, then the
/// reads and the scan of the sequentially filled store; `mark` is called
/// after each phase (`&mut |_| {}` ignores it).
pub fn kv_suite(
    seq: &dyn KvStore,
    rand: &dyn KvStore,
    plan: Plan,
    mark: Mark<'_>,
) -> Result<KvResults> {
    let seq_write = fill_seq(seq, plan)?;
    mark(Some(Fig6::SeqWrite));
    let rand_write = fill_random(rand, plan)?;
    mark(Some(Fig6::RandWrite));
    let written = fill_rest(seq, plan.n, Written::from_fill(plan.n, &seq_write))?;
    let t = Instant::now();
    seq.flush()?;
    rand.flush()?;
    let flush_secs = t.elapsed().as_secs_f64();
    mark(None);
    let seq_read = read_phase(Fig6::SeqRead, seq, &written, plan)?;
    mark(Some(Fig6::SeqRead));
    seq.forget_cached()?;
    mark(None);
    let rand_read = read_phase(Fig6::RandRead, seq, &written, plan)?;
    mark(Some(Fig6::RandRead));
    let scan = read_phase(Fig6::Scan, seq, &written, plan)?;
    mark(Some(Fig6::Scan));
    Ok(KvResults {
        seq_write,
        rand_write,
        seq_read,
        rand_read,
        scan,
        flush_secs,
    })
}

/// All six Figure 6 workloads: the key/value five on `seq` and `rand`, then a
/// sequential fill (reported apart), a flush and random reads of `mem`, whose
/// data sits in an in-memory locality group.
#[derive(Debug, Clone)]
pub struct Fig6Results {
    pub kv: KvResults,
    pub mem_fill: Measured,
    pub mem_read: Measured,
}

impl Fig6Results {
    pub fn get(&self, w: Fig6) -> &Measured {
        match w {
            Fig6::RandReadMem => &self.mem_read,
            Fig6::SeqWrite => &self.kv.seq_write,
            Fig6::RandWrite => &self.kv.rand_write,
            Fig6::SeqRead => &self.kv.seq_read,
            Fig6::RandRead => &self.kv.rand_read,
            Fig6::Scan => &self.kv.scan,
        }
    }
}

pub fn fig6_suite(
    seq: &dyn KvStore,
    rand: &dyn KvStore,
    mem: &dyn KvStore,
    plan: Plan,
) -> Result<Fig6Results> {
    fig6_suite_marked(seq, rand, mem, plan, &mut |_| {})
}

/// [`fig6_suite`], calling `mark` after each phase (see [`Mark`]).
pub fn fig6_suite_marked(
    seq: &dyn KvStore,
    rand: &dyn KvStore,
    mem: &dyn KvStore,
    plan: Plan,
    mark: Mark<'_>,
) -> Result<Fig6Results> {
    let kv = kv_suite(seq, rand, plan, mark)?;
    let mem_fill = fill_seq(mem, plan)?;
    mem.flush()?;
    mem.forget_cached()?;
    mark(None);
    let written = Written::from_fill(plan.n, &mem_fill);
    let mem_read = read_phase(Fig6::RandReadMem, mem, &written, plan)?;
    mark(Some(Fig6::RandReadMem));
    Ok(Fig6Results {
        kv,
        mem_fill,
        mem_read,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// The trait's contract on a BTreeMap: the suite must run clean on it.
    struct MapStore(Mutex<BTreeMap<Vec<u8>, usize>>);

    impl KvStore for MapStore {
        fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
            self.0.lock().unwrap().insert(key.to_vec(), value.len());
            Ok(())
        }
        fn get(&self, key: &[u8]) -> Result<Option<usize>> {
            Ok(self.0.lock().unwrap().get(key).copied())
        }
        fn scan(&self, start: &[u8], end: &[u8], _: Instant) -> Result<u64> {
            let map = self.0.lock().unwrap();
            Ok(map.range(start.to_vec()..end.to_vec()).count() as u64)
        }
        fn flush(&self) -> Result<()> {
            Ok(())
        }
        fn put_unsynced(&self, key: &[u8], value: &[u8]) -> Option<Result<()>> {
            Some(self.put(key, value))
        }
    }

    fn plan(n: u64) -> Plan {
        Plan {
            n,
            threads: 3,
            time_cap: Duration::from_secs(20),
            min_read: Duration::ZERO,
        }
    }

    #[test]
    fn suite_runs_every_workload_to_completion() {
        let seq = MapStore(Mutex::new(BTreeMap::new()));
        let rand = MapStore(Mutex::new(BTreeMap::new()));
        let r = kv_suite(&seq, &rand, plan(500), &mut |_| {}).unwrap();
        assert_eq!(r.seq_write.ops, 500);
        assert_eq!(r.rand_write.ops, 500);
        assert_eq!(r.seq_read.ops, 500);
        assert_eq!(r.rand_read.ops, 500);
        assert_eq!(r.scan.ops, 500);
        assert_eq!(seq.0.lock().unwrap().len(), 500);
        // Random keys collide, so fewer distinct keys than writes.
        assert!(rand.0.lock().unwrap().len() < 500);
    }

    #[test]
    fn short_read_phases_run_again_until_they_took_min_read() {
        let seq = MapStore(Mutex::new(BTreeMap::new()));
        let rand = MapStore(Mutex::new(BTreeMap::new()));
        let min_read = Duration::from_millis(30);
        let r = kv_suite(
            &seq,
            &rand,
            plan(200).reading_at_least(min_read),
            &mut |_| {},
        )
        .unwrap();
        // Writes run once; each read phase whole passes, as long as asked.
        assert_eq!(r.seq_write.ops, 200);
        for m in [&r.seq_read, &r.rand_read, &r.scan] {
            assert!(m.ops.is_multiple_of(200), "{m:?}");
            assert!(m.ops > 200, "a pass of 200 map reads took 30 ms: {m:?}");
            assert!(m.secs >= min_read.as_secs_f64() || m.ops == 200 * u64::from(MAX_READ_PASSES));
            assert_eq!(m.per_thread.iter().sum::<u64>(), m.ops);
            assert!(!m.capped);
        }
    }

    #[test]
    fn fig6_suite_fills_and_reads_the_mem_store() {
        let stores: Vec<MapStore> = (0..3)
            .map(|_| MapStore(Mutex::new(BTreeMap::new())))
            .collect();
        let r = fig6_suite(&stores[0], &stores[1], &stores[2], plan(300)).unwrap();
        assert_eq!(r.mem_fill.ops, 300);
        assert_eq!(r.get(Fig6::RandReadMem).ops, 300);
        assert_eq!(r.get(Fig6::Scan).ops, 300);
        assert_eq!(stores[2].0.lock().unwrap().len(), 300);
    }

    #[test]
    fn missing_key_is_an_error() {
        let empty = MapStore(Mutex::new(BTreeMap::new()));
        let w = Written {
            ranges: std::iter::once(0..10).collect(),
        };
        let err = read_seq(&empty, &w, plan(10)).unwrap_err();
        assert!(format!("{err:#}").contains("not found"), "{err:#}");
    }

    /// A fill of 30 keys on three threads cut short by its time cap: the
    /// threads wrote 2, 0 and 3 keys of their shares.
    fn capped_fill() -> Measured {
        Measured {
            ops: 5,
            per_thread: vec![2, 0, 3],
            secs: 1.0,
            capped: true,
        }
    }

    #[test]
    fn written_maps_capped_shares() {
        let m = capped_fill();
        let w = Written::from_fill(30, &m);
        assert_eq!(w.total(), 5);
        let keys: Vec<u64> = (0..5).map(|k| w.nth(k)).collect();
        assert_eq!(keys, vec![0, 1, 20, 21, 22]);
    }

    #[test]
    fn fill_rest_writes_the_keys_a_capped_fill_left() {
        let m = capped_fill();
        let store = MapStore(Mutex::new(BTreeMap::new()));
        let w = fill_rest(&store, 30, Written::from_fill(30, &m)).unwrap();
        assert_eq!(w.total(), 30);
        // The keys the fill wrote are not written again.
        assert_eq!(store.0.lock().unwrap().len(), 25);
        for i in 0..30 {
            let written = [0, 1, 20, 21, 22].contains(&i);
            assert_eq!(
                store.get(row_key(i).as_bytes()).unwrap().is_some(),
                !written
            );
        }
        // A store without unsynced writes reads what its fill wrote.
        struct Synced(MapStore);
        impl KvStore for Synced {
            fn put(&self, k: &[u8], v: &[u8]) -> Result<()> {
                self.0.put(k, v)
            }
            fn get(&self, k: &[u8]) -> Result<Option<usize>> {
                self.0.get(k)
            }
            fn scan(&self, s: &[u8], e: &[u8], d: Instant) -> Result<u64> {
                self.0.scan(s, e, d)
            }
            fn flush(&self) -> Result<()> {
                Ok(())
            }
        }
        let synced = Synced(MapStore(Mutex::new(BTreeMap::new())));
        let w = fill_rest(&synced, 30, Written::from_fill(30, &m)).unwrap();
        assert_eq!(w.total(), 5);
        assert!(synced.0 .0.lock().unwrap().is_empty());
    }

    #[test]
    fn paper_figures_match_labels() {
        assert_eq!(Fig6::RandRead.paper(), 1212.0);
        assert_eq!(Fig6::RandReadMem.paper(), 10811.0);
        assert_eq!(Fig6::RandWrite.paper(), 8850.0);
        assert_eq!(Fig6::SeqRead.paper(), 4425.0);
        assert_eq!(Fig6::SeqWrite.paper(), 8547.0);
        assert_eq!(Fig6::Scan.paper(), 15385.0);
    }
}
