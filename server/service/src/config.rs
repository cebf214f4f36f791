//! The server's configuration sections and their validation. Loading (defaults < `--config`
//! file < `GPUSCHED_SERVER_SECTION__KEY` variables < flags), `--print-config` and the one-line
//! errors are `gpusched-runtime`'s; a bad value names its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use gpusched_engine::{
    AnnotationNames, Defaults, GpuPolicy, KubeNames, MAX_MIX_SHAPES, MixShape, NodePolicy,
    NormalizationConfig, NormalizationOverride, PreemptLimits, ResourceNames, WorkloadMix,
};
use gpusched_runtime::checks::{non_empty, nonzero_duration};
use gpusched_runtime::tls::{ServerTlsFiles, readable};
use gpusched_runtime::{ConfigError, Sources, Spec, Telemetry, TelemetryConfig};
use serde::{Deserialize, Serialize};

/// The embedded default configuration (also what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// How the configuration is layered: variables `GPUSCHED_SERVER_SECTION__KEY` (the older
/// `GPUSCHED_SECTION__KEY` are still read, below them).
pub const SPEC: Spec = Spec {
    binary: "gpusched-server",
    defaults: DEFAULT_CONFIG,
    env_prefix: "GPUSCHED_SERVER",
    legacy_env_prefix: Some("GPUSCHED"),
    list_keys: &["inventory.overrides"],
};

/// The configuration file's shape.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Prometheus endpoint.
    pub metrics: MetricsConfig,
    /// TLS files.
    pub tls: TlsConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Default policies and requests.
    pub policy: PolicyConfig,
    /// Inventory normalisation.
    pub inventory: InventoryConfig,
    /// Resource and annotation names.
    pub names: NamesConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
    /// Node cache (nodes sent by reference).
    pub node_cache: NodeCacheConfig,
}

/// `[metrics]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve Prometheus text on `listen` at `/metrics`.
    pub enabled: bool,
    /// HTTP listen address.
    pub listen: SocketAddr,
}

/// `[tls]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Server certificate chain (PEM); TLS is on when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Server private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// CA (PEM) for client certificates: mutual TLS when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
}

/// `[limits]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request or response message, bytes.
    pub max_message_bytes: NonZeroUsize,
    /// Most nodes in one request.
    pub max_nodes: NonZeroUsize,
    /// Most cards on one node (a node with more is invalid itself: a failed node with
    /// `REASON_INVALID_NODE`, not a request error).
    pub max_cards_per_node: NonZeroUsize,
    /// Most cards over all nodes of one request.
    pub max_cards: NonZeroUsize,
    /// Most workloads in one AllocateBatch.
    pub max_workloads: NonZeroUsize,
    /// Most containers in one workload.
    pub max_containers: NonZeroUsize,
    /// Server-side time limit per call (the caller's deadline applies when shorter).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Calls decided at the same time; others wait in a bounded queue.
    pub max_concurrent_requests: NonZeroUsize,
    /// Calls waiting for a decision slot at once; more are refused at once.
    pub max_queued_requests: usize,
    /// Longest wait for a decision slot (at most half the call's remaining deadline too).
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Graceful stop: how long health answers NOT_SERVING before the listener closes.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Requests with at least this much estimated work (card evaluations, see
    /// `rpc::Admission::work`) run on the blocking pool, off the async workers.
    pub blocking_threshold_cards: usize,
    /// Graceful stop: how long in-flight calls and open streams may run before they are cut.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
    /// Most entries of any repeated field without a limit of its own (cordoned ids, pair
    /// scores and annotations per node, workload lists and maps, overrides, links per card).
    pub max_list_entries: NonZeroUsize,
    /// Estimated memory of every request being received, decoded and decided at once, bytes
    /// (the process-wide memory budget for calls).
    pub max_in_flight_bytes: NonZeroUsize,
    /// How long a request's body may take to arrive, from its headers to its end.
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// HTTP/2 streams (calls) open at once on one connection (advertised to clients).
    pub max_concurrent_streams: std::num::NonZeroU32,
    /// Most shapes in a workload mix (request or `policy.workload_mix`), at most 64.
    pub max_mix_shapes: NonZeroUsize,
    /// Preempt: most placed workloads on one node.
    pub max_placed_workloads_per_node: NonZeroUsize,
    /// Preempt: most placed workloads over all nodes of one request.
    pub max_placed_workloads: NonZeroUsize,
    /// Preempt: most bytes of a placed workload's id.
    pub max_placed_id_bytes: NonZeroUsize,
}

