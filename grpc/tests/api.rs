//! Every RPC through the generated clients against an in-process server on
//! an ephemeral port, over an in-memory engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use engine::{Bigtable, Options};
use grpc::admin_v2::{self as a, bigtable_table_admin_client::BigtableTableAdminClient};
use grpc::v2::{self, bigtable_client::BigtableClient, row_filter::Filter as F};
use std::collections::BTreeMap;
use std::sync::Arc;
use tonic::transport::Channel;
use tonic::Code;

const P: &str = "projects/p/instances/i";

struct Env {
    bt: Bigtable,
    _server: grpc::Running,
    data: BigtableClient<Channel>,
    admin: BigtableTableAdminClient<Channel>,
}

async fn env() -> Env {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let bt =
        tokio::task::spawn_blocking(move || Bigtable::open(store, Options::default()).unwrap())
            .await
            .unwrap();
    let shared = grpc::Shared {
        bt: bt.clone(),
        owner: 0,
        group: 0,
    };
    let server = grpc::start(shared, "127.0.0.1:0".parse().unwrap()).unwrap();
    let ch = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Env {
        bt,
        _server: server,
        data: BigtableClient::new(ch.clone()).max_decoding_message_size(64 << 20),
        admin: BigtableTableAdminClient::new(ch),
    }
}

fn tname(t: &str) -> String {
    format!("{P}/tables/{t}")
}

fn family(max_versions: Option<i32>) -> a::ColumnFamily {
    a::ColumnFamily {
        gc_rule: max_versions.map(|n| a::GcRule {
            rule: Some(a::gc_rule::Rule::MaxNumVersions(n)),
        }),
        value_type: None,
    }
}

async fn create(e: &mut Env, t: &str, families: &[&str]) {
    let table = a::Table {
        column_families: families
            .iter()
            .map(|f| (f.to_string(), family(None)))
            .collect(),
        ..Default::default()
    };
    e.admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: t.into(),
            table: Some(table),
            initial_splits: vec![],
        })
        .await
        .unwrap();
}

fn set(f: &str, q: &str, ts: i64, v: &[u8]) -> v2::Mutation {
    v2::Mutation {
        mutation: Some(v2::mutation::Mutation::SetCell(v2::mutation::SetCell {
            family_name: f.into(),
            column_qualifier: q.as_bytes().to_vec(),
            timestamp_micros: ts,
            value: v.to_vec(),
        })),
    }
}

