//! The command line: read the inputs, start (or reach) the service, replay each set-up, write
//! the outputs.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use gpusched_client::{Client, ClientBuilder};

use crate::replay::{ReplayOptions, SetupResult, replay};
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
        ..ReadOptions::default()
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
        fill: args.fill,
        fill_stop_after: args.fill_stop_after,
        batch_max: args.batch.max(1),
        narrow: !args.all_nodes,
        samples: args.samples.max(1),
        quotas: trace.quotas.clone(),
    };
    let events = if args.fill {
        trace.jobs.len()
    } else {
        trace.jobs.len() + trace.jobs.iter().filter(|j| j.leave.is_some()).count()
    };
    let mut results: Vec<SetupResult> = Vec::new();
    for s in &setups {
        let pb = progress(events, args.no_progress);
        pb.set_prefix(s.name.clone());
        let before = server.as_ref().map(InProcess::handler_seconds);
        let mut r = replay(&client, &cluster.nodes, &trace.jobs, s, &opts, &pb).await?;
        if let (Some(srv), Some(b)) = (&server, before) {
            r.timing.server_handler_s = Some(srv.handler_seconds() - b);
        }
        pb.finish_and_clear();
        results.push(r);
    }
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
        input: Input::new(
            args.fill,
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
