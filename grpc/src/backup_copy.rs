//! CopyBackup: a backup copied into a backup store, whose name is the
//! destination cluster's id (docs/backups.md). The copy is incremental
//! (files the store holds from an earlier backup are not copied again) and
//! done when the call replies, so its operation comes back done with
//! progress 100; a long copy's progress is in `.bigtable/backups`.

use crate::admin_v2 as a;
use crate::backups::{
    backup_message, backup_name, check_backup_id, checked, cluster, expiry, instance_parent,
    store_of, timestamp,
};
use crate::shared::{blocking, Shared};
use crate::table_ops::done;
use crate::{names, status, Operation};
use engine::access::W;
use engine::backup::Source;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub async fn copy_backup(
    shared: &Arc<Shared>,
    req: Request<a::CopyBackupRequest>,
) -> Result<Response<Operation>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let (instance, to) = cluster(&req.parent)?;
    let (instance, to) = (instance.to_string(), to.to_string());
    check_backup_id(&req.backup_id)?;
    if !shared.bt.backup_stores().contains(&to) {
        return Err(Status::failed_precondition(format!(
            "cluster {to:?} is not a backup store of this server: CopyBackup copies into one \
             (the mount's backup_store=NAME=… option; NAME is the cluster id)"
        )));
    }
    if backup_name(&req.source_backup)?.1 != instance {
        return Err(Status::invalid_argument(
            "the source backup must be in the destination's instance",
        ));
    }
    let expire = expiry(req.expire_time.as_ref())?;
    // The copy is a backup of the source's table: write access to it, as
    // CreateBackup needs.
    let (m, t, src_cluster) = checked(shared, who, &req.source_backup, W).await?;
    let from = store_of(shared, &m);
    let s = shared.clone();
    let id = req.backup_id.clone();
    let (table, name, dest) = (m.table.clone(), m.name.clone(), to.clone());
    let started = engine::now_micros();
    let copied = blocking(move || {
        let from = match &from {
            Some(st) => Source::Store(st),
            None => Source::Snapshot,
        };
        s.bt.copy_backup_named(from, &table, &name, &dest, &id, Some(expire))
            .map_err(status::from_engine)
    })
    .await?;
    let parent = instance_parent(&req.parent);
    let backup = backup_message(&req.parent, parent, &t, &copied.manifest);
    log::info!(
        "grpc: copied backup {} to {} ({} files)",
        req.source_backup,
        backup.name,
        copied.files.len()
    );
    let meta = a::CopyBackupMetadata {
        name: backup.name.clone(),
        source_backup_info: Some(a::BackupInfo {
            backup: req.source_backup.clone(),
            start_time: Some(timestamp(m.taken_micros)),
            end_time: Some(timestamp(m.taken_micros)),
            source_table: names::full(instance_parent(&src_cluster), &t),
            source_backup: String::new(),
        }),
        progress: Some(a::OperationProgress {
            progress_percent: 100,
            start_time: Some(timestamp(started)),
            end_time: Some(timestamp(engine::now_micros())),
        }),
    };
    Ok(Response::new(done(
        &backup.name.clone(),
        ("CopyBackupMetadata", meta),
        ("Backup", backup),
    )))
}
