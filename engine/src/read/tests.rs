//! Unit tests of the cell reader: visibility, GC rules, filters and column lookups.

use super::{compile_column_regex, exact_column_regex, CellReader};
use crate::data::{Cell, RowMutation, RowRange, TimeRange};
use crate::error::{Error, Result};
use crate::iterator::{InternalIterator, VecIterator};
use crate::key::{self, Kind, SeqNo, TOMBSTONE_TS};
use crate::mutation::to_entries;
use crate::scan::ScanSpec;
use crate::schema::{FamilySchema, GcMode, GcRule, TableSchema};
use std::ops::Bound;
use std::sync::Arc;

/// Applies mutations with consecutive sequence numbers; returns sorted entries.
struct Log {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    seq: SeqNo,
}

impl Log {
    fn new() -> Self {
        Log {
            entries: Vec::new(),
            seq: 1,
        }
    }
    fn apply(&mut self, m: RowMutation) -> &mut Self {
        let e = to_entries(&m, self.seq, 1_000);
        self.seq += e.len() as u64;
        self.entries.extend(e);
        self
    }
    fn iter(&self) -> Box<dyn InternalIterator> {
        let mut v = self.entries.clone();
        v.sort();
        Box::new(VecIterator::new(Arc::new(v)))
    }
}

fn schema_with(gc: GcRule) -> Arc<TableSchema> {
    let mut a = FamilySchema::new("a");
    a.gc = gc.clone();
    let mut b = FamilySchema::new("b");
    b.gc = gc;
    Arc::new(TableSchema::with_families([a, b]))
}

fn keep_all() -> Arc<TableSchema> {
    schema_with(GcRule::KEEP_ALL)
}

fn read(log: &Log, spec: &ScanSpec, schema: Arc<TableSchema>, snap: SeqNo, now: u64) -> Vec<Cell> {
    CellReader::new(log.iter(), spec, schema, snap, now)
        .unwrap()
        .collect::<Result<Vec<_>>>()
        .unwrap()
}

/// (row, family:qualifier, ts, value) for compact assertions.
fn brief(cells: &[Cell]) -> Vec<(String, String, u64, String)> {
    cells
        .iter()
        .map(|c| {
            (
                String::from_utf8_lossy(&c.row).into_owned(),
                format!("{}:{}", c.family, String::from_utf8_lossy(&c.qualifier)),
                c.timestamp,
                String::from_utf8_lossy(&c.value).into_owned(),
            )
        })
        .collect()
}

fn all(log: &Log) -> Vec<(String, String, u64, String)> {
    brief(&read(log, &ScanSpec::default(), keep_all(), u64::MAX, 0))
}

fn c(row: &str, col: &str, ts: u64, v: &str) -> (String, String, u64, String) {
    (row.into(), col.into(), ts, v.into())
}

#[test]
fn order_is_row_family_qualifier_newest_first() {
    let mut log = Log::new();
    log.apply(RowMutation::new("r2").set_at("b", "x", 1, "v1"))
        .apply(
            RowMutation::new("r1")
                .set_at("b", "q", 5, "v2")
                .set_at("a", "z", 1, "v3"),
        )
        .apply(
            RowMutation::new("r1")
                .set_at("a", "z", 9, "v4")
                .set_at("a", "", 2, "v5"),
        )
        .apply(RowMutation::new("r1").set("a", "z", "v6"));
    assert_eq!(
        all(&log),
        vec![
            c("r1", "a:", 2, "v5"),
            c("r1", "a:z", 1_000, "v6"),
            c("r1", "a:z", 9, "v4"),
            c("r1", "a:z", 1, "v3"),
            c("r1", "b:q", 5, "v2"),
            c("r2", "b:x", 1, "v1"),
        ]
    );
}

