#[path = "../bench/mod.rs"]
mod bench;
fn main() {}
