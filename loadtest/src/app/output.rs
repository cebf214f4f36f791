//! What the commands print: the JSON reports (`run`, `sweep`) and one line per measured run.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use super::cli::{RunArgs, SweepArgs};
use crate::report::RunReport;
use crate::synth::Pool;

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

pub(super) fn cluster_info(pool: &Pool) -> ClusterInfo {
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

pub(super) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

pub(super) fn describe(r: &RunReport) -> String {
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

pub(super) fn write_json(out: Option<&Path>, value: &impl Serialize) -> anyhow::Result<()> {
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

pub(super) fn peak(runs: &[RunReport]) -> Option<Peak> {
    runs.iter()
        .max_by(|a, b| a.throughput_per_s.total_cmp(&b.throughput_per_s))
        .map(|r| Peak {
            throughput_per_s: r.throughput_per_s,
            concurrency: r.concurrency,
            offered_rate_per_s: r.offered_rate_per_s,
            latency_p99_us: r.latency_us.p99,
        })
}
