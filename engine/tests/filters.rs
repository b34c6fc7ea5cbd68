//! Row filters on a running cluster: the paper's scanner examples (§2,
//! Figure 2) as Cloud Bigtable filters, combinators over data in memtables
//! and SSTables, and check-and-mutate with a filter predicate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::filter::RowFilter;
use engine::schema::{FamilySchema, GcRule, TableSchema};
use engine::*;
use std::ops::Bound;
use std::sync::Arc;

const DAY: u64 = 86_400_000_000;

fn open() -> Bigtable {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    let fams = ["anchor", "contents", "language"].map(|n| {
        let mut f = FamilySchema::new(n);
        f.gc = GcRule::KEEP_ALL;
        f
    });
    bt.create_table("webtable", TableSchema::with_families(fams))
        .unwrap();
    bt
}

/// The paper's Figure 1 row, plus two more sites.
fn load(bt: &Bigtable, now: u64) {
    let rows = [
        RowMutation::new("com.cnn.www")
            .set_at("contents", "", 3, "<html>v3")
            .set_at("contents", "", 5, "<html>v5")
            .set_at("contents", "", 6, "<html>v6")
            .set_at("anchor", "cnnsi.com", 9, "CNN")
            .set_at("anchor", "my.look.ca", 8, "CNN.com")
            .set_at("anchor", "money.cnn.com", now - 20 * DAY, "old")
            .set_at("language", "", 1, "EN"),
        RowMutation::new("com.bbc.www")
            .set_at("anchor", "news.cnn.com", now - DAY, "BBC")
            .set_at("anchor", "bbc.co.uk", now - DAY, "home")
            .set_at("contents", "", 2, "<html>bbc"),
        RowMutation::new("org.example")
            .set_at("contents", "", 4, "<html>ex")
            .set_at("language", "", 1, "FR"),
    ];
    bt.apply_batch("webtable", &rows, WriteOptions::default())
        .unwrap();
}

fn scan(bt: &Bigtable, spec: ScanSpec) -> Vec<(String, String, u64, String)> {
    bt.scan("webtable", spec)
        .unwrap()
        .map(|c| {
            let c = c.unwrap();
            (
                String::from_utf8(c.row).unwrap(),
                format!("{}:{}", c.family, String::from_utf8_lossy(&c.qualifier)),
                c.timestamp,
                String::from_utf8_lossy(&c.value).into_owned(),
            )
        })
        .collect()
}

fn filtered(f: RowFilter) -> ScanSpec {
    ScanSpec {
        filter: Some(f),
        ..Default::default()
    }
}

#[test]
fn paper_figure_2_anchor_family_every_version_of_one_row() {
    let bt = open();
    load(&bt, now_micros());
    // scanner.Lookup("com.cnn.www"); FetchColumnFamily("anchor"); SetReturnAllVersions()
    let mut spec = filtered(RowFilter::FamilyNameRegex("anchor".into()));
    spec.rows = RowRange::between(b"com.cnn.www", b"com.cnn.www\0");
    let got = scan(&bt, spec);
    let cols: Vec<&str> = got.iter().map(|c| c.1.as_str()).collect();
    assert_eq!(
        cols,
        [
            "anchor:cnnsi.com",
            "anchor:money.cnn.com",
            "anchor:my.look.ca"
        ]
    );
}

#[test]
fn paper_anchors_whose_columns_match_cnn_com() {
    let bt = open();
    load(&bt, now_micros());
    bt.flush().unwrap();
    // "anchor:*.cnn.com": a chain of a family and a qualifier regex.
    let f = RowFilter::Chain(vec![
        RowFilter::FamilyNameRegex("anchor".into()),
        RowFilter::ColumnQualifierRegex(br".*\.cnn\.com".to_vec()),
    ]);
    let got = scan(&bt, filtered(f));
    assert_eq!(
        got.iter()
            .map(|c| (c.0.as_str(), c.1.as_str()))
            .collect::<Vec<_>>(),
        [
            ("com.bbc.www", "anchor:news.cnn.com"),
            ("com.cnn.www", "anchor:money.cnn.com")
        ]
    );
}

#[test]
fn paper_anchors_within_ten_days() {
    let bt = open();
    let now = now_micros();
    load(&bt, now);
    let f = RowFilter::Chain(vec![
        RowFilter::FamilyNameRegex("anchor".into()),
        RowFilter::TimestampRange(TimeRange {
            start: now - 10 * DAY,
            end: u64::MAX,
        }),
    ]);
    let got = scan(&bt, filtered(f));
    assert_eq!(
        got.iter().map(|c| c.3.as_str()).collect::<Vec<_>>(),
        ["home", "BBC"]
    );
}