/// `[policy]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// `binpack` | `spread`.
    pub node_scheduler_policy: String,
    /// `binpack` | `spread` | `mutex` | `topology-aware` | `numa` or a comma chain.
    pub gpu_scheduler_policy: String,
    /// Memory per card when a container sets none, MiB (0 = whole card).
    pub default_memory_mib: u64,
    /// Cores per card when a container sets none, percent.
    pub default_cores: u32,
    /// The target workload mix of the fgd policies when a request sends none
    /// (`docs/placement-semantics.md` section 12.1); empty = none.
    #[serde(default)]
    pub workload_mix: Vec<MixShapeConfig>,
}

/// One `[[policy.workload_mix]]` shape (the fields of `WorkloadMixShape`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct MixShapeConfig {
    /// Probability in [0, 1]; all sum to 1.
    pub probability: f64,
    /// Cards.
    pub gpu_count: u32,
    /// Cores per card, percent.
    #[serde(default)]
    pub gpucores_percent: u32,
    /// Memory per card, MiB (0 = not set).
    #[serde(default)]
    pub gpumem_mib: u64,
    /// Memory per card, percent (0 = not set; neither: 100).
    #[serde(default)]
    pub gpumem_percent: u32,
    /// Card types accepted (empty = any).
    #[serde(default)]
    pub gpu_types: Vec<String>,
    /// Host CPU, millicores.
    #[serde(default)]
    pub cpu_milli: u64,
    /// Host memory, MiB.
    #[serde(default)]
    pub host_mem_mib: u64,
}

/// The workload mixes a server accepts: its default and the shape limit.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct MixSettings {
    /// `policy.workload_mix`, when configured.
    pub default: Option<Arc<WorkloadMix>>,
    /// `limits.max_mix_shapes`.
    pub max_shapes: usize,
}

/// `[inventory]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InventoryConfig {
    /// Slots per card.
    pub split_count: u32,
    /// Memory scaling.
    pub memory_scaling: f64,
    /// Core scaling.
    pub core_scaling: f64,
    /// Per-node or per-model overrides (later entries win).
    #[serde(default)]
    pub overrides: Vec<OverrideConfig>,
}

/// One `[[inventory.overrides]]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct OverrideConfig {
    /// Node name; empty = every node.
    #[serde(default)]
    pub node_name: String,
    /// Model substring (case-insensitive); empty = every model.
    #[serde(default)]
    pub model_contains: String,
    /// Split count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_count: Option<u32>,
    /// Memory scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_scaling: Option<f64>,
    /// Core scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_scaling: Option<f64>,
}

/// `[names]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamesConfig {
    /// Cards wanted.
    pub resource_count: String,
    /// Memory per card, MiB.
    pub resource_memory: String,
    /// Memory per card, percent.
    pub resource_memory_percentage: String,
    /// Cores per card, percent.
    pub resource_cores: String,
    /// Annotation keys.
    pub annotations: AnnotationsConfig,
}

/// `[names.annotations]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnnotationsConfig {
    /// Node policy.
    pub node_scheduler_policy: String,
    /// GPU policy.
    pub gpu_scheduler_policy: String,
    /// Scoring weights.
    pub device_scoring_weights: String,
    /// Allowed types.
    pub use_gpu_type: String,
    /// Refused types.
    pub nouse_gpu_type: String,
    /// Allowed ids.
    pub use_gpu_uuid: String,
    /// Refused ids.
    pub nouse_gpu_uuid: String,
    /// numa-bind.
    pub numa_bind: String,
    /// Allowed modes.
    pub vgpu_mode: String,
    /// Node annotation with cordoned card ids.
    pub device_cordon: String,
}

