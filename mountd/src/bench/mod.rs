//! bigtable-bench: the paper's Figure 6 workloads on the engine, through the
//! mount, through the gRPC API, and on the file layer, each beside its peers.

pub mod cluster_bench;
pub mod coherence_bench;
pub mod common;
pub mod cpu;
pub mod emulator_peer;
pub mod engine_bench;
pub mod fs_bench;
pub mod gfs_bench;
pub mod goal_limits;
pub mod goals;
pub mod grpc_bench;
pub mod limits;
pub mod machines;
pub mod peer_rounds;
#[cfg(feature = "peers")]
pub mod peers;
pub mod rpc_bench;
pub mod s3_bench;
pub mod s3_server;
pub mod scale_bench;
pub mod snapshot_bench;
pub mod vm_memory;
pub mod workloads;
pub mod write_rounds;
