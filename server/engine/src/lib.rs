//! # gpusched-engine
//!
//! The pure, deterministic placement policy engine of gpusched: which node and which physical
//! GPUs a workload gets, under node policy binpack/spread, GPU policy
//! binpack/spread/mutex/topology-aware/numa (and chains of them), per-workload device scoring
//! weights and HAMi's per-card fit rules. The contract is `PLACEMENT-SEMANTICS.md`.
//!
//! No I/O, no clock, no logging, no global state: the same input gives the same output, bit
//! for bit, whatever the order of nodes or cards.
//!
//! ```
//! use gpusched_engine::{Card, NodeSpec, Snapshot, Workload, WorkloadMeta, WorkloadSpec,
//!     TypedSpec, TypedContainer, Defaults, KubeNames, allocate};
//!
//! let snapshot = Snapshot::new(vec![
//!     NodeSpec::new("node1", vec![Card::new("GPU-1", 0, "NVIDIA-A100", 40960)]),
//! ]).unwrap();
//! let spec = WorkloadSpec::Typed(TypedSpec {
//!     containers: vec![TypedContainer { name: "main".into(), gpus: 1, gpumem_mib: 1024, ..Default::default() }],
//!     ..Default::default()
//! });
//! let workload = Workload::parse(WorkloadMeta::default(), &spec, &Defaults::default(), &KubeNames::default()).unwrap();
//! let allocation = allocate(&snapshot, &workload, false);
//! let placement = allocation.placement.unwrap();
//! assert_eq!(snapshot.nodes()[placement.node].name(), "node1");
//! assert_eq!(placement.containers[0].cards[0].mem_mib, 1024);
//! ```

pub mod decide;
pub mod error;
pub mod evaluate;
pub mod explain;
pub mod fit;
pub mod inventory;
pub mod model;
pub mod names;
pub mod policy;
pub mod quantity;
pub mod reason;
pub mod score;
pub mod weights;
pub mod workload;

pub use decide::{
    Allocation, AssignedCard, BatchItem, BatchOutcome, ContainerAssignment, Evaluation, FailedNode,
    FeasibleNode, Placement, allocate, allocate_batch, apply, evaluate,
};
pub use error::{InvalidInput, Violation, ViolationKind};
pub use explain::{CardExplanation, ContainerExplanation, NodeExplanation};
pub use inventory::{
    LinkKind, NormalizationConfig, NormalizationOverride, NormalizedInventory, RawCard, RawLink,
    normalize_inventory,
};
pub use model::{Card, CardMode, CardUsage, Node, NodeSpec, PairScore, Snapshot};
pub use names::{AnnotationNames, KubeNames, ResourceNames};
pub use policy::{GpuPolicy, GpuToken, NodePolicy, SortKey, VisitPlan};
pub use reason::{NodeFailure, Reason, ReasonCounts};
pub use score::{NodeScore, ScoreTerms};
pub use weights::ScoringWeights;
pub use workload::{
    CardFilters, ContainerRequest, Defaults, KubeContainer, KubeSpec, TypedContainer, TypedSpec,
    Workload, WorkloadMeta, WorkloadSpec,
};
