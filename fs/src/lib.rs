//! fs
