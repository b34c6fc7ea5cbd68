//! The daemon's own reply bytes, as clients other than this crate's decode
//! them: every map entry with its value, families in the order they were
//! made (as Cloud Bigtable returns them, and as it counts a row's cells),
//! `gc_rule {}` echoed, one-line errors.

use crate::aggregate::int64_aggregate;
use crate::common::*;
use grpc::admin_v2::{
    self as a, modify_column_families_request::modification::Mod,
    modify_column_families_request::Modification, r#type::aggregate,
};
use grpc::v2::{self, row_filter::Filter as F};
use prost::Message;
use std::sync::Arc;
use tonic::Code;

fn made(id: &str, cf: a::ColumnFamily) -> Modification {
    Modification {
        id: id.into(),
        r#mod: Some(Mod::Create(cf)),
        ..Default::default()
    }
}

fn dropped(id: &str) -> Modification {
    Modification {
        id: id.into(),
        r#mod: Some(Mod::Drop(true)),
        ..Default::default()
    }
}

async fn modify(e: &Env, t: &str, ms: Vec<Modification>) -> Vec<u8> {
    let req = a::ModifyColumnFamiliesRequest {
        name: tname(t),
        modifications: ms,
        ignore_warnings: false,
    };
    raw_call(e, MODIFY_FAMILIES, req).await.unwrap()
}

async fn get_raw(e: &Env, t: &str) -> Vec<u8> {
    let req = a::GetTableRequest {
        name: tname(t),
        view: a::table::View::SchemaView as i32,
    };
    raw_call(e, GET_TABLE, req).await.unwrap()
}

/// The `column_families` keys of a Table's bytes, in the bytes' order.
fn families(table: &[u8]) -> Vec<String> {
    map_entries(table, 3).into_iter().map(|(k, _)| k).collect()
}

/// A Table's bytes as the first (only) table of a ListTables reply.
fn listed(reply: &[u8]) -> Vec<u8> {
    fields(reply)
        .into_iter()
        .find(|(t, _)| *t == 1)
        .map(|(_, b)| b)
        .unwrap()
}

/// The families of the row, in the order the reply gives its cells.
fn row_families(rows: &[(Vec<u8>, Vec<Cell>)]) -> Vec<(String, String)> {
    rows.iter()
        .flat_map(|(_, cells)| cells.iter())
        .map(|c| (c.0.clone(), String::from_utf8(c.1.clone()).unwrap()))
        .collect()
}

fn named(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(f, q)| (f.to_string(), q.to_string()))
        .collect()
}

/// The Node.js samples' filter table: `stats_summary` made before
/// `cell_plan`, and an aggregate family after both.
async fn phone_table(e: &mut Env) {
    e.admin
        .create_table(a::CreateTableRequest {
            parent: P.into(),
            table_id: "t".into(),
            table: Some(a::Table::default()),
            initial_splits: vec![],
        })
        .await
        .unwrap();
    modify(
        e,
        "t",
        vec![
            made("stats_summary", family(None)),
            made("cell_plan", family(None)),
        ],
    )
    .await;
    let sum = int64_aggregate(aggregate::Aggregator::Sum(aggregate::Sum {}));
    modify(e, "t", vec![made("counts", sum)]).await;
    let ms = vec![
        set("cell_plan", "data_plan_01gb", 1000, b"true"),
        set("cell_plan", "data_plan_05gb", 1000, b"true"),
        set("stats_summary", "connected_cell", 1000, b"1"),
        set("stats_summary", "connected_wifi", 1000, b"1"),
        set("stats_summary", "os_build", 1000, b"PQ2A.190405.003"),
    ];
    mutate(e, "t", "phone#4c410523#20190501", ms).await.unwrap();
}

const MADE: [&str; 3] = ["stats_summary", "cell_plan", "counts"];

