//! The internal service's codec: each message is its serde form in bincode
//! (the messages are the engine's own types, so no second schema to keep in
//! step; both ends run the same build of the daemon). Decoding is bounded:
//! by the message's bytes (bincode's limit) and by how deep values nest
//! (see `depth.rs`), so no payload can overflow a stack.

use super::depth::{Bounded, Budget, MAX_DECODE_DEPTH};
use bincode::Options;
use bytes::{Buf, BufMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Encodes `E` and decodes `D` with bincode.
pub struct WireCodec<E, D>(PhantomData<(E, D)>);

impl<E, D> Default for WireCodec<E, D> {
    fn default() -> Self {
        WireCodec(PhantomData)
    }
}

impl<E, D> Codec for WireCodec<E, D>
where
    E: Serialize + Send + 'static,
    D: DeserializeOwned + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = WireEncoder<E>;
    type Decoder = WireDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        WireEncoder(PhantomData)
    }
    fn decoder(&mut self) -> Self::Decoder {
        WireDecoder(PhantomData)
    }
}

/// The encoding half of [`WireCodec`].
pub struct WireEncoder<E>(PhantomData<E>);

impl<E: Serialize> Encoder for WireEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // Into a Vec, then one copy: bincode writes a byte string one byte
        // at a time (the engine's `Vec<u8>` fields are sequences to serde),
        // and each write through the buffer's `Write` adapter is a call.
        let bytes = bincode::serialize(&item)
            .map_err(|e| Status::internal(format!("cannot encode a message: {e}")))?;
        dst.put_slice(&bytes);
        Ok(())
    }
}

/// The decoding half of [`WireCodec`].
pub struct WireDecoder<D>(PhantomData<D>);

impl<D: DeserializeOwned> Decoder for WireDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        // From one contiguous slice, for the same reason: through `Read`,
        // every byte of a value is a `read_exact` (about 20 µs a 1 KB cell).
        let bytes = src.copy_to_bytes(src.remaining());
        decode_bounded(&bytes)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}

/// `bytes` as a `T`: at most `bytes.len()` bytes read (a length claimed
/// beyond them fails instead of allocating), nested at most
/// [`MAX_DECODE_DEPTH`] levels.
pub(crate) fn decode_bounded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    // The options of `bincode::deserialize`, with a limit.
    let opts = bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(bytes.len() as u64);
    let mut de = bincode::Deserializer::from_slice(bytes, opts);
    let budget = Budget::new(MAX_DECODE_DEPTH);
    T::deserialize(Bounded::new(&mut de, &budget))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::internal::messages::{Call, ScanCall};
    use engine::{RowFilter, ScanSpec};

    /// A filter of `depth` nested `Condition`s, as bincode lays it out,
    /// made by hand: serializing it would recurse as deep.
    pub(crate) fn nested_conditions(depth: usize) -> Vec<u8> {
        let one = RowFilter::Condition {
            predicate: Box::new(RowFilter::PassAll),
            true_filter: None,
            false_filter: None,
        };
        let b = bincode::serialize(&one).unwrap();
        // [Condition's tag][PassAll's tag][None][None]
        let (tag, rest) = b.split_at(4);
        let (leaf, nones) = rest.split_at(4);
        let mut out = tag.repeat(depth);
        out.extend_from_slice(leaf);
        out.extend(nones.repeat(depth));
        out
    }

    fn scan_with(filter: &[u8]) -> Vec<u8> {
        let call = ScanCall {
            server: "s".into(),
            tablet: 1,
            spec: ScanSpec::default(),
        };
        let mut b = bincode::serialize(&call).unwrap();
        // The spec's last field is its filter: None becomes Some(filter).
        assert_eq!(b.pop(), Some(0));
        b.push(1);
        b.extend_from_slice(filter);
        b
    }

    #[test]
    fn a_filter_nested_ten_thousand_deep_is_refused_not_a_stack_overflow() {
        let bytes = scan_with(&nested_conditions(10_000));
        assert!(bytes.len() < 100_000);
        // On a small stack, to show the decoder does not go deep at all.
        let r = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || decode_bounded::<ScanCall>(&bytes).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        let e = r.unwrap_err().to_string();
        assert!(e.contains("nested deeper"), "{e}");
    }

    #[test]
    fn filters_as_deep_as_the_engine_allows_still_decode() {
        let depth = engine::filter::MAX_DEPTH;
        let call: ScanCall = decode_bounded(&scan_with(&nested_conditions(depth))).unwrap();
        let mut f = call.spec.filter.unwrap();
        let mut seen = 0;
        while let RowFilter::Condition { predicate, .. } = f {
            seen += 1;
            f = *predicate;
        }
        assert_eq!(seen, depth);
        // The plain encoding reads back the same through the bounded decoder.
        let call = Call {
            server: Some("x".into()),
            op: crate::internal::messages::Op::SplitAtRows {
                table: 3,
                rows: vec![b"a".to_vec(); 5000],
            },
        };
        let back: Call = decode_bounded(&bincode::serialize(&call).unwrap()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{call:?}"));
    }

    #[test]
    fn a_length_beyond_the_message_fails_without_allocating_it() {
        let mut b = bincode::serialize(&Call {
            server: Some("x".into()),
            op: crate::internal::messages::Op::Kill,
        })
        .unwrap();
        // The server name's length word, made 2^60.
        b[1..9].copy_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(decode_bounded::<Call>(&b).is_err());
    }
}
