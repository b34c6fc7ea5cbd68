//! Tests of the engine's internals that span its modules: the read path and
//! the filters against brute-force reference models.

mod filter_model;
mod read_model;
