//! bigtable-bench: the paper's Figure 6 workloads on the engine, through the
//! mount, and on the file layer, each beside its peers.

pub mod common;
pub mod engine_bench;
pub mod fs_bench;
pub mod gfs_bench;
#[cfg(feature = "peers")]
pub mod peers;
pub mod scale_bench;
pub mod workloads;