// --- node cache (issue 11: nodes by reference) -----------------------------------------------

/// `[node_cache]`: the bounded cache of converted node parts sent by reference.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeCacheConfig {
    /// Cache node parts (off: every reference is answered FAILED_PRECONDITION, clients resend
    /// whole).
    pub enabled: bool,
    /// Most estimated bytes held (decoded and converted nodes), at least 1 MiB.
    pub max_bytes: usize,
    /// Most entries held (inventories and usage parts), at least 16.
    pub max_entries: usize,
    /// Most node sets held (`NodeSetRef.keep`); 0 keeps none (every base is a miss).
    pub max_sets: usize,
    /// Most estimated bytes held by node sets, counting each node a set holds at its full size.
    pub max_set_bytes: usize,
}

impl NodeCacheConfig {
    fn validate(&self) -> Result<(CacheLimits, SetLimits), ConfigError> {
        if self.max_bytes < 1 << 20 {
            return Err(err(
                "node_cache.max_bytes",
                "must be at least 1048576 (1 MiB)",
            ));
        }
        if self.max_entries < 16 {
            return Err(err("node_cache.max_entries", "must be at least 16"));
        }
        if self.max_sets > 0 && self.max_set_bytes < 1 << 20 {
            return Err(err(
                "node_cache.max_set_bytes",
                "must be at least 1048576 (1 MiB) when node_cache.max_sets > 0",
            ));
        }
        Ok((
            CacheLimits {
                enabled: self.enabled,
                max_bytes: self.max_bytes,
                max_entries: self.max_entries,
            },
            SetLimits {
                // Off with the node cache: sets are made of its nodes.
                max_sets: if self.enabled { self.max_sets } else { 0 },
                max_bytes: self.max_set_bytes,
            },
        ))
    }
}

/// Bounds of the node cache (`[node_cache]`; `crate::cache::nodes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// Whether node parts are cached at all (off: every reference is a miss).
    pub enabled: bool,
    /// Most estimated bytes held, over all shards.
    pub max_bytes: usize,
    /// Most entries held, over all shards.
    pub max_entries: usize,
}

/// Bounds of the node set cache (`[node_cache]` `max_sets`, `max_set_bytes`;
/// `crate::cache::sets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetLimits {
    /// Most sets held (0: none; every base is a miss).
    pub max_sets: usize,
    /// Most estimated bytes held.
    pub max_bytes: usize,
}

// --- end node cache --------------------------------------------------------------------------

/// Validated runtime settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Metrics listen address, when enabled.
    pub metrics_listen: Option<SocketAddr>,
    /// TLS, when enabled.
    pub tls: Option<ServerTlsFiles>,
    /// Limits.
    pub limits: Limits,
    /// Engine defaults.
    pub defaults: Defaults,
    /// Inventory normalisation.
    pub normalization: NormalizationConfig,
    /// Kubernetes names.
    pub names: KubeNames,
    /// Telemetry.
    pub telemetry: Telemetry,
    /// Node cache bounds.
    pub node_cache: CacheLimits,
    /// Node set cache bounds.
    pub node_sets: SetLimits,
    /// Workload mixes (`policy.workload_mix`, `limits.max_mix_shapes`).
    pub mix: MixSettings,
}

/// Limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest message, bytes.
    pub max_message_bytes: usize,
    /// Most nodes.
    pub max_nodes: usize,
    /// Most cards per node.
    pub max_cards_per_node: usize,
    /// Most cards.
    pub max_cards: usize,
    /// Most workloads per batch.
    pub max_workloads: usize,
    /// Most containers per workload.
    pub max_containers: usize,
    /// Server-side time limit.
    pub request_timeout: Duration,
    /// Concurrent decisions.
    pub max_concurrent_requests: usize,
    /// Calls waiting for a decision slot at once.
    pub max_queued_requests: usize,
    /// Longest wait for a decision slot.
    pub queue_timeout: Duration,
    /// NOT_SERVING period before the listener closes on a graceful stop.
    pub shutdown_grace: Duration,
    /// Cards from which a request runs on the blocking pool.
    pub blocking_threshold_cards: usize,
    /// Graceful stop limit.
    pub drain_timeout: Duration,
    /// Most entries of a repeated field without its own limit.
    pub max_list_entries: usize,
    /// Memory budget of the requests in flight, bytes (estimated).
    pub max_in_flight_bytes: usize,
    /// Time limit for receiving a request body.
    pub body_timeout: Duration,
    /// HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Preempt: placed workloads per node, in all, and id bytes.
    pub preempt: PreemptLimits,
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
}

/// Loads the layers; `flags` serialises to dotted keys (the binary's clap struct, or a map such
/// as `{"listen": "127.0.0.1:0"}`).
pub fn load(sources: Sources<'_>, flags: &impl Serialize) -> Result<FileConfig, ConfigError> {
    SPEC.load(sources, flags)
}

/// The embedded defaults, validated (no file, no environment, no flags).
pub fn default_settings() -> Result<Settings, ConfigError> {
    let env = BTreeMap::new();
    let none: BTreeMap<String, String> = BTreeMap::new();
    load(
        Sources {
            file: None,
            env: &env,
        },
        &none,
    )?
    .validate(&env)
}

