//! Installs the process's `tracing` subscriber: logs (text or JSON on stderr) filtered by
//! `log_level` and, when an OTLP endpoint is set, the binary's spans exported over OTLP/gRPC.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, filter};

use crate::telemetry::{LogFormat, Telemetry};

/// Logging or tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter {endpoint}: {reason}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The filter was refused or a global subscriber was already set.
    #[error("logging: {0}")]
    Subscriber(String),
}

/// Flushes and stops the trace pipeline when dropped; keep it alive in `main`.
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    /// Flushes the log writer thread when dropped.
    _logs: Option<crate::log_writer::LogGuard>,
    tracer: Option<SdkTracer>,
}

impl TelemetryGuard {
    /// The OpenTelemetry tracer of the pipeline (same resource, sampler and exporter as the
    /// `tracing` spans), when traces are on: for spans whose trace id the binary chooses
    /// itself, which `tracing` spans cannot do (e.g. `gpusched-kube`'s one trace per pod).
    pub fn tracer(&self) -> Option<SdkTracer> {
        self.tracer.clone()
    }

    /// Exports the spans ended so far now instead of at the next batch.
    pub fn force_flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.force_flush();
            let _ = p.shutdown();
        }
    }
}

/// `service.instance.id`: the host name and the process id, unique among running instances.
pub fn instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}-{}", std::process::id())
}

/// The resource of exported spans: `service.name`, `service.version` (the workspace version
/// every gpusched binary shares), `service.instance.id`, then `OTEL_RESOURCE_ATTRIBUTES`
/// (which may override them) and the SDK's `telemetry.sdk.*`; `OTEL_SERVICE_NAME` (already in
/// `t.service_name`) wins over a `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, as the
/// specification says.
pub fn resource(t: &Telemetry) -> Resource {
    use opentelemetry::KeyValue;
    use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
    let mut b = Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", t.service_name.clone()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", instance_id()),
        ])
        .with_detector(Box::new(EnvResourceDetector::new()))
        .with_detector(Box::new(TelemetryResourceDetector));
    if std::env::var("OTEL_SERVICE_NAME").is_ok_and(|s| !s.trim().is_empty()) {
        b = b.with_service_name(t.service_name.clone());
    }
    b.build()
}

/// Installs the subscriber. `span_target` is the crate whose spans are exported (e.g.
/// `gpusched_service`), independently of the log level; call inside a tokio runtime when an
/// OTLP endpoint is set.
pub fn init(t: &Telemetry, span_target: &'static str) -> Result<TelemetryGuard, TelemetryError> {
    let log_filter =
        EnvFilter::try_new(&t.log_level).map_err(|e| TelemetryError::Subscriber(e.to_string()))?;
    // Lines are written to stderr by a writer thread in batches, not by the thread that logs (a
    // decision's log line cost a write(2) on the request path); never lossy (see log_writer).
    let (writer, logs) =
        crate::log_writer::spawn(std::io::stderr(), crate::log_writer::Limits::default())
            .map_err(|e| TelemetryError::Subscriber(format!("log writer thread: {e}")))?;
    let fmt = match t.log_format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .with_filter(log_filter)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(writer)
            .with_filter(log_filter)
            .boxed(),
    };
    let mut provider = None;
    let mut tracer_out = None;
    let otel = match &t.otlp_endpoint {
        None => None,
        Some(endpoint) => {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| TelemetryError::Exporter {
                    endpoint: endpoint.clone(),
                    reason: e.to_string(),
                })?;
            let p = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                    t.sample_ratio,
                ))))
                .with_resource(resource(t))
                .build();
            let tracer = p.tracer(t.service_name.clone());
            tracer_out = Some(tracer.clone());
            provider = Some(p);
            // The crate's spans from DEBUG (a call's span is DEBUG so that log lines at info
            // need not print it), its events (span events in the backend) from INFO.
            let spans = filter::filter_fn(move |m| {
                let level = if m.is_span() {
                    tracing::Level::DEBUG
                } else {
                    tracing::Level::INFO
                };
                *m.level() <= level
                    && m.target()
                        .strip_prefix(span_target)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
            });
            Some(
                // Without code.*, thread.* and busy_ns/idle_ns on every span (noise in the
                // backend, and cost).
                tracing_opentelemetry::layer()
                    .with_location(false)
                    .with_threads(false)
                    .with_tracked_inactivity(false)
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
    Ok(TelemetryGuard {
        provider,
        _logs: Some(logs),
        tracer: tracer_out,
    })
}
