//! The command line: read the inputs, start (or reach) the service, replay each set-up, write
//! the outputs.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpusched_client::{Client, ClientBuilder};

use crate::replay::{ReplayOptions, SetupResult};
use crate::report::{Input, Report, TimingReport};
use crate::setup::{Setup, default_setups, parse_setup, read_config};
use crate::trace::{ReadOptions, read_nodes, read_trace};

/// What-if replay of a GPU workload trace through gpusched-server under policy set-ups.
#[derive(Clone, Debug, Parser)]
#[command(name = "gpusched-sim", version)]
pub struct Args {
    /// The trace: openb pod list (.csv) or JSON Lines workloads (.jsonl).
    #[arg(long)]
    pub trace: PathBuf,
    /// The cluster: openb node list (.csv) or JSON Lines of gpusched.v1.Node (.jsonl).
    #[arg(long)]
    pub nodes: PathBuf,
    /// A set-up `[NAME=]NODE/GPU[/SLOT,CORE,MEMORY]`, e.g. `binpack/spread`,
    /// `spread/binpack,numa/1,2,1`; repeat for several. Default: node binpack/spread x GPU
    /// binpack/spread (four set-ups), unless --config gives some.
    #[arg(long = "setup")]
    pub setups: Vec<String>,
    /// TOML file with `[[setup]]` tables, `[models]` card memory and `slots`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Fill mode: arrivals only (no departures), until the trace ends or --fill-stop-after.
    #[arg(long)]
    pub fill: bool,
    /// Fill mode: stop after this many unplaced workloads in a row.
    #[arg(long)]
    pub fill_stop_after: Option<usize>,
    /// A running gpusched-server (HOST:PORT or URL); default: an in-process server on
    /// 127.0.0.1:0.
    #[arg(long)]
    pub addr: Option<String>,
    /// Output folder.
    #[arg(long, default_value = "sim-out")]
    pub out: PathBuf,
    /// Most workloads per AllocateBatch call; 1 = one Allocate call per workload.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Send every node on every call (default: only the nodes the service could choose; the
    /// decisions are the same, see the README).
    #[arg(long)]
    pub all_nodes: bool,
    /// About this many points per time series.
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Skip malformed rows (counted in the report) instead of stopping at the first.
    #[arg(long)]
    pub skip_bad: bool,
    /// Card memory per GPU model for openb node lists, MiB: `MODEL=MIB[,MODEL=MIB...]`.
    #[arg(long = "model-mem", value_delimiter = ',')]
    pub model_mem: Vec<String>,
    /// Virtual slots per card for openb node lists (HAMi deviceSplitCount).
    #[arg(long)]
    pub slots: Option<u32>,
    /// Do not write PNG charts (SVG only).
    #[arg(long)]
    pub no_png: bool,
    /// No progress bar (it is hidden anyway when stderr is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// The paper's experiment with this seed: pods sorted by name and shuffled with the seed,
    /// arrivals only (implies --fill); see --tune, --seeds.
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// The paper's experiment over several seeds (`42-51` or `42,43,50`): median and spread at
    /// 100% arrived demand per set-up.
    #[arg(long)]
    pub seeds: Option<String>,
    /// With --seed(s): append pods drawn at random from the trace until its GPU demand reaches
    /// this share of the cluster's GPUs (the artifact's tune-up; the paper uses 1.3).
    #[arg(long)]
    pub tune: Option<f64>,
    /// Host CPU and memory as a feasibility filter (the artifact's NodeResourcesFit): a pod is
    /// placed only where its `cpu_milli` and `memory_mib` are free; pods without GPU are kept
    /// and placed by the simulator (see the README).
    #[arg(long)]
    pub host: bool,
    /// Write every decision in event order to this CSV file (set-up, seed, event, workload,
    /// node, cards with MiB and cores).
    #[arg(long)]
    pub placements: Option<PathBuf>,
    /// The workload mix of fgd set-ups: the most popular request shapes of the trace covering
    /// this share of its GPU pods (the artifact's 95%).
    #[arg(long, default_value_t = 0.95)]
    pub mix_coverage: f64,
    /// The workload mix of fgd set-ups: at most this many shapes.
    #[arg(long, default_value_t = 64)]
    pub mix_shapes: usize,
    /// How the workload mix of fgd set-ups weighs a shape: `demand` (its pods' GPU compute:
    /// a rare 8-card shape weighs what its cards do) or `pods` (its pod count, the artifact's).
    #[arg(long, default_value = "demand")]
    pub mix_weight: String,
    /// Also replay every set-up with priorities (openb `qos`, JSON Lines `priority`) and the
    /// service's preemption off, on, or both (see `crate::preempt`); `none`: not at all.
    #[arg(long, value_enum, default_value_t = PreemptionMode::None)]
    pub preemption: PreemptionMode,
}