impl FileConfig {
    /// Validates every value into settings. `env` carries the standard `OTEL_*` variables.
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let t = &self.tls;
        let tls = match gpusched_runtime::tls::pair(
            ("tls.cert", t.cert.as_deref()),
            ("tls.key", t.key.as_deref()),
        )? {
            Some((cert, key)) => Some(ServerTlsFiles {
                cert: readable("tls.cert", cert)?,
                key: readable("tls.key", key)?,
                client_ca: t
                    .client_ca
                    .as_deref()
                    .map(|p| readable("tls.client_ca", p))
                    .transpose()?,
            }),
            None if t.client_ca.is_some() => {
                return Err(err("tls.client_ca", "needs tls.cert and tls.key"));
            }
            None => None,
        };
        if let Some(files) = &tls {
            // The PEM content too, so a wrong file stops start-up with the key (exit 2).
            files.load().map_err(|e| {
                let key = if e.path == files.cert {
                    "tls.cert"
                } else if e.path == files.key {
                    "tls.key"
                } else {
                    "tls.client_ca"
                };
                err(key, format!("{}: {}", e.path.display(), e.reason))
            })?;
        }
        let (node_cache, node_sets) = self.node_cache.validate()?;
        let l = &self.limits;
        let limits = Limits {
            max_message_bytes: l.max_message_bytes.get(),
            max_nodes: l.max_nodes.get(),
            max_cards_per_node: l.max_cards_per_node.get(),
            max_cards: l.max_cards.get(),
            max_workloads: l.max_workloads.get(),
            max_containers: l.max_containers.get(),
            request_timeout: nonzero_duration("limits.request_timeout", l.request_timeout)?,
            max_concurrent_requests: l.max_concurrent_requests.get(),
            max_queued_requests: l.max_queued_requests,
            queue_timeout: l.queue_timeout,
            shutdown_grace: l.shutdown_grace,
            blocking_threshold_cards: l.blocking_threshold_cards,
            drain_timeout: l.drain_timeout,
            max_list_entries: l.max_list_entries.get(),
            max_in_flight_bytes: l.max_in_flight_bytes.get(),
            body_timeout: nonzero_duration("limits.body_timeout", l.body_timeout)?,
            max_concurrent_streams: l.max_concurrent_streams.get(),
            preempt: PreemptLimits {
                max_workloads_per_node: l.max_placed_workloads_per_node.get(),
                max_workloads: l.max_placed_workloads.get(),
                max_id_bytes: l.max_placed_id_bytes.get(),
            },
        };
        // A request of the largest size must be admissible: receiving it is charged twice its
        // size (see `intake`).
        if limits.max_message_bytes > limits.max_in_flight_bytes / 2 {
            return Err(err(
                "limits.max_in_flight_bytes",
                format!(
                    "{} must be at least twice limits.max_message_bytes ({})",
                    limits.max_in_flight_bytes, limits.max_message_bytes
                ),
            ));
        }
        let p = &self.policy;
        let node_policy = p.node_scheduler_policy.parse::<NodePolicy>().map_err(|e| {
            err(
                "policy.node_scheduler_policy",
                format!("{:?}: {e}", p.node_scheduler_policy),
            )
        })?;
        let gpu_policy = p.gpu_scheduler_policy.parse::<GpuPolicy>().map_err(|e| {
            err(
                "policy.gpu_scheduler_policy",
                format!("{:?}: {e}", p.gpu_scheduler_policy),
            )
        })?;
        let defaults = Defaults {
            node_policy,
            gpu_policy,
            memory_mib: p.default_memory_mib,
            cores: p.default_cores,
        };
        defaults
            .validate()
            .map_err(|e| err("policy.default_cores", e.to_string()))?;
        let mix = mix_settings(&p.workload_mix, l.max_mix_shapes.get())?;
        let i = &self.inventory;
        let normalization = NormalizationConfig {
            split_count: i.split_count,
            memory_scaling: i.memory_scaling,
            core_scaling: i.core_scaling,
            overrides: i
                .overrides
                .iter()
                .map(|o| NormalizationOverride {
                    node_name: o.node_name.clone(),
                    model_contains: o.model_contains.clone(),
                    split_count: o.split_count,
                    memory_scaling: o.memory_scaling,
                    core_scaling: o.core_scaling,
                })
                .collect(),
        };
        if let Err(e) = normalization.validate() {
            let v = e.violations.first();
            return Err(err(
                &format!("inventory.{}", v.map_or("", |v| v.field.as_str())),
                v.map_or_else(String::new, |v| v.description.clone()),
            ));
        }
        Ok(Settings {
            listen: self.listen,
            metrics_listen: self.metrics.enabled.then_some(self.metrics.listen),
            tls,
            limits,
            defaults,
            normalization,
            names: self.names.validate()?,
            node_cache,
            node_sets,
            mix,
            telemetry: self.telemetry.validate(env)?,
        })
    }
}

/// `policy.workload_mix` and `limits.max_mix_shapes`, validated as a request's mix is (the
/// engine's checks), errors named by key (`policy.workload_mix[2].probability`).
fn mix_settings(shapes: &[MixShapeConfig], max_shapes: usize) -> Result<MixSettings, ConfigError> {
    if max_shapes > MAX_MIX_SHAPES {
        return Err(err(
            "limits.max_mix_shapes",
            format!("{max_shapes} is above the engine's limit of {MAX_MIX_SHAPES}"),
        ));
    }
    if shapes.is_empty() {
        return Ok(MixSettings {
            default: None,
            max_shapes,
        });
    }
    if shapes.len() > max_shapes {
        return Err(err(
            "policy.workload_mix",
            format!(
                "{} shapes; limits.max_mix_shapes is {max_shapes}",
                shapes.len()
            ),
        ));
    }
    let shapes = shapes
        .iter()
        .map(|s| {
            (
                s.probability,
                MixShape {
                    weight: 0,
                    gpus: s.gpu_count,
                    cores: s.gpucores_percent,
                    mem_mib: s.gpumem_mib,
                    mem_percent: s.gpumem_percent,
                    card_types: s.gpu_types.clone(),
                    cpu_milli: s.cpu_milli,
                    host_mem_mib: s.host_mem_mib,
                },
            )
        })
        .collect();
    let mix = WorkloadMix::from_probabilities(shapes).map_err(|e| {
        let v = e.violations.first();
        let field = v.map_or("shapes", |v| v.field.as_str());
        let key = format!(
            "policy.workload_mix{}",
            field.strip_prefix("shapes").unwrap_or(field)
        );
        err(&key, v.map_or_else(String::new, |v| v.description.clone()))
    })?;
    Ok(MixSettings {
        default: Some(Arc::new(mix)),
        max_shapes,
    })
}

