//! The Table Admin subset: CreateTable, ListTables, GetTable, DeleteTable,
//! ModifyColumnFamilies, DropRowRange. Each takes what the same change takes
//! in the mount (see `auth.rs`): tables made here belong to their caller,
//! as if it had made them with `mkdir` in the mount's root.

use crate::admin_v2::{self as a, modify_column_families_request::modification::Mod};
use crate::gen::admin::bigtable_table_admin_server::BigtableTableAdmin;
use crate::shared::{blocking, Shared};
use crate::table_message::table_message;
use crate::wire::{OrderedCreate, OrderedTable, TableList};
use crate::{auth, backups, drop, gc, names, status, value_type};
use engine::access::{Identity, R, W};
use engine::schema::{FamilySchema, TableSchema};
use engine::RowRange;
use std::sync::Arc;
use tonic::{Request, Response, Status};

pub struct AdminService {
    pub shared: Arc<Shared>,
}

/// A new family, owned by its maker.
fn family(who: &Identity, name: &str, cf: &a::ColumnFamily) -> Result<FamilySchema, Status> {
    let mut f = FamilySchema::new(name);
    f.gc = gc::from_api(cf.gc_rule.as_ref())?;
    f.aggregate = value_type::from_api(cf.value_type.as_ref())?;
    f.owner = who.uid;
    f.group = who.gid;
    f.validate().map_err(status::from_engine)?;
    Ok(f)
}

fn wants_schema(view: i32, default_schema: bool) -> bool {
    use a::table::View;
    match View::try_from(view).unwrap_or(View::Unspecified) {
        View::NameOnly => false,
        View::Unspecified => default_schema,
        _ => true,
    }
}

