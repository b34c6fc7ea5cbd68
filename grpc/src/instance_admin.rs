//! The Instance Admin API (`google.bigtable.admin.v2.BigtableInstanceAdmin`)
//! over the daemon's instances, which keep tables apart (names.rs): every
//! project is this one Bigtable, and each instance has one cluster, this
//! Bigtable. What clients set (display names, labels, types, the cluster's
//! settings, app profiles) is kept in `@instances` (instance_store.rs).
//!
//! An instance exists when it was created here, or is the daemon's default
//! instance (the mount's top level), or holds tables (a CreateTable under
//! any instance makes it, as before). Changes take the daemon's user (what
//! making a table in the mount's root takes); reads any caller. Every change
//! is finished when its call answers: operations come back `done`.

use crate::admin_v2 as a;
use crate::gen::instance_admin::bigtable_instance_admin_server::BigtableInstanceAdmin;
use crate::iam_v1 as iam;
use crate::instance_store as store;
use crate::instances::{
    admin, child, cluster_id, cluster_of, find, get, now, project, project_parent, tables_of,
    with_tables,
};
use crate::shared::{blocking, Shared};
use crate::table_ops::done;
use crate::{app_profiles, names, Operation};
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct InstanceAdmin {
    pub shared: Arc<Shared>,
}

/// The fields of a mask, or INVALID_ARGUMENT naming what may be given.
fn mask(m: Option<prost_types::FieldMask>, allowed: &[&str]) -> Result<Vec<String>, Status> {
    let paths = m.map(|m| m.paths).unwrap_or_default();
    if paths.is_empty() {
        return Err(Status::invalid_argument(format!(
            "update_mask is required (this server updates {})",
            allowed.join(", ")
        )));
    }
    if let Some(p) = paths.iter().find(|p| !allowed.contains(&p.as_str())) {
        return Err(Status::invalid_argument(format!(
            "updating {p:?} is not served; this call updates {}",
            allowed.join(", ")
        )));
    }
    Ok(paths)
}

/// Instance fields a client may set.
const INSTANCE_FIELDS: &[&str] = &["display_name", "labels", "type"];

/// Copies the `paths` of `from` into `to`.
fn set_instance(to: &mut a::Instance, from: &a::Instance, paths: &[String]) -> Result<(), Status> {
    for p in paths {
        match p.as_str() {
            "display_name" => to.display_name = from.display_name.clone(),
            "labels" => to.labels = from.labels.clone(),
            "type" => {
                to.r#type = match from.r#type {
                    0 => a::instance::Type::Production as i32,
                    t => t,
                }
            }
            _ => {}
        }
    }
    check_instance(to)
}

/// Bounds what is stored: the API's own limits.
fn check_instance(i: &a::Instance) -> Result<(), Status> {
    if i.display_name.len() > 30 {
        return Err(Status::invalid_argument(
            "display_name is at most 30 characters",
        ));
    }
    if i.labels.len() > 64
        || i.labels
            .iter()
            .any(|(k, v)| k.is_empty() || k.len() > 63 || v.len() > 63)
    {
        return Err(Status::invalid_argument(
            "labels: at most 64, keys of 1-63 characters, values of at most 63",
        ));
    }
    if a::instance::Type::try_from(i.r#type).is_err() {
        return Err(Status::invalid_argument("unknown instance type"));
    }
    Ok(())
}

/// Bounds a cluster's settings.
fn check_cluster(c: &a::Cluster) -> Result<(), Status> {
    if c.serve_nodes < 0 || c.location.len() > 256 {
        return Err(Status::invalid_argument(
            "serve_nodes must not be negative; location is at most 256 bytes",
        ));
    }
    Ok(())
}

