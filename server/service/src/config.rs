//! Configuration: defaults < file (`--config`, TOML or YAML) < environment (`GPUSCHED_...`,
//! `__` between levels) < flags. Parsed into typed settings and validated at start-up; a bad
//! value is one error line naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpusched_engine::{
    AnnotationNames, Defaults, GpuPolicy, KubeNames, NodePolicy, NormalizationConfig,
    NormalizationOverride, ResourceNames,
};
use serde::{Deserialize, Serialize};

/// The embedded default configuration (also what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// Top-level sections; `GPUSCHED_<SECTION>...` variables outside them are not config.
const SECTIONS: [&str; 9] = [
    "listen",
    "metrics",
    "tls",
    "limits",
    "policy",
    "inventory",
    "names",
    "telemetry",
    "node_cache",
];

/// The configuration file's shape.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// gRPC listen address.
    pub listen: String,
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
    pub listen: String,
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
    pub max_message_bytes: usize,
    /// Most nodes in one request.
    pub max_nodes: usize,
    /// Most cards on one node.
    pub max_cards_per_node: usize,
    /// Most cards over all nodes of one request.
    pub max_cards: usize,
    /// Most workloads in one AllocateBatch.
    pub max_workloads: usize,
    /// Most containers in one workload.
    pub max_containers: usize,
    /// Server-side time limit per call (the caller's deadline applies when shorter).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Calls decided at the same time; others wait (up to their deadline).
    pub max_concurrent_requests: usize,
    /// Requests with at least this many cards run on the blocking pool, off the async workers.
    pub blocking_threshold_cards: usize,
    /// Graceful stop: how long in-flight calls and open streams may run before they are cut.
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
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

/// `[telemetry]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `text` | `json`.
    pub log_format: String,
    /// A `tracing` filter, e.g. `info` or `gpusched_service=debug`.
    pub log_level: String,
    /// OTLP/gRPC endpoint for traces, e.g. `http://127.0.0.1:4317`; empty = traces off
    /// (the standard `OTEL_EXPORTER_OTLP_ENDPOINT` also turns them on).
    pub otlp_endpoint: String,
    /// `service.name` of the exported spans (`OTEL_SERVICE_NAME` wins).
    pub service_name: String,
    /// Fraction of root traces sampled, 0..=1 (a caller's sampled flag is honoured).
    pub sample_ratio: f64,
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
}

impl NodeCacheConfig {
    fn validate(&self) -> Result<crate::node_cache::CacheLimits, ConfigError> {
        if self.max_bytes < 1 << 20 {
            return Err(err(
                "node_cache.max_bytes",
                "must be at least 1048576 (1 MiB)",
            ));
        }
        if self.max_entries < 16 {
            return Err(err("node_cache.max_entries", "must be at least 16"));
        }
        Ok(crate::node_cache::CacheLimits {
            enabled: self.enabled,
            max_bytes: self.max_bytes,
            max_entries: self.max_entries,
        })
    }
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
    pub tls: Option<TlsFiles>,
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
    pub node_cache: crate::node_cache::CacheLimits,
}

/// TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
    /// Client CA (mutual TLS).
    pub client_ca: Option<PathBuf>,
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
    /// Cards from which a request runs on the blocking pool.
    pub blocking_threshold_cards: usize,
    /// Graceful stop limit.
    pub drain_timeout: Duration,
}

/// Telemetry settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Telemetry {
    /// JSON logs.
    pub json_logs: bool,
    /// Log filter.
    pub log_level: String,
    /// OTLP endpoint, when traces are on.
    pub otlp_endpoint: Option<String>,
    /// Service name.
    pub service_name: String,
    /// Sampling ratio.
    pub sample_ratio: f64,
}

/// A configuration problem: the key and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("config error: {key}: {message}")]
pub struct ConfigError {
    /// The offending key (dotted path), or the source.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// Values given on the command line (highest precedence).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// `--no-metrics`.
    pub no_metrics: bool,
    /// `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `--tls-client-ca`.
    pub tls_client_ca: Option<PathBuf>,
    /// `--node-policy`.
    pub node_policy: Option<String>,
    /// `--gpu-policy`.
    pub gpu_policy: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
    /// `--log-level`.
    pub log_level: Option<String>,
    /// `--otlp-endpoint`.
    pub otlp_endpoint: Option<String>,
}

