//! schema (being written on branch `logic`; this placeholder only names the type)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSchema {}
