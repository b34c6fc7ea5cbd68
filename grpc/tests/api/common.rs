//! The server, clients and helpers every test uses.

use engine::{Bigtable, Options};
use grpc::admin_v2::{self as a, bigtable_table_admin_client::BigtableTableAdminClient};
use grpc::v2::{self, bigtable_client::BigtableClient, row_filter::Filter as F};
use std::sync::Arc;
use tonic::transport::Channel;

pub const P: &str = "projects/p/instances/i";

pub struct Env {
    pub bt: Bigtable,
    _server: grpc::Running,
    pub data: BigtableClient<Channel>,
    pub admin: BigtableTableAdminClient<Channel>,
    /// For clients of services the server does not have.
    pub ch: Channel,
}

pub async fn env() -> Env {
    env_with(engine::access::Tokens::default()).await
}

/// A server that also knows these bearer tokens.
pub async fn env_with(tokens: engine::access::Tokens) -> Env {
    server(engine::access::Identity::new(0, 0), tokens).await
}

/// A server whose callers (on loopback, without a token) are `who`.
pub async fn env_as(who: engine::access::Identity) -> Env {
    server(who, engine::access::Tokens::default()).await
}

async fn server(who: engine::access::Identity, tokens: engine::access::Tokens) -> Env {
    server_on(Arc::new(gfs::MemStore::new()), who, tokens).await
}

/// A server over `store`: a second one over the same store after the first
/// [`Env::close`]s is the daemon restarted.
pub async fn env_on(store: Arc<dyn gfs::FileStore>) -> Env {
    let root = engine::access::Identity::new(0, 0);
    server_on(store, root, engine::access::Tokens::default()).await
}

impl Env {
    /// Stops the server and closes the engine (its logs synced).
    pub async fn close(self) {
        let Env { bt, _server, .. } = self;
        _server.stop();
        tokio::task::spawn_blocking(move || bt.close().unwrap())
            .await
            .unwrap();
    }
}

async fn server_on(
    store: Arc<dyn gfs::FileStore>,
    who: engine::access::Identity,
    tokens: engine::access::Tokens,
) -> Env {
    let bt =
        tokio::task::spawn_blocking(move || Bigtable::open(store, Options::default()).unwrap())
            .await
            .unwrap();
    let shared = grpc::Shared {
        bt: bt.clone(),
        owner: 0,
        group: 0,
        changes: None,
        auth: grpc::Auth {
            loopback: Some(who),
            tokens,
        },
        instance: "i".into(),
    };
    let server = grpc::start(shared, "127.0.0.1:0".parse().unwrap()).unwrap();
    let ch = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Env {
        bt,
        _server: server,
        data: BigtableClient::new(ch.clone()).max_decoding_message_size(64 << 20),
        admin: BigtableTableAdminClient::new(ch.clone()),
        ch,
    }
}

pub fn tname(t: &str) -> String {
    format!("{P}/tables/{t}")
}

pub fn family(max_versions: Option<i32>) -> a::ColumnFamily {
    a::ColumnFamily {
        gc_rule: max_versions.map(|n| a::GcRule {
            rule: Some(a::gc_rule::Rule::MaxNumVersions(n)),
        }),
        value_type: None,
    }
}

/// Makes table `t` with `families`, made in the order given (a
/// CreateTable's map goes out in no particular order).
pub async fn create(e: &mut Env, t: &str, families: &[&str]) {
    use a::modify_column_families_request::{modification::Mod, Modification};
    e.admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: t.into(),
            table: Some(a::Table::default()),
            initial_splits: vec![],
        })
        .await
        .unwrap();
    if families.is_empty() {
        return;
    }
    let modifications = families
        .iter()
        .map(|f| Modification {
            id: f.to_string(),
            r#mod: Some(Mod::Create(family(None))),
            ..Default::default()
        })
        .collect();
    e.admin
        .modify_column_families(a::ModifyColumnFamiliesRequest {
            name: tname(t),
            modifications,
            ignore_warnings: false,
        })
        .await
        .unwrap();
}

