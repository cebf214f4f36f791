//! Decisions over a snapshot: filter and score every node, allocate one workload, allocate a
//! list of workloads one after another.

use crate::evaluate::{NodeOutcome, Scratch, evaluate_node};
use crate::explain::NodeExplanation;
use crate::fit::Prepared;
use crate::model::{CardUsage, Snapshot};
use crate::policy::NodePolicy;
use crate::reason::NodeFailure;
use crate::score::{NodeScore, node_score};
use crate::workload::Workload;

/// A node that can host the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FeasibleNode {
    /// Index of the node in the snapshot.
    pub node: usize,
    /// Node score after the tentative placement.
    pub score: NodeScore,
    /// Preference 0..=100 among the feasible nodes (100 = most preferred).
    pub normalized: u32,
}

/// A node that cannot host the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedNode {
    /// Index of the node in the snapshot.
    pub node: usize,
    /// Why.
    pub failure: NodeFailure,
}

/// Every node evaluated for one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Whether any container asks for a GPU; when not, every node is feasible unchanged.
    pub requests_gpu: bool,
    /// Feasible nodes, most preferred first (ties: smaller name first).
    pub feasible: Vec<FeasibleNode>,
    /// Failed nodes, by name.
    pub failed: Vec<FailedNode>,
    /// Per node explanations, by name (when asked for).
    pub explanations: Vec<NodeExplanation>,
}

/// One card given to a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignedCard {
    /// Position of the card in its node's card list.
    pub card: usize,
    /// Memory booked, MiB.
    pub mem_mib: u64,
    /// Cores booked, percent.
    pub cores: u32,
}

/// The cards of one container (empty for a container without GPU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerAssignment {
    /// Position of the container in pod order (init containers first).
    pub position: usize,
    /// Cards in the order chosen.
    pub cards: Vec<AssignedCard>,
}

/// Where a workload goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// Index of the chosen node in the snapshot.
    pub node: usize,
    /// Its node score after the placement.
    pub score: NodeScore,
    /// Its normalised preference among the feasible nodes.
    pub normalized: u32,
    /// Every container of the workload, in pod order.
    pub containers: Vec<ContainerAssignment>,
    /// Usage of the node's cards after the placement.
    pub final_usage: Vec<CardUsage>,
}

/// The answer for one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocation {
    /// Whether any container asks for a GPU (when not, nothing is placed or booked).
    pub requests_gpu: bool,
    /// The placement, when the workload fits somewhere.
    pub placement: Option<Placement>,
    /// Nodes that cannot host the workload, by name.
    pub failed: Vec<FailedNode>,
    /// Number of feasible nodes.
    pub feasible_count: usize,
    /// Explanation of the chosen node, or of every node when nothing fits (when asked for).
    pub explanations: Vec<NodeExplanation>,
}

/// Evaluates every node of `snapshot` for `workload` (Filter and Score).
pub fn evaluate(snapshot: &Snapshot, workload: &Workload, explain: bool) -> Evaluation {
    let prep = Prepared::new(workload);
    let mut scratch = Scratch::default();
    let mut feasible = Vec::new();
    let mut failed = Vec::new();
    let mut explanations = Vec::new();
    let requests_gpu = workload.requests_gpu();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        if !requests_gpu {
            let usage: Vec<CardUsage> = node.cards.iter().map(|c| c.usage).collect();
            feasible.push(FeasibleNode {
                node: i,
                score: node_score(&node.cards, &usage),
                normalized: 100,
            });
            continue;
        }
        let mut ex = explain.then(|| NodeExplanation {
            node: i,
            containers: Vec::new(),
        });
        match evaluate_node(node, &prep, &mut scratch, false, ex.as_mut()) {
            NodeOutcome::Fit(score) => feasible.push(FeasibleNode {
                node: i,
                score,
                normalized: 0,
            }),
            NodeOutcome::Fail(failure) => failed.push(FailedNode { node: i, failure }),
        }
        explanations.extend(ex);
    }
    if requests_gpu {
        normalize(&mut feasible, workload.node_policy);
        sort_by_preference(&mut feasible, workload.node_policy);
    }
    Evaluation {
        requests_gpu,
        feasible,
        failed,
        explanations,
    }
}

/// Sets `normalized` of every feasible node (see [`preference`]).
fn normalize(feasible: &mut [FeasibleNode], policy: NodePolicy) {
    let min = feasible.iter().map(|f| f.score.key).min().unwrap_or(0);
    let max = feasible.iter().map(|f| f.score.key).max().unwrap_or(0);
    for f in feasible.iter_mut() {
        f.normalized = preference(f.score.key, min, max, policy);
    }
}

/// Preference 0..=100 of a score key among feasible keys `min..=max`: 100 for the most
/// preferred, 0 for the least, linear between (rounded half up, exact integer arithmetic);
/// 100 when all are equal.
fn preference(key: i64, min: i64, max: i64, policy: NodePolicy) -> u32 {
    let span = i128::from(max) - i128::from(min);
    if span <= 0 {
        return 100;
    }
    let above = match policy {
        NodePolicy::Binpack => i128::from(key) - i128::from(min),
        NodePolicy::Spread => i128::from(max) - i128::from(key),
    };
    u32::try_from((200 * above + span) / (2 * span)).unwrap_or(100)
}

/// Most preferred first: binpack highest key, spread lowest; ties by smaller name (the
/// snapshot is sorted by name, so by index).
fn sort_by_preference(feasible: &mut [FeasibleNode], policy: NodePolicy) {
    feasible.sort_by(|a, b| match policy {
        NodePolicy::Binpack => b.score.key.cmp(&a.score.key).then(a.node.cmp(&b.node)),
        NodePolicy::Spread => a.score.key.cmp(&b.score.key).then(a.node.cmp(&b.node)),
    });
}

