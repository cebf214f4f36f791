//! Decisions over a snapshot: filter and score every node, allocate one workload, allocate a
//! list of workloads one after another; one node at a time for a prepared workload; apply and
//! release placements.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::evaluate::{NodeOutcome, Scratch, evaluate_node};
use crate::explain::NodeExplanation;
use crate::fit::Prepared;
use crate::frag::host_after;
use crate::host::HostRequest;
use crate::mig::book::{self, MigAssignment, Way};
use crate::model::{CardUsage, Node, NodeId, Snapshot};
use crate::policy::NodePolicy;
use crate::quota::QuotaUse;
use crate::quota_workload::BatchQuotas;
use crate::reason::NodeFailure;
use crate::score::{NodeScore, prefer, preference_value, score_from_sums};
use crate::workload::Workload;

/// What a decision collects besides the answer. `DecideOptions::default()` collects nothing
/// extra (the fast path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecideOptions {
    /// Per-card score breakdowns ([`NodeExplanation`]): of every node for [`evaluate`]; of
    /// the chosen node, or of every node when nothing fits, for [`allocate`].
    pub explain: bool,
}

impl DecideOptions {
    /// Options with explanations.
    pub fn explained() -> Self {
        DecideOptions { explain: true }
    }
}

/// How [`allocate_batch`] treats a workload that cannot be placed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BatchMode {
    /// Keep the placements of the others.
    #[default]
    Independent,
    /// Roll every placement back (gang scheduling).
    AllOrNothing,
}

/// A node that can host the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FeasibleNode {
    /// The node.
    pub node: NodeId,
    /// Node score after the tentative placement.
    pub score: NodeScore,
    /// Preference 0..=100 among the feasible nodes (100 = most preferred).
    pub normalized: u32,
}

/// A node that cannot host the workload.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedNode {
    /// The node.
    pub node: NodeId,
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
    /// On a MIG card, the instance (its `mem_mib` and `cores` are the profile's;
    /// `docs/placement-semantics.md` section 11.5).
    pub mig: Option<MigAssignment>,
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
    /// The chosen node.
    pub node: NodeId,
    /// Its node score after the placement.
    pub score: NodeScore,
    /// Its normalised preference among the feasible nodes.
    pub normalized: u32,
    /// Every container of the workload, in pod order.
    pub containers: Vec<ContainerAssignment>,
    /// Usage of the node's cards after the placement (on the snapshot decided on).
    pub final_usage: Vec<CardUsage>,
    /// What the placement books on each of the node's cards (in card order): `final_usage`
    /// minus the usage before. [`apply`] adds it, [`release`] takes it away.
    pub booked: Vec<CardUsage>,
    /// The host CPU and memory the workload asks (section 12.2): [`apply`] takes it from the
    /// node's free host resources and [`release`] gives it back, on a node that carries them.
    pub host: HostRequest,
}