/// `--preemption`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PreemptionMode {
    /// No replay with priorities.
    None,
    /// Priorities, no preemption (the baseline).
    Off,
    /// Priorities and preemption.
    On,
    /// Both, side by side.
    Both,
}

impl PreemptionMode {
    /// The modes to replay (preemption off, on).
    pub fn modes(self) -> &'static [bool] {
        match self {
            PreemptionMode::None => &[],
            PreemptionMode::Off => &[false],
            PreemptionMode::On => &[true],
            PreemptionMode::Both => &[false, true],
        }
    }
}

/// The seeds of `--seed` / `--seeds` (`42-51`, `42,43`), or none.
pub fn parse_seeds(args: &Args) -> anyhow::Result<Vec<u64>> {
    if let Some(s) = args.seed {
        return Ok(vec![s]);
    }
    let Some(list) = &args.seeds else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (
                    a.trim()
                        .parse()
                        .map_err(|_| anyhow::anyhow!("--seeds `{part}`"))?,
                    b.trim()
                        .parse()
                        .map_err(|_| anyhow::anyhow!("--seeds `{part}`"))?,
                );
                anyhow::ensure!(
                    a <= b && b - a < 1000,
                    "--seeds `{part}`: use A-B with A <= B"
                );
                out.extend(a..=b);
            }
            None => out.push(
                part.parse()
                    .map_err(|_| anyhow::anyhow!("--seeds `{part}` is not a number"))?,
            ),
        }
    }
    anyhow::ensure!(!out.is_empty(), "--seeds: no seed given");
    Ok(out)
}

/// The workload mix of the trace's GPU jobs for fgd set-ups (with host CPU and memory per shape
/// when `host`): the most popular shapes covering `coverage` of them, at most `max` shapes.
pub fn trace_mix(
    jobs: &[crate::trace::Job],
    coverage: f64,
    max: usize,
    host: bool,
    by_demand: bool,
) -> Option<gpusched_client::v1::WorkloadMix> {
    use gpusched_client::mix::{MixCounter, ShapeKey};
    let mut c = MixCounter::new();
    for j in jobs.iter().filter(|j| !j.cpu_only) {
        let Some(needs) = &j.needs else { continue };
        let types = match &j.workload.spec {
            Some(gpusched_client::v1::workload::Spec::Typed(t)) => t.use_gpu_types.clone(),
            _ => Vec::new(),
        };
        for n in needs {
            c.add(
                ShapeKey {
                    gpu_count: n.count,
                    gpucores_percent: n.cores,
                    gpumem_mib: n.mem_mib,
                    gpumem_percent: n.mem_percent,
                    gpu_types: types.clone(),
                    cpu_milli: if host { j.host.0 } else { 0 },
                    host_mem_mib: if host { j.host.1 } else { 0 },
                },
                if by_demand {
                    u64::from(n.count) * u64::from(n.cores.max(1))
                } else {
                    1
                },
            );
        }
    }
    c.mix(coverage, max)
}

/// An in-process gpusched server on 127.0.0.1:0.
#[derive(Debug)]
pub struct InProcess {
    /// The running server.
    pub running: gpusched_service::Running,
    /// Its metrics (handler time).
    pub metrics: Arc<gpusched_service::Metrics>,
}

impl InProcess {
    /// Starts one with the embedded defaults, larger message, memory and time limits.
    pub async fn start() -> anyhow::Result<InProcess> {
        let flags = [
            ("listen", "127.0.0.1:0"),
            ("metrics.enabled", "false"),
            ("limits.max_message_bytes", "268435456"),
            ("limits.max_in_flight_bytes", "8589934592"),
            ("limits.request_timeout", "300s"),
            // In-process: no load balancer to tell before stopping.
            ("limits.shutdown_grace", "0s"),
        ];
        let settings = gpusched_service::SPEC
            .load_pairs::<gpusched_service::FileConfig>(None, &[], &flags)?
            .validate(&BTreeMap::new())?;
        let metrics = Arc::new(gpusched_service::Metrics::new());
        let running = gpusched_service::start(settings, Arc::clone(&metrics)).await?;
        Ok(InProcess { running, metrics })
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        self.running.grpc_addr.to_string()
    }

