//! One scanner read several ways at once (cells viewed in place, cells
//! handed out, row keys, whole rows) across tablets: what it returns does
//! not depend on whether a row limit makes it count rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::schema::{FamilySchema, TableSchema};
use engine::*;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// What one step of a mixed read returned.
#[derive(Debug, PartialEq)]
enum Got {
    View(Option<(Vec<u8>, Vec<u8>)>),
    Cell(Option<(Vec<u8>, Vec<u8>)>),
    Key(Option<Vec<u8>>),
    Row(Option<(Vec<u8>, usize)>),
}

fn read_mixed(bt: &Bigtable, spec: ScanSpec, seed: u64) -> Vec<Got> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut scan = bt.scan("t", spec).unwrap();
    let mut out = Vec::new();
    loop {
        let got = match rng.gen_range(0..10) {
            0..=5 => Got::View(
                scan.next_view()
                    .unwrap()
                    .map(|c| (c.row.to_vec(), c.qualifier.to_vec())),
            ),
            6..=7 => Got::Cell(
                scan.next()
                    .transpose()
                    .unwrap()
                    .map(|c| (c.row, c.qualifier)),
            ),
            8 => Got::Key(scan.next_row_key().unwrap()),
            _ => Got::Row(scan.next_row().unwrap().map(|(r, cells)| (r, cells.len()))),
        };
        let end = matches!(
            got,
            Got::View(None) | Got::Cell(None) | Got::Key(None) | Got::Row(None)
        );
        out.push(got);
        if end {
            return out;
        }
    }
}

#[test]
fn mixed_reads_agree_with_and_without_a_row_limit() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    bt.create_table("t", TableSchema::with_families([FamilySchema::new("f")]))
        .unwrap();
    let rows: Vec<RowMutation> = (0..300)
        .map(|r| {
            (0..1 + r % 4).fold(RowMutation::new(format!("r{r:04}")), |m, q| {
                m.set("f", format!("q{q}"), "v")
            })
        })
        .collect();
    bt.apply_batch("t", &rows, WriteOptions::default()).unwrap();
    bt.control("split t r0100").unwrap();
    bt.control("split t r0200").unwrap();
    assert_eq!(bt.tablets("t").unwrap().len(), 3);
    for seed in 0..40 {
        let plain = read_mixed(&bt, ScanSpec::default(), seed);
        let limited = ScanSpec {
            row_limit: Some(u64::MAX),
            ..ScanSpec::default()
        };
        let counted = read_mixed(&bt, limited, seed);
        if let Some(i) =
            (0..plain.len().max(counted.len())).find(|&i| plain.get(i) != counted.get(i))
        {
            panic!(
                "seed {seed}: step {i}: without a row limit {:?}, with one {:?} (after {:?})",
                plain.get(i),
                counted.get(i),
                &plain[i.saturating_sub(3)..i]
            );
        }
        assert!(plain.len() > 100, "seed {seed}: {} steps", plain.len());
    }
    bt.close().unwrap();
}
