//! The client side: tablet servers and masters of other daemons behind the
//! engine's protocol traits, and the [`Dialer`] that finds them through the
//! addresses they registered in the lock service.
//!
//! Engine threads are not async: each call is spawned on the internal
//! runtime and its caller waits for the answer.

use super::codec::{Sealed, Tagged};
use super::frame_client::Pool;
use super::gen::cluster_client::ClusterClient;
use super::messages::{Call, Op, Reply, ScanCall, ScanChunk};
use super::secret::{Nonce, Secret};
use super::{CONNECTION_WINDOW, MAX_MESSAGE, STREAM_WINDOW};
use chubby::LockService;
use engine::protocol::{
    self, CellSource, GroupCommitStats, MasterService, ScanPart, ServedTablet, ServerReport,
    TableDef, TabletAssignment, TabletInfo, TabletLifecycle, TabletMaintenance, TabletMeta,
    TabletReads, TabletService, TabletSnapshots, TabletStatus, TabletWrites,
};
use engine::schema::TableSchema;
use engine::{
    Cell, CellView, ColumnRead, Error, Result, RowMutation, RowPeek, RowTxn, ScanSpec, TxnOutcome,
    Version, Written,
};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Handle;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

/// How long a data call may take before its server counts as unreachable.
const DATA_TIMEOUT: Duration = Duration::from_secs(30);
/// Loads (which may recover a log), unloads, flushes and compactions.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(600);

/// One daemon's address, and how to call it.
#[derive(Clone)]
struct Peer {
    addr: String,
    channel: Channel,
    rt: Handle,
    secret: Option<Secret>,
    /// Calls and controls go framed (`frame.rs`) when the peer is reached
    /// without TLS; scans, and everything over TLS, by HTTP/2.
    frames: Option<Arc<Pool>>,
}

impl Peer {
    fn client(&self) -> ClusterClient<Channel> {
        ClusterClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE)
    }

    /// A request on route `method` carrying `msg` and this daemon's token
    /// (which covers the route, the peer's address and the body), and the
    /// nonce its reply must prove.
    fn request<T: serde::Serialize>(
        &self,
        msg: &T,
        method: &str,
        timeout: Duration,
    ) -> std::result::Result<(Request<Sealed<T>>, Option<Nonce>), Status> {
        let mut req = Request::new(Sealed::seal(msg)?);
        req.set_timeout(timeout);
        let nonce = match &self.secret {
            Some(s) => {
                let body = req.get_ref().bytes().to_vec();
                Some(s.attach(&mut req, method, &self.addr, &body))
            }
            None => None,
        };
        Ok((req, nonce))
    }

    /// Sends `call` and waits for the reply.
    fn call(&self, call: Call, timeout: Duration) -> std::result::Result<Reply, Status> {
        let data = super::service::data_op(&call.op);
        let method = if data { "Call" } else { "Control" };
        if let Some(pool) = &self.frames {
            return pool.call(self.secret.as_ref(), &call, method, timeout);
        }
        let (req, nonce) = self.request(&call, method, timeout)?;
        let mut client = self.client();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.rt.spawn(async move {
            let r = if data {
                client.call(req).await
            } else {
                client.control(req).await
            };
            let _ = tx.send(r);
        });
        match rx.blocking_recv() {
            Ok(r) => proven(self.secret.as_ref(), &self.addr, method, r?, nonce),
            Err(_) => Err(Status::unavailable("the internal RPC runtime stopped")),
        }
    }
}

/// `resp`'s message, if its sender proved it knows the secret and sent
/// these bytes (when this daemon has a secret).
fn proven(
    secret: Option<&Secret>,
    addr: &str,
    method: &str,
    resp: Response<Sealed<Reply>>,
    nonce: Option<Nonce>,
) -> std::result::Result<Reply, Status> {
    if let (Some(s), Some(n)) = (secret, nonce) {
        if !s.verify_reply(method, n, resp.get_ref().bytes(), resp.metadata()) {
            return Err(super::quiet::unproven(addr, "a reply"));
        }
    }
    resp.into_inner().open()
}

