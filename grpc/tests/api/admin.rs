//! The Table Admin RPCs.

use crate::common::*;
use grpc::admin_v2 as a;
use tonic::Code;

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
    // A nested tree: an intersection holding that union.
    let nested = a::GcRule {
        rule: Some(a::gc_rule::Rule::Intersection(a::gc_rule::Intersection {
            rules: vec![
                union.clone(),
                a::GcRule {
                    rule: Some(a::gc_rule::Rule::MaxNumVersions(1)),
                },
            ],
        })),
    };
    fams.insert(
        "n".to_string(),
        a::ColumnFamily {
            gc_rule: Some(nested.clone()),
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
            initial_splits: ["m", "c", "x"]
                .iter()
                .map(|k| a::create_table_request::Split {
                    key: k.as_bytes().to_vec(),
                })
                .collect(),
        })
        .await
        .unwrap();
    // The initial splits pre-split the table: SampleRowKeys returns them
    // (in row order), then the table's end.
    let mut s = e
        .data
        .sample_row_keys(grpc::v2::SampleRowKeysRequest {
            table_name: tname("t2"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut samples = Vec::new();
    while let Some(x) = s.message().await.unwrap() {
        samples.push(String::from_utf8(x.row_key).unwrap());
    }
    assert_eq!(samples, ["c", "m", "x", ""]);
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
    assert_eq!(got.column_families["n"].gc_rule, Some(nested));
    assert_eq!(
        e.bt.schema("t2").unwrap().families["v"].gc.max_versions(),
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
        e.bt.schema("t1").unwrap().families["cf2"].gc.max_versions(),
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

/// A method not served, in a served service or in one not served at all,
/// is UNIMPLEMENTED with a message that names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unimplemented_methods_are_named() {
    use a::bigtable_instance_admin_client::BigtableInstanceAdminClient;
    let mut e = env().await;
    let named = |s: tonic::Status, method: &str| {
        assert_eq!(s.code(), Code::Unimplemented);
        let m = s.message();
        let head = format!("method google.bigtable.admin.v2.{method} is not implemented: ");
        assert!(m.starts_with(&head), "{m}");
        assert!(m.contains("ModifyColumnFamilies"), "{m}");
    };
    let s = e
        .admin
        .create_authorized_view(a::CreateAuthorizedViewRequest {
            parent: tname("t"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    named(s, "BigtableTableAdmin/CreateAuthorizedView");
    let s = BigtableInstanceAdminClient::new(e.ch.clone())
        .list_hot_tablets(a::ListHotTabletsRequest {
            parent: format!("{P}/clusters/cluster"),
            ..Default::default()
        })
        .await
        .unwrap_err();
    named(s, "BigtableInstanceAdmin/ListHotTablets");
    // A service not served at all.
    use googleapis_tonic_google_bigtable_admin_v2::google::longrunning as lro;
    let s = lro::operations_client::OperationsClient::new(e.ch.clone())
        .get_operation(lro::GetOperationRequest { name: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::Unimplemented);
    let m = s.message();
    assert!(
        m.starts_with("method google.longrunning.Operations/GetOperation is not implemented: "),
        "{m}"
    );
}

/// A family without a GC rule goes out as `column_families { key: "f"
/// value {} }`, as protobuf's own runtimes write it (the Node.js client
/// fails on an entry without its value).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn map_entries_carry_empty_values() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    let req = a::GetTableRequest {
        name: tname("t"),
        view: a::table::View::SchemaView as i32,
    };
    let bytes = raw_call(&e, GET_TABLE, req).await.unwrap();
    let entry = [0x1a, 0x05, 0x0a, 0x01, b'f', 0x12, 0x00];
    assert!(
        bytes.windows(entry.len()).any(|w| w == entry),
        "{bytes:02x?}"
    );
}
