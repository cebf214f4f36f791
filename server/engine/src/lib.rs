//! # gpusched-engine
//!
//! The pure, deterministic placement policy engine of gpusched: which node and which physical
//! GPUs a workload gets, under node policy binpack/spread, GPU policy
//! binpack/spread/mutex/topology-aware/numa (and chains of them), per-workload device scoring
//! weights and HAMi's per-card fit rules. The contract is `docs/placement-semantics.md`.
//!
//! No I/O, no clock, no logging, no global state: the same input gives the same output, bit
//! for bit, whatever the order of nodes or cards.
//!
//! ## Entry points
//! - **Inputs.** [`Snapshot::new`] validates the candidate nodes ([`NodeSpec`], [`Card`]);
//!   [`Workload::parse`] validates a workload in typed ([`TypedSpec`]) or Kubernetes
//!   ([`KubeSpec`]) form. Bad input is an [`InvalidInput`] listing every [`Violation`] with
//!   the field it concerns. Policies and weights parse with [`str::parse`] ([`NodePolicy`],
//!   [`GpuPolicy`], [`GpuToken`], [`ScoringWeights`], [`CardMode`]) into typed errors.
//! - **Whole snapshot.** [`evaluate`] filters and scores every node (Filter/Score);
//!   [`allocate`] chooses the node and cards (Allocate); [`allocate_batch`] places a list of
//!   workloads one after another ([`BatchMode::AllOrNothing`] for gangs). What they collect
//!   besides the answer is a [`DecideOptions`] (`DecideOptions::default()` is the fast path).
//!   "Does not fit" is a value: a [`FailedNode`] with a typed [`NodeFailure`], never an error.
//!   [`evaluate_until`], [`allocate_until`] and [`allocate_batch_until`] take a [`Stop`] hook,
//!   asked before each node, so a caller can abandon a decision at its deadline
//!   ([`Abandoned`]); the engine itself keeps no clock.
//! - **One node at a time.** [`PreparedWorkload::new`] does the per-workload work once;
//!   [`PreparedWorkload::fit`] asks one [`Node`] and gives a [`NodeVerdict`] (fits with its
//!   [`NodeScore`], or a [`NodeFailure`]) that agrees with [`evaluate`].
//! - **Bookkeeping.** [`apply`] books a [`Placement`] on its node; [`release`] is its exact
//!   inverse (for schedulers that free allocations). Both return a typed [`BookingError`]
//!   instead of changing anything when the placement does not match the snapshot.
//! - **Handles.** Nodes are named by [`NodeId`] handles in every answer: `snapshot[id]` or
//!   [`Snapshot::node`]; [`Snapshot::id_of`] finds one by name. Cards are named by their
//!   position in [`Node::cards`].
//! - **Shared nodes.** A snapshot holds its nodes in [`Arc`](std::sync::Arc)s: a service can
//!   keep validated nodes ([`Node::new`]) and build snapshots from them without copying
//!   ([`Snapshot::from_nodes`]); `apply`/`release` copy only the node they change.
//! - **Preemption.** [`Occupancy::new`] validates who holds what on each card
//!   ([`NodeWorkloads`], [`PlacedWorkload`], [`Booking`], within [`PreemptLimits`]);
//!   [`preempt`] answers, per node, whether it needs no eviction, which victims must leave
//!   and the placement once they are gone, or why it is not a candidate ([`PreemptVerdict`]),
//!   and which node to preempt on ([`PreemptChoice`]); [`preempt_until`] takes a [`Stop`]
//!   hook.
//! - **Quotas.** [`Workload::with_quota`] gives a workload the [`QuotaBudget`] its namespace
//!   may still book; check 7q then refuses cards past it ([`Reason::QuotaMemoryExceeded`],
//!   [`Reason::QuotaCoresExceeded`]), [`Placement::quota_use`] is what a placement consumes,
//!   and [`QuotaBudget::admission_refusal`] tells an admission webhook what can never fit.
//! - **MIG cards.** A card in [`CardMode::Mig`] carries a [`MigLayout`] (profiles,
//!   placements, instances; validated with its node); a workload whose `vgpu-mode` admits
//!   `mig` gets one instance per card, chosen by HAMi's rule, reported as a [`MigAssignment`]
//!   and booked by [`apply`]/[`release`] (`docs/placement-semantics.md` section 11).
//! - **Fragmentation.** [`Workload::with_mix`] gives a workload the target [`WorkloadMix`]
//!   ([`MixShape`]s with weights); node policy [`NodePolicy::Fgd`] and GPU token
//!   [`GpuToken::Fgd`] then choose the node and the cards whose placement increases the
//!   expected fragmentation least, reported as a [`Fragmentation`] on the [`NodeScore`] and,
//!   explained, shape by shape ([`FragmentationExplanation`]). Nodes may carry their free
//!   [`HostResources`]; only this measure reads them (section 12).
//! - **Inventory.** [`normalize_inventory`] turns raw NVML facts into schedulable cards.
//!
//! ```
//! use gpusched_engine::{Card, DecideOptions, NodeSpec, Snapshot, Workload, WorkloadMeta,
//!     WorkloadSpec, TypedSpec, TypedContainer, Defaults, KubeNames, NodeVerdict,
//!     PreparedWorkload, allocate, apply, release};
//!
//! let mut snapshot = Snapshot::new(vec![
//!     NodeSpec::new("node1", vec![Card::new("GPU-1", 0, "NVIDIA-A100", 40960)]),
//! ]).unwrap();
//! let spec = WorkloadSpec::Typed(TypedSpec {
//!     containers: vec![TypedContainer { name: "main".into(), gpus: 1, gpumem_mib: 1024, ..Default::default() }],
//!     ..Default::default()
//! });
//! let workload = Workload::parse(WorkloadMeta::default(), &spec, &Defaults::default(), &KubeNames::default()).unwrap();
//! let allocation = allocate(&snapshot, &workload, DecideOptions::default());
//! let placement = allocation.placement.unwrap();
//! assert_eq!(snapshot[placement.node].name(), "node1");
//! assert_eq!(placement.containers[0].cards[0].mem_mib, 1024);
//!
//! // The same question, one node at a time.
//! let prepared = PreparedWorkload::new(&workload);
//! let verdict = prepared.fit(&snapshot[placement.node]);
//! assert_eq!(verdict, NodeVerdict::Fits(placement.score));
//!
//! // Book it, then free it again.
//! let before = snapshot.clone();
//! apply(&mut snapshot, &placement).unwrap();
//! assert_eq!(snapshot[placement.node].cards()[0].usage.used_mem_mib, 1024);
//! release(&mut snapshot, &placement).unwrap();
//! assert_eq!(snapshot, before);
//! assert!(release(&mut snapshot, &placement).is_err()); // never applied twice over
//! ```

