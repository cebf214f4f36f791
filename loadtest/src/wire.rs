//! The gRPC side: pre-encoded requests go through tonic's generic client with a pass-through
//! codec (the client copies bytes, it does not encode or clone messages), over several HTTP/2
//! connections; answers are scanned for a few fields instead of being decoded.

use std::time::Duration;

use bytes::{Buf as _, BufMut as _, Bytes};
use http::uri::PathAndQuery;
use serde::Serialize;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

use crate::synth::Encoded;

/// The placement RPC under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Rpc {
    /// `PlacementService/Allocate`.
    Allocate,
    /// `PlacementService/Filter`.
    Filter,
    /// `PlacementService/Score`.
    Score,
    /// `PlacementService/Preempt` (over gRPC only; placed workloads from `--placed-per-node`).
    Preempt,
}

impl Rpc {
    /// The gRPC path.
    pub fn path(self) -> PathAndQuery {
        // The service's RPC table.
        PathAndQuery::from_static(
            match self {
                Rpc::Allocate => gpusched_service::Rpc::Allocate,
                Rpc::Filter => gpusched_service::Rpc::Filter,
                Rpc::Score => gpusched_service::Rpc::Score,
                Rpc::Preempt => gpusched_service::Rpc::Preempt,
            }
            .path(),
        )
    }
}

/// Writes a pre-encoded request; reads the answer as bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawCodec;

/// Encoder half of [`RawCodec`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RawEncoder;

/// Decoder half of [`RawCodec`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Encoded;
    type Error = tonic::Status;

    fn encode(&mut self, item: Encoded, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.reserve(item.len());
        dst.put_slice(&item.nodes);
        dst.put_slice(&item.workload);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let n = src.remaining();
        Ok(Some(src.copy_to_bytes(n)))
    }
}

impl Codec for RawCodec {
    type Encode = Encoded;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

/// Largest message either way (the server's default limit).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Opens `n` HTTP/2 connections to `addr` (`host:port` or a URI), through the Rust client's
/// connection builder.
pub async fn connect(addr: &str, n: usize) -> anyhow::Result<Vec<Channel>> {
    let builder = gpusched_client::ClientBuilder::new(addr).connect_timeout(Duration::from_secs(5));
    let mut out = Vec::with_capacity(n.max(1));
    for _ in 0..n.max(1) {
        // One connect is one TCP connection (one HTTP/2 session).
        let ch = builder
            .connect_channel()
            .await
            .map_err(|e| anyhow::anyhow!("connecting to {addr}: {e}"))?;
        out.push(ch);
    }
    Ok(out)
}

/// One unary call with a pre-encoded request.
pub async fn call(
    channel: &Channel,
    path: PathAndQuery,
    req: Encoded,
    timeout: Option<Duration>,
) -> Result<Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("connection not ready: {e}")))?;
    let mut request = tonic::Request::new(req);
    if let Some(t) = timeout {
        request.set_timeout(t);
    }
    grpc.unary(request, path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// A few facts of an answer, read without decoding it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Allocate: placed; Filter/Score: at least one feasible node.
    pub placed: bool,
    /// Feasible nodes.
    pub feasible: u32,
    /// Failed nodes (Allocate: `failed_node_count`, or those listed by a server without it).
    pub failed: u32,
    /// Size of the answer, bytes.
    pub bytes: usize,
}

/// A protobuf field: its number and either a varint or a length-delimited payload.
enum Field<'a> {
    Varint(u32, u64),
    Bytes(u32, &'a [u8]),
    Other,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Iterates the top-level fields of a message; stops at the first malformed byte.
fn fields(buf: &[u8]) -> impl Iterator<Item = Field<'_>> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= buf.len() {
            return None;
        }
        let key = varint(buf, &mut pos)?;
        let number = u32::try_from(key >> 3).ok()?;
        match key & 7 {
            0 => Some(Field::Varint(number, varint(buf, &mut pos)?)),
            1 => {
                pos = pos.checked_add(8)?;
                Some(Field::Other)
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len)?;
                let payload = buf.get(pos..end)?;
                pos = end;
                Some(Field::Bytes(number, payload))
            }
            5 => {
                pos = pos.checked_add(4)?;
                Some(Field::Other)
            }
            _ => None,
        }
    })
}

