//! Every filter and combinator against a brute-force model, over random
//! tables, through [`CellReader`] (the key-only plan and the row stage) and
//! through [`Compiled::try_apply`] (labels included).

use crate::data::{Cell, RowMutation, TimeRange};
use crate::filter::*;
use crate::iterator::VecIterator;
use crate::mutation::to_entries;
use crate::read::CellReader;
use crate::scan::ScanSpec;
use crate::schema::{FamilySchema, GcRule, TableSchema};
use crate::Result;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use regex::bytes::RegexBuilder;
use std::ops::Bound;
use std::sync::Arc;

const ROWS: &[&[u8]] = &[b"a", b"a\0", b"ab", b"b", b"b\n", b"\xff"];
const FAMILIES: &[&str] = &["a", "b"];
const QUALIFIERS: &[&[u8]] = &[b"", b"q", b"q\n", b"r", b"\xff"];
const VALUES: &[&[u8]] = &[b"", b"v0", b"v1", b"v2", b"w\n", b"\xff"];

fn table(rng: &mut StdRng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut entries = Vec::new();
    let mut seq = 1;
    for _ in 0..rng.gen_range(0..50) {
        let m = RowMutation::new(*ROWS.choose(rng).unwrap()).set_at(
            FAMILIES.choose(rng).unwrap(),
            *QUALIFIERS.choose(rng).unwrap(),
            rng.gen_range(0..6),
            *VALUES.choose(rng).unwrap(),
        );
        let e = to_entries(&m, seq, 0);
        seq += e.len() as u64;
        entries.extend(e);
    }
    entries.sort();
    entries
}

fn schema() -> Arc<TableSchema> {
    Arc::new(TableSchema::with_families(FAMILIES.iter().map(|f| {
        let mut s = FamilySchema::new(*f);
        s.gc = GcRule::KEEP_ALL;
        s
    })))
}

fn bound(rng: &mut StdRng, pool: &[&[u8]]) -> Bound<Vec<u8>> {
    let v = pool.choose(rng).unwrap().to_vec();
    match rng.gen_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(v),
        _ => Bound::Excluded(v),
    }
}

fn leaf(rng: &mut StdRng, in_condition: bool) -> RowFilter {
    let pick = |rng: &mut StdRng, v: &[&str]| v.choose(rng).unwrap().to_string();
    match rng.gen_range(0..18) {
        0 => RowFilter::PassAll,
        1 => RowFilter::BlockAll,
        2 => RowFilter::RowKeyRegex(pick(rng, &["a.*", "b", r".*\x00", "(?s).*", "a."]).into()),
        3 => RowFilter::RowSample([0.0, 1.0][rng.gen_range(0..2)]),
        4 => RowFilter::FamilyNameRegex(pick(rng, &["a", "b", "a|b", ".*", "c"])),
        5 => {
            RowFilter::ColumnQualifierRegex(pick(rng, &["q.*", "r", "", "(?s).*", r"\xff"]).into())
        }
        6 => RowFilter::ColumnRange {
            family: pick(rng, FAMILIES),
            start: bound(rng, QUALIFIERS),
            end: bound(rng, QUALIFIERS),
        },
        7 => {
            let start = rng.gen_range(0..6);
            RowFilter::TimestampRange(TimeRange {
                start,
                end: if rng.gen_bool(0.3) {
                    u64::MAX
                } else {
                    rng.gen_range(start..7)
                },
            })
        }
        8 => RowFilter::ValueRegex(pick(rng, &["v1", "v.*", ".*[02]", "", "(?s)w.*"]).into()),
        9 => RowFilter::ValueRange {
            start: bound(rng, VALUES),
            end: bound(rng, VALUES),
        },
        10 => RowFilter::CellsPerRowOffset(rng.gen_range(0..4)),
        11 => RowFilter::CellsPerRowLimit(rng.gen_range(0..5)),
        12 => RowFilter::CellsPerColumnLimit(rng.gen_range(0..3)),
        13 => RowFilter::StripValue,
        14 => RowFilter::ApplyLabel(pick(rng, &["x", "y"])),
        15 if !in_condition => RowFilter::Sink,
        _ => RowFilter::PassAll,
    }
}

