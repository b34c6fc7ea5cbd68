//! cache (to be written)
