//! group_commit (to be written)
