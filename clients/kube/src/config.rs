//! The shim's configuration sections and their validation. Loading (defaults < `--config`
//! file < `GPUSCHED_KUBE_SECTION__KEY` variables < flags), `--print-config` and the one-line
//! errors are `gpusched-runtime`'s; a bad value names its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpusched_client::v1;
use gpusched_runtime::checks::{non_empty, nonzero_duration, optional};
use gpusched_runtime::tls::{ClientTlsFiles, pair, readable};
use gpusched_runtime::{ConfigError, Spec, Telemetry, TelemetryConfig};
use serde::{Deserialize, Serialize};

/// The embedded default configuration (also what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// How the configuration is layered: variables `GPUSCHED_KUBE_SECTION__KEY`.
pub const SPEC: Spec = Spec {
    binary: "gpusched-kube",
    defaults: DEFAULT_CONFIG,
    env_prefix: "GPUSCHED_KUBE",
    legacy_env_prefix: None,
    list_keys: &[],
};

/// The configuration file's shape.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// The kube-scheduler profile name whose pods are ours.
    pub scheduler_name: String,
    /// The gpusched service.
    pub service: ServiceConfig,
    /// The Kubernetes API.
    #[serde(default)]
    pub kube: KubeConfig,
    /// The extender endpoint.
    pub extender: ExtenderConfig,
    /// The admission webhook.
    pub webhook: WebhookConfig,
    /// Leader election.
    pub leader_election: LeaderConfig,
    /// Assume cache.
    pub assume: AssumeConfig,
    /// GPU quotas per namespace.
    pub quota: QuotaConfig,
    /// Resource and annotation names.
    pub names: NamesConfig,
    /// The operator's view (web page and JSON API).
    #[serde(default)]
    pub web: WebConfig,
    /// Preemption (`src/preempt/`).
    pub preemption: PreemptionConfig,
    /// The shim's default placement policies (over the service's).
    #[serde(default)]
    pub policy: PolicyConfig,
    /// The workload mix of the fgd policies (`src/fgd.rs`).
    #[serde(default)]
    pub fgd: FgdConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
}

/// `[service]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// gRPC address.
    pub address: String,
    /// Deadline per call.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// CA of the service's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// Client key (mutual TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// Name to verify the service's certificate against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_domain: Option<String>,
}

/// `[kube]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct KubeConfig {
    /// Kubeconfig file; default: KUBECONFIG, ~/.kube/config or in-cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
}

/// `[extender]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExtenderConfig {
    /// HTTP listen address.
    pub listen: SocketAddr,
}

/// `[webhook]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Serve the admission webhook.
    pub enabled: bool,
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// Certificate chain (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
    /// Set spec.schedulerName on GPU pods.
    pub mutate: bool,
    /// Objects with this label set to `ignore` are skipped.
    pub ignore_label: String,
}

/// `[web]`: the operator's view, a read-only web page and JSON API behind a bearer token.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Serve it (off by default).
    pub enabled: bool,
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// File holding the bearer token every request must carry (a Secret's key); required when
    /// enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// How many pending GPU pods a page analyses (reasons, nearest miss); the rest are counted.
    pub max_pending: usize,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            enabled: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 8890)),
            token_file: None,
            max_pending: 20,
        }
    }
}

/// `[leader_election]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LeaderConfig {
    /// Elect a leader with a Lease (off: this instance always leads).
    pub enabled: bool,
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace (empty: auto).
    pub lease_namespace: String,
    /// Holder identity (empty: auto).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    #[serde(with = "humantime_serde")]
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    #[serde(with = "humantime_serde")]
    pub renew_deadline: Duration,
    /// Interval between acquire/renew attempts.
    #[serde(with = "humantime_serde")]
    pub retry_period: Duration,
}

/// `[assume]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AssumeConfig {
    /// Lifetime of a decision the informer never showed.
    #[serde(with = "humantime_serde")]
    pub ttl: Duration,
    /// Reserve the preferred node's cards at prioritize, until the bind.
    pub reserve: bool,
    /// Lifetime of a reservation whose bind never comes.
    #[serde(with = "humantime_serde")]
    pub reservation_ttl: Duration,
}

/// `[preemption]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PreemptionConfig {
    /// Evict pods of lower priority to make room for a pending GPU pod.
    pub enabled: bool,
    /// How long a preemptor's cards stay held for it once its victims are gone.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
    /// How long the victims may take to leave before the hold is dropped.
    #[serde(with = "humantime_serde")]
    pub victims_timeout: Duration,
}

