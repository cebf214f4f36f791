//! The replay: arrivals and departures in time order, placed by the service.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpusched_api::v1;
use gpusched_client::Client;
use serde::Serialize;

use crate::artifact::ArtifactFrag;
use crate::cluster::{Booking, CardStates, Cluster};
use crate::quota::{Hard, Ledger, NamespaceReport};
use crate::setup::Setup;
use crate::trace::{Job, Need};

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Arrivals only, no departures: fill the cluster.
    pub fill: bool,
    /// Fill mode: stop after this many unplaced workloads in a row (None: the whole trace).
    pub fill_stop_after: Option<usize>,
    /// Most workloads per AllocateBatch call (1 = one Allocate call per workload).
    pub batch_max: usize,
    /// Send only the nodes the service could choose (see [`Cluster::candidates`]); unplaced
    /// workloads are asked again against every node for the reasons.
    pub narrow: bool,
    /// Points in the time series (about).
    pub samples: usize,
    /// Host CPU and memory are a feasibility filter (the artifact's NodeResourcesFit): a
    /// workload is placed only on a node with its host request free; pods without GPU
    /// (`Job::cpu_only`) are placed by the simulator.
    pub host_filter: bool,
    /// The workload mix sent with fgd set-ups (`options.workload_mix`).
    pub mix: Option<v1::WorkloadMix>,
    /// The same with host CPU and memory per shape, for `+host` set-ups.
    pub host_mix: Option<v1::WorkloadMix>,
    /// The artifact's typical pods, for its fragmentation measure per event (empty: not
    /// measured).
    pub artifact_mix: Vec<crate::artifact::TypicalPod>,
    /// Hard GPU limits per namespace (the trace's `quota` lines).
    pub quotas: BTreeMap<String, Hard>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            fill: false,
            fill_stop_after: None,
            batch_max: 500,
            narrow: true,
            samples: 200,
            host_filter: false,
            mix: None,
            host_mix: None,
            artifact_mix: Vec::new(),
            quotas: BTreeMap::new(),
        }
    }
}

/// The state after one arrival (for the artifact's measures by arrived demand).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DemandPoint {
    /// Arrived GPU demand, % of the cluster's GPUs.
    pub arrived_pct: f64,
    /// Booked compute, % of all compute.
    pub allocation_pct: f64,
    /// The artifact's fragmented compute (`crate::artifact`), % of all compute.
    pub fragmentation_pct: f64,
    /// The same, % of the free compute.
    pub fragmentation_ratio_pct: f64,
}

/// One decision, for `--placements`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PlacementRecord {
    /// Events handled before it.
    pub event: usize,
    /// The workload.
    pub workload: String,
    /// The node, or None when not placed.
    pub node: Option<String>,
    /// Cards: (card id, MiB, cores).
    pub cards: Vec<(String, u64, u32)>,
    /// Host CPU and memory booked (millicores, MiB).
    pub host: (u64, u64),
}

/// The state after an event.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Events handled so far (arrivals and departures).
    pub event: usize,
    /// Trace time, seconds.
    pub time_s: f64,
    /// Arrived GPU demand so far as % of the cluster's GPUs.
    pub arrived_demand_pct: f64,
    /// Booked compute as % of all compute.
    pub allocation_pct: f64,
    /// Cards by state.
    pub cards: CardStates,
    /// Expected fragmentation, % of the free compute.
    pub fragmentation_pct: f64,
    /// Workloads placed so far.
    pub placed: usize,
    /// Workloads not placed so far.
    pub unplaced: usize,
    /// Workloads on the cluster now.
    pub running: usize,
    /// MIG cards: slices used and stranded (absent without MIG cards).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig: Option<crate::mig::MigSample>,
}

/// A workload the service could not place.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unplaced {
    /// Name.
    pub name: String,
    /// Arrival, seconds.
    pub arrive_s: f64,
    /// GPU demand (whole-GPU equivalents).
    pub demand: f64,
    /// Arrived demand at that point, % of the cluster's GPUs.
    pub arrived_demand_pct: f64,
    /// Nodes by their main reason (the reason that applied to most cards).
    pub node_reasons: BTreeMap<String, usize>,
    /// Nodes that could not take it even if idle (the service's `unresolvable`).
    pub unresolvable_nodes: usize,
    /// The main reason of most nodes that could take it were they emptier (of all nodes when
    /// none could).
    pub top_reason: String,
}