mod changes;
mod decide;
mod error;
mod evaluate;
mod explain;
mod fgd_lone;
mod fit;
mod frag;
mod host;
mod inventory;
mod mig;
mod mig_layout;
mod mix;
mod model;
mod names;
mod policy;
mod preempt;
mod quantity;
mod quota;
mod quota_tally;
mod quota_workload;
mod reason;
mod score;
mod weights;
mod workload;

pub use changes::ChangeError;
pub use decide::{
    Abandoned, Allocation, AssignedCard, BatchItem, BatchMode, BatchOutcome, BookingError,
    ContainerAssignment, DecideOptions, Evaluation, FailedNode, FeasibleNode, NodeVerdict,
    Placement, PreparedWorkload, Stop, allocate, allocate_batch, allocate_batch_until,
    allocate_until, apply, evaluate, evaluate_until, release,
};
pub use error::{InvalidInput, Violation, ViolationKind};
pub use explain::{
    CardExplanation, ContainerExplanation, FragmentationExplanation, NodeExplanation,
};
pub use fit::TOPOLOGY_EXACT_LIMIT;
pub use frag::{Fragmentation, NodeFragmentation, ShapeFragmentation};
pub use host::{HostRequest, HostResources};
pub use inventory::{
    LinkKind, NormalizationConfig, NormalizationOverride, NormalizedInventory, RawCard, RawLink,
    normalize_inventory,
};
pub use mig::{MigAssignment, MigExplanation, MigOutcome, MigProfileConsidered};
pub use mig_layout::{
    MAX_MIG_INSTANCES, MAX_MIG_PROFILES, MAX_MIG_SLICES, MigInstance, MigLayout, MigPlacement,
    MigProfile,
};
pub use mix::{MAX_MIX_SHAPES, MAX_SHAPE_WEIGHT, MixShape, PROBABILITY_TOLERANCE, WorkloadMix};
pub use model::{
    Card, CardMode, CardUsage, MAX_CARD_CORES, MAX_CARD_MEM_MIB, MAX_CARD_SLOTS, Node, NodeId,
    NodeSpec, PairScore, ParseCardModeError, Snapshot,
};
pub use names::{AnnotationNames, KubeNames, ResourceNames, split_list};
pub use policy::{
    GpuPolicy, GpuToken, NodePolicy, ParseGpuPolicyError, ParseNodePolicyError, SortKey, VisitPlan,
};
pub use preempt::{
    Booking, NodePreemption, NodeWorkloads, NotCandidate, NotCandidateReason, Occupancy,
    PlacedWorkload, PreemptChoice, PreemptLimits, PreemptOptions, PreemptVerdict, Preemption,
    Reprieve, ReprieveOutcome, VictimSummary, Victims, preempt, preempt_until,
};
pub use quota::{MAX_QUOTA_VALUE, QuotaBudget, QuotaExplanation, QuotaResource, QuotaUse};
pub use reason::{NodeFailure, Reason, ReasonCounts};
pub use score::{FRAG_STEP_CORES, NodeScore, ScoreTerms};
pub use weights::{MAX_WEIGHT, ScoringWeights, ScoringWeightsError, WeightKey};
pub use workload::{
    CardFilters, ContainerRequest, Defaults, KubeContainer, KubeSpec, TypedContainer, TypedSpec,
    Workload, WorkloadMeta, WorkloadSpec,
};
