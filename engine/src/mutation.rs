//! mutation (to be written)