#[test]
fn combinators_over_memtable_and_sstables() {
    let bt = open();
    load(&bt, now_micros());
    bt.flush().unwrap();
    bt.apply(
        "webtable",
        &RowMutation::new("com.cnn.www").set_at("contents", "", 7, "<html>v7"),
        WriteOptions::default(),
    )
    .unwrap();
    // Newest two contents versions, interleaved with a stripped copy of the newest.
    let contents = RowFilter::FamilyNameRegex("contents".into());
    let f = RowFilter::Chain(vec![
        contents.clone(),
        RowFilter::Interleave(vec![
            RowFilter::CellsPerColumnLimit(2),
            RowFilter::Chain(vec![
                RowFilter::CellsPerColumnLimit(1),
                RowFilter::StripValue,
            ]),
        ]),
    ]);
    let mut spec = filtered(f);
    spec.rows = RowRange::prefix(b"com.cnn");
    let got = scan(&bt, spec);
    assert_eq!(
        got.iter().map(|c| (c.2, c.3.as_str())).collect::<Vec<_>>(),
        [(7, "<html>v7"), (7, ""), (6, "<html>v6")]
    );
    // A condition per row: rows with a French language cell give their
    // contents, the others their language.
    let f = RowFilter::Condition {
        predicate: Box::new(RowFilter::Chain(vec![
            RowFilter::FamilyNameRegex("language".into()),
            RowFilter::ValueRegex(b"FR".to_vec()),
        ])),
        true_filter: Some(Box::new(contents)),
        false_filter: Some(Box::new(RowFilter::FamilyNameRegex("language".into()))),
    };
    let got = scan(&bt, filtered(f));
    assert_eq!(
        got.iter()
            .map(|c| (c.0.as_str(), c.3.as_str()))
            .collect::<Vec<_>>(),
        [("com.cnn.www", "EN"), ("org.example", "<html>ex")]
    );
    // Offsets, limits and value ranges, with a row limit counting output rows.
    let f = RowFilter::Chain(vec![
        RowFilter::ValueRange {
            start: Bound::Included(b"<html>".to_vec()),
            end: Bound::Excluded(b"<html>w".to_vec()),
        },
        RowFilter::CellsPerRowOffset(1),
        RowFilter::CellsPerRowLimit(1),
    ]);
    let mut spec = filtered(f);
    spec.row_limit = Some(1);
    assert_eq!(
        scan(&bt, spec),
        [(
            "com.cnn.www".into(),
            "contents:".into(),
            6,
            "<html>v6".into()
        )]
    );
    // A bad filter fails the scan before it reads anything.
    assert!(matches!(
        bt.scan("webtable", filtered(RowFilter::RowKeyRegex(b"(".to_vec()))),
        Err(Error::BadRegex { .. })
    ));
}

#[test]
fn check_and_mutate_with_a_filter_predicate() {
    let bt = open();
    load(&bt, now_micros());
    let english = RowFilter::Chain(vec![
        RowFilter::FamilyNameRegex("language".into()),
        RowFilter::ValueRegex(b"EN".to_vec()),
    ]);
    let mark = |v: &str| {
        vec![Mutation::SetCell {
            family: "contents".into(),
            qualifier: b"mark".to_vec(),
            timestamp: None,
            value: v.as_bytes().to_vec(),
        }]
    };
    for (row, want) in [
        ("com.cnn.www", true),
        ("org.example", false),
        ("nowhere", false),
    ] {
        let held = bt
            .check_and_mutate_filter(
                "webtable",
                row.as_bytes(),
                &english,
                mark("en"),
                mark("other"),
                WriteOptions::default(),
            )
            .unwrap();
        assert_eq!(held, want, "{row}");
        let c = bt
            .read_cell("webtable", row.as_bytes(), "contents", b"mark")
            .unwrap()
            .unwrap();
        assert_eq!(
            c.value,
            if want {
                b"en".to_vec()
            } else {
                b"other".to_vec()
            }
        );
    }
    assert!(bt
        .check_and_mutate_filter(
            "webtable",
            b"r",
            &RowFilter::ValueRegex(b"[".to_vec()),
            mark("x"),
            vec![],
            WriteOptions::default(),
        )
        .is_err());
    assert!(bt
        .read_cell("webtable", b"r", "contents", b"mark")
        .unwrap()
        .is_none());
}

#[test]
fn nested_gc_rules_through_compactions() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt = Bigtable::open(store, Options::default()).unwrap();
    let mut f = FamilySchema::new("f");
    // Keep 3 versions; of those, only the newest once older than 7 days.
    f.gc = GcRule::parse_text("union(max_versions=3,intersection(max_age=7d,max_versions=1))")
        .unwrap();
    bt.create_table("t", TableSchema::with_families([f.clone()]))
        .unwrap();
    let now = now_micros();
    let (old, young) = (now - 10 * DAY, now - DAY);
    let write = |ts: u64, v: &str| {
        bt.apply(
            "t",
            &RowMutation::new("r").set_at("f", "q", ts, v),
            WriteOptions::default(),
        )
        .unwrap();
    };
    write(old - 2, "v1");
    write(old - 1, "v2");
    bt.flush().unwrap();
    write(young, "v3");
    write(young + 1, "v4");
    let versions = |bt: &Bigtable| -> Vec<String> {
        bt.read_column("t", b"r", "f", b"q", None)
            .unwrap()
            .into_iter()
            .map(|c| String::from_utf8(c.value.into_vec()).unwrap())
            .collect()
    };
    assert_eq!(versions(&bt), ["v4", "v3"], "read applies the tree at once");
    bt.flush().unwrap();
    bt.compact("t", false).unwrap();
    assert_eq!(versions(&bt), ["v4", "v3"]);
    bt.compact("t", true).unwrap();
    // Keep everything now: only what the major compaction kept comes back.
    let mut keep = f.clone();
    keep.gc = GcRule::KEEP_ALL;
    bt.set_schema("t", TableSchema::with_families([keep]))
        .unwrap();
    assert_eq!(
        versions(&bt),
        ["v4", "v3"],
        "the compaction dropped v1 and v2"
    );
    // And a nested rule is stored and read back through METADATA and the lock service.
    bt.set_schema("t", TableSchema::with_families([f.clone()]))
        .unwrap();
    assert_eq!(bt.schema("t").unwrap().families["f"].gc, f.gc);
}