/// `[policy]`: the default node and GPU policies the shim sends with every request
/// (`PlacementOptions.default_node_policy` / `default_gpu_policy`); a pod's annotations still
/// win. Empty: the service's own default.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// `binpack`, `spread` or `fgd`; empty = the service's.
    #[serde(default)]
    pub node_scheduler_policy: String,
    /// A GPU policy or a comma chain (`binpack`, `spread`, `mutex`, `topology-aware`, `numa`,
    /// `fgd`); empty = the service's.
    #[serde(default)]
    pub gpu_scheduler_policy: String,
}

/// `[fgd]`: where the workload mix of the fgd policies comes from (`src/fgd.rs`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FgdConfig {
    /// `observed` (from the GPU pods the shim sees), `config` (`workload_mix` below) or
    /// `service` (send none: the service's `policy.workload_mix`).
    pub mix: String,
    /// Observed: the newest this many GPU pods (by creation time) are counted.
    pub window: usize,
    /// Observed: at most this many shapes are sent (the service's `limits.max_mix_shapes`
    /// bounds it too; at most 64).
    pub max_shapes: usize,
    /// Observed: the most popular shapes covering this share (0..=1) of the counted weight.
    pub coverage: f64,
    /// Observed: `demand` (a shape weighs its cards × cores, the simulator's default) or `pods`
    /// (its container count, the paper's artifact).
    pub weight: String,
    /// Observed: the mix is derived again at most this often.
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    /// Config: the shapes (the fields of `WorkloadMixShape`, probabilities summing to 1).
    #[serde(default)]
    pub workload_mix: Vec<MixShapeConfig>,
}

impl Default for FgdConfig {
    fn default() -> Self {
        FgdConfig {
            mix: "observed".into(),
            window: 1000,
            max_shapes: 32,
            coverage: 0.95,
            weight: "demand".into(),
            refresh: Duration::from_secs(5),
            workload_mix: Vec::new(),
        }
    }
}

/// One `[[fgd.workload_mix]]` shape (the fields of `WorkloadMixShape`; the service's
/// `[[policy.workload_mix]]` has the same form).
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
}

/// Where the fgd mix comes from (`fgd.mix`).
#[derive(Clone, Debug, PartialEq)]
pub enum MixSource {
    /// Derived from the GPU pods the shim sees.
    Observed {
        /// Newest GPU pods counted.
        window: usize,
        /// Most shapes sent.
        max_shapes: usize,
        /// Share of the counted weight the shapes cover.
        coverage: f64,
        /// Weigh shapes by demand (cards × cores) rather than by count.
        by_demand: bool,
        /// How often the mix is derived again.
        refresh: Duration,
    },
    /// From the configuration.
    Config(v1::WorkloadMix),
    /// None sent: the service's own.
    Service,
}

/// The shim's policy settings: defaults sent with every request and the fgd mix.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySettings {
    /// Default node policy (Unspecified: the service's).
    pub node: v1::NodePolicy,
    /// Default GPU policy tokens (empty: the service's).
    pub gpu: Vec<v1::GpuPolicy>,
    /// Where the fgd mix comes from.
    pub mix: MixSource,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            node: v1::NodePolicy::Unspecified,
            gpu: Vec::new(),
            mix: MixSource::Service,
        }
    }
}

/// The most shapes a mix may have (docs/placement-semantics.md section 12.1).
pub const MAX_MIX_SHAPES: usize = 64;

impl PolicyConfig {
    fn validate(&self) -> Result<(v1::NodePolicy, Vec<v1::GpuPolicy>), ConfigError> {
        let node = match self.node_scheduler_policy.trim() {
            "" => v1::NodePolicy::Unspecified,
            "binpack" => v1::NodePolicy::Binpack,
            "spread" => v1::NodePolicy::Spread,
            "fgd" => v1::NodePolicy::Fgd,
            o => {
                return Err(err(
                    "policy.node_scheduler_policy",
                    format!("unknown node policy {o:?}; accepted: binpack, spread, fgd (or empty)"),
                ));
            }
        };
        let text = self.gpu_scheduler_policy.trim();
        let mut gpu = Vec::new();
        if !text.is_empty() {
            for t in text.split(',') {
                gpu.push(match t.trim() {
                    "binpack" => v1::GpuPolicy::Binpack,
                    "spread" => v1::GpuPolicy::Spread,
                    "mutex" => v1::GpuPolicy::Mutex,
                    "topology-aware" => v1::GpuPolicy::TopologyAware,
                    "numa" => v1::GpuPolicy::Numa,
                    "fgd" => v1::GpuPolicy::Fgd,
                    o => {
                        return Err(err(
                            "policy.gpu_scheduler_policy",
                            format!(
                                "unknown GPU policy {o:?}; accepted: binpack, spread, mutex, \
                                 topology-aware, numa, fgd, or a comma chain of them (or empty)"
                            ),
                        ));
                    }
                });
            }
        }
        Ok((node, gpu))
    }
}

