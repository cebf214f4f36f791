//! The e2e harness: the environment from `deploy/e2e/test.sh`, the control-plane client and its
//! builders, waiting helpers, bursts, gpusched-kube and gpusched-agent processes, the Service
//! stand-in and a headless browser.

pub mod agent;
pub mod browser;
pub mod burst;
pub mod cluster;
pub mod env;
pub mod http;
pub mod pods;
pub mod proxy;
pub mod scheduler;
pub mod shim;
pub mod wait;

/// The scheduler profile (and pod `schedulerName`) of the extender.
pub const SCHEDULER: &str = "gpusched-scheduler";
/// The node label that keeps each scenario on its own nodes (pods select it).
pub const POOL: &str = "gpusched.e2e/pool";
/// Namespace of the shim's Lease.
pub const LEASE_NS: &str = "gpusched-system";
/// Name of the shim's Lease.
pub const LEASE: &str = "gpusched-kube";
/// A node label no node has: pods selecting it are never scheduled (the harness binds them).
pub const HOLDER_SELECTOR: &str = "gpusched.e2e/bound-by-the-test";
/// HAMi's decision annotation.
pub const ALLOCATED: &str = "hami.io/vgpu-devices-allocated";
/// The `/metrics` series of binds with a GPU decision.
pub const BINDS_WITH_GPU: &str =
    r#"gpusched_kube_extender_requests_total{call="bind",outcome="bound_gpu"}"#;
