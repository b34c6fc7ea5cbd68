//! The Table Admin replies' encoding. prost leaves a map entry's value out
//! when it is the default (`column_families { key: "f" }` for a family
//! without a GC rule), where every other protobuf runtime and Cloud Bigtable
//! write it (`value {}`); protobufjs, under the Node.js client, decodes the
//! missing value as null and fails. So a `Table` goes out with every map
//! entry's value; everything else is prost's encoding.

use crate::admin_v2 as a;
use prost::bytes::BufMut;
use prost::encoding::{self, WireType};
use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::Status;

/// A reply whose maps carry every entry's value.
pub(crate) trait FullMaps {
    /// Writes the message's fields (without a length prefix).
    fn encode_full(self, buf: &mut impl BufMut);
}

impl FullMaps for () {
    fn encode_full(self, _: &mut impl BufMut) {}
}

impl FullMaps for a::Table {
    fn encode_full(self, buf: &mut impl BufMut) {
        OrderedTable {
            table: self,
            order: Vec::new(),
        }
        .encode_full(buf)
    }
}

/// A `Table` reply whose families go out in the order they were made, as
/// Cloud Bigtable returns them (a decoded map forgets the order; the bytes
/// keep it, and clients that keep insertion order show it).
pub(crate) struct OrderedTable {
    pub table: a::Table,
    /// The families' names in creation order; any other family follows.
    pub order: Vec<String>,
}

impl FullMaps for OrderedTable {
    fn encode_full(self, buf: &mut impl BufMut) {
        let OrderedTable { mut table, order } = self;
        // The fields in number order: name (1), the maps (2, 3), the rest.
        let name = std::mem::take(&mut table.name);
        if !name.is_empty() {
            encoding::string::encode(1, &name, buf);
        }
        let states: std::collections::BTreeMap<_, _> = std::mem::take(&mut table.cluster_states)
            .into_iter()
            .collect();
        for (k, v) in states {
            entry(2, &k, &v, buf);
        }
        let mut families = std::mem::take(&mut table.column_families);
        for k in order {
            if let Some(v) = families.remove(&k) {
                entry(3, &k, &v, buf);
            }
        }
        let rest: std::collections::BTreeMap<_, _> = families.into_iter().collect();
        for (k, v) in rest {
            entry(3, &k, &v, buf);
        }
        table.encode_raw(buf);
    }
}

/// A `ListTablesResponse` whose tables are [`OrderedTable`]s.
pub(crate) struct TableList {
    pub tables: Vec<OrderedTable>,
    pub next_page_token: String,
}

impl FullMaps for TableList {
    fn encode_full(self, buf: &mut impl BufMut) {
        for t in self.tables {
            nested(1, t, buf);
        }
        if !self.next_page_token.is_empty() {
            encoding::string::encode(2, &self.next_page_token, buf);
        }
    }
}

impl FullMaps for a::ListTablesResponse {
    fn encode_full(self, buf: &mut impl BufMut) {
        TableList {
            tables: self
                .tables
                .into_iter()
                .map(|table| OrderedTable {
                    table,
                    order: Vec::new(),
                })
                .collect(),
            next_page_token: self.next_page_token,
        }
        .encode_full(buf)
    }
}

/// Replies without maps: prost's own encoding.
macro_rules! no_maps {
    ($($t:ty),*) => {
        $(impl FullMaps for $t {
            fn encode_full(self, buf: &mut impl BufMut) {
                self.encode_raw(buf);
            }
        })*
    };
}

no_maps!(
    a::UpdateTableMetadata,
    a::UndeleteTableMetadata,
    a::CreateBackupMetadata,
    a::RestoreTableMetadata,
    a::CopyBackupMetadata,
    a::UpdateClusterMetadata,
    a::PartialUpdateClusterMetadata,
    a::UpdateAppProfileMetadata,
    a::Cluster,
    a::ListClustersResponse,
    a::AppProfile,
    a::ListAppProfilesResponse,
    crate::iam_v1::Policy,
    crate::iam_v1::TestIamPermissionsResponse
);

