//! # gpusched-sim
//!
//! What-if replay of a GPU workload trace through gpusched-server: arrivals and departures in
//! time order (or arrivals only, `--fill`), each placement decided by the service over gRPC
//! (AllocateBatch for runs of arrivals with no departure between them), usage booked from the
//! service's answers and released exactly on departure, under one or more policy set-ups.
//! Reports allocation, card states, fragmentation and unplaced workloads with the service's
//! reasons, as JSON, Markdown and SVG/PNG charts; MIG cards' slices used and stranded slices
//! ([`mig`]); with `--preemption`, the same trace replayed with priorities and the service's
//! preemption ([`preempt`]). See the crate README.

pub mod app;
pub mod artifact;
pub mod bins;
pub mod chart;
pub mod cluster;
pub mod mig;
pub mod order;
pub mod preempt;
pub mod priority;
pub mod priority_chart;
pub mod quota;
pub mod replay;
pub mod report;
pub mod setup;
pub mod trace;