/// Loads defaults < file < `env` (GPUSCHED_ variables) < flags into the file shape.
pub fn load(
    file: Option<&Path>,
    env: &BTreeMap<String, String>,
    flags: &Overrides,
) -> Result<FileConfig, ConfigError> {
    let mut builder = config::Config::builder().add_source(config::File::from_str(
        DEFAULT_CONFIG,
        config::FileFormat::Toml,
    ));
    if let Some(path) = file {
        let format = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => config::FileFormat::Toml,
            Some("yaml" | "yml") => config::FileFormat::Yaml,
            _ => {
                return Err(err(
                    "--config",
                    format!("{}: use a .toml, .yaml or .yml file", path.display()),
                ));
            }
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("--config", format!("{}: {e}", path.display())))?;
        builder = builder.add_source(config::File::from_str(&text, format));
    }
    let env_map: config::Map<String, String> = env
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("GPUSCHED_")?;
            let first = rest.split("__").next()?.to_ascii_lowercase();
            SECTIONS
                .contains(&first.as_str())
                .then(|| (k.clone(), v.clone()))
        })
        .collect();
    builder = builder.add_source(
        config::Environment::with_prefix("GPUSCHED")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("inventory.overrides")
            .source(Some(env_map)),
    );
    let set =
        |b: config::ConfigBuilder<config::builder::DefaultState>, key: &str, v: &Option<String>| {
            match v {
                Some(v) => b
                    .set_override(key, v.clone())
                    .map_err(|e| err(key, e.to_string())),
                None => Ok(b),
            }
        };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    builder = set(builder, "listen", &flags.listen)?;
    builder = set(builder, "metrics.listen", &flags.metrics_listen)?;
    if flags.no_metrics {
        builder = builder
            .set_override("metrics.enabled", false)
            .map_err(|e| err("metrics.enabled", e.to_string()))?;
    }
    builder = set(builder, "tls.cert", &path(&flags.tls_cert))?;
    builder = set(builder, "tls.key", &path(&flags.tls_key))?;
    builder = set(builder, "tls.client_ca", &path(&flags.tls_client_ca))?;
    builder = set(builder, "policy.node_scheduler_policy", &flags.node_policy)?;
    builder = set(builder, "policy.gpu_scheduler_policy", &flags.gpu_policy)?;
    builder = set(builder, "telemetry.log_format", &flags.log_format)?;
    builder = set(builder, "telemetry.log_level", &flags.log_level)?;
    builder = set(builder, "telemetry.otlp_endpoint", &flags.otlp_endpoint)?;
    let cfg = builder.build().map_err(|e| err("config", e.to_string()))?;
    cfg.try_deserialize::<FileConfig>().map_err(|e| match &e {
        config::ConfigError::Type { key: Some(key), .. } => err(key, e.to_string()),
        config::ConfigError::At { key: Some(key), .. } => err(key, e.to_string()),
        _ => err("config", e.to_string()),
    })
}

fn addr(key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse().map_err(|_| {
        err(
            key,
            format!("{v:?} is not an address such as 127.0.0.1:50051"),
        )
    })
}

fn positive(key: &str, v: usize) -> Result<usize, ConfigError> {
    if v == 0 {
        Err(err(key, "must be at least 1"))
    } else {
        Ok(v)
    }
}