#[test]
fn row_tombstone_hides_only_lower_sequences() {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r")
            .set_at("a", "q", 5, "old")
            .set_at("b", "q", 1, "old"),
    )
    .apply(
        RowMutation::new("r")
            .delete_row()
            .set_at("a", "q", 3, "after"),
    )
    .apply(RowMutation::new("s").set_at("a", "q", 1, "other row"));
    assert_eq!(
        all(&log),
        vec![c("r", "a:q", 3, "after"), c("s", "a:q", 1, "other row")]
    );
    // At a snapshot before the delete everything is back.
    let before = read(&log, &ScanSpec::default(), keep_all(), 2, 0);
    assert_eq!(
        brief(&before),
        vec![c("r", "a:q", 5, "old"), c("r", "b:q", 1, "old")]
    );
}

#[test]
fn family_tombstone_hides_its_family() {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r")
            .set_at("a", "", 5, "x")
            .set_at("a", "q", 5, "y")
            .set_at("b", "q", 5, "z"),
    )
    .apply(RowMutation::new("r").delete_family("a"))
    .apply(RowMutation::new("r").set_at("a", "q", 1, "new"));
    assert_eq!(
        all(&log),
        vec![c("r", "a:q", 1, "new"), c("r", "b:q", 5, "z")]
    );
}

#[test]
fn column_tombstone_hides_its_range() {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r")
            .set_at("a", "q", 1, "1")
            .set_at("a", "q", 2, "2")
            .set_at("a", "q", 3, "3")
            .set_at("a", "p", 2, "p"),
    )
    .apply(RowMutation::new("r").delete_cells("a", "q", TimeRange { start: 2, end: 3 }))
    .apply(RowMutation::new("r").set_at("a", "q", 2, "re"));
    assert_eq!(
        all(&log),
        vec![
            c("r", "a:p", 2, "p"),
            c("r", "a:q", 3, "3"),
            c("r", "a:q", 2, "re"),
            c("r", "a:q", 1, "1")
        ]
    );
    log.apply(RowMutation::new("r").delete_cells("a", "q", TimeRange::ALL));
    assert_eq!(all(&log), vec![c("r", "a:p", 2, "p")]);
}

#[test]
fn delete_then_set_in_one_mutation_keeps_the_set() {
    let mut log = Log::new();
    log.apply(RowMutation::new("r").set_at("a", "q", 1, "old"))
        .apply(
            RowMutation::new("r")
                .delete_row()
                .set_at("a", "q", 1, "new"),
        );
    assert_eq!(all(&log), vec![c("r", "a:q", 1, "new")]);
    let mut log = Log::new();
    log.apply(RowMutation::new("r").set_at("a", "q", 1, "x").delete_cells(
        "a",
        "q",
        TimeRange::ALL,
    ));
    assert!(all(&log).is_empty());
}

#[test]
fn same_timestamp_overwrites() {
    let mut log = Log::new();
    log.apply(RowMutation::new("r").set_at("a", "q", 7, "first"))
        .apply(RowMutation::new("r").set_at("a", "q", 7, "second"));
    assert_eq!(all(&log), vec![c("r", "a:q", 7, "second")]);
    let first = read(&log, &ScanSpec::default(), keep_all(), 1, 0);
    assert_eq!(brief(&first), vec![c("r", "a:q", 7, "first")]);
    // A tombstone between the two writes hides the first, not the second.
    let mut log = Log::new();
    log.apply(RowMutation::new("r").set_at("a", "q", 7, "first"))
        .apply(RowMutation::new("r").delete_family("a"))
        .apply(RowMutation::new("r").set_at("a", "q", 7, "second"));
    assert_eq!(all(&log), vec![c("r", "a:q", 7, "second")]);
}

