//! read (to be written)
