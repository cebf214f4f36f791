//! `gpusched-agent`: runs the node agent (default), or prints the node's inventory once
//! (`inventory --format json|hami|slurm-gres|raw`).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use gpusched_agent::agent::{self, AgentState, LoopSettings};
use gpusched_agent::config::{self, OutputFormat, Overrides, Settings};
use gpusched_agent::discovery::nvml::{NvmlOptions, NvmlSource};
use gpusched_agent::discovery::{DiscoveryError, EmptySource, GpuSource};
use gpusched_agent::format::{NodeInventory, render};
use gpusched_agent::health;
use gpusched_agent::inventory::{self, Normalizer as _, ServiceNormalizer};
use gpusched_agent::publish::{FilePublisher, KubePublisher, Sinks};

/// gpusched node agent: NVML inventory, normalised by the gpusched service, published for
/// HAMi-compatible schedulers (Node annotations), Slurm (gres.conf) and files.
#[derive(Debug, Parser)]
#[command(name = "gpusched-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Configuration file (.toml, .yaml or .yml); defaults are embedded.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long, global = true)]
    print_config: bool,
    /// Node name (default: $NODE_NAME, else the host name).
    #[arg(long, global = true, value_name = "NAME")]
    node_name: Option<String>,
    /// gpusched service address, e.g. http://gpusched:50051.
    #[arg(long, global = true, value_name = "ADDR")]
    service_address: Option<String>,
    /// CA of the service's certificate (PEM): turns TLS on.
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    #[arg(long, global = true, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS.
    #[arg(long, global = true, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Server name to verify the service certificate against.
    #[arg(long, global = true, value_name = "NAME")]
    tls_domain: Option<String>,
    /// Longest time between publications, e.g. 30s.
    #[arg(long, global = true, value_name = "DURATION")]
    interval: Option<String>,
    /// Time between reads of the cards, e.g. 5s.
    #[arg(long, global = true, value_name = "DURATION")]
    poll_interval: Option<String>,
    /// NVML library to load (default: libnvidia-ml.so.1, then libnvidia-ml.so).
    #[arg(long, global = true, value_name = "PATH")]
    nvml_library: Option<PathBuf>,
    /// Publish zero cards when NVML cannot be loaded (instead of exiting with an error).
    #[arg(long, global = true)]
    publish_empty_when_missing: bool,
    /// sysfs root (tests).
    #[arg(long, global = true, value_name = "PATH", hide = true)]
    sysfs_root: Option<PathBuf>,
    /// Do not publish to Kubernetes.
    #[arg(long, global = true)]
    no_kubernetes: bool,
    /// Remove our Node annotations (and patched capacity) on clean shutdown.
    #[arg(long, global = true)]
    remove_on_shutdown: bool,
    /// Also patch the Node's status capacity/allocatable nvidia.com/gpu (healthy slots).
    #[arg(long, global = true)]
    patch_capacity: bool,
    /// Also write the inventory to this file on every change.
    #[arg(long, global = true, value_name = "PATH")]
    output_path: Option<PathBuf>,
    /// Format of --output-path: json | hami | slurm-gres.
    #[arg(long, global = true, value_name = "FORMAT")]
    output_format: Option<String>,
    /// Health endpoint listen address (empty = off; port 0 picks a free port).
    #[arg(long, global = true, value_name = "ADDR")]
    health_listen: Option<String>,
    /// Log format: text | json.
    #[arg(long, global = true, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Log filter, e.g. info or gpusched_agent=debug.
    #[arg(long, global = true, value_name = "FILTER")]
    log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (the default).
    Run,
    /// Read the cards once, normalise them with the service and print the inventory.
    Inventory {
        /// json | hami | slurm-gres | raw (raw: the cards as read, no service needed).
        #[arg(long, default_value = "json")]
        format: OutputFormat,
    },
}

fn overrides(cli: &Cli) -> Overrides {
    Overrides {
        node_name: cli.node_name.clone(),
        interval: cli.interval.clone(),
        poll_interval: cli.poll_interval.clone(),
        service_address: cli.service_address.clone(),
        tls_ca: cli.tls_ca.clone(),
        tls_cert: cli.tls_cert.clone(),
        tls_key: cli.tls_key.clone(),
        tls_domain: cli.tls_domain.clone(),
        nvml_library: cli.nvml_library.clone(),
        publish_empty_when_missing: cli.publish_empty_when_missing,
        sysfs_root: cli.sysfs_root.clone(),
        no_kubernetes: cli.no_kubernetes,
        remove_on_shutdown: cli.remove_on_shutdown,
        patch_capacity: cli.patch_capacity,
        output_path: cli.output_path.clone(),
        output_format: cli.output_format.clone(),
        health_listen: cli.health_listen.clone(),
        log_format: cli.log_format.clone(),
        log_level: cli.log_level.clone(),
    }
}

fn init_logs(s: &Settings) {
    let filter = tracing_subscriber::EnvFilter::try_new(&s.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if s.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// NVML, or zero cards when NVML is missing and that is allowed.
fn open_source(s: &Settings, watch_xid_events: bool) -> anyhow::Result<Box<dyn GpuSource>> {
    let options = NvmlOptions {
        library: s.nvml_library.clone(),
        sysfs_root: s.sysfs_root.clone(),
        ignored_xids: s.ignored_xids.clone(),
        retired_pages_limit: s.retired_pages_limit,
        watch_xid_events,
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

async fn shutdown_signal() {
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
    agent::run(source, normalizer, sinks, cfg, state, shutdown_signal()).await;
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
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let file_config = match config::load(cli.config.as_deref(), &env, &overrides(&cli)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpusched-agent: {e}");
            return ExitCode::from(2);
        }
    };
    if cli.print_config {
        print!("{}", file_config.to_toml());
        return ExitCode::SUCCESS;
    }
    let mut settings = match file_config.validate(&env) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("gpusched-agent: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(&settings);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpusched-agent: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command.unwrap_or(Command::Run) {
        Command::Run => runtime.block_on(run_agent(settings)),
        Command::Inventory { format } => {
            // One read: no health endpoint, no publication.
            settings.http_listen = None;
            runtime.block_on(print_inventory(settings, format))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpusched-agent: {e:#}");
            ExitCode::FAILURE
        }
    }
}