impl FileConfig {
    /// Validates every value into settings. `otel_env` carries the standard `OTEL_*` variables.
    pub fn validate(&self, otel_env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let listen = addr("listen", &self.listen)?;
        let metrics_listen = if self.metrics.enabled {
            Some(addr("metrics.listen", &self.metrics.listen)?)
        } else {
            None
        };
        let tls = match (&self.tls.cert, &self.tls.key) {
            (Some(cert), Some(key)) => {
                for (k, p) in [
                    ("tls.cert", Some(cert)),
                    ("tls.key", Some(key)),
                    ("tls.client_ca", self.tls.client_ca.as_ref()),
                ] {
                    if let Some(p) = p
                        && !p.is_file()
                    {
                        return Err(err(k, format!("{} is not a readable file", p.display())));
                    }
                }
                Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.tls.client_ca.clone(),
                })
            }
            (None, None) if self.tls.client_ca.is_some() => {
                return Err(err("tls.client_ca", "needs tls.cert and tls.key"));
            }
            (None, None) => None,
            (Some(_), None) => return Err(err("tls.key", "required when tls.cert is set")),
            (None, Some(_)) => return Err(err("tls.cert", "required when tls.key is set")),
        };
        let node_cache = self.node_cache.validate()?;
        let l = &self.limits;
        let limits = Limits {
            max_message_bytes: positive("limits.max_message_bytes", l.max_message_bytes)?,
            max_nodes: positive("limits.max_nodes", l.max_nodes)?,
            max_cards_per_node: positive("limits.max_cards_per_node", l.max_cards_per_node)?,
            max_cards: positive("limits.max_cards", l.max_cards)?,
            max_workloads: positive("limits.max_workloads", l.max_workloads)?,
            max_containers: positive("limits.max_containers", l.max_containers)?,
            request_timeout: if l.request_timeout.is_zero() {
                return Err(err("limits.request_timeout", "must be longer than 0s"));
            } else {
                l.request_timeout
            },
            max_concurrent_requests: positive(
                "limits.max_concurrent_requests",
                l.max_concurrent_requests,
            )?,
            blocking_threshold_cards: l.blocking_threshold_cards,
            drain_timeout: l.drain_timeout,
        };
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
        let n = &self.names;
        let a = &n.annotations;
        let names = KubeNames {
            resources: ResourceNames {
                count: n.resource_count.clone(),
                memory: n.resource_memory.clone(),
                memory_percentage: n.resource_memory_percentage.clone(),
                cores: n.resource_cores.clone(),
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
        };
        for (key, v) in [
            ("names.resource_count", &n.resource_count),
            ("names.resource_memory", &n.resource_memory),
            (
                "names.resource_memory_percentage",
                &n.resource_memory_percentage,
            ),
            ("names.resource_cores", &n.resource_cores),
        ] {
            if v.trim().is_empty() {
                return Err(err(key, "must not be empty"));
            }
        }
        let t = &self.telemetry;
        let json_logs = match t.log_format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(err(
                    "telemetry.log_format",
                    format!("{other:?}: accepted: text, json"),
                ));
            }
        };
        tracing_subscriber::EnvFilter::try_new(&t.log_level)
            .map_err(|e| err("telemetry.log_level", format!("{:?}: {e}", t.log_level)))?;
        let disabled = otel_env
            .get("OTEL_SDK_DISABLED")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let endpoint = [&t.otlp_endpoint]
            .into_iter()
            .cloned()
            .chain(otel_env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").cloned())
            .chain(otel_env.get("OTEL_EXPORTER_OTLP_ENDPOINT").cloned())
            .find(|e| !e.trim().is_empty());
        let otlp_endpoint = if disabled { None } else { endpoint };
        if let Some(e) = &otlp_endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(err(
                "telemetry.otlp_endpoint",
                format!("{e:?}: must start with http:// or https://"),
            ));
        }
        if !(0.0..=1.0).contains(&t.sample_ratio) {
            return Err(err(
                "telemetry.sample_ratio",
                format!("{} is outside 0..=1", t.sample_ratio),
            ));
        }
        let service_name = otel_env
            .get("OTEL_SERVICE_NAME")
            .cloned()
            .unwrap_or_else(|| t.service_name.clone());
        Ok(Settings {
            listen,
            metrics_listen,
            tls,
            limits,
            defaults,
            normalization,
            names,
            node_cache,
            telemetry: Telemetry {
                json_logs,
                log_level: t.log_level.clone(),
                otlp_endpoint,
                service_name,
                sample_ratio: t.sample_ratio,
            },
        })
    }

    /// The configuration as TOML (for `--print-config`).
    pub fn to_toml(&self) -> String {
        toml_string(self)
    }
}

fn toml_string(cfg: &FileConfig) -> String {
    // serde_json keeps the structure; render it as TOML by hand to avoid another dependency.
    let value = serde_json::to_value(cfg).unwrap_or(serde_json::Value::Null);
    let mut out = String::new();
    render_table(&mut out, "", &value);
    out
}