#[test]
fn gc_versions_and_age() {
    let mut log = Log::new();
    for ts in 1..=5 {
        log.apply(RowMutation::new("r").set_at("a", "q", ts * 100, format!("v{ts}")));
    }
    let versions = schema_with(GcRule::flat(Some(2), None, GcMode::Union));
    let got = read(&log, &ScanSpec::default(), versions.clone(), u64::MAX, 0);
    assert_eq!(
        brief(&got),
        vec![c("r", "a:q", 500, "v5"), c("r", "a:q", 400, "v4")]
    );
    // Index counts visible versions only: deleting the newest brings back v3.
    log.apply(RowMutation::new("r").delete_cells("a", "q", TimeRange::exactly(500)));
    let got = read(&log, &ScanSpec::default(), versions, u64::MAX, 0);
    assert_eq!(
        brief(&got),
        vec![c("r", "a:q", 400, "v4"), c("r", "a:q", 300, "v3")]
    );
    // Age: now=450, max age 200 → ts >= 250 survive.
    let age = GcRule::flat(None, Some(200), GcMode::Union);
    let got = read(&log, &ScanSpec::default(), schema_with(age), u64::MAX, 450);
    assert_eq!(
        brief(&got),
        vec![c("r", "a:q", 400, "v4"), c("r", "a:q", 300, "v3")]
    );
    // Union vs intersection with both limits: max 1 version, age 150 at now=450.
    let both = GcRule::flat(Some(1), Some(150), GcMode::Union);
    let got = read(&log, &ScanSpec::default(), schema_with(both), u64::MAX, 450);
    assert_eq!(brief(&got), vec![c("r", "a:q", 400, "v4")]);
    let inter = GcRule::flat(Some(1), Some(150), GcMode::Intersection);
    let got = read(
        &log,
        &ScanSpec::default(),
        schema_with(inter),
        u64::MAX,
        450,
    );
    // v4 (index 0) kept by count; v3 (age 150, not older) kept by age; v2, v1 collected.
    assert_eq!(
        brief(&got),
        vec![c("r", "a:q", 400, "v4"), c("r", "a:q", 300, "v3")]
    );
}

#[test]
fn spec_filters() {
    let mut log = Log::new();
    for row in ["r1", "r2", "r3", "s1"] {
        log.apply(
            RowMutation::new(row)
                .set_at("a", "x.cnn.com", 1, "1")
                .set_at("a", "x.cnn.com", 2, "2")
                .set_at("a", "x.cnn.com", 3, "3")
                .set_at("a", "y.bbc.co.uk", 1, "4")
                .set_at("b", "x.cnn.com", 1, "5"),
        );
    }
    let spec = |f: &dyn Fn(&mut ScanSpec)| {
        let mut s = ScanSpec::default();
        f(&mut s);
        brief(&read(&log, &s, keep_all(), u64::MAX, 0))
    };
    let fam = spec(&|s| {
        s.rows = RowRange::between(b"r2", b"r3");
        s.families = Some(vec!["b".into()]);
    });
    assert_eq!(fam, vec![c("r2", "b:x.cnn.com", 1, "5")]);
    let re = spec(&|s| {
        s.rows = RowRange::prefix(b"s");
        s.column_regex = Some(r".*:.*\.cnn\.com".into());
        s.max_versions = Some(1);
    });
    assert_eq!(
        re,
        vec![
            c("s1", "a:x.cnn.com", 3, "3"),
            c("s1", "b:x.cnn.com", 1, "5")
        ]
    );
    let tr = spec(&|s| {
        s.rows = RowRange::prefix(b"r1");
        s.time_range = TimeRange { start: 1, end: 3 };
        s.max_versions = Some(1);
        s.families = Some(vec!["a".into()]);
    });
    assert_eq!(
        tr,
        vec![
            c("r1", "a:x.cnn.com", 2, "2"),
            c("r1", "a:y.bbc.co.uk", 1, "4")
        ]
    );
    let rows = spec(&|s| {
        s.row_limit = Some(2);
        s.families = Some(vec!["b".into()]);
    });
    assert_eq!(
        rows,
        vec![
            c("r1", "b:x.cnn.com", 1, "5"),
            c("r2", "b:x.cnn.com", 1, "5")
        ]
    );
    let cells = spec(&|s| s.cell_limit = Some(2));
    assert_eq!(cells.len(), 2);
    assert!(spec(&|s| s.cell_limit = Some(0)).is_empty());
    assert!(spec(&|s| s.row_limit = Some(0)).is_empty());
    assert!(spec(&|s| s.max_versions = Some(0)).is_empty());
    let single = spec(&|s| *s = ScanSpec::row(b"r3"));
    assert_eq!(single.len(), 5);
    assert!(single.iter().all(|c| c.0 == "r3"));
    let excl = spec(&|s| {
        s.rows = RowRange {
            start: Bound::Excluded(b"r1".to_vec()),
            end: Bound::Included(b"r3".to_vec()),
        };
        s.families = Some(vec!["b".into()]);
    });
    assert_eq!(
        excl.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        vec!["r2", "r3"]
    );
    assert!(spec(&|s| s.families = Some(vec!["zz".into()])).is_empty());
}