/// Message `seq` of a scan's stream, if its tag proves the peer sent it
/// (when this daemon has a secret).
fn open_chunk(
    secret: Option<&Secret>,
    nonce: Option<Nonce>,
    seq: u64,
    addr: &str,
    m: Tagged<ScanChunk>,
) -> std::result::Result<ScanChunk, Status> {
    if let (Some(s), Some(n)) = (secret, nonce) {
        let ok = m
            .tag
            .is_some_and(|t| s.verify_chunk(n, seq, m.body.bytes(), &t));
        if !ok {
            return Err(super::quiet::unproven(addr, "a scan's message"));
        }
    }
    m.body.open()
}

/// Decodes a reply's result.
fn decode<R: DeserializeOwned>(reply: Reply) -> Result<R> {
    match reply.0 {
        Ok(bytes) => super::codec::decode_bounded(&bytes)
            .map_err(|e| Error::Unavailable(format!("malformed reply from a peer: {e}"))),
        Err(w) => Err(w.into()),
    }
}

/// A failed call to a tablet server: the caller looks the tablet up again
/// (its server may be dead and its tablets reassigned), unless the peer
/// refused this daemon outright.
fn server_unreachable(name: &str, addr: &str, tablet: u64, s: &Status) -> Error {
    match s.code() {
        Code::Unauthenticated | Code::PermissionDenied => Error::Unavailable(format!(
            "{addr} refused the call to {name}: {}",
            s.message()
        )),
        _ => {
            log::debug!("tablet server {name} at {addr} unreachable: {s}");
            Error::NotServing {
                server: name.to_string(),
                tablet,
            }
        }
    }
}

/// A tablet server in another daemon.
pub struct RemoteServer {
    name: String,
    peer: Peer,
}

impl RemoteServer {
    /// Calls the server. A `write` sent and never answered may have been
    /// applied: it is not looked up and sent again (it could apply twice)
    /// but fails as such.
    fn ask<R: DeserializeOwned>(
        &self,
        op: Op,
        tablet: u64,
        timeout: Duration,
        write: bool,
    ) -> Result<R> {
        let call = Call {
            server: Some(self.name.clone()),
            op,
        };
        match self.peer.call(call, timeout) {
            Ok(reply) => decode(reply),
            Err(s) if write && super::frame_client::unanswered(&s) => {
                Err(Error::OutcomeUnknown(format!(
                    "tablet server {} at {} did not answer: {}",
                    self.name,
                    self.peer.addr,
                    s.message()
                )))
            }
            Err(s) => Err(server_unreachable(&self.name, &self.peer.addr, tablet, &s)),
        }
    }
    fn data<R: DeserializeOwned>(&self, op: Op, tablet: u64) -> Result<R> {
        self.ask(op, tablet, DATA_TIMEOUT, false)
    }
    fn write<R: DeserializeOwned>(&self, op: Op, tablet: u64) -> Result<R> {
        self.ask(op, tablet, DATA_TIMEOUT, true)
    }
    fn admin<R: DeserializeOwned>(&self, op: Op) -> Result<R> {
        self.ask(op, 0, ADMIN_TIMEOUT, false)
    }
}

/// The cells of a remote scan part, as its stream brings them.
struct RemoteCells {
    rx: tokio::sync::mpsc::Receiver<std::result::Result<ScanChunk, Status>>,
    buf: std::vec::IntoIter<Cell>,
    server: String,
    addr: String,
    tablet: u64,
    done: bool,
    /// The cell the last view step stopped at.
    current: Option<Cell>,
}

impl RemoteCells {
    fn cut(&mut self, s: &Status) -> Error {
        self.done = true;
        Error::Unavailable(format!(
            "the scan of tablet {} on {} at {} was cut off: {s}",
            self.tablet, self.server, self.addr
        ))
    }
}

