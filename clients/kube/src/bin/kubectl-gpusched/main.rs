//! `kubectl-gpusched` (run as `kubectl gpusched ...`): the operator view of gpusched-kube in the
//! terminal. It reads the shim's JSON API (`web` listener, `/api/v1/...`) with the bearer token
//! of `web.token_file`, and prints tables or the JSON itself (`-o json`).

mod fetch;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use gpusched_kube::web::model::{Board, Explanation, PendingList, PendingPod, WhatIf};

use fetch::Api;

/// The GPU cards and bookings of a cluster, and why pods wait, from gpusched-kube's operator
/// view (reach it with `kubectl -n gpusched-system port-forward deploy/gpusched-kube 8890`).
#[derive(Debug, Parser)]
#[command(name = "kubectl-gpusched", version, about)]
struct Cli {
    /// The view's address.
    #[arg(
        long,
        env = "GPUSCHED_WEB_URL",
        default_value = "http://127.0.0.1:8890",
        global = true
    )]
    server: String,
    /// File with the token (gpusched-kube's web.token_file, e.g. from its Secret).
    #[arg(long, env = "GPUSCHED_WEB_TOKEN_FILE", global = true)]
    token_file: Option<PathBuf>,
    /// Output.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Aligned columns.
    Table,
    /// The API's JSON.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Every GPU card: slots, memory and cores booked, by whom; the cluster's totals.
    Top {
        /// Only nodes with these labels (key=value,...).
        #[arg(short = 'l', long)]
        selector: Option<String>,
    },
    /// The pending GPU pods and why each waits.
    Pending {
        /// Only nodes with these labels are candidates (key=value,...).
        #[arg(short = 'l', long)]
        selector: Option<String>,
    },
    /// Why a pod waits: the service's reasons, grouped, and the nearest miss.
    Why {
        /// POD or NAMESPACE/POD.
        pod: String,
        /// Namespace of POD.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// A pod's decision explained by the service (ranking, card scores, ties).
    Explain {
        /// POD or NAMESPACE/POD.
        pod: String,
        /// Namespace of POD.
        #[arg(short, long, default_value = "default")]
        namespace: String,
    },
    /// Where a pod would go now (nothing is booked).
    WhatIf {
        /// Pod manifest, YAML or JSON (`-` reads stdin).
        #[arg(short = 'f', long, required_unless_present = "pod")]
        filename: Option<PathBuf>,
        /// Or a pod of the cluster, NAMESPACE/POD.
        #[arg(long, conflicts_with = "filename")]
        pod: Option<String>,
        /// Node policy instead of the pod's own: binpack, spread.
        #[arg(long)]
        node_policy: Option<String>,
        /// GPU policy instead of the pod's own: binpack, spread, topology-aware, mutex, numa.
        #[arg(long)]
        gpu_policy: Option<String>,
    },
}

fn token(cli: &Cli) -> anyhow::Result<String> {
    if let Ok(t) = std::env::var("GPUSCHED_WEB_TOKEN")
        && !t.trim().is_empty()
    {
        return Ok(t.trim().to_owned());
    }
    let path = cli
        .token_file
        .as_ref()
        .context("no token: give --token-file (or GPUSCHED_WEB_TOKEN_FILE, GPUSCHED_WEB_TOKEN)")?;
    let t = std::fs::read_to_string(path)
        .with_context(|| format!("--token-file {}", path.display()))?;
    Ok(t.trim().to_owned())
}

/// `ns/name`, or `name` in `namespace`.
fn pod_path(pod: &str, namespace: &str) -> String {
    match pod.split_once('/') {
        Some((ns, name)) => format!("{ns}/{name}"),
        None => format!("{namespace}/{pod}"),
    }
}

fn show<T>(out: Output, v: &T, json: &str, render: fn(&T) -> String) -> String {
    match out {
        Output::Table => render(v),
        Output::Json => match serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
        {
            Some(p) => p + "\n",
            None => json.to_owned(),
        },
    }
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    let api = Api {
        base: cli.server.clone(),
        token: token(&cli)?,
    };
    let o = cli.output;
    Ok(match &cli.command {
        Command::Top { selector } => {
            let (b, j): (Board, _) = api
                .get(
                    "/api/v1/top",
                    &[("selector", selector.as_deref().unwrap_or(""))],
                )
                .await?;
            show(o, &b, &j, table::top)
        }
        Command::Pending { selector } => {
            let (l, j): (PendingList, _) = api
                .get(
                    "/api/v1/pending",
                    &[("selector", selector.as_deref().unwrap_or(""))],
                )
                .await?;
            show(o, &l, &j, table::pending)
        }
        Command::Why { pod, namespace } => {
            let (p, j): (PendingPod, _) = api
                .get(&format!("/api/v1/why/{}", pod_path(pod, namespace)), &[])
                .await?;
            show(o, &p, &j, table::why)
        }
        Command::Explain { pod, namespace } => {
            let (e, j): (Explanation, _) = api
                .get(
                    &format!("/api/v1/explain/{}", pod_path(pod, namespace)),
                    &[],
                )
                .await?;
            show(o, &e, &j, table::explain)
        }
        Command::WhatIf {
            filename,
            pod,
            node_policy,
            gpu_policy,
        } => {
            let spec = match filename {
                Some(f) if f.as_os_str() == "-" => {
                    std::io::read_to_string(std::io::stdin()).context("reading stdin")?
                }
                Some(f) => {
                    std::fs::read_to_string(f).with_context(|| format!("-f {}", f.display()))?
                }
                None => String::new(),
            };
            let query = [
                ("pod", pod.as_deref().unwrap_or("")),
                ("node_policy", node_policy.as_deref().unwrap_or("")),
                ("gpu_policy", gpu_policy.as_deref().unwrap_or("")),
            ];
            let (w, j): (WhatIf, _) = api.post("/api/v1/what-if", &query, spec).await?;
            show(o, &w, &j, table::what_if)
        }
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl-gpusched: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kubectl-gpusched: {e:#}");
            ExitCode::FAILURE
        }
    }
}