impl FullMaps for a::Instance {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        // labels (5) and tags (12), every value written even when empty.
        let labels: std::collections::BTreeMap<_, _> =
            std::mem::take(&mut self.labels).into_iter().collect();
        for (k, v) in labels {
            str_entry(5, &k, &v, buf);
        }
        let tags: std::collections::BTreeMap<_, _> =
            std::mem::take(&mut self.tags).into_iter().collect();
        for (k, v) in tags {
            str_entry(12, &k, &v, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::ListInstancesResponse {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        for i in std::mem::take(&mut self.instances) {
            nested(1, i, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::CreateInstanceRequest {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        if let Some(i) = self.instance.take() {
            nested(3, i, buf);
        }
        let clusters: std::collections::BTreeMap<_, _> =
            std::mem::take(&mut self.clusters).into_iter().collect();
        for (k, v) in clusters {
            entry(4, &k, &v, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::PartialUpdateInstanceRequest {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        if let Some(i) = self.instance.take() {
            nested(1, i, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::CreateInstanceMetadata {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        if let Some(r) = self.original_request.take() {
            nested(1, r, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::UpdateInstanceMetadata {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        if let Some(r) = self.original_request.take() {
            nested(1, r, buf);
        }
        self.encode_raw(buf);
    }
}

/// A message field `tag` written by [`FullMaps`].
fn nested(tag: u32, m: impl FullMaps, buf: &mut impl BufMut) {
    let mut bytes = Vec::new();
    m.encode_full(&mut bytes);
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(bytes.len() as u64, buf);
    buf.put_slice(&bytes);
}

/// One `map<string, string>` entry with both its key and its value.
fn str_entry(tag: u32, key: &String, value: &String, buf: &mut impl BufMut) {
    let len = encoding::string::encoded_len(1, key) + encoding::string::encoded_len(2, value);
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(len as u64, buf);
    encoding::string::encode(1, key, buf);
    encoding::string::encode(2, value, buf);
}

/// A CreateTableRequest with the order its `column_families` entries came
/// in: the decoded map forgets it, and a table made with several families
/// makes them in the order the client wrote them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct OrderedCreate {
    pub req: a::CreateTableRequest,
    /// The families' names in the request's order (repeats left in).
    pub order: Vec<String>,
}

impl Message for OrderedCreate {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        self.req.encode_raw(buf)
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl prost::bytes::Buf,
        ctx: encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // `table` (3): its bytes read once, merged and scanned for names.
        if tag != 3 || wire_type != WireType::LengthDelimited {
            return self.req.merge_field(tag, wire_type, buf, ctx);
        }
        let mut bytes = Vec::new();
        encoding::bytes::merge(wire_type, &mut bytes, buf, ctx.clone())?;
        let table = self.req.table.get_or_insert_with(Default::default);
        table.merge(&bytes[..])?;
        self.order.extend(map_keys(&bytes, 3)?);
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.req.encoded_len()
    }

    fn clear(&mut self) {
        self.req.clear();
        self.order.clear();
    }
}

/// The keys of a message's `map<string, _>` field `tag`, in wire order.
fn map_keys(mut buf: &[u8], tag: u32) -> Result<Vec<String>, prost::DecodeError> {
    let mut keys = Vec::new();
    while !buf.is_empty() {
        let (t, wt) = encoding::decode_key(&mut buf)?;
        if t != tag || wt != WireType::LengthDelimited {
            encoding::skip_field(wt, t, &mut buf, encoding::DecodeContext::default())?;
            continue;
        }
        let mut entry = Vec::new();
        encoding::bytes::merge(wt, &mut entry, &mut buf, encoding::DecodeContext::default())?;
        let mut e = &entry[..];
        let mut key = String::new();
        while !e.is_empty() {
            let (et, ewt) = encoding::decode_key(&mut e)?;
            if et == 1 && ewt == WireType::LengthDelimited {
                encoding::string::merge(ewt, &mut key, &mut e, encoding::DecodeContext::default())?;
            } else {
                encoding::skip_field(ewt, et, &mut e, encoding::DecodeContext::default())?;
            }
        }
        keys.push(key);
    }
    Ok(keys)
}

/// One `map<string, V>` entry with both its key and its value, empty or not.
fn entry<V: Message>(tag: u32, key: &String, value: &V, buf: &mut impl BufMut) {
    let len = encoding::string::encoded_len(1, key) + encoding::message::encoded_len(2, value);
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(len as u64, buf);
    encoding::string::encode(1, key, buf);
    encoding::message::encode(2, value, buf);
}

/// The Table Admin service's codec: replies by [`FullMaps`], requests by
/// prost.
pub(crate) struct AdminCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for AdminCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for AdminCodec<T, U>
where
    T: FullMaps + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = FullEncoder<T>;
    type Decoder = tonic_prost::ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        FullEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// Encodes a reply by [`FullMaps`].
pub(crate) struct FullEncoder<T>(PhantomData<T>);

impl<T: FullMaps> Encoder for FullEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode_full(buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> a::Table {
        let mut t = a::Table {
            name: "projects/p/instances/i/tables/t".into(),
            granularity: a::table::TimestampGranularity::Millis as i32,
            ..Default::default()
        };
        t.column_families
            .insert("f".into(), a::ColumnFamily::default());
        t.column_families.insert(
            "g".into(),
            a::ColumnFamily {
                gc_rule: Some(a::GcRule {
                    rule: Some(a::gc_rule::Rule::MaxNumVersions(1)),
                }),
                value_type: None,
            },
        );
        t.cluster_states
            .insert("c".into(), a::table::ClusterState::default());
        t
    }

    fn encoded(m: impl FullMaps) -> Vec<u8> {
        let mut v = Vec::new();
        m.encode_full(&mut v);
        v
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[test]
    fn an_empty_family_carries_its_value() {
        let bytes = encoded(table());
        // column_families (3): key "f", value {} — what protobuf's own
        // runtimes write; prost alone writes `1a 03 0a 01 66`.
        assert!(contains(
            &bytes,
            &[0x1a, 0x05, 0x0a, 0x01, b'f', 0x12, 0x00]
        ));
        // cluster_states (2): key "c", value {}.
        assert!(contains(
            &bytes,
            &[0x12, 0x05, 0x0a, 0x01, b'c', 0x12, 0x00]
        ));
        // Decoded, it is the same table.
        assert_eq!(a::Table::decode(&bytes[..]).unwrap(), table());
    }

    #[test]
    fn listed_tables_carry_their_values() {
        let list = a::ListTablesResponse {
            tables: vec![table(), table()],
            next_page_token: "next".into(),
        };
        let bytes = encoded(list.clone());
        assert!(contains(
            &bytes,
            &[0x1a, 0x05, 0x0a, 0x01, b'f', 0x12, 0x00]
        ));
        assert_eq!(a::ListTablesResponse::decode(&bytes[..]).unwrap(), list);
    }
}
