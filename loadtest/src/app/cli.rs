//! The command line: the commands and their arguments (`--help` is built from these docs).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::anyhow;
use clap::{Args, Parser, Subcommand, ValueEnum};
use gpusched_api::v1;
use serde::Serialize;

use crate::inproc::{DecodeFrom, InProc};
use crate::synth::{ClusterSpec, DEFAULT_MODELS, Form, Mix, parse_models};
use crate::wire::Rpc;

/// Load, latency and scaling measurements of gpusched-server and the placement engine.
#[derive(Debug, Parser)]
#[command(name = "gpusched-loadtest", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load one cluster size: over gRPC (closed or open loop) or in process.
    Run(RunArgs),
    /// The same workload over several cluster sizes: engine, pipeline and gRPC; JSON + SVG.
    Sweep(SweepArgs),
    /// Decisions back to back in process, for `valgrind --tool=callgrind` or `perf`.
    Profile(ProfileArgs),
}

/// Seconds: `10`, `2.5`, `10s`, `500ms`, `1m`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Secs(pub f64);

impl FromStr for Secs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
            (n, 0.001)
        } else if let Some(n) = s.strip_suffix('s') {
            (n, 1.0)
        } else if let Some(n) = s.strip_suffix('m') {
            (n, 60.0)
        } else {
            (s, 1.0)
        };
        let v: f64 = num
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: expected seconds such as 10, 2.5s, 500ms or 1m"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(format!("{s:?}: must be a non-negative duration"));
        }
        Ok(Secs(v * scale))
    }
}

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}

impl Secs {
    /// As a duration.
    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.0)
    }
}

/// The synthetic cluster (its size is `--nodes` or `--sizes`).
#[derive(Clone, Debug, Args, Serialize)]
pub struct ClusterArgs {
    /// Cards per node.
    #[arg(long, default_value_t = 8)]
    pub cards_per_node: u32,
    /// NUMA nodes per node (cards split evenly by index).
    #[arg(long, default_value_t = 2)]
    pub numa_per_node: u32,
    /// Card models `NAME=MIB[:WEIGHT],...`; each node gets one model, drawn by weight.
    #[arg(long, default_value = DEFAULT_MODELS)]
    pub models: String,
    /// Mean utilisation of card memory and cores (0..1); cards under 5% are idle.
    #[arg(long, default_value_t = 0.5)]
    pub fill: f64,
    /// Fraction of cards reported unhealthy.
    #[arg(long, default_value_t = 0.0)]
    pub unhealthy: f64,
    /// Slots per card (HAMi deviceSplitCount).
    #[arg(long, default_value_t = 10)]
    pub slots: u32,
    /// Seed of the cluster and workloads (ChaCha8).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

impl ClusterArgs {
    pub(super) fn spec(&self, nodes: usize) -> anyhow::Result<ClusterSpec> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.fill),
            "--fill must be within 0..1"
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.unhealthy),
            "--unhealthy must be within 0..1"
        );
        Ok(ClusterSpec {
            nodes,
            cards_per_node: self.cards_per_node,
            numa_per_node: self.numa_per_node,
            models: parse_models(&self.models).map_err(|e| anyhow!("--models: {e}"))?,
            fill: self.fill,
            unhealthy: self.unhealthy,
            slots: self.slots,
        })
    }
}

