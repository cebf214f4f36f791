//! Logs (`tracing`, text or JSON on stderr) and OpenTelemetry traces (OTLP/gRPC), with W3C
//! trace context taken from incoming gRPC metadata.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter};

use crate::config::Telemetry;

/// Telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// A global subscriber was already set.
    #[error("logging: {0}")]
    Subscriber(String),
}

/// Flushes and stops the trace pipeline when dropped.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.force_flush();
            let _ = p.shutdown();
        }
    }
}

/// Installs the process's subscriber: logs filtered by `log_level`; when an OTLP endpoint is
/// set, this crate's spans are exported (independently of the log level).
pub fn init(t: &Telemetry) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter =
        EnvFilter::try_new(&t.log_level).map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = if t.json_logs {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(log_filter)
            .boxed()
    };
    let mut provider = None;
    let otel = match &t.otlp_endpoint {
        None => None,
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            let p = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                    t.sample_ratio,
                ))))
                .with_resource(
                    Resource::builder()
                        .with_service_name(t.service_name.clone())
                        .build(),
                )
                .build();
            let tracer = p.tracer("gpusched-server");
            provider = Some(p);
            let spans =
                filter::Targets::new().with_target("gpusched_service", tracing::Level::INFO);
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(spans),
            )
        }
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    Ok(TelemetryGuard { provider })
}

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
