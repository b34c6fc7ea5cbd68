//! Cloud Bigtable's backups over snapshots: CreateBackup, GetBackup,
//! ListBackups, UpdateBackup, DeleteBackup and RestoreTable.
//!
//! A backup `projects/P/instances/I/clusters/C/backups/B` is the snapshot
//! named `B` of a table of instance `I`; `B` is unique across the instance
//! (CreateBackup refuses a name any of its tables' snapshots has), so the
//! mount's `.snapshots/B` and the backup are one thing. This daemon is one
//! cluster: any cluster id is taken, and replies name the one the request
//! named when it was made (the manifest keeps it; a snapshot made in the
//! mount is in every cluster, named as the request names it, or by the
//! instance's id for the `-` wildcard). The expiry is the
//! manifest's; the master's collection deletes expired ones. The
//! long-running calls are done when they reply (a snapshot or a clone takes
//! milliseconds to seconds), so clients never poll.
//!
//! A cluster id that names one of the mount's backup stores
//! (`backup_store=NAME=…`) is that store: a backup made there is copied
//! out of the table's store (docs/backups.md), CopyBackup copies into it
//! (`backup_copy.rs`), and a restore from it copies the files back.
//!
//! Permissions are the mount's on `.snapshots/`: creating, updating and
//! deleting need write access to the table (its schema at the snapshot if
//! it was deleted since), reading needs read access; a restore makes a
//! table (the daemon's user only, as CreateTable) and reads every family.

use crate::admin_v2 as a;
use crate::shared::{blocking, Shared};
use crate::table_ops::done;
use crate::wire::FullMaps;
use crate::{auth, names, status, Operation};
use engine::access::{Identity, R, W};
use engine::schema::TableSchema;
use engine::snapshot::Manifest;
use prost::Message;
use prost_types::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Cloud Bigtable's bounds on a backup's expiry, from now.
const MIN_EXPIRY: Duration = Duration::from_secs(6 * 3600);
const MAX_EXPIRY: Duration = Duration::from_secs(90 * 24 * 3600);

impl FullMaps for a::Backup {
    fn encode_full(self, buf: &mut impl prost::bytes::BufMut) {
        self.encode_raw(buf);
    }
}
impl FullMaps for a::ListBackupsResponse {
    fn encode_full(self, buf: &mut impl prost::bytes::BufMut) {
        self.encode_raw(buf);
    }
}

/// `projects/P/instances/I/clusters/C`: (instance, cluster).
pub(crate) fn cluster(parent: &str) -> Result<(&str, &str), Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "invalid parent {parent:?}: expected projects/<project>/instances/<instance>/clusters/<cluster>"
        ))
    };
    let (p, c) = parent.rsplit_once("/clusters/").ok_or_else(bad)?;
    let i = names::instance(p).map_err(|_| bad())?;
    if c.is_empty() || c.contains('/') {
        return Err(bad());
    }
    Ok((i, c))
}

/// `…/clusters/C/backups/B`: (cluster's name, instance, backup id).
pub(crate) fn backup_name(name: &str) -> Result<(&str, &str, &str), Status> {
    let (parent, b) = name.rsplit_once("/backups/").ok_or_else(|| {
        Status::invalid_argument(format!(
            "invalid backup name {name:?}: expected projects/<p>/instances/<i>/clusters/<c>/backups/<b>"
        ))
    })?;
    let (i, _) = cluster(parent)?;
    check_backup_id(b)?;
    Ok((parent, i, b))
}

/// The API's backup ids, which are also valid snapshot names.
pub(crate) fn check_backup_id(id: &str) -> Result<(), Status> {
    names::check_table_id(id).map_err(|_| {
        Status::invalid_argument(format!(
            "invalid backup id {id:?}: expected [_a-zA-Z0-9][-_.a-zA-Z0-9]* (at most 50 bytes)"
        ))
    })
}

fn micros(t: &Timestamp) -> Result<u64, Status> {
    let us = i128::from(t.seconds) * 1_000_000 + i128::from(t.nanos) / 1000;
    u64::try_from(us).map_err(|_| Status::invalid_argument("expire_time before 1970"))
}

pub(crate) fn timestamp(us: u64) -> Timestamp {
    Timestamp {
        seconds: (us / 1_000_000) as i64,
        nanos: ((us % 1_000_000) * 1000) as i32,
    }
}

