//! tonic codec: prost encoding; decoding from one contiguous slice (not through `Buf`).

use std::marker::PhantomData;

use bytes::Buf as _;
use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};

/// Like `tonic_prost::ProstCodec`, but decodes from a `&[u8]`.
#[derive(Debug, Clone, Copy)]
pub struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        SliceCodec(PhantomData)
    }
}

/// The decoder half.
#[derive(Debug, Clone, Copy)]
pub struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let n = buf.remaining();
        let r = if buf.chunk().len() >= n {
            let r = U::decode(&buf.chunk()[..n]);
            buf.advance(n);
            r
        } else {
            let b = buf.copy_to_bytes(n);
            U::decode(b.as_ref())
        };
        r.map(Some).map_err(|e| Status::internal(e.to_string()))
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = tonic_prost::ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(tonic::codec::BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}
