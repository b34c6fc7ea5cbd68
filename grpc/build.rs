//! Generates the server traits of the two services from a list of their
//! methods. The messages are the published generated types of the public API
//! (`googleapis-tonic-*` crates, which ship clients only), so no `.proto`
//! file and no `protoc` are needed; the route names are the wire contract.

use tonic_build::manual::{Builder, Method, Service};

const CODEC: &str = "tonic_prost::ProstCodec";
/// The admin replies' maps carry every entry's value (see src/wire.rs).
const ADMIN_CODEC: &str = "crate::wire::AdminCodec";
const INTERNAL_CODEC: &str = "crate::internal::codec::WireCodec";

/// (method, request type, response type, server-streaming)
type Spec = (&'static str, &'static str, &'static str, bool);

const DATA: &[Spec] = &[
    ("ReadRows", "ReadRowsRequest", "ReadRowsResponse", true),
    (
        "SampleRowKeys",
        "SampleRowKeysRequest",
        "SampleRowKeysResponse",
        true,
    ),
    ("MutateRow", "MutateRowRequest", "MutateRowResponse", false),
    (
        "MutateRows",
        "MutateRowsRequest",
        "MutateRowsResponse",
        true,
    ),
    (
        "CheckAndMutateRow",
        "CheckAndMutateRowRequest",
        "CheckAndMutateRowResponse",
        false,
    ),
    (
        "PingAndWarm",
        "PingAndWarmRequest",
        "PingAndWarmResponse",
        false,
    ),
    (
        "ReadModifyWriteRow",
        "ReadModifyWriteRowRequest",
        "ReadModifyWriteRowResponse",
        false,
    ),
    (
        "GenerateInitialChangeStreamPartitions",
        "GenerateInitialChangeStreamPartitionsRequest",
        "GenerateInitialChangeStreamPartitionsResponse",
        true,
    ),
    (
        "ReadChangeStream",
        "ReadChangeStreamRequest",
        "ReadChangeStreamResponse",
        true,
    ),
];

const ADMIN: &[Spec] = &[
    (
        "CreateTable",
        "crate::wire::OrderedCreate",
        "crate::wire::OrderedTable",
        false,
    ),
    (
        "ListTables",
        "ListTablesRequest",
        "crate::wire::TableList",
        false,
    ),
    (
        "GetTable",
        "GetTableRequest",
        "crate::wire::OrderedTable",
        false,
    ),
    ("DeleteTable", "DeleteTableRequest", "crate::Empty", false),
    (
        "ModifyColumnFamilies",
        "ModifyColumnFamiliesRequest",
        "crate::wire::OrderedTable",
        false,
    ),
    ("DropRowRange", "DropRowRangeRequest", "crate::Empty", false),
    (
        "UpdateTable",
        "UpdateTableRequest",
        "crate::Operation",
        false,
    ),
    (
        "UndeleteTable",
        "UndeleteTableRequest",
        "crate::Operation",
        false,
    ),
    (
        "GenerateConsistencyToken",
        "GenerateConsistencyTokenRequest",
        "GenerateConsistencyTokenResponse",
        false,
    ),
    (
        "CheckConsistency",
        "CheckConsistencyRequest",
        "CheckConsistencyResponse",
        false,
    ),
    // Backups (src/backups.rs).
    (
        "CreateBackup",
        "CreateBackupRequest",
        "crate::Operation",
        false,
    ),
    ("GetBackup", "GetBackupRequest", "Backup", false),
    (
        "ListBackups",
        "ListBackupsRequest",
        "ListBackupsResponse",
        false,
    ),
    ("UpdateBackup", "UpdateBackupRequest", "Backup", false),
    ("DeleteBackup", "DeleteBackupRequest", "crate::Empty", false),
    (
        "RestoreTable",
        "RestoreTableRequest",
        "crate::Operation",
        false,
    ),
    // Into a backup store (src/backup_copy.rs).
    ("CopyBackup", "CopyBackupRequest", "crate::Operation", false),
];

/// google.bigtable.admin.v2.BigtableInstanceAdmin (src/instance_admin.rs).
const INSTANCE_ADMIN: &[Spec] = &[
    (
        "CreateInstance",
        "CreateInstanceRequest",
        "crate::Operation",
        false,
    ),
    ("GetInstance", "GetInstanceRequest", "Instance", false),
    (
        "ListInstances",
        "ListInstancesRequest",
        "ListInstancesResponse",
        false,
    ),
    ("UpdateInstance", "Instance", "Instance", false),
    (
        "PartialUpdateInstance",
        "PartialUpdateInstanceRequest",
        "crate::Operation",
        false,
    ),
    (
        "DeleteInstance",
        "DeleteInstanceRequest",
        "crate::Empty",
        false,
    ),
    (
        "CreateCluster",
        "CreateClusterRequest",
        "crate::Operation",
        false,
    ),
    ("GetCluster", "GetClusterRequest", "Cluster", false),
    (
        "ListClusters",
        "ListClustersRequest",
        "ListClustersResponse",
        false,
    ),
    ("UpdateCluster", "Cluster", "crate::Operation", false),
    (
        "PartialUpdateCluster",
        "PartialUpdateClusterRequest",
        "crate::Operation",
        false,
    ),
    (
        "DeleteCluster",
        "DeleteClusterRequest",
        "crate::Empty",
        false,
    ),
    (
        "CreateAppProfile",
        "CreateAppProfileRequest",
        "AppProfile",
        false,
    ),
    ("GetAppProfile", "GetAppProfileRequest", "AppProfile", false),
    (
        "ListAppProfiles",
        "ListAppProfilesRequest",
        "ListAppProfilesResponse",
        false,
    ),
    (
        "UpdateAppProfile",
        "UpdateAppProfileRequest",
        "crate::Operation",
        false,
    ),
    (
        "DeleteAppProfile",
        "DeleteAppProfileRequest",
        "crate::Empty",
        false,
    ),
    (
        "GetIamPolicy",
        "crate::iam_v1::GetIamPolicyRequest",
        "crate::iam_v1::Policy",
        false,
    ),
    (
        "SetIamPolicy",
        "crate::iam_v1::SetIamPolicyRequest",
        "crate::iam_v1::Policy",
        false,
    ),
    (
        "TestIamPermissions",
        "crate::iam_v1::TestIamPermissionsRequest",
        "crate::iam_v1::TestIamPermissionsResponse",
        false,
    ),
];

fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn service(package: &str, name: &str, types: &str, codec: &str, specs: &[Spec]) -> Service {
    let ty = |t: &str| {
        if t.starts_with("crate::") {
            t.to_string()
        } else {
            format!("{types}::{t}")
        }
    };
    let mut b = Service::builder().name(name).package(package);
    for (method, req, resp, streaming) in specs {
        let mut m = Method::builder()
            .name(snake(method))
            .route_name(*method)
            .input_type(ty(req))
            .output_type(ty(resp))
            .codec_path(codec);
        if *streaming {
            m = m.server_streaming();
        }
        b = b.method(m.build());
    }
    b.build()
}

fn main() {
    let data = service(
        "google.bigtable.v2",
        "Bigtable",
        "googleapis_tonic_google_bigtable_v2::google::bigtable::v2",
        CODEC,
        DATA,
    );
    let admin = service(
        "google.bigtable.admin.v2",
        "BigtableTableAdmin",
        "googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2",
        ADMIN_CODEC,
        ADMIN,
    );
    let instance_admin = service(
        "google.bigtable.admin.v2",
        "BigtableInstanceAdmin",
        "googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2",
        ADMIN_CODEC,
        INSTANCE_ADMIN,
    );
    Builder::new()
        .build_client(false)
        .build_transport(false)
        .compile(&[data, admin, instance_admin]);
    // The daemons' internal service: serde messages in a compact binary
    // codec (see src/internal/), client and server.
    let internal = Service::builder()
        .name("Cluster")
        .package("bigtable.internal.v1")
        .method(
            Method::builder()
                .name("call")
                .route_name("Call")
                .input_type("crate::internal::codec::Sealed<crate::internal::messages::Call>")
                .output_type("crate::internal::codec::Sealed<crate::internal::messages::Reply>")
                .codec_path(INTERNAL_CODEC)
                .build(),
        )
        // Control calls apart from data calls (the same messages), so
        // that each route has its own size limit.
        .method(
            Method::builder()
                .name("control")
                .route_name("Control")
                .input_type("crate::internal::codec::Sealed<crate::internal::messages::Call>")
                .output_type("crate::internal::codec::Sealed<crate::internal::messages::Reply>")
                .codec_path(INTERNAL_CODEC)
                .build(),
        )
        .method(
            Method::builder()
                .name("scan")
                .route_name("Scan")
                .input_type("crate::internal::codec::Sealed<crate::internal::messages::ScanCall>")
                .output_type("crate::internal::codec::Tagged<crate::internal::messages::ScanChunk>")
                .codec_path(INTERNAL_CODEC)
                .server_streaming()
                .build(),
        )
        .build();
    Builder::new().build_transport(false).compile(&[internal]);
}
