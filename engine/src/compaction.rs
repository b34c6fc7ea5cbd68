//! compaction (to be written)
