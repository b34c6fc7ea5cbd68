//! Resource names of the API: `projects/P/instances/I/tables/T`. Every
//! project and instance map to this one cluster (as the emulator does), so
//! only the table id matters; names are echoed back under the caller's parent.

use tonic::Status;

/// `projects/P/instances/I`, checked.
pub fn parent(name: &str) -> Result<&str, Status> {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "instances", i] if !p.is_empty() && !i.is_empty() => Ok(name),
        _ => Err(Status::invalid_argument(format!(
            "invalid parent {name:?}: expected projects/<project>/instances/<instance>"
        ))),
    }
}

/// The table id of `projects/P/instances/I/tables/T`.
pub fn table(name: &str) -> Result<&str, Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "invalid table name {name:?}: expected projects/<project>/instances/<instance>/tables/<table>"
        ))
    };
    let (p, t) = name.rsplit_once("/tables/").ok_or_else(bad)?;
    parent(p).map_err(|_| bad())?;
    check_table_id(t).map_err(|_| bad())?;
    Ok(t)
}

/// The full name of table `id` under `parent`.
pub fn full(parent: &str, id: &str) -> String {
    format!("{parent}/tables/{id}")
}

/// Table ids follow the API: `[_a-zA-Z0-9][-_.a-zA-Z0-9]*`, at most 50 bytes.
pub fn check_table_id(id: &str) -> Result<(), Status> {
    let mut chars = id.chars();
    let ok_first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok_first && ok_rest && id.len() <= 50 {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "invalid table id {id:?}: expected [_a-zA-Z0-9][-_.a-zA-Z0-9]* (at most 50 bytes)"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn table_names() {
        assert_eq!(table("projects/p/instances/i/tables/t1").unwrap(), "t1");
        assert!(table("projects/p/instances/i/tables/").is_err());
        assert!(table("projects/p/tables/t").is_err());
        assert!(table("t").is_err());
        assert!(table("projects/p/instances/i/tables/a/b").is_err());
        assert!(parent("projects/p/instances/i").is_ok());
        assert!(parent("projects//instances/i").is_err());
        assert!(check_table_id(".x").is_err());
    }
}
