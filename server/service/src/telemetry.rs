//! W3C trace context from incoming gRPC metadata (logs and the OTLP pipeline are set up by
//! `gpusched_runtime::logging`).
//!
//! `traceparent` is parsed here per the W3C Trace Context specification rather than with
//! `opentelemetry_sdk`'s `TraceContextPropagator`, which refuses version-00 headers whose flags
//! are above `02`: OpenTelemetry SDKs send `03` (sampled + random trace id, Trace Context level 2)
//! and the specification says unknown flag bits are ignored. Only the sampled bit is kept.

use std::str::FromStr as _;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};

fn lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Parses a `traceparent` (and optional `tracestate`) header into a remote span context;
/// `None` when the header is not a valid W3C traceparent.
pub fn parse_traceparent(traceparent: &str, tracestate: Option<&str>) -> Option<SpanContext> {
    let mut parts = traceparent.trim().split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let span_id = parts.next()?;
    let flags = parts.next()?;
    let rest: Vec<&str> = parts.collect();
    if !lower_hex(version, 2) || version == "ff" {
        return None;
    }
    // Version 00 has exactly four fields; a later version may append more (ignored).
    if version == "00" && !rest.is_empty() {
        return None;
    }
    if !lower_hex(trace_id, 32) || !lower_hex(span_id, 16) || !lower_hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    // Unknown flag bits are ignored (W3C Trace Context, "trace-flags").
    let flags = TraceFlags::new(flags) & TraceFlags::SAMPLED;
    let state = tracestate
        .and_then(|s| TraceState::from_str(s).ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

/// The caller's trace context from `traceparent`/`tracestate` metadata (an empty context when
/// there is none or it is malformed: the server span then starts a trace).
pub fn remote_context(metadata: &tonic::metadata::MetadataMap) -> opentelemetry::Context {
    let get = |k: &str| metadata.get(k).and_then(|v| v.to_str().ok());
    match get("traceparent").and_then(|tp| parse_traceparent(tp, get("tracestate"))) {
        Some(sc) => opentelemetry::Context::new().with_remote_span_context(sc),
        None => opentelemetry::Context::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    #[test]
    fn flags_as_opentelemetry_sdks_send_them() {
        // 00: not sampled; 01: sampled (Go, Rust); 03: sampled + random (Python with
        // opentelemetry-instrumentation-grpc, Trace Context level 2); 09: an unknown bit.
        for (flags, sampled) in [("00", false), ("01", true), ("03", true), ("09", true)] {
            let sc = parse_traceparent(
                &format!("00-{TRACE}-{SPAN}-{flags}"),
                Some("vendor=abc,other=1"),
            )
            .unwrap_or_else(|| panic!("flags {flags} refused"));
            assert_eq!(sc.trace_id().to_string(), TRACE);
            assert_eq!(sc.span_id().to_string(), SPAN);
            assert_eq!(sc.is_sampled(), sampled, "{flags}");
            assert!(sc.is_remote());
            assert_eq!(sc.trace_state().get("vendor"), Some("abc"));
            assert_eq!(sc.trace_flags().to_u8() & !1, 0, "unknown bits dropped");
        }
    }

    #[test]
    fn future_versions_and_malformed_headers() {
        assert!(parse_traceparent(&format!("01-{TRACE}-{SPAN}-01-extra"), None).is_some());
        for bad in [
            format!("00-{TRACE}-{SPAN}-01-extra"),
            format!("ff-{TRACE}-{SPAN}-01"),
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{}-{SPAN}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{TRACE}-{SPAN}-1"),
            format!("00-{TRACE}-{SPAN}-zz"),
            format!("00-{TRACE}-{SPAN}"),
            String::new(),
        ] {
            assert!(parse_traceparent(&bad, None).is_none(), "{bad}");
        }
        // A malformed tracestate is dropped, not the parent.
        let sc = parse_traceparent(&format!("00-{TRACE}-{SPAN}-01"), Some("=,")).unwrap();
        assert!(sc.is_valid());
    }
}
