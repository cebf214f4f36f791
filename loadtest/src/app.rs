//! The command line: `run`, `sweep` and `profile`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use gpusched_api::v1;
use serde::Serialize;

use crate::chart::{Line, write_svg};
use crate::inproc::{self, DecodeFrom, InProc};
use crate::load::{self, Target, Window};
use crate::process::{SpawnedServer, default_server_bin};
use crate::report::RunReport;
use crate::synth::{ClusterSpec, DEFAULT_MODELS, Form, Mix, Pool, parse_models};
use crate::wire::{self, Rpc};

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
    fn spec(&self, nodes: usize) -> anyhow::Result<ClusterSpec> {
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
    fn options(self) -> Option<v1::PlacementOptions> {
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
    fn mix(&self) -> anyhow::Result<Mix> {
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

/// The cluster as generated.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterInfo {
    /// Nodes per request.
    pub nodes: usize,
    /// Cards per request.
    pub cards: usize,
    /// Mean encoded request size, bytes.
    pub request_bytes_mean: f64,
    /// Distinct requests.
    pub pool: usize,
    /// Requests of each kind in the pool.
    pub kinds: BTreeMap<String, usize>,
}

fn cluster_info(pool: &Pool) -> ClusterInfo {
    let mut kinds = BTreeMap::new();
    for (k, _) in &pool.workloads {
        *kinds.entry(k.as_str().to_owned()).or_default() += 1;
    }
    ClusterInfo {
        nodes: pool.nodes.len(),
        cards: pool.cards(),
        request_bytes_mean: pool.mean_request_bytes().round(),
        pool: pool.encoded.len(),
        kinds,
    }
}

/// The server the load went to.
#[derive(Clone, Debug, Serialize)]
pub struct ServerInfo {
    /// gRPC address.
    pub addr: String,
    /// Started by this tool.
    pub spawned: bool,
    /// Binary, when spawned.
    pub bin: Option<String>,
    /// Process id (spawned or --server-pid).
    pub pid: Option<u32>,
    /// Extra arguments, when spawned.
    pub args: Vec<String>,
}

/// The best run.
#[derive(Clone, Debug, Serialize)]
pub struct Peak {
    /// Answers per second.
    pub throughput_per_s: f64,
    /// Its concurrency (closed loop).
    pub concurrency: Option<usize>,
    /// Its rate (open loop).
    pub offered_rate_per_s: Option<f64>,
    /// Its p99, µs.
    pub latency_p99_us: f64,
}

/// The machine.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cpus: usize,
    /// Whether this tool shares them with the server (a local server).
    pub client_shares_cpus_with_server: bool,
}

/// Output of `run`.
#[derive(Clone, Debug, Serialize)]
pub struct RunOutput {
    /// `gpusched-loadtest`.
    pub tool: &'static str,
    /// Tool version.
    pub version: &'static str,
    /// The options.
    pub config: RunArgs,
    /// The machine.
    pub machine: Machine,
    /// The cluster.
    pub cluster: ClusterInfo,
    /// The server (gRPC runs).
    pub server: Option<ServerInfo>,
    /// One entry per concurrency or rate.
    pub runs: Vec<RunReport>,
    /// The run with the highest throughput.
    pub peak: Option<Peak>,
}

/// One cluster size of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The cluster.
    pub cluster: ClusterInfo,
    /// Engine alone, in process.
    pub engine: RunReport,
    /// Decode + convert + engine + encode, in process.
    pub pipeline: Option<RunReport>,
    /// gRPC, one request in flight (latency).
    pub grpc_latency: RunReport,
    /// gRPC, `--concurrency` in flight (throughput).
    pub grpc_throughput: RunReport,
    /// gRPC p50 minus engine p50, µs: what the wire and the service add.
    pub wire_added_p50_us: f64,
    /// Mean request bytes with whole nodes.
    pub whole_request_bytes: f64,
    /// Nodes by reference (`--by-reference warm|cold`): mean request bytes.
    pub byref_request_bytes: Option<f64>,
    /// Nodes by reference: gRPC, one request in flight.
    pub byref_latency: Option<RunReport>,
    /// Nodes by reference: gRPC, `--concurrency` in flight.
    pub byref_throughput: Option<RunReport>,
}

