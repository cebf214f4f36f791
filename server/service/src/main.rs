//! `gpusched-server`: runs the placement service with the embedded default configuration,
//! layered with an optional file, `GPUSCHED_SERVER_...` variables and flags.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use gpusched_runtime::CommonArgs;
use gpusched_runtime::flags::{negate, not_given};
use gpusched_service::{FileConfig, Metrics, SPEC, Settings};
use serde::Serialize;

// Decoding a request allocates a string per card id and type: mimalloc makes that several
// times cheaper than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The stateless GPU placement service. Each flag sets the configuration key it names.
#[derive(Debug, Parser, Serialize)]
#[command(name = "gpusched-server", version, about)]
struct Cli {
    #[command(flatten)]
    #[serde(flatten)]
    common: CommonArgs,
    /// gRPC listen address (port 0 picks a free port). Key: listen.
    #[arg(long, value_name = "ADDR")]
    #[serde(rename = "listen", skip_serializing_if = "Option::is_none")]
    listen: Option<String>,
    /// Metrics (Prometheus) listen address. Key: metrics.listen.
    #[arg(long, value_name = "ADDR")]
    #[serde(rename = "metrics.listen", skip_serializing_if = "Option::is_none")]
    metrics_listen: Option<String>,
    /// Do not serve metrics. Key: metrics.enabled.
    #[arg(long)]
    #[serde(
        rename = "metrics.enabled",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_metrics: bool,
    /// Server certificate chain (PEM): turns TLS on. Key: tls.cert.
    #[arg(long, value_name = "PEM")]
    #[serde(rename = "tls.cert", skip_serializing_if = "Option::is_none")]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM). Key: tls.key.
    #[arg(long, value_name = "PEM")]
    #[serde(rename = "tls.key", skip_serializing_if = "Option::is_none")]
    tls_key: Option<PathBuf>,
    /// CA for client certificates (PEM): mutual TLS. Key: tls.client_ca.
    #[arg(long, value_name = "PEM")]
    #[serde(rename = "tls.client_ca", skip_serializing_if = "Option::is_none")]
    tls_client_ca: Option<PathBuf>,
    /// Default node policy (binpack | spread). Key: policy.node_scheduler_policy.
    #[arg(long, value_name = "POLICY")]
    #[serde(
        rename = "policy.node_scheduler_policy",
        skip_serializing_if = "Option::is_none"
    )]
    node_policy: Option<String>,
    /// Default GPU policy (binpack | spread | mutex | topology-aware | numa | a chain).
    /// Key: policy.gpu_scheduler_policy.
    #[arg(long, value_name = "POLICY")]
    #[serde(
        rename = "policy.gpu_scheduler_policy",
        skip_serializing_if = "Option::is_none"
    )]
    gpu_policy: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match SPEC.settings(&cli.common, &cli, FileConfig::validate) {
        Ok(settings) => SPEC.exit(run(settings)),
        Err(code) => code,
    }
}

fn run(settings: Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let _telemetry = gpusched_runtime::logging::init(&settings.telemetry, "gpusched_service")?;
        let metrics = Arc::new(Metrics::new());
        let running = gpusched_service::start(settings, metrics).await?;
        let metrics_text = running
            .metrics_addr
            .map_or_else(|| "off".to_owned(), |a| a.to_string());
        // Handlers installed before the start-up line: a SIGTERM right after it is graceful.
        let stop = gpusched_runtime::shutdown::signal();
        println!(
            "gpusched-server listening grpc={} metrics={metrics_text}",
            running.grpc_addr
        );
        tracing::info!(grpc = %running.grpc_addr, metrics = %metrics_text, "serving");
        stop.await;
        tracing::info!("shutting down: health NOT_SERVING, draining in-flight calls");
        running.shutdown().await?;
        tracing::info!("stopped");
        Ok(())
    })
}
