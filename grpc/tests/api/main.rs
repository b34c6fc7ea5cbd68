//! Every RPC through the generated clients against an in-process server on
//! an ephemeral port, over an in-memory engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod aggregate;
mod backups;
mod change_config;
mod change_stream;
mod common;
mod data;
mod filters;
mod instance_admin;
mod protect;
mod wire;