/// Output of `sweep`.
#[derive(Clone, Debug, Serialize)]
pub struct SweepOutput {
    /// `gpusched-loadtest`.
    pub tool: &'static str,
    /// Tool version.
    pub version: &'static str,
    /// The options.
    pub config: SweepArgs,
    /// The machine.
    pub machine: Machine,
    /// The server.
    pub server: ServerInfo,
    /// One entry per size.
    pub points: Vec<SweepPoint>,
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Runs a command.
pub fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(a) => run(a),
        Command::Sweep(a) => sweep(a),
        Command::Profile(a) => profile(a),
    }
}

fn build_pool(
    nodes: usize,
    cluster: &ClusterArgs,
    workload: &WorkloadArgs,
) -> anyhow::Result<Pool> {
    anyhow::ensure!(workload.pool > 0, "--pool must be at least 1");
    let spec = cluster.spec(nodes)?;
    let mix = workload.mix()?;
    let mut pool = Pool::build(&spec, &mix, workload.form, workload.pool, cluster.seed);
    if let Some(o) = workload.failed_nodes.options() {
        pool.set_options(o);
    }
    eprintln!(
        "cluster: {} nodes x {} cards, {} requests of {:.1} KiB (mean), mix {mix}",
        pool.nodes.len(),
        cluster.cards_per_node,
        pool.encoded.len(),
        pool.mean_request_bytes() / 1024.0
    );
    Ok(pool)
}

/// Rewrites the pool's requests to carry nodes by reference (no-op when off).
fn by_reference(pool: &mut Pool, mode: crate::byref::ByRefMode) {
    pool.prime = crate::byref::apply(pool, mode);
    if pool.prime.is_some() {
        eprintln!(
            "by reference ({mode:?}): {:.1} KiB per request (mean)",
            pool.mean_request_bytes() / 1024.0
        );
    }
}

fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("tokio runtime")
}

/// The server to load: a spawned one (kept alive by the returned handle) or `--addr`.
fn server(
    args: &ServerArgs,
    spawn_by_default: bool,
) -> anyhow::Result<(ServerInfo, Option<SpawnedServer>)> {
    if let Some(addr) = &args.addr {
        return Ok((
            ServerInfo {
                addr: addr.clone(),
                spawned: false,
                bin: None,
                pid: args.server_pid,
                args: vec![],
            },
            None,
        ));
    }
    if !args.spawn && !spawn_by_default {
        bail!("give --addr HOST:PORT of a running server, or --spawn to start one");
    }
    let bin = match &args.server_bin {
        Some(b) => b.clone(),
        None => default_server_bin().ok_or_else(|| {
            anyhow!(
                "no gpusched-server binary found: build it (cargo build --release -p gpusched-service) or give --server-bin"
            )
        })?,
    };
    let s = SpawnedServer::start(&bin, &args.server_arg, args.server_log.as_deref())?;
    eprintln!(
        "server: {} (pid {}) at {}",
        bin.display(),
        s.pid(),
        s.grpc_addr
    );
    Ok((
        ServerInfo {
            addr: s.grpc_addr.clone(),
            spawned: true,
            bin: Some(bin.display().to_string()),
            pid: Some(s.pid()),
            args: args.server_arg.clone(),
        },
        Some(s),
    ))
}

fn describe(r: &RunReport) -> String {
    let l = &r.latency_us;
    let mut s = format!(
        "{} {} {}: {:.0}/s  p50 {:.1}µs p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}  ok {} errors {}",
        r.target,
        r.mode,
        match (r.concurrency, r.offered_rate_per_s) {
            (Some(c), _) => format!("c={c}"),
            (_, Some(rate)) => format!("rate={rate}"),
            _ => String::new(),
        },
        r.throughput_per_s,
        l.p50,
        l.p90,
        l.p99,
        l.p99_9,
        l.max,
        r.ok,
        r.error_count()
    );
    if let Some(c) = &r.server_cpu {
        s.push_str(&format!(
            "  server {:.2} cores {:.4} cpu-s/1k",
            c.cores_busy, c.cpu_s_per_1k_decisions
        ));
    }
    if let Some(c) = &r.client_cpu {
        s.push_str(&format!("  client {:.2} cores", c.cores_busy));
    }
    if let Some(m) = r.machine_busy_cores {
        s.push_str(&format!("  machine {m:.2} cores"));
    }
    if let Some(lag) = &r.send_lag_us {
        s.push_str(&format!("  send-lag p99 {:.1}µs", lag.p99));
    }
    s
}