impl CellSource for RemoteCells {
    fn advance_view(&mut self) -> Result<bool> {
        self.current = self.next_cell()?;
        Ok(self.current.is_some())
    }
    fn current(&self) -> Option<CellView<'_>> {
        self.current.as_ref().map(Cell::view)
    }
    fn next_cell(&mut self) -> Result<Option<Cell>> {
        loop {
            if let Some(c) = self.buf.next() {
                return Ok(Some(c));
            }
            if self.done {
                return Ok(None);
            }
            match self.rx.blocking_recv() {
                Some(Ok(ScanChunk::Cells(cells))) => self.buf = cells.into_iter(),
                Some(Ok(ScanChunk::End)) => self.done = true,
                Some(Ok(ScanChunk::Failed(w))) => {
                    self.done = true;
                    return Err(w.into());
                }
                Some(Ok(ScanChunk::Start { .. })) => {
                    return Err(self.cut(&Status::internal("a second start")));
                }
                Some(Err(s)) => return Err(self.cut(&s)),
                None => return Err(self.cut(&Status::unavailable("the stream ended early"))),
            }
        }
    }
}

impl TabletLifecycle for RemoteServer {
    fn name(&self) -> &str {
        &self.name
    }
    fn is_serving(&self) -> bool {
        self.data(Op::IsServing, 0).unwrap_or(false)
    }
    fn sync(&self) -> Result<()> {
        self.admin(Op::Sync)
    }
    fn fence(&self) {
        // Best effort: a server the master could reap has lost its lock and
        // fences itself when it notices.
        if let Err(e) = self.admin::<()>(Op::Fence) {
            log::debug!("could not tell {} to stop serving: {e}", self.name);
        }
    }
    fn kill(&self) -> Result<()> {
        self.admin(Op::Kill)
    }
}

impl TabletWrites for RemoteServer {
    fn apply(
        &self,
        tablet: u64,
        ms: &[RowMutation],
        sync: bool,
        fence: Option<&protocol::Sequencer>,
    ) -> Result<Written> {
        let op = Op::Apply {
            tablet,
            ms: ms.to_vec(),
            sync,
            fence: fence.map(|f| f.to_string()),
        };
        self.write(op, tablet)
    }
    fn apply_txns(&self, tablet: u64, txns: &[RowTxn], sync: bool) -> Result<Vec<TxnOutcome>> {
        let op = Op::ApplyTxns {
            tablet,
            txns: txns.to_vec(),
            sync,
        };
        self.write(op, tablet)
    }
}

impl TabletReads for RemoteServer {
    fn read_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<Vec<Cell>> {
        let op = Op::ReadRow {
            tablet,
            row: row.to_vec(),
            spec: Box::new(spec.clone()),
        };
        self.data(op, tablet)
    }
    fn peek_row(&self, tablet: u64, row: &[u8], spec: &ScanSpec) -> Result<RowPeek> {
        let op = Op::PeekRow {
            tablet,
            row: row.to_vec(),
            spec: Box::new(spec.clone()),
        };
        self.data(op, tablet)
    }
    fn read_column(&self, tablet: u64, column: ColumnRead<'_>) -> Result<Vec<Version>> {
        let op = Op::ReadColumn {
            tablet,
            row: column.row.to_vec(),
            family: column.family.to_string(),
            qualifier: column.qualifier.to_vec(),
            max_versions: column.max_versions,
        };
        self.data(op, tablet)
    }
    fn scan_part(&self, tablet: u64, spec: &ScanSpec) -> Result<ScanPart> {
        let call = ScanCall {
            server: self.name.clone(),
            tablet,
            spec: spec.clone(),
        };
        // A scan may run long: the deadline covers its start only; a
        // stalled peer is caught by the connection's keep-alive.
        let (req, nonce) = match self.peer.request(&call, "Scan", DATA_TIMEOUT) {
            Ok(r) => r,
            Err(s) => return Err(server_unreachable(&self.name, &self.peer.addr, tablet, &s)),
        };
        let mut client = self.peer.client();
        let (secret, addr) = (self.peer.secret.clone(), self.peer.addr.clone());
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        self.peer.rt.spawn(async move {
            let mut stream = match client.scan(req).await {
                Ok(stream) => stream.into_inner(),
                Err(s) => {
                    let _ = tx.send(Err(s)).await;
                    return;
                }
            };
            let mut seq = 0;
            loop {
                let chunk = match stream.message().await {
                    Ok(Some(m)) => open_chunk(secret.as_ref(), nonce, seq, &addr, m),
                    Ok(None) => return,
                    Err(s) => Err(s),
                };
                seq += 1;
                let failed = chunk.is_err();
                if tx.send(chunk).await.is_err() || failed {
                    return; // the reader hung up, or the stream is done for
                }
            }
        });
        let mut cells = RemoteCells {
            rx,
            buf: Vec::new().into_iter(),
            server: self.name.clone(),
            addr: self.peer.addr.clone(),
            tablet,
            done: false,
            current: None,
        };
        match cells.rx.blocking_recv() {
            Some(Ok(ScanChunk::Start { end })) => Ok((Box::new(cells), end)),
            Some(Ok(ScanChunk::Failed(w))) => Err(w.into()),
            Some(Ok(_)) => Err(Error::Unavailable(format!(
                "{} at {} began a scan without its start",
                self.name, self.peer.addr
            ))),
            Some(Err(s)) => Err(server_unreachable(&self.name, &self.peer.addr, tablet, &s)),
            None => Err(Error::NotServing {
                server: self.name.clone(),
                tablet,
            }),
        }
    }
}

