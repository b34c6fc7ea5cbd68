//! The server side: answers other daemons' calls on this daemon's tablet
//! servers and master, after checking the cluster's secret.

use super::codec::{Sealed, Tagged};
use super::gen::cluster_server::Cluster;
use super::messages::{Call, Op, Reply, ScanCall, ScanChunk};
use super::secret::{sha256, Claims, Nonce, Secret};

use engine::protocol::{MasterService, Sequencer, TableDef, TabletMeta, TabletService, WireError};
use engine::schema::TableSchema;
use engine::Bigtable;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

/// Cells per scan message, and bytes (whichever comes first).
const CHUNK_CELLS: usize = 512;
const CHUNK_BYTES: usize = 256 << 10;

/// What the service answers for: set once the daemon's cluster is launched.
pub(crate) type Target = Arc<OnceLock<Bigtable>>;

pub(crate) struct ClusterService {
    pub(crate) target: Target,
    /// Watches and invalidations between daemons.
    pub(crate) coherence: Arc<super::coherence::Coherence>,
    pub(crate) secret: Option<Secret>,
    /// Calls and scans admitted.
    pub(crate) served: Arc<AtomicU64>,
    /// Held by the one quick call running on a worker itself.
    pub(crate) inline: parking_lot::Mutex<()>,
}

/// Writes: the operations whose requests may be large (the `Call` route;
/// every other goes by `Control`).
pub(crate) fn data_op(op: &Op) -> bool {
    matches!(op, Op::Apply { .. } | Op::ApplyTxns { .. })
}

/// Point reads and writes: short, and they never call another daemon (so
/// never wait for this runtime).
fn quick(op: &Op) -> bool {
    matches!(
        op,
        Op::IsServing
            | Op::ReadRow { .. }
            | Op::PeekRow { .. }
            | Op::ReadColumn { .. }
            | Op::Apply { .. }
            | Op::ApplyTxns { .. }
    )
}

impl ClusterService {
    /// The daemon's cluster, the request decoded, and the nonce the reply
    /// proves this daemon's own with. The layer in front checked the
    /// caller's token on the headers; here the body must be the one the
    /// token covers before it is decoded.
    fn admit<T: serde::de::DeserializeOwned>(
        &self,
        req: Request<Sealed<T>>,
    ) -> Result<(Bigtable, T, Option<Nonce>), Status> {
        let claims = req.extensions().get::<Claims>().copied();
        let nonce = match (&self.secret, claims) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(Status::unauthenticated("wrong or missing cluster secret"))
            }
            (Some(_), Some(c)) => {
                if sha256(req.get_ref().bytes()) != c.digest {
                    let why = "a body other than the one its token covers";
                    super::auth::log_refusal(req.remote_addr().map(|a| a.ip()), why);
                    return Err(Status::unauthenticated(why));
                }
                Some(c.nonce)
            }
        };
        let msg = req.into_inner().open()?;
        self.served.fetch_add(1, Ordering::Relaxed);
        let bt = self
            .target
            .get()
            .cloned()
            .ok_or_else(|| Status::unavailable("the daemon is starting"))?;
        Ok((bt, msg, nonce))
    }

    /// A reply, with the proof that this daemon knows the secret and sent
    /// these bytes.
    fn answer(
        &self,
        method: &str,
        reply: Reply,
        nonce: Option<Nonce>,
    ) -> Result<Response<Sealed<Reply>>, Status> {
        let sealed = Sealed::seal(&reply)?;
        let mut resp = Response::new(sealed);
        if let (Some(secret), Some(n)) = (&self.secret, nonce) {
            let (meta, sealed, _) = resp.into_parts();
            let mut meta = meta;
            secret.prove(method, n, sealed.bytes(), &mut meta);
            resp = Response::from_parts(meta, sealed, Default::default());
        }
        Ok(resp)
    }
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, WireError> {
    bincode::serialize(v).map_err(|e| WireError::Unavailable(format!("cannot encode a reply: {e}")))
}

fn reply<T: Serialize>(r: engine::Result<T>) -> Result<Vec<u8>, WireError> {
    match r {
        Ok(v) => encode(&v),
        Err(e) => Err(WireError::from(&e)),
    }
}

/// A lock sequencer as a request carries it.
fn sequencer(text: &str) -> Result<Sequencer, WireError> {
    text.parse()
        .map_err(|e| WireError::InvalidArgument(format!("malformed sequencer {text:?}: {e}")))
}