fn write_json(out: Option<&Path>, value: &impl Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    match out {
        Some(p) => {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
            eprintln!("report: {}", p.display());
        }
        None => println!("{text}"),
    }
    Ok(())
}

fn peak(runs: &[RunReport]) -> Option<Peak> {
    runs.iter()
        .max_by(|a, b| a.throughput_per_s.total_cmp(&b.throughput_per_s))
        .map(|r| Peak {
            throughput_per_s: r.throughput_per_s,
            concurrency: r.concurrency,
            offered_rate_per_s: r.offered_rate_per_s,
            latency_p99_us: r.latency_us.p99,
        })
}

async fn connect_checked(
    addr: &str,
    n: usize,
    pool: &Pool,
    rpc: Rpc,
    timeout: Duration,
) -> anyhow::Result<Vec<tonic::transport::Channel>> {
    let channels = wire::connect(addr, n).await?;
    // One call first: a wrong address or a rejected request fails here, not as a report full of
    // errors.
    if let (Some(ch), Some(req)) = (
        channels.first(),
        pool.prime.as_ref().or(pool.encoded.first()),
    ) {
        wire::call(ch, rpc.path(), req.clone(), Some(timeout))
            .await
            .map_err(|s| {
                anyhow!(
                    "first call failed: {} {}",
                    crate::report::code_name(s.code()),
                    s.message()
                )
            })?;
    }
    Ok(channels)
}

fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut pool = build_pool(a.nodes, &a.cluster, &a.workload)?;
    if a.target != RunTarget::Engine {
        by_reference(&mut pool, a.workload.by_reference);
    }
    let w = Window {
        warmup: a.warmup.duration(),
        duration: a.duration.duration(),
    };
    anyhow::ensure!(w.duration > Duration::ZERO, "--duration must be positive");
    let mut runs = Vec::new();
    let mut server_info = None;
    match a.target {
        RunTarget::Engine | RunTarget::Pipeline => {
            anyhow::ensure!(a.rate.is_empty(), "--rate is for --target grpc");
            let what = if a.target == RunTarget::Engine {
                InProc::Engine
            } else {
                InProc::Pipeline
            };
            let settings = inproc::default_settings()?;
            let threads = if a.concurrency.is_empty() {
                vec![1]
            } else {
                a.concurrency.clone()
            };
            for t in threads {
                let o = inproc::Options {
                    what,
                    rpc: a.workload.rpc,
                    threads: t,
                    warmup: w.warmup,
                    duration: w.duration,
                    decode_from: a.decode_from,
                };
                let r = inproc::run(&pool, &settings, &o)?;
                eprintln!("{}", describe(&r));
                runs.push(r);
            }
        }
        RunTarget::Grpc => {
            let (info, spawned) = server(&a.server, false)?;
            let rt = runtime(a.client.client_threads)?;
            let concurrency = if a.concurrency.is_empty() && a.rate.is_empty() {
                vec![16]
            } else {
                a.concurrency.clone()
            };
            let max_c = concurrency.iter().copied().max().unwrap_or(1);
            let connections = a.client.connections.unwrap_or(if a.rate.is_empty() {
                max_c.clamp(1, 4)
            } else {
                4
            });
            let timeout = a.client.timeout.duration();
            let server_pid = spawned
                .as_ref()
                .map(SpawnedServer::pid)
                .or(a.server.server_pid);
            let result: anyhow::Result<()> = rt.block_on(async {
                let channels =
                    connect_checked(&info.addr, connections, &pool, a.workload.rpc, timeout)
                        .await?;
                let target = Target {
                    channels: Arc::new(channels),
                    pool: Arc::new(pool.encoded.clone()),
                    rpc: a.workload.rpc,
                    timeout: Some(timeout),
                    server_pid,
                };
                for &c in &concurrency {
                    let r = load::closed(&target, c, w).await?;
                    eprintln!("{}", describe(&r));
                    runs.push(r);
                }
                for &rate in &a.rate {
                    let r = load::open(&target, rate, a.max_outstanding, w).await?;
                    eprintln!("{}", describe(&r));
                    runs.push(r);
                }
                Ok(())
            });
            result?;
            drop(spawned);
            server_info = Some(info);
        }
    }
    let shares = server_info
        .as_ref()
        .is_some_and(|s| s.spawned || s.addr.starts_with("127.") || s.addr.contains("localhost"));
    let out = RunOutput {
        tool: "gpusched-loadtest",
        version: env!("CARGO_PKG_VERSION"),
        machine: Machine {
            cpus: cpus(),
            client_shares_cpus_with_server: shares,
        },
        cluster: cluster_info(&pool),
        server: server_info,
        peak: peak(&runs),
        runs,
        config: a.clone(),
    };
    write_json(a.out.as_deref(), &out)
}