pub fn set(f: &str, q: &str, ts: i64, v: &[u8]) -> v2::Mutation {
    v2::Mutation {
        mutation: Some(v2::mutation::Mutation::SetCell(v2::mutation::SetCell {
            family_name: f.into(),
            column_qualifier: q.as_bytes().to_vec(),
            timestamp_micros: ts,
            value: v.to_vec(),
        })),
    }
}

pub async fn mutate(
    e: &mut Env,
    t: &str,
    row: &str,
    ms: Vec<v2::Mutation>,
) -> Result<(), tonic::Status> {
    e.data
        .mutate_row(v2::MutateRowRequest {
            table_name: tname(t),
            row_key: row.as_bytes().to_vec(),
            mutations: ms,
            ..Default::default()
        })
        .await
        .map(|_| ())
}

/// Every cell of a table (all versions).
pub async fn read_all(e: &mut Env, t: &str) -> Vec<(Vec<u8>, Vec<Cell>)> {
    read(
        e,
        v2::ReadRowsRequest {
            table_name: tname(t),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

/// GetTable with the full view.
pub async fn get_table(e: &mut Env, t: &str) -> a::Table {
    e.admin
        .get_table(a::GetTableRequest {
            name: tname(t),
            view: a::table::View::Full as i32,
        })
        .await
        .unwrap()
        .into_inner()
}

/// (family, qualifier, timestamp, value, labels)
pub type Cell = (String, Vec<u8>, i64, Vec<u8>, Vec<String>);

/// Reassembles chunks as a client does, checking the protocol's rules.
pub async fn read(
    e: &mut Env,
    req: v2::ReadRowsRequest,
) -> Result<Vec<(Vec<u8>, Vec<Cell>)>, tonic::Status> {
    use v2::read_rows_response::cell_chunk::RowStatus;
    let mut stream = e.data.read_rows(req).await?.into_inner();
    let mut rows = Vec::new();
    let mut key: Option<Vec<u8>> = None;
    let mut cells: Vec<Cell> = Vec::new();
    let (mut fam, mut qual) = (String::new(), Vec::new());
    let mut partial: Option<Cell> = None;
    while let Some(resp) = stream.message().await? {
        for c in resp.chunks {
            if partial.is_none() {
                if !c.row_key.is_empty() {
                    assert!(key.is_none(), "a new row key inside a row");
                    key = Some(c.row_key.clone());
                }
                assert!(key.is_some(), "a chunk before any row key");
                if let Some(f) = &c.family_name {
                    fam = f.clone();
                    assert!(c.qualifier.is_some(), "a family without a qualifier");
                }
                if let Some(q) = &c.qualifier {
                    qual = q.clone();
                }
                partial = Some((
                    fam.clone(),
                    qual.clone(),
                    c.timestamp_micros,
                    Vec::new(),
                    c.labels.clone(),
                ));
            }
            let p = partial.as_mut().unwrap();
            p.3.extend_from_slice(&c.value);
            if c.value_size == 0 {
                cells.push(partial.take().unwrap());
            } else {
                assert!(c.row_status.is_none(), "row status inside a split value");
            }
            match c.row_status {
                Some(RowStatus::CommitRow(true)) => {
                    let k = key.take().unwrap();
                    if let Some((last, _)) = rows.last() {
                        assert_ne!(last, &k, "row sent twice");
                    }
                    rows.push((k, std::mem::take(&mut cells)));
                    fam.clear();
                    qual.clear();
                }
                Some(RowStatus::ResetRow(true)) => {
                    key = None;
                    cells.clear();
                }
                _ => {}
            }
        }
    }
    assert!(
        key.is_none() && partial.is_none(),
        "stream ended inside a row"
    );
    Ok(rows)
}

pub fn req(t: &str) -> v2::ReadRowsRequest {
    v2::ReadRowsRequest {
        table_name: tname(t),
        ..Default::default()
    }
}

pub fn with_filter(t: &str, f: F) -> v2::ReadRowsRequest {
    v2::ReadRowsRequest {
        filter: Some(v2::RowFilter { filter: Some(f) }),
        ..req(t)
    }
}

/// The filters applied one after another.
pub fn chain(fs: Vec<F>) -> F {
    F::Chain(v2::row_filter::Chain {
        filters: fs
            .into_iter()
            .map(|f| v2::RowFilter { filter: Some(f) })
            .collect(),
    })
}

pub fn keys(rows: &[(Vec<u8>, Vec<Cell>)]) -> Vec<String> {
    rows.iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect()
}

pub fn values(rows: &[(Vec<u8>, Vec<Cell>)]) -> Vec<String> {
    rows.iter()
        .flat_map(|(_, cs)| {
            cs.iter()
                .map(|c| String::from_utf8_lossy(&c.3).into_owned())
        })
        .collect()
}

/// A codec that sends `T` and keeps the reply's bytes, to see the daemon's
/// own encoding (a decoded map forgets its entries' order and shape).
pub struct Raw<T>(std::marker::PhantomData<T>);

impl<T: prost::Message + Send + 'static> tonic::codec::Codec for Raw<T> {
    type Encode = T;
    type Decode = Vec<u8>;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawDecoder
    }
}

pub struct RawDecoder;

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(buf.copy_to_bytes(buf.remaining()).to_vec()))
    }
}

