//! App profiles of the Instance Admin API: kept per instance in
//! `@instances` (instance_store.rs). Routing has one cluster to choose, the
//! instance's: a profile may route to it (single-cluster) or to any
//! (multi-cluster, no list or just it). Every instance has the profile
//! `default` (any cluster) until one of that id is stored.

use crate::admin_v2::{self as a, app_profile::RoutingPolicy};
use crate::instance_store as store;
use crate::instances::{admin, child, cluster_id, get as instance, project};
use crate::shared::{blocking, Shared};
use crate::table_ops::done;
use crate::{names, Operation};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The profile every instance has.
const DEFAULT_PROFILE: &str = "default";

/// Profiles an instance may hold.
const MAX_PROFILES: usize = 1000;

/// The profile fields UpdateAppProfile sets.
const FIELDS: &[&str] = &[
    "description",
    "multi_cluster_routing_use_any",
    "single_cluster_routing",
    "priority",
    "standard_isolation",
    "data_boost_isolation_read_only",
];

/// The instance's `default` profile when none is stored.
fn default_profile(parent: &str) -> a::AppProfile {
    a::AppProfile {
        name: format!("{parent}/appProfiles/{DEFAULT_PROFILE}"),
        etag: "0".into(),
        description: "the default app profile".into(),
        routing_policy: Some(RoutingPolicy::MultiClusterRoutingUseAny(
            a::app_profile::MultiClusterRoutingUseAny::default(),
        )),
        isolation: None,
    }
}

/// Refuses routing to a cluster the instance does not have.
fn check(p: &a::AppProfile, cluster: &str) -> Result<(), Status> {
    let ok = match &p.routing_policy {
        Some(RoutingPolicy::SingleClusterRouting(s)) => s.cluster_id == cluster,
        Some(RoutingPolicy::MultiClusterRoutingUseAny(m)) => {
            m.cluster_ids.iter().all(|c| c == cluster)
        }
        None => false,
    };
    if !ok {
        return Err(Status::invalid_argument(format!(
            "an app profile routes to the instance's one cluster, {cluster} \
             (single_cluster_routing to it, or multi_cluster_routing_use_any)"
        )));
    }
    if p.description.len() > 1024 {
        return Err(Status::invalid_argument(
            "description is at most 1024 bytes",
        ));
    }
    Ok(())
}

/// The stored profile, or `default`'s, or NOT_FOUND.
fn find(shared: &Shared, parent: &str, id: &str) -> Result<a::AppProfile, Status> {
    let inst = names::instance(parent)?;
    instance(shared, project(parent), inst)?;
    match store::profile(&shared.bt, inst, id)? {
        Some(mut p) => {
            p.name = format!("{parent}/appProfiles/{id}");
            Ok(p)
        }
        None if id == DEFAULT_PROFILE => Ok(default_profile(parent)),
        None => Err(Status::not_found(format!("app profile {id} not found"))),
    }
}

pub(crate) async fn create(
    shared: &Arc<Shared>,
    req: Request<a::CreateAppProfileRequest>,
) -> Result<Response<a::AppProfile>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let inst = names::instance(&req.parent)?.to_string();
    names::check_instance_id(&req.app_profile_id).map_err(|_| {
        Status::invalid_argument(format!("invalid app profile id {:?}", req.app_profile_id))
    })?;
    admin(shared, &who, "create an app profile")?;
    let mut p = req
        .app_profile
        .ok_or_else(|| Status::invalid_argument("app_profile is required"))?;
    let sh = shared.clone();
    let (parent, id) = (req.parent, req.app_profile_id);
    let p = blocking(move || {
        instance(&sh, project(&parent), &inst)?;
        if store::profile(&sh.bt, &inst, &id)?.is_some() {
            return Err(Status::already_exists(format!(
                "app profile {id} already exists"
            )));
        }
        if store::profiles(&sh.bt, &inst)?.len() >= MAX_PROFILES {
            return Err(Status::resource_exhausted(format!(
                "instance {inst} has {MAX_PROFILES} app profiles, the most it may"
            )));
        }
        check(&p, &cluster_id(&sh, &inst)?)?;
        p.name = format!("{parent}/appProfiles/{id}");
        p.etag = engine::now_micros().to_string();
        store::put_profile(&sh.bt, &inst, &id, &p)?;
        log::info!("grpc: created app profile {id} of instance {inst}");
        Ok(p)
    })
    .await?;
    Ok(Response::new(p))
}

