//! `gpusched-kube`: the Kubernetes shim (scheduler extender + admission webhook) of gpusched.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use gpusched_kube::config::{FileConfig, SPEC};
use gpusched_runtime::CommonArgs;
use gpusched_runtime::flags::{negate, not_given};
use serde::Serialize;

/// Scheduler extender and admission webhook that let kube-scheduler use gpusched. Each flag
/// sets the configuration key it names.
#[derive(Debug, Parser, Serialize)]
#[command(name = "gpusched-kube", version, about)]
struct Cli {
    #[command(flatten)]
    #[serde(flatten)]
    common: CommonArgs,
    /// gpusched service address, e.g. http://gpusched:50051. Key: service.address.
    #[arg(long, value_name = "URL")]
    #[serde(rename = "service.address", skip_serializing_if = "Option::is_none")]
    service_addr: Option<String>,
    /// kube-scheduler profile name whose pods are ours. Key: scheduler_name.
    #[arg(long, value_name = "NAME")]
    #[serde(rename = "scheduler_name", skip_serializing_if = "Option::is_none")]
    scheduler_name: Option<String>,
    /// Kubeconfig file (default: KUBECONFIG, ~/.kube/config or in-cluster). Key: kube.kubeconfig.
    #[arg(long, value_name = "PATH")]
    #[serde(rename = "kube.kubeconfig", skip_serializing_if = "Option::is_none")]
    kubeconfig: Option<PathBuf>,
    /// Extender (HTTP) listen address; port 0 picks a free port. Key: extender.listen.
    #[arg(long, value_name = "ADDR")]
    #[serde(rename = "extender.listen", skip_serializing_if = "Option::is_none")]
    extender_listen: Option<String>,
    /// Webhook (HTTPS) listen address; port 0 picks a free port. Key: webhook.listen.
    #[arg(long, value_name = "ADDR")]
    #[serde(rename = "webhook.listen", skip_serializing_if = "Option::is_none")]
    webhook_listen: Option<String>,
    /// Webhook certificate chain (PEM). Key: webhook.cert.
    #[arg(long, value_name = "PEM")]
    #[serde(rename = "webhook.cert", skip_serializing_if = "Option::is_none")]
    webhook_cert: Option<PathBuf>,
    /// Webhook private key (PEM). Key: webhook.key.
    #[arg(long, value_name = "PEM")]
    #[serde(rename = "webhook.key", skip_serializing_if = "Option::is_none")]
    webhook_key: Option<PathBuf>,
    /// Do not serve the admission webhook. Key: webhook.enabled.
    #[arg(long)]
    #[serde(
        rename = "webhook.enabled",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_webhook: bool,
    /// Do not set schedulerName in the mutating webhook. Key: webhook.mutate.
    #[arg(long)]
    #[serde(
        rename = "webhook.mutate",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_mutate: bool,
    /// Always lead (no Lease; for a single replica). Key: leader_election.enabled.
    #[arg(long)]
    #[serde(
        rename = "leader_election.enabled",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_leader_elect: bool,
    /// Lease name. Key: leader_election.lease_name.
    #[arg(long, value_name = "NAME")]
    #[serde(
        rename = "leader_election.lease_name",
        skip_serializing_if = "Option::is_none"
    )]
    lease_name: Option<String>,
    /// Lease namespace. Key: leader_election.lease_namespace.
    #[arg(long, value_name = "NAMESPACE")]
    #[serde(
        rename = "leader_election.lease_namespace",
        skip_serializing_if = "Option::is_none"
    )]
    lease_namespace: Option<String>,
    /// Holder identity (default: POD_NAME, HOSTNAME). Key: leader_election.identity.
    #[arg(long, value_name = "ID")]
    #[serde(
        rename = "leader_election.identity",
        skip_serializing_if = "Option::is_none"
    )]
    identity: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match SPEC.settings(&cli.common, &cli, FileConfig::validate) {
        Ok(settings) => SPEC.exit(gpusched_kube::run::main(settings)),
        Err(code) => code,
    }
}