/// The reply bytes of the unary call `path` (`/service/Method`) with `req`.
pub async fn raw_call<T: prost::Message + Send + 'static>(
    e: &Env,
    path: &'static str,
    req: T,
) -> Result<Vec<u8>, tonic::Status> {
    let mut g = tonic::client::Grpc::new(e.ch.clone());
    g.ready().await.unwrap();
    let path = http::uri::PathAndQuery::from_static(path);
    g.unary(
        tonic::Request::new(req),
        path,
        Raw(std::marker::PhantomData),
    )
    .await
    .map(|r| r.into_inner())
}

/// The keys of a message's `map<string, _>` field `tag`, in the order the
/// bytes give them, each with its entry's bytes (key and value).
pub fn map_entries(bytes: &[u8], tag: u32) -> Vec<(String, Vec<u8>)> {
    fields(bytes)
        .into_iter()
        .filter(|(t, _)| *t == tag)
        .map(|(_, entry)| {
            let key = fields(&entry)
                .into_iter()
                .find(|(t, _)| *t == 1)
                .map(|(_, k)| String::from_utf8(k).unwrap())
                .unwrap_or_default();
            (key, entry)
        })
        .collect()
}

/// The length-delimited fields of a message, in order (others skipped).
pub fn fields(mut buf: &[u8]) -> Vec<(u32, Vec<u8>)> {
    use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (tag, wt) = decode_key(&mut buf).unwrap();
        if wt == WireType::LengthDelimited {
            let n = decode_varint(&mut buf).unwrap() as usize;
            out.push((tag, buf[..n].to_vec()));
            buf = &buf[n..];
        } else {
            skip_field(wt, tag, &mut buf, DecodeContext::default()).unwrap();
        }
    }
    out
}

/// Table Admin routes, for [`raw_call`].
pub const GET_TABLE: &str = "/google.bigtable.admin.v2.BigtableTableAdmin/GetTable";
pub const CREATE_TABLE: &str = "/google.bigtable.admin.v2.BigtableTableAdmin/CreateTable";
pub const LIST_TABLES: &str = "/google.bigtable.admin.v2.BigtableTableAdmin/ListTables";
pub const MODIFY_FAMILIES: &str =
    "/google.bigtable.admin.v2.BigtableTableAdmin/ModifyColumnFamilies";
pub const UPDATE_TABLE: &str = "/google.bigtable.admin.v2.BigtableTableAdmin/UpdateTable";

/// A done operation's metadata and result.
pub fn finished<M: prost::Message + Default>(
    op: googleapis_tonic_google_bigtable_admin_v2::google::longrunning::Operation,
) -> (
    M,
    Option<googleapis_tonic_google_bigtable_admin_v2::google::longrunning::operation::Result>,
) {
    assert!(op.done);
    (M::decode(&*op.metadata.unwrap().value).unwrap(), op.result)
}

/// The code a call fails with.
pub async fn code<T>(
    call: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> tonic::Code {
    match call.await {
        Ok(_) => panic!("the call succeeded"),
        Err(s) => s.code(),
    }
}
