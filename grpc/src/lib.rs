//! Cloud Bigtable's v2 gRPC API served over the engine: the Data API
//! (`google.bigtable.v2.Bigtable`), a Table Admin subset
//! (`google.bigtable.admin.v2.BigtableTableAdmin`) and the Instance Admin's
//! instances, clusters and app profiles
//! (`google.bigtable.admin.v2.BigtableInstanceAdmin`). The daemon runs it beside
//! the mount on the same engine, so what a client writes is in the mount at
//! once and the other way round.
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod admin;
mod app_profiles;
pub mod auth;
mod backup_copy;
mod backups;
mod change_config;
mod consistency;
mod data;
mod drop;
mod filter;
mod gc;
mod guard;
mod instance_admin;
mod instance_store;
mod instances;
pub mod internal;
mod names;
mod server;
mod shared;
mod status;
mod table_message;
mod table_ops;
mod timing;
mod tls;
mod unserved;
mod value_type;
mod wire;

pub use auth::Auth;
pub use guard::Limits;
pub use names::{check_instance_id, DEFAULT_INSTANCE};
pub use server::{parse_addr, start, start_with, Error, Running};
pub use shared::{Changes, Shared};
pub use tls::{Tls, TlsFiles};

/// The Table Admin API's messages (and client).
pub use googleapis_tonic_google_bigtable_admin_v2::google::bigtable::admin::v2 as admin_v2;
/// The Data API's messages (and client, for tests and tools).
pub use googleapis_tonic_google_bigtable_v2::google::bigtable::v2;

/// Server traits generated in build.rs over the messages above.
mod gen {
    pub mod data {
        #![allow(clippy::all)]
        include!(concat!(env!("OUT_DIR"), "/google.bigtable.v2.Bigtable.rs"));
    }
    pub mod admin {
        #![allow(clippy::all)]
        include!(concat!(
            env!("OUT_DIR"),
            "/google.bigtable.admin.v2.BigtableTableAdmin.rs"
        ));
    }
    pub mod instance_admin {
        #![allow(clippy::all)]
        include!(concat!(
            env!("OUT_DIR"),
            "/google.bigtable.admin.v2.BigtableInstanceAdmin.rs"
        ));
    }
}

/// `google.iam.v1`, as the instance admin's IAM calls carry it.
pub(crate) use googleapis_tonic_google_bigtable_admin_v2::google::iam::v1 as iam_v1;

/// `google.protobuf.Empty`, as prost maps it.
pub(crate) type Empty = ();

/// `google.longrunning.Operation`, as admin changes return it.
pub use googleapis_tonic_google_bigtable_admin_v2::google::longrunning::Operation;
