//! Shared code of the bigtable binaries.

pub mod daemon;
pub mod fusemount;
pub mod mountopts;