fn sweep(a: SweepArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!a.sizes.is_empty(), "--sizes: give at least one size");
    let w = Window {
        warmup: a.warmup.duration(),
        duration: a.duration.duration(),
    };
    anyhow::ensure!(w.duration > Duration::ZERO, "--duration must be positive");
    let settings = inproc::default_settings()?;
    let (info, spawned) = server(&a.server, true)?;
    let server_pid = spawned
        .as_ref()
        .map(SpawnedServer::pid)
        .or(a.server.server_pid);
    let rt = runtime(a.client.client_threads)?;
    let timeout = a.client.timeout.duration();
    let connections = a.client.connections.unwrap_or(a.concurrency.clamp(1, 4));
    let mut points = Vec::new();
    for &nodes in &a.sizes {
        let pool = build_pool(nodes, &a.cluster, &a.workload)?;
        let o = inproc::Options {
            what: InProc::Engine,
            rpc: a.workload.rpc,
            threads: a.inproc_threads,
            warmup: w.warmup,
            duration: w.duration,
            decode_from: a.decode_from,
        };
        let engine = inproc::run(&pool, &settings, &o)?;
        eprintln!("  {}", describe(&engine));
        let pipeline = if a.no_pipeline {
            None
        } else {
            let o = inproc::Options {
                what: InProc::Pipeline,
                ..o
            };
            let r = inproc::run(&pool, &settings, &o)?;
            eprintln!("  {}", describe(&r));
            Some(r)
        };
        let (lat, thr) = rt.block_on(async {
            let channels =
                connect_checked(&info.addr, connections, &pool, a.workload.rpc, timeout).await?;
            let first: Vec<_> = channels.iter().take(1).cloned().collect();
            let mut target = Target {
                channels: Arc::new(first),
                pool: Arc::new(pool.encoded.clone()),
                rpc: a.workload.rpc,
                timeout: Some(timeout),
                server_pid,
            };
            let lat = load::closed(&target, 1, w).await?;
            eprintln!("  {}", describe(&lat));
            target.channels = Arc::new(channels);
            let thr = load::closed(&target, a.concurrency, w).await?;
            eprintln!("  {}", describe(&thr));
            anyhow::Ok((lat, thr))
        })?;
        let byref = if a.workload.by_reference == crate::byref::ByRefMode::Off {
            None
        } else {
            let mut bpool = pool.clone();
            by_reference(&mut bpool, a.workload.by_reference);
            let (lat, thr) = rt.block_on(async {
                let channels =
                    connect_checked(&info.addr, connections, &bpool, a.workload.rpc, timeout)
                        .await?;
                let first: Vec<_> = channels.iter().take(1).cloned().collect();
                let mut target = Target {
                    channels: Arc::new(first),
                    pool: Arc::new(bpool.encoded.clone()),
                    rpc: a.workload.rpc,
                    timeout: Some(timeout),
                    server_pid,
                };
                let lat = load::closed(&target, 1, w).await?;
                eprintln!("  by reference: {}", describe(&lat));
                target.channels = Arc::new(channels);
                let thr = load::closed(&target, a.concurrency, w).await?;
                eprintln!("  by reference: {}", describe(&thr));
                anyhow::Ok((lat, thr))
            })?;
            Some((bpool.mean_request_bytes(), lat, thr))
        };
        let (byref_request_bytes, byref_latency, byref_throughput) = match byref {
            Some((b, l, t)) => (Some(b), Some(l), Some(t)),
            None => (None, None, None),
        };
        points.push(SweepPoint {
            whole_request_bytes: pool.mean_request_bytes(),
            byref_request_bytes,
            byref_latency,
            byref_throughput,
            cluster: cluster_info(&pool),
            wire_added_p50_us: ((lat.latency_us.p50 - engine.latency_us.p50) * 10.0).round() / 10.0,
            engine,
            pipeline,
            grpc_latency: lat,
            grpc_throughput: thr,
        });
    }
    drop(spawned);
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let svg = a.out_dir.join("sweep.svg");
    chart_sweep(&svg, &a, &points)?;
    let out = SweepOutput {
        tool: "gpusched-loadtest",
        version: env!("CARGO_PKG_VERSION"),
        config: a.clone(),
        machine: Machine {
            cpus: cpus(),
            client_shares_cpus_with_server: info.spawned,
        },
        server: info,
        points,
    };
    write_json(Some(&a.out_dir.join("sweep.json")), &out)?;
    eprintln!("chart: {}", svg.display());
    Ok(())
}

