//! Aggregate column families: typed families in the admin RPCs, AddToCell
//! and MergeToCell in the data RPCs, folded cells in reads.

use crate::common::*;
use grpc::admin_v2::{
    self as a,
    modify_column_families_request::modification::Mod,
    modify_column_families_request::Modification,
    r#type::{aggregate, int64, Aggregate, Int64, Kind},
};
use grpc::v2::{self, mutation::Mutation as M, value::Kind as V};
use tonic::Code;

pub(crate) fn int64_aggregate(agg: aggregate::Aggregator) -> a::ColumnFamily {
    a::ColumnFamily {
        gc_rule: None,
        value_type: Some(a::Type {
            kind: Some(Kind::AggregateType(Box::new(Aggregate {
                input_type: Some(Box::new(a::Type {
                    kind: Some(Kind::Int64Type(Int64 {
                        encoding: Some(int64::Encoding {
                            encoding: Some(int64::encoding::Encoding::BigEndianBytes(
                                #[allow(deprecated)]
                                int64::encoding::BigEndianBytes { bytes_type: None },
                            )),
                        }),
                    })),
                })),
                state_type: None,
                aggregator: Some(agg),
            }))),
        }),
    }
}

fn value(k: V) -> Option<v2::Value> {
    Some(v2::Value {
        r#type: None,
        kind: Some(k),
    })
}

fn add(f: &str, q: &str, ts: i64, n: i64) -> v2::Mutation {
    v2::Mutation {
        mutation: Some(M::AddToCell(v2::mutation::AddToCell {
            family_name: f.into(),
            column_qualifier: value(V::RawValue(q.as_bytes().to_vec())),
            timestamp: value(V::RawTimestampMicros(ts)),
            input: value(V::IntValue(n)),
        })),
    }
}

fn merge(f: &str, q: &str, ts: i64, n: i64) -> v2::Mutation {
    v2::Mutation {
        mutation: Some(M::MergeToCell(v2::mutation::MergeToCell {
            family_name: f.into(),
            column_qualifier: value(V::RawValue(q.as_bytes().to_vec())),
            timestamp: value(V::RawTimestampMicros(ts)),
            input: value(V::RawValue(n.to_be_bytes().to_vec())),
        })),
    }
}

