//! The operator view's answers: what the page renders and the JSON API (`/api/v1/...`) returns,
//! read back by `kubectl-gpusched`. Plain data (serde), no logic; every field is documented
//! because it is an API.

use gpusched_client::measure::CardStates;
use serde::{Deserialize, Serialize};

/// `GET /api/v1/top`: every GPU node with its cards and bookings, and the cluster's totals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Board {
    /// The label selector the nodes were chosen with (`key=value,...`), if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// Totals over the nodes shown.
    pub totals: Totals,
    /// Nodes with a usable GPU inventory, by name.
    pub nodes: Vec<NodeRow>,
    /// Nodes whose GPU inventory the shim cannot use, with why (never sent to the service).
    pub unusable: Vec<UnusableNode>,
    /// Bookings per namespace (the place quota use goes once the shim reads quotas).
    pub namespaces: Vec<NamespaceUse>,
}

/// Totals, allocation and fragmentation (the simulator's measures,
/// `gpusched_client::measure`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// GPU nodes shown.
    pub nodes: usize,
    /// Cards on them.
    pub cards: usize,
    /// Cards reported unhealthy.
    pub unhealthy_cards: usize,
    /// Cards cordoned (`hami.io/device-cordon`).
    pub cordoned_cards: usize,
    /// Nodes marked unschedulable (`kubectl cordon`).
    pub unschedulable_nodes: usize,
    /// Cards by state: idle, partial, full.
    pub states: CardStates,
    /// Slots booked / all slots.
    pub slots: Used,
    /// Device memory booked / all, MiB.
    pub mem_mib: Used,
    /// Compute booked / all, percent of one card.
    pub cores: Used,
    /// Booked compute over all compute, percent.
    pub allocation_pct: f64,
    /// Expected fragmentation of the free compute for the request classes below, percent.
    pub fragmentation_pct: f64,
    /// Per-card request classes the fragmentation is measured for: one card of every GPU
    /// container of the pods shown (bound and pending), with its share.
    pub request_classes: Vec<RequestClass>,
    /// Pods holding cards on these nodes.
    pub pods_bound: usize,
    /// GPU pods of our scheduler not bound yet.
    pub pods_pending: usize,
}

/// Booked and total of one dimension.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Used {
    /// Booked.
    pub used: u64,
    /// Capacity.
    pub total: u64,
}

/// One per-card request class of the fragmentation measure.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestClass {
    /// Memory per card, MiB (0 = given as a percentage).
    pub mem_mib: u64,
    /// Memory per card, percent of the card (0 = given in MiB).
    pub mem_percent: u32,
    /// Cores per card, percent.
    pub cores: u32,
    /// Share of the classes, 0..1.
    pub share: f64,
}

/// One GPU node of the grid.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeRow {
    /// Node name.
    pub name: String,
    /// `spec.unschedulable` (cordoned with kubectl): kube-scheduler sends it no new pods.
    pub unschedulable: bool,
    /// Cards by index.
    pub cards: Vec<CardCell>,
}

/// One card: capacity, what is booked and by whom.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CardCell {
    /// Card id (GPU UUID).
    pub id: String,
    /// Device index on the node.
    pub index: u32,
    /// Model.
    pub model: String,
    /// Sharing mode: hami-core, mig, mps.
    pub mode: String,
    /// Reported healthy.
    pub healthy: bool,
    /// Cordoned (takes no new work).
    pub cordoned: bool,
    /// Slots.
    pub slots: Used,
    /// Device memory, MiB.
    pub mem_mib: Used,
    /// Compute, percent.
    pub cores: Used,
    /// The pods holding it, with what each books here.
    pub pods: Vec<CardBooking>,
    /// Further facts about the card, as label and value: a MIG card's instances (profile at
    /// start slice, holder or free) and memory slices used, when the card carries a MIG layout.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extras: Vec<Extra>,
}

/// What one pod books on one card (all its containers on that card together).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardBooking {
    /// `namespace/name`.
    pub pod: String,
    /// Containers of the pod on the card (slots).
    pub slots: u32,
    /// MiB.
    pub mem_mib: u64,
    /// Cores, percent.
    pub cores: u32,
}

