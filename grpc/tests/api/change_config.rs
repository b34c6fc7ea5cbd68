//! A table's change log over the Table Admin API: UpdateTable's
//! `change_stream_config` sets and clears its retention, GetTable shows it,
//! more than 7 days is refused (docs/changes.md).

use crate::common::*;
use grpc::admin_v2 as a;
use tonic::Code;

fn retention(t: &str, seconds: Option<i64>) -> a::UpdateTableRequest {
    a::UpdateTableRequest {
        table: Some(a::Table {
            name: tname(t),
            change_stream_config: seconds.map(|s| a::ChangeStreamConfig {
                retention_period: Some(prost_types::Duration {
                    seconds: s,
                    nanos: 0,
                }),
            }),
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["change_stream_config.retention_period".into()],
        }),
        ignore_warnings: false,
    }
}

async fn shown(e: &mut Env, t: &str) -> Option<i64> {
    get_table(e, t)
        .await
        .change_stream_config
        .and_then(|c| c.retention_period)
        .map(|d| d.seconds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_stream_config_sets_shows_and_clears_the_retention() {
    let mut e = env().await;
    create(&mut e, "t", &["cf1"]).await;
    assert_eq!(shown(&mut e, "t").await, None);
    e.admin
        .update_table(retention("t", Some(86_400)))
        .await
        .unwrap();
    assert_eq!(shown(&mut e, "t").await, Some(86_400));
    assert_eq!(e.bt.schema("t").unwrap().change_retention, 86_400_000_000);
    let err = e
        .admin
        .update_table(retention("t", Some(8 * 86_400)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(shown(&mut e, "t").await, Some(86_400));
    e.admin.update_table(retention("t", None)).await.unwrap();
    assert_eq!(shown(&mut e, "t").await, None);
    assert_eq!(e.bt.schema("t").unwrap().change_retention, 0);
    // CreateTable takes it too.
    e.admin
        .create_table(a::CreateTableRequest {
            parent: tname("x").rsplit_once("/tables/").unwrap().0.to_string(),
            table_id: "logged".into(),
            table: Some(a::Table {
                change_stream_config: Some(a::ChangeStreamConfig {
                    retention_period: Some(prost_types::Duration {
                        seconds: 3_600,
                        nanos: 0,
                    }),
                }),
                ..Default::default()
            }),
            initial_splits: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(shown(&mut e, "logged").await, Some(3_600));
}
