//! The backup calls over snapshots: create, get, list, update, restore
//! into a new table, delete, and their refusals.

use crate::common::*;
use googleapis_tonic_google_bigtable_admin_v2::google::longrunning::operation::Result as Lro;
use grpc::admin_v2 as a;
use prost::Message;
use prost_types::{FieldMask, Timestamp};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::Code;

const C: &str = "projects/p/instances/i/clusters/c1";

fn bname(b: &str) -> String {
    format!("{C}/backups/{b}")
}

fn from_now(d: Duration) -> Timestamp {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + d;
    Timestamp {
        seconds: t.as_secs() as i64,
        nanos: 0,
    }
}

fn restore_req(table: &str, backup: &str) -> a::RestoreTableRequest {
    a::RestoreTableRequest {
        parent: P.into(),
        table_id: table.into(),
        source: Some(a::restore_table_request::Source::Backup(bname(backup))),
    }
}

async fn get(e: &mut Env, b: &str) -> a::Backup {
    e.admin
        .get_backup(a::GetBackupRequest { name: bname(b) })
        .await
        .unwrap()
        .into_inner()
}

const DAY: Duration = Duration::from_secs(24 * 3600);

fn create_req(b: &str, table: &str, expire: Timestamp) -> a::CreateBackupRequest {
    a::CreateBackupRequest {
        parent: C.into(),
        backup_id: b.into(),
        backup: Some(a::Backup {
            source_table: tname(table),
            expire_time: Some(expire),
            ..Default::default()
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_are_created_listed_updated_restored_and_deleted() {
    let mut e = env().await;
    create(&mut e, "t", &["f", "g"]).await;
    let mut want = Vec::new();
    for i in 0..50 {
        let row = format!("r{i:03}");
        let v = format!("v{i}");
        mutate(
            &mut e,
            "t",
            &row,
            vec![set("f", "q", 1000, v.as_bytes()), set("g", "x", 2000, b"w")],
        )
        .await
        .unwrap();
        want.push((row, v));
    }
    let expire = from_now(2 * DAY);
    let op = e
        .admin
        .create_backup(create_req("b1", "t", expire))
        .await
        .unwrap()
        .into_inner();
    let (meta, result) = finished::<a::CreateBackupMetadata>(op);
    assert_eq!(meta.name, bname("b1"));
    assert_eq!(meta.source_table, tname("t"));
    let Some(Lro::Response(resp)) = result else {
        panic!("no response");
    };
    assert!(resp.type_url.ends_with("google.bigtable.admin.v2.Backup"));
    let b = a::Backup::decode(&*resp.value).unwrap();
    assert_eq!(b.name, bname("b1"));
    assert_eq!(b.state, a::backup::State::Ready as i32);
    assert_eq!(b.expire_time.unwrap().seconds, expire.seconds);
    assert!(b.size_bytes > 0, "{b:?}");
    // Writes after the backup are not in it.
    mutate(&mut e, "t", "r000", vec![set("f", "q", 1000, b"later")])
        .await
        .unwrap();

    // The backup is the table's snapshot of that name.
    let snaps = tokio::task::block_in_place(|| e.bt.list_snapshots("t")).unwrap();
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].name, "b1");

    let got = get(&mut e, "b1").await;
    assert_eq!(got, b);

    // Ids are unique across the instance, whatever the table.
    create(&mut e, "t2", &["f"]).await;
    let dup = e
        .admin
        .create_backup(create_req("b1", "t2", from_now(2 * DAY)))
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);
    e.admin
        .create_backup(create_req("b2", "t2", from_now(3 * DAY)))
        .await
        .unwrap();

    // Listed by cluster, and through the `-` wildcard.
    for parent in [C.to_string(), "projects/p/instances/i/clusters/-".into()] {
        let list = e
            .admin
            .list_backups(a::ListBackupsRequest {
                parent: parent.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let ids: Vec<_> = list
            .backups
            .iter()
            .map(|b| b.name.rsplit('/').next().unwrap().to_string())
            .collect();
        assert_eq!(ids, ["b1", "b2"], "{parent}");
        // Named by the cluster they were made in.
        assert!(
            list.backups.iter().all(|b| b.name.starts_with(C)),
            "{list:?}"
        );
    }
    // Not in another cluster.
    let other = e
        .admin
        .get_backup(a::GetBackupRequest {
            name: "projects/p/instances/i/clusters/c2/backups/b1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::NotFound);
    // The filter the Python client's Table.list_backups sends.
    let list = e
        .admin
        .list_backups(a::ListBackupsRequest {
            parent: C.into(),
            filter: format!("source_table:{}", tname("t2")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.backups.len(), 1);
    assert_eq!(list.backups[0].name, bname("b2"));
    assert_eq!(
        code(e.admin.list_backups(a::ListBackupsRequest {
            parent: C.into(),
            filter: "size_bytes > 10".into(),
            ..Default::default()
        }))
        .await,
        Code::InvalidArgument
    );

    // Only the expiry can change, within the bounds.
    let later = from_now(10 * DAY);
    let mask = |p: &str| {
        Some(FieldMask {
            paths: vec![p.into()],
        })
    };
    let updated = e
        .admin
        .update_backup(a::UpdateBackupRequest {
            backup: Some(a::Backup {
                name: bname("b1"),
                expire_time: Some(later),
                ..Default::default()
            }),
            update_mask: mask("expire_time"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.expire_time.unwrap().seconds, later.seconds);
    let got = get(&mut e, "b1").await;
    assert_eq!(got.expire_time.unwrap().seconds, later.seconds);
    for (m, t) in [
        (mask("source_table"), later),
        (None, later),
        (mask("expire_time"), from_now(Duration::from_secs(3600))),
    ] {
        assert_eq!(
            code(e.admin.update_backup(a::UpdateBackupRequest {
                backup: Some(a::Backup {
                    name: bname("b1"),
                    expire_time: Some(t),
                    ..Default::default()
                }),
                update_mask: m,
            }))
            .await,
            Code::InvalidArgument
        );
    }

    // Restore into a new table, even after the source is deleted, and read
    // every cell back.
    e.admin
        .delete_table(a::DeleteTableRequest { name: tname("t") })
        .await
        .unwrap();
    let op = e
        .admin
        .restore_table(restore_req("restored", "b1"))
        .await
        .unwrap()
        .into_inner();
    let (meta, _) = finished::<a::RestoreTableMetadata>(op);
    assert_eq!(meta.name, tname("restored"));
    let rows = read(&mut e, req("restored")).await.unwrap();
    assert_eq!(rows.len(), want.len());
    for ((key, cells), (row, v)) in rows.iter().zip(&want) {
        assert_eq!(String::from_utf8_lossy(key), *row);
        let got: Vec<_> = cells
            .iter()
            .map(|c| (c.0.as_str(), c.1.as_slice(), c.2, c.3.as_slice()))
            .collect();
        assert_eq!(
            got,
            [
                ("f", b"q".as_slice(), 1000, v.as_bytes()),
                ("g", b"x".as_slice(), 2000, b"w".as_slice())
            ]
        );
    }
    // A table of that name exists now.
    assert_eq!(
        code(e.admin.restore_table(restore_req("restored", "b1"))).await,
        Code::AlreadyExists
    );

    e.admin
        .delete_backup(a::DeleteBackupRequest { name: bname("b1") })
        .await
        .unwrap();
    for s in [
        e.admin
            .get_backup(a::GetBackupRequest { name: bname("b1") })
            .await
            .unwrap_err(),
        e.admin
            .delete_backup(a::DeleteBackupRequest { name: bname("b1") })
            .await
            .unwrap_err(),
        e.admin
            .restore_table(restore_req("again", "b1"))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(s.code(), Code::NotFound, "{s:?}");
    }
    // The restored table is whole without the backup.
    assert_eq!(
        read(&mut e, req("restored")).await.unwrap().len(),
        want.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_out_of_bounds_and_bad_names_are_refused() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    for expire in [
        from_now(Duration::from_secs(3600)),
        from_now(91 * DAY),
        Timestamp {
            seconds: 1,
            nanos: 0,
        },
    ] {
        assert_eq!(
            code(e.admin.create_backup(create_req("b", "t", expire))).await,
            Code::InvalidArgument
        );
    }
    let mut no_expiry = create_req("b", "t", from_now(DAY));
    no_expiry.backup.as_mut().unwrap().expire_time = None;
    assert_eq!(
        code(e.admin.create_backup(no_expiry)).await,
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            e.admin
                .create_backup(create_req("b", "missing", from_now(DAY)))
        )
        .await,
        Code::NotFound
    );
    assert_eq!(
        code(e.admin.create_backup(create_req(".b", "t", from_now(DAY)))).await,
        Code::InvalidArgument
    );
    assert_eq!(
        code(e.admin.get_backup(a::GetBackupRequest {
            name: bname("none"),
        }))
        .await,
        Code::NotFound
    );
    assert_eq!(
        code(e.admin.get_backup(a::GetBackupRequest {
            name: "projects/p/instances/i/backups/b".into(),
        }))
        .await,
        Code::InvalidArgument
    );
    // Nothing was made.
    assert!(tokio::task::block_in_place(|| e.bt.list_snapshots("t"))
        .unwrap()
        .is_empty());
}

/// The mount's checks: a caller without write access to the table may not
/// make or delete its backups, one without read access does not see them,
/// and only the daemon's user may restore (it makes a table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_take_the_mounts_permissions() {
    let mut e = env_as(engine::access::Identity::new(1000, 1000)).await;
    let bt = e.bt.clone();
    tokio::task::spawn_blocking(move || {
        let mut s =
            engine::schema::TableSchema::with_families([engine::schema::FamilySchema::new("f")]);
        (s.owner, s.group, s.mode) = (0, 0, 0o755);
        bt.create_table("open", s.clone()).unwrap();
        s.mode = 0o700;
        bt.create_table("closed", s).unwrap();
        bt.take_snapshot("open", "b-open").unwrap();
        bt.take_snapshot("closed", "b-closed").unwrap();
    })
    .await
    .unwrap();
    let denied = Code::PermissionDenied;
    assert_eq!(
        code(
            e.admin
                .create_backup(create_req("b", "open", from_now(DAY)))
        )
        .await,
        denied
    );
    assert_eq!(get(&mut e, "b-open").await.name, bname("b-open"));
    assert_eq!(
        code(e.admin.get_backup(a::GetBackupRequest {
            name: bname("b-closed")
        }))
        .await,
        denied
    );
    let list = e
        .admin
        .list_backups(a::ListBackupsRequest {
            parent: C.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = list.backups.iter().map(|b| b.name.clone()).collect();
    assert_eq!(names, [bname("b-open")]);
    assert_eq!(
        code(e.admin.delete_backup(a::DeleteBackupRequest {
            name: bname("b-open")
        }))
        .await,
        denied
    );
    assert_eq!(
        code(e.admin.restore_table(restore_req("mine", "b-open"))).await,
        denied
    );
    assert_eq!(
        tokio::task::block_in_place(|| e.bt.list_snapshots("open"))
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_backup_copies_into_a_backup_store_and_restores_from_it() {
    let mut e = env().await;
    let offsite: std::sync::Arc<dyn gfs::FileStore> = std::sync::Arc::new(gfs::MemStore::new());
    e.bt.add_backup_store("offsite", offsite.clone()).unwrap();
    create(&mut e, "t", &["f"]).await;
    for i in 0..30 {
        for ts in [1000, 2000] {
            let v = format!("v{i}-{ts}");
            mutate(
                &mut e,
                "t",
                &format!("r{i:03}"),
                vec![set("f", "q", ts, v.as_bytes())],
            )
            .await
            .unwrap();
        }
    }
    let want = read_all(&mut e, "t").await;
    e.admin
        .create_backup(create_req("b1", "t", from_now(2 * DAY)))
        .await
        .unwrap();
    let off = "projects/p/instances/i/clusters/offsite";
    let copy = |parent: &str| a::CopyBackupRequest {
        parent: parent.into(),
        backup_id: "b2".into(),
        source_backup: bname("b1"),
        expire_time: Some(from_now(3 * DAY)),
    };
    // Only into a backup store.
    assert_eq!(
        code(e.admin.copy_backup(copy(C))).await,
        Code::FailedPrecondition
    );
    let op = e.admin.copy_backup(copy(off)).await.unwrap().into_inner();
    let (meta, _) = finished::<a::CopyBackupMetadata>(op);
    assert_eq!(meta.name, format!("{off}/backups/b2"));
    assert_eq!(meta.progress.unwrap().progress_percent, 100);
    assert!(!offsite.list("files/").unwrap().is_empty());
    // Listed in its cluster only, and under `-`.
    let ids = |l: a::ListBackupsResponse| -> Vec<String> {
        l.backups.into_iter().map(|b| b.name).collect()
    };
    let in_off = e
        .admin
        .list_backups(a::ListBackupsRequest {
            parent: off.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(in_off), [format!("{off}/backups/b2")]);
    let every = e
        .admin
        .list_backups(a::ListBackupsRequest {
            parent: "projects/p/instances/i/clusters/-".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ids(every), [bname("b1"), format!("{off}/backups/b2")]);
    // The table and its snapshot go; the copy restores it whole.
    e.admin
        .delete_backup(a::DeleteBackupRequest { name: bname("b1") })
        .await
        .unwrap();
    let op = e
        .admin
        .restore_table(a::RestoreTableRequest {
            parent: P.into(),
            table_id: "u".into(),
            source: Some(a::restore_table_request::Source::Backup(format!(
                "{off}/backups/b2"
            ))),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(op.done);
    assert_eq!(read_all(&mut e, "u").await, want);
    e.admin
        .delete_backup(a::DeleteBackupRequest {
            name: format!("{off}/backups/b2"),
        })
        .await
        .unwrap();
    assert!(offsite.list("files/").unwrap().is_empty());
}
