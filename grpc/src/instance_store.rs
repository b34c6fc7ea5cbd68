//! Where the instance admin keeps what it is told: instances' settings
//! (display name, labels, type, create time), their cluster's settings and
//! their app profiles, each the API's own message (protobuf) in a cell of
//! the engine table `@instances`, so they survive a restart and are the
//! same in every daemon of a cluster. The table's name has no instance
//! before its `@`, so no instance lists it; in the mount it is root's,
//! mode 0700. Format: docs/formats/instances.md.

use crate::admin_v2 as a;
use crate::status;
use engine::schema::{FamilySchema, GcRule, TableSchema};
use engine::{Bigtable, Error, RowMutation, RowRange, ScanSpec, WriteOptions};
use prost::Message;
use tonic::Status;

/// The engine table.
pub(crate) const TABLE: &str = "@instances";
/// Its one family (one version a cell).
const FAMILY: &str = "m";
/// The columns of an instance's row.
const Q_INSTANCE: &[u8] = b"instance";
const Q_CLUSTER: &[u8] = b"cluster";
const Q_PROFILE: &[u8] = b"profile";

/// The row of instance `id`.
fn instance_row(id: &str) -> Vec<u8> {
    format!("i/{id}").into_bytes()
}

/// The rows of instance `id`'s app profiles share this prefix.
fn profiles_prefix(instance: &str) -> Vec<u8> {
    format!("p/{instance}/").into_bytes()
}

fn profile_row(instance: &str, id: &str) -> Vec<u8> {
    [profiles_prefix(instance), id.as_bytes().to_vec()].concat()
}

/// The table, made on first use.
fn ensure(bt: &Bigtable) -> Result<(), Status> {
    if bt.schema(TABLE).is_ok() {
        return Ok(());
    }
    let mut f = FamilySchema::new(FAMILY);
    f.gc = GcRule::MaxVersions(1);
    f.mode = 0o700;
    let mut s = TableSchema::with_families([f]);
    s.mode = 0o700;
    match bt.create_table(TABLE, s) {
        Ok(()) | Err(Error::TableExists(_)) => Ok(()),
        Err(e) => Err(status::from_engine(e)),
    }
}

fn read<M: Message + Default>(bt: &Bigtable, row: &[u8], q: &[u8]) -> Result<Option<M>, Status> {
    let cell = match bt.read_cell(TABLE, row, FAMILY, q) {
        Ok(c) => c,
        // Nothing was ever stored.
        Err(Error::TableNotFound(_)) => return Ok(None),
        Err(e) => return Err(status::from_engine(e)),
    };
    cell.map(|c| {
        M::decode(&c.value[..]).map_err(|e| {
            Status::internal(format!("{TABLE}: a stored message does not decode: {e}"))
        })
    })
    .transpose()
}

fn write(bt: &Bigtable, m: RowMutation) -> Result<(), Status> {
    ensure(bt)?;
    bt.apply(TABLE, &m, WriteOptions { sync: true })
        .map(|_| ())
        .map_err(status::from_engine)
}

/// Instance `id`'s stored settings.
pub(crate) fn instance(bt: &Bigtable, id: &str) -> Result<Option<a::Instance>, Status> {
    read(bt, &instance_row(id), Q_INSTANCE)
}

/// Instance `id`'s stored cluster settings.
pub(crate) fn cluster(bt: &Bigtable, id: &str) -> Result<Option<a::Cluster>, Status> {
    read(bt, &instance_row(id), Q_CLUSTER)
}

/// Stores instance `id`'s settings.
pub(crate) fn put_instance(bt: &Bigtable, id: &str, i: &a::Instance) -> Result<(), Status> {
    let m = RowMutation::new(instance_row(id)).set(FAMILY, Q_INSTANCE, i.encode_to_vec());
    write(bt, m)
}

/// Stores instance `id`'s cluster settings.
pub(crate) fn put_cluster(bt: &Bigtable, id: &str, c: &a::Cluster) -> Result<(), Status> {
    let m = RowMutation::new(instance_row(id)).set(FAMILY, Q_CLUSTER, c.encode_to_vec());
    write(bt, m)
}

/// Forgets instance `id`: its settings, cluster and app profiles.
pub(crate) fn delete_instance(bt: &Bigtable, id: &str) -> Result<(), Status> {
    for (p, _) in profiles(bt, id)? {
        delete_profile(bt, id, &p)?;
    }
    write(bt, RowMutation::new(instance_row(id)).delete_row())
}

/// The ids of every instance stored.
pub(crate) fn instance_ids(bt: &Bigtable) -> Result<Vec<String>, Status> {
    Ok(rows(bt, b"i/")?
        .into_iter()
        .filter_map(|(row, _)| String::from_utf8(row.get(2..)?.to_vec()).ok())
        .collect())
}

/// Instance `instance`'s app profiles, by id.
pub(crate) fn profiles(
    bt: &Bigtable,
    instance: &str,
) -> Result<Vec<(String, a::AppProfile)>, Status> {
    let prefix = profiles_prefix(instance);
    let mut out = Vec::new();
    for (row, cells) in rows(bt, &prefix)? {
        let Some(id) = row.get(prefix.len()..) else {
            continue;
        };
        let Some(c) = cells.iter().find(|c| c.qualifier == Q_PROFILE) else {
            continue;
        };
        let p = a::AppProfile::decode(&c.value[..]).map_err(|e| {
            Status::internal(format!("{TABLE}: an app profile does not decode: {e}"))
        })?;
        out.push((String::from_utf8_lossy(id).into_owned(), p));
    }
    Ok(out)
}

/// App profile `id` of `instance`.
pub(crate) fn profile(
    bt: &Bigtable,
    instance: &str,
    id: &str,
) -> Result<Option<a::AppProfile>, Status> {
    read(bt, &profile_row(instance, id), Q_PROFILE)
}

pub(crate) fn put_profile(
    bt: &Bigtable,
    instance: &str,
    id: &str,
    p: &a::AppProfile,
) -> Result<(), Status> {
    let m = RowMutation::new(profile_row(instance, id)).set(FAMILY, Q_PROFILE, p.encode_to_vec());
    write(bt, m)
}

pub(crate) fn delete_profile(bt: &Bigtable, instance: &str, id: &str) -> Result<(), Status> {
    write(bt, RowMutation::new(profile_row(instance, id)).delete_row())
}

/// A row's key and cells.
type Row = (Vec<u8>, Vec<engine::Cell>);

/// Every row under `prefix`, with its cells.
fn rows(bt: &Bigtable, prefix: &[u8]) -> Result<Vec<Row>, Status> {
    let spec = ScanSpec {
        rows: RowRange::prefix(prefix),
        ..Default::default()
    };
    let mut scan = match bt.scan(TABLE, spec) {
        Ok(s) => s,
        Err(Error::TableNotFound(_)) => return Ok(Vec::new()),
        Err(e) => return Err(status::from_engine(e)),
    };
    let mut out = Vec::new();
    while let Some(r) = scan.next_row().map_err(status::from_engine)? {
        out.push(r);
    }
    Ok(out)
}