fn chart_sweep(path: &Path, a: &SweepArgs, points: &[SweepPoint]) -> anyhow::Result<()> {
    let x = |p: &SweepPoint| p.cluster.nodes as f64;
    let line =
        |label: &str, color: usize, dashed: bool, f: &dyn Fn(&SweepPoint) -> Option<f64>| Line {
            label: label.to_owned(),
            points: points
                .iter()
                .filter_map(|p| f(p).map(|y| (x(p), y)))
                .collect(),
            color,
            dashed,
        };
    let mut latency = vec![
        line("engine p50", 0, false, &|p| Some(p.engine.latency_us.p50)),
        line("engine p99", 0, true, &|p| Some(p.engine.latency_us.p99)),
    ];
    let mut throughput = vec![line(
        &format!("engine ({} thread)", a.inproc_threads),
        0,
        false,
        &|p| Some(p.engine.throughput_per_s),
    )];
    if !a.no_pipeline {
        latency.push(line("pipeline p50", 1, false, &|p| {
            p.pipeline.as_ref().map(|r| r.latency_us.p50)
        }));
        latency.push(line("pipeline p99", 1, true, &|p| {
            p.pipeline.as_ref().map(|r| r.latency_us.p99)
        }));
        throughput.push(line(
            &format!("pipeline ({} thread)", a.inproc_threads),
            1,
            false,
            &|p| p.pipeline.as_ref().map(|r| r.throughput_per_s),
        ));
    }
    latency.push(line("gRPC p50 (1 in flight)", 3, false, &|p| {
        Some(p.grpc_latency.latency_us.p50)
    }));
    latency.push(line("gRPC p99 (1 in flight)", 3, true, &|p| {
        Some(p.grpc_latency.latency_us.p99)
    }));
    throughput.push(line(
        &format!("gRPC ({} in flight)", a.concurrency),
        3,
        false,
        &|p| Some(p.grpc_throughput.throughput_per_s),
    ));
    if points.iter().any(|p| p.byref_latency.is_some()) {
        latency.push(line(
            "gRPC by reference p50 (1 in flight)",
            2,
            false,
            &|p| p.byref_latency.as_ref().map(|r| r.latency_us.p50),
        ));
        latency.push(line("gRPC by reference p99 (1 in flight)", 2, true, &|p| {
            p.byref_latency.as_ref().map(|r| r.latency_us.p99)
        }));
        throughput.push(line(
            &format!("gRPC by reference ({} in flight)", a.concurrency),
            2,
            false,
            &|p| p.byref_throughput.as_ref().map(|r| r.throughput_per_s),
        ));
    }
    let bytes: Vec<String> = points
        .iter()
        .map(|p| match p.byref_request_bytes {
            Some(b) => format!(
                "{}: {:.0}/{:.1} KiB",
                p.cluster.nodes,
                p.whole_request_bytes / 1024.0,
                b / 1024.0
            ),
            None => format!(
                "{}: {:.0} KiB",
                p.cluster.nodes,
                p.whole_request_bytes / 1024.0
            ),
        })
        .collect();
    let title = format!(
        "gpusched {} over cluster size: in process vs gRPC ({} CPUs shared by client and server); request bytes whole/by-ref {}",
        match a.workload.rpc {
            Rpc::Allocate => "Allocate",
            Rpc::Filter => "Filter",
            Rpc::Score => "Score",
        },
        cpus(),
        bytes.join(", ")
    );
    write_svg(path, &title, &latency, &throughput)
}

fn profile(a: ProfileArgs) -> anyhow::Result<()> {
    let pool = build_pool(a.nodes, &a.cluster, &a.workload)?;
    let settings = inproc::default_settings()?;
    let mean = inproc::profile(
        a.target,
        &pool,
        &settings,
        a.workload.rpc,
        a.iterations,
        a.decode_from,
    )?;
    eprintln!(
        "{} x {}: {:.1} µs per decision",
        a.iterations,
        a.target.as_str(),
        mean.as_secs_f64() * 1e6
    );
    Ok(())
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
