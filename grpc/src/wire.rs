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
    fn encode_full(mut self, buf: &mut impl BufMut) {
        // The fields in number order: name (1), the maps (2, 3), the rest.
        let name = std::mem::take(&mut self.name);
        if !name.is_empty() {
            encoding::string::encode(1, &name, buf);
        }
        for (k, v) in std::mem::take(&mut self.cluster_states) {
            entry(2, &k, &v, buf);
        }
        for (k, v) in std::mem::take(&mut self.column_families) {
            entry(3, &k, &v, buf);
        }
        self.encode_raw(buf);
    }
}

impl FullMaps for a::ListTablesResponse {
    fn encode_full(mut self, buf: &mut impl BufMut) {
        for t in std::mem::take(&mut self.tables) {
            let mut bytes = Vec::new();
            t.encode_full(&mut bytes);
            encoding::encode_key(1, WireType::LengthDelimited, buf);
            encoding::encode_varint(bytes.len() as u64, buf);
            buf.put_slice(&bytes);
        }
        self.encode_raw(buf);
    }
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
