//! Configuration: defaults < file (`--config`, TOML or YAML) < environment (`GPUSCHED_KUBE_...`,
//! `__` between levels) < flags. Parsed into typed settings and validated at start-up; a bad
//! value is one error line naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The embedded default configuration (also what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// Top-level keys; `GPUSCHED_KUBE_<KEY>...` variables outside them are not config.
const SECTIONS: [&str; 9] = [
    "scheduler_name",
    "service",
    "kube",
    "extender",
    "webhook",
    "leader_election",
    "assume",
    "names",
    "telemetry",
];

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
    /// Resource and annotation names.
    pub names: NamesConfig,
    /// Logs.
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
    pub listen: String,
}

/// `[webhook]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Serve the admission webhook.
    pub enabled: bool,
    /// HTTPS listen address.
    pub listen: String,
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
}

/// `[telemetry]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `text` | `json`.
    pub log_format: String,
    /// A `tracing` filter.
    pub log_level: String,
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
    /// CA (PEM file).
    pub tls_ca: Option<PathBuf>,
    /// Client identity (PEM files).
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    /// Server name.
    pub tls_domain: Option<String>,
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
    /// Assume cache TTL.
    pub assume_ttl: Duration,
    /// Reservations at prioritize.
    pub reserve: bool,
    /// Reservation TTL.
    pub reservation_ttl: Duration,
    /// JSON logs.
    pub json_logs: bool,
    /// Log filter.
    pub log_level: String,
}

/// A configuration problem: the key and what is wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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
    /// `--service-addr`.
    pub service_addr: Option<String>,
    /// `--scheduler-name`.
    pub scheduler_name: Option<String>,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `--extender-listen`.
    pub extender_listen: Option<String>,
    /// `--webhook-listen`.
    pub webhook_listen: Option<String>,
    /// `--webhook-cert`.
    pub webhook_cert: Option<PathBuf>,
    /// `--webhook-key`.
    pub webhook_key: Option<PathBuf>,
    /// `--no-webhook`.
    pub no_webhook: bool,
    /// `--no-mutate`.
    pub no_mutate: bool,
    /// `--no-leader-elect`.
    pub no_leader_elect: bool,
    /// `--lease-name`.
    pub lease_name: Option<String>,
    /// `--lease-namespace`.
    pub lease_namespace: Option<String>,
    /// `--identity`.
    pub identity: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
    /// `--log-level`.
    pub log_level: Option<String>,
}

/// Loads defaults < file < `env` (`GPUSCHED_KUBE_` variables) < flags into the file shape.
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
            let rest = k.strip_prefix("GPUSCHED_KUBE_")?.to_ascii_lowercase();
            let first = rest.split("__").next()?.to_owned();
            SECTIONS
                .contains(&first.as_str())
                .then(|| (k.clone(), v.clone()))
        })
        .collect();
    builder = builder.add_source(
        config::Environment::with_prefix("GPUSCHED_KUBE")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
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
    let flag = |b: config::ConfigBuilder<config::builder::DefaultState>, key: &str, on: bool| {
        if on {
            b.set_override(key, false)
                .map_err(|e| err(key, e.to_string()))
        } else {
            Ok(b)
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    builder = set(builder, "service.address", &flags.service_addr)?;
    builder = set(builder, "scheduler_name", &flags.scheduler_name)?;
    builder = set(builder, "kube.kubeconfig", &path(&flags.kubeconfig))?;
    builder = set(builder, "extender.listen", &flags.extender_listen)?;
    builder = set(builder, "webhook.listen", &flags.webhook_listen)?;
    builder = set(builder, "webhook.cert", &path(&flags.webhook_cert))?;
    builder = set(builder, "webhook.key", &path(&flags.webhook_key))?;
    builder = flag(builder, "webhook.enabled", flags.no_webhook)?;
    builder = flag(builder, "webhook.mutate", flags.no_mutate)?;
    builder = flag(builder, "leader_election.enabled", flags.no_leader_elect)?;
    builder = set(builder, "leader_election.lease_name", &flags.lease_name)?;
    builder = set(
        builder,
        "leader_election.lease_namespace",
        &flags.lease_namespace,
    )?;
    builder = set(builder, "leader_election.identity", &flags.identity)?;
    builder = set(builder, "telemetry.log_format", &flags.log_format)?;
    builder = set(builder, "telemetry.log_level", &flags.log_level)?;
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
            format!("{v:?} is not an address such as 127.0.0.1:8888"),
        )
    })
}

