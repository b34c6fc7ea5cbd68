//! Table Admin calls beyond creating, altering and deleting: UpdateTable
//! (`deletion_protection`), UndeleteTable (from the trash) and the
//! long-running operations they return.
//!
//! Every change served here is finished when its call answers, so its
//! operation comes back `done`, with its metadata and response packed as
//! `Any`: a client's `operation.result()` returns at once, without asking
//! `google.longrunning.Operations` for it.

use crate::admin_v2 as a;
use crate::shared::{blocking, Shared};
use crate::table_message::table_message;
use crate::wire::FullMaps;
use crate::{auth, status, Operation};
use engine::access::{Identity, R, W};
use engine::schema::TableSchema;
use googleapis_tonic_google_bigtable_admin_v2::google::longrunning::operation;
use prost::bytes::BufMut;
use prost::Message;
use std::sync::Arc;
use tonic::{Request, Response, Status};

const TYPES: &str = "type.googleapis.com/google.bigtable.admin.v2";

impl FullMaps for Operation {
    fn encode_full(self, buf: &mut impl BufMut) {
        self.encode_raw(buf);
    }
}

/// The UpdateTable fields this server changes.
const UPDATABLE: &[&str] = &[
    "deletion_protection",
    "change_stream_config",
    "change_stream_config.retention_period",
];

/// UpdateTable: sets `deletion_protection` (the only field served), which
/// only the table's owner (or root) may change, as in the mount's `.schema`.
pub(crate) async fn update_table(
    shared: &Arc<Shared>,
    req: Request<a::UpdateTableRequest>,
) -> Result<Response<Operation>, Status> {
    let who = shared.auth.identify(&req)?;
    let start = now();
    let req = req.into_inner();
    let table = req
        .table
        .ok_or_else(|| Status::invalid_argument("table is required"))?;
    let paths = req.update_mask.map(|m| m.paths).unwrap_or_default();
    if paths.is_empty() {
        return Err(Status::invalid_argument(
            "update_mask is required (this server updates deletion_protection and \
             change_stream_config)",
        ));
    }
    if let Some(p) = paths.iter().find(|p| !UPDATABLE.contains(&p.as_str())) {
        return Err(Status::unimplemented(format!(
            "updating {p:?} is not served; UpdateTable serves {}",
            UPDATABLE.join(", ")
        )));
    }
    let id = shared.table(&table.name)?;
    let protect = paths
        .iter()
        .any(|p| p == "deletion_protection")
        .then_some(table.deletion_protection);
    // Given in the mask but absent from the table: the log is turned off.
    let retention = match paths.iter().any(|p| p.starts_with("change_stream_config")) {
        true => Some(crate::change_config::retention_of(
            table.change_stream_config.as_ref(),
        )?),
        false => None,
    };
    let sh = shared.clone();
    let schema = blocking(move || {
        let old = sh.bt.schema(&id).map_err(status::from_engine)?;
        owner_or_root(&who, &id, &old, "change the settings of")?;
        let mut new = (*old).clone();
        if let Some(p) = protect {
            new.deletion_protection = p;
        }
        if let Some(r) = retention {
            new.change_retention = r;
        }
        new.validate().map_err(status::from_engine)?;
        if new != *old {
            let r = sh.bt.set_schema(&id, new.clone());
            sh.table_changed(&id);
            r.map_err(status::from_engine)?;
            log::info!(
                "grpc: table {id} deletion_protection={} change_retention={}us",
                new.deletion_protection,
                new.change_retention
            );
        }
        Ok(new)
    })
    .await?;
    let meta = a::UpdateTableMetadata {
        name: table.name.clone(),
        start_time: Some(start),
        end_time: Some(now()),
    };
    Ok(table_done(
        &table.name,
        ("UpdateTableMetadata", meta),
        &schema,
    ))
}

/// UndeleteTable: brings back the table of that name deleted last, if it
/// is still in the trash, under its name. It takes what deleting it took
/// (see `delete_table`): only who could delete a table may bring it back.
pub(crate) async fn undelete_table(
    shared: &Arc<Shared>,
    req: Request<a::UndeleteTableRequest>,
) -> Result<Response<Operation>, Status> {
    let who = shared.auth.identify(&req)?;
    let start = now();
    let req = req.into_inner();
    let id = shared.table(&req.name)?;
    shared.root(&who, W, "undelete a table")?;
    let sh = shared.clone();
    let schema = blocking(move || {
        let entry = sh
            .bt
            .trash()
            .map_err(status::from_engine)?
            .into_iter()
            .map(|(e, _)| e)
            .filter(|e| e.name == id && e.deleted_at != 0)
            .max_by_key(|e| e.deleted_at)
            .ok_or_else(|| Status::not_found(format!("no table {id} in the trash")))?;
        auth::table(&who, &id, &entry.schema, R | W)?;
        auth::every_family(&who, &entry.schema, W)?;
        let r = sh.bt.undelete_table(entry.id, None);
        sh.table_changed(&id);
        r.map_err(status::from_engine)?;
        log::info!("grpc: undeleted table {id}");
        Ok(entry.schema)
    })
    .await?;
    let meta = a::UndeleteTableMetadata {
        name: req.name.clone(),
        start_time: Some(start),
        end_time: Some(now()),
    };
    Ok(table_done(
        &req.name,
        ("UndeleteTableMetadata", meta),
        &schema,
    ))
}

/// Refuses unless `who` owns the table or is root (what `chmod` takes).
fn owner_or_root(who: &Identity, id: &str, t: &TableSchema, what: &str) -> Result<(), Status> {
    if who.uid == 0 || who.uid == t.owner {
        return Ok(());
    }
    Err(auth::denied(
        who,
        &format!(
            "only the owner of table {id} (uid {}) may {what} it",
            t.owner
        ),
    ))
}

/// A finished operation on table `name` whose response is the table.
fn table_done(
    name: &str,
    meta: (&str, impl FullMaps),
    schema: &TableSchema,
) -> Response<Operation> {
    let reply = table_message(name.to_string(), Some(schema));
    Response::new(done(name, meta, ("Table", reply)))
}

/// A finished operation on `resource`, with its metadata and response
/// (their maps carry every value, as the calls' replies do).
pub(crate) fn done(
    resource: &str,
    (meta_type, meta): (&str, impl FullMaps),
    (reply_type, reply): (&str, impl FullMaps),
) -> Operation {
    let mut value = Vec::new();
    reply.encode_full(&mut value);
    let mut meta_value = Vec::new();
    meta.encode_full(&mut meta_value);
    Operation {
        name: format!("{resource}/operations/{}", engine::now_micros()),
        metadata: Some(prost_types::Any {
            type_url: format!("{TYPES}.{meta_type}"),
            value: meta_value,
        }),
        done: true,
        result: Some(operation::Result::Response(prost_types::Any {
            type_url: format!("{TYPES}.{reply_type}"),
            value,
        })),
    }
}

/// Now, as a protobuf timestamp.
fn now() -> prost_types::Timestamp {
    prost_types::Timestamp::from(std::time::SystemTime::now())
}
