//! bigtable-bench: the paper's Figure 6 workloads on the engine, through the
//! mount, and on the file layer, each beside its peers.

pub mod common;
#[cfg(feature = "peers")]
pub mod peers;
pub mod workloads;