impl FgdConfig {
    fn validate(&self) -> Result<MixSource, ConfigError> {
        match self.mix.trim() {
            "service" => Ok(MixSource::Service),
            "config" => Ok(MixSource::Config(config_mix(&self.workload_mix)?)),
            "observed" => {
                if self.window == 0 {
                    return Err(err("fgd.window", "must be at least 1"));
                }
                if self.max_shapes == 0 || self.max_shapes > MAX_MIX_SHAPES {
                    return Err(err(
                        "fgd.max_shapes",
                        format!("must be 1..={MAX_MIX_SHAPES}"),
                    ));
                }
                if !(self.coverage > 0.0 && self.coverage <= 1.0) {
                    return Err(err("fgd.coverage", "must be in (0, 1]"));
                }
                let by_demand = match self.weight.trim() {
                    "demand" => true,
                    "pods" => false,
                    o => {
                        return Err(err(
                            "fgd.weight",
                            format!("unknown weight {o:?}; accepted: demand, pods"),
                        ));
                    }
                };
                Ok(MixSource::Observed {
                    window: self.window,
                    max_shapes: self.max_shapes,
                    coverage: self.coverage,
                    by_demand,
                    refresh: nonzero_duration("fgd.refresh", self.refresh)?,
                })
            }
            o => Err(err(
                "fgd.mix",
                format!("unknown mix source {o:?}; accepted: observed, config, service"),
            )),
        }
    }
}

/// `fgd.workload_mix` as a mix, checked as the service checks one (section 12.1), errors named
/// by key (`fgd.workload_mix[1].probability`). Card types are checked per request by the
/// service; the shim drops the entries no candidate node has (`gpusched_client::mix`).
fn config_mix(shapes: &[MixShapeConfig]) -> Result<v1::WorkloadMix, ConfigError> {
    let key = "fgd.workload_mix";
    if shapes.is_empty() {
        return Err(err(
            key,
            "required when fgd.mix = \"config\" (one table per shape)",
        ));
    }
    if shapes.len() > MAX_MIX_SHAPES {
        return Err(err(
            key,
            format!("{} shapes; at most {MAX_MIX_SHAPES}", shapes.len()),
        ));
    }
    let mut sum = 0.0;
    for (i, s) in shapes.iter().enumerate() {
        let k = |f: &str| format!("{key}[{i}].{f}");
        if !(s.probability.is_finite() && (0.0..=1.0).contains(&s.probability)) {
            return Err(err(&k("probability"), "must be a number in [0, 1]"));
        }
        sum += s.probability;
        if s.gpu_count == 0 {
            return Err(err(&k("gpu_count"), "must be at least 1"));
        }
        if s.gpucores_percent > 100 {
            return Err(err(&k("gpucores_percent"), "must be 0..=100"));
        }
        if s.gpumem_percent > 100 {
            return Err(err(&k("gpumem_percent"), "must be 0..=100 (0: not set)"));
        }
        if s.gpumem_mib > 16 << 20 {
            return Err(err(&k("gpumem_mib"), "must be at most 16 TiB"));
        }
        if let Some(j) = s.gpu_types.iter().position(|t| t.trim().is_empty()) {
            return Err(err(&k(&format!("gpu_types[{j}]")), "must not be blank"));
        }
    }
    if (sum - 1.0).abs() > 1e-6 {
        return Err(err(
            key,
            format!("the probabilities sum to {sum}, not 1 (within 1e-6)"),
        ));
    }
    Ok(v1::WorkloadMix {
        shapes: shapes
            .iter()
            .map(|s| v1::WorkloadMixShape {
                probability: s.probability,
                gpu_count: s.gpu_count,
                gpucores_percent: s.gpucores_percent,
                gpumem_mib: s.gpumem_mib,
                gpumem_percent: s.gpumem_percent,
                gpu_types: s.gpu_types.iter().map(|t| t.trim().to_owned()).collect(),
                cpu_milli: 0,
                host_mem_mib: 0,
            })
            .collect(),
    })
}

/// `[quota]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Watch ResourceQuota objects and send each pod its namespace's GPU budget.
    pub enabled: bool,
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AnnotationsConfig {
    /// Node: card inventory.
    pub node_register: String,
    /// Node: pair scores.
    pub node_score: String,
    /// Node: cordoned cards.
    pub device_cordon: String,
    /// Pod: cards the device plugin still hands out.
    pub devices_to_allocate: String,
    /// Pod: cards the pod holds (usage).
    pub devices_allocated: String,
    /// Pod: chosen node (also a label).
    pub vgpu_node: String,
    /// Pod: decision time.
    pub vgpu_time: String,
    /// Pod: bind phase.
    pub bind_phase: String,
    /// Pod: bind phase time.
    pub bind_time: String,
    /// Pod: MIG reservations (HAMi's dynamic MIG).
    pub mig_allocations: String,
    /// Node: each MIG card's whole layout (gpusched's node agent).
    pub node_mig_layouts: String,
}

