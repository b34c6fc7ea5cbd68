//! manifest (to be written)
