//! `gpusched-agent`: runs the node agent (default), or prints the node's inventory once
//! (`inventory --format json|hami|slurm-gres|raw|facts`).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gpusched_agent::agent::{self, AgentState, LoopSettings};
use gpusched_agent::config::{FileConfig, OutputFormat, SPEC, Settings};
use gpusched_agent::discovery::nvml::{NvmlOptions, NvmlSource};
use gpusched_agent::discovery::{DiscoveryError, EmptySource, GpuSource};
use gpusched_agent::format::{NodeInventory, render};
use gpusched_agent::health;
use gpusched_agent::inventory::{self, Normalizer as _, ServiceNormalizer};
use gpusched_agent::publish::{FilePublisher, KubePublisher, Sinks};
use gpusched_runtime::CommonArgs;
use gpusched_runtime::flags::{negate, not_given};
use serde::Serialize;

/// gpusched node agent: NVML inventory, normalised by the gpusched service, published for
/// HAMi-compatible schedulers (Node annotations), Slurm (gres.conf) and files. Each flag sets
/// the configuration key it names.
#[derive(Debug, Parser, Serialize)]
#[command(name = "gpusched-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    #[serde(skip)]
    command: Option<Command>,
    #[command(flatten)]
    #[serde(flatten)]
    common: CommonArgs,
    /// Node name (default: $NODE_NAME, else the host name). Key: node_name.
    #[arg(long, global = true, value_name = "NAME")]
    #[serde(rename = "node_name", skip_serializing_if = "Option::is_none")]
    node_name: Option<String>,
    /// gpusched service address, e.g. http://gpusched:50051. Key: service.address.
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(rename = "service.address", skip_serializing_if = "Option::is_none")]
    service_address: Option<String>,
    /// CA of the service's certificate (PEM): turns TLS on. Key: service.tls.ca.
    #[arg(long, global = true, value_name = "PEM")]
    #[serde(rename = "service.tls.ca", skip_serializing_if = "Option::is_none")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS. Key: service.tls.cert.
    #[arg(long, global = true, value_name = "PEM")]
    #[serde(rename = "service.tls.cert", skip_serializing_if = "Option::is_none")]
    tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS. Key: service.tls.key.
    #[arg(long, global = true, value_name = "PEM")]
    #[serde(rename = "service.tls.key", skip_serializing_if = "Option::is_none")]
    tls_key: Option<PathBuf>,
    /// Server name to verify the service certificate against. Key: service.tls.domain.
    #[arg(long, global = true, value_name = "NAME")]
    #[serde(rename = "service.tls.domain", skip_serializing_if = "Option::is_none")]
    tls_domain: Option<String>,
    /// Longest time between publications, e.g. 30s. Key: interval.
    #[arg(long, global = true, value_name = "DURATION")]
    #[serde(rename = "interval", skip_serializing_if = "Option::is_none")]
    interval: Option<String>,
    /// Time between reads of the cards, e.g. 5s. Key: poll_interval.
    #[arg(long, global = true, value_name = "DURATION")]
    #[serde(rename = "poll_interval", skip_serializing_if = "Option::is_none")]
    poll_interval: Option<String>,
    /// NVML library to load (default: libnvidia-ml.so.1, then libnvidia-ml.so). Key:
    /// nvml.library.
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(rename = "nvml.library", skip_serializing_if = "Option::is_none")]
    nvml_library: Option<PathBuf>,
    /// Publish zero cards when NVML cannot be loaded (instead of exiting with an error). Key:
    /// nvml.publish_empty_when_missing.
    #[arg(long, global = true)]
    #[serde(
        rename = "nvml.publish_empty_when_missing",
        skip_serializing_if = "not_given"
    )]
    publish_empty_when_missing: bool,
    /// sysfs root (tests). Key: nvml.sysfs_root.
    #[arg(long, global = true, value_name = "PATH", hide = true)]
    #[serde(rename = "nvml.sysfs_root", skip_serializing_if = "Option::is_none")]
    sysfs_root: Option<PathBuf>,
    /// Do not publish to Kubernetes. Key: kubernetes.enabled.
    #[arg(long, global = true)]
    #[serde(
        rename = "kubernetes.enabled",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_kubernetes: bool,
    /// Remove our Node annotations (and patched capacity) on clean shutdown. Key:
    /// kubernetes.remove_on_shutdown.
    #[arg(long, global = true)]
    #[serde(
        rename = "kubernetes.remove_on_shutdown",
        skip_serializing_if = "not_given"
    )]
    remove_on_shutdown: bool,
    /// Also patch the Node's status capacity/allocatable nvidia.com/gpu (healthy slots). Key:
    /// kubernetes.patch_capacity.
    #[arg(long, global = true)]
    #[serde(
        rename = "kubernetes.patch_capacity",
        skip_serializing_if = "not_given"
    )]
    patch_capacity: bool,
    /// Also write the inventory to this file on every change. Key: output.path.
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(rename = "output.path", skip_serializing_if = "Option::is_none")]
    output_path: Option<PathBuf>,
    /// Format of --output-path: json | hami | slurm-gres. Key: output.format.
    #[arg(long, global = true, value_name = "FORMAT")]
    #[serde(rename = "output.format", skip_serializing_if = "Option::is_none")]
    output_format: Option<String>,
    /// Health endpoint listen address (empty = off; port 0 picks a free port). Key:
    /// http.listen.
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(rename = "http.listen", skip_serializing_if = "Option::is_none")]
    health_listen: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (the default).
    Run,
    /// Read the cards once, normalise them with the service and print the inventory.
    Inventory {
        /// json | hami | slurm-gres | raw | facts (raw and facts: the cards as read, no
        /// service needed; facts includes the MIG layouts).
        #[arg(long, default_value = "json")]
        format: OutputFormat,
    },
}