/// The workloads and the RPC.
#[derive(Clone, Debug, Args, Serialize)]
pub struct WorkloadArgs {
    /// Weights of the workload kinds: frac (1 card, part of it), whole (1 whole card),
    /// multi (2 or 4 cards), numa-bind (2 cards on one NUMA node), mutex (GPU policy mutex),
    /// weights (hami.io/device-scoring-weights).
    #[arg(
        long,
        default_value = "frac=50,whole=15,multi=10,numa-bind=10,mutex=5,weights=10"
    )]
    pub mix: String,
    /// How workloads are written.
    #[arg(long, value_enum, default_value_t = Form::Kubernetes)]
    pub form: Form,
    /// Distinct requests built (and encoded) once and cycled through.
    #[arg(long, default_value_t = 64)]
    pub pool: usize,
    /// The RPC.
    #[arg(long, value_enum, default_value_t = Rpc::Allocate)]
    pub rpc: Rpc,
    /// `--rpc preempt`: placed workloads per node (each node's usage split among them).
    #[arg(long, default_value_t = 10)]
    pub placed_per_node: usize,
    /// `--rpc preempt`: the pending workloads' priority (placed ones have 0, 100, 500 or 1000).
    #[arg(long, default_value_t = 800)]
    pub preempt_priority: i32,
    /// Nodes by reference (gRPC and `--target pipeline` runs): `warm` = every node by digest
    /// except the one whose usage changed since the last decision (cache primed first), `sets`
    /// = only that node, as a change to a kept node set (what the clients send), `cold` = every
    /// part inline every time. In `sweep`, runs by reference beside the whole-node runs.
    #[arg(long, value_enum, default_value_t = crate::byref::ByRefMode::Off)]
    pub by_reference: crate::byref::ByRefMode,
    /// Which failed nodes Allocate answers list (`PlacementOptions.failed_nodes`): every one (the
    /// server's default), only when the workload is not placed (what a bind needs), or none.
    #[arg(long, value_enum, default_value_t = FailedNodesArg::All)]
    pub failed_nodes: FailedNodesArg,
}

/// `--failed-nodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailedNodesArg {
    /// Every failed node with its reasons.
    All,
    /// Failed nodes only when the workload is not placed.
    WhenUnplaced,
    /// Only their count.
    None,
}

impl FailedNodesArg {
    pub(super) fn options(self) -> Option<v1::PlacementOptions> {
        let failed_nodes = match self {
            FailedNodesArg::All => return None,
            FailedNodesArg::WhenUnplaced => v1::FailedNodes::WhenUnplaced,
            FailedNodesArg::None => v1::FailedNodes::None,
        };
        Some(v1::PlacementOptions {
            failed_nodes: failed_nodes as i32,
            ..v1::PlacementOptions::default()
        })
    }
}

impl WorkloadArgs {
    pub(super) fn mix(&self) -> anyhow::Result<Mix> {
        self.mix.parse().map_err(|e| anyhow!("--mix: {e}"))
    }
}

/// Which server.
#[derive(Clone, Debug, Args, Serialize)]
pub struct ServerArgs {
    /// Address of a running server (`host:port` or `http://host:port`).
    #[arg(long, conflicts_with = "spawn")]
    pub addr: Option<String>,
    /// Start gpusched-server on free ports (and read its CPU time from /proc).
    #[arg(long)]
    pub spawn: bool,
    /// Server binary for --spawn (default: next to this binary, else the workspace target
    /// directory's release, then debug build).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// Extra argument for the spawned server (repeat), e.g. `--server-arg=--log-level=warn`.
    #[arg(long, allow_hyphen_values = true)]
    pub server_arg: Vec<String>,
    /// Write the spawned server's log (stderr) here (default: discarded).
    #[arg(long)]
    pub server_log: Option<PathBuf>,
    /// Process id of a local server given by --addr, to read its CPU time.
    #[arg(long)]
    pub server_pid: Option<u32>,
}

/// The client's transport.
#[derive(Clone, Debug, Args, Serialize)]
pub struct ClientArgs {
    /// HTTP/2 connections (default: closed loop min(concurrency, 4); open loop 4).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Worker threads of the client's tokio runtime.
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Deadline of every call.
    #[arg(long, default_value = "10s")]
    pub timeout: Secs,
}

/// Where `run` sends its load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RunTarget {
    /// Over gRPC to --addr or a --spawn'ed server.
    Grpc,
    /// The engine in process (converted snapshot and workloads).
    Engine,
    /// Decode, convert, engine, convert, encode in process.
    Pipeline,
}

