//! The internal service's codec: each message is its serde form in bincode
//! (the messages are the engine's own types, so no second schema to keep in
//! step; both ends run the same build of the daemon).

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
        bincode::deserialize(&bytes)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}