fn server_op(s: &dyn TabletService, op: Op) -> Result<Vec<u8>, WireError> {
    match op {
        Op::IsServing => encode(&s.is_serving()),
        Op::Apply {
            tablet,
            ms,
            sync,
            fence,
        } => {
            let fence = fence.as_deref().map(sequencer).transpose()?;
            reply(s.apply(tablet, &ms, sync, fence.as_ref()))
        }
        Op::ApplyTxns { tablet, txns, sync } => reply(s.apply_txns(tablet, &txns, sync)),
        Op::ReadRow { tablet, row, spec } => reply(s.read_row(tablet, &row, &spec)),
        Op::PeekRow { tablet, row, spec } => reply(s.peek_row(tablet, &row, &spec)),
        Op::ReadColumn {
            tablet,
            row,
            family,
            qualifier,
            max_versions,
        } => {
            let column = engine::ColumnRead {
                row: &row,
                family: &family,
                qualifier: &qualifier,
                max_versions,
            };
            reply(s.read_column(tablet, column))
        }
        Op::Load { meta, master } => {
            let meta = TabletMeta::decode(&meta).map_err(|e| WireError::from(&e))?;
            reply(s.load(meta, &sequencer(&master)?))
        }
        Op::Unload { id } => reply(s.unload(id).map(|s| s.encode())),
        Op::DropTablet { id } => reply(s.drop_tablet(id)),
        Op::LearnTable { name, def } => {
            let def = TableDef::decode(&name, &def).map_err(|e| WireError::from(&e))?;
            reply(s.learn_table(&def))
        }
        Op::Fence => {
            s.fence();
            encode(&())
        }
        Op::TabletIds => reply(s.tablet_ids()),
        Op::Served => reply(s.served()),
        Op::FilesInFlight => reply(s.files_in_flight()),
        Op::Report => reply(s.report()),
        Op::TabletInfos => reply(s.tablet_infos()),
        Op::TabletRequests { id } => reply(s.tablet_requests(id)),
        Op::Sync => reply(s.sync()),
        Op::Flush { table } => reply(s.flush(table)),
        Op::Compact { table, major } => reply(s.compact(table, major)),
        Op::SplitNow { table } => reply(s.split_now(table)),
        Op::SplitAtRows { table, rows } => reply(s.split_at_rows(table, &rows)),
        Op::GroupCommitStats => reply(s.group_commit_stats()),
        Op::CommitLine => reply(s.commit_line()),
        Op::Kill => reply(s.kill()),
        Op::HoldWrites { table, hold_ms } => reply(s.hold_writes(table, hold_ms)),
        Op::ReleaseWrites { hold } => reply(s.release_writes(hold)),
        Op::Unpin { hold } => reply(s.unpin(hold)),
        _ => Err(WireError::InvalidArgument(
            "a master operation sent to a tablet server".into(),
        )),
    }
}

fn schema(bytes: &[u8]) -> Result<TableSchema, WireError> {
    TableSchema::decode(bytes).map_err(|e| WireError::from(&e))
}

fn master_op(m: &dyn MasterService, op: Op) -> Result<Vec<u8>, WireError> {
    match op {
        Op::IsActive => encode(&m.is_active()),
        Op::CreateTable { name, schema: s } => reply(m.create_table(&name, schema(&s)?)),
        Op::DeleteTable { name } => reply(m.delete_table(&name)),
        Op::SetSchema { name, schema: s } => reply(m.set_schema(&name, schema(&s)?)),
        Op::MoveTablet { table, row, to } => reply(m.move_tablet(&table, &row, &to)),
        Op::TabletSplit {
            server,
            parent,
            children,
        } => {
            m.tablet_split(&server, parent, &children);
            encode(&())
        }
        Op::Wake => {
            m.wake();
            encode(&())
        }
        Op::KillMaster => {
            m.kill();
            encode(&())
        }
        Op::MasterReport => encode(&m.report()),
        Op::UndeleteTable { id, name } => reply(m.undelete_table(id, name.as_deref())),
        Op::PurgeTrash { id } => reply(m.purge_trash(id)),
        Op::CloneSnapshot {
            table,
            snapshot,
            to,
        } => reply(m.clone_snapshot(&table, &snapshot, &to)),
        Op::RestoreSnapshot { table, snapshot } => reply(m.restore_snapshot(&table, &snapshot)),
        Op::TakeSnapshot {
            table,
            name,
            expire_micros,
            cluster,
        } => reply(m.take_snapshot(&table, &name, expire_micros, cluster.as_deref())),
        Op::SetSnapshotExpiry {
            table,
            name,
            expire_micros,
        } => reply(m.set_snapshot_expiry(&table, &name, expire_micros)),
        Op::SnapshotManifests { table } => reply(m.snapshot_manifests(&table)),
        Op::SnapshotManifest { table, name } => reply(m.snapshot_manifest(&table, &name)),
        Op::DeleteSnapshot { table, name } => reply(m.delete_snapshot(&table, &name)),
        _ => Err(WireError::InvalidArgument(
            "a tablet-server operation sent to a master".into(),
        )),
    }
}

/// Runs one call on this daemon's server or master.
pub(crate) fn dispatch(bt: &Bigtable, call: Call) -> Result<Vec<u8>, WireError> {
    match call.server {
        Some(name) => match bt.local_server(&name) {
            Some(s) => server_op(&*s, call.op),
            // Gone from here (dead or never here): the caller looks the
            // tablet up again.
            None => match call.op {
                Op::IsServing => encode(&false),
                _ => Err(WireError::NotServing {
                    server: name,
                    tablet: 0,
                }),
            },
        },
        None => match bt.local_master() {
            Some(m) => master_op(&*m, call.op),
            None => match call.op {
                Op::IsActive => encode(&false),
                _ => Err(WireError::Unavailable(
                    "this daemon's master is not the active one".into(),
                )),
            },
        },
    }
}

