//! The internal service's codec. Each message travels as its serde form
//! in bincode (the messages are the engine's own types, so no second schema
//! to keep in step; both ends run the same build of the daemon), but the
//! codec only carries bytes: a request's body is decoded by its handler,
//! after the bytes are found to be those its token covers (see
//! `secret.rs`), and a reply's by the caller after its proof checks out.
//! Decoding is bounded: by the message's bytes (bincode's limit) and by how
//! deep values nest (see `depth.rs`), so no payload can overflow a stack.

use super::depth::{Bounded, Budget, MAX_DECODE_DEPTH};
use bincode::Options;
use bytes::{Buf, BufMut, Bytes};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// What crosses the wire: bytes, read and written whole.
pub trait Frame: Sized + Send + 'static {
    /// The bytes to send.
    fn into_bytes(self) -> Bytes;
    /// The message from the bytes received.
    fn from_bytes(b: Bytes) -> Result<Self, Status>;
}

/// A `T` encoded, not yet decoded.
pub struct Sealed<T> {
    bytes: Bytes,
    _t: PhantomData<fn() -> T>,
}

impl<T> Sealed<T> {
    /// The encoded bytes (what a token or proof covers).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl<T: Serialize> Sealed<T> {
    /// `v`, encoded.
    pub(crate) fn seal(v: &T) -> Result<Sealed<T>, Status> {
        // Into a Vec, then one copy: bincode writes a byte string one byte
        // at a time (the engine's `Vec<u8>` fields are sequences to serde),
        // and each write through the buffer's `Write` adapter is a call.
        let bytes = bincode::serialize(v)
            .map_err(|e| Status::internal(format!("cannot encode a message: {e}")))?;
        Ok(Sealed {
            bytes: bytes.into(),
            _t: PhantomData,
        })
    }
}

impl<T: DeserializeOwned> Sealed<T> {
    /// The message, decoded with bounds.
    pub(crate) fn open(&self) -> Result<T, Status> {
        decode_bounded(&self.bytes)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}

impl<T: 'static> Frame for Sealed<T> {
    fn into_bytes(self) -> Bytes {
        self.bytes
    }
    fn from_bytes(bytes: Bytes) -> Result<Self, Status> {
        Ok(Sealed {
            bytes,
            _t: PhantomData,
        })
    }
}

/// Bytes of a MAC.
pub(crate) const TAG: usize = 32;

/// A message of a stream with its own proof: a tag (empty without a
/// secret, else [`TAG`] bytes) before the encoded message.
pub struct Tagged<T> {
    pub(crate) tag: Option<[u8; TAG]>,
    pub(crate) body: Sealed<T>,
}

impl<T: 'static> Frame for Tagged<T> {
    fn into_bytes(self) -> Bytes {
        let mut b = Vec::with_capacity(1 + TAG + self.body.bytes.len());
        match self.tag {
            Some(t) => {
                b.push(TAG as u8);
                b.extend_from_slice(&t);
            }
            None => b.push(0),
        }
        b.extend_from_slice(&self.body.bytes);
        b.into()
    }
    fn from_bytes(mut b: Bytes) -> Result<Self, Status> {
        let malformed = || Status::invalid_argument("a stream message without its tag");
        if !b.has_remaining() {
            return Err(malformed());
        }
        let tag = match b.get_u8() {
            0 => None,
            n if n as usize == TAG && b.remaining() >= TAG => {
                let mut t = [0; TAG];
                b.copy_to_slice(&mut t);
                Some(t)
            }
            _ => return Err(malformed()),
        };
        Ok(Tagged {
            tag,
            body: Sealed::from_bytes(b)?,
        })
    }
}

/// Encodes `E` and decodes `D`, both bytes.
pub struct WireCodec<E, D>(PhantomData<(E, D)>);

impl<E, D> Default for WireCodec<E, D> {
    fn default() -> Self {
        WireCodec(PhantomData)
    }
}

impl<E: Frame, D: Frame> Codec for WireCodec<E, D> {
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

impl<E: Frame> Encoder for WireEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item.into_bytes());
        Ok(())
    }
}

/// The decoding half of [`WireCodec`].
pub struct WireDecoder<D>(PhantomData<D>);

impl<D: Frame> Decoder for WireDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        // One contiguous slice: through `Read`, every byte of a value would
        // be a `read_exact` (about 20 µs a 1 KB cell).
        D::from_bytes(src.copy_to_bytes(src.remaining())).map(Some)
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