impl TabletAssignment for RemoteServer {
    fn load(&self, meta: TabletMeta, master: &protocol::Sequencer) -> Result<()> {
        self.admin(Op::Load {
            meta: meta.encode(),
            master: master.to_string(),
        })
    }
    fn unload(&self, id: u64) -> Result<TabletMeta> {
        let bytes: Vec<u8> = self.admin(Op::Unload { id })?;
        TabletMeta::decode(&bytes)
    }
    fn drop_tablet(&self, id: u64) -> Result<()> {
        self.admin(Op::DropTablet { id })
    }
    fn learn_table(&self, def: &TableDef) -> Result<()> {
        self.data(
            Op::LearnTable {
                name: def.name.clone(),
                def: def.encode(),
            },
            0,
        )
    }
}

impl TabletMaintenance for RemoteServer {
    fn flush(&self, table: Option<u64>) -> Result<()> {
        self.admin(Op::Flush { table })
    }
    fn compact(&self, table: u64, major: bool) -> Result<()> {
        self.admin(Op::Compact { table, major })
    }
    fn split_now(&self, table: u64) -> Result<()> {
        self.admin(Op::SplitNow { table })
    }
    fn split_at_rows(&self, table: u64, rows: &[Vec<u8>]) -> Result<()> {
        self.admin(Op::SplitAtRows {
            table,
            rows: rows.to_vec(),
        })
    }
}

impl TabletSnapshots for RemoteServer {
    fn hold_writes(&self, table: u64, hold_ms: u64) -> Result<protocol::WriteHold> {
        self.data(Op::HoldWrites { table, hold_ms }, 0)
    }
    fn release_writes(&self, hold: u64) -> Result<Vec<protocol::HeldTablet>> {
        // Writes the tablets' memtable parts out.
        self.admin(Op::ReleaseWrites { hold })
    }
    fn unpin(&self, hold: u64) -> Result<()> {
        self.data(Op::Unpin { hold }, 0)
    }
}

impl TabletStatus for RemoteServer {
    fn tablet_ids(&self) -> Result<Vec<u64>> {
        self.data(Op::TabletIds, 0)
    }
    fn served(&self) -> Result<Vec<ServedTablet>> {
        self.data(Op::Served, 0)
    }
    fn files_in_flight(&self) -> Result<Vec<u64>> {
        self.data(Op::FilesInFlight, 0)
    }
    fn report(&self) -> Result<ServerReport> {
        self.data(Op::Report, 0)
    }
    fn tablet_infos(&self) -> Result<Vec<TabletInfo>> {
        self.data(Op::TabletInfos, 0)
    }
    fn tablet_requests(&self, id: u64) -> Result<u64> {
        self.data(Op::TabletRequests { id }, 0)
    }
    fn group_commit_stats(&self) -> Result<GroupCommitStats> {
        self.data(Op::GroupCommitStats, 0)
    }
    fn commit_line(&self) -> Result<String> {
        self.data(Op::CommitLine, 0)
    }
}

/// The active master in another daemon.
pub struct RemoteMaster {
    name: String,
    peer: Peer,
}