fn better(policy: NodePolicy, candidate: i64, best: i64) -> bool {
    match policy {
        NodePolicy::Binpack => candidate > best,
        NodePolicy::Spread => candidate < best,
    }
}

/// Chooses the node and cards for `workload` (Allocate).
pub fn allocate(snapshot: &Snapshot, workload: &Workload, explain: bool) -> Allocation {
    let mut scratch = Scratch::default();
    allocate_with(snapshot, workload, explain, &mut scratch)
}

fn allocate_with(
    snapshot: &Snapshot,
    workload: &Workload,
    explain: bool,
    scratch: &mut Scratch,
) -> Allocation {
    let requests_gpu = workload.requests_gpu();
    if !requests_gpu {
        return Allocation {
            requests_gpu,
            placement: None,
            failed: Vec::new(),
            feasible_count: snapshot.nodes.len(),
            explanations: Vec::new(),
        };
    }
    let prep = Prepared::new(workload);
    let policy = workload.node_policy;
    let mut failed = Vec::new();
    let mut best: Option<(usize, NodeScore)> = None;
    let mut keys: Vec<i64> = Vec::new();
    for (i, node) in snapshot.nodes.iter().enumerate() {
        match evaluate_node(node, &prep, scratch, false, None) {
            NodeOutcome::Fit(score) => {
                keys.push(score.key);
                if best.is_none_or(|(_, b)| better(policy, score.key, b.key)) {
                    best = Some((i, score));
                }
            }
            NodeOutcome::Fail(failure) => failed.push(FailedNode { node: i, failure }),
        }
    }
    let mut explanations = Vec::new();
    let placement = best.and_then(|(i, score)| {
        let node = snapshot.nodes.get(i)?;
        let mut ex = explain.then(|| NodeExplanation {
            node: i,
            containers: Vec::new(),
        });
        // Deterministic: the same evaluation again, this time recording the cards.
        let NodeOutcome::Fit(_) = evaluate_node(node, &prep, scratch, true, ex.as_mut()) else {
            return None;
        };
        explanations.extend(ex);
        let mut containers: Vec<ContainerAssignment> = (0..workload.containers.len())
            .map(|position| ContainerAssignment {
                position,
                cards: Vec::new(),
            })
            .collect();
        for pick in &scratch.picks {
            if let Some(c) = containers.get_mut(pick.container) {
                c.cards.push(AssignedCard {
                    card: pick.card,
                    mem_mib: pick.mem_mib,
                    cores: pick.cores,
                });
            }
        }
        let min = keys.iter().min().copied().unwrap_or(score.key);
        let max = keys.iter().max().copied().unwrap_or(score.key);
        Some(Placement {
            node: i,
            score,
            normalized: preference(score.key, min, max, policy),
            containers,
            final_usage: scratch.final_usage.clone(),
        })
    });
    if placement.is_none() && explain {
        for (i, node) in snapshot.nodes.iter().enumerate() {
            let mut ex = NodeExplanation {
                node: i,
                containers: Vec::new(),
            };
            evaluate_node(node, &prep, scratch, false, Some(&mut ex));
            explanations.push(ex);
        }
    }
    Allocation {
        requests_gpu,
        placement,
        failed,
        feasible_count: keys.len(),
        explanations,
    }
}

/// One workload's result in a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchItem {
    /// The allocation as decided at its turn.
    pub allocation: Allocation,
    /// Placed in the attempt, then rolled back because an all-or-nothing batch failed.
    pub rolled_back: bool,
}

impl BatchItem {
    /// Whether the workload stays placed.
    pub fn placed(&self) -> bool {
        self.allocation.placement.is_some() && !self.rolled_back
    }
}

/// The answer for a list of workloads.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchOutcome {
    /// One item per workload, in order.
    pub items: Vec<BatchItem>,
    /// Whether every GPU workload was placed.
    pub all_placed: bool,
    /// The snapshot with the placements applied (unchanged when rolled back).
    pub snapshot: Snapshot,
}

/// Places `workloads` one after another on `snapshot`; each sees the placements before it.
/// With `all_or_nothing`, if any GPU workload cannot be placed, every placement is rolled back.
pub fn allocate_batch(
    snapshot: Snapshot,
    workloads: &[Workload],
    all_or_nothing: bool,
    explain: bool,
) -> BatchOutcome {
    let original = all_or_nothing.then(|| snapshot.clone());
    let mut current = snapshot;
    let mut scratch = Scratch::default();
    let mut items = Vec::with_capacity(workloads.len());
    let mut all_placed = true;
    for workload in workloads {
        let allocation = allocate_with(&current, workload, explain, &mut scratch);
        if let Some(p) = &allocation.placement {
            apply(&mut current, p);
        } else if allocation.requests_gpu {
            all_placed = false;
        }
        items.push(BatchItem {
            allocation,
            rolled_back: false,
        });
    }
    if let (false, Some(original)) = (all_placed, original) {
        for item in &mut items {
            item.rolled_back = item.allocation.placement.is_some();
        }
        current = original;
    }
    BatchOutcome {
        items,
        all_placed,
        snapshot: current,
    }
}

/// Applies a placement: the node's cards take the final usage.
pub fn apply(snapshot: &mut Snapshot, placement: &Placement) {
    if let Some(node) = snapshot.nodes.get_mut(placement.node) {
        node.set_usage(&placement.final_usage);
    }
}