fn filter(rng: &mut StdRng, depth: usize, in_condition: bool) -> RowFilter {
    if depth == 0 || rng.gen_bool(0.4) {
        return leaf(rng, in_condition);
    }
    let kids = |rng: &mut StdRng, n: usize| -> Vec<RowFilter> {
        (0..rng.gen_range(1..=n))
            .map(|_| filter(rng, depth - 1, in_condition))
            .collect()
    };
    match rng.gen_range(0..3) {
        0 => RowFilter::Chain(kids(rng, 4)),
        1 => RowFilter::Interleave(kids(rng, 3)),
        _ => {
            let branch = |rng: &mut StdRng| {
                rng.gen_bool(0.8)
                    .then(|| Box::new(filter(rng, depth - 1, true)))
            };
            RowFilter::Condition {
                predicate: Box::new(filter(rng, depth - 1, true)),
                true_filter: branch(rng),
                false_filter: branch(rng),
            }
        }
    }
}

/// The model's cell: a cell, its labels, and its place in the row.
#[derive(Debug, Clone)]
struct M {
    cell: Cell,
    labels: Vec<String>,
}

fn full(p: &[u8]) -> regex::bytes::Regex {
    RegexBuilder::new(&format!("^(?:{})$", std::str::from_utf8(p).unwrap()))
        .unicode(false)
        .build()
        .unwrap()
}

fn within(v: &[u8], s: &Bound<Vec<u8>>, e: &Bound<Vec<u8>>) -> bool {
    (match s {
        Bound::Included(x) => v >= x.as_slice(),
        Bound::Excluded(x) => v > x.as_slice(),
        Bound::Unbounded => true,
    }) && (match e {
        Bound::Included(x) => v <= x.as_slice(),
        Bound::Excluded(x) => v < x.as_slice(),
        Bound::Unbounded => true,
    })
}

/// Cloud Bigtable's filter semantics, written the plain way.
fn model(f: &RowFilter, row: &[u8], input: Vec<M>, sunk: &mut Vec<M>) -> Vec<M> {
    let only = |input: Vec<M>, p: &dyn Fn(&M) -> bool| input.into_iter().filter(|m| p(m)).collect();
    match f {
        RowFilter::Chain(v) => v.iter().fold(input, |acc, f| model(f, row, acc, sunk)),
        RowFilter::Interleave(v) => {
            let mut all: Vec<M> = v
                .iter()
                .flat_map(|f| model(f, row, input.clone(), sunk))
                .collect();
            all.sort_by(|a, b| {
                (
                    &a.cell.family,
                    &a.cell.qualifier,
                    std::cmp::Reverse(a.cell.timestamp),
                )
                    .cmp(&(
                        &b.cell.family,
                        &b.cell.qualifier,
                        std::cmp::Reverse(b.cell.timestamp),
                    ))
            });
            all
        }
        RowFilter::Condition {
            predicate,
            true_filter,
            false_filter,
        } => {
            let held = !model(predicate, row, input.clone(), sunk).is_empty();
            match if held { true_filter } else { false_filter } {
                Some(f) => model(f, row, input, sunk),
                None => Vec::new(),
            }
        }
        RowFilter::Sink => {
            sunk.extend(input);
            Vec::new()
        }
        RowFilter::PassAll => input,
        RowFilter::BlockAll => Vec::new(),
        RowFilter::RowKeyRegex(p) => {
            if full(p).is_match(row) {
                input
            } else {
                Vec::new()
            }
        }
        RowFilter::RowSample(p) => {
            if *p >= 1.0 {
                input
            } else {
                Vec::new()
            }
        }
        RowFilter::FamilyNameRegex(p) => only(input, &|m| {
            full(p.as_bytes()).is_match(m.cell.family.as_bytes())
        }),
        RowFilter::ColumnQualifierRegex(p) => only(input, &|m| full(p).is_match(&m.cell.qualifier)),
        RowFilter::ColumnRange { family, start, end } => only(input, &|m| {
            &m.cell.family == family && within(&m.cell.qualifier, start, end)
        }),
        RowFilter::TimestampRange(r) => only(input, &|m| r.contains(m.cell.timestamp)),
        RowFilter::ValueRegex(p) => only(input, &|m| full(p).is_match(&m.cell.value)),
        RowFilter::ValueRange { start, end } => only(input, &|m| within(&m.cell.value, start, end)),
        RowFilter::CellsPerRowOffset(n) => input.into_iter().skip(*n as usize).collect(),
        RowFilter::CellsPerRowLimit(n) => input.into_iter().take(*n as usize).collect(),
        RowFilter::CellsPerColumnLimit(n) => {
            // Count per column run in input order.
            let mut kept = Vec::new();
            let mut prev: Option<(String, Vec<u8>)> = None;
            let mut count = 0;
            for m in input {
                let col = (m.cell.family.clone(), m.cell.qualifier.clone());
                if prev.as_ref() != Some(&col) {
                    count = 0;
                    prev = Some(col);
                }
                count += 1;
                if count <= *n {
                    kept.push(m);
                }
            }
            kept
        }
        RowFilter::StripValue => input
            .into_iter()
            .map(|mut m| {
                m.cell.value = crate::Value::new();
                m
            })
            .collect(),
        RowFilter::ApplyLabel(l) => input
            .into_iter()
            .map(|mut m| {
                m.labels.push(l.clone());
                m
            })
            .collect(),
    }
}