impl RemoteMaster {
    fn ask<R: DeserializeOwned>(&self, op: Op) -> Result<R> {
        let call = Call { server: None, op };
        match self.peer.call(call, ADMIN_TIMEOUT) {
            Ok(reply) => decode(reply),
            // Retryable: a failover elects another master meanwhile.
            Err(s) => Err(Error::Unavailable(format!(
                "master {} at {}: {}",
                self.name,
                self.peer.addr,
                s.message()
            ))),
        }
    }
    fn tell(&self, op: Op) {
        if let Err(e) = self.ask::<()>(op) {
            log::debug!("could not reach master {}: {e}", self.name);
        }
    }
}

impl MasterService for RemoteMaster {
    fn name(&self) -> &str {
        &self.name
    }
    fn is_active(&self) -> bool {
        self.ask(Op::IsActive).unwrap_or(false)
    }
    fn create_table(&self, name: &str, schema: TableSchema) -> Result<()> {
        self.ask(Op::CreateTable {
            name: name.to_string(),
            schema: schema.encode(),
        })
    }
    fn delete_table(&self, name: &str) -> Result<()> {
        self.ask(Op::DeleteTable {
            name: name.to_string(),
        })
    }
    fn undelete_table(&self, id: u64, name: Option<&str>) -> Result<String> {
        self.ask(Op::UndeleteTable {
            id,
            name: name.map(str::to_string),
        })
    }
    fn purge_trash(&self, id: u64) -> Result<()> {
        self.ask(Op::PurgeTrash { id })
    }
    fn set_schema(&self, name: &str, schema: TableSchema) -> Result<()> {
        self.ask(Op::SetSchema {
            name: name.to_string(),
            schema: schema.encode(),
        })
    }
    fn move_tablet(&self, table: &str, row: &[u8], to: &str) -> Result<()> {
        self.ask(Op::MoveTablet {
            table: table.to_string(),
            row: row.to_vec(),
            to: to.to_string(),
        })
    }
    fn clone_snapshot(&self, table: &str, snapshot: &str, to: &str) -> Result<()> {
        self.ask(Op::CloneSnapshot {
            table: table.to_string(),
            snapshot: snapshot.to_string(),
            to: to.to_string(),
        })
    }
    fn restore_snapshot(&self, table: &str, snapshot: &str) -> Result<()> {
        self.ask(Op::RestoreSnapshot {
            table: table.to_string(),
            snapshot: snapshot.to_string(),
        })
    }
    fn take_snapshot(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
        cluster: Option<&str>,
    ) -> Result<Vec<u8>> {
        self.ask(Op::TakeSnapshot {
            table: table.to_string(),
            name: name.to_string(),
            expire_micros,
            cluster: cluster.map(str::to_string),
        })
    }
    fn set_snapshot_expiry(
        &self,
        table: &str,
        name: &str,
        expire_micros: Option<u64>,
    ) -> Result<Vec<u8>> {
        self.ask(Op::SetSnapshotExpiry {
            table: table.to_string(),
            name: name.to_string(),
            expire_micros,
        })
    }
    fn snapshot_manifests(&self, table: &str) -> Result<Vec<Vec<u8>>> {
        self.ask(Op::SnapshotManifests {
            table: table.to_string(),
        })
    }
    fn snapshot_manifest(&self, table: &str, name: &str) -> Result<Vec<u8>> {
        self.ask(Op::SnapshotManifest {
            table: table.to_string(),
            name: name.to_string(),
        })
    }
    fn delete_snapshot(&self, table: &str, name: &str) -> Result<()> {
        self.ask(Op::DeleteSnapshot {
            table: table.to_string(),
            name: name.to_string(),
        })
    }
    fn tablet_split(&self, server: &str, parent: u64, children: &[u64]) {
        self.tell(Op::TabletSplit {
            server: server.to_string(),
            parent,
            children: children.to_vec(),
        })
    }
    fn wake(&self) {
        self.tell(Op::Wake)
    }
    fn kill(&self) {
        self.tell(Op::KillMaster)
    }
    fn report(&self) -> Vec<String> {
        self.ask(Op::MasterReport).unwrap_or_else(|e| {
            vec![format!(
                "master={} state=unreachable error={e:?}",
                self.name
            )]
        })
    }
}

