//! Tests of the crate's internals that span several modules (the tests of
//! one module sit at the bottom of its file; those of the public API in
//! `chubby/tests/`).

mod fuzz;
