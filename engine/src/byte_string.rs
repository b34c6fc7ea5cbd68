//! Byte strings as serde byte strings, for `#[serde(with = ...)]`: serde
//! sees a `Vec<u8>` as a sequence of `u8`, which a decoder reads one byte
//! at a time (2–3% of a remote point read's CPU, docs/internal-rpc.md).
//! bincode lays out both the same way (a length, then the bytes), so the
//! internal RPC's wire does not change; a self-describing format that
//! writes byte strings as sequences (JSON) is still read.

use serde::de::{SeqAccess, Visitor};
use serde::{Deserializer, Serializer};

/// Elements a sequence is given room for before they arrive.
const PREALLOCATE: usize = 4096;

/// Writes `v` as a byte string.
pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(v)
}

/// Reads a byte string (or a sequence of bytes).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct Bytes;
    impl<'de> Visitor<'de> for Bytes {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a byte string")
        }
        fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOCATE));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    d.deserialize_byte_buf(Bytes)
}