fn non_empty(key: &str, v: &str) -> Result<String, ConfigError> {
    let t = v.trim();
    if t.is_empty() {
        Err(err(key, "must not be empty"))
    } else {
        Ok(t.to_owned())
    }
}

fn readable(key: &str, p: &Path) -> Result<PathBuf, ConfigError> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(err(key, format!("{} is not a readable file", p.display())))
    }
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
    /// TOML text of this configuration.
    pub fn to_toml(&self) -> String {
        toml_text(self)
    }

    /// Validates every value into settings; `env` supplies POD_NAMESPACE / POD_NAME / HOSTNAME.
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let n = &self.names;
        let a = &n.annotations;
        let resources = ResourceNames {
            count: non_empty("names.resource_count", &n.resource_count)?,
            memory: non_empty("names.resource_memory", &n.resource_memory)?,
            memory_percentage: non_empty(
                "names.resource_memory_percentage",
                &n.resource_memory_percentage,
            )?,
            cores: non_empty("names.resource_cores", &n.resource_cores)?,
        };
        let annotations = AnnotationsConfig {
            node_register: non_empty("names.annotations.node_register", &a.node_register)?,
            node_score: non_empty("names.annotations.node_score", &a.node_score)?,
            device_cordon: non_empty("names.annotations.device_cordon", &a.device_cordon)?,
            devices_to_allocate: non_empty(
                "names.annotations.devices_to_allocate",
                &a.devices_to_allocate,
            )?,
            devices_allocated: non_empty(
                "names.annotations.devices_allocated",
                &a.devices_allocated,
            )?,
            vgpu_node: non_empty("names.annotations.vgpu_node", &a.vgpu_node)?,
            vgpu_time: non_empty("names.annotations.vgpu_time", &a.vgpu_time)?,
            bind_phase: non_empty("names.annotations.bind_phase", &a.bind_phase)?,
            bind_time: non_empty("names.annotations.bind_time", &a.bind_time)?,
        };
        let names = Names {
            scheduler_name: non_empty("scheduler_name", &self.scheduler_name)?,
            resources,
            annotations,
        };
        let s = &self.service;
        let address = non_empty("service.address", &s.address)?;
        if s.timeout.is_zero() {
            return Err(err("service.timeout", "must be longer than 0s"));
        }
        let tls_ca = s
            .tls_ca
            .as_deref()
            .map(|p| readable("service.tls_ca", p))
            .transpose()?;
        let tls_identity = match (&s.tls_cert, &s.tls_key) {
            (Some(c), Some(k)) => Some((
                readable("service.tls_cert", c)?,
                readable("service.tls_key", k)?,
            )),
            (None, None) => None,
            (Some(_), None) => {
                return Err(err(
                    "service.tls_key",
                    "required when service.tls_cert is set",
                ));
            }
            (None, Some(_)) => {
                return Err(err(
                    "service.tls_cert",
                    "required when service.tls_key is set",
                ));
            }
        };
        let service = ServiceSettings {
            address,
            timeout: s.timeout,
            tls_ca,
            tls_identity,
            tls_domain: s.tls_domain.clone().filter(|d| !d.trim().is_empty()),
        };
        let extender_listen = addr("extender.listen", &self.extender.listen)?;
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
                listen: addr("webhook.listen", &w.listen)?,
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
            if l.retry_period.is_zero() {
                return Err(err(
                    "leader_election.retry_period",
                    "must be longer than 0s",
                ));
            }
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
                namespace: if l.lease_namespace.trim().is_empty() {
                    auto_namespace(env)
                } else {
                    l.lease_namespace.trim().to_owned()
                },
                identity: if l.identity.trim().is_empty() {
                    auto_identity(env)
                } else {
                    l.identity.trim().to_owned()
                },
                lease_duration: l.lease_duration,
                renew_deadline: l.renew_deadline,
                retry_period: l.retry_period,
            })
        } else {
            None
        };
        if self.assume.ttl.is_zero() {
            return Err(err("assume.ttl", "must be longer than 0s"));
        }
        if self.assume.reservation_ttl.is_zero() {
            return Err(err("assume.reservation_ttl", "must be longer than 0s"));
        }
        let json_logs = match self.telemetry.log_format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(err(
                    "telemetry.log_format",
                    format!("{other:?}: use text or json"),
                ));
            }
        };
        Ok(Settings {
            names,
            service,
            kubeconfig: self.kube.kubeconfig.clone(),
            extender_listen,
            webhook,
            leader,
            assume_ttl: self.assume.ttl,
            reserve: self.assume.reserve,
            reservation_ttl: self.assume.reservation_ttl,
            json_logs,
            log_level: self.telemetry.log_level.clone(),
        })
    }
}

