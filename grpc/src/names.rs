//! Resource names of the API: `projects/P/instances/I/tables/T`. Every
//! project maps to this one cluster (as the emulator does); instances keep
//! their tables apart. The default instance's tables (the daemon's
//! `instance=` option) are the engine's tables of the same name, the mount's
//! top level; another instance's table `T` is the engine's table `I@T`
//! (`@` is in no table or instance id of the API). Names are echoed back
//! under the caller's parent.

use tonic::Status;

/// The default instance of a daemon not told another (`instance=`).
pub const DEFAULT_INSTANCE: &str = "default";

/// What separates an instance from a table id in an engine table name.
const SEP: char = '@';

/// An instance id the daemon accepts: what may stand in a resource name,
/// without the `@` that separates instances in engine table names.
pub fn check_instance_id(id: &str) -> Result<(), Status> {
    check_id("instance", id, 33)
}

/// A cluster id the daemon accepts: an instance id's characters, up to 64
/// of them (clients' tests make ids longer than Cloud's 30 from their
/// instance's; a cluster id never stands in an engine table name).
pub fn check_cluster_id(id: &str) -> Result<(), Status> {
    check_id("cluster", id, 64)
}

/// 1 to `max` of `[A-Za-z0-9_.-]`, starting with a letter or digit.
fn check_id(what: &str, id: &str, max: usize) -> Result<(), Status> {
    let ok = id.len() <= max
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "invalid {what} id {id:?}: use 1-{max} of [A-Za-z0-9_.-], starting with a letter or digit"
        )))
    }
}

/// `projects/P/instances/I`, checked.
pub fn parent(name: &str) -> Result<&str, Status> {
    instance(name).map(|_| name)
}

/// The instance id `I` of the parent `projects/P/instances/I`, checked.
pub fn instance(parent: &str) -> Result<&str, Status> {
    let parts: Vec<&str> = parent.split('/').collect();
    match parts.as_slice() {
        ["projects", p, "instances", i] if !p.is_empty() && check_instance_id(i).is_ok() => Ok(i),
        _ => Err(Status::invalid_argument(format!(
            "invalid parent {parent:?}: expected projects/<project>/instances/<instance>"
        ))),
    }
}

/// The engine table of `projects/P/instances/I/tables/T`, for a daemon
/// whose default instance is `default`.
pub fn table(name: &str, default: &str) -> Result<String, Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "invalid table name {name:?}: expected projects/<project>/instances/<instance>/tables/<table>"
        ))
    };
    let (p, t) = name.rsplit_once("/tables/").ok_or_else(bad)?;
    let i = instance(p).map_err(|_| bad())?;
    check_table_id(t).map_err(|_| bad())?;
    Ok(engine_table(i, t, default))
}

/// The engine table that is table `id` of `instance`.
pub fn engine_table(instance: &str, id: &str, default: &str) -> String {
    if instance == default {
        id.to_string()
    } else {
        format!("{instance}{SEP}{id}")
    }
}

/// The table id under which `instance` sees the engine table `engine`, if
/// that table is one of the instance's.
pub fn table_id<'a>(engine: &'a str, instance: &str, default: &str) -> Option<&'a str> {
    match engine.split_once(SEP) {
        None => (instance == default).then_some(engine),
        Some((i, id)) => (i == instance && instance != default).then_some(id),
    }
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
        let table = |n| table(n, "i");
        assert_eq!(table("projects/p/instances/i/tables/t1").unwrap(), "t1");
        assert_eq!(table("projects/p/instances/j/tables/t1").unwrap(), "j@t1");
        assert!(table("projects/p/instances/i/tables/").is_err());
        assert!(table("projects/p/tables/t").is_err());
        assert!(table("t").is_err());
        assert!(table("projects/p/instances/i/tables/a/b").is_err());
        assert!(table("projects/p/instances/a@b/tables/t").is_err());
        assert!(parent("projects/p/instances/i").is_ok());
        assert!(parent("projects//instances/i").is_err());
        assert!(check_table_id(".x").is_err());
    }

    #[test]
    fn instances_see_only_their_tables() {
        assert_eq!(table_id("t", "i", "i"), Some("t"));
        assert_eq!(table_id("t", "j", "i"), None);
        assert_eq!(table_id("j@t", "j", "i"), Some("t"));
        assert_eq!(table_id("j@t", "i", "i"), None);
        assert_eq!(table_id("j@t", "k", "i"), None);
        // A default instance's table never takes the `I@T` form.
        assert_eq!(table_id("i@t", "i", "i"), None);
    }
}
