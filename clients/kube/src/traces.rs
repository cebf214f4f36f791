//! One trace per pod: the spans of the extender calls (`POST /filter`, `POST /prioritize`,
//! `POST /bind`), whose context the gRPC client sends to the gpusched service, so that the
//! service's RPC spans are their children.
//!
//! kube-scheduler sends no trace context to an extender, and it calls filter, prioritize and
//! bind as three separate HTTP requests (again on every retry, possibly to another replica after
//! a failover). To put all of one pod's calls into one trace without keeping state, the trace id
//! is derived from the pod's UID: the first 16 bytes of SHA-256 of the UID (`printf %s "$UID" |
//! sha256sum | cut -c1-32` finds it). Each call's span is a root span of that trace. Hashing
//! (rather than using the UUID's bytes) keeps the id uniformly distributed, which ratio sampling
//! relies on (a UUID's variant bits would make `sample_ratio` below 0.5 sample no pod at all), and
//! makes the decision the same for all of a pod's calls.
//!
//! The spans are made with the OpenTelemetry API (a `tracing` span cannot choose its trace id)
//! on the tracer of `gpusched_runtime::logging`, so they share its resource, sampler and
//! exporter; they are attached to the call's future, where `gpusched_client` finds them.

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, TraceId, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use sha2::{Digest as _, Sha256};

use crate::metrics::{ExtenderCall, ExtenderOutcome};

/// The trace id of a pod's scheduling (see the module documentation); `None` for an empty UID.
pub fn pod_trace_id(uid: &str) -> Option<TraceId> {
    if uid.is_empty() {
        return None;
    }
    let digest = Sha256::digest(uid.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    Some(TraceId::from_bytes(bytes)).filter(|id| *id != TraceId::INVALID)
}

/// The pod an extender call is about (empty strings when the request does not say).
#[derive(Clone, Copy, Debug)]
pub struct PodRef<'a> {
    /// Namespace.
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// UID.
    pub uid: &'a str,
}

impl<'a> PodRef<'a> {
    /// From the pod of `ExtenderArgs`.
    pub fn of(pod: Option<&'a k8s_openapi::api::core::v1::Pod>) -> Self {
        let m = pod.map(|p| &p.metadata);
        PodRef {
            namespace: m.and_then(|m| m.namespace.as_deref()).unwrap_or(""),
            name: m.and_then(|m| m.name.as_deref()).unwrap_or(""),
            uid: m.and_then(|m| m.uid.as_deref()).unwrap_or(""),
        }
    }
}

/// Makes the extender calls' spans; off (no spans, no cost) without a tracer.
#[derive(Clone, Debug, Default)]
pub struct PodTraces {
    tracer: Option<SdkTracer>,
}

impl PodTraces {
    /// Spans on this tracer (`None`: traces off).
    pub fn new(tracer: Option<SdkTracer>) -> Self {
        PodTraces { tracer }
    }

    /// No spans.
    pub fn off() -> Self {
        PodTraces::default()
    }

    /// Starts the span of one extender call (HTTP server span with the pod's `k8s.*`
    /// attributes and `extra`) in the pod's trace.
    pub fn start(&self, call: ExtenderCall, pod: PodRef<'_>, extra: Vec<KeyValue>) -> CallSpan {
        let Some(tracer) = &self.tracer else {
            return CallSpan { cx: Context::new() };
        };
        let route = format!("/{}", call.as_str());
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", route.clone()),
            KeyValue::new("url.path", route.clone()),
            KeyValue::new("k8s.namespace.name", pod.namespace.to_owned()),
            KeyValue::new("k8s.pod.name", pod.name.to_owned()),
            KeyValue::new("k8s.pod.uid", pod.uid.to_owned()),
        ];
        attributes.extend(extra);
        let mut builder = tracer
            .span_builder(format!("POST {route}"))
            .with_kind(SpanKind::Server)
            .with_attributes(attributes);
        if let Some(id) = pod_trace_id(pod.uid) {
            builder = builder.with_trace_id(id);
        }
        // A root span: never a child of whatever context happens to be current.
        let span = builder.start_with_context(tracer, &Context::new());
        CallSpan {
            cx: Context::new().with_span(span),
        }
    }
}

/// The span of one extender call; ended by [`CallSpan::end`] (or when dropped, e.g. when
/// kube-scheduler gives up on the request).
#[derive(Debug)]
pub struct CallSpan {
    cx: Context,
}

impl CallSpan {
    /// The context to attach to the call's future (`opentelemetry::context::FutureExt`).
    pub fn context(&self) -> Context {
        self.cx.clone()
    }

    /// The trace id as lowercase hex, for log lines (empty when traces are off).
    pub fn trace_id(&self) -> String {
        let sc = self.cx.span().span_context().clone();
        if sc.is_valid() {
            sc.trace_id().to_string()
        } else {
            String::new()
        }
    }

    /// Adds attributes known after the call.
    pub fn set(&self, attributes: Vec<KeyValue>) {
        self.cx.span().set_attributes(attributes);
    }

    /// Ends the span with the call's outcome (`gpusched.outcome`, as in the metrics) and, for an
    /// error, an error status carrying the message kube-scheduler gets.
    pub fn end(self, outcome: ExtenderOutcome, error: Option<&str>) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("gpusched.outcome", outcome.as_str()));
        if let Some(e) = error {
            span.set_status(Status::error(e.to_owned()));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn trace_id_is_the_sha256_prefix_of_the_uid() {
        // printf %s 3f1c6f0e-8d2a-4b1e-9c3a-5e7d2f4a6b8c | sha256sum | cut -c1-32
        let id = pod_trace_id("3f1c6f0e-8d2a-4b1e-9c3a-5e7d2f4a6b8c").unwrap();
        let hex = format!("{id}");
        let digest = Sha256::digest(b"3f1c6f0e-8d2a-4b1e-9c3a-5e7d2f4a6b8c");
        let want: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, want);
        assert_eq!(pod_trace_id(""), None);
        assert_ne!(pod_trace_id("a"), pod_trace_id("b"));
    }

    /// Ratio sampling decides on the low 8 bytes of the trace id: with ids derived from UUIDs by
    /// hashing, about half of the pods are sampled at 0.5 (with the UUID's own bytes, whose
    /// variant bits fix the top of byte 8, none would be).
    #[test]
    fn ratio_sampling_of_pod_traces_is_unbiased() {
        use opentelemetry::trace::{SamplingDecision, SpanKind};
        use opentelemetry_sdk::trace::{Sampler, ShouldSample as _};
        let sampler = Sampler::TraceIdRatioBased(0.5);
        let sampled = (0..2000u32)
            .filter(|i| {
                // UUID v4 shape: version nibble 4, variant bits 10.
                let uid = format!(
                    "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                    i * 7919,
                    i,
                    i,
                    i,
                    i
                );
                let id = pod_trace_id(&uid).unwrap();
                let r = sampler.should_sample(None, id, "x", &SpanKind::Server, &[], &[]);
                r.decision == SamplingDecision::RecordAndSample
            })
            .count();
        assert!((800..1200).contains(&sampled), "{sampled} of 2000 sampled");
    }
}