/// A labelled fact (hook for MIG slices and anything else a card or namespace reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extra {
    /// What it is.
    pub label: String,
    /// Its value, as text.
    pub value: String,
}

/// A node the shim keeps back from the service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnusableNode {
    /// Node name.
    pub name: String,
    /// Why (unreadable or invalid `hami.io/node-nvidia-register`, ...).
    pub reason: String,
}

/// What the pods of one namespace hold on the nodes shown.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NamespaceUse {
    /// Namespace.
    pub namespace: String,
    /// Pods holding cards.
    pub pods: usize,
    /// Card bookings (a pod's containers on one card count once).
    pub cards: usize,
    /// MiB booked.
    pub mem_mib: u64,
    /// Cores booked, percent.
    pub cores: u64,
    /// Its GPU quota: per limited resource, what the namespace holds against the hard limit
    /// (as the shim counts it for budgets), when a ResourceQuota limits GPU memory or cores.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extras: Vec<Extra>,
}

/// `GET /api/v1/pending`: the pending GPU pods, the first `web.max_pending` analysed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingList {
    /// Pods analysed, oldest first.
    pub pods: Vec<PendingPod>,
    /// Pending GPU pods not analysed (over `web.max_pending`).
    pub not_analysed: usize,
}

/// Why one pod waits, in the service's words.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingPod {
    /// `namespace/name`.
    pub pod: String,
    /// Seconds since it was created (0 when unknown).
    pub age_s: u64,
    /// kube-scheduler's `PodScheduled=False` message, if it wrote one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub scheduler_message: String,
    /// The service's verdict on the candidate nodes now.
    pub verdict: Verdict,
}

/// The service's verdict for a pod on the current view.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Some candidate nodes can take it now (it waits on something else: kube-scheduler's own
    /// constraints, its back-off, or capacity freed since).
    Fits {
        /// Candidate nodes (those the pod's nodeSelector allows).
        candidates: usize,
        /// Of those, nodes that can host it.
        feasible: usize,
    },
    /// No candidate node can take it: the reasons, grouped, and the nearest miss.
    Waits {
        /// Candidate nodes (those the pod's nodeSelector allows).
        candidates: usize,
        /// Typed reasons, most nodes first.
        reasons: Vec<ReasonGroup>,
        /// The node and cards that came closest, and what was short; None when no node can be
        /// helped by freeing capacity (every node fails for a reason that usage does not change).
        nearest: Option<NearestMiss>,
        /// When some node failed by the namespace's GPU quota: the quota's limits, use and what
        /// is left (`quota of namespace team-a: limits.nvidia.com/gpumem 20000 (ResourceQuota
        /// gpu), 16384 used, 3616 left`).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        quota: String,
    },
    /// The service refuses the pod itself (e.g. a malformed annotation): the violations, each
    /// naming its field.
    Invalid {
        /// `field: description; ...`.
        error: String,
    },
    /// The service could not be asked (unreachable, deadline).
    Unknown {
        /// The error.
        error: String,
    },
}

impl Default for Verdict {
    fn default() -> Self {
        Verdict::Unknown {
            error: String::new(),
        }
    }
}

/// Nodes failing for one typed reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReasonGroup {
    /// HAMi's name of the reason (`CardInsufficientMemory`), or the shim's kind for nodes it keeps
    /// back (`InvalidNode`, `NoInventory`).
    pub reason: String,
    /// Whether no change of usage can help these nodes.
    pub unresolvable: bool,
    /// Nodes that failed with it.
    pub nodes: usize,
    /// Cards it applied to, summed over those nodes.
    pub cards: u64,
    /// The first of those nodes, by name.
    pub node_names: Vec<String>,
}

/// The node that came closest to taking a pod, and what it lacked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NearestMiss {
    /// Node name.
    pub node: String,
    /// The container that did not fit there.
    pub container: String,
    /// Cards that container wants.
    pub wanted: u32,
    /// Cards of the node that passed every check.
    pub fitting: u32,
    /// The cards that would complete it, each with what it lacks.
    pub short: Vec<CardShort>,
    /// One line: `node-17 GPU-3: 2,048 MiB short`.
    pub text: String,
}