impl Placement {
    /// What the placement consumes against its workload's budget: memory and cores of
    /// [`Placement::booked`] summed over the node's cards (section 10.2), a MIG card's
    /// instances counted at their profiles' memory and cores (section 11.5).
    pub fn quota_use(&self) -> QuotaUse {
        // A MIG card's instances consume their profiles' memory and cores (what the
        // assignments report, section 11.5), not the slices they book.
        let mut instances = QuotaUse::default();
        let mut mig_cards: Vec<usize> = Vec::new();
        for k in self.containers.iter().flat_map(|c| &c.cards) {
            if k.mig.is_some() {
                instances = instances.plus(QuotaUse {
                    mem_mib: k.mem_mib,
                    cores: u64::from(k.cores),
                });
                mig_cards.push(k.card);
            }
        }
        self.booked
            .iter()
            .enumerate()
            .filter(|(pos, _)| !mig_cards.contains(pos))
            .fold(instances, |sum, (_, b)| {
                sum.plus(QuotaUse {
                    mem_mib: b.used_mem_mib,
                    cores: u64::from(b.used_cores),
                })
            })
    }
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

/// A decision given up because the caller's `stop` hook asked for it (its deadline passed, it
/// went away): there is no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("decision abandoned: the caller asked to stop")]
pub struct Abandoned;

/// The hook of the `*_until` decisions: asked before each node is evaluated (and before each
/// workload of a batch); `true` abandons the decision. The engine keeps no clock: the caller
/// decides (a deadline, a cancellation flag).
pub type Stop<'a> = &'a dyn Fn() -> bool;

pub(crate) fn never() -> bool {
    false
}

fn finished<T>((value, abandoned): (T, bool)) -> Result<T, Abandoned> {
    if abandoned { Err(Abandoned) } else { Ok(value) }
}

/// [`evaluate`], abandoned as soon as `stop` says so (checked before each node).
pub fn evaluate_until(
    snapshot: &Snapshot,
    workload: &Workload,
    options: DecideOptions,
    stop: Stop<'_>,
) -> Result<Evaluation, Abandoned> {
    finished(PreparedWorkload::new(workload).evaluate_with(snapshot, options, stop))
}

/// [`allocate`], abandoned as soon as `stop` says so (checked before each node).
pub fn allocate_until(
    snapshot: &Snapshot,
    workload: &Workload,
    options: DecideOptions,
    stop: Stop<'_>,
) -> Result<Allocation, Abandoned> {
    let prepared = PreparedWorkload::new(workload);
    let mut scratch = Scratch::default();
    finished(allocate_with(
        snapshot,
        &prepared,
        options,
        &mut scratch,
        stop,
    ))
}

/// [`allocate_batch`], abandoned as soon as `stop` says so (checked before each workload and
/// each node).
pub fn allocate_batch_until(
    snapshot: Snapshot,
    workloads: &[Workload],
    mode: BatchMode,
    options: DecideOptions,
    stop: Stop<'_>,
) -> Result<BatchOutcome, Abandoned> {
    finished(batch_with(snapshot, workloads, mode, options, stop))
}

/// Evaluates every node of `snapshot` for `workload` (Filter and Score).
pub fn evaluate(snapshot: &Snapshot, workload: &Workload, options: DecideOptions) -> Evaluation {
    PreparedWorkload::new(workload).evaluate(snapshot, options)
}

/// Chooses the node and cards for `workload` (Allocate).
pub fn allocate(snapshot: &Snapshot, workload: &Workload, options: DecideOptions) -> Allocation {
    let mut scratch = Scratch::default();
    allocate_with(
        snapshot,
        &PreparedWorkload::new(workload),
        options,
        &mut scratch,
        &never,
    )
    .0
}

/// Whether one node can host a prepared workload ([`PreparedWorkload::fit`]).
#[derive(Clone, Debug, PartialEq)]
pub enum NodeVerdict {
    /// It can; the node score after the tentative placement (for a workload without GPU, the
    /// node's score as it is).
    Fits(NodeScore),
    /// It cannot, and why.
    DoesNotFit(NodeFailure),
}

impl NodeVerdict {
    /// Whether the node can host the workload.
    pub fn fits(&self) -> bool {
        matches!(self, NodeVerdict::Fits(_))
    }

    /// The node score, when it fits.
    pub fn score(&self) -> Option<NodeScore> {
        match self {
            NodeVerdict::Fits(score) => Some(*score),
            NodeVerdict::DoesNotFit(_) => None,
        }
    }

    /// Why not, when it does not fit.
    pub fn failure(&self) -> Option<&NodeFailure> {
        match self {
            NodeVerdict::Fits(_) => None,
            NodeVerdict::DoesNotFit(failure) => Some(failure),
        }
    }
}

/// A workload with the per-workload work done once (card visiting plan, normalised weights,
/// filter flags, fast-path classification), to ask nodes one at a time or to decide over
/// several snapshots.
///
/// [`PreparedWorkload::fit`] of a node gives exactly what [`evaluate`] reports for it:
/// feasible with the same score, or failed with the same [`NodeFailure`].
#[derive(Debug)]
pub struct PreparedWorkload<'w> {
    prep: Prepared<'w>,
}

impl<'w> PreparedWorkload<'w> {
    /// Prepares `workload`.
    pub fn new(workload: &'w Workload) -> Self {
        PreparedWorkload {
            prep: Prepared::new(workload),
        }
    }