async fn mutate(
    e: &mut Env,
    t: &str,
    row: &str,
    ms: Vec<v2::Mutation>,
) -> Result<(), tonic::Status> {
    e.data
        .mutate_row(v2::MutateRowRequest {
            table_name: tname(t),
            row_key: row.as_bytes().to_vec(),
            mutations: ms,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// (family, qualifier, timestamp, value, labels)
type Cell = (String, Vec<u8>, i64, Vec<u8>, Vec<String>);

/// Reassembles chunks as a client does, checking the protocol's rules.
async fn read(
    e: &mut Env,
    req: v2::ReadRowsRequest,
) -> Result<Vec<(Vec<u8>, Vec<Cell>)>, tonic::Status> {
    use v2::read_rows_response::cell_chunk::RowStatus;
    let mut stream = e.data.read_rows(req).await?.into_inner();
    let mut rows = Vec::new();
    let mut key: Option<Vec<u8>> = None;
    let mut cells: Vec<Cell> = Vec::new();
    let (mut fam, mut qual) = (String::new(), Vec::new());
    let mut partial: Option<Cell> = None;
    while let Some(resp) = stream.message().await? {
        for c in resp.chunks {
            if partial.is_none() {
                if !c.row_key.is_empty() {
                    assert!(key.is_none(), "a new row key inside a row");
                    key = Some(c.row_key.clone());
                }
                assert!(key.is_some(), "a chunk before any row key");
                if let Some(f) = &c.family_name {
                    fam = f.clone();
                    assert!(c.qualifier.is_some(), "a family without a qualifier");
                }
                if let Some(q) = &c.qualifier {
                    qual = q.clone();
                }
                partial = Some((
                    fam.clone(),
                    qual.clone(),
                    c.timestamp_micros,
                    Vec::new(),
                    c.labels.clone(),
                ));
            }
            let p = partial.as_mut().unwrap();
            p.3.extend_from_slice(&c.value);
            if c.value_size == 0 {
                cells.push(partial.take().unwrap());
            } else {
                assert!(c.row_status.is_none(), "row status inside a split value");
            }
            match c.row_status {
                Some(RowStatus::CommitRow(true)) => {
                    let k = key.take().unwrap();
                    if let Some((last, _)) = rows.last() {
                        assert_ne!(last, &k, "row sent twice");
                    }
                    rows.push((k, std::mem::take(&mut cells)));
                    fam.clear();
                    qual.clear();
                }
                Some(RowStatus::ResetRow(true)) => {
                    key = None;
                    cells.clear();
                }
                _ => {}
            }
        }
    }
    assert!(
        key.is_none() && partial.is_none(),
        "stream ended inside a row"
    );
    Ok(rows)
}

fn req(t: &str) -> v2::ReadRowsRequest {
    v2::ReadRowsRequest {
        table_name: tname(t),
        ..Default::default()
    }
}

fn with_filter(t: &str, f: F) -> v2::ReadRowsRequest {
    v2::ReadRowsRequest {
        filter: Some(v2::RowFilter { filter: Some(f) }),
        ..req(t)
    }
}

fn keys(rows: &[(Vec<u8>, Vec<Cell>)]) -> Vec<String> {
    rows.iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

fn values(rows: &[(Vec<u8>, Vec<Cell>)]) -> Vec<String> {
    rows.iter()
        .flat_map(|(_, cs)| {
            cs.iter()
                .map(|c| String::from_utf8_lossy(&c.3).into_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_rpcs() {
    let mut e = env().await;
    create(&mut e, "t1", &["cf1"]).await;
    // Visible to the engine (and so to the mount) at once.
    assert!(e.bt.list_tables().contains(&"t1".to_string()));
    let dup = e
        .admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: "t1".into(),
            table: None,
            initial_splits: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);
    let bad = e
        .admin
        .create_table(a::CreateTableRequest {
            parent: "nope".into(),
            table_id: "t2".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    // GC rules and split keys at creation.
    let mut fams = std::collections::HashMap::new();
    fams.insert("v".to_string(), family(Some(2)));
    let union = a::GcRule {
        rule: Some(a::gc_rule::Rule::Union(a::gc_rule::Union {
            rules: vec![
                a::GcRule {
                    rule: Some(a::gc_rule::Rule::MaxNumVersions(5)),
                },
                a::GcRule {
                    rule: Some(a::gc_rule::Rule::MaxAge(prost_types::Duration {
                        seconds: 3600,
                        nanos: 0,
                    })),
                },
            ],
        })),
    };
    fams.insert(
        "u".to_string(),
        a::ColumnFamily {
            gc_rule: Some(union.clone()),
            value_type: None,
        },
    );
    e.admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: "t2".into(),
            table: Some(a::Table {
                column_families: fams,
                ..Default::default()
            }),
            initial_splits: vec![a::create_table_request::Split { key: b"m".to_vec() }],
        })
        .await
        .unwrap();
    let got = e
        .admin
        .get_table(a::GetTableRequest {
            name: tname("t2"),
            view: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.name, tname("t2"));
    assert_eq!(got.column_families["u"].gc_rule, Some(union));
    assert_eq!(
        e.bt.schema("t2").unwrap().families["v"].gc.max_versions,
        Some(2)
    );
    let list = e
        .admin
        .list_tables(a::ListTablesRequest {
            parent: P.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<String> = list.tables.iter().map(|t| t.name.clone()).collect();
    assert!(names.contains(&tname("t1")) && names.contains(&tname("t2")));
    // ModifyColumnFamilies: create, update, drop (with its data); a bad list changes nothing.
    use a::modify_column_families_request::{modification::Mod, Modification};
    let m = |id: &str, m: Mod| Modification {
        id: id.into(),
        update_mask: None,
        r#mod: Some(m),
    };
    mutate(&mut e, "t1", "r", vec![set("cf1", "q", -1, b"x")])
        .await
        .unwrap();
    let bad = e
        .admin
        .modify_column_families(a::ModifyColumnFamiliesRequest {
            name: tname("t1"),
            modifications: vec![
                m("cf2", Mod::Create(family(None))),
                m("zz", Mod::Drop(true)),
            ],
            ignore_warnings: false,
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::NotFound);
    assert!(!e.bt.schema("t1").unwrap().families.contains_key("cf2"));
    let t = e
        .admin
        .modify_column_families(a::ModifyColumnFamiliesRequest {
            name: tname("t1"),
            modifications: vec![
                m("cf2", Mod::Create(family(Some(1)))),
                m("cf2", Mod::Update(family(Some(4)))),
                m("cf1", Mod::Drop(true)),
            ],
            ignore_warnings: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(t.column_families.keys().collect::<Vec<_>>(), vec!["cf2"]);
    assert_eq!(
        e.bt.schema("t1").unwrap().families["cf2"].gc.max_versions,
        Some(4)
    );
    // DropRowRange by prefix and all.
    for r in ["a1", "a2", "b1"] {
        mutate(&mut e, "t1", r, vec![set("cf2", "q", -1, b"x")])
            .await
            .unwrap();
    }
    e.admin
        .drop_row_range(a::DropRowRangeRequest {
            name: tname("t1"),
            target: Some(a::drop_row_range_request::Target::RowKeyPrefix(
                b"a".to_vec(),
            )),
        })
        .await
        .unwrap();
    assert_eq!(keys(&read(&mut e, req("t1")).await.unwrap()), vec!["b1"]);
    e.admin
        .drop_row_range(a::DropRowRangeRequest {
            name: tname("t1"),
            target: Some(a::drop_row_range_request::Target::DeleteAllDataFromTable(
                true,
            )),
        })
        .await
        .unwrap();
    assert!(read(&mut e, req("t1")).await.unwrap().is_empty());
    e.admin
        .delete_table(a::DeleteTableRequest { name: tname("t1") })
        .await
        .unwrap();
    let gone = e
        .admin
        .get_table(a::GetTableRequest {
            name: tname("t1"),
            view: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
    let gone = e
        .admin
        .delete_table(a::DeleteTableRequest { name: tname("t1") })
        .await
        .unwrap_err();
    assert_eq!(gone.code(), Code::NotFound);
}

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
    assert_eq!((c.timestamp, c.value), (2000, b"new".to_vec()));
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