#[tonic::async_trait]
impl BigtableTableAdmin for AdminService {
    async fn create_table(
        &self,
        req: Request<OrderedCreate>,
    ) -> Result<Response<OrderedTable>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let OrderedCreate { req, order } = req.into_inner();
        let parent = names::parent(&req.parent)?.to_string();
        names::check_table_id(&req.table_id)?;
        self.shared.root(&who, W, "create a table")?;
        let mut schema = TableSchema {
            owner: who.uid,
            group: who.gid,
            ..Default::default()
        };
        if let Some(t) = &req.table {
            schema.change_retention =
                crate::change_config::retention_of(t.change_stream_config.as_ref())?;
            // In the order the request gave them (a map repeated on the
            // wire keeps its last value).
            for name in &order {
                if let Some(cf) = t.column_families.get(name) {
                    if !schema.families.contains_key(name) {
                        schema.add_family(family(&who, name, cf)?);
                    }
                }
            }
            for (name, cf) in &t.column_families {
                if !schema.families.contains_key(name) {
                    schema.add_family(family(&who, name, cf)?);
                }
            }
        }
        schema.validate().map_err(status::from_engine)?;
        if req.initial_splits.iter().any(|s| s.key.is_empty()) {
            return Err(Status::invalid_argument("split keys must be non-empty"));
        }
        let id = names::engine_table(
            names::instance(&parent)?,
            &req.table_id,
            &self.shared.instance,
        );
        let shared = self.shared.clone();
        let splits: Vec<Vec<u8>> = req.initial_splits.into_iter().map(|s| s.key).collect();
        let schema2 = schema.clone();
        blocking(move || {
            shared
                .bt
                .create_table(&id, schema2)
                .map_err(status::from_engine)?;
            shared.table_changed(&id);
            // The new table starts as one tablet per range between the keys.
            shared
                .bt
                .split_at_rows(&id, &splits)
                .map_err(status::from_engine)
        })
        .await?;
        log::info!("grpc: created table {}", req.table_id);
        Ok(Response::new(table_message(
            names::full(&parent, &req.table_id),
            Some(&schema),
        )))
    }

    async fn list_tables(
        &self,
        req: Request<a::ListTablesRequest>,
    ) -> Result<Response<TableList>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let parent = names::parent(&req.parent)?.to_string();
        let instance = names::instance(&parent)?.to_string();
        let with_schema = wants_schema(req.view, false);
        let shared = self.shared.clone();
        let tables = blocking(move || {
            let mut out = Vec::new();
            for engine in shared.bt.list_tables() {
                let Some(t) = names::table_id(&engine, &instance, &shared.instance) else {
                    continue;
                };
                // A table deleted meanwhile is left out, and so is one the
                // caller may not read.
                let Ok(schema) = shared.bt.schema(&engine) else {
                    continue;
                };
                if !who.on_table(&schema, R) {
                    continue;
                }
                out.push(table_message(
                    names::full(&parent, t),
                    with_schema.then_some(&*schema),
                ));
            }
            Ok(out)
        })
        .await?;
        Ok(Response::new(TableList {
            tables,
            next_page_token: String::new(),
        }))
    }

    async fn get_table(
        &self,
        req: Request<a::GetTableRequest>,
    ) -> Result<Response<OrderedTable>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let id = self.shared.table(&req.name)?;
        let shared = self.shared.clone();
        let schema = blocking(move || {
            let s = shared.bt.schema(&id).map_err(status::from_engine)?;
            auth::table(&who, &id, &s, R)?;
            Ok(s)
        })
        .await?;
        let with_schema = wants_schema(req.view, true);
        Ok(Response::new(table_message(
            req.name.clone(),
            with_schema.then_some(&*schema),
        )))
    }

    async fn delete_table(
        &self,
        req: Request<a::DeleteTableRequest>,
    ) -> Result<Response<()>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let id = self.shared.table(&req.name)?;
        self.shared.root(&who, W, "delete a table")?;
        let shared = self.shared.clone();
        blocking(move || {
            // `rm -r` of the table: its rows and every family's cells go.
            let s = shared.bt.schema(&id).map_err(status::from_engine)?;
            auth::table(&who, &id, &s, R | W)?;
            auth::every_family(&who, &s, W)?;
            let r = shared.bt.delete_table(&id).map_err(status::from_engine);
            shared.table_changed(&id);
            r
        })
        .await?;
        log::info!("grpc: deleted table {}", req.name);
        Ok(Response::new(()))
    }

    async fn modify_column_families(
        &self,
        req: Request<a::ModifyColumnFamiliesRequest>,
    ) -> Result<Response<OrderedTable>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let id = self.shared.table(&req.name)?;
        if req.modifications.is_empty() {
            return Err(Status::invalid_argument("no modifications given"));
        }
        let shared = self.shared.clone();
        let schema = blocking(move || {
            let old = shared.bt.schema(&id).map_err(status::from_engine)?;
            // Writing `.schema`: write permission on the table; changing or
            // dropping a family also on that family, unless the caller owns
            // the table.
            auth::table(&who, &id, &old, W)?;
            let may_change = |f: &FamilySchema| {
                if who.uid == old.owner {
                    Ok(())
                } else {
                    auth::family(&who, f, W)
                }
            };
            let mut new = (*old).clone();
            let mut dropped = Vec::new();
            // Every modification is checked against the new schema before
            // anything changes.
            for m in &req.modifications {
                let name = &m.id;
                match &m.r#mod {
                    Some(Mod::Create(cf)) => {
                        if new.families.contains_key(name) {
                            return Err(Status::already_exists(format!(
                                "column family {name} already exists"
                            )));
                        }
                        // Made after every family the table has.
                        new.add_family(family(&who, name, cf)?);
                    }
                    Some(Mod::Update(cf)) => {
                        let f = new.families.get_mut(name).ok_or_else(|| {
                            Status::not_found(format!("column family {name} does not exist"))
                        })?;
                        may_change(f)?;
                        f.gc = gc::from_api(cf.gc_rule.as_ref())?;
                        // The type is fixed when the family is made; an
                        // update may repeat it but not change it.
                        if cf.value_type.is_some() {
                            let asked = value_type::from_api(cf.value_type.as_ref())?;
                            if asked != f.aggregate {
                                let mut want = f.clone();
                                want.aggregate = asked;
                                return Err(Status::invalid_argument(engine::schema::type_change(
                                    f, &want,
                                )));
                            }
                        }
                    }
                    Some(Mod::Drop(true)) => {
                        let Some(f) = new.families.remove(name) else {
                            return Err(Status::not_found(format!(
                                "column family {name} does not exist"
                            )));
                        };
                        may_change(&f)?;
                        dropped.push(name.clone());
                    }
                    Some(Mod::Drop(false)) | None => {
                        return Err(Status::invalid_argument(format!(
                            "modification of {name:?} names no change"
                        )))
                    }
                }
            }
            new.validate().map_err(status::from_engine)?;
            // Refused before the data of a dropped family is deleted.
            old.check_change(&id, &new).map_err(status::from_engine)?;
            // The API drops a family with its data; the engine drops only
            // empty families, so empty them first.
            let r = (|| {
                for f in dropped.iter().filter(|f| old.families.contains_key(*f)) {
                    drop::delete_rows(&shared.bt, &id, RowRange::all(), Some(f))?;
                }
                shared.bt.set_schema(&id, new.clone())
            })()
            .map_err(status::from_engine);
            shared.table_changed(&id);
            r.map(|()| new)
        })
        .await?;
        Ok(Response::new(table_message(
            req.name.clone(),
            Some(&schema),
        )))
    }

    async fn drop_row_range(
        &self,
        req: Request<a::DropRowRangeRequest>,
    ) -> Result<Response<()>, Status> {
        use a::drop_row_range_request::Target;
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let id = self.shared.table(&req.name)?;
        let rows = match &req.target {
            Some(Target::RowKeyPrefix(p)) if !p.is_empty() => RowRange::prefix(p),
            Some(Target::DeleteAllDataFromTable(true)) => RowRange::all(),
            _ => {
                return Err(Status::invalid_argument(
                    "give a non-empty row_key_prefix or delete_all_data_from_table = true",
                ))
            }
        };
        let shared = self.shared.clone();
        let n = blocking(move || {
            // `rm -r` of the rows: every family's cells go.
            let s = shared.bt.schema(&id).map_err(status::from_engine)?;
            auth::table(&who, &id, &s, W)?;
            auth::every_family(&who, &s, W)?;
            let r = drop::delete_rows(&shared.bt, &id, rows, None).map_err(status::from_engine);
            shared.table_changed(&id);
            r
        })
        .await?;
        log::info!("grpc: dropped {n} rows of {}", req.name);
        Ok(Response::new(()))
    }

    async fn update_table(
        &self,
        req: Request<a::UpdateTableRequest>,
    ) -> Result<Response<crate::Operation>, Status> {
        crate::table_ops::update_table(&self.shared, req).await
    }

    async fn undelete_table(
        &self,
        req: Request<a::UndeleteTableRequest>,
    ) -> Result<Response<crate::Operation>, Status> {
        crate::table_ops::undelete_table(&self.shared, req).await
    }

    async fn generate_consistency_token(
        &self,
        req: Request<a::GenerateConsistencyTokenRequest>,
    ) -> Result<Response<a::GenerateConsistencyTokenResponse>, Status> {
        crate::consistency::generate(&self.shared, req).await
    }

    async fn check_consistency(
        &self,
        req: Request<a::CheckConsistencyRequest>,
    ) -> Result<Response<a::CheckConsistencyResponse>, Status> {
        crate::consistency::check(&self.shared, req).await
    }

    async fn create_backup(
        &self,
        req: Request<a::CreateBackupRequest>,
    ) -> Result<Response<crate::Operation>, Status> {
        backups::create_backup(&self.shared, req).await
    }

    async fn copy_backup(
        &self,
        req: Request<a::CopyBackupRequest>,
    ) -> Result<Response<crate::Operation>, Status> {
        crate::backup_copy::copy_backup(&self.shared, req).await
    }

    async fn get_backup(
        &self,
        req: Request<a::GetBackupRequest>,
    ) -> Result<Response<a::Backup>, Status> {
        backups::get_backup(&self.shared, req).await
    }

    async fn list_backups(
        &self,
        req: Request<a::ListBackupsRequest>,
    ) -> Result<Response<a::ListBackupsResponse>, Status> {
        backups::list_backups(&self.shared, req).await
    }

    async fn update_backup(
        &self,
        req: Request<a::UpdateBackupRequest>,
    ) -> Result<Response<a::Backup>, Status> {
        backups::update_backup(&self.shared, req).await
    }

    async fn delete_backup(
        &self,
        req: Request<a::DeleteBackupRequest>,
    ) -> Result<Response<()>, Status> {
        backups::delete_backup(&self.shared, req).await
    }

    async fn restore_table(
        &self,
        req: Request<a::RestoreTableRequest>,
    ) -> Result<Response<crate::Operation>, Status> {
        backups::restore_table(&self.shared, req).await
    }
}
