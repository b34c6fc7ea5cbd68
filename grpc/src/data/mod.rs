//! The Data API: ReadRows, SampleRowKeys, MutateRow, MutateRows,
//! CheckAndMutateRow, ReadModifyWriteRow, PingAndWarm, and the change
//! stream's GenerateInitialChangeStreamPartitions and ReadChangeStream.

pub mod change_stream;
pub mod chunks;
pub mod modify;
pub mod mutate;
pub mod read_rows;
pub mod rows;

use crate::gen::data::bigtable_server::Bigtable as DataApi;
use crate::shared::{blocking, Shared};
use crate::{auth, names, status, v2};
use engine::access::{R, W};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

pub struct DataService {
    pub shared: Arc<Shared>,
}

type Stream<T> = ReceiverStream<Result<T, Status>>;

/// Responses buffered between the scan thread and the connection.
const STREAM_DEPTH: usize = 4;

/// Sends what `reader` reads, a piece at a time: each piece is read on a
/// blocking thread once the client has taken the previous one, and waiting
/// for the client holds no thread (a client that never reads would
/// otherwise hold a blocking thread each, and with enough of them every
/// other call would wait).
async fn stream_rows(
    mut reader: read_rows::Reader,
    tx: mpsc::Sender<Result<v2::ReadRowsResponse, Status>>,
) {
    while !reader.done() {
        // Room for one more response: the client has read enough.
        let Ok(permit) = tx.reserve().await else {
            return;
        };
        let piece = tokio::task::spawn_blocking(move || {
            let r = reader.next();
            (reader, r)
        })
        .await;
        let Ok((r, piece)) = piece else {
            permit.send(Err(Status::internal("the scan failed")));
            return;
        };
        reader = r;
        match piece {
            Err(e) => {
                permit.send(Err(e));
                return;
            }
            Ok(responses) => {
                let mut responses = responses.into_iter();
                if let Some(first) = responses.next() {
                    permit.send(Ok(first));
                }
                for r in responses {
                    if tx.send(Ok(r)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

#[tonic::async_trait]
impl DataApi for DataService {
    type ReadRowsStream = Stream<v2::ReadRowsResponse>;
    type SampleRowKeysStream = Stream<v2::SampleRowKeysResponse>;
    type MutateRowsStream = Stream<v2::MutateRowsResponse>;
    type GenerateInitialChangeStreamPartitionsStream =
        Stream<v2::GenerateInitialChangeStreamPartitionsResponse>;
    type ReadChangeStreamStream = Stream<v2::ReadChangeStreamResponse>;

    async fn generate_initial_change_stream_partitions(
        &self,
        req: Request<v2::GenerateInitialChangeStreamPartitionsRequest>,
    ) -> Result<Response<Self::GenerateInitialChangeStreamPartitionsStream>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let table = self.shared.table(&req.get_ref().table_name)?;
        let shared = self.shared.clone();
        let parts = blocking(move || {
            let s = shared.bt.schema(&table).map_err(status::from_engine)?;
            auth::table(&who, &table, &s, R)?;
            let tablets = shared.bt.tablets(&table).map_err(status::from_engine)?;
            Ok(tablets
                .into_iter()
                .map(|t| v2::GenerateInitialChangeStreamPartitionsResponse {
                    partition: Some(change_stream::partition(t.start, t.end)),
                })
                .collect::<Vec<_>>())
        })
        .await?;
        let (tx, rx) = mpsc::channel(parts.len().max(1));
        for p in parts {
            let _ = tx.try_send(Ok(p));
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn read_change_stream(
        &self,
        req: Request<v2::ReadChangeStreamRequest>,
    ) -> Result<Response<Self::ReadChangeStreamStream>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let table = self.shared.table(&req.get_ref().table_name)?;
        let mut plan = change_stream::Plan::new(table, req.get_ref())?;
        let instance = req
            .get_ref()
            .table_name
            .rsplit_once("/tables/")
            .map_or("", |(p, _)| p);
        let instance = names::instance(instance)?.to_string();
        let shared = self.shared.clone();
        // The first read in the call: a table without a log or an expired
        // token fails the call itself.
        let (plan, first, readable, shared) = blocking(move || {
            let s = shared.bt.schema(&plan.table).map_err(status::from_engine)?;
            auth::table(&who, &plan.table, &s, R)?;
            let readable = auth::readable(&who, &s);
            plan.cluster = crate::instances::cluster_id(&shared, &instance)?;
            let first = shared
                .bt
                .read_changes(&plan.table, &plan.query)
                .map_err(status::from_engine)?;
            Ok((plan, first, readable, shared))
        })
        .await?;
        let (tx, rx) = mpsc::channel(STREAM_DEPTH);
        tokio::spawn(async move {
            let mut plan = plan;
            let mut batch = first;
            let mut quiet_since = std::time::Instant::now();
            loop {
                for r in plan.data_changes(&batch, readable.as_deref()) {
                    if tx.send(Ok(r)).await.is_err() {
                        return;
                    }
                }
                if !batch.records.is_empty() {
                    quiet_since = std::time::Instant::now();
                }
                plan.query.after = batch.next;
                if batch.done {
                    return;
                }
                if batch.records.is_empty() {
                    if quiet_since.elapsed() >= plan.heartbeat {
                        let hb = plan.heartbeat(batch.next, batch.watermark);
                        if tx.send(Ok(hb)).await.is_err() {
                            return;
                        }
                        quiet_since = std::time::Instant::now();
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                let (sh, q, t) = (shared.clone(), plan.query.clone(), plan.table.clone());
                match blocking(move || sh.bt.read_changes(&t, &q).map_err(status::from_engine))
                    .await
                {
                    Ok(b) => batch = b,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn read_rows(
        &self,
        req: Request<v2::ReadRowsRequest>,
    ) -> Result<Response<Self::ReadRowsStream>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let mut plan = read_rows::Plan::new(&self.shared, req.get_ref())?;
        let (tx, rx) = mpsc::channel(STREAM_DEPTH);
        let shared = self.shared.clone();
        // A missing table fails the call itself, not the stream.
        let (plan, shared) = blocking(move || {
            let s = shared.bt.schema(&plan.table).map_err(status::from_engine)?;
            auth::table(&who, &plan.table, &s, R)?;
            plan.families = auth::readable(&who, &s);
            Ok((plan, shared))
        })
        .await?;
        tokio::spawn(stream_rows(
            read_rows::Reader::new(shared.bt.clone(), plan),
            tx,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn sample_row_keys(
        &self,
        req: Request<v2::SampleRowKeysRequest>,
    ) -> Result<Response<Self::SampleRowKeysStream>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let table = self.shared.table(&req.get_ref().table_name)?;
        let shared = self.shared.clone();
        let samples = blocking(move || {
            let s = shared.bt.schema(&table).map_err(status::from_engine)?;
            auth::table(&who, &table, &s, R)?;
            let tablets = shared.bt.tablets(&table).map_err(status::from_engine)?;
            let mut offset = 0i64;
            let mut out = Vec::new();
            // One sample per tablet boundary; the last (empty key) is the table's end.
            for t in tablets {
                offset += (t.memtable_bytes + t.sstable_bytes) as i64;
                out.push(v2::SampleRowKeysResponse {
                    row_key: t.end.unwrap_or_default(),
                    offset_bytes: offset,
                });
            }
            if out.last().is_none_or(|s| !s.row_key.is_empty()) {
                out.push(v2::SampleRowKeysResponse {
                    row_key: Vec::new(),
                    offset_bytes: offset,
                });
            }
            Ok(out)
        })
        .await?;
        let (tx, rx) = mpsc::channel(samples.len().max(1));
        for s in samples {
            let _ = tx.try_send(Ok(s));
        }
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn mutate_row(
        &self,
        req: Request<v2::MutateRowRequest>,
    ) -> Result<Response<v2::MutateRowResponse>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let table = self.shared.table(&req.table_name)?;
        let m = mutate::row_mutation(&req.row_key, &req.mutations)?;
        let shared = self.shared.clone();
        blocking(move || {
            let s = shared.bt.schema(&table).map_err(status::from_engine)?;
            auth::table(&who, &table, &s, W)?;
            auth::mutations(&who, &s, &m.mutations)?;
            let r = shared
                .bt
                .apply(&table, &m, engine::WriteOptions::default())
                .map_err(status::from_engine);
            shared.rows_changed(&table, &[&req.row_key]);
            r
        })
        .await?;
        Ok(Response::new(v2::MutateRowResponse {}))
    }

    async fn mutate_rows(
        &self,
        req: Request<v2::MutateRowsRequest>,
    ) -> Result<Response<Self::MutateRowsStream>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let table = self.shared.table(&req.table_name)?;
        if req.entries.is_empty() {
            return Err(Status::invalid_argument("no entries given"));
        }
        mutate::check_mutation_count(req.entries.iter().map(|e| e.mutations.len()).sum())?;
        let shared = self.shared.clone();
        let resp = blocking(move || {
            let s = shared.bt.schema(&table).map_err(status::from_engine)?;
            auth::table(&who, &table, &s, W)?;
            let r = modify::mutate_rows(&shared.bt, &table, &req.entries, |m| {
                auth::mutations(&who, &s, &m.mutations)
            });
            let rows: Vec<&[u8]> = req.entries.iter().map(|e| e.row_key.as_slice()).collect();
            shared.rows_changed(&table, &rows);
            r
        })
        .await?;
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(Ok(resp));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn check_and_mutate_row(
        &self,
        req: Request<v2::CheckAndMutateRowRequest>,
    ) -> Result<Response<v2::CheckAndMutateRowResponse>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let table = self.shared.table(&req.table_name)?;
        let shared = self.shared.clone();
        let matched = blocking(move || {
            let r = modify::check_and_mutate(&shared.bt, &table, &req, &who);
            shared.rows_changed(&table, &[&req.row_key]);
            r
        })
        .await?;
        Ok(Response::new(v2::CheckAndMutateRowResponse {
            predicate_matched: matched,
        }))
    }

    async fn ping_and_warm(
        &self,
        req: Request<v2::PingAndWarmRequest>,
    ) -> Result<Response<v2::PingAndWarmResponse>, Status> {
        self.shared.auth.identify(&req)?;
        names::parent(&req.get_ref().name)?;
        Ok(Response::new(v2::PingAndWarmResponse {}))
    }

    async fn read_modify_write_row(
        &self,
        req: Request<v2::ReadModifyWriteRowRequest>,
    ) -> Result<Response<v2::ReadModifyWriteRowResponse>, Status> {
        let who = self.shared.auth.identify(&req)?;
        let req = req.into_inner();
        let table = self.shared.table(&req.table_name)?;
        let shared = self.shared.clone();
        let row = blocking(move || {
            let r = modify::read_modify_write(&shared.bt, &table, &req, &who);
            shared.rows_changed(&table, &[&req.row_key]);
            r
        })
        .await?;
        Ok(Response::new(v2::ReadModifyWriteRowResponse {
            row: Some(row),
        }))
    }
}