/// Every admin reply gives the families in creation order; a row's cells
/// come family by family in that order, and the per-row limit and offset
/// filters (in reads and in a check-and-mutate predicate) count them so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn families_in_creation_order() {
    let mut e = env().await;
    phone_table(&mut e).await;
    assert_eq!(families(&get_raw(&e, "t").await), MADE);
    let list = a::ListTablesRequest {
        parent: P.into(),
        view: a::table::View::SchemaView as i32,
        ..Default::default()
    };
    let reply = raw_call(&e, LIST_TABLES, list).await.unwrap();
    assert_eq!(families(&listed(&reply)), MADE);

    let rows = read_all(&mut e, "t").await;
    let all = [
        ("stats_summary", "connected_cell"),
        ("stats_summary", "connected_wifi"),
        ("stats_summary", "os_build"),
        ("cell_plan", "data_plan_01gb"),
        ("cell_plan", "data_plan_05gb"),
    ];
    assert_eq!(row_families(&rows), named(&all));
    let rows = read(&mut e, with_filter("t", F::CellsPerRowLimitFilter(2)))
        .await
        .unwrap();
    assert_eq!(row_families(&rows), named(&all[..2]));
    let rows = read(&mut e, with_filter("t", F::CellsPerRowOffsetFilter(3)))
        .await
        .unwrap();
    assert_eq!(row_families(&rows), named(&all[3..]));
    // The filter that runs here (it labels) sees the same order.
    let labelled = chain(vec![
        F::CellsPerRowLimitFilter(1),
        F::ApplyLabelTransformer("first".into()),
    ]);
    let rows = read(&mut e, with_filter("t", labelled)).await.unwrap();
    assert_eq!(row_families(&rows), named(&all[..1]));

    // The predicate "the row's first cell is a cell_plan cell" fails.
    let first_is_plan = chain(vec![
        F::CellsPerRowLimitFilter(1),
        F::FamilyNameRegexFilter("cell_plan".into()),
    ]);
    let r = e
        .data
        .check_and_mutate_row(v2::CheckAndMutateRowRequest {
            table_name: tname("t"),
            row_key: b"phone#4c410523#20190501".to_vec(),
            predicate_filter: Some(v2::RowFilter {
                filter: Some(first_is_plan),
            }),
            true_mutations: vec![set("stats_summary", "matched", 1000, b"x")],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.predicate_matched);

    // A family dropped and made again is the newest.
    let reply = modify(&e, "t", vec![dropped("stats_summary")]).await;
    assert_eq!(families(&reply), ["cell_plan", "counts"]);
    let reply = modify(&e, "t", vec![made("stats_summary", family(Some(1)))]).await;
    assert_eq!(families(&reply), ["cell_plan", "counts", "stats_summary"]);
}

/// The order is kept by the stored schema: a restarted daemon, and a
/// table made with its families in one CreateTable (in the request's
/// order), give it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn family_order_survives_a_restart() {
    let store: Arc<dyn gfs::FileStore> = Arc::new(gfs::MemStore::new());
    let mut e = env_on(store.clone()).await;
    phone_table(&mut e).await;
    // CreateTable's map, encoded by hand in the order z, a, m.
    let mut table = Vec::new();
    for f in ["z", "a", "m"] {
        let entry = [&[0x0a, 0x01], f.as_bytes(), &[0x12, 0x00]].concat();
        table.extend_from_slice(&[0x1a, entry.len() as u8]);
        table.extend_from_slice(&entry);
    }
    let mut req = a::CreateTableRequest {
        parent: P.into(),
        table_id: "made".into(),
        ..Default::default()
    }
    .encode_to_vec();
    req.push(0x1a); // field 3, table
    req.push(table.len() as u8);
    req.extend_from_slice(&table);
    let reply = raw_call(&e, CREATE_TABLE, RawBytes(req)).await.unwrap();
    assert_eq!(families(&reply), ["z", "a", "m"]);
    e.close().await;

    let mut e = env_on(store).await;
    assert_eq!(families(&get_raw(&e, "t").await), MADE);
    assert_eq!(families(&get_raw(&e, "made").await), ["z", "a", "m"]);
    let rows = read(&mut e, with_filter("t", F::CellsPerRowLimitFilter(1)))
        .await
        .unwrap();
    assert_eq!(
        row_families(&rows),
        named(&[("stats_summary", "connected_cell")])
    );
}

/// A message sent as the bytes given (a request whose field order matters).
#[derive(Clone, Default, PartialEq)]
struct RawBytes(Vec<u8>);

impl std::fmt::Debug for RawBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02x?}", self.0)
    }
}