/// What one card lacks for one card of a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardShort {
    /// Card id.
    pub card: String,
    /// Card index.
    pub index: u32,
    /// The service's reason for the card (its first failed check).
    pub reason: String,
    /// MiB missing.
    pub mem_mib: u64,
    /// Cores missing, percent.
    pub cores: u32,
    /// Slots missing.
    pub slots: u32,
    /// The card would have to be idle (an exclusive or mutex request on a card in use).
    pub needs_idle: bool,
}

/// `GET /api/v1/explain/{namespace}/{name}`: the service's explanation of a pod's decision.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    /// The node the pod is bound to by our decision, if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_node: Option<String>,
    /// The cards its decision annotation records, per container.
    pub recorded: Vec<Assigned>,
    /// The policy the service applied (`node binpack, gpu spread, weights slot=1 core=1
    /// memory=1`).
    pub policy: String,
    /// Candidate nodes (the pod's nodeSelector allows them).
    pub candidates: usize,
    /// Of those, nodes that can host the pod (with its own booking released).
    pub feasible: usize,
    /// The service's node ranking, most preferred first (the first ten, and the bound node).
    pub ranking: Vec<RankedNode>,
    /// The decision on the bound node (or, for a pending pod, on the node the service would
    /// choose now): every card, in visiting order, with its score terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<NodeDecision>,
    /// Whether the service, asked again, books the very cards recorded (bound pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches_recorded: Option<bool>,
    /// For a pod that fits nowhere: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    /// How this was computed.
    pub note: String,
}

/// One node of the service's ranking.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankedNode {
    /// Position, 1 = the service's choice.
    pub rank: usize,
    /// Node name.
    pub node: String,
    /// Node score after a tentative placement.
    pub raw_score: f64,
    /// Preference 0..100 among the feasible nodes.
    pub normalized: u32,
    /// Scored the same as the node ranked above it: the smaller name won the tie.
    pub tie: bool,
}

/// The card choice on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeDecision {
    /// Node name.
    pub node: String,
    /// Node score after the placement.
    pub raw_score: f64,
    /// Per GPU container.
    pub containers: Vec<ContainerCards>,
}

/// One container's card choice.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerCards {
    /// Container name.
    pub name: String,
    /// Init container.
    pub init: bool,
    /// Every card of the node, in visiting order.
    pub cards: Vec<CardScore>,
}

/// One card in a container's choice: the device score's terms and the check outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CardScore {
    /// Card id.
    pub card: String,
    /// Card index.
    pub index: u32,
    /// NUMA node.
    pub numa: u32,
    /// Reached in the visit.
    pub visited: bool,
    /// Position in the visiting order.
    pub visit: u32,
    /// Slot term.
    pub slot_term: f64,
    /// Core term.
    pub core_term: f64,
    /// Memory term.
    pub memory_term: f64,
    /// Device score (sum of the terms).
    pub score: f64,
    /// Given to the container.
    pub chosen: bool,
    /// The first failed check, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rejected: String,
    /// Scored the same as another visited card: the visiting order (lower index) decided.
    pub tie: bool,
}

/// A card given to a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assigned {
    /// Container position (init containers first) or name.
    pub container: String,
    /// Card id.
    pub card: String,
    /// MiB.
    pub mem_mib: u64,
    /// Cores, percent.
    pub cores: u32,
}

/// `POST /api/v1/what-if`: where a pod would go now (nothing is booked).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WhatIf {
    /// `namespace/name` of the pod asked about.
    pub pod: String,
    /// The policy the service applied.
    pub policy: String,
    /// Candidate nodes (the pod's nodeSelector allows them).
    pub candidates: usize,
    /// Of those, nodes that can host it.
    pub feasible: usize,
    /// The chosen node, if it fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Node score of the chosen node.
    pub raw_score: f64,
    /// The cards it would get.
    pub cards: Vec<Assigned>,
    /// When it fits nowhere: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// The body of every 4xx/5xx answer of the JSON API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    /// What is wrong (a bad input names its field).
    pub error: String,
}