#[test]
fn bad_regex_fails_at_construction() {
    let log = Log::new();
    for pat in ["(", "a)|(b", "[z-a]"] {
        let spec = ScanSpec {
            column_regex: Some(pat.into()),
            ..Default::default()
        };
        assert!(matches!(
            CellReader::new(log.iter(), &spec, keep_all(), 0, 0),
            Err(Error::BadRegex { .. })
        ));
    }
}

#[test]
fn regex_matches_whole_column_and_arbitrary_bytes() {
    let re = compile_column_regex("a:x.*").unwrap();
    assert!(re.is_match(b"a:x\xff\n\x00"));
    assert!(!re.is_match(b"ba:x"));
    let re = compile_column_regex("a:x").unwrap();
    assert!(!re.is_match(b"a:xy"));
    let re = compile_column_regex("a:é").unwrap();
    assert!(re.is_match("a:é".as_bytes()));
    let q = b"q.\x00\xff:*";
    let re = compile_column_regex(&exact_column_regex("fam.x", q)).unwrap();
    assert!(re.is_match(b"fam.x:q.\x00\xff:*"));
    assert!(!re.is_match(b"famax:q.\x00\xff:*"));
    assert!(!re.is_match(b"fam.x:qa\x00\xff:*"));
}

#[test]
fn unknown_families_are_skipped() {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r")
            .set_at("a", "q", 1, "a")
            .set_at("b", "q", 1, "b"),
    );
    log.entries.push((
        key::encode(b"r", b"gone", b"q", 1, 99, Kind::Put),
        b"x".to_vec(),
    ));
    log.entries.push((
        key::encode(b"r", b"\xff", b"q", 1, 98, Kind::Put),
        b"x".to_vec(),
    ));
    let only_a = Arc::new(TableSchema::with_families([FamilySchema::new("a")]));
    let got = read(&log, &ScanSpec::default(), only_a, u64::MAX, 0);
    assert_eq!(brief(&got), vec![c("r", "a:q", 1, "a")]);
}

#[test]
fn corrupt_keys_are_errors() {
    let mut log = Log::new();
    log.apply(RowMutation::new("r").set_at("a", "q", 1, "a"));
    log.entries.push((b"r\x00\x01garbage".to_vec(), vec![]));
    let mut r = CellReader::new(log.iter(), &ScanSpec::default(), keep_all(), u64::MAX, 0).unwrap();
    assert!(r.next_cell().unwrap().is_some());
    assert!(matches!(r.next_cell(), Err(Error::Corruption(_))));
    assert!(r.next().is_none(), "iteration stops after an error");
    let mut log = Log::new();
    log.entries.push((
        key::encode(b"r", b"a", b"q", TOMBSTONE_TS, 1, Kind::Put),
        vec![],
    ));
    let mut r = CellReader::new(log.iter(), &ScanSpec::default(), keep_all(), u64::MAX, 0).unwrap();
    assert!(matches!(r.next_cell(), Err(Error::Corruption(_))));
}