/// NVML, or zero cards when NVML is missing and that is allowed.
fn open_source(s: &Settings, watch_xid_events: bool) -> anyhow::Result<Box<dyn GpuSource>> {
    let options = NvmlOptions {
        library: s.nvml_library.clone(),
        sysfs_root: s.sysfs_root.clone(),
        ignored_xids: s.ignored_xids.clone(),
        retired_pages_limit: s.retired_pages_limit,
        watch_xid_events,
        mig_allowed_profiles: s.mig_allowed_profiles.clone(),
    };
    match NvmlSource::open(options) {
        Ok(src) => Ok(Box::new(src)),
        Err(DiscoveryError::Unavailable(reason)) if s.publish_empty_when_missing => {
            tracing::warn!(reason = %reason, "NVML unavailable: publishing zero cards (nvml.publish_empty_when_missing)");
            Ok(Box::new(EmptySource { reason }))
        }
        Err(e) => Err(anyhow::anyhow!(
            "{e}\n(is the NVIDIA driver installed and the library visible to this process? \
             Set nvml.library / --nvml-library to its path, or nvml.publish_empty_when_missing \
             to publish zero cards instead)"
        )),
    }
}

async fn run_agent(s: Settings) -> anyhow::Result<()> {
    if s.kubernetes.is_none() && s.output.is_none() {
        anyhow::bail!(
            "nothing to publish to: enable kubernetes (kubernetes.enabled) or set output.path \
             (--output-path)"
        );
    }
    let source = open_source(&s, true)?;
    let normalizer =
        ServiceNormalizer::connect_lazy(&s.service_address, s.tls.as_ref(), s.service_timeout)
            .context("gpusched service client")?;
    let mut sinks = Sinks::default();
    if let Some(k) = &s.kubernetes {
        let client = kube::Client::try_default().await.context(
            "Kubernetes client (KUBECONFIG or the in-cluster service account); \
             use --no-kubernetes with --output-path on hosts without Kubernetes",
        )?;
        sinks.kube = Some(KubePublisher::new(client, &s.node_name, k.clone()));
    }
    if let Some((path, format)) = &s.output {
        sinks.file = Some(FilePublisher::new(path.clone(), *format));
    }
    let state = Arc::new(AgentState::default());
    let health_addr = match s.http_listen {
        Some(addr) => Some(
            health::serve(addr, Arc::clone(&state))
                .await
                .with_context(|| format!("health endpoint on {addr}"))?
                .0,
        ),
        None => None,
    };
    let health_text = health_addr.map_or_else(|| "off".to_owned(), |a| a.to_string());
    println!(
        "gpusched-agent running node={} health={health_text}",
        s.node_name
    );
    let _ = std::io::stdout().flush();
    let cfg = LoopSettings {
        node_name: s.node_name.clone(),
        interval: s.interval,
        poll_interval: s.poll_interval,
        initial_backoff: s.initial_backoff,
        max_backoff: s.max_backoff,
        withdraw_on_shutdown: s.kubernetes.as_ref().is_some_and(|k| k.remove_on_shutdown),
    };
    agent::run(
        source,
        normalizer,
        sinks,
        cfg,
        state,
        gpusched_runtime::shutdown::signal(),
    )
    .await;
    tracing::info!("stopped");
    Ok(())
}

async fn print_inventory(s: Settings, format: OutputFormat) -> anyhow::Result<()> {
    let mut source = open_source(&s, false)?;
    let facts = tokio::task::spawn_blocking(move || source.read())
        .await
        .context("reader")?
        .context("reading the cards")?;
    let text = if format == OutputFormat::Raw {
        gpusched_agent::format::raw(&inventory::request(&s.node_name, &facts))?
    } else if format == OutputFormat::Facts {
        gpusched_agent::format::facts(&s.node_name, &facts)?
    } else {
        let normalizer =
            ServiceNormalizer::connect_lazy(&s.service_address, s.tls.as_ref(), s.service_timeout)
                .context("gpusched service client")?;
        let normalized = normalizer
            .normalize(inventory::request(&s.node_name, &facts))
            .await
            .with_context(|| format!("normalising with the service at {}", s.service_address))?;
        render(
            &NodeInventory {
                node_name: s.node_name.clone(),
                normalized,
                facts,
            },
            format,
        )?
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match SPEC.settings(&cli.common, &cli, FileConfig::validate) {
        Ok(settings) => SPEC.exit(run(settings, cli.command.unwrap_or(Command::Run))),
        Err(code) => code,
    }
}

fn run(mut settings: Settings, command: Command) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?;
    runtime.block_on(async move {
        let _telemetry = gpusched_runtime::logging::init(&settings.telemetry, "gpusched_agent")?;
        match command {
            Command::Run => run_agent(settings).await,
            Command::Inventory { format } => {
                // One read: no health endpoint, no publication.
                settings.http_listen = None;
                print_inventory(settings, format).await
            }
        }
    })
}
