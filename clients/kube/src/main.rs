//! `gpusched-kube`: the Kubernetes shim (scheduler extender + admission webhook) of gpusched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Parser;
use gpusched_kube::config::{self, Overrides};

/// Scheduler extender and admission webhook that let kube-scheduler use gpusched.
#[derive(Debug, Parser)]
#[command(name = "gpusched-kube", version, about)]
struct Cli {
    /// Configuration file (.toml, .yaml or .yml); defaults are embedded.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long)]
    print_config: bool,
    /// gpusched service address, e.g. http://gpusched:50051.
    #[arg(long, value_name = "URL")]
    service_addr: Option<String>,
    /// kube-scheduler profile name whose pods are ours.
    #[arg(long, value_name = "NAME")]
    scheduler_name: Option<String>,
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config or in-cluster).
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Extender (HTTP) listen address; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    extender_listen: Option<String>,
    /// Webhook (HTTPS) listen address; port 0 picks a free port.
    #[arg(long, value_name = "ADDR")]
    webhook_listen: Option<String>,
    /// Webhook certificate chain (PEM).
    #[arg(long, value_name = "PEM")]
    webhook_cert: Option<PathBuf>,
    /// Webhook private key (PEM).
    #[arg(long, value_name = "PEM")]
    webhook_key: Option<PathBuf>,
    /// Do not serve the admission webhook.
    #[arg(long)]
    no_webhook: bool,
    /// Do not set schedulerName in the mutating webhook.
    #[arg(long)]
    no_mutate: bool,
    /// Always lead (no Lease; for a single replica).
    #[arg(long)]
    no_leader_elect: bool,
    /// Lease name.
    #[arg(long, value_name = "NAME")]
    lease_name: Option<String>,
    /// Lease namespace.
    #[arg(long, value_name = "NAMESPACE")]
    lease_namespace: Option<String>,
    /// Holder identity (default: POD_NAME, HOSTNAME).
    #[arg(long, value_name = "ID")]
    identity: Option<String>,
    /// Log format (text | json).
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Log filter, e.g. info or gpusched_kube=debug.
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let env: BTreeMap<String, String> = std::env::vars().collect();
    let flags = Overrides {
        service_addr: cli.service_addr,
        scheduler_name: cli.scheduler_name,
        kubeconfig: cli.kubeconfig,
        extender_listen: cli.extender_listen,
        webhook_listen: cli.webhook_listen,
        webhook_cert: cli.webhook_cert,
        webhook_key: cli.webhook_key,
        no_webhook: cli.no_webhook,
        no_mutate: cli.no_mutate,
        no_leader_elect: cli.no_leader_elect,
        lease_name: cli.lease_name,
        lease_namespace: cli.lease_namespace,
        identity: cli.identity,
        log_format: cli.log_format,
        log_level: cli.log_level,
    };
    let file_config = match config::load(cli.config.as_deref(), &env, &flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpusched-kube: {e}");
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
            eprintln!("gpusched-kube: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match gpusched_kube::run::main(settings) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpusched-kube: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