/// Rows r1 (cells in families a and b), r2 (a), r3 (deleted), r4 (b).
fn four_rows() -> Log {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r1")
            .set_at("a", "q", 1, "1")
            .set_at("b", "q", 1, "2"),
    )
    .apply(RowMutation::new("r2").set_at("a", "q", 1, "3"))
    .apply(RowMutation::new("r3").set_at("a", "q", 1, "4"))
    .apply(RowMutation::new("r3").delete_row())
    .apply(RowMutation::new("r4").set_at("b", "q", 1, "5"));
    log
}

#[test]
fn rows_and_row_keys() {
    let log = four_rows();
    let mut r = CellReader::new(log.iter(), &ScanSpec::default(), keep_all(), u64::MAX, 0).unwrap();
    let (row, cells) = r.next_row().unwrap().unwrap();
    assert_eq!((row.as_slice(), cells.len()), (&b"r1"[..], 2));
    assert_eq!(r.next_row().unwrap().unwrap().0, b"r2");
    assert_eq!(r.next_row().unwrap().unwrap().0, b"r4");
    assert!(r.next_row().unwrap().is_none());
    let mut r = CellReader::new(log.iter(), &ScanSpec::default(), keep_all(), u64::MAX, 0).unwrap();
    let mut keys = Vec::new();
    while let Some(k) = r.next_row_key().unwrap() {
        keys.push(k);
    }
    assert_eq!(keys, vec![b"r1".to_vec(), b"r2".to_vec(), b"r4".to_vec()]);
    // Mixing: a cell, then the rest of the rows by key.
    let mut r = CellReader::new(log.iter(), &ScanSpec::default(), keep_all(), u64::MAX, 0).unwrap();
    assert_eq!(r.next_cell().unwrap().unwrap().value, b"1");
    assert_eq!(r.next_row_key().unwrap().unwrap(), b"r1");
    assert_eq!(r.next_row_key().unwrap().unwrap(), b"r2");
}

#[test]
fn single_column_reads() {
    let mut log = Log::new();
    log.apply(
        RowMutation::new("r")
            .set_at("a", "", 1, "empty")
            .set_at("a", "p", 1, "p")
            .set_at("a", "q", 1, "q1")
            .set_at("a", "q", 2, "q2")
            .set_at("a", "qq", 1, "qq")
            .set_at("b", "q", 1, "bq"),
    )
    .apply(RowMutation::new("r0").set_at("a", "q", 1, "r0"))
    .apply(RowMutation::new("r\0").set_at("a", "q", 1, "r\\0"));
    let col = |log: &Log, fam: &str, q: &[u8], mv: Option<u32>, snap: SeqNo| {
        let r = CellReader::column(
            log.iter(),
            keep_all(),
            b"r",
            fam,
            q,
            TimeRange::ALL,
            mv,
            snap,
            0,
        )
        .unwrap();
        brief(&r.collect::<Result<Vec<_>>>().unwrap())
    };
    assert_eq!(
        col(&log, "a", b"q", None, u64::MAX),
        vec![c("r", "a:q", 2, "q2"), c("r", "a:q", 1, "q1")]
    );
    assert_eq!(
        col(&log, "a", b"q", Some(1), u64::MAX),
        vec![c("r", "a:q", 2, "q2")]
    );
    assert_eq!(
        col(&log, "a", b"", None, u64::MAX),
        vec![c("r", "a:", 1, "empty")]
    );
    assert_eq!(
        col(&log, "b", b"q", None, u64::MAX),
        vec![c("r", "b:q", 1, "bq")]
    );
    assert!(col(&log, "a", b"z", None, u64::MAX).is_empty());
    assert!(col(&log, "zz", b"q", None, u64::MAX).is_empty());
    log.apply(RowMutation::new("r").delete_family("a"));
    assert!(col(&log, "a", b"q", None, u64::MAX).is_empty());
    assert_eq!(
        col(&log, "a", b"q", Some(1), 6).len(),
        1,
        "snapshot before the delete"
    );
    log.apply(RowMutation::new("r").delete_row());
    assert!(col(&log, "b", b"q", None, u64::MAX).is_empty());
}

