//! The replay with priorities and preemption (`--preemption off|on|both`): arrivals and
//! departures in time order as in [`crate::replay`] (arrivals only with `--fill`), one
//! `Allocate` per arrival over every node.
//! With preemption on, a workload that fits nowhere asks the service's `Preempt`
//! (docs/placement-semantics.md section 9) with every running workload as a placed workload
//! (its priority, its start, its bookings per card); when the service names a node, the victims
//! are evicted (their bookings released; like unplaced workloads they are not retried) and the
//! workload takes the placement the answer gives. Every decision is the service's.
//!
//! Measures per set-up and mode: per priority class the arrivals, the placed and evicted
//! workloads and the placed rate; the preemptions, victims per preemption, and the **evicted
//! GPU-hours**: over the victims, GPU demand (whole-GPU equivalents) times how long each had
//! run when evicted (the work a victim without checkpoints loses).

use std::collections::BTreeMap;

use gpusched_api::v1;
use gpusched_client::Client;
use serde::Serialize;

use crate::cluster::{Booking, Cluster};
use crate::setup::Setup;
use crate::trace::Job;

/// One priority class's numbers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassStats {
    /// Arrivals.
    pub arrivals: usize,
    /// Placed on arrival (with or without preemption).
    pub placed: usize,
    /// Of those, placed by evicting others.
    pub placed_by_preemption: usize,
    /// Placed ÷ arrivals, %.
    pub placed_pct: f64,
    /// Evicted later by a workload of higher priority.
    pub evicted: usize,
    /// Their GPU-hours lost.
    pub evicted_gpu_hours: f64,
}

/// One set-up replayed with priorities, preemption on or off.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PriorityResult {
    /// The set-up's name.
    pub setup: String,
    /// Whether preemption was on.
    pub preemption: bool,
    /// Per priority class (by priority, ascending).
    pub classes: BTreeMap<i32, ClassStats>,
    /// Arrivals that evicted others to be placed.
    pub preemptions: usize,
    /// Victims over all preemptions.
    pub victims: usize,
    /// Victims per preemption (mean; 0 without preemptions).
    pub victims_per_preemption: f64,
    /// The most victims of one preemption.
    pub max_victims: usize,
    /// GPU-hours of the victims' run lost, in all.
    pub evicted_gpu_hours: f64,
    /// `Preempt` answers that needed no eviction (a node fitted after all).
    pub not_needed: usize,
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// A running workload: its booking and when it started.
#[derive(Clone, Debug)]
struct Running {
    booking: Booking,
    start: f64,
}

/// The placed workloads of every node for `Preempt`: the running jobs with their bookings
/// summed per card (one slot per container on the card).
fn placed(cluster: &Cluster, jobs: &[Job], running: &[Option<Running>]) -> Vec<v1::NodePlaced> {
    let mut per_node: BTreeMap<usize, Vec<v1::PlacedWorkload>> = BTreeMap::new();
    for (j, r) in running.iter().enumerate() {
        let Some(r) = r else { continue };
        let node = &cluster.nodes[r.booking.node];
        let mut cards: BTreeMap<usize, v1::Booking> = BTreeMap::new();
        for &(ci, mem, cores) in &r.booking.cards {
            let b = cards.entry(ci).or_insert_with(|| v1::Booking {
                card_id: node.cards[ci].id.clone(),
                ..v1::Booking::default()
            });
            b.slots += 1;
            b.mem_mib += mem;
            b.cores += cores;
        }
        per_node
            .entry(r.booking.node)
            .or_default()
            .push(v1::PlacedWorkload {
                id: format!("job-{j}"),
                priority: jobs[j].priority,
                violates_budget: false,
                start_time_ms: (r.start * 1000.0) as i64,
                bookings: cards.into_values().collect(),
            });
    }
    per_node
        .into_iter()
        .map(|(n, workloads)| v1::NodePlaced {
            node: cluster.nodes[n].name.clone(),
            workloads,
        })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Leave = 0,
    Arrive = 1,
    LateLeave = 2,
}

