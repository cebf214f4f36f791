//! # gpusched-runtime
//!
//! Runtime plumbing shared by `gpusched-server`, `gpusched-kube` and `gpusched-agent`, and
//! nothing else (no policy, no Kubernetes):
//!
//! - [`layers`] — defaults embedded < `--config file.toml|yaml` < `<PREFIX>_SECTION__KEY`
//!   variables < flags, into the binary's typed sections, one [`ConfigError`] naming the key;
//! - [`flags`] — the flags every binary has and the serde helpers that merge a clap struct;
//! - [`boot`] — `--print-config` (TOML) and exit status 2 on a bad configuration;
//! - [`checks`] — small start-up checks naming their key (non-empty, non-zero duration);
//! - [`telemetry`] and [`logging`] — the shared `[telemetry]` section, logs and OTLP traces;
//! - [`tls`] — server and client TLS from PEM files;
//! - [`shutdown`] — SIGINT/SIGTERM;
//! - [`metrics`] — the Prometheus endpoint over a prometheus-client registry.

pub mod boot;
pub mod checks;
pub mod error;
pub mod flags;
pub mod layers;
pub mod log_writer;
pub mod logging;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
pub mod tls;

pub use boot::to_toml;
pub use error::{ConfigError, config_error};
pub use flags::CommonArgs;
pub use layers::{Sources, Spec};
pub use telemetry::{LogFormat, Telemetry, TelemetryConfig};