/// Counts positioning calls, to check that excluded data is sought past.
struct Counting {
    inner: VecIterator,
    nexts: Arc<std::sync::atomic::AtomicUsize>,
}
impl InternalIterator for Counting {
    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek_to_first()
    }
    fn seek(&mut self, t: &[u8]) -> Result<()> {
        self.inner.seek(t)
    }
    fn next(&mut self) -> Result<()> {
        self.nexts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.next()
    }
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
}

#[test]
fn excluded_data_is_sought_past() {
    let mut log = Log::new();
    let mut m = RowMutation::new("r");
    for i in 0..1000u32 {
        m = m.set_at("a", i.to_be_bytes(), 1, "x");
    }
    log.apply(m.set_at("b", "q", 1, "b"));
    for i in 0..1000u32 {
        log.apply(RowMutation::new("r").set_at("b", "many", u64::from(i) + 10, "v"));
    }
    let mut v = log.entries.clone();
    v.sort();
    let nexts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let it = Box::new(Counting {
        inner: VecIterator::new(Arc::new(v)),
        nexts: nexts.clone(),
    });
    let spec = ScanSpec {
        families: Some(vec!["b".into()]),
        max_versions: Some(1),
        ..Default::default()
    };
    let got: Vec<Cell> = CellReader::new(it, &spec, keep_all(), u64::MAX, 0)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(got.len(), 2);
    assert!(
        nexts.load(std::sync::atomic::Ordering::Relaxed) < 50,
        "{nexts:?}"
    );
}

#[test]
fn a_row_key_listing_skips_rows_and_matches_the_general_filter() {
    use crate::filter::RowFilter;
    let log = four_rows();
    let listing = |f: Vec<RowFilter>, schema: Arc<TableSchema>| {
        let spec = ScanSpec {
            filter: Some(RowFilter::Chain(f)),
            ..Default::default()
        };
        brief(&read(&log, &spec, schema, u64::MAX, 0))
    };
    let keys = vec![RowFilter::CellsPerRowLimit(1), RowFilter::StripValue];
    let swapped = vec![RowFilter::StripValue, RowFilter::CellsPerRowLimit(1)];
    // The same filter with a step the fast path does not know: rows gathered.
    let general = vec![
        RowFilter::CellsPerRowLimit(1),
        RowFilter::StripValue,
        RowFilter::PassAll,
    ];
    let expect = vec![
        c("r1", "a:q", 1, ""),
        c("r2", "a:q", 1, ""),
        c("r4", "b:q", 1, ""),
    ];
    assert_eq!(listing(keys.clone(), keep_all()), expect);
    assert_eq!(listing(swapped, keep_all()), expect);
    assert_eq!(listing(general.clone(), keep_all()), expect);
    // Families made out of name order: the filter's first cell of r1 is b's,
    // which only the general path finds; the listing falls back to it.
    let b_first = Arc::new(TableSchema::with_families([
        FamilySchema::new("b"),
        FamilySchema::new("a"),
    ]));
    let expect = vec![
        c("r1", "b:q", 1, ""),
        c("r2", "a:q", 1, ""),
        c("r4", "b:q", 1, ""),
    ];
    assert_eq!(listing(general, b_first.clone()), expect);
    assert_eq!(listing(keys, b_first), expect);
    // Row limits count rows of the listing.
    let spec = ScanSpec {
        filter: Some(RowFilter::Chain(vec![
            RowFilter::CellsPerRowLimit(1),
            RowFilter::StripValue,
        ])),
        row_limit: Some(2),
        ..Default::default()
    };
    assert_eq!(read(&log, &spec, keep_all(), u64::MAX, 0).len(), 2);
}

