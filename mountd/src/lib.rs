//! Shared code of the bigtable binaries.
