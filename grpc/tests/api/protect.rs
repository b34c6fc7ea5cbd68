//! Deletion protection over the Table Admin API: UpdateTable sets it (a
//! finished long-running operation), GetTable and ListTables show it, and
//! DeleteTable and dropping a family fail with FAILED_PRECONDITION.

use crate::common::*;
use grpc::admin_v2 as a;
use prost::Message;
use tonic::Code;

fn update(t: &str, protect: bool, paths: &[&str]) -> a::UpdateTableRequest {
    a::UpdateTableRequest {
        table: Some(a::Table {
            name: tname(t),
            deletion_protection: protect,
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: paths.iter().map(|p| p.to_string()).collect(),
        }),
        ignore_warnings: false,
    }
}

async fn delete(e: &mut Env, t: &str) -> Result<(), tonic::Status> {
    e.admin
        .delete_table(a::DeleteTableRequest { name: tname(t) })
        .await
        .map(|_| ())
}

fn drop_family(t: &str, f: &str) -> a::ModifyColumnFamiliesRequest {
    a::ModifyColumnFamiliesRequest {
        name: tname(t),
        modifications: vec![a::modify_column_families_request::Modification {
            id: f.into(),
            r#mod: Some(a::modify_column_families_request::modification::Mod::Drop(
                true,
            )),
            ..Default::default()
        }],
        ignore_warnings: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_protection_refuses_delete_and_drop() {
    let tokens =
        engine::access::Tokens::parse("stranger-token-0123456789abcdef 4242:4242\n", |_| None)
            .unwrap();
    let mut e = env_with(tokens).await;
    create(&mut e, "t", &["cf1", "cf2"]).await;
    mutate(&mut e, "t", "r", vec![set("cf2", "q", 1000, b"kept")])
        .await
        .unwrap();
    assert!(!get_table(&mut e, "t").await.deletion_protection);

    let op = e
        .admin
        .update_table(update("t", true, &["deletion_protection"]))
        .await
        .unwrap()
        .into_inner();
    assert!(op.done, "{op:?}");
    let Some(
        googleapis_tonic_google_bigtable_admin_v2::google::longrunning::operation::Result::Response(
            any,
        ),
    ) = op.result
    else {
        panic!("no response in {:?}", op.result);
    };
    assert!(any.type_url.ends_with("google.bigtable.admin.v2.Table"));
    let t = a::Table::decode(&any.value[..]).unwrap();
    assert!(t.deletion_protection);
    assert_eq!(t.name, tname("t"));
    let meta = op.metadata.unwrap();
    assert!(meta.type_url.ends_with("UpdateTableMetadata"));
    assert!(get_table(&mut e, "t").await.deletion_protection);
    assert!(e.bt.schema("t").unwrap().deletion_protection);
    let listed = e
        .admin
        .list_tables(a::ListTablesRequest {
            parent: P.into(),
            view: a::table::View::SchemaView as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed
        .tables
        .iter()
        .any(|t| t.name == tname("t") && t.deletion_protection));

    let s = delete(&mut e, "t").await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    assert!(s.message().contains("deletion protection"), "{s:?}");
    let s = e
        .admin
        .modify_column_families(drop_family("t", "cf2"))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
    // Nothing was deleted on the way: the family and its cell are there.
    assert!(get_table(&mut e, "t")
        .await
        .column_families
        .contains_key("cf2"));
    let rows = read_all(&mut e, "t").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1[0].3, b"kept");

    // Only fields served, and a mask is required.
    let s = e
        .admin
        .update_table(update("t", false, &["automated_backup_policy"]))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::Unimplemented, "{s:?}");
    let s = e
        .admin
        .update_table(update("t", false, &[]))
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(get_table(&mut e, "t").await.deletion_protection);
    // Another user may not turn it off.
    let mut req = tonic::Request::new(update("t", false, &["deletion_protection"]));
    req.metadata_mut().insert(
        "authorization",
        "Bearer stranger-token-0123456789abcdef".parse().unwrap(),
    );
    let s = e.admin.update_table(req).await.unwrap_err();
    assert_eq!(s.code(), Code::PermissionDenied, "{s:?}");
    assert!(get_table(&mut e, "t").await.deletion_protection);

    // Turned off by its owner, both work again.
    e.admin
        .update_table(update("t", false, &["deletion_protection"]))
        .await
        .unwrap();
    assert!(!get_table(&mut e, "t").await.deletion_protection);
    e.admin
        .modify_column_families(drop_family("t", "cf2"))
        .await
        .unwrap();
    delete(&mut e, "t").await.unwrap();
    assert!(!e.bt.list_tables().contains(&"t".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undelete_brings_back_a_deleted_table() {
    let mut e = env().await;
    create(&mut e, "t", &["cf"]).await;
    mutate(&mut e, "t", "r", vec![set("cf", "q", 1000, b"old")])
        .await
        .unwrap();
    delete(&mut e, "t").await.unwrap();
    assert_eq!(
        e.admin
            .get_table(a::GetTableRequest {
                name: tname("t"),
                view: 0,
            })
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    let trash = e.bt.trash().unwrap();
    assert_eq!(trash.len(), 1, "{trash:?}");
    assert_eq!(trash[0].0.name, "t");
    assert!(trash[0].1.tablets >= 1);
    // The name is free at once; while a table holds it, undelete refuses.
    create(&mut e, "t", &["other"]).await;
    let undelete = |t: &str| a::UndeleteTableRequest { name: tname(t) };
    let s = e.admin.undelete_table(undelete("t")).await.unwrap_err();
    assert_eq!(s.code(), Code::AlreadyExists, "{s:?}");
    let s = e.admin.undelete_table(undelete("never")).await.unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    delete(&mut e, "t").await.unwrap();
    let op = e
        .admin
        .undelete_table(undelete("t"))
        .await
        .unwrap()
        .into_inner();
    assert!(op.done);
    assert!(op
        .metadata
        .unwrap()
        .type_url
        .ends_with("UndeleteTableMetadata"));
    // The table deleted last is back: the second one.
    assert!(get_table(&mut e, "t")
        .await
        .column_families
        .contains_key("other"));
    // The first is still in the trash; back under another name, whole.
    let trash = e.bt.trash().unwrap();
    assert_eq!(trash.len(), 1, "{trash:?}");
    assert!(trash[0].0.schema.families.contains_key("cf"));
    let id = trash[0].0.id;
    let bt = e.bt.clone();
    tokio::task::spawn_blocking(move || bt.undelete_table(id, Some("t1")))
        .await
        .unwrap()
        .unwrap();
    assert!(e.bt.trash().unwrap().is_empty());
    let rows = read_all(&mut e, "t1").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1[0].3, b"old");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistency_tokens_are_served() {
    let mut e = env().await;
    create(&mut e, "t", &["cf"]).await;
    mutate(&mut e, "t", "r", vec![set("cf", "q", 1000, b"v")])
        .await
        .unwrap();
    let token = e
        .admin
        .generate_consistency_token(a::GenerateConsistencyTokenRequest { name: tname("t") })
        .await
        .unwrap()
        .into_inner()
        .consistency_token;
    assert!(!token.is_empty());
    let check = |t: &str, token: &str| a::CheckConsistencyRequest {
        name: tname(t),
        consistency_token: token.into(),
        mode: None,
    };
    let r = e
        .admin
        .check_consistency(check("t", &token))
        .await
        .unwrap()
        .into_inner();
    assert!(r.consistent);
    for (t, tok, code) in [
        ("t", "garbage", Code::InvalidArgument),
        ("t", "bt1-99999999999999999", Code::InvalidArgument),
        ("never", token.as_str(), Code::NotFound),
    ] {
        let s = e.admin.check_consistency(check(t, tok)).await.unwrap_err();
        assert_eq!(s.code(), code, "{t} {tok}: {s:?}");
    }
    let s = e
        .admin
        .generate_consistency_token(a::GenerateConsistencyTokenRequest {
            name: tname("never"),
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::NotFound);
}
