//! schema (to be written)
