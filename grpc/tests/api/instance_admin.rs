//! The Instance Admin API: instances, their one cluster and app profiles,
//! kept across a restart; refusals; who may change them; IAM answers.

use crate::common::*;
use googleapis_tonic_google_bigtable_admin_v2::google::longrunning::operation::Result as Lro;
use grpc::admin_v2::{
    self as a, app_profile::RoutingPolicy,
    bigtable_instance_admin_client::BigtableInstanceAdminClient,
};
use prost::Message;
use prost_types::FieldMask;
use std::sync::Arc;
use tonic::transport::Channel;
use tonic::Code;

const PROD: &str = "projects/p/instances/prod";

fn client(e: &Env) -> BigtableInstanceAdminClient<Channel> {
    BigtableInstanceAdminClient::new(e.ch.clone())
}

fn mask(paths: &[&str]) -> Option<FieldMask> {
    Some(FieldMask {
        paths: paths.iter().map(|p| p.to_string()).collect(),
    })
}

/// A done operation's response.
fn response<M: Message + Default>(op: grpc::Operation) -> M {
    match op.result {
        Some(Lro::Response(any)) => M::decode(&*any.value).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn create_req(id: &str) -> a::CreateInstanceRequest {
    a::CreateInstanceRequest {
        parent: "projects/p".into(),
        instance_id: id.into(),
        instance: Some(a::Instance {
            display_name: "Production".into(),
            labels: [("env".to_string(), String::new())].into(),
            ..Default::default()
        }),
        clusters: [(
            "prod-c1".to_string(),
            a::Cluster {
                location: "projects/p/locations/here".into(),
                serve_nodes: 3,
                ..Default::default()
            },
        )]
        .into(),
    }
}

async fn get(e: &Env, name: &str) -> Result<a::Instance, tonic::Status> {
    client(e)
        .get_instance(a::GetInstanceRequest { name: name.into() })
        .await
        .map(|r| r.into_inner())
}

async fn ids(e: &Env) -> Vec<String> {
    let r = client(e)
        .list_instances(a::ListInstancesRequest {
            parent: "projects/p".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    r.instances
        .iter()
        .map(|i| i.name.rsplit('/').next().unwrap().to_string())
        .collect()
}

fn profile(cluster: &str) -> a::AppProfile {
    a::AppProfile {
        description: "batch jobs".into(),
        routing_policy: Some(RoutingPolicy::SingleClusterRouting(
            a::app_profile::SingleClusterRouting {
                cluster_id: cluster.into(),
                allow_transactional_writes: true,
            },
        )),
        ..Default::default()
    }
}

fn create_profile(id: &str, p: a::AppProfile) -> a::CreateAppProfileRequest {
    a::CreateAppProfileRequest {
        parent: PROD.into(),
        app_profile_id: id.into(),
        app_profile: Some(p),
        ignore_warnings: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_created_listed_updated_and_deleted() {
    let mut e = env().await;
    let mut c = client(&e);
    // The default instance is there from the start.
    assert_eq!(ids(&e).await, ["i"]);
    let op = c
        .create_instance(create_req("prod"))
        .await
        .unwrap()
        .into_inner();
    let (meta, _) = finished::<a::CreateInstanceMetadata>(op.clone());
    assert_eq!(meta.original_request.unwrap().instance_id, "prod");
    let made: a::Instance = response(op);
    assert_eq!(made.name, PROD);
    assert_eq!(made.state, a::instance::State::Ready as i32);
    assert_eq!(made.r#type, a::instance::Type::Production as i32);
    assert!(made.create_time.is_some());
    // The empty label's value is on the wire (`2a 07 0a 03 "env" 12 00`).
    let bytes = raw_call(
        &e,
        "/google.bigtable.admin.v2.BigtableInstanceAdmin/GetInstance",
        a::GetInstanceRequest { name: PROD.into() },
    )
    .await
    .unwrap();
    let entry = [0x2a, 0x07, 0x0a, 0x03, b'e', b'n', b'v', 0x12, 0x00];
    assert!(bytes.windows(9).any(|w| w == entry), "{bytes:02x?}");
    assert_eq!(get(&e, PROD).await.unwrap(), made);
    assert_eq!(ids(&e).await, ["i", "prod"]);
    assert_eq!(
        code(c.create_instance(create_req("prod"))).await,
        Code::AlreadyExists
    );
    let mut two = create_req("two");
    two.clusters.insert("c2".into(), a::Cluster::default());
    assert_eq!(code(c.create_instance(two)).await, Code::InvalidArgument);
    assert_eq!(
        code(get(&e, "projects/p/instances/none")).await,
        Code::NotFound
    );

    // PartialUpdateInstance changes what the mask names.
    let op = c
        .partial_update_instance(a::PartialUpdateInstanceRequest {
            instance: Some(a::Instance {
                name: PROD.into(),
                display_name: "Prod".into(),
                ..Default::default()
            }),
            update_mask: mask(&["display_name"]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response::<a::Instance>(op).display_name, "Prod");
    let got = get(&e, PROD).await.unwrap();
    assert_eq!(got.display_name, "Prod");
    assert_eq!(got.labels, made.labels, "labels are kept");
    let bad = a::PartialUpdateInstanceRequest {
        instance: Some(got.clone()),
        update_mask: mask(&["state"]),
    };
    assert_eq!(
        code(c.partial_update_instance(bad)).await,
        Code::InvalidArgument
    );
    // UpdateInstance sets the display name and type.
    let dev = a::Instance {
        r#type: a::instance::Type::Development as i32,
        ..got
    };
    let got = c.update_instance(dev).await.unwrap().into_inner();
    assert_eq!(got.r#type, a::instance::Type::Development as i32);

    // The one cluster.
    let clusters = c
        .list_clusters(a::ListClustersRequest {
            parent: PROD.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .clusters;
    assert_eq!(clusters.len(), 1);
    let cname = format!("{PROD}/clusters/prod-c1");
    assert_eq!(clusters[0].name, cname);
    assert_eq!(clusters[0].serve_nodes, 3);
    let get_cluster = |name: String| a::GetClusterRequest { name };
    assert_eq!(
        code(c.get_cluster(get_cluster(format!("{PROD}/clusters/other")))).await,
        Code::NotFound
    );
    let create_cluster = |id: &str| a::CreateClusterRequest {
        parent: PROD.into(),
        cluster_id: id.into(),
        cluster: Some(a::Cluster::default()),
    };
    assert_eq!(
        code(c.create_cluster(create_cluster("prod-c1"))).await,
        Code::AlreadyExists
    );
    assert_eq!(
        code(c.create_cluster(create_cluster("c2"))).await,
        Code::FailedPrecondition
    );
    let op = c
        .partial_update_cluster(a::PartialUpdateClusterRequest {
            cluster: Some(a::Cluster {
                name: cname.clone(),
                serve_nodes: 5,
                ..Default::default()
            }),
            update_mask: mask(&["serve_nodes"]),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response::<a::Cluster>(op).serve_nodes, 5);
    let got = c.get_cluster(get_cluster(cname.clone())).await.unwrap();
    assert_eq!(got.into_inner().serve_nodes, 5);
    let del = a::DeleteClusterRequest { name: cname };
    assert_eq!(code(c.delete_cluster(del)).await, Code::FailedPrecondition);

    // App profiles.
    let list = |c: &mut BigtableInstanceAdminClient<Channel>| {
        let mut c = c.clone();
        async move {
            c.list_app_profiles(a::ListAppProfilesRequest {
                parent: PROD.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .app_profiles
            .into_iter()
            .map(|p| p.name.rsplit('/').next().unwrap().to_string())
            .collect::<Vec<_>>()
        }
    };
    assert_eq!(list(&mut c).await, ["default"]);
    let p = c
        .create_app_profile(create_profile("batch", profile("prod-c1")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.name, format!("{PROD}/appProfiles/batch"));
    assert_eq!(
        code(c.create_app_profile(create_profile("batch", profile("prod-c1")))).await,
        Code::AlreadyExists
    );
    assert_eq!(
        code(c.create_app_profile(create_profile("x", profile("elsewhere")))).await,
        Code::InvalidArgument
    );
    assert_eq!(list(&mut c).await, ["batch", "default"]);
    let op = c
        .update_app_profile(a::UpdateAppProfileRequest {
            app_profile: Some(a::AppProfile {
                name: p.name.clone(),
                description: "nightly".into(),
                ..Default::default()
            }),
            update_mask: mask(&["description"]),
            ignore_warnings: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response::<a::AppProfile>(op).description, "nightly");
    let got = c
        .get_app_profile(a::GetAppProfileRequest {
            name: p.name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.description, "nightly");
    assert_eq!(got.routing_policy, profile("prod-c1").routing_policy);
    let del = |name: &str| a::DeleteAppProfileRequest {
        name: name.into(),
        ignore_warnings: false,
    };
    c.delete_app_profile(del(&p.name)).await.unwrap();
    assert_eq!(
        code(c.delete_app_profile(del(&p.name))).await,
        Code::NotFound
    );
    assert_eq!(list(&mut c).await, ["default"]);

    // An instance with tables is not deleted; an empty one is.
    e.admin
        .create_table(a::CreateTableRequest {
            parent: PROD.into(),
            table_id: "t".into(),
            table: Some(a::Table::default()),
            initial_splits: vec![],
        })
        .await
        .unwrap();
    let del = |name: &str| a::DeleteInstanceRequest { name: name.into() };
    let s = c.delete_instance(del(PROD)).await.unwrap_err();
    assert_eq!(s.code(), Code::FailedPrecondition);
    assert!(s.message().contains("t"), "{}", s.message());
    e.admin
        .delete_table(a::DeleteTableRequest {
            name: format!("{PROD}/tables/t"),
        })
        .await
        .unwrap();
    c.delete_instance(del(PROD)).await.unwrap();
    assert_eq!(code(get(&e, PROD)).await, Code::NotFound);
    assert_eq!(ids(&e).await, ["i"]);
    assert_eq!(
        code(c.delete_instance(del("projects/p/instances/i"))).await,
        Code::FailedPrecondition
    );
    // A table made under an instance nobody created makes it, as before.
    create(&mut e, "t", &["f"]).await;
    let other = "projects/p/instances/other";
    e.admin
        .create_table(a::CreateTableRequest {
            parent: other.into(),
            table_id: "t".into(),
            table: Some(a::Table::default()),
            initial_splits: vec![],
        })
        .await
        .unwrap();
    assert_eq!(get(&e, other).await.unwrap().display_name, "other");
    assert_eq!(ids(&e).await, ["i", "other"]);
}

/// What the instance admin is told is kept in the Bigtable itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_settings_survive_a_restart() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let e = env_on(store.clone()).await;
    let mut c = client(&e);
    // The empty label goes out with its value in the operation's metadata
    // (the request) and in its response (the instance).
    let op = raw_call(
        &e,
        "/google.bigtable.admin.v2.BigtableInstanceAdmin/CreateInstance",
        create_req("prod"),
    )
    .await
    .unwrap();
    let entry = [0x2a, 0x07, 0x0a, 0x03, b'e', b'n', b'v', 0x12, 0x00];
    let n = op.windows(9).filter(|w| *w == entry).count();
    assert_eq!(n, 2, "{op:02x?}");
    c.create_app_profile(create_profile("batch", profile("prod-c1")))
        .await
        .unwrap();
    let before = get(&e, PROD).await.unwrap();
    e.close().await;

    let e = env_on(store).await;
    let mut c = client(&e);
    assert_eq!(get(&e, PROD).await.unwrap(), before);
    assert_eq!(before.labels["env"], "");
    let p = c
        .get_app_profile(a::GetAppProfileRequest {
            name: format!("{PROD}/appProfiles/batch"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(p.routing_policy, profile("prod-c1").routing_policy);
    let cl = c
        .get_cluster(a::GetClusterRequest {
            name: format!("{PROD}/clusters/prod-c1"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cl.serve_nodes, 3);
    // The store is no instance's table.
    assert_eq!(ids(&e).await, ["i", "prod"]);
    let tables = e
        .admin
        .clone()
        .list_tables(a::ListTablesRequest {
            parent: P.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .tables;
    assert!(tables.is_empty(), "{tables:?}");
}

/// Only the daemon's user changes instances, clusters and app profiles;
/// anyone may read them. TestIamPermissions answers from that; the
/// policy calls say why they are not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_daemon_user_changes_instances() {
    let e = env_as(engine::access::Identity::new(1000, 1000)).await;
    let mut c = client(&e);
    assert_eq!(
        code(c.create_instance(create_req("prod"))).await,
        Code::PermissionDenied
    );
    assert_eq!(ids(&e).await, ["i"]);
    let i = "projects/p/instances/i";
    let update = a::PartialUpdateInstanceRequest {
        instance: Some(a::Instance {
            name: i.into(),
            display_name: "mine".into(),
            ..Default::default()
        }),
        update_mask: mask(&["display_name"]),
    };
    assert_eq!(
        code(c.partial_update_instance(update)).await,
        Code::PermissionDenied
    );
    let mut p = create_profile("x", profile("cluster"));
    p.parent = i.into();
    assert_eq!(code(c.create_app_profile(p)).await, Code::PermissionDenied);
    let asked = vec![
        "bigtable.instances.get".to_string(),
        "bigtable.instances.create".to_string(),
        "bigtable.tables.delete".to_string(),
    ];
    let test = |c: &mut BigtableInstanceAdminClient<Channel>| {
        let mut c = c.clone();
        let asked = asked.clone();
        async move {
            c.test_iam_permissions(
                googleapis_tonic_google_bigtable_admin_v2::google::iam::v1::TestIamPermissionsRequest {
                    resource: i.into(),
                    permissions: asked,
                },
            )
            .await
            .unwrap()
            .into_inner()
            .permissions
        }
    };
    assert_eq!(test(&mut c).await, ["bigtable.instances.get"]);
    let s = c
        .get_iam_policy(
            googleapis_tonic_google_bigtable_admin_v2::google::iam::v1::GetIamPolicyRequest {
                resource: i.into(),
                options: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(s.code(), Code::Unimplemented);
    assert!(
        s.message().contains("TestIamPermissions"),
        "{}",
        s.message()
    );

    let root = env().await;
    assert_eq!(test(&mut client(&root)).await, asked);
}