/// (family, qualifier, timestamp, Int64 value) of every cell of row `r`,
/// by family name (a row's families come in the order they were made, here
/// the order of a CreateTable's map, which this client sends in any order).
async fn ints(e: &mut Env, t: &str) -> Vec<(String, String, i64, i64)> {
    let rows = read(e, req(t)).await.unwrap();
    let mut cells: Vec<_> = rows
        .into_iter()
        .flat_map(|(_, cs)| cs)
        .map(|c| {
            let v: [u8; 8] = c.3.as_slice().try_into().expect("8-byte value");
            (
                c.0,
                String::from_utf8(c.1).unwrap(),
                c.2,
                i64::from_be_bytes(v),
            )
        })
        .collect();
    cells.sort_by(|a, b| a.0.cmp(&b.0));
    cells
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_families_end_to_end() {
    let mut e = env().await;
    let mut fams = std::collections::HashMap::new();
    fams.insert(
        "sum".to_string(),
        int64_aggregate(aggregate::Aggregator::Sum(aggregate::Sum {})),
    );
    fams.insert(
        "max".to_string(),
        int64_aggregate(aggregate::Aggregator::Max(aggregate::Max {})),
    );
    fams.insert("plain".to_string(), family(None));
    e.admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: "t".into(),
            table: Some(a::Table {
                column_families: fams,
                ..Default::default()
            }),
            initial_splits: vec![],
        })
        .await
        .unwrap();
    // GetTable reports the types back.
    let got = e
        .admin
        .get_table(a::GetTableRequest {
            name: tname("t"),
            view: a::table::View::SchemaView as i32,
        })
        .await
        .unwrap()
        .into_inner();
    let agg_of = |f: &str| match got.column_families[f]
        .value_type
        .as_ref()
        .and_then(|t| t.kind.as_ref())
    {
        Some(Kind::AggregateType(a)) => a.aggregator,
        _ => None,
    };
    assert_eq!(
        agg_of("sum"),
        Some(aggregate::Aggregator::Sum(aggregate::Sum {}))
    );
    assert_eq!(
        agg_of("max"),
        Some(aggregate::Aggregator::Max(aggregate::Max {}))
    );
    assert!(got.column_families["plain"].value_type.is_none());

    // Adds at one column and timestamp fold; other timestamps are other cells.
    mutate(&mut e, "t", "r", vec![add("sum", "q", 0, 1)])
        .await
        .unwrap();
    mutate(
        &mut e,
        "t",
        "r",
        vec![add("sum", "q", 0, 9), add("sum", "q", 1000, 5)],
    )
    .await
    .unwrap();
    mutate(
        &mut e,
        "t",
        "r",
        vec![merge("sum", "q", 0, 100), add("max", "m", 0, 3)],
    )
    .await
    .unwrap();
    mutate(&mut e, "t", "r", vec![add("max", "m", 0, -8)])
        .await
        .unwrap();
    let want = vec![
        ("max".to_string(), "m".to_string(), 0, 3),
        ("sum".to_string(), "q".to_string(), 1000, 5),
        ("sum".to_string(), "q".to_string(), 0, 110),
    ];
    assert_eq!(ints(&mut e, "t").await, want);
    // The same after the data went through a major compaction.
    let bt = e.bt.clone();
    tokio::task::spawn_blocking(move || {
        bt.flush().unwrap();
        bt.compact("t", true).unwrap();
    })
    .await
    .unwrap();
    assert_eq!(ints(&mut e, "t").await, want);
    // Sums wrap around in two's complement.
    mutate(
        &mut e,
        "t",
        "w",
        vec![add("sum", "q", 0, i64::MAX), add("sum", "q", 0, 2)],
    )
    .await
    .unwrap();
    let rows = read(
        &mut e,
        v2::ReadRowsRequest {
            rows: Some(v2::RowSet {
                row_keys: vec![b"w".to_vec()],
                row_ranges: vec![],
            }),
            ..req("t")
        },
    )
    .await
    .unwrap();
    assert_eq!(rows[0].1[0].3, (i64::MIN + 1).to_be_bytes());

    // What the API refuses: SetCell into an aggregate family, AddToCell into
    // a plain one, ReadModifyWrite on an aggregate, a bad input.
    for (ms, why) in [
        (vec![set("sum", "q", 0, b"12345678")], "SetCell"),
        (vec![add("plain", "q", 0, 1)], "not an aggregate"),
    ] {
        let err = mutate(&mut e, "t", "r", ms).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(why), "{}", err.message());
    }
    let mut bad = add("sum", "q", 0, 1);
    if let Some(M::AddToCell(a)) = &mut bad.mutation {
        a.input = value(V::StringValue("one".into()));
    }
    let err = mutate(&mut e, "t", "r", vec![bad]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let rmw = e
        .data
        .read_modify_write_row(v2::ReadModifyWriteRowRequest {
            table_name: tname("t"),
            row_key: b"r".to_vec(),
            rules: vec![v2::ReadModifyWriteRule {
                family_name: "sum".into(),
                column_qualifier: b"q".to_vec(),
                rule: Some(v2::read_modify_write_rule::Rule::IncrementAmount(1)),
            }],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(rmw.code(), Code::InvalidArgument);
    // MutateRows and CheckAndMutateRow carry adds too.
    let mut s = e
        .data
        .mutate_rows(v2::MutateRowsRequest {
            table_name: tname("t"),
            entries: vec![v2::mutate_rows_request::Entry {
                row_key: b"r".to_vec(),
                mutations: vec![add("sum", "q", 0, 1000)],
                ..Default::default()
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while let Some(r) = s.message().await.unwrap() {
        assert!(r
            .entries
            .iter()
            .all(|e| e.status.as_ref().unwrap().code == 0));
    }
    e.data
        .check_and_mutate_row(v2::CheckAndMutateRowRequest {
            table_name: tname("t"),
            row_key: b"r".to_vec(),
            true_mutations: vec![add("sum", "q", 0, 10_000)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ints(&mut e, "t").await[2].3, 11_110);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_types_in_modify_column_families() {
    let mut e = env().await;
    create(&mut e, "t", &["plain"]).await;
    let modify = |m: Vec<Modification>| a::ModifyColumnFamiliesRequest {
        name: tname("t"),
        modifications: m,
        ignore_warnings: false,
    };
    let one = |id: &str, m: Mod| Modification {
        id: id.into(),
        r#mod: Some(m),
        update_mask: None,
    };
    let min = int64_aggregate(aggregate::Aggregator::Min(aggregate::Min {}));
    let t = e
        .admin
        .modify_column_families(modify(vec![one("lo", Mod::Create(min.clone()))]))
        .await
        .unwrap()
        .into_inner();
    assert!(t.column_families["lo"].value_type.is_some());
    assert_eq!(
        e.bt.schema("t").unwrap().families["lo"].aggregate,
        Some(engine::schema::Aggregator::Min)
    );
    // An update may change the GC rule, and repeat the type, not change it.
    e.admin
        .modify_column_families(modify(vec![one("lo", Mod::Update(min.clone()))]))
        .await
        .unwrap();
    for (id, cf) in [
        (
            "lo",
            int64_aggregate(aggregate::Aggregator::Sum(aggregate::Sum {})),
        ),
        ("plain", min.clone()),
    ] {
        let err = e
            .admin
            .modify_column_families(modify(vec![one(id, Mod::Update(cf))]))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{id}");
        assert!(err.message().contains("cannot change"), "{}", err.message());
    }
    // HyperLogLog is refused, saying so.
    let hll = int64_aggregate(aggregate::Aggregator::HllppUniqueCount(
        aggregate::HyperLogLogPlusPlusUniqueCount {},
    ));
    let err = e
        .admin
        .modify_column_families(modify(vec![one("h", Mod::Create(hll))]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("not supported"), "{}", err.message());
    // Min keeps the smallest.
    mutate(
        &mut e,
        "t",
        "r",
        vec![add("lo", "q", 0, 4), add("lo", "q", 0, -2)],
    )
    .await
    .unwrap();
    mutate(&mut e, "t", "r", vec![add("lo", "q", 0, 7)])
        .await
        .unwrap();
    assert_eq!(
        ints(&mut e, "t").await,
        vec![("lo".into(), "q".into(), 0, -2)]
    );
}
