#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Fuzzes the internal RPC's decoder: random bytes, and valid messages with
//! bytes flipped, inserted or cut, never panic, never recurse past the
//! stack, and never allocate more than a bound of the input's size (a
//! length word claiming gigabytes, or a sequence claiming a million
//! elements at each level of a nested filter, must not reserve them).

use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts live and peak heap bytes (this test binary has one test, so no
/// other thread allocates meanwhile).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(n, Ordering::Relaxed);
        // SAFETY: the caller's layout, as given.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Heap bytes `f` needed at its peak beyond what was live before.
fn peak_of(f: impl FnOnce()) -> usize {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// What decoding `len` bytes may cost: a few MiB of reserved room at most
/// (see `depth.rs`), plus a small multiple of the input.
fn bound(len: usize) -> usize {
    (16 << 20) + 64 * len
}

/// Valid encodings to mutate: calls with filters, writes, scans, chunks.
fn seeds() -> Vec<Vec<u8>> {
    use engine::filter::RowFilter;
    let filter = RowFilter::Chain(vec![
        RowFilter::FamilyNameRegex("cf".into()),
        RowFilter::Condition {
            predicate: Box::new(RowFilter::Interleave(vec![
                RowFilter::PassAll,
                RowFilter::ColumnQualifierRegex(b"q.*".to_vec()),
            ])),
            true_filter: Some(Box::new(RowFilter::Sink)),
            false_filter: None,
        },
    ]);
    let spec = engine::ScanSpec {
        filter: Some(filter),
        ..Default::default()
    };
    let mutation = engine::RowMutation::new(b"row").set_at("cf", b"q", 7, b"value");
    vec![
        grpc::internal::encode_scan_call("server-1", 9, &spec),
        grpc::internal::encode_read_row("server-1", 9, b"row", &spec),
        grpc::internal::encode_apply("server-1", 9, vec![mutation]),
    ]
}

fn mutate(mut b: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
    for &(at, kind, byte) in edits {
        if b.is_empty() {
            b.push(byte);
            continue;
        }
        let i = at % b.len();
        match kind % 4 {
            0 => b[i] = byte,
            1 => b.insert(i, byte),
            2 => {
                b.remove(i);
            }
            // A length or count word made huge.
            _ => b[i] = 0xff,
        }
    }
    b
}

#[test]
fn the_internal_decoder_is_bounded_on_any_input() {
    let seeds = seeds();
    let worst = std::cell::Cell::new(0usize);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 3000,
        ..ProptestConfig::default()
    });
    let strategy = (
        proptest::collection::vec(any::<u8>(), 0..2048),
        0..seeds.len() + 1,
        proptest::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..8),
    );
    runner
        .run(&strategy, |(random, which, edits)| {
            let input = match seeds.get(which) {
                Some(seed) => mutate(seed.clone(), &edits),
                None => random,
            };
            let peak = peak_of(|| {
                grpc::internal::decode_any(&input);
            });
            worst.set(worst.get().max(peak));
            prop_assert!(
                peak <= bound(input.len()),
                "{} bytes took {peak} bytes to decode",
                input.len()
            );
            Ok(())
        })
        .unwrap();
    // The seeds themselves decode.
    for s in &seeds {
        assert!(grpc::internal::decode_any(s) >= 1);
    }
    eprintln!("worst peak while decoding: {} bytes", worst.get());
}
