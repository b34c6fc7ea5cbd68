//! GenerateInitialChangeStreamPartitions and ReadChangeStream over a
//! table's change log (docs/changes.md): every change once per partition,
//! across a split, resumable from a continuation token, ending at end_time.

use crate::common::*;
use grpc::admin_v2 as a;
use grpc::v2;
use v2::read_change_stream_response::StreamRecord;

fn now_ts() -> prost_types::Timestamp {
    let us = engine::now_micros();
    prost_types::Timestamp {
        seconds: (us / 1_000_000) as i64,
        nanos: ((us % 1_000_000) * 1000) as i32,
    }
}

async fn partitions(e: &mut Env, t: &str) -> Vec<v2::StreamPartition> {
    let mut s = e
        .data
        .generate_initial_change_stream_partitions(
            v2::GenerateInitialChangeStreamPartitionsRequest {
                table_name: tname(t),
                app_profile_id: String::new(),
            },
        )
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.message().await.unwrap() {
        out.push(r.partition.unwrap());
    }
    out
}

/// (row, token) of each DataChange of a partition, until end_time.
async fn changes(
    e: &mut Env,
    t: &str,
    p: &v2::StreamPartition,
    from: Option<String>,
    end: prost_types::Timestamp,
) -> Result<Vec<(Vec<u8>, String, usize)>, tonic::Status> {
    use v2::read_change_stream_request::StartFrom;
    let start_from = from.map(|token| {
        StartFrom::ContinuationTokens(v2::StreamContinuationTokens {
            tokens: vec![v2::StreamContinuationToken {
                partition: Some(p.clone()),
                token,
            }],
        })
    });
    let mut s = e
        .data
        .read_change_stream(v2::ReadChangeStreamRequest {
            table_name: tname(t),
            partition: Some(p.clone()),
            end_time: Some(end),
            start_from,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.message().await? {
        if let Some(StreamRecord::DataChange(d)) = r.stream_record {
            assert!(d.done);
            assert!(d.commit_timestamp.is_some());
            out.push((d.row_key, d.token, d.chunks.len()));
        }
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_change_stream_gives_every_change_once_per_partition_and_resumes() {
    let mut e = env().await;
    create(&mut e, "t", &["cf1"]).await;
    // Without a log there is no stream.
    let p = partitions(&mut e, "t").await;
    assert_eq!(p.len(), 1);
    let err = changes(&mut e, "t", &p[0], None, now_ts())
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    e.admin
        .update_table(a::UpdateTableRequest {
            table: Some(a::Table {
                name: tname("t"),
                change_stream_config: Some(a::ChangeStreamConfig {
                    retention_period: Some(prost_types::Duration {
                        seconds: 86_400,
                        nanos: 0,
                    }),
                }),
                ..Default::default()
            }),
            update_mask: Some(prost_types::FieldMask {
                paths: vec!["change_stream_config".into()],
            }),
            ignore_warnings: false,
        })
        .await
        .unwrap();
    for i in 0..40 {
        mutate(
            &mut e,
            "t",
            &format!("r{i:02}"),
            vec![set("cf1", "q", 1000 * (1 + i), b"v")],
        )
        .await
        .unwrap();
    }
    e.bt.split_at_rows("t", &[b"r20".to_vec()]).unwrap();
    for i in 0..40 {
        mutate(
            &mut e,
            "t",
            &format!("r{i:02}"),
            vec![set("cf1", "q", 1000 * (100 + i), b"w")],
        )
        .await
        .unwrap();
    }
    let end = now_ts();
    let parts = partitions(&mut e, "t").await;
    assert_eq!(parts.len(), 2, "{parts:?}");
    let mut rows = Vec::new();
    for p in &parts {
        let got = changes(&mut e, "t", p, None, end).await.unwrap();
        assert_eq!(got.len(), 40, "each partition holds half the rows, twice");
        assert!(got.iter().all(|(_, _, n)| *n == 1));
        // Resuming from any token gives exactly the rest.
        for (i, (_, tok, _)) in got.iter().enumerate().step_by(7) {
            let rest = changes(&mut e, "t", p, Some(tok.clone()), end)
                .await
                .unwrap();
            assert_eq!(rest.len(), got.len() - i - 1, "after {tok}");
        }
        rows.extend(got.into_iter().map(|(r, _, _)| r));
    }
    rows.sort();
    let want: Vec<Vec<u8>> = (0..40)
        .flat_map(|i| {
            let r = format!("r{i:02}").into_bytes();
            [r.clone(), r]
        })
        .collect();
    assert_eq!(rows, want);
    // A malformed token is refused.
    let err = changes(&mut e, "t", &parts[0], Some("x".into()), end)
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}