/// Where the time went (wall clock; not part of the deterministic report).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timing {
    /// Whole replay, seconds.
    pub total_s: f64,
    /// Building requests (candidate selection, copying nodes, set-up workloads), seconds.
    pub build_s: f64,
    /// Calls as the client sees them (encode, transport, server, decode), seconds.
    pub rpc_s: f64,
    /// Server handler time (convert in, engine, convert out; in-process server only).
    pub server_handler_s: Option<f64>,
    /// Booking answers, releasing, measuring samples, seconds.
    pub book_s: f64,
    /// RPC calls.
    pub calls: usize,
    /// Of which re-asks of unplaced workloads against every node.
    pub reasks: usize,
    /// Nodes sent, summed over calls.
    pub nodes_sent: usize,
    /// Workloads the candidate narrowing missed (placed on the re-ask); should be 0.
    pub narrow_misses: usize,
}

/// The outcome of one set-up.
#[derive(Clone, Debug, Serialize)]
pub struct SetupResult {
    /// The set-up.
    pub setup: Setup,
    /// Arrivals handled.
    pub arrivals: usize,
    /// Placed.
    pub placed: usize,
    /// Not placed.
    pub unplaced: usize,
    /// Departures that released a placement.
    pub departures: usize,
    /// Arrived demand when the first workload did not fit, %.
    pub first_unplaced_at_demand_pct: Option<f64>,
    /// Highest allocation seen, %.
    pub peak_allocation_pct: f64,
    /// Mean allocation over the samples (evenly spaced in events), %.
    pub mean_allocation_pct: f64,
    /// Mean fragmentation over the samples, %.
    pub mean_fragmentation_pct: f64,
    /// Unplaced workloads by their top reason.
    pub unplaced_by_reason: BTreeMap<String, usize>,
    /// The time series.
    pub samples: Vec<Sample>,
    /// Every unplaced workload.
    pub unplaced_workloads: Vec<Unplaced>,
    /// Per namespace with a quota: what it cost (absent without quotas).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<BTreeMap<String, NamespaceReport>>,
    /// Where each job went: `node/card,card` (a MIG instance as `card[profile@start]`) or None
    /// (not in the JSON report).
    #[serde(skip)]
    pub placements: Vec<Option<String>>,
    /// Every decision in event order (not in the JSON report; `--placements`).
    #[serde(skip)]
    pub log: Vec<PlacementRecord>,
    /// After every arrival (not in the JSON report; binned by `crate::bins`).
    #[serde(skip)]
    pub by_demand: Vec<DemandPoint>,
    /// Pods without GPU the simulator placed / could not place (host filter).
    pub cpu_only_placed: usize,
    /// See `cpu_only_placed`.
    pub cpu_only_unplaced: usize,
    /// GPU workloads the service placed on a node without their host CPU or memory free,
    /// asked again among the nodes with room (host filter).
    pub host_retries: usize,
    /// Timing (not in the deterministic report).
    #[serde(skip)]
    pub timing: Timing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Leave = 0,
    Arrive = 1,
    /// A departure at or before its arrival: right after the arrival.
    LateLeave = 2,
}

/// The per-card request classes of a trace with their popularity (fragmentation measure).
pub fn request_classes(jobs: &[Job]) -> Vec<(Need, f64)> {
    gpusched_client::measure::request_classes(
        jobs.iter()
            .filter_map(|j| j.needs.as_ref())
            .flatten()
            .copied(),
    )
}

fn describe(r: &v1::AllocationResult) -> String {
    let cards: Vec<String> = r
        .containers
        .iter()
        .flat_map(|c| &c.cards)
        .map(|c| match &c.mig {
            Some(m) => format!("{}[{}@{}]", c.card_id, m.profile, m.start),
            None => c.card_id.clone(),
        })
        .collect();
    format!("{}/{}", r.node_name, cards.join(","))
}

fn main_reason(f: &v1::FailedNode) -> String {
    let mut best: Option<&v1::ReasonCount> = None;
    for r in &f.reasons {
        if best.is_none_or(|b| r.count > b.count) {
            best = Some(r);
        }
    }
    match best {
        Some(r) if !r.name.is_empty() => r.name.clone(),
        Some(r) => format!("{:?}", r.reason()),
        None => "Unknown".into(),
    }
}

