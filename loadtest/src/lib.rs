//! # gpusched-loadtest
//!
//! Measures how many placement decisions per second one `gpusched-server` replica serves, at
//! what latency, and how the cost grows with cluster size, in process (the engine alone, and
//! the server's decode/convert/engine/encode pipeline) and over gRPC.
//!
//! - [`synth`]: seeded synthetic clusters, workload mixes and pre-encoded requests;
//! - [`placed`]: placed workloads for Preempt requests;
//! - [`load`]: open-loop (fixed rate, latency from the intended start) and closed-loop load;
//! - [`inproc`]: the same requests in process;
//! - [`report`]: hdrhistogram percentiles and the JSON report;
//! - [`app`]: the command line, one file per command (`run`, `sweep`, `profile`).

pub mod app;
pub mod byref;
pub mod chart;
pub mod inproc;
pub mod load;
pub mod placed;
pub mod process;
pub mod report;
pub mod synth;
pub mod wire;