/// Finds servers and masters of the cluster by the addresses in their lock
/// files, keeping one connection per daemon.
pub struct Dialer {
    lock: Option<Arc<dyn LockService>>,
    rt: Handle,
    secret: Option<Secret>,
    tls: Option<Arc<crate::tls::Tls>>,
    peers: RwLock<HashMap<String, Peer>>,
    servers: RwLock<HashMap<String, Arc<RemoteServer>>>,
}

impl Dialer {
    pub(crate) fn new(
        lock: Arc<dyn LockService>,
        rt: Handle,
        secret: Option<Secret>,
        tls: Option<Arc<crate::tls::Tls>>,
    ) -> Dialer {
        Dialer {
            lock: Some(lock),
            rt,
            secret,
            tls,
            peers: RwLock::new(HashMap::new()),
            servers: RwLock::new(HashMap::new()),
        }
    }

    /// A dialer that knows no lock service: it reaches only the servers it
    /// is given the addresses of ([`Dialer::server_at`]).
    pub(crate) fn without_directory(
        rt: Handle,
        secret: Option<Secret>,
        tls: Option<Arc<crate::tls::Tls>>,
    ) -> Dialer {
        Dialer {
            lock: None,
            rt,
            secret,
            tls,
            peers: RwLock::new(HashMap::new()),
            servers: RwLock::new(HashMap::new()),
        }
    }

    fn peer(&self, addr: &str) -> Option<Peer> {
        if let Some(p) = self.peers.read().get(addr) {
            return Some(p.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| log::warn!("bad internal address {addr:?}: {e}"))
            .ok()?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
        // Connects on first use, and again after a failure.
        let channel = {
            let _in_runtime = self.rt.enter();
            match &self.tls {
                Some(tls) => {
                    endpoint.connect_with_connector_lazy(crate::tls::Connector { tls: tls.clone() })
                }
                None => endpoint.connect_lazy(),
            }
        };
        let peer = Peer {
            addr: addr.to_string(),
            channel,
            rt: self.rt.clone(),
            secret: self.secret.clone(),
            frames: self.tls.is_none().then(|| Arc::new(Pool::new(addr))),
        };
        self.peers.write().insert(addr.to_string(), peer.clone());
        Some(peer)
    }

    /// Tablet server `name` of the daemon at `addr`.
    pub(crate) fn server_at(&self, addr: &str, name: &str) -> Option<Arc<dyn TabletService>> {
        let s = Arc::new(RemoteServer {
            name: name.to_string(),
            peer: self.peer(addr)?,
        });
        self.servers.write().insert(name.to_string(), s.clone());
        Some(s)
    }
}

impl super::lanes::DaemonCalls for Dialer {
    /// Asks the daemon at `addr` itself (not one of its servers) `op`, a
    /// cache-coherence operation; its reply's bytes.
    fn daemon_call(&self, addr: &str, op: Op, timeout: Duration) -> Result<Vec<u8>> {
        let peer = self
            .peer(addr)
            .ok_or_else(|| Error::Unavailable(format!("bad daemon address {addr:?}")))?;
        let reply = peer
            .call(Call { server: None, op }, timeout)
            .map_err(|s| Error::Unavailable(format!("{addr}: {}", s.message())))?;
        reply.0.map_err(Error::from)
    }
}

impl protocol::Dialer for Dialer {
    fn server(&self, name: &str) -> Option<Arc<dyn TabletService>> {
        if let Some(s) = self.servers.read().get(name) {
            return Some(s.clone());
        }
        // A server's name is never reused, so neither is its address.
        let addr = protocol::server_address(&**self.lock.as_ref()?, name)?;
        self.server_at(&addr, name)
    }

    fn server_names(&self) -> Vec<String> {
        let Some(lock) = &self.lock else {
            return Vec::new();
        };
        let names = protocol::list_servers(&**lock).unwrap_or_default();
        // Forget the stubs of servers that are gone.
        self.servers.write().retain(|n, _| names.contains(n));
        names
    }

    fn active_master(&self) -> Option<Arc<dyn MasterService>> {
        let (name, addr) = protocol::master_address(&**self.lock.as_ref()?)?;
        Some(Arc::new(RemoteMaster {
            name,
            peer: self.peer(&addr)?,
        }))
    }
}