fn render_scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => format!("{s:?}"),
        serde_json::Value::Number(n) => {
            let s = n.to_string();
            if n.is_f64() && !s.contains('.') && !s.contains('e') {
                format!("{s}.0")
            } else {
                s
            }
        }
        serde_json::Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

fn render_table(out: &mut String, prefix: &str, v: &serde_json::Value) {
    let serde_json::Value::Object(map) = v else {
        return;
    };
    for (k, val) in map {
        if !matches!(
            val,
            serde_json::Value::Object(_) | serde_json::Value::Array(_)
        ) {
            out.push_str(&format!("{k} = {}\n", render_scalar(val)));
        }
    }
    for (k, val) in map {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match val {
            serde_json::Value::Object(_) => {
                out.push_str(&format!("\n[{path}]\n"));
                render_table(out, &path, val);
            }
            serde_json::Value::Array(items) => {
                for item in items {
                    out.push_str(&format!("\n[[{path}]]\n"));
                    render_table(out, &path, item);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn embedded_defaults_are_valid() {
        let cfg = load(None, &no_env(), &Overrides::default()).unwrap();
        let s = cfg.validate(&no_env()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:50051");
        assert_eq!(s.defaults, Defaults::default());
        assert!(s.telemetry.otlp_endpoint.is_none());
        // --print-config output loads back to the same configuration.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, cfg.to_toml()).unwrap();
        assert_eq!(
            load(Some(&path), &no_env(), &Overrides::default()).unwrap(),
            cfg
        );
    }

    #[test]
    fn layers_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "listen: 127.0.0.1:1\npolicy:\n  gpu_scheduler_policy: binpack\nlimits:\n  max_nodes: 7\n").unwrap();
        let env: BTreeMap<String, String> = [
            ("GPUSCHED_LISTEN", "127.0.0.1:2"),
            ("GPUSCHED_LIMITS__MAX_NODES", "8"),
            ("GPUSCHED_CACHE", "/not/config"),
            ("GPUSCHED_SERVER_BIN", "/not/config"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let flags = Overrides {
            listen: Some("127.0.0.1:3".into()),
            ..Overrides::default()
        };
        let cfg = load(Some(&path), &env, &flags).unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:3");
        assert_eq!(cfg.limits.max_nodes, 8);
        assert_eq!(cfg.policy.gpu_scheduler_policy, "binpack");
        let cfg = load(Some(&path), &env, &Overrides::default()).unwrap();
        assert_eq!(cfg.listen, "127.0.0.1:2");
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases: &[(&str, &str)] = &[
            ("policy.gpu_scheduler_policy", "pack"),
            ("policy.node_scheduler_policy", "Spread"),
            ("policy.default_cores", "101"),
            ("listen", "nowhere"),
            ("limits.max_nodes", "0"),
            ("telemetry.log_format", "xml"),
            ("inventory.split_count", "0"),
            ("telemetry.sample_ratio", "2"),
        ];
        for (key, value) in cases {
            let env: BTreeMap<String, String> = [(
                format!("GPUSCHED_{}", key.replace('.', "__").to_uppercase()),
                (*value).to_owned(),
            )]
            .into();
            let result =
                load(None, &env, &Overrides::default()).and_then(|c| c.validate(&no_env()));
            let e = result.expect_err(key);
            assert_eq!(e.key, *key, "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[limits]\nmax_nodez = 3\n").unwrap();
        let e = load(Some(&path), &no_env(), &Overrides::default()).unwrap_err();
        assert!(e.to_string().contains("max_nodez"), "{e}");
    }

    #[test]
    fn otel_variables_turn_traces_on() {
        let cfg = load(None, &no_env(), &Overrides::default()).unwrap();
        let otel: BTreeMap<String, String> = [(
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            "http://127.0.0.1:4317".to_owned(),
        )]
        .into();
        assert_eq!(
            cfg.validate(&otel)
                .unwrap()
                .telemetry
                .otlp_endpoint
                .as_deref(),
            Some("http://127.0.0.1:4317")
        );
        let mut off = otel.clone();
        off.insert("OTEL_SDK_DISABLED".into(), "true".into());
        assert!(
            cfg.validate(&off)
                .unwrap()
                .telemetry
                .otlp_endpoint
                .is_none()
        );
    }
}