/// The reply of a change made at once: an operation, done, on the
/// changed resource, whose metadata `$meta` holds the request and times.
macro_rules! finished {
    ($meta:ident, $req:expr, $start:expr, $reply_type:literal, $reply:expr) => {{
        let reply = $reply;
        let meta = a::$meta {
            original_request: Some($req),
            request_time: Some($start),
            finish_time: Some(now()),
        };
        let name = reply.name.clone();
        Ok(Response::new(done(
            &name,
            (stringify!($meta), meta),
            ($reply_type, reply),
        )))
    }};
}

#[tonic::async_trait]
impl BigtableInstanceAdmin for InstanceAdmin {
    async fn create_instance(
        &self,
        req: Request<a::CreateInstanceRequest>,
    ) -> Result<Response<Operation>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let start = now();
        let req = req.into_inner();
        let p = project_parent(&req.parent)?.to_string();
        names::check_instance_id(&req.instance_id)?;
        admin(&self.shared, &who, "create an instance")?;
        if req.clusters.len() > 1 {
            return Err(Status::invalid_argument(format!(
                "{} clusters given: this server serves one cluster per instance",
                req.clusters.len()
            )));
        }
        let mut instance = req.instance.clone().unwrap_or_default();
        instance.state = a::instance::State::Ready as i32;
        if instance.r#type == 0 {
            instance.r#type = a::instance::Type::Production as i32;
        }
        if instance.display_name.is_empty() {
            instance.display_name = req.instance_id.clone();
        }
        instance.create_time = Some(start);
        check_instance(&instance)?;
        let cluster = match req.clusters.iter().next() {
            Some((cid, c)) => {
                names::check_cluster_id(cid)?;
                check_cluster(c)?;
                Some(a::Cluster {
                    name: cid.clone(),
                    ..c.clone()
                })
            }
            None => None,
        };
        let shared = self.shared.clone();
        let id = req.instance_id.clone();
        let reply = blocking(move || {
            if find(&shared, &p, &id)?.is_some() {
                return Err(Status::already_exists(format!(
                    "instance {id} already exists"
                )));
            }
            if let Some(c) = &cluster {
                store::put_cluster(&shared.bt, &id, c)?;
            }
            store::put_instance(&shared.bt, &id, &instance)?;
            log::info!("grpc: created instance {id}");
            get(&shared, &p, &id)
        })
        .await?;
        finished!(CreateInstanceMetadata, req, start, "Instance", reply)
    }

    async fn get_instance(
        &self,
        req: Request<a::GetInstanceRequest>,
    ) -> Result<Response<a::Instance>, Status> {
        self.shared.auth.identify(&req)?;
        let name = req.into_inner().name;
        let id = names::instance(&name)?.to_string();
        let p = project(&name).to_string();
        let shared = self.shared.clone();
        let i = blocking(move || get(&shared, &p, &id)).await?;
        Ok(Response::new(i))
    }

    async fn list_instances(
        &self,
        req: Request<a::ListInstancesRequest>,
    ) -> Result<Response<a::ListInstancesResponse>, Status> {
        self.shared.auth.identify(&req)?;
        let p = project_parent(&req.get_ref().parent)?.to_string();
        let shared = self.shared.clone();
        let instances = blocking(move || {
            let mut ids = store::instance_ids(&shared.bt)?;
            ids.extend(with_tables(&shared));
            ids.push(shared.instance.clone());
            ids.sort();
            ids.dedup();
            let mut out = Vec::new();
            for id in ids {
                if let Some(i) = find(&shared, &p, &id)? {
                    out.push(i);
                }
            }
            Ok(out)
        })
        .await?;
        Ok(Response::new(a::ListInstancesResponse {
            instances,
            ..Default::default()
        }))
    }

    async fn update_instance(
        &self,
        req: Request<a::Instance>,
    ) -> Result<Response<a::Instance>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let from = req.into_inner();
        admin(&self.shared, &who, "change an instance")?;
        // UpdateInstance sets the display name and type (labels take
        // PartialUpdateInstance).
        let paths = vec!["display_name".to_string(), "type".to_string()];
        let shared = self.shared.clone();
        let i = blocking(move || update(&shared, &from, &paths)).await?;
        Ok(Response::new(i))
    }

    async fn partial_update_instance(
        &self,
        req: Request<a::PartialUpdateInstanceRequest>,
    ) -> Result<Response<Operation>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let start = now();
        let req = req.into_inner();
        admin(&self.shared, &who, "change an instance")?;
        let from = req
            .instance
            .clone()
            .ok_or_else(|| Status::invalid_argument("instance is required"))?;
        let paths = mask(req.update_mask.clone(), INSTANCE_FIELDS)?;
        let shared = self.shared.clone();
        let reply = blocking(move || update(&shared, &from, &paths)).await?;
        finished!(UpdateInstanceMetadata, req, start, "Instance", reply)
    }

    async fn delete_instance(
        &self,
        req: Request<a::DeleteInstanceRequest>,
    ) -> Result<Response<()>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let name = req.into_inner().name;
        let id = names::instance(&name)?.to_string();
        let p = project(&name).to_string();
        admin(&self.shared, &who, "delete an instance")?;
        let shared = self.shared.clone();
        blocking(move || {
            get(&shared, &p, &id)?;
            if id == shared.instance {
                return Err(Status::failed_precondition(format!(
                    "instance {id} is the daemon's default instance (the mount's top level) \
                     and cannot be deleted"
                )));
            }
            let tables = tables_of(&shared, &id);
            if !tables.is_empty() {
                return Err(Status::failed_precondition(format!(
                    "instance {id} still has {} table(s) ({}); delete them first",
                    tables.len(),
                    tables.join(", ")
                )));
            }
            store::delete_instance(&shared.bt, &id)?;
            log::info!("grpc: deleted instance {id}");
            Ok(())
        })
        .await?;
        Ok(Response::new(()))
    }

    async fn create_cluster(
        &self,
        req: Request<a::CreateClusterRequest>,
    ) -> Result<Response<Operation>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let id = names::instance(&req.parent)?.to_string();
        let p = project(&req.parent).to_string();
        admin(&self.shared, &who, "create a cluster")?;
        let shared = self.shared.clone();
        let cid = req.cluster_id.clone();
        let status = blocking(move || {
            get(&shared, &p, &id)?;
            let have = cluster_id(&shared, &id)?;
            Ok(if have == cid {
                Status::already_exists(format!("cluster {cid} already exists"))
            } else {
                Status::failed_precondition(format!(
                    "instance {id} has its one cluster, {have}: this server serves one \
                     cluster per instance"
                ))
            })
        })
        .await?;
        Err(status)
    }

    async fn get_cluster(
        &self,
        req: Request<a::GetClusterRequest>,
    ) -> Result<Response<a::Cluster>, Status> {
        self.shared.auth.identify(&req)?;
        let name = req.into_inner().name;
        let (parent, cid) = child(&name, "clusters")?;
        let (id, p, cid) = (
            names::instance(parent)?.to_string(),
            project(parent).to_string(),
            cid.to_string(),
        );
        let shared = self.shared.clone();
        let c = blocking(move || {
            get(&shared, &p, &id)?;
            let c = cluster_of(&shared, &p, &id)?;
            if !c.name.ends_with(&format!("/clusters/{cid}")) {
                return Err(Status::not_found(format!("cluster {cid} not found")));
            }
            Ok(c)
        })
        .await?;
        Ok(Response::new(c))
    }

    async fn list_clusters(
        &self,
        req: Request<a::ListClustersRequest>,
    ) -> Result<Response<a::ListClustersResponse>, Status> {
        self.shared.auth.identify(&req)?;
        let parent = req.into_inner().parent;
        let shared = self.shared.clone();
        let clusters = blocking(move || {
            // `projects/P/instances/-`: every instance's.
            let p = project(&parent).to_string();
            let ids = match parent.strip_suffix("/instances/-") {
                Some(pp) => {
                    project_parent(pp)?;
                    let mut ids = store::instance_ids(&shared.bt)?;
                    ids.extend(with_tables(&shared));
                    ids.push(shared.instance.clone());
                    ids.sort();
                    ids.dedup();
                    ids
                }
                None => {
                    let id = names::instance(&parent)?.to_string();
                    get(&shared, &p, &id)?;
                    vec![id]
                }
            };
            ids.iter().map(|id| cluster_of(&shared, &p, id)).collect()
        })
        .await?;
        Ok(Response::new(a::ListClustersResponse {
            clusters,
            ..Default::default()
        }))
    }

    async fn update_cluster(
        &self,
        req: Request<a::Cluster>,
    ) -> Result<Response<Operation>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let start = now();
        let c = req.into_inner();
        admin(&self.shared, &who, "change a cluster")?;
        let paths = vec!["serve_nodes".to_string()];
        let shared = self.shared.clone();
        let from = c.clone();
        let reply = blocking(move || update_cluster(&shared, &from, &paths)).await?;
        finished!(UpdateClusterMetadata, c, start, "Cluster", reply)
    }

    async fn partial_update_cluster(
        &self,
        req: Request<a::PartialUpdateClusterRequest>,
    ) -> Result<Response<Operation>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let start = now();
        let req = req.into_inner();
        admin(&self.shared, &who, "change a cluster")?;
        let from = req
            .cluster
            .clone()
            .ok_or_else(|| Status::invalid_argument("cluster is required"))?;
        let paths = mask(req.update_mask.clone(), &["serve_nodes"])?;
        let shared = self.shared.clone();
        let reply = blocking(move || update_cluster(&shared, &from, &paths)).await?;
        finished!(PartialUpdateClusterMetadata, req, start, "Cluster", reply)
    }

    async fn delete_cluster(
        &self,
        req: Request<a::DeleteClusterRequest>,
    ) -> Result<Response<()>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let name = req.into_inner().name;
        child(&name, "clusters")?;
        admin(&self.shared, &who, "delete a cluster")?;
        Err(Status::failed_precondition(
            "an instance's only cluster cannot be deleted (this server serves one cluster \
             per instance); delete the instance instead",
        ))
    }

    async fn create_app_profile(
        &self,
        req: Request<a::CreateAppProfileRequest>,
    ) -> Result<Response<a::AppProfile>, Status> {
        app_profiles::create(&self.shared, req).await
    }

    async fn get_app_profile(
        &self,
        req: Request<a::GetAppProfileRequest>,
    ) -> Result<Response<a::AppProfile>, Status> {
        app_profiles::get(&self.shared, req).await
    }

    async fn list_app_profiles(
        &self,
        req: Request<a::ListAppProfilesRequest>,
    ) -> Result<Response<a::ListAppProfilesResponse>, Status> {
        app_profiles::list(&self.shared, req).await
    }

    async fn update_app_profile(
        &self,
        req: Request<a::UpdateAppProfileRequest>,
    ) -> Result<Response<Operation>, Status> {
        app_profiles::update(&self.shared, req).await
    }

    async fn delete_app_profile(
        &self,
        req: Request<a::DeleteAppProfileRequest>,
    ) -> Result<Response<()>, Status> {
        app_profiles::delete(&self.shared, req).await
    }

    async fn get_iam_policy(
        &self,
        req: Request<iam::GetIamPolicyRequest>,
    ) -> Result<Response<iam::Policy>, Status> {
        self.shared.auth.identify(&req)?;
        Err(Status::unimplemented(NO_POLICIES))
    }

    async fn set_iam_policy(
        &self,
        req: Request<iam::SetIamPolicyRequest>,
    ) -> Result<Response<iam::Policy>, Status> {
        self.shared.auth.identify(&req)?;
        Err(Status::unimplemented(NO_POLICIES))
    }

    async fn test_iam_permissions(
        &self,
        req: Request<iam::TestIamPermissionsRequest>,
    ) -> Result<Response<iam::TestIamPermissionsResponse>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        names::instance(&req.resource)?;
        if req.permissions.len() > 100 {
            return Err(Status::invalid_argument("at most 100 permissions"));
        }
        let is_admin = admin(&self.shared, &who, "").is_ok();
        let permissions = req
            .permissions
            .into_iter()
            .filter(|p| held(p, is_admin))
            .collect();
        Ok(Response::new(iam::TestIamPermissionsResponse {
            permissions,
        }))
    }
}

