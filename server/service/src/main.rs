//! `gpusched-server`: runs the placement service with the embedded default configuration,
//! layered with an optional file, `GPUSCHED_...` variables and flags.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser;
use gpusched_service::{FileConfig, Metrics, Overrides};

// Decoding a request allocates a string per card id and type: mimalloc makes that several
// times cheaper than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The stateless GPU placement service.
#[derive(Debug, Parser)]
#[command(name = "gpusched-server", version, about)]
struct Cli {
    /// Configuration file (.toml, .yaml or .yml); defaults are embedded.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// gRPC listen address (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Metrics (Prometheus) listen address.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// Do not serve metrics.
    #[arg(long)]
    no_metrics: bool,
    /// Server certificate chain (PEM): turns TLS on.
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[arg(long, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// CA for client certificates (PEM): mutual TLS.
    #[arg(long, value_name = "PEM")]
    tls_client_ca: Option<PathBuf>,
    /// Default node policy (binpack | spread).
    #[arg(long, value_name = "POLICY")]
    node_policy: Option<String>,
    /// Default GPU policy (binpack | spread | mutex | topology-aware | numa | a chain).
    #[arg(long, value_name = "POLICY")]
    gpu_policy: Option<String>,
    /// Log format (text | json).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Log filter, e.g. info or gpusched_service=debug.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// OTLP/gRPC endpoint for traces, e.g. http://127.0.0.1:4317.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let flags = Overrides {
        listen: cli.listen,
        metrics_listen: cli.metrics_listen,
        no_metrics: cli.no_metrics,
        tls_cert: cli.tls_cert,
        tls_key: cli.tls_key,
        tls_client_ca: cli.tls_client_ca,
        node_policy: cli.node_policy,
        gpu_policy: cli.gpu_policy,
        log_format: cli.log_format,
        log_level: cli.log_level,
        otlp_endpoint: cli.otlp_endpoint,
    };
    let file_config: FileConfig =
        match gpusched_service::config::load(cli.config.as_deref(), &env, &flags) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("gpusched-server: {e}");
                return std::process::ExitCode::from(2);
            }
        };
    if cli.print_config {
        print!("{}", file_config.to_toml());
        return std::process::ExitCode::SUCCESS;
    }
    let settings = match file_config.validate(&env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpusched-server: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(settings) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpusched-server: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(settings: gpusched_service::Settings) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let _telemetry = gpusched_service::telemetry::init(&settings.telemetry)?;
        let metrics = Arc::new(Metrics::new());
        let running = gpusched_service::start(settings, metrics).await?;
        let metrics_text = running
            .metrics_addr
            .map_or_else(|| "off".to_owned(), |a| a.to_string());
        println!(
            "gpusched-server listening grpc={} metrics={metrics_text}",
            running.grpc_addr
        );
        tracing::info!(grpc = %running.grpc_addr, metrics = %metrics_text, "serving");
        shutdown_signal().await;
        tracing::info!("shutting down: health NOT_SERVING, draining in-flight calls");
        running.shutdown().await?;
        tracing::info!("stopped");
        Ok(())
    })
}