fn top(m: &BTreeMap<String, usize>) -> Option<String> {
    m.iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, _)| k.clone())
}

fn reasons(r: &v1::AllocationResult) -> (BTreeMap<String, usize>, usize, String) {
    let mut all: BTreeMap<String, usize> = BTreeMap::new();
    let mut resolvable: BTreeMap<String, usize> = BTreeMap::new();
    let mut unresolvable = 0;
    for f in &r.failed_nodes {
        let reason = main_reason(f);
        if f.unresolvable {
            unresolvable += 1;
        } else {
            *resolvable.entry(reason.clone()).or_default() += 1;
        }
        *all.entry(reason).or_default() += 1;
    }
    let t = top(&resolvable)
        .or_else(|| top(&all))
        .unwrap_or_else(|| "NoNodes".to_owned());
    (all, unresolvable, t)
}

struct Run<'a> {
    client: &'a Client,
    options: v1::PlacementOptions,
    opts: &'a ReplayOptions,
    setup: &'a Setup,
    cluster: Cluster,
    workloads: Vec<v1::Workload>,
    quotas: Ledger,
    timing: Timing,
}

impl Run<'_> {
    /// Workload `j` as sent now: with the budget its namespace has left, when it has a quota.
    fn workload(&self, j: usize) -> v1::Workload {
        let mut w = self.workloads[j].clone();
        if let Some(b) = self.quotas.budget(&w.namespace) {
            w.quota = Some(b);
        }
        w
    }

    /// Books placement `r` of workload `j` on the cluster and against its namespace.
    fn book(
        &mut self,
        j: usize,
        r: &v1::AllocationResult,
        host: (u64, u64),
    ) -> anyhow::Result<Option<Booking>> {
        self.quotas.book(j, &self.workloads[j].namespace, r);
        self.cluster.book_with_host(r, host)
    }

    async fn call(
        &mut self,
        nodes: Vec<v1::Node>,
        jobs: &[usize],
    ) -> anyhow::Result<Vec<v1::AllocationResult>> {
        self.timing.calls += 1;
        self.timing.nodes_sent += nodes.len();
        let t = Instant::now();
        let options = options_for(&self.options, &nodes);
        let out = if jobs.len() == 1 && self.opts.batch_max == 1 {
            let r = self
                .client
                .allocate_request(v1::AllocateRequest {
                    node_set: None,
                    nodes,
                    workload: Some(self.workload(jobs[0])),
                    options: Some(options),
                    restrict_to_node_names: vec![],
                    node_refs: vec![],
                })
                .await
                .map_err(|e| anyhow::anyhow!("Allocate ({}): {e}", self.setup.name))?;
            vec![r]
        } else {
            let r = self
                .client
                .allocate_batch(v1::AllocateBatchRequest {
                    node_set: None,
                    nodes,
                    workloads: jobs.iter().map(|&j| self.workload(j)).collect(),
                    options: Some(options),
                    all_or_nothing: false,
                    return_updated_nodes: false,
                    node_refs: vec![],
                })
                .await
                .map_err(|e| anyhow::anyhow!("AllocateBatch ({}): {e}", self.setup.name))?;
            r.results
        };
        self.timing.rpc_s += t.elapsed().as_secs_f64();
        anyhow::ensure!(
            out.len() == jobs.len(),
            "the service answered {} results for {} workloads",
            out.len(),
            jobs.len()
        );
        Ok(out)
    }

    /// The nodes that may host job `j`'s host request (all without the host filter).
    fn host_ok(&self, jobs: &[Job], j: usize, node: usize) -> bool {
        !self.opts.host_filter || self.cluster.host_fits(node, jobs[j].host)
    }

    /// Asks for job `j` alone among the nodes with its host request free (narrowed like a
    /// batch, see [`Cluster::candidates_where`]; every node without narrowing).
    async fn ask_alone(&mut self, jobs: &[Job], j: usize) -> anyhow::Result<v1::AllocationResult> {
        self.timing.reasks += 1;
        let t = Instant::now();
        let host = jobs[j].host;
        let allowed = |i: usize| self.cluster.host_fits(i, host);
        let nodes: Vec<v1::Node> = if self.opts.narrow {
            let needs = [jobs[j].needs.as_deref()];
            self.cluster.candidates_where(&needs, 1, &allowed)
        } else {
            (0..self.cluster.nodes.len())
                .filter(|&i| allowed(i))
                .map(|i| self.cluster.nodes[i].clone())
                .collect()
        };
        self.timing.build_s += t.elapsed().as_secs_f64();
        if nodes.is_empty() {
            return Ok(v1::AllocationResult::default());
        }
        Ok(self.call(nodes, &[j]).await?.remove(0))
    }
}