/// Resource names (what a pod asks for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceNames {
    /// Cards wanted.
    pub count: String,
    /// Memory per card, MiB.
    pub memory: String,
    /// Memory per card, percent.
    pub memory_percentage: String,
    /// Cores per card, percent.
    pub cores: String,
}

impl ResourceNames {
    /// The four names.
    pub fn all(&self) -> [&str; 4] {
        [
            self.count.as_str(),
            self.memory.as_str(),
            self.memory_percentage.as_str(),
            self.cores.as_str(),
        ]
    }
}

impl Default for ResourceNames {
    fn default() -> Self {
        ResourceNames {
            count: "nvidia.com/gpu".into(),
            memory: "nvidia.com/gpumem".into(),
            memory_percentage: "nvidia.com/gpumem-percentage".into(),
            cores: "nvidia.com/gpucores".into(),
        }
    }
}

impl Default for AnnotationsConfig {
    fn default() -> Self {
        AnnotationsConfig {
            node_register: gpusched_hami::NODE_REGISTER.into(),
            node_score: gpusched_hami::NODE_SCORE.into(),
            device_cordon: gpusched_hami::DEVICE_CORDON.into(),
            devices_to_allocate: gpusched_hami::DEVICES_TO_ALLOCATE.into(),
            devices_allocated: gpusched_hami::DEVICES_ALLOCATED.into(),
            vgpu_node: gpusched_hami::VGPU_NODE.into(),
            vgpu_time: gpusched_hami::VGPU_TIME.into(),
            bind_phase: gpusched_hami::BIND_PHASE.into(),
            bind_time: gpusched_hami::BIND_TIME.into(),
            mig_allocations: gpusched_hami::MIG_ALLOCATIONS.into(),
            node_mig_layouts: gpusched_hami::NODE_MIG_LAYOUTS.into(),
        }
    }
}

/// Names the translation needs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Names {
    /// Our kube-scheduler profile.
    pub scheduler_name: String,
    /// GPU resources.
    pub resources: ResourceNames,
    /// HAMi annotations.
    pub annotations: AnnotationsConfig,
}

/// The gpusched service connection.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceSettings {
    /// Address.
    pub address: String,
    /// Deadline per call.
    pub timeout: Duration,
    /// TLS files, when TLS is on (a CA, an identity or an https:// address).
    pub tls: Option<ClientTlsFiles>,
}

/// Webhook settings.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookSettings {
    /// Listen address.
    pub listen: SocketAddr,
    /// Certificate chain.
    pub cert: PathBuf,
    /// Key.
    pub key: PathBuf,
    /// Mutate schedulerName.
    pub mutate: bool,
    /// Ignore label key.
    pub ignore_label: String,
}

/// The operator's view, when enabled.
#[derive(Clone, PartialEq)]
pub struct WebSettings {
    /// Listen address.
    pub listen: SocketAddr,
    /// The bearer token (read from `web.token_file` at start-up).
    pub token: String,
    /// Pending pods analysed per page.
    pub max_pending: usize,
}

impl std::fmt::Debug for WebSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSettings")
            .field("listen", &self.listen)
            .field("token", &"<redacted>")
            .field("max_pending", &self.max_pending)
            .finish()
    }
}

/// The shortest token `web.token_file` may hold.
pub const MIN_WEB_TOKEN_LEN: usize = 16;

/// Leader election settings.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderSettings {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Holder identity.
    pub identity: String,
    /// Lease duration.
    pub lease_duration: Duration,
    /// Renew deadline.
    pub renew_deadline: Duration,
    /// Retry period.
    pub retry_period: Duration,
}

/// Preemption settings (when enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreemptionSettings {
    /// How long a preemptor's cards stay held for it once its victims are gone.
    pub hold: Duration,
    /// How long the victims may take to leave before the hold is dropped.
    pub victims_timeout: Duration,
}

/// Validated runtime settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Names.
    pub names: Names,
    /// Service.
    pub service: ServiceSettings,
    /// Kubeconfig override.
    pub kubeconfig: Option<PathBuf>,
    /// Extender listen address.
    pub extender_listen: SocketAddr,
    /// Webhook, when enabled.
    pub webhook: Option<WebhookSettings>,
    /// Leader election, when enabled.
    pub leader: Option<LeaderSettings>,
    /// The operator's view, when enabled.
    pub web: Option<WebSettings>,
    /// Assume cache TTL.
    pub assume_ttl: Duration,
    /// Reservations at prioritize.
    pub reserve: bool,
    /// Reservation TTL.
    pub reservation_ttl: Duration,
    /// Preemption, when enabled.
    pub preemption: Option<PreemptionSettings>,
    /// GPU quotas per namespace (ResourceQuota objects watched).
    pub quotas: bool,
    /// Default policies and the fgd mix.
    pub policy: PolicySettings,
    /// Logs and traces.
    pub telemetry: Telemetry,
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
}