/// Reads the outcome of an encoded Allocate/Filter/Score/Preempt response.
pub fn summarize(rpc: Rpc, buf: &[u8]) -> Summary {
    let mut s = Summary {
        bytes: buf.len(),
        ..Summary::default()
    };
    match rpc {
        Rpc::Allocate => {
            // AllocateResponse.result (1) -> AllocationResult: placed (1), failed_nodes (5),
            // feasible_node_count (8), failed_node_count (11).
            let (mut listed, mut counted) = (0u32, 0u32);
            for f in fields(buf) {
                if let Field::Bytes(1, result) = f {
                    for g in fields(result) {
                        match g {
                            Field::Varint(1, v) => s.placed = v != 0,
                            Field::Varint(8, v) => s.feasible = u32::try_from(v).unwrap_or(0),
                            Field::Varint(11, v) => counted = u32::try_from(v).unwrap_or(0),
                            Field::Bytes(5, _) => listed += 1,
                            _ => {}
                        }
                    }
                }
            }
            s.failed = listed.max(counted);
        }
        Rpc::Filter | Rpc::Score => {
            // Filter: feasible_node_names (1); Score: scores (1); both: failed_nodes (2).
            for f in fields(buf) {
                match f {
                    Field::Bytes(1, _) => s.feasible += 1,
                    Field::Bytes(2, _) => s.failed += 1,
                    _ => {}
                }
            }
            s.placed = s.feasible > 0;
        }
        Rpc::Preempt => {
            // PreemptResponse: nodes (2) with the verdict not_needed (3) | victims (4) |
            // not_candidate (5); choice (3): NOT_NEEDED 1, EVICT 2, NO_CANDIDATE 3.
            for f in fields(buf) {
                match f {
                    Field::Bytes(2, node) => {
                        for g in fields(node) {
                            match g {
                                Field::Bytes(3 | 4, _) => s.feasible += 1,
                                Field::Bytes(5, _) => s.failed += 1,
                                _ => {}
                            }
                        }
                    }
                    Field::Varint(3, c) => s.placed = c == 1 || c == 2,
                    _ => {}
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gpusched_api::v1;
    use prost::Message as _;

    fn failed(name: &str) -> v1::FailedNode {
        v1::FailedNode {
            node_name: name.into(),
            message: "1/8 CardInsufficientMemory".into(),
            ..v1::FailedNode::default()
        }
    }

    #[test]
    fn allocate_answer_is_summarized() {
        let r = v1::AllocateResponse {
            result: Some(v1::AllocationResult {
                placed: true,
                node_name: "n1".into(),
                failed_nodes: vec![failed("a"), failed("b")],
                feasible_node_count: 300,
                requests_gpu: true,
                node_score: Some(v1::NodeScore {
                    fragmentation: None,
                    node_name: "n1".into(),
                    raw_score: 12.5,
                    normalized_score: 100,
                }),
                ..v1::AllocationResult::default()
            }),
        };
        let b = r.encode_to_vec();
        let s = summarize(Rpc::Allocate, &b);
        assert_eq!(
            s,
            Summary {
                placed: true,
                feasible: 300,
                failed: 2,
                bytes: b.len()
            }
        );
    }

    #[test]
    fn unplaced_and_filter_answers() {
        let r = v1::AllocateResponse {
            result: Some(v1::AllocationResult {
                failed_nodes: vec![failed("a")],
                ..v1::AllocationResult::default()
            }),
        };
        let s = summarize(Rpc::Allocate, &r.encode_to_vec());
        assert!(!s.placed);
        assert_eq!(s.failed, 1);
        // Counted, not listed (options.failed_nodes = NONE).
        let r = v1::AllocateResponse {
            result: Some(v1::AllocationResult {
                placed: true,
                failed_node_count: 7,
                ..v1::AllocationResult::default()
            }),
        };
        let s = summarize(Rpc::Allocate, &r.encode_to_vec());
        assert_eq!((s.placed, s.failed), (true, 7));

        let f = v1::FilterResponse {
            feasible_node_names: vec!["a".into(), "b".into(), "c".into()],
            failed_nodes: vec![failed("d")],
            requests_gpu: true,
            ..v1::FilterResponse::default()
        };
        let s = summarize(Rpc::Filter, &f.encode_to_vec());
        assert!(s.placed);
        assert_eq!((s.feasible, s.failed), (3, 1));

        let sc = v1::ScoreResponse {
            scores: vec![v1::NodeScore::default(); 4],
            ..v1::ScoreResponse::default()
        };
        let s = summarize(Rpc::Score, &sc.encode_to_vec());
        let pr = v1::PreemptResponse {
            requests_gpu: true,
            nodes: vec![
                v1::NodePreemption {
                    node_name: "a".into(),
                    verdict: Some(v1::node_preemption::Verdict::Victims(v1::Victims::default())),
                    ..v1::NodePreemption::default()
                },
                v1::NodePreemption {
                    node_name: "b".into(),
                    verdict: Some(v1::node_preemption::Verdict::NotCandidate(
                        v1::NotCandidate::default(),
                    )),
                    ..v1::NodePreemption::default()
                },
            ],
            choice: v1::PreemptChoiceKind::Evict as i32,
            node_name: "a".into(),
            effective_policy: None,
        };
        let p = summarize(Rpc::Preempt, &pr.encode_to_vec());
        assert!(p.placed);
        assert_eq!((p.feasible, p.failed), (1, 1));
        assert_eq!(s.feasible, 4);
    }

    #[test]
    fn garbage_does_not_panic() {
        for b in [&[0xff_u8; 12][..], &[0x0a, 0x50, 0x01][..], &[][..]] {
            let _ = summarize(Rpc::Allocate, b);
            let _ = summarize(Rpc::Filter, b);
        }
    }

    #[test]
    fn concatenated_parts_decode_as_one_request() {
        let spec = crate::synth::ClusterSpec::new(3, 2);
        let pool = crate::synth::Pool::build(
            &spec,
            &crate::synth::Mix::default(),
            crate::synth::Form::Kubernetes,
            2,
            9,
        );
        let bytes = pool.encoded[1].to_vec();
        let decoded = v1::AllocateRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(decoded, pool.allocate_request(1).unwrap());
        let as_filter = v1::FilterRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(as_filter.nodes.len(), 3);
        // With options: every request carries them.
        let mut pool = pool;
        let options = v1::PlacementOptions {
            failed_nodes: v1::FailedNodes::None as i32,
            ..v1::PlacementOptions::default()
        };
        pool.set_options(options.clone());
        let decoded = v1::AllocateRequest::decode(pool.encoded[1].to_vec().as_slice()).unwrap();
        assert_eq!(decoded.options, Some(options));
        assert_eq!(decoded, pool.allocate_request(1).unwrap());
    }
}