/// Renders the configuration as TOML-like text (the `config` crate reads it back).
fn toml_text(c: &FileConfig) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
    let d = |v: &Duration| q(&humantime_serde::re::humantime::format_duration(*v).to_string());
    let opt = |out: &mut String, k: &str, v: &Option<PathBuf>| {
        if let Some(p) = v {
            out.push_str(&format!("{k} = {}\n", q(&p.display().to_string())));
        }
    };
    let mut out = String::new();
    out.push_str(&format!("scheduler_name = {}\n", q(&c.scheduler_name)));
    out.push_str("\n[service]\n");
    out.push_str(&format!("address = {}\n", q(&c.service.address)));
    out.push_str(&format!("timeout = {}\n", d(&c.service.timeout)));
    opt(&mut out, "tls_ca", &c.service.tls_ca);
    opt(&mut out, "tls_cert", &c.service.tls_cert);
    opt(&mut out, "tls_key", &c.service.tls_key);
    if let Some(dn) = &c.service.tls_domain {
        out.push_str(&format!("tls_domain = {}\n", q(dn)));
    }
    out.push_str("\n[kube]\n");
    opt(&mut out, "kubeconfig", &c.kube.kubeconfig);
    out.push_str("\n[extender]\n");
    out.push_str(&format!("listen = {}\n", q(&c.extender.listen)));
    out.push_str("\n[webhook]\n");
    out.push_str(&format!("enabled = {}\n", c.webhook.enabled));
    out.push_str(&format!("listen = {}\n", q(&c.webhook.listen)));
    opt(&mut out, "cert", &c.webhook.cert);
    opt(&mut out, "key", &c.webhook.key);
    out.push_str(&format!("mutate = {}\n", c.webhook.mutate));
    out.push_str(&format!("ignore_label = {}\n", q(&c.webhook.ignore_label)));
    let l = &c.leader_election;
    out.push_str("\n[leader_election]\n");
    out.push_str(&format!("enabled = {}\n", l.enabled));
    out.push_str(&format!("lease_name = {}\n", q(&l.lease_name)));
    out.push_str(&format!("lease_namespace = {}\n", q(&l.lease_namespace)));
    out.push_str(&format!("identity = {}\n", q(&l.identity)));
    out.push_str(&format!("lease_duration = {}\n", d(&l.lease_duration)));
    out.push_str(&format!("renew_deadline = {}\n", d(&l.renew_deadline)));
    out.push_str(&format!("retry_period = {}\n", d(&l.retry_period)));
    out.push_str("\n[assume]\n");
    out.push_str(&format!("ttl = {}\n", d(&c.assume.ttl)));
    out.push_str(&format!("reserve = {}\n", c.assume.reserve));
    out.push_str(&format!(
        "reservation_ttl = {}\n",
        d(&c.assume.reservation_ttl)
    ));
    let n = &c.names;
    out.push_str("\n[names]\n");
    out.push_str(&format!("resource_count = {}\n", q(&n.resource_count)));
    out.push_str(&format!("resource_memory = {}\n", q(&n.resource_memory)));
    out.push_str(&format!(
        "resource_memory_percentage = {}\n",
        q(&n.resource_memory_percentage)
    ));
    out.push_str(&format!("resource_cores = {}\n", q(&n.resource_cores)));
    let a = &n.annotations;
    out.push_str("\n[names.annotations]\n");
    for (k, v) in [
        ("node_register", &a.node_register),
        ("node_score", &a.node_score),
        ("device_cordon", &a.device_cordon),
        ("devices_to_allocate", &a.devices_to_allocate),
        ("devices_allocated", &a.devices_allocated),
        ("vgpu_node", &a.vgpu_node),
        ("vgpu_time", &a.vgpu_time),
        ("bind_phase", &a.bind_phase),
        ("bind_time", &a.bind_time),
    ] {
        out.push_str(&format!("{k} = {}\n", q(v)));
    }
    out.push_str("\n[telemetry]\n");
    out.push_str(&format!("log_format = {}\n", q(&c.telemetry.log_format)));
    out.push_str(&format!("log_level = {}\n", q(&c.telemetry.log_level)));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_load_and_validate_without_webhook() {
        let c = load(None, &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(c.scheduler_name, "gpusched-scheduler");
        // The webhook is on by default and needs a certificate.
        let e = c.validate(&env(&[])).unwrap_err();
        assert_eq!(e.key, "webhook.cert");
        let flags = Overrides {
            no_webhook: true,
            ..Overrides::default()
        };
        let s = load(None, &env(&[]), &flags)
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
    }

    #[test]
    fn layering_file_env_flags() {
        let dir = std::env::temp_dir().join(format!("gpusched-kube-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(
            &file,
            "scheduler_name: from-file\nservice:\n  address: http://file:1\nwebhook:\n  enabled: false\n",
        )
        .unwrap();
        let e = env(&[
            ("GPUSCHED_KUBE_SERVICE__ADDRESS", "http://env:2"),
            ("GPUSCHED_KUBE_LEADER_ELECTION__LEASE_DURATION", "20s"),
            ("GPUSCHED_SERVER_UNRELATED", "x"),
        ]);
        let flags = Overrides {
            scheduler_name: Some("from-flag".into()),
            ..Overrides::default()
        };
        let c = load(Some(&file), &e, &flags).unwrap();
        assert_eq!(c.scheduler_name, "from-flag");
        assert_eq!(c.service.address, "http://env:2");
        assert_eq!(c.leader_election.lease_duration, Duration::from_secs(20));
        assert!(!c.webhook.enabled);
        // The printed config reads back to the same values.
        let printed = dir.join("p.toml");
        std::fs::write(&printed, c.to_toml()).unwrap();
        let again = load(Some(&printed), &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(again, c);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn bad_values_name_their_key() {
        let flags = Overrides {
            no_webhook: true,
            ..Overrides::default()
        };
        let check = |pairs: &[(&str, &str)], key: &str| {
            let c = load(None, &env(pairs), &flags).unwrap();
            let e = c.validate(&env(&[])).unwrap_err();
            assert_eq!(e.key, key, "{pairs:?}: {e}");
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
        check(&[("GPUSCHED_KUBE_SCHEDULER_NAME", " ")], "scheduler_name");
        check(
            &[("GPUSCHED_KUBE_SERVICE__TLS_CERT", "/nonexistent")],
            "service.tls_key",
        );
        let e = load(None, &env(&[("GPUSCHED_KUBE_ASSUME__TTL", "soon")]), &flags).unwrap_err();
        assert!(e.key.contains("assume") || e.key == "config", "{e}");
    }
}