    /// The workload.
    pub fn workload(&self) -> &'w Workload {
        self.prep.workload
    }

    /// Whether one node can host the workload, with its node score (Filter and Score of one
    /// node). The normalised preference needs the other nodes: see [`evaluate`].
    pub fn fit(&self, node: &Node) -> NodeVerdict {
        if !self.prep.workload.requests_gpu() {
            return NodeVerdict::Fits(current_score(node));
        }
        let mut scratch = Scratch::default();
        match evaluate_node(node, &self.prep, &mut scratch, false, None) {
            NodeOutcome::Fit(score) => NodeVerdict::Fits(score),
            NodeOutcome::Fail(failure) => NodeVerdict::DoesNotFit(failure),
        }
    }

    /// [`evaluate`] for the prepared workload.
    pub fn evaluate(&self, snapshot: &Snapshot, options: DecideOptions) -> Evaluation {
        self.evaluate_with(snapshot, options, &never).0
    }

    /// The evaluation, and whether `stop` abandoned it (then it is partial).
    fn evaluate_with(
        &self,
        snapshot: &Snapshot,
        options: DecideOptions,
        stop: Stop<'_>,
    ) -> (Evaluation, bool) {
        let workload = self.prep.workload;
        let mut scratch = Scratch::default();
        let mut feasible = Vec::new();
        let mut failed = Vec::new();
        let mut explanations = Vec::new();
        let requests_gpu = workload.requests_gpu();
        let mut abandoned = false;
        for (id, node) in snapshot.iter() {
            if requests_gpu && stop() {
                abandoned = true;
                break;
            }
            if !requests_gpu {
                feasible.push(FeasibleNode {
                    node: id,
                    score: current_score(node),
                    normalized: 100,
                });
                continue;
            }
            let mut ex = options.explain.then(|| NodeExplanation {
                node: id,
                containers: Vec::new(),
                quota: None,
                fragmentation: None,
            });
            match evaluate_node(node, &self.prep, &mut scratch, false, ex.as_mut()) {
                NodeOutcome::Fit(score) => feasible.push(FeasibleNode {
                    node: id,
                    score,
                    normalized: 0,
                }),
                NodeOutcome::Fail(failure) => failed.push(FailedNode { node: id, failure }),
            }
            explanations.extend(ex);
        }
        if requests_gpu {
            normalize(&mut feasible, workload.node_policy);
            sort_by_preference(&mut feasible, workload.node_policy);
        }
        (
            Evaluation {
                requests_gpu,
                feasible,
                failed,
                explanations,
            },
            abandoned,
        )
    }

    /// [`allocate`] for the prepared workload.
    pub fn allocate(&self, snapshot: &Snapshot, options: DecideOptions) -> Allocation {
        let mut scratch = Scratch::default();
        allocate_with(snapshot, self, options, &mut scratch, &never).0
    }
}

/// The node score of a node as it is.
fn current_score(node: &Node) -> NodeScore {
    score_from_sums(&node.sums)
}