/// The lease namespace when the config leaves it empty.
fn auto_namespace(env: &BTreeMap<String, String>) -> String {
    if let Some(ns) = env.get("POD_NAMESPACE").filter(|s| !s.trim().is_empty()) {
        return ns.trim().to_owned();
    }
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "gpusched-system".to_owned())
}

/// The holder identity when the config leaves it empty.
fn auto_identity(env: &BTreeMap<String, String>) -> String {
    for k in ["POD_NAME", "HOSTNAME"] {
        if let Some(v) = env.get(k).filter(|s| !s.trim().is_empty()) {
            return v.trim().to_owned();
        }
    }
    format!("gpusched-kube-{}", std::process::id())
}

impl FileConfig {
    /// Validates every value into settings; `env` supplies POD_NAMESPACE / POD_NAME / HOSTNAME
    /// and the standard `OTEL_*` variables.
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let s = &self.service;
        let identity = pair(
            ("service.tls_cert", s.tls_cert.as_deref()),
            ("service.tls_key", s.tls_key.as_deref()),
        )?
        .map(|(c, k)| {
            Ok::<_, ConfigError>((
                readable("service.tls_cert", c)?,
                readable("service.tls_key", k)?,
            ))
        })
        .transpose()?;
        let ca = s
            .tls_ca
            .as_deref()
            .map(|p| readable("service.tls_ca", p))
            .transpose()?;
        let address = non_empty("service.address", &s.address)?;
        let tls =
            (ca.is_some() || identity.is_some() || address.starts_with("https://")).then(|| {
                ClientTlsFiles {
                    ca,
                    identity,
                    domain: optional(s.tls_domain.as_deref()),
                }
            });
        let service = ServiceSettings {
            address,
            timeout: nonzero_duration("service.timeout", s.timeout)?,
            tls,
        };
        let w = &self.webhook;
        let webhook = if w.enabled {
            let cert = w
                .cert
                .as_deref()
                .ok_or_else(|| err("webhook.cert", "required when the webhook is enabled"))?;
            let key = w
                .key
                .as_deref()
                .ok_or_else(|| err("webhook.key", "required when the webhook is enabled"))?;
            Some(WebhookSettings {
                listen: w.listen,
                cert: readable("webhook.cert", cert)?,
                key: readable("webhook.key", key)?,
                mutate: w.mutate,
                ignore_label: non_empty("webhook.ignore_label", &w.ignore_label)?,
            })
        } else {
            None
        };
        let l = &self.leader_election;
        let leader = if l.enabled {
            nonzero_duration("leader_election.retry_period", l.retry_period)?;
            if l.renew_deadline <= l.retry_period {
                return Err(err(
                    "leader_election.renew_deadline",
                    "must be longer than leader_election.retry_period",
                ));
            }
            if l.lease_duration <= l.renew_deadline {
                return Err(err(
                    "leader_election.lease_duration",
                    "must be longer than leader_election.renew_deadline",
                ));
            }
            if l.lease_duration.as_secs() < 1 {
                return Err(err("leader_election.lease_duration", "must be at least 1s"));
            }
            Some(LeaderSettings {
                lease_name: non_empty("leader_election.lease_name", &l.lease_name)?,
                namespace: optional(Some(&l.lease_namespace))
                    .unwrap_or_else(|| auto_namespace(env)),
                identity: optional(Some(&l.identity)).unwrap_or_else(|| auto_identity(env)),
                lease_duration: l.lease_duration,
                renew_deadline: l.renew_deadline,
                retry_period: l.retry_period,
            })
        } else {
            None
        };
        let p = &self.preemption;
        let preemption = if p.enabled {
            let hold = nonzero_duration("preemption.hold", p.hold)?;
            let victims_timeout =
                nonzero_duration("preemption.victims_timeout", p.victims_timeout)?;
            Some(PreemptionSettings {
                hold,
                victims_timeout,
            })
        } else {
            None
        };
        Ok(Settings {
            web: self.web.validate()?,
            names: self.names.validate(&self.scheduler_name)?,
            service,
            kubeconfig: self.kube.kubeconfig.clone(),
            extender_listen: self.extender.listen,
            webhook,
            leader,
            assume_ttl: nonzero_duration("assume.ttl", self.assume.ttl)?,
            reserve: self.assume.reserve,
            reservation_ttl: nonzero_duration(
                "assume.reservation_ttl",
                self.assume.reservation_ttl,
            )?,
            preemption,
            quotas: self.quota.enabled,
            policy: {
                let (node, gpu) = self.policy.validate()?;
                PolicySettings {
                    node,
                    gpu,
                    mix: self.fgd.validate()?,
                }
            },
            telemetry: self.telemetry.validate(env)?,
        })
    }
}

