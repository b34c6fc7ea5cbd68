//! Instances as the Instance Admin API sees them (instance_admin.rs,
//! app_profiles.rs): which exist (created here, the daemon's default one,
//! or one holding tables), their one cluster, resource names, and who may
//! change them.

use crate::admin_v2 as a;
use crate::instance_store as store;
use crate::names;
use crate::shared::Shared;
use engine::access::{Identity, W};
use tonic::Status;

/// The id of an instance's one cluster when its creator named none.
pub(crate) const DEFAULT_CLUSTER: &str = "cluster";

/// `projects/P` of `projects/P/instances/I` (or of `projects/P`).
pub(crate) fn project(name: &str) -> &str {
    let mut parts = name.splitn(3, '/');
    let _ = parts.next();
    parts.next().unwrap_or("")
}

/// `projects/P`, checked.
pub(crate) fn project_parent(parent: &str) -> Result<&str, Status> {
    match parent.split('/').collect::<Vec<_>>().as_slice() {
        ["projects", p] if !p.is_empty() => Ok(p),
        _ => Err(Status::invalid_argument(format!(
            "invalid parent {parent:?}: expected projects/<project>"
        ))),
    }
}

pub(crate) fn instance_name(project: &str, id: &str) -> String {
    format!("projects/{project}/instances/{id}")
}

/// Splits `projects/P/instances/I/<kind>/X` into (`projects/P/instances/I`, X).
pub(crate) fn child<'a>(name: &'a str, kind: &str) -> Result<(&'a str, &'a str), Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "invalid name {name:?}: expected projects/<project>/instances/<instance>/{kind}/<id>"
        ))
    };
    let (parent, id) = name.rsplit_once(&format!("/{kind}/")).ok_or_else(bad)?;
    names::instance(parent).map_err(|_| bad())?;
    if id.is_empty() || id.contains('/') {
        return Err(bad());
    }
    Ok((parent, id))
}

/// Who may change instances, clusters and app profiles: the daemon's user.
pub(crate) fn admin(shared: &Shared, who: &Identity, what: &str) -> Result<(), Status> {
    shared.root(who, W, what)
}

/// The instances that hold tables (the engine's `I@T` tables, and the
/// default instance's plain ones), each once.
pub(crate) fn with_tables(shared: &Shared) -> Vec<String> {
    let mut out: Vec<String> = shared
        .bt
        .list_tables()
        .iter()
        .filter_map(|t| match t.split_once('@') {
            Some((i, _)) if !i.is_empty() => Some(i.to_string()),
            Some(_) => None,
            None => Some(shared.instance.clone()),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The tables of instance `id`.
pub(crate) fn tables_of(shared: &Shared, id: &str) -> Vec<String> {
    shared
        .bt
        .list_tables()
        .iter()
        .filter_map(|t| names::table_id(t, id, &shared.instance).map(str::to_string))
        .collect()
}

/// Instance `id` as the API shows it under `project`, if it exists.
pub(crate) fn find(
    shared: &Shared,
    project: &str,
    id: &str,
) -> Result<Option<a::Instance>, Status> {
    let stored = store::instance(&shared.bt, id)?;
    let implicit = id == shared.instance || !tables_of(shared, id).is_empty();
    Ok(match stored {
        Some(mut i) => {
            i.name = instance_name(project, id);
            Some(i)
        }
        None if implicit => Some(a::Instance {
            name: instance_name(project, id),
            display_name: id.to_string(),
            state: a::instance::State::Ready as i32,
            r#type: a::instance::Type::Production as i32,
            ..Default::default()
        }),
        None => None,
    })
}

/// [`find`], or NOT_FOUND.
pub(crate) fn get(shared: &Shared, project: &str, id: &str) -> Result<a::Instance, Status> {
    find(shared, project, id)?.ok_or_else(|| Status::not_found(format!("instance {id} not found")))
}

/// Instance `id`'s one cluster as the API shows it.
pub(crate) fn cluster_of(shared: &Shared, project: &str, id: &str) -> Result<a::Cluster, Status> {
    let mut c = store::cluster(&shared.bt, id)?.unwrap_or_else(|| a::Cluster {
        name: DEFAULT_CLUSTER.into(),
        serve_nodes: 1,
        default_storage_type: a::StorageType::Ssd as i32,
        ..Default::default()
    });
    let cid = c
        .name
        .rsplit('/')
        .next()
        .unwrap_or(DEFAULT_CLUSTER)
        .to_string();
    c.name = format!("{}/clusters/{cid}", instance_name(project, id));
    c.state = a::cluster::State::Ready as i32;
    if c.location.is_empty() {
        c.location = format!("projects/{project}/locations/local");
    }
    Ok(c)
}

/// The id of instance `id`'s cluster.
pub(crate) fn cluster_id(shared: &Shared, id: &str) -> Result<String, Status> {
    let c = cluster_of(shared, "p", id)?;
    Ok(c.name
        .rsplit('/')
        .next()
        .unwrap_or(DEFAULT_CLUSTER)
        .to_string())
}

/// Now, as a protobuf timestamp.
pub(crate) fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(std::time::SystemTime::now())
}