/// Sets `normalized` of every feasible node (see [`preference`]).
fn normalize(feasible: &mut [FeasibleNode], policy: NodePolicy) {
    let values = feasible.iter().map(|f| preference_value(policy, &f.score));
    let (min, max) = values.fold((i128::MAX, i128::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    for f in feasible.iter_mut() {
        f.normalized = preference(preference_value(policy, &f.score), min, max);
    }
}

/// Preference 0..=100 of a node's [`preference_value`] among the feasible nodes' values
/// `min..=max`: 100 for the most preferred, 0 for the least, linear between (rounded half up,
/// exact integer arithmetic); 100 when all are equal.
pub(crate) fn preference(value: i128, min: i128, max: i128) -> u32 {
    let span = max.saturating_sub(min);
    if span <= 0 {
        return 100;
    }
    let above = value.saturating_sub(min);
    // Both below 2^127: scale down until 200 * above cannot overflow.
    let (mut above, mut span) = (above, span);
    while above > i128::MAX / 400 || span > i128::MAX / 400 {
        above /= 2;
        span /= 2;
    }
    if span <= 0 {
        return 100;
    }
    u32::try_from((200 * above + span) / (2 * span)).unwrap_or(100)
}

/// Most preferred first (see [`prefer`]); ties by smaller name (the snapshot is sorted by
/// name, so by index).
fn sort_by_preference(feasible: &mut [FeasibleNode], policy: NodePolicy) {
    feasible.sort_by(|a, b| prefer(policy, &a.score, &b.score).then(a.node.cmp(&b.node)));
}

/// The allocation, and whether `stop` abandoned it (then it is partial).
fn allocate_with(
    snapshot: &Snapshot,
    prepared: &PreparedWorkload<'_>,
    options: DecideOptions,
    scratch: &mut Scratch,
    stop: Stop<'_>,
) -> (Allocation, bool) {
    let prep = &prepared.prep;
    let workload = prep.workload;
    let explain = options.explain;
    let requests_gpu = workload.requests_gpu();
    if !requests_gpu {
        return (
            Allocation {
                requests_gpu,
                placement: None,
                failed: Vec::new(),
                feasible_count: snapshot.len(),
                explanations: Vec::new(),
            },
            false,
        );
    }
    let policy = workload.node_policy;
    let mut failed = Vec::new();
    let mut best: Option<(NodeId, NodeScore)> = None;
    let mut keys: Vec<i128> = Vec::new();
    let mut abandoned = false;
    for (id, node) in snapshot.iter() {
        if stop() {
            abandoned = true;
            break;
        }
        match evaluate_node(node, prep, scratch, false, None) {
            NodeOutcome::Fit(score) => {
                keys.push(preference_value(policy, &score));
                if best.is_none_or(|(_, b)| prefer(policy, &score, &b) == Ordering::Less) {
                    best = Some((id, score));
                }
            }
            NodeOutcome::Fail(failure) => failed.push(FailedNode { node: id, failure }),
        }
    }
    let mut explanations = Vec::new();
    let placement = best.filter(|_| !abandoned).and_then(|(id, score)| {
        let node = snapshot.node(id)?;
        let mut ex = explain.then(|| NodeExplanation {
            node: id,
            containers: Vec::new(),
            quota: None,
            fragmentation: None,
        });
        // Deterministic: the same evaluation again, this time recording the cards.
        let mut placement = placement_on(node, id, prep, scratch, ex.as_mut()).ok()?;
        explanations.extend(ex);
        let value = preference_value(policy, &score);
        let min = keys.iter().min().copied().unwrap_or(value);
        let max = keys.iter().max().copied().unwrap_or(value);
        placement.score = score;
        placement.normalized = preference(value, min, max);
        Some(placement)
    });
    if placement.is_none() && explain && !abandoned {
        for (id, node) in snapshot.iter() {
            if stop() {
                abandoned = true;
                break;
            }
            let mut ex = NodeExplanation {
                node: id,
                containers: Vec::new(),
                quota: None,
                fragmentation: None,
            };
            evaluate_node(node, prep, scratch, false, Some(&mut ex));
            explanations.push(ex);
        }
    }
    (
        Allocation {
            requests_gpu,
            placement,
            failed,
            feasible_count: keys.len(),
            explanations,
        },
        abandoned,
    )
}

/// The placement of the prepared workload on `node` (handle `id`) with its cards chosen, or
/// why it does not fit; `normalized` is 100 (the caller knows the other nodes).
pub(crate) fn placement_on(
    node: &Node,
    id: NodeId,
    prep: &Prepared<'_>,
    scratch: &mut Scratch,
    explain: Option<&mut NodeExplanation>,
) -> Result<Placement, NodeFailure> {
    let score = match evaluate_node(node, prep, scratch, true, explain) {
        NodeOutcome::Fit(score) => score,
        NodeOutcome::Fail(failure) => return Err(failure),
    };
    let mut containers: Vec<ContainerAssignment> = (0..prep.workload.containers.len())
        .map(|position| ContainerAssignment {
            position,
            cards: Vec::new(),
        })
        .collect();
    let owner = prep.workload.meta.owner();
    for pick in &scratch.picks {
        if let Some(c) = containers.get_mut(pick.container) {
            c.cards.push(AssignedCard {
                card: pick.card,
                mem_mib: pick.mem_mib,
                cores: pick.cores,
                mig: pick
                    .mig
                    .and_then(|m| book::assignment(node, pick.card, &m, &owner)),
            });
        }
    }
    let booked = node
        .cards
        .iter()
        .zip(&scratch.final_usage)
        .map(|(card, after)| difference(*after, card.usage))
        .collect();
    Ok(Placement {
        node: id,
        score,
        normalized: 100,
        containers,
        final_usage: scratch.final_usage.clone(),
        booked,
        host: prep.workload.host,
    })
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
/// With [`BatchMode::AllOrNothing`], if any GPU workload cannot be placed, every placement is
/// rolled back.
pub fn allocate_batch(
    snapshot: Snapshot,
    workloads: &[Workload],
    mode: BatchMode,
    options: DecideOptions,
) -> BatchOutcome {
    batch_with(snapshot, workloads, mode, options, &never).0
}

/// The batch, and whether `stop` abandoned it (then it is partial).
fn batch_with(
    snapshot: Snapshot,
    workloads: &[Workload],
    mode: BatchMode,
    options: DecideOptions,
    stop: Stop<'_>,
) -> (BatchOutcome, bool) {
    // Cheap: the nodes are shared, and the ones placed on are copied when changed.
    let original = (mode == BatchMode::AllOrNothing).then(|| snapshot.clone());
    let mut current = snapshot;
    let mut scratch = Scratch::default();
    let mut items = Vec::with_capacity(workloads.len());
    let mut all_placed = true;
    let mut abandoned = false;
    // A namespace's workloads share its quota budget (placement-semantics section 10.5).
    let mut quotas = BatchQuotas::new(workloads);
    for workload in workloads {
        if stop() {
            abandoned = true;
            break;
        }
        let narrowed = quotas.narrowed(workload);
        let workload = narrowed.as_ref().unwrap_or(workload);
        let prepared = PreparedWorkload::new(workload);
        let (allocation, stopped) = allocate_with(&current, &prepared, options, &mut scratch, stop);
        if stopped {
            abandoned = true;
            break;
        }
        if let Some(p) = &allocation.placement {
            // Decided on `current` itself: its final usage is exactly the usage plus the booking,
            // and its MIG instances fit (section 11.5).
            if let Some(node) = current.nodes.get_mut(p.node.index()) {
                let mig = book::plan(node, mig_assignments(p), Way::Apply).ok();
                let node = Arc::make_mut(node);
                node.set_usage(&p.final_usage);
                node.host = host_after(node.host, p.host);
                book::commit(node, mig.unwrap_or_default());
            }
            quotas.spend(workload, p.quota_use());
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
    (
        BatchOutcome {
            items,
            all_placed,
            snapshot: current,
        },
        abandoned,
    )
}

/// Per-dimension `after - before` (never negative for a placement: the final usage is at
/// least the usage before in every dimension).
fn difference(after: CardUsage, before: CardUsage) -> CardUsage {
    CardUsage {
        used: after.used.saturating_sub(before.used),
        used_mem_mib: after.used_mem_mib.saturating_sub(before.used_mem_mib),
        used_cores: after.used_cores.saturating_sub(before.used_cores),
    }
}

/// Why a placement cannot be applied to or released from a snapshot. Nothing is changed then.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BookingError {
    /// The placement's node is not in this snapshot (a handle of another snapshot).
    #[error("{node} is not a node of this snapshot")]
    UnknownNode {
        /// The placement's node.
        node: NodeId,
    },
    /// The node has another number of cards than the placement books (another node).
    #[error("{node} ({name}) has {cards} cards, the placement books {booked}")]
    CardCountMismatch {
        /// The placement's node.
        node: NodeId,
        /// Its name in this snapshot.
        name: String,
        /// Cards of the node.
        cards: usize,
        /// Cards the placement books.
        booked: usize,
    },
    /// Applying would overflow a card's usage counters.
    #[error("applying overflows the usage of card {card} ({card_id}) of {name}")]
    Overflow {
        /// Node name.
        name: String,
        /// Position of the card on the node.
        card: usize,
        /// Card id.
        card_id: String,
    },
    /// Releasing would take away more than the card holds: the placement was not applied (or
    /// was released already).
    #[error("card {card} ({card_id}) of {name} does not hold the booking being released")]
    NotBooked {
        /// Node name.
        name: String,
        /// Position of the card on the node.
        card: usize,
        /// Card id.
        card_id: String,
    },
    /// Booking or releasing the placement's host request would overflow the node's 64-bit
    /// free host counters.
    #[error("the host request overflows the free host resources of {name}")]
    HostOverflow {
        /// Node name.
        name: String,
    },
    /// A MIG instance of the placement does not fit the card as it is: applying meets a taken
    /// or overlapping instance (or no free one to reuse), releasing an instance the workload
    /// does not hold.
    #[error("MIG instance at slice {start} of card {card} ({card_id}) of {name}: {problem}")]
    MigInstance {
        /// Node name.
        name: String,
        /// Position of the card on the node.
        card: usize,
        /// Card id.
        card_id: String,
        /// The instance's first memory slice.
        start: u32,
        /// What is wrong.
        problem: &'static str,
    },
}

/// The MIG assignments of a placement, by card position.
fn mig_assignments(p: &Placement) -> impl Iterator<Item = (usize, &MigAssignment)> {
    p.containers
        .iter()
        .flat_map(|c| c.cards.iter())
        .filter_map(|a| a.mig.as_ref().map(|m| (a.card, m)))
}

/// Which way a booking goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Apply,
    Release,
}

/// Books a placement on its node: each card's usage grows by [`Placement::booked`]
/// (`docs/placement-semantics.md` section 7). On the snapshot the placement was decided on, the node's
/// cards then have exactly [`Placement::final_usage`]; on a later snapshot of the same node,
/// the booking adds to whatever is there. Only the placement's node is copied, and only if
/// it is shared. [`release`] is the exact inverse.
pub fn apply(snapshot: &mut Snapshot, placement: &Placement) -> Result<(), BookingError> {
    book(snapshot, placement, Direction::Apply)
}

/// Takes a placement's booking away from its node: the exact inverse of [`apply`] (apply then
/// release gives back an equal snapshot). Fails, changing nothing, when some card holds less
/// than the booking ([`BookingError::NotBooked`]): the placement was not applied there. A
/// booking equal to another workload's cannot be told apart from it: the caller releases
/// only what it applied.
pub fn release(snapshot: &mut Snapshot, placement: &Placement) -> Result<(), BookingError> {
    book(snapshot, placement, Direction::Release)
}

fn book(
    snapshot: &mut Snapshot,
    placement: &Placement,
    direction: Direction,
) -> Result<(), BookingError> {
    let id = placement.node;
    let node = snapshot
        .nodes
        .get_mut(id.index())
        .ok_or(BookingError::UnknownNode { node: id })?;
    if node.cards.len() != placement.booked.len() {
        return Err(BookingError::CardCountMismatch {
            node: id,
            name: node.name.clone(),
            cards: node.cards.len(),
            booked: placement.booked.len(),
        });
    }
    // Check every card before changing (or copying) anything.
    let mut usage = Vec::with_capacity(node.cards.len());
    for (position, (card, b)) in node.cards.iter().zip(&placement.booked).enumerate() {
        let u = card.usage;
        let next = match direction {
            Direction::Apply => checked_add(u, *b),
            Direction::Release => checked_sub(u, *b),
        };
        let Some(next) = next else {
            let (name, card_id) = (node.name.clone(), card.id.clone());
            return Err(match direction {
                Direction::Apply => BookingError::Overflow {
                    name,
                    card: position,
                    card_id,
                },
                Direction::Release => BookingError::NotBooked {
                    name,
                    card: position,
                    card_id,
                },
            });
        };
        usage.push(next);
    }
    let host = match (node.host, direction) {
        (None, _) => None,
        (Some(h), Direction::Apply) => {
            Some(
                h.minus(placement.host)
                    .ok_or_else(|| BookingError::HostOverflow {
                        name: node.name.clone(),
                    })?,
            )
        }
        (Some(h), Direction::Release) => {
            Some(
                h.plus(placement.host)
                    .ok_or_else(|| BookingError::HostOverflow {
                        name: node.name.clone(),
                    })?,
            )
        }
    };
    let way = match direction {
        Direction::Apply => Way::Apply,
        Direction::Release => Way::Release,
    };
    let mig = book::plan(node, mig_assignments(placement), way).map_err(|p| {
        BookingError::MigInstance {
            name: node.name.clone(),
            card: p.card,
            card_id: node
                .cards
                .get(p.card)
                .map(|c| c.id.clone())
                .unwrap_or_default(),
            start: p.start,
            problem: p.problem,
        }
    })?;
    let node = Arc::make_mut(node);
    node.set_usage(&usage);
    node.host = host;
    book::commit(node, mig);
    Ok(())
}

fn checked_add(u: CardUsage, b: CardUsage) -> Option<CardUsage> {
    Some(CardUsage {
        used: u.used.checked_add(b.used)?,
        used_mem_mib: u.used_mem_mib.checked_add(b.used_mem_mib)?,
        used_cores: u.used_cores.checked_add(b.used_cores)?,
    })
}

fn checked_sub(u: CardUsage, b: CardUsage) -> Option<CardUsage> {
    Some(CardUsage {
        used: u.used.checked_sub(b.used)?,
        used_mem_mib: u.used_mem_mib.checked_sub(b.used_mem_mib)?,
        used_cores: u.used_cores.checked_sub(b.used_cores)?,
    })
}