fn model_row(f: &RowFilter, row: &[u8], cells: &[Cell]) -> Vec<M> {
    let input = cells
        .iter()
        .map(|c| M {
            cell: c.clone(),
            labels: Vec::new(),
        })
        .collect();
    let mut sunk = Vec::new();
    let mut out = model(f, row, input, &mut sunk);
    if !sunk.is_empty() {
        out.extend(sunk);
        out.sort_by(|a, b| {
            (
                &a.cell.family,
                &a.cell.qualifier,
                std::cmp::Reverse(a.cell.timestamp),
            )
                .cmp(&(
                    &b.cell.family,
                    &b.cell.qualifier,
                    std::cmp::Reverse(b.cell.timestamp),
                ))
        });
    }
    out
}

fn read(entries: &[(Vec<u8>, Vec<u8>)], spec: &ScanSpec) -> Vec<Cell> {
    let it = Box::new(VecIterator::new(Arc::new(entries.to_vec())));
    CellReader::new(it, spec, schema(), u64::MAX, 0)
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap()
}

/// Labels aside, the model's output per row with the limits applied.
fn expected(f: &RowFilter, base: &[Cell], rows: Option<u64>, cells: Option<u64>) -> Vec<Cell> {
    let mut out = Vec::new();
    let mut nrows = 0;
    let mut i = 0;
    while i < base.len() {
        let row = base[i].row.clone();
        let j = base[i..]
            .iter()
            .position(|c| c.row != row)
            .map_or(base.len(), |k| i + k);
        let got = model_row(f, &row, &base[i..j]);
        if !got.is_empty() {
            if rows.is_some_and(|l| nrows >= l) {
                break;
            }
            nrows += 1;
            out.extend(got.into_iter().map(|m| m.cell));
        }
        i = j;
    }
    if let Some(l) = cells {
        out.truncate(l as usize);
    }
    out
}

#[test]
fn filters_match_the_model() {
    let cases: u64 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    for seed in 0..cases {
        let mut rng = StdRng::seed_from_u64(seed);
        let entries = table(&mut rng);
        let f = filter(&mut rng, 3, false);
        let mut spec = ScanSpec::default();
        if rng.gen_bool(0.3) {
            spec.max_versions = Some(rng.gen_range(1..3));
        }
        if rng.gen_bool(0.2) {
            spec.families = Some(vec!["a".into()]);
        }
        let base = read(&entries, &spec);
        let (rows, cells) = (
            rng.gen_bool(0.2).then(|| rng.gen_range(0..3)),
            rng.gen_bool(0.2).then(|| rng.gen_range(0..6)),
        );
        let want = expected(&f, &base, rows, cells);
        let mut fspec = spec.clone();
        fspec.filter = Some(f.clone());
        fspec.row_limit = rows;
        fspec.cell_limit = cells;
        let got = read(&entries, &fspec);
        assert_eq!(
            got, want,
            "seed {seed} filter {f:?} rows {rows:?} cells {cells:?}"
        );
        // The filter's cells viewed in place are the same.
        let it = Box::new(VecIterator::new(Arc::new(entries.to_vec())));
        let mut r = CellReader::new(it, &fspec, schema(), u64::MAX, 0).unwrap();
        let mut viewed = Vec::new();
        while r.advance_view().unwrap() {
            viewed.push(r.current().expect("a view step shows its cell").to_cell());
        }
        assert_eq!(viewed, want, "seed {seed} viewed");
        // Labels, through the evaluator directly.
        let c = f.compile().unwrap();
        let mut i = 0;
        while i < base.len() {
            let row = base[i].row.clone();
            let j = base[i..]
                .iter()
                .position(|c| c.row != row)
                .map_or(base.len(), |k| i + k);
            let got: Vec<(Cell, Vec<String>)> = c
                .try_apply(&row, base[i..j].to_vec())
                .unwrap()
                .into_iter()
                .map(|l| (l.cell, l.labels))
                .collect();
            let want: Vec<(Cell, Vec<String>)> = model_row(&f, &row, &base[i..j])
                .into_iter()
                .map(|m| (m.cell, m.labels))
                .collect();
            assert_eq!(got, want, "seed {seed} filter {f:?}");
            i = j;
        }
    }
}