impl WebConfig {
    fn validate(&self) -> Result<Option<WebSettings>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let key = "web.token_file";
        let path = self
            .token_file
            .as_deref()
            .ok_or_else(|| err(key, "required when the web view is enabled"))?;
        let path = readable(key, path)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| err(key, format!("{}: {e}", path.display())))?;
        let token = text.trim();
        if token.chars().count() < MIN_WEB_TOKEN_LEN {
            return Err(err(
                key,
                format!(
                    "{}: the token must have at least {MIN_WEB_TOKEN_LEN} characters",
                    path.display()
                ),
            ));
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(err(
                key,
                format!(
                    "{}: the token must not contain spaces or control characters",
                    path.display()
                ),
            ));
        }
        if self.max_pending == 0 {
            return Err(err("web.max_pending", "must be at least 1"));
        }
        Ok(Some(WebSettings {
            listen: self.listen,
            token: token.to_owned(),
            max_pending: self.max_pending,
        }))
    }
}

impl NamesConfig {
    fn validate(&self, scheduler_name: &str) -> Result<Names, ConfigError> {
        let a = &self.annotations;
        let n = |key: &str, v: &str| non_empty(&format!("names.annotations.{key}"), v);
        Ok(Names {
            scheduler_name: non_empty("scheduler_name", scheduler_name)?,
            resources: ResourceNames {
                count: non_empty("names.resource_count", &self.resource_count)?,
                memory: non_empty("names.resource_memory", &self.resource_memory)?,
                memory_percentage: non_empty(
                    "names.resource_memory_percentage",
                    &self.resource_memory_percentage,
                )?,
                cores: non_empty("names.resource_cores", &self.resource_cores)?,
            },
            annotations: AnnotationsConfig {
                node_register: n("node_register", &a.node_register)?,
                node_score: n("node_score", &a.node_score)?,
                device_cordon: n("device_cordon", &a.device_cordon)?,
                devices_to_allocate: n("devices_to_allocate", &a.devices_to_allocate)?,
                devices_allocated: n("devices_allocated", &a.devices_allocated)?,
                vgpu_node: n("vgpu_node", &a.vgpu_node)?,
                vgpu_time: n("vgpu_time", &a.vgpu_time)?,
                bind_phase: n("bind_phase", &a.bind_phase)?,
                bind_time: n("bind_time", &a.bind_time)?,
                mig_allocations: n("mig_allocations", &a.mig_allocations)?,
                node_mig_layouts: n("node_mig_layouts", &a.node_mig_layouts)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    use gpusched_runtime::layers::vars as env;

    #[test]
    fn defaults_load_and_validate_without_webhook() {
        let c = SPEC.load_pairs::<FileConfig>(None, &[], &[]).unwrap();
        assert_eq!(c.scheduler_name, "gpusched-scheduler");
        // The webhook is on by default and needs a certificate.
        let e = c.validate(&env(&[])).unwrap_err();
        assert_eq!(e.key, "webhook.cert");
        let s = SPEC
            .load_pairs::<FileConfig>(None, &[], &[("webhook.enabled", "false")])
            .unwrap()
            .validate(&env(&[("POD_NAME", "shim-0"), ("POD_NAMESPACE", "ns1")]))
            .unwrap();
        assert!(s.webhook.is_none());
        let l = s.leader.unwrap();
        assert_eq!(
            (l.identity.as_str(), l.namespace.as_str()),
            ("shim-0", "ns1")
        );
        assert_eq!(s.names.resources.count, "nvidia.com/gpu");
        assert_eq!(
            s.names.annotations.devices_allocated,
            gpusched_hami::DEVICES_ALLOCATED
        );
        assert_eq!(
            (
                s.names.annotations.mig_allocations.as_str(),
                s.names.annotations.node_mig_layouts.as_str()
            ),
            (
                "hami.io/vgpu-mig-allocations",
                "gpusched.io/node-mig-layouts"
            )
        );
        assert!(s.service.tls.is_none());
        assert!(s.quotas, "quotas are read by default");
        assert_eq!(s.telemetry.service_name, "gpusched-kube");
    }

    #[test]
    fn layering_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(
            &file,
            "scheduler_name: from-file\nservice:\n  address: http://file:1\nwebhook:\n  enabled: false\n",
        )
        .unwrap();
        let vars = [
            ("GPUSCHED_KUBE_SERVICE__ADDRESS", "http://env:2"),
            ("GPUSCHED_KUBE_LEADER_ELECTION__LEASE_DURATION", "20s"),
            ("GPUSCHED_SERVER_UNRELATED", "x"),
            ("GPUSCHED_KUBE_E2E", "not config"),
        ];
        let c = SPEC
            .load_pairs::<FileConfig>(Some(&file), &vars, &[("scheduler_name", "from-flag")])
            .unwrap();
        assert_eq!(c.scheduler_name, "from-flag");
        assert_eq!(c.service.address, "http://env:2");
        assert_eq!(c.leader_election.lease_duration, Duration::from_secs(20));
        assert!(!c.webhook.enabled);
        // The printed config reads back to the same values.
        let printed = dir.path().join("p.toml");
        std::fs::write(&printed, gpusched_runtime::to_toml(&c).unwrap()).unwrap();
        assert_eq!(
            SPEC.load_pairs::<FileConfig>(Some(&printed), &[], &[])
                .unwrap(),
            c
        );
    }

    /// The web view: off by default; on, it needs a token file holding a long enough token.
    #[test]
    fn web_settings_need_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, "  0123456789abcdef-longer\n").unwrap();
        let short = dir.path().join("short");
        std::fs::write(&short, "0123456789\n").unwrap();
        let spaced = dir.path().join("spaced");
        std::fs::write(&spaced, "0123456789 abcdef-longer").unwrap();
        let load = |pairs: &[(&str, &str)]| {
            let mut all = vec![("webhook.enabled", "false")];
            all.extend_from_slice(pairs);
            SPEC.load_pairs::<FileConfig>(None, &[], &all)
                .unwrap()
                .validate(&env(&[]))
        };
        assert!(load(&[]).unwrap().web.is_none(), "off by default");
        let on = |file: &std::path::Path, extra: &[(&str, &str)]| {
            let f = file.to_string_lossy().into_owned();
            let mut pairs = vec![("web.enabled", "true"), ("web.token_file", f.as_str())];
            pairs.extend_from_slice(extra);
            load(&pairs)
        };
        let w = on(&good, &[]).unwrap().web.unwrap();
        assert_eq!(w.token, "0123456789abcdef-longer");
        assert_eq!(w.max_pending, 20);
        assert!(
            !format!("{w:?}").contains("0123456789"),
            "the token is not logged"
        );
        // (file, extra keys, the key named)
        for (file, extra, key) in [
            (&short, vec![], "web.token_file"),
            (&spaced, vec![], "web.token_file"),
            (&good, vec![("web.max_pending", "0")], "web.max_pending"),
        ] {
            let e = on(file, &extra).unwrap_err();
            assert_eq!(e.key, key, "{file:?} {extra:?}: {e}");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let check = |vars: &[(&str, &str)], key: &str| {
            let e = SPEC
                .load_pairs::<FileConfig>(None, vars, &[("webhook.enabled", "false")])
                .and_then(|c| c.validate(&env(&[])))
                .unwrap_err();
            assert_eq!(e.key, key, "{vars:?}: {e}");
        };
        check(
            &[("GPUSCHED_KUBE_EXTENDER__LISTEN", "nowhere")],
            "extender.listen",
        );
        check(
            &[("GPUSCHED_KUBE_LEADER_ELECTION__RENEW_DEADLINE", "20s")],
            "leader_election.lease_duration",
        );
        check(
            &[("GPUSCHED_KUBE_TELEMETRY__LOG_FORMAT", "xml")],
            "telemetry.log_format",
        );
        check(
            &[("GPUSCHED_KUBE_TELEMETRY__LOG_LEVEL", "loud")],
            "telemetry.log_level",
        );
        check(&[("GPUSCHED_KUBE_SCHEDULER_NAME", " ")], "scheduler_name");
        check(
            &[("GPUSCHED_KUBE_SERVICE__TLS_CERT", "/nonexistent")],
            "service.tls_key",
        );
        check(&[("GPUSCHED_KUBE_ASSUME__TTL", "soon")], "assume.ttl");
        check(&[("GPUSCHED_KUBE_WEB__ENABLED", "true")], "web.token_file");
        check(
            &[
                ("GPUSCHED_KUBE_WEB__ENABLED", "true"),
                ("GPUSCHED_KUBE_WEB__TOKEN_FILE", "/nonexistent"),
            ],
            "web.token_file",
        );
        check(&[("GPUSCHED_KUBE_WEB__LISTEN", "nowhere")], "web.listen");
        check(&[("GPUSCHED_KUBE_ASSUME__TTL", "0s")], "assume.ttl");
        check(
            &[("GPUSCHED_KUBE_NAMES__ANNOTATIONS__MIG_ALLOCATIONS", "")],
            "names.annotations.mig_allocations",
        );
        check(
            &[("GPUSCHED_KUBE_QUOTA__ENABLED", "sometimes")],
            "quota.enabled",
        );
        check(
            &[("GPUSCHED_KUBE_PREEMPTION__HOLD", "0s")],
            "preemption.hold",
        );
        check(
            &[("GPUSCHED_KUBE_PREEMPTION__VICTIMS_TIMEOUT", "later")],
            "preemption.victims_timeout",
        );
        check(
            &[("GPUSCHED_KUBE_PREEMPTION__ENABLED", "maybe")],
            "preemption.enabled",
        );
    }

    #[test]
    fn preemption_is_on_by_default_and_can_be_turned_off() {
        let load = |pairs: &[(&str, &str)]| {
            let mut all = vec![("webhook.enabled", "false")];
            all.extend_from_slice(pairs);
            SPEC.load_pairs::<FileConfig>(None, &[], &all)
                .unwrap()
                .validate(&env(&[]))
                .unwrap()
                .preemption
        };
        assert_eq!(
            load(&[]),
            Some(PreemptionSettings {
                hold: Duration::from_secs(30),
                victims_timeout: Duration::from_secs(600),
            })
        );
        assert_eq!(load(&[("preemption.enabled", "false")]), None);
        // Off: its durations are not judged.
        assert_eq!(
            load(&[("preemption.enabled", "false"), ("preemption.hold", "0s")]),
            None
        );
    }

    #[test]
    fn policy_defaults_and_the_fgd_mix() {
        let load = |pairs: &[(&str, &str)], file: Option<&str>| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("c.toml");
            if let Some(text) = file {
                std::fs::write(&path, text).unwrap();
            }
            let mut all = vec![("webhook.enabled", "false")];
            all.extend_from_slice(pairs);
            SPEC.load_pairs::<FileConfig>(file.map(|_| path.as_path()), &[], &all)
                .and_then(|c| c.validate(&env(&[])))
                .map(|s| s.policy)
        };
        // Defaults: the service's policies; the mix observed, bounded.
        let p = load(&[], None).unwrap();
        assert_eq!((p.node, p.gpu.len()), (v1::NodePolicy::Unspecified, 0));
        assert_eq!(
            p.mix,
            MixSource::Observed {
                window: 1000,
                max_shapes: 32,
                coverage: 0.95,
                by_demand: true,
                refresh: Duration::from_secs(5),
            }
        );
        let p = load(
            &[
                ("policy.node_scheduler_policy", "fgd"),
                ("policy.gpu_scheduler_policy", "numa, fgd"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(p.node, v1::NodePolicy::Fgd);
        assert_eq!(p.gpu, vec![v1::GpuPolicy::Numa, v1::GpuPolicy::Fgd]);
        // Each bad value names its key.
        for (pairs, key) in [
            (
                &[("policy.node_scheduler_policy", "tight")][..],
                "policy.node_scheduler_policy",
            ),
            (
                &[("policy.gpu_scheduler_policy", "binpack,x")][..],
                "policy.gpu_scheduler_policy",
            ),
            (&[("fgd.mix", "guess")][..], "fgd.mix"),
            (&[("fgd.window", "0")][..], "fgd.window"),
            (&[("fgd.max_shapes", "65")][..], "fgd.max_shapes"),
            (&[("fgd.coverage", "1.5")][..], "fgd.coverage"),
            (&[("fgd.weight", "cores")][..], "fgd.weight"),
            (&[("fgd.refresh", "0s")][..], "fgd.refresh"),
            (&[("fgd.mix", "config")][..], "fgd.workload_mix"),
        ] {
            assert_eq!(load(pairs, None).unwrap_err().key, key, "{pairs:?}");
        }
        // A configured mix (a file), checked as the service checks one.
        let two = "[fgd]\nmix = \"config\"\n\
                   [[fgd.workload_mix]]\nprobability = 0.75\ngpu_count = 1\ngpucores_percent = 50\n\
                   [[fgd.workload_mix]]\nprobability = 0.25\ngpu_count = 2\ngpu_types = [\"A100\"]\n";
        let MixSource::Config(m) = load(&[], Some(two)).unwrap().mix else {
            panic!("a configured mix");
        };
        assert_eq!(m.shapes.len(), 2);
        assert_eq!(m.shapes[1].gpu_types, vec!["A100".to_owned()]);
        for (bad, key) in [
            (two.replace("0.25", "0.5"), "fgd.workload_mix"),
            (
                two.replace("0.75", "-0.25"),
                "fgd.workload_mix[0].probability",
            ),
            (
                two.replace("gpu_count = 2", "gpu_count = 0"),
                "fgd.workload_mix[1].gpu_count",
            ),
            (
                two.replace("= 50", "= 150"),
                "fgd.workload_mix[0].gpucores_percent",
            ),
            (
                two.replace("\"A100\"", "\" \""),
                "fgd.workload_mix[1].gpu_types[0]",
            ),
        ] {
            assert_eq!(load(&[], Some(&bad)).unwrap_err().key, key, "{bad}");
        }
    }
}
