//! Mutations, reads, row sets, chunking, check-and-mutate, read-modify-write.

use crate::common::*;
use grpc::v2::{self, row_filter::Filter as F};
use std::collections::BTreeMap;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutations_and_reads() {
    let mut e = env().await;
    create(&mut e, "t", &["a", "b"]).await;
    mutate(
        &mut e,
        "t",
        "r1",
        vec![
            set("a", "x", 1000, b"old"),
            set("a", "x", 2000, b"new"),
            set("b", "y", -1, b"by"),
        ],
    )
    .await
    .unwrap();
    // Written through the API, read through the engine (and so the mount).
    let c = e.bt.read_cell("t", b"r1", "a", b"x").unwrap().unwrap();
    assert_eq!((c.timestamp, c.value.into_vec()), (2000, b"new".to_vec()));
    // Written through the engine, read through the API.
    e.bt.apply(
        "t",
        &engine::RowMutation::new("r0").set("a", "z", "eng"),
        engine::WriteOptions::default(),
    )
    .unwrap();
    let rows = read(&mut e, req("t")).await.unwrap();
    assert_eq!(keys(&rows), vec!["r0", "r1"]);
    assert_eq!(values(&rows), vec!["eng", "new", "old", "by"]);
    // Errors change nothing.
    let err = mutate(
        &mut e,
        "t",
        "r2",
        vec![set("a", "x", -1, b"v"), set("nope", "x", -1, b"v")],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = mutate(&mut e, "t", "r2", vec![set("a", "x", -7, b"v")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = mutate(&mut e, "nope", "r2", vec![set("a", "x", -1, b"v")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let err = mutate(&mut e, "t", "", vec![set("a", "x", -1, b"v")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(e.bt.read_cell("t", b"r2", "a", b"x").unwrap().is_none());
    // MutateRows: a status per entry; the good entries apply.
    let entry = |row: &str, f: &str| v2::mutate_rows_request::Entry {
        row_key: row.as_bytes().to_vec(),
        mutations: vec![set(f, "q", -1, row.as_bytes())],
        idempotency: None,
    };
    let resp = e
        .data
        .mutate_rows(v2::MutateRowsRequest {
            table_name: tname("t"),
            entries: vec![entry("m1", "a"), entry("m2", "nope"), entry("m3", "b")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .message()
        .await
        .unwrap()
        .unwrap();
    let codes: Vec<i32> = resp
        .entries
        .iter()
        .map(|x| x.status.as_ref().unwrap().code)
        .collect();
    assert_eq!(codes, vec![0, Code::NotFound as i32, 0]);
    assert!(e.bt.read_cell("t", b"m1", "a", b"q").unwrap().is_some());
    assert!(e.bt.read_cell("t", b"m3", "b", b"q").unwrap().is_some());
    // Deletes: a column's time range, a family, a row.
    let del_col = v2::Mutation {
        mutation: Some(v2::mutation::Mutation::DeleteFromColumn(
            v2::mutation::DeleteFromColumn {
                family_name: "a".into(),
                column_qualifier: b"x".to_vec(),
                time_range: Some(v2::TimestampRange {
                    start_timestamp_micros: 1500,
                    end_timestamp_micros: 0,
                }),
            },
        )),
    };
    mutate(&mut e, "t", "r1", vec![del_col]).await.unwrap();
    assert_eq!(
        e.bt.read_cell("t", b"r1", "a", b"x")
            .unwrap()
            .unwrap()
            .value,
        b"old"
    );
    let del_fam = v2::Mutation {
        mutation: Some(v2::mutation::Mutation::DeleteFromFamily(
            v2::mutation::DeleteFromFamily {
                family_name: "b".into(),
            },
        )),
    };
    mutate(&mut e, "t", "r1", vec![del_fam]).await.unwrap();
    assert!(e.bt.read_cell("t", b"r1", "b", b"y").unwrap().is_none());
    let del_row = v2::Mutation {
        mutation: Some(v2::mutation::Mutation::DeleteFromRow(
            v2::mutation::DeleteFromRow {},
        )),
    };
    mutate(&mut e, "t", "r1", vec![del_row]).await.unwrap();
    assert!(e.bt.read_cell("t", b"r1", "a", b"x").unwrap().is_none());
    // A bad name.
    let err = e
        .data
        .read_rows(v2::ReadRowsRequest {
            table_name: "t".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = read(&mut e, req("missing")).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // PingAndWarm.
    e.data
        .ping_and_warm(v2::PingAndWarmRequest {
            name: P.into(),
            app_profile_id: String::new(),
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_sets_limits_and_reverse() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    for i in 0..20 {
        mutate(
            &mut e,
            "t",
            &format!("k{i:02}"),
            vec![set("f", "q", -1, b"v")],
        )
        .await
        .unwrap();
    }
    use v2::row_range::{EndKey, StartKey};
    let set_req = |keys: Vec<&str>, ranges: Vec<v2::RowRange>, limit: i64, reversed: bool| {
        v2::ReadRowsRequest {
            rows: Some(v2::RowSet {
                row_keys: keys.into_iter().map(|k| k.as_bytes().to_vec()).collect(),
                row_ranges: ranges,
            }),
            rows_limit: limit,
            reversed,
            ..req("t")
        }
    };
    let range = |s: &str, e: &str| v2::RowRange {
        start_key: Some(StartKey::StartKeyClosed(s.as_bytes().to_vec())),
        end_key: Some(EndKey::EndKeyOpen(e.as_bytes().to_vec())),
    };
    let rows = read(
        &mut e,
        set_req(
            vec!["k15", "k01", "zz"],
            vec![range("k03", "k06"), range("k04", "k08")],
            0,
            false,
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        keys(&rows),
        vec!["k01", "k03", "k04", "k05", "k06", "k07", "k15"]
    );
    let rows = read(&mut e, set_req(vec![], vec![range("k03", "k10")], 3, false))
        .await
        .unwrap();
    assert_eq!(keys(&rows), vec!["k03", "k04", "k05"]);
    let rows = read(
        &mut e,
        set_req(vec!["k15"], vec![range("k03", "k10")], 3, true),
    )
    .await
    .unwrap();
    assert_eq!(keys(&rows), vec!["k15", "k09", "k08"]);
    let open = v2::RowRange {
        start_key: Some(StartKey::StartKeyOpen(b"k17".to_vec())),
        end_key: Some(EndKey::EndKeyClosed(b"k19".to_vec())),
    };
    let rows = read(&mut e, set_req(vec![], vec![open], 0, false))
        .await
        .unwrap();
    assert_eq!(keys(&rows), vec!["k18", "k19"]);
    let err = read(
        &mut e,
        v2::ReadRowsRequest {
            rows_limit: -1,
            ..req("t")
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    // SampleRowKeys ends with the table's end.
    let mut s = e
        .data
        .sample_row_keys(v2::SampleRowKeysRequest {
            table_name: tname("t"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut samples = Vec::new();
    while let Some(x) = s.message().await.unwrap() {
        samples.push(x);
    }
    assert!(samples.last().unwrap().row_key.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_large_rows_and_many_rows() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    mutate(
        &mut e,
        "t",
        "big",
        vec![
            set("f", "a", -1, &big),
            set("f", "b", -1, b"small"),
            set("f", "c", -1, &big),
        ],
    )
    .await
    .unwrap();
    let rows = read(&mut e, req("t")).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1.len(), 3);
    assert_eq!(rows[0].1[0].3, big);
    assert_eq!(rows[0].1[1].3, b"small");
    assert_eq!(rows[0].1[2].3, big);
    // Many rows, written in MutateRows batches.
    let entries: Vec<_> = (0..3000)
        .map(|i| v2::mutate_rows_request::Entry {
            row_key: format!("row{i:05}").into_bytes(),
            mutations: vec![set("f", "q", -1, format!("value {i}").as_bytes())],
            idempotency: None,
        })
        .collect();
    for chunk in entries.chunks(1000) {
        e.data
            .mutate_rows(v2::MutateRowsRequest {
                table_name: tname("t"),
                entries: chunk.to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let rows = read(&mut e, req("t")).await.unwrap();
    assert_eq!(rows.len(), 3001);
    assert_eq!(rows[3000].1[0].3, b"value 2999");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_mutate_and_read_modify_write() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    mutate(&mut e, "t", "r", vec![set("f", "status", -1, b"open")])
        .await
        .unwrap();
    let cam = |pred: &[u8]| v2::CheckAndMutateRowRequest {
        table_name: tname("t"),
        row_key: b"r".to_vec(),
        predicate_filter: Some(v2::RowFilter {
            filter: Some(F::ValueRegexFilter(pred.to_vec())),
        }),
        true_mutations: vec![set("f", "taken", -1, b"yes")],
        false_mutations: vec![set("f", "missed", -1, b"yes")],
        ..Default::default()
    };
    let r = e
        .data
        .check_and_mutate_row(cam(b"open"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.predicate_matched);
    let r = e
        .data
        .check_and_mutate_row(cam(b"closed"))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.predicate_matched);
    assert!(e.bt.read_cell("t", b"r", "f", b"taken").unwrap().is_some());
    assert!(e.bt.read_cell("t", b"r", "f", b"missed").unwrap().is_some());
    // A bad branch changes nothing, even when the other would apply.
    let mut bad = cam(b"open");
    bad.false_mutations = vec![set("nope", "q", -1, b"v")];
    bad.true_mutations = vec![set("f", "never", -1, b"v")];
    assert_eq!(
        e.data.check_and_mutate_row(bad).await.unwrap_err().code(),
        Code::NotFound
    );
    assert!(e.bt.read_cell("t", b"r", "f", b"never").unwrap().is_none());
    // ReadModifyWriteRow: increments and appends, the new cells come back.
    use v2::read_modify_write_rule::Rule;
    let rule = |q: &str, r: Rule| v2::ReadModifyWriteRule {
        family_name: "f".into(),
        column_qualifier: q.as_bytes().to_vec(),
        rule: Some(r),
    };
    let rmw = |rules: Vec<v2::ReadModifyWriteRule>| v2::ReadModifyWriteRowRequest {
        table_name: tname("t"),
        row_key: b"r".to_vec(),
        rules,
        ..Default::default()
    };
    let row = e
        .data
        .read_modify_write_row(rmw(vec![
            rule("n", Rule::IncrementAmount(5)),
            rule("n", Rule::IncrementAmount(2)),
            rule("status", Rule::AppendValue(b"-ed".to_vec())),
        ]))
        .await
        .unwrap()
        .into_inner()
        .row
        .unwrap();
    let mut got = BTreeMap::new();
    for f in &row.families {
        for c in &f.columns {
            got.insert(c.qualifier.clone(), c.cells[0].value.clone());
            assert!(c.cells[0].timestamp_micros > 0);
        }
    }
    assert_eq!(got[&b"n".to_vec()], 7i64.to_be_bytes().to_vec());
    assert_eq!(got[&b"status".to_vec()], b"open-ed".to_vec());
    let err = e
        .data
        .read_modify_write_row(rmw(vec![rule("status", Rule::IncrementAmount(1))]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = e.data.read_modify_write_row(rmw(vec![])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}