/// Why the IAM policy calls are not served.
const NO_POLICIES: &str = "GetIamPolicy and SetIamPolicy are not served: access here is \
    the mount's permissions (the daemon's user administers instances; tables and families \
    have owners, groups and modes, changed with chmod/chown or .schema; grpc_tokens= maps \
    bearer tokens to users). TestIamPermissions answers from them";

/// Whether a caller holds an instance-level permission: every caller may
/// read instances, clusters, app profiles and the table list; the
/// daemon's user may change them (and make or delete tables). Other
/// permissions depend on each table's modes, so are not granted here.
fn held(permission: &str, is_admin: bool) -> bool {
    let Some(rest) = permission.strip_prefix("bigtable.") else {
        return false;
    };
    let Some((kind, verb)) = rest.split_once('.') else {
        return false;
    };
    let kinds = ["instances", "clusters", "appProfiles", "tables"];
    if !kinds.contains(&kind) {
        return false;
    }
    match verb {
        "get" | "list" => kind != "tables" || verb == "list",
        "create" | "update" | "delete" => is_admin,
        _ => false,
    }
}

/// Sets the `paths` of `from` on the instance it names, made concrete
/// (stored) if it was implicit.
fn update(shared: &Shared, from: &a::Instance, paths: &[String]) -> Result<a::Instance, Status> {
    let id = names::instance(&from.name)?.to_string();
    let p = project(&from.name).to_string();
    let mut i = get(shared, &p, &id)?;
    set_instance(&mut i, from, paths)?;
    store::put_instance(&shared.bt, &id, &i)?;
    log::info!("grpc: updated instance {id} ({})", paths.join(", "));
    Ok(i)
}

