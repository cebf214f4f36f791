//! Protobuf <-> engine, pure: explicit, exhaustive functions (every message is destructured, so
//! a new field is a compile error here), by message. Limits, caches and decisions are the
//! pipeline's; these only translate.
//!
//! - `node`: a node and its cards, both ways.
//! - `workload`: a workload's typed or Kubernetes spec in.
//! - `options`: `PlacementOptions` in.
//! - `mix`: a workload mix (`options.workload_mix`, the server's `policy.workload_mix`) in.
//! - `refs`: a node by reference's digests and usage part in.
//! - `inventory`: NormalizeInventory's raw cards and settings, both ways.
//! - `answer`: evaluations and allocations (with invalid nodes) out.
//! - `preempt`: Preempt's placed workloads in, its answer (with invalid nodes) out.

pub mod answer;
pub mod inventory;
pub mod mix;
pub mod node;
pub mod options;
pub mod preempt;
pub mod refs;
pub mod workload;