#[test]
fn row_sample_keeps_about_its_share() {
    let mut entries = Vec::new();
    for i in 0..2000u32 {
        entries.extend(to_entries(
            &RowMutation::new(i.to_be_bytes()).set_at("a", "q", 1, "v"),
            u64::from(i) + 1,
            0,
        ));
    }
    entries.sort();
    let spec = ScanSpec {
        filter: Some(RowFilter::RowSample(0.25)),
        ..Default::default()
    };
    let n = read(&entries, &spec).len();
    // Mean 500, standard deviation about 19: far outside means broken.
    assert!((350..650).contains(&n), "{n}");
}

#[test]
fn bad_filters_are_refused_before_reading() {
    let deep = (0..40).fold(RowFilter::PassAll, |f, _| RowFilter::Chain(vec![f]));
    for f in [
        RowFilter::RowKeyRegex(b"(".to_vec()),
        RowFilter::ValueRegex(b"\xff\\".to_vec()),
        RowFilter::FamilyNameRegex("a)|(b".into()),
        RowFilter::RowSample(1.5),
        RowFilter::RowSample(f64::NAN),
        RowFilter::ApplyLabel(String::new()),
        RowFilter::ApplyLabel("a b".into()),
        RowFilter::TimestampRange(TimeRange { start: 5, end: 4 }),
        RowFilter::Condition {
            predicate: Box::new(RowFilter::Sink),
            true_filter: None,
            false_filter: None,
        },
        deep,
    ] {
        let spec = ScanSpec {
            filter: Some(f.clone()),
            ..Default::default()
        };
        let it = Box::new(VecIterator::new(Arc::new(Vec::new())));
        assert!(
            matches!(
                CellReader::new(it, &spec, schema(), 0, 0),
                Err(crate::Error::BadFilter(_) | crate::Error::BadRegex { .. })
            ),
            "{f:?}"
        );
    }
}

/// The cells of `base` grouped by row.
fn rows_of(base: &[Cell]) -> Vec<(Vec<u8>, Vec<Cell>)> {
    let mut out: Vec<(Vec<u8>, Vec<Cell>)> = Vec::new();
    for c in base {
        match out.last_mut() {
            Some((r, cells)) if *r == c.row => cells.push(c.clone()),
            _ => out.push((c.row.clone(), vec![c.clone()])),
        }
    }
    out
}

/// Random filters (deeper and wider than the model test's) over random
/// rows under small limits: the evaluation either stays within them — at
/// most the row's cells plus `max_cells` out, and then exactly what the
/// unbounded evaluation outputs — or is refused as too large.
fn check_limits(seed: u64, max_cells: usize, max_bytes: u64) -> std::result::Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let entries = table(&mut rng);
    let f = filter(&mut rng, 5, false);
    let base = read(&entries, &ScanSpec::default());
    let limits = FilterLimits {
        max_cells,
        max_bytes,
        ..FilterLimits::DEFAULT
    };
    let bounded = Compiled::with_limits(&f, limits).map_err(|e| e.to_string())?;
    let free = Compiled::with_limits(
        &f,
        FilterLimits {
            max_cells: usize::MAX,
            max_bytes: u64::MAX,
            ..FilterLimits::DEFAULT
        },
    )
    .map_err(|e| e.to_string())?;
    // Samples draw at random: compare only filters without them.
    let sampled = format!("{f:?}").contains("RowSample");
    for (row, cells) in rows_of(&base) {
        match bounded.try_apply(&row, cells.clone()) {
            Ok(out) => {
                if out.len() > cells.len() + max_cells {
                    return Err(format!(
                        "{} cells out of {} under {max_cells}: {f:?}",
                        out.len(),
                        cells.len()
                    ));
                }
                let unbounded = free.try_apply(&row, cells).map_err(|e| e.to_string())?;
                if !sampled && out != unbounded {
                    return Err(format!("bounded and free differ: {f:?}"));
                }
            }
            Err(crate::Error::FilterTooLarge(_)) => {}
            Err(e) => return Err(format!("{e}: {f:?}")),
        }
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn random_filters_stay_within_their_limits(
        seed in proptest::prelude::any::<u64>(),
        max_cells in 0usize..64,
        max_bytes in 0u64..32,
    ) {
        check_limits(seed, max_cells, max_bytes).map_err(proptest::test_runner::TestCaseError::fail)?;
    }
}