impl Message for RawBytes {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: prost::encoding::WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Every map entry of every admin reply carries its value, an empty
/// ColumnFamily as `12 00`: CreateTable, GetTable, ListTables,
/// ModifyColumnFamilies, and the Table inside UpdateTable's operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reply_writes_every_map_value() {
    let e = env().await;
    let empty = |bytes: &[u8], what: &str| {
        let entries = map_entries(bytes, 3);
        assert!(!entries.is_empty(), "{what}: no families {bytes:02x?}");
        for (k, entry) in entries {
            let value = fields(&entry).into_iter().find(|(t, _)| *t == 2);
            assert!(value.is_some(), "{what}: family {k} without its value");
        }
    };
    let create = a::CreateTableRequest {
        parent: P.into(),
        table_id: "t".into(),
        table: Some(a::Table {
            column_families: [("f".to_string(), family(None))].into(),
            ..Default::default()
        }),
        initial_splits: vec![],
    };
    empty(
        &raw_call(&e, CREATE_TABLE, create).await.unwrap(),
        "CreateTable",
    );
    empty(&get_raw(&e, "t").await, "GetTable");
    let list = a::ListTablesRequest {
        parent: P.into(),
        view: a::table::View::Full as i32,
        ..Default::default()
    };
    let reply = raw_call(&e, LIST_TABLES, list).await.unwrap();
    empty(&listed(&reply), "ListTables");
    let reply = modify(&e, "t", vec![made("g", family(None))]).await;
    empty(&reply, "ModifyColumnFamilies");
    let update = a::UpdateTableRequest {
        table: Some(a::Table {
            name: tname("t"),
            deletion_protection: true,
            ..Default::default()
        }),
        update_mask: Some(prost_types::FieldMask {
            paths: vec!["deletion_protection".into()],
        }),
        ..Default::default()
    };
    let op = raw_call(&e, UPDATE_TABLE, update).await.unwrap();
    // Operation.response (5) is an Any whose value (2) is the Table.
    let any = fields(&op).into_iter().find(|(t, _)| *t == 5).unwrap().1;
    let table = fields(&any).into_iter().find(|(t, _)| *t == 2).unwrap().1;
    empty(&table, "UpdateTable's operation");
}

/// `gc_rule {}` comes back as sent (cbt shows "" for it), no rule as none
/// (`<never>`); both keep every version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_gc_rule_is_echoed() {
    let mut e = env().await;
    let sent = a::ColumnFamily {
        gc_rule: Some(a::GcRule { rule: None }),
        value_type: None,
    };
    create(&mut e, "t", &["none"]).await;
    let reply = modify(&e, "t", vec![made("empty", sent.clone())]).await;
    let t = a::Table::decode(&reply[..]).unwrap();
    assert_eq!(
        t.column_families["empty"].gc_rule,
        Some(a::GcRule::default())
    );
    assert_eq!(t.column_families["none"].gc_rule, None);
    // An update to `{}` as well, and GetTable says the same.
    let update = Modification {
        id: "none".into(),
        r#mod: Some(Mod::Update(sent)),
        ..Default::default()
    };
    modify(&e, "t", vec![update]).await;
    let t = get_table(&mut e, "t").await;
    assert_eq!(
        t.column_families["none"].gc_rule,
        Some(a::GcRule::default())
    );
    // Nothing is collected under it.
    for ts in 1..=5 {
        mutate(&mut e, "t", "r", vec![set("empty", "q", ts * 1000, b"v")])
            .await
            .unwrap();
    }
    assert_eq!(read_all(&mut e, "t").await[0].1.len(), 5);
}

/// A regex that does not compile is INVALID_ARGUMENT on one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_regex_is_one_line() {
    let mut e = env().await;
    create(&mut e, "t", &["f"]).await;
    mutate(&mut e, "t", "r", vec![set("f", "q", 1000, b"v")])
        .await
        .unwrap();
    for f in [
        F::ValueRegexFilter(b"a(".to_vec()),
        F::RowKeyRegexFilter(b"[z-a]".to_vec()),
        F::FamilyNameRegexFilter("(?P<".into()),
    ] {
        let s = read(&mut e, with_filter("t", f)).await.unwrap_err();
        assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
        assert!(!s.message().contains('\n'), "{:?}", s.message());
        assert!(s.message().contains("regex"), "{:?}", s.message());
    }
}