#[test]
fn row_keys_under_a_listing_filter_are_its_rows() {
    use crate::filter::RowFilter;
    let log = four_rows();
    let keys = |f: Vec<RowFilter>, row_limit: Option<u64>, schema: Arc<TableSchema>| {
        let spec = ScanSpec {
            filter: Some(RowFilter::Chain(f)),
            row_limit,
            ..Default::default()
        };
        let mut r = CellReader::new(log.iter(), &spec, schema, u64::MAX, 0).unwrap();
        let mut out = Vec::new();
        while let Some(k) = r.next_row_key().unwrap() {
            out.push(String::from_utf8(k).unwrap());
        }
        out
    };
    let listing = vec![RowFilter::CellsPerRowLimit(1), RowFilter::StripValue];
    let all = ["r1", "r2", "r4"].map(String::from).to_vec();
    assert_eq!(keys(listing.clone(), None, keep_all()), all);
    // A row limit counts the rows listed; families out of name order take
    // the general path: the same rows.
    assert_eq!(keys(listing.clone(), Some(2), keep_all()), all[..2]);
    assert!(keys(listing.clone(), Some(0), keep_all()).is_empty());
    let b_first = Arc::new(TableSchema::with_families([
        FamilySchema::new("b"),
        FamilySchema::new("a"),
    ]));
    assert_eq!(keys(listing, None, b_first), all);
    // A filter that keeps more than one cell of a row repeats its key
    // (a caller that wants each row once drops repeats).
    assert_eq!(keys(vec![RowFilter::PassAll], None, keep_all()).len(), 4);
}

/// Cells viewed in place (`advance_view`, `current`) are the cells the
/// reader hands out whole, aggregate cells (folded, so not in place) and
/// a row read ahead included; nothing shows once the reader is done.
#[test]
fn viewed_cells_are_the_cells() {
    let mut sum = FamilySchema::new("a");
    sum.aggregate = Some(crate::schema::Aggregator::Sum);
    let schema = Arc::new(TableSchema::with_families([sum, FamilySchema::new("b")]));
    let mut log = Log::new();
    for r in ["r1", "r2", "r3"] {
        log.apply(
            RowMutation::new(r)
                .add_to_cell("a", "n", 5, 2)
                .add_to_cell("a", "n", 5, 3)
                .set_at("b", "q", 7, "v")
                .set_at("b", "q", 8, "w"),
        );
    }
    let whole = read(&log, &ScanSpec::default(), schema.clone(), u64::MAX, 0);
    assert_eq!(whole.len(), 9, "{:?}", brief(&whole));
    let reader = || {
        CellReader::new(
            log.iter(),
            &ScanSpec::default(),
            schema.clone(),
            u64::MAX,
            0,
        )
        .unwrap()
    };
    for read_ahead in [false, true] {
        let mut r = reader();
        let mut viewed = Vec::new();
        if read_ahead {
            let (_, cells) = r.next_row().unwrap().unwrap();
            viewed.extend(cells);
        }
        while r.advance_view().unwrap() {
            viewed.push(r.current().unwrap().to_cell());
        }
        assert!(r.current().is_none());
        assert_eq!(brief(&viewed), brief(&whole), "read ahead: {read_ahead}");
    }
    // Any other step leaves nothing shown.
    let mut r = reader();
    assert!(r.advance_view().unwrap());
    assert!(r.current().is_some());
    // The row of the next cell: still the first row.
    assert_eq!(r.next_row_key().unwrap(), Some(b"r1".to_vec()));
    assert!(r.current().is_none(), "after a row key");
    assert!(r.advance_view().unwrap());
    assert!(r.next_cell().unwrap().is_some());
    assert!(r.current().is_none(), "after a cell");
}
