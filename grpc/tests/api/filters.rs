//! RowFilter cases through ReadRows.

use crate::common::*;
use grpc::v2::{self, row_filter::Filter as F};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_filters() {
    let mut e = env().await;
    create(&mut e, "t", &["a", "b"]).await;
    mutate(
        &mut e,
        "t",
        "r1",
        vec![
            set("a", "x", 1000, b"x1"),
            set("a", "x", 2000, b"x2"),
            set("a", "x", 3000, b"x3"),
            set("a", "y", 1000, b"y1"),
            set("b", "z", 1000, b"z1"),
        ],
    )
    .await
    .unwrap();
    mutate(
        &mut e,
        "t",
        "r2",
        vec![set("a", "x", 1000, b"other"), set("b", "z", 5000, b"z5")],
    )
    .await
    .unwrap();
    let rf = |f: F| v2::RowFilter { filter: Some(f) };
    let chain = |fs: Vec<F>| {
        F::Chain(v2::row_filter::Chain {
            filters: fs.into_iter().map(rf).collect(),
        })
    };
    let inter = |fs: Vec<F>| {
        F::Interleave(v2::row_filter::Interleave {
            filters: fs.into_iter().map(rf).collect(),
        })
    };
    let cases: Vec<(F, Vec<&str>)> = vec![
        (F::FamilyNameRegexFilter("b".into()), vec!["z1", "z5"]),
        (
            F::ColumnQualifierRegexFilter(b"y|z".to_vec()),
            vec!["y1", "z1", "z5"],
        ),
        (
            F::CellsPerColumnLimitFilter(1),
            vec!["x3", "y1", "z1", "other", "z5"],
        ),
        (
            F::CellsPerRowLimitFilter(2),
            vec!["x3", "x2", "other", "z5"],
        ),
        (F::CellsPerRowOffsetFilter(4), vec!["z1"]),
        (F::ValueRegexFilter(b"x[12]".to_vec()), vec!["x2", "x1"]),
        (F::RowKeyRegexFilter(b"r2".to_vec()), vec!["other", "z5"]),
        (F::RowKeyRegexFilter(b"r".to_vec()), vec![]),
        (
            F::TimestampRangeFilter(v2::TimestampRange {
                start_timestamp_micros: 2000,
                end_timestamp_micros: 5000,
            }),
            vec!["x3", "x2"],
        ),
        (
            F::ValueRangeFilter(v2::ValueRange {
                start_value: Some(v2::value_range::StartValue::StartValueOpen(b"x1".to_vec())),
                end_value: Some(v2::value_range::EndValue::EndValueClosed(b"y1".to_vec())),
            }),
            vec!["x3", "x2", "y1"],
        ),
        (
            F::ColumnRangeFilter(v2::ColumnRange {
                family_name: "a".into(),
                start_qualifier: Some(v2::column_range::StartQualifier::StartQualifierOpen(
                    b"x".to_vec(),
                )),
                end_qualifier: None,
            }),
            vec!["y1"],
        ),
        (
            chain(vec![
                F::FamilyNameRegexFilter("a".into()),
                F::CellsPerColumnLimitFilter(1),
            ]),
            vec!["x3", "y1", "other"],
        ),
        (
            inter(vec![
                F::ColumnQualifierRegexFilter(b"y".to_vec()),
                F::ValueRegexFilter(b"y1|z5".to_vec()),
            ]),
            vec!["y1", "y1", "z5"],
        ),
        (F::BlockAllFilter(true), vec![]),
        (
            F::PassAllFilter(true),
            vec!["x3", "x2", "x1", "y1", "z1", "other", "z5"],
        ),
        (
            F::Condition(Box::new(v2::row_filter::Condition {
                predicate_filter: Some(Box::new(rf(F::ValueRegexFilter(b"other".to_vec())))),
                true_filter: Some(Box::new(rf(F::FamilyNameRegexFilter("b".into())))),
                false_filter: Some(Box::new(rf(F::CellsPerRowLimitFilter(1)))),
            })),
            vec!["x3", "z5"],
        ),
        (
            chain(vec![
                F::CellsPerRowLimitFilter(1),
                F::StripValueTransformer(true),
            ]),
            vec!["", ""],
        ),
        (
            chain(vec![
                inter(vec![
                    chain(vec![F::FamilyNameRegexFilter("b".into()), F::Sink(true)]),
                    F::PassAllFilter(true),
                ]),
                F::BlockAllFilter(true),
            ]),
            vec!["z1", "z5"],
        ),
    ];
    for (f, want) in cases {
        let rows = read(&mut e, with_filter("t", f.clone())).await.unwrap();
        assert_eq!(values(&rows), want, "filter {f:?}");
    }
    let rows = read(
        &mut e,
        with_filter(
            "t",
            chain(vec![
                F::FamilyNameRegexFilter("b".into()),
                F::ApplyLabelTransformer("lab".into()),
            ]),
        ),
    )
    .await
    .unwrap();
    assert!(rows
        .iter()
        .all(|(_, cs)| cs.iter().all(|c| c.4 == vec!["lab".to_string()])));
    for bad in [
        F::FamilyNameRegexFilter("(".into()),
        F::CellsPerRowLimitFilter(-1),
        F::RowSampleFilter(2.0),
        F::ApplyLabelTransformer("Bad Label".into()),
    ] {
        let err = read(&mut e, with_filter("t", bad)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
    }
    // A bad regex's message is one line saying what and where, as Cloud
    // Bigtable's is (not the regex crate's caret diagram).
    for bad in [
        F::FamilyNameRegexFilter("a(".into()),
        F::ValueRegexFilter(b"x\n[".to_vec()),
    ] {
        let err = read(&mut e, with_filter("t", bad)).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        let m = err.message();
        assert!(!m.contains('\n'), "{m}");
        assert!(m.contains("unclosed") && m.contains("at offset"), "{m}");
    }
}