/// Once found by the property above: sinks in a condition's predicate
/// passed the row a second time without paying for the copies.
#[test]
fn a_sinking_predicate_found_once_stays_within_its_limits() {
    check_limits(10620079431576926706, 0, 4).unwrap();
}

/// Four cells of row `r`, family `a`, qualifiers 0 to 3, value `v`.
fn four_cells() -> Vec<Cell> {
    (0..4u8)
        .map(|i| Cell {
            row: b"r".to_vec(),
            family: "a".into(),
            qualifier: vec![i],
            timestamp: 1,
            value: b"v".to_vec().into(),
        })
        .collect()
}

#[test]
fn sinks_pass_the_row_once_free_and_pay_for_copies_beyond() {
    let cells = four_cells();
    let none = FilterLimits {
        max_cells: 0,
        ..FilterLimits::DEFAULT
    };
    let run = |f: RowFilter| {
        Compiled::with_limits(&f, none)
            .unwrap()
            .try_apply(b"r", cells.clone())
    };
    // A sink alone passes the row: no copy.
    assert_eq!(
        run(RowFilter::Chain(vec![RowFilter::Sink])).unwrap().len(),
        4
    );
    // Two sinks, or a sinking predicate whose condition then passes the
    // row again, output each cell twice: copies, refused under no budget.
    for f in [
        RowFilter::Interleave(vec![RowFilter::Sink, RowFilter::Sink]),
        RowFilter::Condition {
            predicate: Box::new(RowFilter::Sink),
            true_filter: None,
            false_filter: Some(Box::new(RowFilter::PassAll)),
        },
    ] {
        let got = run(f.clone());
        assert!(
            matches!(got, Err(crate::Error::FilterTooLarge(_))),
            "{f:?}: {got:?}"
        );
    }
}

#[test]
fn doubling_every_cell_forty_times_is_refused() {
    let mut f = vec![RowFilter::PassAll; 0];
    for _ in 0..40 {
        f.push(RowFilter::Interleave(vec![
            RowFilter::PassAll,
            RowFilter::PassAll,
        ]));
    }
    f.push(RowFilter::PassAll);
    let f = RowFilter::Chain(f);
    let cells = four_cells();
    let before = limit_hits();
    let c = f.compile().unwrap();
    let e = c.try_apply(b"r", cells.clone()).unwrap_err();
    assert!(matches!(e, crate::Error::FilterTooLarge(_)), "{e}");
    assert!(limit_hits() > before);
    // Through a scan, the read fails the same way.
    let entries: Vec<(Vec<u8>, Vec<u8>)> = {
        let mut v = Vec::new();
        for (i, c) in cells.iter().enumerate() {
            let m = RowMutation::new(c.row.clone()).set_at("a", c.qualifier.clone(), 1, b"v");
            v.extend(to_entries(&m, i as u64 + 1, 0));
        }
        v.sort();
        v
    };
    let spec = ScanSpec {
        filter: Some(f),
        ..Default::default()
    };
    let it = Box::new(VecIterator::new(Arc::new(entries)));
    let got = CellReader::new(it, &spec, schema(), u64::MAX, 0)
        .unwrap()
        .collect::<Result<Vec<_>>>();
    assert!(
        matches!(got, Err(crate::Error::FilterTooLarge(_))),
        "{got:?}"
    );
}

#[test]
fn a_filters_regexes_share_one_budget() {
    // One big alternation compiles alone, but not 64 times in one filter
    // under a budget of a quarter MiB.
    let big: Vec<u8> = (0..400)
        .map(|i| format!("w{i}x|"))
        .collect::<String>()
        .into_bytes();
    let one = RowFilter::ValueRegex(big.clone());
    let limits = FilterLimits {
        regex_bytes: 256 << 10,
        ..FilterLimits::DEFAULT
    };
    assert!(Compiled::with_limits(&one, limits).is_ok());
    let many = RowFilter::Chain(vec![RowFilter::ValueRegex(big); 64]);
    assert!(matches!(
        Compiled::with_limits(&many, limits),
        Err(crate::Error::BadRegex { .. })
    ));
}