impl NamesConfig {
    fn validate(&self) -> Result<KubeNames, ConfigError> {
        let a = &self.annotations;
        Ok(KubeNames {
            resources: ResourceNames {
                count: non_empty("names.resource_count", &self.resource_count)?,
                memory: non_empty("names.resource_memory", &self.resource_memory)?,
                memory_percentage: non_empty(
                    "names.resource_memory_percentage",
                    &self.resource_memory_percentage,
                )?,
                cores: non_empty("names.resource_cores", &self.resource_cores)?,
            },
            annotations: AnnotationNames {
                node_scheduler_policy: a.node_scheduler_policy.clone(),
                gpu_scheduler_policy: a.gpu_scheduler_policy.clone(),
                device_scoring_weights: a.device_scoring_weights.clone(),
                use_gpu_type: a.use_gpu_type.clone(),
                nouse_gpu_type: a.nouse_gpu_type.clone(),
                use_gpu_uuid: a.use_gpu_uuid.clone(),
                nouse_gpu_uuid: a.nouse_gpu_uuid.clone(),
                numa_bind: a.numa_bind.clone(),
                vgpu_mode: a.vgpu_mode.clone(),
                device_cordon: a.device_cordon.clone(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpusched_runtime::layers::vars;

    fn load_env(env: &BTreeMap<String, String>) -> Result<FileConfig, ConfigError> {
        load(Sources { file: None, env }, &vars(&[]))
    }

    #[test]
    fn embedded_defaults_are_valid() {
        let s = default_settings().unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(s.defaults, Defaults::default());
        assert!(s.telemetry.otlp_endpoint.is_none());
        // --print-config output loads back to the same configuration.
        let cfg = load_env(&vars(&[])).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, gpusched_runtime::to_toml(&cfg).unwrap()).unwrap();
        let env = vars(&[]);
        let again = load(
            Sources {
                file: Some(&path),
                env: &env,
            },
            &env,
        )
        .unwrap();
        assert_eq!(again, cfg);
    }

    #[test]
    fn server_variables_and_the_older_names() {
        let env = vars(&[
            ("GPUSCHED_SERVER_LIMITS__MAX_NODES", "8"),
            ("GPUSCHED_LIMITS__MAX_CARDS", "9"),
            ("GPUSCHED_SERVER_BIN", "/not/config"),
            ("GPUSCHED_CACHE", "/not/config"),
        ]);
        let cfg = load_env(&env).unwrap();
        assert_eq!(cfg.limits.max_nodes.get(), 8);
        assert_eq!(cfg.limits.max_cards.get(), 9);
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases: &[(&str, &str)] = &[
            ("policy.gpu_scheduler_policy", "pack"),
            ("policy.node_scheduler_policy", "Spread"),
            ("policy.default_cores", "101"),
            ("listen", "nowhere"),
            ("limits.max_nodes", "0"),
            ("limits.max_nodes", "-1"),
            ("limits.max_placed_workloads", "0"),
            ("telemetry.log_format", "xml"),
            ("telemetry.log_level", "verbose"),
            ("inventory.split_count", "0"),
            ("telemetry.sample_ratio", "2"),
        ];
        for (key, value) in cases {
            let env: BTreeMap<String, String> = [(
                format!("GPUSCHED_SERVER_{}", key.replace('.', "__").to_uppercase()),
                (*value).to_owned(),
            )]
            .into();
            let e = load_env(&env)
                .and_then(|c| c.validate(&vars(&[])))
                .expect_err(key);
            assert_eq!(e.key, *key, "{e}");
        }
    }
}
