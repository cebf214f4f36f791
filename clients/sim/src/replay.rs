//! The replay: arrivals and departures in time order, placed by the service.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpusched_api::v1;
use gpusched_client::Client;
use serde::Serialize;

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
            quotas: BTreeMap::new(),
        }
    }
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
    let mut counts: BTreeMap<Need, usize> = BTreeMap::new();
    let mut n = 0usize;
    for needs in jobs.iter().filter_map(|j| j.needs.as_ref()) {
        for need in needs {
            *counts.entry(Need { count: 1, ..*need }).or_default() += 1;
            n += 1;
        }
    }
    counts
        .into_iter()
        .map(|(k, c)| (k, c as f64 / n.max(1) as f64))
        .collect()
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
    fn book(&mut self, j: usize, r: &v1::AllocationResult) -> anyhow::Result<Option<Booking>> {
        self.quotas.book(j, &self.workloads[j].namespace, r);
        self.cluster.book(r)
    }

    async fn call(
        &mut self,
        nodes: Vec<v1::Node>,
        jobs: &[usize],
    ) -> anyhow::Result<Vec<v1::AllocationResult>> {
        self.timing.calls += 1;
        self.timing.nodes_sent += nodes.len();
        let t = Instant::now();
        let out = if jobs.len() == 1 && self.opts.batch_max == 1 {
            let r = self
                .client
                .allocate_request(v1::AllocateRequest {
                    node_set: None,
                    nodes,
                    workload: Some(self.workload(jobs[0])),
                    options: Some(self.options.clone()),
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
                    options: Some(self.options.clone()),
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
}

/// Replays `jobs` on `nodes` under `setup`, through `client`.
pub async fn replay(
    client: &Client,
    nodes: &[v1::Node],
    jobs: &[Job],
    setup: &Setup,
    opts: &ReplayOptions,
    progress: &indicatif::ProgressBar,
) -> anyhow::Result<SetupResult> {
    let started = Instant::now();
    let cluster = Cluster::new(nodes.to_vec())?;
    let total_cards = cluster.total_cards().max(1) as f64;
    let classes = request_classes(jobs);
    let options = setup.options().map_err(|e| anyhow::anyhow!(e))?;
    let t = Instant::now();
    let workloads: Vec<v1::Workload> = jobs.iter().map(|j| setup.workload(&j.workload)).collect();
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
    let every = (events.len() / opts.samples.max(1)).max(1);

    let mut bookings: Vec<Option<Booking>> = vec![None; jobs.len()];
    let mut placements: Vec<Option<String>> = vec![None; jobs.len()];
    let mut res = SetupResult {
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
        timing: Timing::default(),
    };
    let mut arrived = 0.0f64;
    let mut handled = 0usize;
    let mut unplaced_in_row = 0usize;
    let mut last_time = 0.0f64;
    let mut stop = false;

    // After each event: count it, and take a sample every `every` events.
    macro_rules! after_event {
        ($time:expr) => {{
            handled += 1;
            last_time = $time;
            if handled % every == 0 {
                let s = sample(
                    &run.cluster,
                    &classes,
                    handled,
                    $time,
                    arrived,
                    total_cards,
                    &res,
                );
                res.peak_allocation_pct = res.peak_allocation_pct.max(s.allocation_pct);
                res.samples.push(s);
            }
            progress.inc(1);
        }};
    }

    let mut i = 0usize;
    while i < events.len() && !stop {
        let (time, kind, j) = events[i];
        if kind != Kind::Arrive {
            let t = Instant::now();
            if let Some(b) = bookings[j].take() {
                run.cluster.release(&b)?;
                run.quotas.release(j);
                res.departures += 1;
            }
            i += 1;
            after_event!(time);
            run.timing.book_s += t.elapsed().as_secs_f64();
            continue;
        }
        // A run of arrivals with no departure between them: one batch.
        let t = Instant::now();
        let batch: Vec<usize> = events[i..]
            .iter()
            .take_while(|e| e.1 == Kind::Arrive)
            .take(opts.batch_max.max(1))
            .map(|e| e.2)
            .collect();
        let nodes = if opts.narrow {
            let needs: Vec<Option<&[Need]>> =
                batch.iter().map(|&j| jobs[j].needs.as_deref()).collect();
            run.cluster.candidates(&needs, batch.len())
        } else {
            run.cluster.nodes.clone()
        };
        let all_sent = nodes.len() == run.cluster.nodes.len();
        run.timing.build_s += t.elapsed().as_secs_f64();
        let results = if nodes.is_empty() {
            vec![v1::AllocationResult::default(); batch.len()]
        } else {
            run.call(nodes, &batch).await?
        };

        // Apply in order. Unplaced workloads of a narrowed call are asked again against every
        // node (state unchanged by them), in groups, before the next placement is booked.
        let mut consumed = 0usize;
        let mut pending: Vec<usize> = Vec::new(); // positions in `batch`
        let mut k = 0usize;
        'apply: while k <= batch.len() {
            let placed_next = k < batch.len() && results[k].placed;
            if (placed_next || k == batch.len()) && !pending.is_empty() {
                // Resolve the pending unplaced group.
                let group: Vec<usize> = pending.iter().map(|&p| batch[p]).collect();
                let full = if all_sent {
                    pending.iter().map(|&p| results[p].clone()).collect()
                } else {
                    let mut out = Vec::with_capacity(group.len());
                    for chunk in group.chunks(64) {
                        run.timing.reasks += 1;
                        let nodes = run.cluster.nodes.clone();
                        out.extend(run.call(nodes, chunk).await?);
                    }
                    out
                };
                for (gi, r) in full.iter().enumerate() {
                    let p = pending[gi];
                    let jj = batch[p];
                    let t = Instant::now();
                    res.arrivals += 1;
                    arrived += jobs[jj].demand;
                    if r.placed {
                        // The narrowing missed a node: take the service's answer on every
                        // node and replay the rest of the batch from here.
                        run.timing.narrow_misses += 1;
                        bookings[jj] = run.book(jj, r)?;
                        placements[jj] = Some(describe(r));
                        res.placed += 1;
                        unplaced_in_row = 0;
                        consumed = p + 1;
                        after_event!(jobs[jj].arrive);
                        run.timing.book_s += t.elapsed().as_secs_f64();
                        pending.clear();
                        break 'apply;
                    }
                    run.quotas.unplaced(&run.workloads[jj].namespace, r);
                    let (node_reasons, unresolvable_nodes, top) = reasons(r);
                    *res.unplaced_by_reason.entry(top.clone()).or_default() += 1;
                    res.unplaced += 1;
                    unplaced_in_row += 1;
                    let pct = round(arrived / total_cards * 100.0, 3);
                    res.first_unplaced_at_demand_pct.get_or_insert(pct);
                    res.unplaced_workloads.push(Unplaced {
                        name: jobs[jj].name.clone(),
                        arrive_s: jobs[jj].arrive,
                        demand: jobs[jj].demand,
                        arrived_demand_pct: pct,
                        node_reasons,
                        unresolvable_nodes,
                        top_reason: top,
                    });
                    consumed = p + 1;
                    after_event!(jobs[jj].arrive);
                    run.timing.book_s += t.elapsed().as_secs_f64();
                    if opts.fill && opts.fill_stop_after.is_some_and(|n| unplaced_in_row >= n) {
                        stop = true;
                        pending.clear();
                        break 'apply;
                    }
                }
                pending.clear();
            }
            if k == batch.len() {
                break;
            }
            if results[k].placed {
                let t = Instant::now();
                let jj = batch[k];
                res.arrivals += 1;
                arrived += jobs[jj].demand;
                bookings[jj] = run.book(jj, &results[k])?;
                placements[jj] = Some(describe(&results[k]));
                res.placed += 1;
                unplaced_in_row = 0;
                consumed = k + 1;
                after_event!(jobs[jj].arrive);
                run.timing.book_s += t.elapsed().as_secs_f64();
            } else {
                pending.push(k);
            }
            k += 1;
        }
        i += consumed.max(1).min(batch.len());
        if consumed == 0 {
            anyhow::bail!("internal: a batch made no progress");
        }
    }
    // The final state is always a sample.
    if res.samples.last().is_none_or(|s| s.event != handled) {
        let s = sample(
            &run.cluster,
            &classes,
            handled,
            last_time,
            arrived,
            total_cards,
            &res,
        );
        res.peak_allocation_pct = res.peak_allocation_pct.max(s.allocation_pct);
        res.samples.push(s);
    }
    let n = res.samples.len().max(1) as f64;
    res.mean_allocation_pct = round(
        res.samples.iter().map(|s| s.allocation_pct).sum::<f64>() / n,
        3,
    );
    res.mean_fragmentation_pct = round(
        res.samples.iter().map(|s| s.fragmentation_pct).sum::<f64>() / n,
        3,
    );
    res.placements = placements;
    res.quota = std::mem::take(&mut run.quotas).report();
    run.timing.total_s = started.elapsed().as_secs_f64();
    res.timing = run.timing;
    Ok(res)
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
