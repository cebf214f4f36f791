//! W3C trace context from incoming gRPC metadata (logs and the OTLP pipeline are set up by
//! `gpusched_runtime::logging`).

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;

struct MetadataExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

/// The caller's trace context from `traceparent`/`tracestate` metadata.
pub fn remote_context(
    propagator: &TraceContextPropagator,
    metadata: &tonic::metadata::MetadataMap,
) -> opentelemetry::Context {
    propagator.extract(&MetadataExtractor(metadata))
}