/// Replays `jobs` on `nodes` under `setup` with priorities, preemption on or off; `fill`:
/// arrivals only (nothing leaves), the cluster fills up.
pub async fn replay_priorities(
    client: &Client,
    nodes: &[v1::Node],
    jobs: &[Job],
    setup: &Setup,
    preemption: bool,
    fill: bool,
) -> anyhow::Result<PriorityResult> {
    let mut cluster = Cluster::new(nodes.to_vec())?;
    let options = setup.options().map_err(|e| anyhow::anyhow!(e))?;
    let mut events: Vec<(f64, Kind, usize)> = Vec::with_capacity(jobs.len() * 2);
    for (i, j) in jobs.iter().enumerate() {
        events.push((j.arrive, Kind::Arrive, i));
        match j.leave.filter(|_| !fill) {
            Some(l) if l > j.arrive => events.push((l, Kind::Leave, i)),
            Some(_) => events.push((j.arrive, Kind::LateLeave, i)),
            None => {}
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut running: Vec<Option<Running>> = vec![None; jobs.len()];
    let mut res = PriorityResult {
        setup: setup.name.clone(),
        preemption,
        classes: BTreeMap::new(),
        preemptions: 0,
        victims: 0,
        victims_per_preemption: 0.0,
        max_victims: 0,
        evicted_gpu_hours: 0.0,
        not_needed: 0,
    };
    for &(time, kind, j) in &events {
        if kind != Kind::Arrive {
            if let Some(r) = running[j].take() {
                cluster.release(&r.booking)?;
            }
            continue;
        }
        let job = &jobs[j];
        let workload = setup.workload(&job.workload);
        res.classes.entry(job.priority).or_default().arrivals += 1;
        let r = client
            .allocate_request(v1::AllocateRequest {
                nodes: cluster.nodes.clone(),
                workload: Some(workload.clone()),
                options: Some(options.clone()),
                ..v1::AllocateRequest::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("Allocate ({}): {e}", setup.name))?;
        if let Some(b) = cluster.book(&r)? {
            running[j] = Some(Running {
                booking: b,
                start: time,
            });
            res.classes.entry(job.priority).or_default().placed += 1;
            continue;
        }
        let eligible = running
            .iter()
            .enumerate()
            .any(|(k, r)| r.is_some() && jobs[k].priority < job.priority);
        if !preemption || !eligible || !r.requests_gpu {
            continue;
        }
        let answer = client
            .preempt_request(v1::PreemptRequest {
                nodes: cluster.nodes.clone(),
                workload: Some(workload),
                options: Some(options.clone()),
                priority: job.priority,
                placed: placed(&cluster, jobs, &running),
                ..v1::PreemptRequest::default()
            })
            .await
            .map_err(|e| anyhow::anyhow!("Preempt ({}): {e}", setup.name))?;
        match v1::PreemptChoiceKind::try_from(answer.choice) {
            Ok(v1::PreemptChoiceKind::Evict) => {}
            Ok(v1::PreemptChoiceKind::NotNeeded) => {
                res.not_needed += 1;
                continue;
            }
            _ => continue,
        }
        let Some(v) = gpusched_client::chosen_victims(&answer) else {
            anyhow::bail!(
                "Preempt ({}): the chosen node {} has no victims",
                setup.name,
                answer.node_name
            );
        };
        for id in &v.ids {
            let k: usize = id
                .strip_prefix("job-")
                .and_then(|s| s.parse().ok())
                .filter(|&k: &usize| k < jobs.len())
                .ok_or_else(|| anyhow::anyhow!("Preempt named an unknown workload `{id}`"))?;
            let victim = running[k]
                .take()
                .ok_or_else(|| anyhow::anyhow!("Preempt named `{id}`, which is not running"))?;
            cluster.release(&victim.booking)?;
            let lost = jobs[k].demand * (time - victim.start).max(0.0) / 3600.0;
            let c = res.classes.entry(jobs[k].priority).or_default();
            c.evicted += 1;
            c.evicted_gpu_hours += lost;
            res.evicted_gpu_hours += lost;
        }
        let placement = v1::AllocationResult {
            placed: true,
            requests_gpu: true,
            node_name: answer.node_name.clone(),
            containers: v.containers.clone(),
            ..v1::AllocationResult::default()
        };
        let b = cluster
            .book(&placement)?
            .ok_or_else(|| anyhow::anyhow!("Preempt's placement books nothing"))?;
        running[j] = Some(Running {
            booking: b,
            start: time,
        });
        let c = res.classes.entry(job.priority).or_default();
        c.placed += 1;
        c.placed_by_preemption += 1;
        res.preemptions += 1;
        res.victims += v.ids.len();
        res.max_victims = res.max_victims.max(v.ids.len());
    }
    for c in res.classes.values_mut() {
        c.placed_pct = round(100.0 * c.placed as f64 / c.arrivals.max(1) as f64, 3);
        c.evicted_gpu_hours = round(c.evicted_gpu_hours, 3);
    }
    res.evicted_gpu_hours = round(res.evicted_gpu_hours, 3);
    res.victims_per_preemption = round(res.victims as f64 / res.preemptions.max(1) as f64, 3);
    Ok(res)
}