/// `run`.
#[derive(Clone, Debug, Args, Serialize)]
pub struct RunArgs {
    /// Nodes in every request.
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The workloads.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// The server.
    #[command(flatten)]
    pub server: ServerArgs,
    /// The transport.
    #[command(flatten)]
    pub client: ClientArgs,
    /// gRPC, or in process.
    #[arg(long, value_enum, default_value_t = RunTarget::Grpc)]
    pub target: RunTarget,
    /// In-process pipeline: decode from a BytesMut (as tonic does) or from a plain slice.
    #[arg(long, value_enum, default_value_t = DecodeFrom::BytesMut)]
    pub decode_from: DecodeFrom,
    /// Closed loop: requests in flight (in process: threads); a list runs each in turn
    /// (`1,2,4,8,16,32`) and reports the peak. Default 16 (in process 1).
    #[arg(long, value_delimiter = ',', conflicts_with = "rate")]
    pub concurrency: Vec<usize>,
    /// Open loop: requests per second by intended start time; a list runs each in turn.
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Open loop: most requests in flight; beyond it sends wait (latency still counts from
    /// the intended time).
    #[arg(long, default_value_t = 10_000)]
    pub max_outstanding: usize,
    /// Load before each measured window (not recorded).
    #[arg(long, default_value = "2s")]
    pub warmup: Secs,
    /// Measured window of each run.
    #[arg(long, default_value = "10s")]
    pub duration: Secs,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// `sweep`.
#[derive(Clone, Debug, Args, Serialize)]
pub struct SweepArgs {
    /// Cluster sizes (nodes per request).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,5000")]
    pub sizes: Vec<usize>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The workloads.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// The server (default: --spawn).
    #[command(flatten)]
    pub server: ServerArgs,
    /// The transport.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Requests in flight of the gRPC throughput run (the latency run uses 1).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Threads of the in-process runs.
    #[arg(long, default_value_t = 1)]
    pub inproc_threads: usize,
    /// Skip the in-process pipeline runs.
    #[arg(long)]
    pub no_pipeline: bool,
    /// In-process pipeline: decode from a BytesMut (as tonic does) or from a plain slice.
    #[arg(long, value_enum, default_value_t = DecodeFrom::BytesMut)]
    pub decode_from: DecodeFrom,
    /// Warm-up of each run.
    #[arg(long, default_value = "1s")]
    pub warmup: Secs,
    /// Measured window of each run.
    #[arg(long, default_value = "3s")]
    pub duration: Secs,
    /// Directory for sweep.json and sweep.svg.
    #[arg(long, default_value = "target/gpusched-loadtest/sweep")]
    pub out_dir: PathBuf,
}

/// `profile`.
#[derive(Clone, Debug, Args, Serialize)]
pub struct ProfileArgs {
    /// Nodes in every request.
    #[arg(long, default_value_t = 100)]
    pub nodes: usize,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The workloads.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Engine alone, or the server's pipeline without the network.
    #[arg(long, value_enum, default_value_t = InProc::Pipeline)]
    pub target: InProc,
    /// Decisions to run.
    #[arg(long, default_value_t = 1000)]
    pub iterations: usize,
    /// Pipeline: decode from a BytesMut (as tonic does) or from a plain slice.
    #[arg(long, value_enum, default_value_t = DecodeFrom::BytesMut)]
    pub decode_from: DecodeFrom,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seconds_parse() {
        assert_eq!("10".parse::<Secs>().unwrap(), Secs(10.0));
        assert_eq!("2.5s".parse::<Secs>().unwrap(), Secs(2.5));
        assert_eq!("500ms".parse::<Secs>().unwrap(), Secs(0.5));
        assert_eq!("1m".parse::<Secs>().unwrap(), Secs(60.0));
        assert!("-1".parse::<Secs>().is_err());
        assert!("soon".parse::<Secs>().is_err());
    }

    #[test]
    fn cli_parses_lists_and_passthrough() {
        let cli = Cli::try_parse_from([
            "gpusched-loadtest",
            "run",
            "--spawn",
            "--nodes",
            "1000",
            "--concurrency",
            "1,2,4",
            "--server-arg=--log-level=warn",
            "--mix",
            "frac=1,mutex=1",
        ])
        .unwrap();
        let Command::Run(r) = cli.command else {
            panic!("run")
        };
        assert_eq!(r.concurrency, vec![1, 2, 4]);
        assert_eq!(r.server.server_arg, vec!["--log-level=warn".to_owned()]);
        assert!(r.workload.mix().is_ok());
        assert!(
            Cli::try_parse_from([
                "gpusched-loadtest",
                "run",
                "--rate",
                "5",
                "--concurrency",
                "2"
            ])
            .is_err()
        );
    }
}