/// Sets the `paths` of `from` on the cluster it names.
fn update_cluster(
    shared: &Shared,
    from: &a::Cluster,
    paths: &[String],
) -> Result<a::Cluster, Status> {
    let (parent, cid) = child(&from.name, "clusters")?;
    let id = names::instance(parent)?.to_string();
    let p = project(parent).to_string();
    get(shared, &p, &id)?;
    let mut c = cluster_of(shared, &p, &id)?;
    if !c.name.ends_with(&format!("/clusters/{cid}")) {
        return Err(Status::not_found(format!("cluster {cid} not found")));
    }
    if paths.iter().any(|p| p == "serve_nodes") {
        c.serve_nodes = from.serve_nodes;
    }
    check_cluster(&c)?;
    let mut stored = c.clone();
    stored.name = cid.to_string();
    store::put_cluster(&shared.bt, &id, &stored)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_held() {
        assert!(held("bigtable.instances.get", false));
        assert!(held("bigtable.tables.list", false));
        assert!(!held("bigtable.tables.get", false));
        assert!(!held("bigtable.instances.create", false));
        assert!(held("bigtable.instances.create", true));
        assert!(held("bigtable.appProfiles.delete", true));
        assert!(!held("bigtable.tables.readRows", true));
        assert!(!held("storage.buckets.get", true));
        assert_eq!(
            child("projects/p/instances/i/clusters/c", "clusters").unwrap(),
            ("projects/p/instances/i", "c")
        );
        assert!(child("projects/p/instances/i/clusters/", "clusters").is_err());
        assert_eq!(project("projects/p/instances/i"), "p");
        assert!(project_parent("projects/p").is_ok());
        assert!(project_parent("projects/p/x").is_err());
    }
}