    /// Seconds spent in the server's handlers so far (sum over calls).
    pub fn handler_seconds(&self) -> f64 {
        self.metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("gpusched_request_duration_seconds_sum"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// A client for the simulator: long deadlines, large messages.
pub async fn connect(addr: &str) -> anyhow::Result<Client> {
    Ok(ClientBuilder::new(addr)
        .timeout(Some(Duration::from_secs(600)))
        .max_message_bytes(256 << 20)
        .connect()
        .await?)
}

fn progress(len: usize, hidden: bool) -> indicatif::ProgressBar {
    if hidden || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix:>20} [{bar:40}] {pos}/{len} events {elapsed_precise} (eta {eta})",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}

/// Everything a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The deterministic report.
    pub report: Report,
    /// The timing.
    pub timing: TimingReport,
    /// Files written (names in the output folder).
    pub files: Vec<String>,
}

/// The set-ups from flags and the config file.
pub fn setups(
    args: &Args,
    config: Option<&crate::setup::ConfigFile>,
) -> anyhow::Result<Vec<Setup>> {
    let mut out: Vec<Setup> = Vec::new();
    if let Some(c) = config {
        for s in &c.setup {
            out.push(s.to_setup().map_err(|e| anyhow::anyhow!(e))?);
        }
    }
    for s in &args.setups {
        out.push(parse_setup(s).map_err(|e| anyhow::anyhow!(e))?);
    }
    if out.is_empty() {
        out = default_setups();
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &out {
        anyhow::ensure!(
            seen.insert(s.name.clone()),
            "two set-ups are named `{}`",
            s.name
        );
    }
    Ok(out)
}

/// Runs the simulator.
pub async fn run(args: &Args) -> anyhow::Result<Outcome> {
    let config = args.config.as_deref().map(read_config).transpose()?;
    let setups = setups(args, config.as_ref())?;
    let mut read = ReadOptions {
        skip_bad: args.skip_bad,
        cpu_only: args.host,
        ..ReadOptions::default()
    };
    let seeds = parse_seeds(args)?;
    anyhow::ensure!(
        args.tune.is_none() || !seeds.is_empty(),
        "--tune needs --seed or --seeds (the paper's order)"
    );
    let fill = args.fill || !seeds.is_empty();
    let by_demand = match args.mix_weight.as_str() {
        "demand" => true,
        "pods" => false,
        o => anyhow::bail!("--mix-weight `{o}`: use demand or pods"),
    };
    if let Some(c) = &config {
        read.model_mem_mib
            .extend(c.models.iter().map(|(k, v)| (k.clone(), *v)));
        if let Some(s) = c.slots {
            read.slots = s;
        }
    }
    for m in &args.model_mem {
        let (k, v) = m
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--model-mem `{m}`: use MODEL=MIB"))?;
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--model-mem `{m}`: `{v}` is not MiB"))?;
        read.model_mem_mib.insert(k.trim().to_owned(), v);
    }
    if let Some(s) = args.slots {
        read.slots = s;
    }
    anyhow::ensure!(read.slots > 0, "--slots must be at least 1");

    let t = Instant::now();
    let trace = read_trace(&args.trace, &read)?;
    let cluster = read_nodes(&args.nodes, &read)?;
    let load_s = t.elapsed().as_secs_f64();
    let card_count: usize = cluster.nodes.iter().map(|n| n.cards.len()).sum();
    let demand: f64 = trace.jobs.iter().map(|j| j.demand).sum();

    let server = match &args.addr {
        Some(_) => None,
        None => Some(InProcess::start().await?),
    };
    let addr = match (&args.addr, &server) {
        (Some(a), _) => a.clone(),
        (None, Some(s)) => s.addr(),
        (None, None) => anyhow::bail!("no server"),
    };
    let client = connect(&addr).await?;
    let opts = ReplayOptions {
        fill,
        fill_stop_after: args.fill_stop_after,
        batch_max: args.batch.max(1),
        narrow: !args.all_nodes,
        samples: args.samples.max(1),
        host_filter: args.host,
        mix: trace_mix(
            &trace.jobs,
            args.mix_coverage,
            args.mix_shapes,
            false,
            by_demand,
        ),
        host_mix: trace_mix(
            &trace.jobs,
            args.mix_coverage,
            args.mix_shapes,
            true,
            by_demand,
        ),
        artifact_mix: if seeds.is_empty() {
            Vec::new()
        } else {
            crate::artifact::typical_pods(&trace.jobs, 0.95)
        },
        quotas: trace.quotas.clone(),
    };
    anyhow::ensure!(
        opts.mix.is_some() || !setups.iter().any(crate::setup::Setup::uses_fgd),
        "an fgd set-up needs GPU workloads in the trace (its workload mix)"
    );
    let orders: Vec<(
        Option<u64>,
        Vec<crate::trace::Job>,
        crate::order::OrderStats,
    )> = if seeds.is_empty() {
        vec![(
            None,
            trace.jobs.clone(),
            crate::order::OrderStats::default(),
        )]
    } else {
        seeds
            .iter()
            .map(|&seed| {
                let (jobs, stats) =
                    crate::order::paper_order(&trace.jobs, seed, args.tune, card_count as f64);
                (Some(seed), jobs, stats)
            })
            .collect()
    };
    // runs[k][s]: order k, set-up s.
    let mut runs: Vec<Vec<SetupResult>> = Vec::new();
    for (seed, jobs, _) in &orders {
        let events = if fill {
            jobs.len()
        } else {
            jobs.len() + jobs.iter().filter(|j| j.leave.is_some()).count()
        };
        let mut results: Vec<SetupResult> = Vec::new();
        for s in &setups {
            let pb = progress(events, args.no_progress);
            pb.set_prefix(match seed {
                Some(x) => format!("{} #{x}", s.name),
                None => s.name.clone(),
            });
            let before = server.as_ref().map(InProcess::handler_seconds);
            let mut r = crate::replay::replay_with_hosts(
                &client,
                &cluster.nodes,
                &cluster.hosts,
                jobs,
                s,
                &opts,
                &pb,
            )
            .await?;
            if let (Some(srv), Some(b)) = (&server, before) {
                r.timing.server_handler_s = Some(srv.handler_seconds() - b);
            }
            pb.finish_and_clear();
            results.push(r);
        }
        runs.push(results);
    }
    if let Some(path) = &args.placements {
        let mut all: Vec<(String, Option<u64>, &SetupResult)> = Vec::new();
        for ((seed, _, _), results) in orders.iter().zip(&runs) {
            for r in results {
                all.push((r.setup.name.clone(), *seed, r));
            }
        }
        std::fs::write(path, crate::report::placements_csv(&all))
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    let paper = (!seeds.is_empty()).then(|| crate::report::PaperReport {
        seeds: seeds.clone(),
        tune: args.tune,
        host_filter: args.host,
        order: orders.iter().map(|o| o.2).collect(),
        setups: setups
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let of_setup: Vec<SetupResult> =
                    runs.iter().filter_map(|r| r.get(k).cloned()).collect();
                crate::report::PaperSetup::of(&s.name, &seeds, &of_setup)
            })
            .collect(),
    });
    let results: Vec<SetupResult> = runs.into_iter().next().unwrap_or_default();
    let mut priorities = Vec::new();
    for s in &setups {
        for &on in args.preemption.modes() {
            priorities.push(
                crate::preempt::replay_priorities(
                    &client,
                    &cluster.nodes,
                    &trace.jobs,
                    s,
                    on,
                    args.fill,
                )
                .await?,
            );
        }
    }
    let timing = TimingReport {
        load_s,
        server: if server.is_some() {
            "in-process".into()
        } else {
            addr.clone()
        },
        setups: results
            .iter()
            .map(|r| (r.setup.name.clone(), r.timing.clone()))
            .collect(),
    };
    let report = Report {
        tool: format!("gpusched-sim {}", env!("CARGO_PKG_VERSION")),
        paper,
        input: Input::new(
            fill,
            &args.trace,
            &args.nodes,
            trace.stats,
            cluster.stats,
            cluster.nodes.len(),
            card_count,
            demand,
            read.slots,
        ),
        setups: results,
        priorities,
    };
    let files = crate::report::write_all(&args.out, &report, &timing, !args.no_png)?;
    if let Some(s) = server {
        s.running.shutdown().await?;
    }
    Ok(Outcome {
        report,
        timing,
        files,
    })
}