pub(crate) async fn get(
    shared: &Arc<Shared>,
    req: Request<a::GetAppProfileRequest>,
) -> Result<Response<a::AppProfile>, Status> {
    shared.auth.identify(&req)?;
    let name = req.into_inner().name;
    let (parent, id) = child(&name, "appProfiles")?;
    let (parent, id) = (parent.to_string(), id.to_string());
    let sh = shared.clone();
    let p = blocking(move || find(&sh, &parent, &id)).await?;
    Ok(Response::new(p))
}

pub(crate) async fn list(
    shared: &Arc<Shared>,
    req: Request<a::ListAppProfilesRequest>,
) -> Result<Response<a::ListAppProfilesResponse>, Status> {
    shared.auth.identify(&req)?;
    let parent = req.into_inner().parent;
    let inst = names::instance(&parent)?.to_string();
    let sh = shared.clone();
    let app_profiles = blocking(move || {
        instance(&sh, project(&parent), &inst)?;
        let mut out: Vec<a::AppProfile> = Vec::new();
        let stored = store::profiles(&sh.bt, &inst)?;
        if !stored.iter().any(|(id, _)| id == DEFAULT_PROFILE) {
            out.push(default_profile(&parent));
        }
        for (id, mut p) in stored {
            p.name = format!("{parent}/appProfiles/{id}");
            out.push(p);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    })
    .await?;
    Ok(Response::new(a::ListAppProfilesResponse {
        app_profiles,
        ..Default::default()
    }))
}

pub(crate) async fn update(
    shared: &Arc<Shared>,
    req: Request<a::UpdateAppProfileRequest>,
) -> Result<Response<Operation>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    admin(shared, &who, "change an app profile")?;
    let from = req
        .app_profile
        .ok_or_else(|| Status::invalid_argument("app_profile is required"))?;
    let paths = req.update_mask.map(|m| m.paths).unwrap_or_default();
    if paths.is_empty() || paths.iter().any(|p| !FIELDS.contains(&p.as_str())) {
        return Err(Status::invalid_argument(format!(
            "update_mask must name some of {}",
            FIELDS.join(", ")
        )));
    }
    let (parent, id) = child(&from.name, "appProfiles")?;
    let (parent, id) = (parent.to_string(), id.to_string());
    let inst = names::instance(&parent)?.to_string();
    let sh = shared.clone();
    let p = blocking(move || {
        let mut p = find(&sh, &parent, &id)?;
        for path in &paths {
            match path.as_str() {
                "description" => p.description = from.description.clone(),
                "multi_cluster_routing_use_any" | "single_cluster_routing" => {
                    p.routing_policy = from.routing_policy.clone()
                }
                _ => p.isolation = from.isolation,
            }
        }
        check(&p, &cluster_id(&sh, &inst)?)?;
        p.etag = engine::now_micros().to_string();
        store::put_profile(&sh.bt, &inst, &id, &p)?;
        log::info!("grpc: updated app profile {id} of instance {inst}");
        Ok(p)
    })
    .await?;
    let name = p.name.clone();
    Ok(Response::new(done(
        &name,
        ("UpdateAppProfileMetadata", a::UpdateAppProfileMetadata {}),
        ("AppProfile", p),
    )))
}

pub(crate) async fn delete(
    shared: &Arc<Shared>,
    req: Request<a::DeleteAppProfileRequest>,
) -> Result<Response<()>, Status> {
    let who = shared.auth.identify(&req)?;
    let name = req.into_inner().name;
    let (parent, id) = child(&name, "appProfiles")?;
    let (parent, id) = (parent.to_string(), id.to_string());
    let inst = names::instance(&parent)?.to_string();
    admin(shared, &who, "delete an app profile")?;
    let sh = shared.clone();
    blocking(move || {
        instance(&sh, project(&parent), &inst)?;
        if store::profile(&sh.bt, &inst, &id)?.is_none() {
            return Err(Status::not_found(format!("app profile {id} not found")));
        }
        store::delete_profile(&sh.bt, &inst, &id)?;
        log::info!("grpc: deleted app profile {id} of instance {inst}");
        Ok(())
    })
    .await?;
    Ok(Response::new(()))
}