/// The options of a call on `nodes`: the mix keeps only the card types those nodes have (the
/// service refuses others, and a shape that matches no node sent adds the same to every node's
/// change, so dropping it changes no decision; see `gpusched_client::mix::for_card_types`).
/// When no shape is left, one that no node can host (65 cards: more than a node has) stands for
/// them: it measures every node's whole free compute, the same for every choice.
fn options_for(options: &v1::PlacementOptions, nodes: &[v1::Node]) -> v1::PlacementOptions {
    let Some(mix) = &options.workload_mix else {
        return options.clone();
    };
    if mix.shapes.iter().all(|s| s.gpu_types.is_empty()) {
        return options.clone();
    }
    let mut types: Vec<&str> = nodes
        .iter()
        .flat_map(|n| n.cards.iter().map(|c| c.r#type.as_str()))
        .collect();
    types.sort_unstable();
    types.dedup();
    let kept =
        gpusched_client::mix::for_card_types(mix, &types).unwrap_or_else(|| v1::WorkloadMix {
            shapes: vec![v1::WorkloadMixShape {
                probability: 1.0,
                gpu_count: 65,
                gpucores_percent: 100,
                ..v1::WorkloadMixShape::default()
            }],
        });
    v1::PlacementOptions {
        workload_mix: Some(kept),
        ..options.clone()
    }
}

/// The workload of a job as sent under `setup`: the set-up's weights, and for `+host`
/// set-ups the Kubernetes form with the pod's `cpu` and `memory` requests (the service reads
/// host requests from that form only).
fn workload_for(setup: &Setup, j: &Job) -> v1::Workload {
    let w = setup.workload(&j.workload);
    if !setup.host || j.cpu_only {
        return w;
    }
    let Some(v1::workload::Spec::Typed(t)) = &w.spec else {
        return w;
    };
    let mut annotations = std::collections::BTreeMap::new();
    if !t.use_gpu_types.is_empty() {
        annotations.insert(
            "nvidia.com/use-gputype".to_owned(),
            t.use_gpu_types.join(","),
        );
    }
    if let Some(ws) = t.scoring_weights {
        annotations.insert(
            "hami.io/device-scoring-weights".to_owned(),
            format!("slot={},core={},memory={}", ws.slot, ws.core, ws.memory),
        );
    }
    let containers = t
        .containers
        .iter()
        .map(|c| {
            let mut limits = std::collections::BTreeMap::new();
            limits.insert("nvidia.com/gpu".to_owned(), c.gpu_count.to_string());
            if c.gpumem_mib > 0 {
                limits.insert("nvidia.com/gpumem".to_owned(), c.gpumem_mib.to_string());
            }
            if c.gpumem_percent > 0 {
                limits.insert(
                    "nvidia.com/gpumem-percentage".to_owned(),
                    c.gpumem_percent.to_string(),
                );
            }
            if let Some(k) = c.gpucores_percent {
                limits.insert("nvidia.com/gpucores".to_owned(), k.to_string());
            }
            let mut requests = std::collections::BTreeMap::new();
            requests.insert("cpu".to_owned(), format!("{}m", j.host.0));
            requests.insert("memory".to_owned(), format!("{}Mi", j.host.1));
            v1::KubernetesContainer {
                name: c.name.clone(),
                limits,
                requests,
            }
        })
        .collect();
    v1::Workload {
        spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
            annotations,
            init_containers: Vec::new(),
            containers,
        })),
        ..w
    }
}