/// Sends a scan's messages, each tagged with its number and the call's
/// nonce when the cluster has a secret (so none can be altered, dropped or
/// reordered unnoticed).
struct Tagger {
    tx: tokio::sync::mpsc::Sender<Result<Tagged<ScanChunk>, Status>>,
    proof: Option<(Secret, Nonce)>,
    seq: u64,
}

impl Tagger {
    /// False once the caller hung up.
    fn send(&mut self, c: ScanChunk) -> bool {
        let msg = Sealed::seal(&c).map(|body| {
            let tag = self
                .proof
                .as_ref()
                .map(|(s, n)| s.tag_chunk(*n, self.seq, body.bytes()));
            Tagged { tag, body }
        });
        self.seq += 1;
        self.tx.blocking_send(msg).is_ok()
    }
}

/// Sends `spec`'s part of tablet `tablet` in chunks until done or the
/// caller hangs up.
fn stream_scan(bt: &Bigtable, call: ScanCall, mut tx: Tagger) {
    let mut send = |c: ScanChunk| tx.send(c);
    let Some(s) = bt.local_server(&call.server) else {
        send(ScanChunk::Failed(WireError::NotServing {
            server: call.server,
            tablet: call.tablet,
        }));
        return;
    };
    let (mut cells, end) = match s.scan_part(call.tablet, &call.spec) {
        Ok(p) => p,
        Err(e) => {
            send(ScanChunk::Failed(WireError::from(&e)));
            return;
        }
    };
    if !send(ScanChunk::Start { end }) {
        return;
    }
    let mut batch = Vec::new();
    let mut bytes = 0;
    loop {
        match cells.next_cell() {
            Ok(Some(c)) => {
                bytes += c.row.len() + c.qualifier.len() + c.value.len() + 32;
                batch.push(c);
                if batch.len() >= CHUNK_CELLS || bytes >= CHUNK_BYTES {
                    if !send(ScanChunk::Cells(std::mem::take(&mut batch))) {
                        return;
                    }
                    bytes = 0;
                }
            }
            Ok(None) => {
                if !batch.is_empty() && !send(ScanChunk::Cells(batch)) {
                    return;
                }
                send(ScanChunk::End);
                return;
            }
            Err(e) => {
                send(ScanChunk::Failed(WireError::from(&e)));
                return;
            }
        }
    }
}

impl ClusterService {
    /// Runs one call that came by the data route (`data`) or the control
    /// route: each takes only its own operations, so that a large request
    /// never passes as a control call's.
    async fn run(
        &self,
        req: Request<Sealed<Call>>,
        data: bool,
    ) -> Result<Response<Sealed<Reply>>, Status> {
        let (bt, call, nonce) = self.admit(req)?;
        if data_op(&call.op) != data {
            return Err(Status::invalid_argument(
                "an operation sent by the wrong route",
            ));
        }
        // Engine calls block. A point read or write runs here, on the
        // worker that decoded it (one at a time, so that a slow one leaves
        // the other worker free): a hand-off to the blocking pool and back
        // costs two thread wake-ups, most of such a call. The others, and a
        // point call while one runs here, block in place: the runtime hands
        // this worker's other tasks to another thread meanwhile.
        let r = if let Some(r) = tokio::task::block_in_place(|| self.coherence.handle(&call.op)) {
            r
        } else if quick(&call.op) {
            match self.inline.try_lock() {
                Some(_one) => dispatch(&bt, call),
                None => tokio::task::block_in_place(|| dispatch(&bt, call)),
            }
        } else {
            tokio::task::block_in_place(|| dispatch(&bt, call))
        };
        self.answer(if data { "Call" } else { "Control" }, Reply(r), nonce)
    }
}

#[tonic::async_trait]
impl Cluster for ClusterService {
    async fn call(&self, req: Request<Sealed<Call>>) -> Result<Response<Sealed<Reply>>, Status> {
        self.run(req, true).await
    }

    async fn control(&self, req: Request<Sealed<Call>>) -> Result<Response<Sealed<Reply>>, Status> {
        self.run(req, false).await
    }

    type ScanStream = ReceiverStream<Result<Tagged<ScanChunk>, Status>>;

    async fn scan(
        &self,
        req: Request<Sealed<ScanCall>>,
    ) -> Result<Response<Self::ScanStream>, Status> {
        let (bt, call, nonce) = self.admit(req)?;
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let tagger = Tagger {
            tx,
            proof: self.secret.clone().zip(nonce),
            seq: 0,
        };
        tokio::task::spawn_blocking(move || stream_scan(&bt, call, tagger));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