/// The expiry asked, in µs, if within Cloud Bigtable's bounds.
pub(crate) fn expiry(t: Option<&Timestamp>) -> Result<u64, Status> {
    let t = t.ok_or_else(|| Status::invalid_argument("a backup needs an expire_time"))?;
    let at = micros(t)?;
    let now = engine::now_micros();
    let (lo, hi) = (
        now + MIN_EXPIRY.as_micros() as u64,
        now + MAX_EXPIRY.as_micros() as u64,
    );
    if at < lo || at > hi {
        return Err(Status::invalid_argument(
            "expire_time must be at least 6 hours and at most 90 days from now",
        ));
    }
    Ok(at)
}

/// The API's view of a snapshot.
pub(crate) fn backup_message(
    cluster: &str,
    table_parent: &str,
    id: &str,
    m: &Manifest,
) -> a::Backup {
    // The cluster it was made in, if made through the API.
    let cluster = match &m.cluster {
        Some(c) => format!("{table_parent}/clusters/{c}"),
        None => cluster.to_string(),
    };
    a::Backup {
        name: format!("{cluster}/backups/{}", m.name),
        source_table: names::full(table_parent, id),
        expire_time: m.expire_micros.map(timestamp),
        start_time: Some(timestamp(m.taken_micros)),
        end_time: Some(timestamp(m.taken_micros)),
        size_bytes: m.bytes() as i64,
        state: a::backup::State::Ready as i32,
        encryption_info: Some(a::EncryptionInfo {
            encryption_type: a::encryption_info::EncryptionType::GoogleDefaultEncryption as i32,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The schema access is checked on: the table's now, or the snapshot's if
/// the table was deleted since.
fn schema_of(shared: &Shared, m: &Manifest) -> Arc<TableSchema> {
    shared
        .bt
        .schema(&m.table)
        .unwrap_or_else(|_| Arc::new(m.schema.clone()))
}

/// Whether a snapshot is a backup of cluster `c` (or `-`, every one): one
/// made through the API names its cluster, one made in the mount is in
/// every cluster.
fn in_cluster(m: &Manifest, c: &str, stores: &[String]) -> bool {
    c == "-"
        || match m.cluster.as_deref() {
            Some(x) => x == c,
            None => !stores.iter().any(|s| s == c),
        }
}

/// The backup store a backup is in (its cluster names one), or None: a
/// snapshot in the table's store.
pub(crate) fn store_of(shared: &Shared, m: &Manifest) -> Option<String> {
    let c = m.cluster.as_deref()?;
    shared.bt.backup_stores().into_iter().find(|s| s == c)
}

/// Every backup: the snapshots of the tables' store, then those copied to
/// backup stores (a record's cluster is its store's name). A snapshot whose
/// cluster names a backup store is one being copied there: left out.
fn every_backup(shared: &Shared) -> Result<Vec<Manifest>, Status> {
    let stores = shared.bt.backup_stores();
    let mut all: Vec<Manifest> = shared
        .bt
        .all_snapshot_manifests()
        .map_err(status::from_engine)?
        .into_iter()
        .filter(|m| !m.cluster.as_ref().is_some_and(|c| stores.contains(c)))
        .collect();
    for st in &stores {
        let records = shared.bt.list_backups(st).map_err(status::from_engine)?;
        all.extend(records.into_iter().map(|r| r.manifest));
    }
    Ok(all)
}

/// Snapshot `id` of a table of `instance` in cluster `c`, and the table's
/// id there.
fn find(shared: &Shared, instance: &str, c: &str, id: &str) -> Result<(Manifest, String), Status> {
    let stores = shared.bt.backup_stores();
    let all = every_backup(shared)?;
    all.into_iter()
        .filter(|m| m.name == id && in_cluster(m, c, &stores))
        .find_map(|m| {
            let t = names::table_id(&m.table, instance, &shared.instance)?.to_string();
            Some((m, t))
        })
        .ok_or_else(|| Status::not_found(format!("backup {id} does not exist")))
}

/// ListBackups' filter, in the subset clients send: `field:value` terms
/// (the field contains the value), in parentheses or not, joined by AND,
/// on `name`, `source_table` and `state`. Anything else is refused rather
/// than ignored.
fn filter(f: &str) -> Result<Vec<(String, String)>, Status> {
    let bad = || {
        Status::invalid_argument(format!(
            "unsupported filter {f:?}: this server takes `field:value` terms on name, \
             source_table and state, joined by AND"
        ))
    };
    let mut terms = Vec::new();
    for term in f.split(" AND ").map(str::trim).filter(|t| !t.is_empty()) {
        let term = term.trim_start_matches('(').trim_end_matches(')').trim();
        let (k, v) = term.split_once(':').ok_or_else(bad)?;
        let (k, v) = (k.trim(), v.trim().trim_matches('"'));
        if !matches!(k, "name" | "source_table" | "state") {
            return Err(bad());
        }
        terms.push((k.to_string(), v.to_string()));
    }
    Ok(terms)
}

fn matches(b: &a::Backup, terms: &[(String, String)]) -> bool {
    terms.iter().all(|(k, v)| match k.as_str() {
        "name" => b.name.contains(v.as_str()),
        "source_table" => b.source_table.contains(v.as_str()),
        _ => v == "READY",
    })
}

/// The reply's cluster: the request's, or for `-` the instance's id.
fn cluster_name(cluster_parent: &str, instance: &str) -> String {
    match cluster_parent.strip_suffix("/clusters/-") {
        Some(p) => format!("{p}/clusters/{instance}"),
        None => cluster_parent.to_string(),
    }
}

/// `projects/P/instances/I` of a cluster's name.
pub(crate) fn instance_parent(cluster_parent: &str) -> &str {
    cluster_parent
        .rsplit_once("/clusters/")
        .map_or(cluster_parent, |(p, _)| p)
}

pub async fn create_backup(
    shared: &Arc<Shared>,
    req: Request<a::CreateBackupRequest>,
) -> Result<Response<Operation>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let (instance, c) = cluster(&req.parent)?;
    let (instance, c) = (instance.to_string(), c.to_string());
    if c == "-" {
        return Err(Status::invalid_argument(
            "a backup is made in a named cluster, not `-`",
        ));
    }
    check_backup_id(&req.backup_id)?;
    let b = req
        .backup
        .ok_or_else(|| Status::invalid_argument("no backup given"))?;
    let table = shared.table(&b.source_table)?;
    let Some(tid) = names::table_id(&table, &instance, &shared.instance).map(str::to_string) else {
        return Err(Status::invalid_argument(
            "source_table must be in the backup's instance",
        ));
    };
    let expire = expiry(b.expire_time.as_ref())?;
    let s = shared.clone();
    let id = req.backup_id.clone();
    let m = blocking(move || {
        // `mkdir .snapshots/B`: write access to the table.
        let schema = s.bt.schema(&table).map_err(status::from_engine)?;
        auth::table(&who, &table, &schema, W)?;
        if find(&s, &instance, "-", &id).is_ok() {
            return Err(Status::already_exists(format!(
                "backup {id} already exists"
            )));
        }
        s.bt.take_snapshot_expiring(&table, &id, Some(expire), Some(&c))
            .map_err(status::from_engine)?;
        if s.bt.backup_stores().contains(&c) {
            // A backup store's cluster: the snapshot is copied out, and
            // kept only there.
            let copied =
                s.bt.copy_backup(engine::backup::Source::Snapshot, &table, &id, &c);
            let _ = s.bt.delete_snapshot(&table, &id);
            return copied.map(|r| r.manifest).map_err(status::from_engine);
        }
        s.bt.snapshot_manifest(&table, &id)
            .map_err(status::from_engine)
    })
    .await?;
    let parent = instance_parent(&req.parent);
    let backup = backup_message(&req.parent, parent, &tid, &m);
    log::info!("grpc: created backup {}", backup.name);
    let meta = a::CreateBackupMetadata {
        name: backup.name.clone(),
        source_table: backup.source_table.clone(),
        start_time: backup.start_time,
        end_time: backup.end_time,
    };
    Ok(Response::new(done(
        &backup.name.clone(),
        ("CreateBackupMetadata", meta),
        ("Backup", backup),
    )))
}

/// Finds a backup by name and checks `want` on its table.
pub(crate) async fn checked(
    shared: &Arc<Shared>,
    who: Identity,
    name: &str,
    want: u32,
) -> Result<(Manifest, String, String), Status> {
    let (cl, instance, id) = backup_name(name)?;
    let (cl, instance, id) = (cl.to_string(), instance.to_string(), id.to_string());
    let c = cl.rsplit_once("/clusters/").map_or("", |p| p.1).to_string();
    let s = shared.clone();
    let (m, t) = blocking(move || {
        let (m, t) = find(&s, &instance, &c, &id)?;
        auth::table(&who, &m.table, &schema_of(&s, &m), want)?;
        Ok((m, t))
    })
    .await?;
    Ok((m, t, cl))
}

pub async fn get_backup(
    shared: &Arc<Shared>,
    req: Request<a::GetBackupRequest>,
) -> Result<Response<a::Backup>, Status> {
    let who = shared.auth.identify(&req)?;
    let name = req.into_inner().name;
    let (m, t, cl) = checked(shared, who, &name, R).await?;
    Ok(Response::new(backup_message(
        &cl,
        instance_parent(&cl),
        &t,
        &m,
    )))
}

pub async fn list_backups(
    shared: &Arc<Shared>,
    req: Request<a::ListBackupsRequest>,
) -> Result<Response<a::ListBackupsResponse>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let (instance, c) = cluster(&req.parent)?;
    let (instance, c) = (instance.to_string(), c.to_string());
    let cl = cluster_name(&req.parent, &instance);
    let terms = filter(&req.filter)?;
    let s = shared.clone();
    let mut backups = blocking(move || {
        let stores = s.bt.backup_stores();
        let all = every_backup(&s)?;
        Ok(all
            .into_iter()
            .filter_map(|m| {
                let t = names::table_id(&m.table, &instance, &s.instance)?.to_string();
                if !in_cluster(&m, &c, &stores) {
                    return None;
                }
                // One the caller may not read is left out, as in ListTables.
                who.on_table(&schema_of(&s, &m), R)
                    .then(|| backup_message(&cl, instance_parent(&cl), &t, &m))
            })
            .collect::<Vec<_>>())
    })
    .await?;
    backups.retain(|b| matches(b, &terms));
    backups.sort_by(|x, y| x.name.cmp(&y.name));
    Ok(Response::new(a::ListBackupsResponse {
        backups,
        next_page_token: String::new(),
    }))
}

pub async fn update_backup(
    shared: &Arc<Shared>,
    req: Request<a::UpdateBackupRequest>,
) -> Result<Response<a::Backup>, Status> {
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let b = req
        .backup
        .ok_or_else(|| Status::invalid_argument("no backup given"))?;
    let paths = req.update_mask.map(|m| m.paths).unwrap_or_default();
    if paths.is_empty() || paths.iter().any(|p| p != "expire_time") {
        return Err(Status::invalid_argument(
            "update_mask must name expire_time, the only field that can change",
        ));
    }
    let expire = expiry(b.expire_time.as_ref())?;
    let (m, t, cl) = checked(shared, who, &b.name, W).await?;
    let s = shared.clone();
    let m = blocking(move || {
        if let Some(store) = store_of(&s, &m) {
            return s
                .bt
                .set_backup_expiry(&store, &m.table, &m.name, Some(expire))
                .map(|r| r.manifest)
                .map_err(status::from_engine);
        }
        s.bt.set_snapshot_expiry(&m.table, &m.name, Some(expire))
            .map_err(status::from_engine)?;
        s.bt.snapshot_manifest(&m.table, &m.name)
            .map_err(status::from_engine)
    })
    .await?;
    Ok(Response::new(backup_message(
        &cl,
        instance_parent(&cl),
        &t,
        &m,
    )))
}

pub async fn delete_backup(
    shared: &Arc<Shared>,
    req: Request<a::DeleteBackupRequest>,
) -> Result<Response<()>, Status> {
    let who = shared.auth.identify(&req)?;
    let name = req.into_inner().name;
    let (m, _, _) = checked(shared, who, &name, W).await?;
    let s = shared.clone();
    blocking(move || match store_of(&s, &m) {
        Some(store) => {
            s.bt.delete_backup(&store, &m.table, &m.name)
                .map_err(status::from_engine)
        }
        None => {
            s.bt.delete_snapshot(&m.table, &m.name)
                .map_err(status::from_engine)
        }
    })
    .await?;
    log::info!("grpc: deleted backup {name}");
    Ok(Response::new(()))
}

pub async fn restore_table(
    shared: &Arc<Shared>,
    req: Request<a::RestoreTableRequest>,
) -> Result<Response<Operation>, Status> {
    use a::restore_table_request::Source;
    let who = shared.auth.identify(&req)?;
    let req = req.into_inner();
    let parent = names::parent(&req.parent)?.to_string();
    let instance = names::instance(&parent)?.to_string();
    names::check_table_id(&req.table_id)?;
    let Some(Source::Backup(backup)) = req.source else {
        return Err(Status::invalid_argument("give the backup to restore from"));
    };
    // The backup may be another instance's (Backup.restore into another
    // instance): its table is named under its own instance.
    let backup_parent = instance_parent(backup_name(&backup)?.0).to_string();
    shared.root(&who, W, "create a table")?;
    // Reading the snapshot whole: the table and every family readable.
    let (m, t, _) = checked(shared, who.clone(), &backup, R).await?;
    auth::every_family(&who, &m.schema, R)?;
    let to = names::engine_table(&instance, &req.table_id, &shared.instance);
    let s = shared.clone();
    let (from, snap, into) = (m.table.clone(), m.name.clone(), to.clone());
    let store = store_of(shared, &m);
    blocking(move || {
        let r = match &store {
            // Copied back into the table's store first.
            Some(st) => s.bt.restore_backup(st, &from, &snap, &into),
            None => s.bt.clone_snapshot(&from, &snap, &into),
        }
        .map_err(status::from_engine);
        s.table_changed(&into);
        r
    })
    .await?;
    let table = names::full(&parent, &req.table_id);
    log::info!("grpc: restored {backup} into {table}");
    let now = timestamp(engine::now_micros());
    let meta = a::RestoreTableMetadata {
        name: table.clone(),
        source_type: a::RestoreSourceType::Backup as i32,
        progress: Some(a::OperationProgress {
            progress_percent: 100,
            start_time: Some(now),
            end_time: Some(now),
        }),
        source_info: Some(a::restore_table_metadata::SourceInfo::BackupInfo(
            a::BackupInfo {
                backup: backup.clone(),
                start_time: Some(timestamp(m.taken_micros)),
                end_time: Some(timestamp(m.taken_micros)),
                source_table: names::full(&backup_parent, &t),
                source_backup: String::new(),
            },
        )),
        ..Default::default()
    };
    let reply = a::Table {
        name: table.clone(),
        granularity: a::table::TimestampGranularity::Millis as i32,
        ..Default::default()
    };
    Ok(Response::new(done(
        &table,
        ("RestoreTableMetadata", meta),
        ("Table", reply),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_expiry() {
        let (c, i, b) = backup_name("projects/p/instances/i/clusters/c/backups/b1").unwrap();
        assert_eq!((c, i, b), ("projects/p/instances/i/clusters/c", "i", "b1"));
        assert!(backup_name("projects/p/instances/i/backups/b1").is_err());
        assert!(backup_name("projects/p/instances/i/clusters/c/backups/.x").is_err());
        assert!(cluster("projects/p/instances/i/clusters/").is_err());
        assert_eq!(
            cluster_name("projects/p/instances/i/clusters/-", "i"),
            "projects/p/instances/i/clusters/i"
        );
        let at = |d: Duration| timestamp(engine::now_micros() + d.as_micros() as u64);
        assert!(expiry(Some(&at(Duration::from_secs(3600)))).is_err());
        assert!(expiry(Some(&at(Duration::from_secs(7 * 3600)))).is_ok());
        assert!(expiry(Some(&at(Duration::from_secs(91 * 24 * 3600)))).is_err());
        assert!(expiry(None).is_err());
        let t = filter("(source_table:projects/p/instances/i/tables/t) AND (state:READY)").unwrap();
        assert_eq!(
            t[0],
            (
                "source_table".into(),
                "projects/p/instances/i/tables/t".into()
            )
        );
        assert_eq!(t.len(), 2);
        assert!(filter("size_bytes > 10").is_err());
        assert!(filter("").unwrap().is_empty());
    }
}