/// Replays `jobs` on `nodes` under `setup`, through `client` (nodes without host resources).
pub async fn replay(
    client: &Client,
    nodes: &[v1::Node],
    jobs: &[Job],
    setup: &Setup,
    opts: &ReplayOptions,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<SetupResult> {
    let hosts = vec![None; nodes.len()];
    replay_with_hosts(client, nodes, &hosts, jobs, setup, opts, progress).await
}

/// Mutable state of a replay besides the cluster.
struct Tally {
    res: SetupResult,
    arrived: f64,
    handled: usize,
    unplaced_in_row: usize,
    last_time: f64,
    every: usize,
    total_cards: f64,
    total_cores: f64,
    bookings: Vec<Option<Booking>>,
    placements: Vec<Option<String>>,
    artifact: Option<ArtifactFrag>,
}

impl Tally {
    /// After an event: count it, take a sample every `every` events, and record the state by
    /// arrived demand after an arrival.
    fn after(
        &mut self,
        c: &Cluster,
        classes: &[(Need, f64)],
        time: f64,
        arrival: bool,
        progress: &indicatif::ProgressBar,
    ) {
        self.handled += 1;
        self.last_time = time;
        if self.handled.is_multiple_of(self.every) {
            let s = sample(
                c,
                classes,
                self.handled,
                time,
                self.arrived,
                self.total_cards,
                &self.res,
            );
            self.res.peak_allocation_pct = self.res.peak_allocation_pct.max(s.allocation_pct);
            self.res.samples.push(s);
        }
        if arrival {
            let alloc = c.allocation_ratio() * 100.0;
            let (frag, ratio) = match &self.artifact {
                Some(a) => {
                    let f = a.total();
                    let free = self.total_cores * (1.0 - alloc / 100.0);
                    (
                        f / self.total_cores.max(1.0) * 100.0,
                        if free > 0.0 { f / free * 100.0 } else { 0.0 },
                    )
                }
                None => (0.0, 0.0),
            };
            self.res.by_demand.push(DemandPoint {
                arrived_pct: self.arrived / self.total_cards * 100.0,
                allocation_pct: alloc,
                fragmentation_pct: frag,
                fragmentation_ratio_pct: ratio,
            });
        }
        progress.inc(1);
    }

    fn measure(&mut self, c: &Cluster, node: usize) {
        if let Some(a) = &mut self.artifact {
            a.update(c, node);
        }
    }
}

/// [`replay`] on nodes with host CPU and memory (`hosts`, parallel to `nodes`; see
/// [`ReplayOptions::host_filter`] and [`Setup::host`]).
pub async fn replay_with_hosts(
    client: &Client,
    nodes: &[v1::Node],
    hosts: &[Option<(u64, u64)>],
    jobs: &[Job],
    setup: &Setup,
    opts: &ReplayOptions,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<SetupResult> {
    let started = Instant::now();
    let cluster = Cluster::with_hosts(nodes.to_vec(), hosts.to_vec(), setup.host)?;
    let total_cards = cluster.total_cards().max(1) as f64;
    let total_cores: f64 = nodes
        .iter()
        .flat_map(|n| &n.cards)
        .map(|c| f64::from(c.total_cores))
        .sum();
    let classes = request_classes(jobs);
    let mut options = setup.options().map_err(|e| anyhow::anyhow!(e))?;
    if setup.uses_fgd() {
        options.workload_mix = if setup.host {
            opts.host_mix.clone().or_else(|| opts.mix.clone())
        } else {
            opts.mix.clone()
        };
    }
    let t = Instant::now();
    let workloads: Vec<v1::Workload> = jobs.iter().map(|j| workload_for(setup, j)).collect();
    let artifact = (!opts.artifact_mix.is_empty())
        .then(|| ArtifactFrag::new(opts.artifact_mix.clone(), &cluster));
    let mut run = Run {
        client,
        options,
        opts,
        setup,
        cluster,
        workloads,
        quotas: Ledger::new(&opts.quotas),
        timing: Timing::default(),
    };
    run.timing.build_s += t.elapsed().as_secs_f64();

    let mut events: Vec<(f64, Kind, usize)> = Vec::with_capacity(jobs.len() * 2);
    for (i, j) in jobs.iter().enumerate() {
        if j.cpu_only && !opts.host_filter {
            continue;
        }
        events.push((j.arrive, Kind::Arrive, i));
        if let (Some(l), false) = (j.leave, opts.fill) {
            if l > j.arrive {
                events.push((l, Kind::Leave, i));
            } else {
                events.push((j.arrive, Kind::LateLeave, i));
            }
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut tally = Tally {
        res: SetupResult {
            setup: setup.clone(),
            arrivals: 0,
            placed: 0,
            unplaced: 0,
            departures: 0,
            first_unplaced_at_demand_pct: None,
            peak_allocation_pct: 0.0,
            mean_allocation_pct: 0.0,
            mean_fragmentation_pct: 0.0,
            unplaced_by_reason: BTreeMap::new(),
            samples: Vec::new(),
            unplaced_workloads: Vec::new(),
            quota: None,
            placements: Vec::new(),
            log: Vec::new(),
            by_demand: Vec::new(),
            cpu_only_placed: 0,
            cpu_only_unplaced: 0,
            host_retries: 0,
            timing: Timing::default(),
        },
        arrived: 0.0,
        handled: 0,
        unplaced_in_row: 0,
        last_time: 0.0,
        every: (events.len() / opts.samples.max(1)).max(1),
        total_cards,
        total_cores,
        bookings: vec![None; jobs.len()],
        placements: vec![None; jobs.len()],
        artifact,
    };
    // A `+host` set-up's decisions read the nodes' host resources, which a pod without GPU
    // changes: such a pod ends a batch. Otherwise it is placed in order while the batch's
    // answers are applied (the service's decisions do not depend on it).
    let cut_at_cpu_only = setup.host;
    // With the host filter a batch stops at its first placement without room for the host
    // request (the rest is sent again): the batch size adapts, halving towards the position of
    // that stop and doubling after a batch applied whole.
    let mut batch_size = opts.batch_max.max(1);
    let mut stop = false;
    let mut i = 0usize;
    while i < events.len() && !stop {
        let (time, kind, j) = events[i];
        if kind != Kind::Arrive {
            let t = Instant::now();
            if let Some(b) = tally.bookings[j].take() {
                run.cluster.release(&b)?;
                tally.measure(&run.cluster, b.node);
                run.quotas.release(j);
                tally.res.departures += 1;
            }
            i += 1;
            tally.after(&run.cluster, &classes, time, false, progress);
            run.timing.book_s += t.elapsed().as_secs_f64();
            continue;
        }
        // A run of arrivals with no departure between them (at most `batch_max` GPU
        // workloads); its GPU workloads go in one batch.
        let t = Instant::now();
        let mut run_jobs: Vec<usize> = Vec::new();
        let mut gpu_jobs: Vec<usize> = Vec::new();
        for e in events[i..].iter().take_while(|e| e.1 == Kind::Arrive) {
            let jj = e.2;
            if jobs[jj].cpu_only {
                if cut_at_cpu_only && !run_jobs.is_empty() {
                    break;
                }
                run_jobs.push(jj);
                if cut_at_cpu_only {
                    break;
                }
                continue;
            }
            if gpu_jobs.len() >= batch_size {
                break;
            }
            run_jobs.push(jj);
            gpu_jobs.push(jj);
        }
        // With the host filter, a node without room for the smallest host request of the batch
        // can never be a right answer: it is not sent (what the service chooses instead is what
        // it would choose for such a workload asked again among the nodes with room).
        let smallest = gpu_jobs.iter().fold((u64::MAX, u64::MAX), |m, &j| {
            (m.0.min(jobs[j].host.0), m.1.min(jobs[j].host.1))
        });
        let room = |n: usize| !opts.host_filter || run.cluster.host_fits(n, smallest);
        let nodes = if gpu_jobs.is_empty() {
            Vec::new()
        } else if opts.narrow {
            let needs: Vec<Option<&[Need]>> =
                gpu_jobs.iter().map(|&j| jobs[j].needs.as_deref()).collect();
            run.cluster.candidates_where(&needs, gpu_jobs.len(), &room)
        } else {
            (0..run.cluster.nodes.len())
                .filter(|&n| room(n))
                .map(|n| run.cluster.nodes[n].clone())
                .collect()
        };
        let all_sent = nodes.len() == run.cluster.nodes.len() && !opts.host_filter;
        run.timing.build_s += t.elapsed().as_secs_f64();
        let results = if gpu_jobs.is_empty() {
            Vec::new()
        } else if nodes.is_empty() {
            vec![v1::AllocationResult::default(); gpu_jobs.len()]
        } else {
            run.call(nodes, &gpu_jobs).await?
        };

        // Apply in order. A placement on a node without the host request free, and a workload
        // the narrowed call did not place, are asked again among every (allowed) node; when
        // that answer differs from the batch's, the rest of the batch is sent again.
        let mut consumed = 0usize;
        let mut r = 0usize;
        let mut asked: std::collections::HashMap<usize, v1::AllocationResult> =
            std::collections::HashMap::new();
        for (pos, &jj) in run_jobs.iter().enumerate() {
            let t = Instant::now();
            if jobs[jj].cpu_only {
                tally.res.arrivals += 1;
                match run.cluster.place_cpu_only(jobs[jj].host)? {
                    Some(b) => {
                        tally.measure(&run.cluster, b.node);
                        tally.res.log.push(PlacementRecord {
                            event: tally.handled,
                            workload: jobs[jj].name.clone(),
                            node: Some(run.cluster.nodes[b.node].name.clone()),
                            cards: Vec::new(),
                            host: b.host,
                        });
                        tally.bookings[jj] = Some(b);
                        tally.res.cpu_only_placed += 1;
                    }
                    None => {
                        tally.res.log.push(PlacementRecord {
                            event: tally.handled,
                            workload: jobs[jj].name.clone(),
                            ..PlacementRecord::default()
                        });
                        tally.res.cpu_only_unplaced += 1;
                    }
                }
                consumed = pos + 1;
                tally.after(&run.cluster, &classes, jobs[jj].arrive, true, progress);
                run.timing.book_s += t.elapsed().as_secs_f64();
                continue;
            }
            let batch_answer = &results[r];
            r += 1;
            let batch_node = batch_answer
                .placed
                .then(|| run.cluster.index_of(&batch_answer.node_name))
                .flatten();
            let fits_host = batch_node.is_some_and(|n| run.host_ok(jobs, jj, n));
            let (answer, diverged) = if (batch_answer.placed && fits_host)
                || (!batch_answer.placed && all_sent)
            {
                (batch_answer.clone(), false)
            } else {
                run.book_s_pause(t);
                let full = if batch_answer.placed {
                    // Placed on a node without the host request free.
                    tally.res.host_retries += 1;
                    run.ask_alone(jobs, jj).await?
                } else {
                    // Unplaced in the narrowed call: every node, for the reasons. Consecutive
                    // unplaced workloads are asked together (none of them changes the state).
                    if !asked.contains_key(&jj) {
                        let group: Vec<usize> = run_jobs[pos..]
                            .iter()
                            .zip(pos..)
                            .take_while(|&(&g, _)| !jobs[g].cpu_only)
                            .map(|(&g, _)| g)
                            .enumerate()
                            .take_while(|&(k, _)| results.get(r - 1 + k).is_some_and(|x| !x.placed))
                            .map(|(_, g)| g)
                            .take(64)
                            .collect();
                        run.timing.reasks += 1;
                        let nodes = run.cluster.nodes.clone();
                        let answers = run.call(nodes, &group).await?;
                        asked.extend(group.into_iter().zip(answers));
                    }
                    let full = asked.remove(&jj).unwrap_or_default();
                    let host_ok = run
                        .cluster
                        .index_of(&full.node_name)
                        .is_some_and(|n| run.host_ok(jobs, jj, n));
                    if full.placed && !host_ok {
                        run.ask_alone(jobs, jj).await?
                    } else {
                        full
                    }
                };
                if !batch_answer.placed && full.placed {
                    run.timing.narrow_misses += 1;
                }
                let diverged = batch_answer.placed || full.placed;
                (full, diverged)
            };
            let t = Instant::now();
            tally.res.arrivals += 1;
            tally.arrived += jobs[jj].demand;
            if answer.placed {
                let b = run.book(jj, &answer, jobs[jj].host)?;
                if let Some(b) = &b {
                    tally.measure(&run.cluster, b.node);
                }
                tally
                    .res
                    .log
                    .push(record(&answer, &jobs[jj], tally.handled));
                tally.bookings[jj] = b;
                tally.placements[jj] = Some(describe(&answer));
                tally.res.placed += 1;
                tally.unplaced_in_row = 0;
            } else {
                run.quotas.unplaced(&run.workloads[jj].namespace, &answer);
                let (node_reasons, unresolvable_nodes, top) = reasons(&answer);
                *tally.res.unplaced_by_reason.entry(top.clone()).or_default() += 1;
                tally.res.unplaced += 1;
                tally.unplaced_in_row += 1;
                let pct = round(tally.arrived / total_cards * 100.0, 3);
                tally.res.first_unplaced_at_demand_pct.get_or_insert(pct);
                tally.res.log.push(PlacementRecord {
                    event: tally.handled,
                    workload: jobs[jj].name.clone(),
                    ..PlacementRecord::default()
                });
                tally.res.unplaced_workloads.push(Unplaced {
                    name: jobs[jj].name.clone(),
                    arrive_s: jobs[jj].arrive,
                    demand: jobs[jj].demand,
                    arrived_demand_pct: pct,
                    node_reasons,
                    unresolvable_nodes,
                    top_reason: top,
                });
            }
            consumed = pos + 1;
            tally.after(&run.cluster, &classes, jobs[jj].arrive, true, progress);
            run.timing.book_s += t.elapsed().as_secs_f64();
            if opts.fill
                && opts
                    .fill_stop_after
                    .is_some_and(|n| tally.unplaced_in_row >= n)
            {
                stop = true;
                break;
            }
            if diverged {
                break;
            }
        }
        if consumed == 0 {
            anyhow::bail!("internal: a batch made no progress");
        }
        batch_size = if consumed < run_jobs.len() {
            (2 * consumed).clamp(8, opts.batch_max.max(1))
        } else {
            (2 * batch_size).min(opts.batch_max.max(1))
        };
        i += consumed;
    }
    // The final state is always a sample.
    if tally
        .res
        .samples
        .last()
        .is_none_or(|s| s.event != tally.handled)
    {
        let s = sample(
            &run.cluster,
            &classes,
            tally.handled,
            tally.last_time,
            tally.arrived,
            total_cards,
            &tally.res,
        );
        tally.res.peak_allocation_pct = tally.res.peak_allocation_pct.max(s.allocation_pct);
        tally.res.samples.push(s);
    }
    let mut res = tally.res;
    let n = res.samples.len().max(1) as f64;
    res.mean_allocation_pct = round(
        res.samples.iter().map(|s| s.allocation_pct).sum::<f64>() / n,
        3,
    );
    res.mean_fragmentation_pct = round(
        res.samples.iter().map(|s| s.fragmentation_pct).sum::<f64>() / n,
        3,
    );
    res.placements = tally.placements;
    res.quota = std::mem::take(&mut run.quotas).report();
    run.timing.total_s = started.elapsed().as_secs_f64();
    res.timing = run.timing;
    Ok(res)
}

impl Run<'_> {
    /// Time spent booking so far in this step, before a call starts (calls time themselves).
    fn book_s_pause(&mut self, since: Instant) {
        self.timing.book_s += since.elapsed().as_secs_f64();
    }
}

/// The decision record of a placed workload.
fn record(r: &v1::AllocationResult, j: &Job, event: usize) -> PlacementRecord {
    PlacementRecord {
        event,
        workload: j.name.clone(),
        node: Some(r.node_name.clone()),
        cards: r
            .containers
            .iter()
            .flat_map(|c| &c.cards)
            .map(|c| (c.card_id.clone(), c.mem_mib, c.cores_percent))
            .collect(),
        host: j.host,
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

fn sample(
    c: &Cluster,
    classes: &[(Need, f64)],
    event: usize,
    time_s: f64,
    arrived: f64,
    total_cards: f64,
    res: &SetupResult,
) -> Sample {
    Sample {
        event,
        time_s,
        arrived_demand_pct: round(arrived / total_cards * 100.0, 3),
        allocation_pct: round(c.allocation_ratio() * 100.0, 3),
        cards: c.card_states(),
        fragmentation_pct: round(c.fragmentation(classes) * 100.0, 3),
        placed: res.placed,
        unplaced: res.unplaced,
        running: res.placed.saturating_sub(res.departures),
        mig: crate::mig::measure(&c.nodes),
    }
}

/// Seconds as a Duration for display.
pub fn secs(d: f64) -> Duration {
    Duration::from_secs_f64(d.max(0.0))
}
