//! Configuration: embedded defaults < file (`--config`, TOML or YAML) < environment
//! (`GPUSCHED_AGENT_<KEY>`, `__` between levels, e.g. `GPUSCHED_AGENT_SERVICE__ADDRESS`) < flags.
//! Checked at start-up; a bad value is one error line naming the key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The embedded defaults (what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// Prefix of the environment variables.
pub const ENV_PREFIX: &str = "GPUSCHED_AGENT";

/// A configuration error: the key (or source) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config {key}: {message}")]
pub struct ConfigError {
    /// Key, flag or file.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

fn err(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.into(),
        message: message.into(),
    }
}

/// The configuration file's shape.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Node name; empty = `$NODE_NAME`, else the host name.
    pub node_name: String,
    /// Longest time between two publications.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Time between two reads of the cards.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The gpusched service.
    pub service: ServiceConfig,
    /// NVML.
    pub nvml: NvmlConfig,
    /// Card health checks.
    pub card_health: CardHealthConfig,
    /// Kubernetes publishing.
    pub kubernetes: KubernetesConfig,
    /// File output.
    pub output: OutputConfig,
    /// Health endpoint.
    pub http: HttpConfig,
    /// Backoff.
    pub retry: RetryConfig,
    /// Logs.
    pub log: LogConfig,
}

/// `[service]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// `http://host:port`, `https://host:port` or `host:port`.
    pub address: String,
    /// Deadline per call.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// TLS files.
    pub tls: TlsConfig,
}

/// `[service.tls]`: empty strings are unset.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// CA PEM.
    pub ca: String,
    /// Client certificate PEM.
    pub cert: String,
    /// Client key PEM.
    pub key: String,
    /// Server name to verify.
    pub domain: String,
}

/// `[nvml]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NvmlConfig {
    /// Library path; empty = the standard names.
    pub library: String,
    /// Publish zero cards when NVML cannot be loaded (instead of exiting).
    pub publish_empty_when_missing: bool,
    /// sysfs root.
    pub sysfs_root: String,
}

/// `[card_health]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CardHealthConfig {
    /// XID codes that leave a card healthy.
    pub ignored_xids: Vec<u64>,
    /// Retired pages from which a card is unhealthy (0 = off).
    pub retired_pages_limit: u32,
}

/// `[kubernetes]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Publish to the Node.
    pub enabled: bool,
    /// Remove our annotations on clean shutdown.
    pub remove_on_shutdown: bool,
    /// Patch status capacity/allocatable.
    pub patch_capacity: bool,
    /// Extended resource name for `patch_capacity`.
    pub resource_name: String,
}

/// `[output]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// File path; empty = off.
    pub path: String,
    /// `json` | `hami` | `slurm-gres`.
    pub format: String,
}

/// `[http]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Listen address; empty = off.
    pub listen: String,
}

/// `[retry]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// First backoff.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
}

/// `[log]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` | `json`.
    pub format: String,
    /// tracing filter.
    pub level: String,
}

/// Values given as command-line flags (highest precedence).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// `--node-name`.
    pub node_name: Option<String>,
    /// `--interval`.
    pub interval: Option<String>,
    /// `--poll-interval`.
    pub poll_interval: Option<String>,
    /// `--service-address`.
    pub service_address: Option<String>,
    /// `--tls-ca`.
    pub tls_ca: Option<PathBuf>,
    /// `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// `--tls-domain`.
    pub tls_domain: Option<String>,
    /// `--nvml-library`.
    pub nvml_library: Option<PathBuf>,
    /// `--publish-empty-when-missing`.
    pub publish_empty_when_missing: bool,
    /// `--sysfs-root`.
    pub sysfs_root: Option<PathBuf>,
    /// `--no-kubernetes`.
    pub no_kubernetes: bool,
    /// `--remove-on-shutdown`.
    pub remove_on_shutdown: bool,
    /// `--patch-capacity`.
    pub patch_capacity: bool,
    /// `--output-path`.
    pub output_path: Option<PathBuf>,
    /// `--output-format`.
    pub output_format: Option<String>,
    /// `--health-listen`.
    pub health_listen: Option<String>,
    /// `--log-format`.
    pub log_format: Option<String>,
    /// `--log-level`.
    pub log_level: Option<String>,
}

/// Loads the layered configuration. `env` is the process environment (passed in for tests).
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
    let prefix = format!("{ENV_PREFIX}_");
    let env_map: config::Map<String, String> = env
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    builder = builder.add_source(
        config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("card_health.ignored_xids")
            .source(Some(env_map)),
    );
    type B = config::ConfigBuilder<config::builder::DefaultState>;
    let set = |b: B, key: &str, v: Option<String>| -> Result<B, ConfigError> {
        match v {
            Some(v) => b.set_override(key, v).map_err(|e| err(key, e.to_string())),
            None => Ok(b),
        }
    };
    let flag = |b: B, key: &str, on: bool| -> Result<B, ConfigError> {
        if on {
            b.set_override(key, true)
                .map_err(|e| err(key, e.to_string()))
        } else {
            Ok(b)
        }
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    builder = set(builder, "node_name", flags.node_name.clone())?;
    builder = set(builder, "interval", flags.interval.clone())?;
    builder = set(builder, "poll_interval", flags.poll_interval.clone())?;
    builder = set(builder, "service.address", flags.service_address.clone())?;
    builder = set(builder, "service.tls.ca", path(&flags.tls_ca))?;
    builder = set(builder, "service.tls.cert", path(&flags.tls_cert))?;
    builder = set(builder, "service.tls.key", path(&flags.tls_key))?;
    builder = set(builder, "service.tls.domain", flags.tls_domain.clone())?;
    builder = set(builder, "nvml.library", path(&flags.nvml_library))?;
    builder = flag(
        builder,
        "nvml.publish_empty_when_missing",
        flags.publish_empty_when_missing,
    )?;
    builder = set(builder, "nvml.sysfs_root", path(&flags.sysfs_root))?;
    if flags.no_kubernetes {
        builder = builder
            .set_override("kubernetes.enabled", false)
            .map_err(|e| err("kubernetes.enabled", e.to_string()))?;
    }
    builder = flag(
        builder,
        "kubernetes.remove_on_shutdown",
        flags.remove_on_shutdown,
    )?;
    builder = flag(builder, "kubernetes.patch_capacity", flags.patch_capacity)?;
    builder = set(builder, "output.path", path(&flags.output_path))?;
    builder = set(builder, "output.format", flags.output_format.clone())?;
    builder = set(builder, "http.listen", flags.health_listen.clone())?;
    builder = set(builder, "log.format", flags.log_format.clone())?;
    builder = set(builder, "log.level", flags.log_level.clone())?;
    let cfg = builder
        .build()
        .map_err(|e| err("configuration", e.to_string()))?;
    cfg.try_deserialize::<FileConfig>()
        .map_err(|e| err("configuration", e.to_string()))
}

/// How the inventory is written to a file or printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// The normalised inventory as JSON (proto3 JSON of the response, plus `nodeName`).
    Json,
    /// The HAMi node annotations, `key=value` per line.
    Hami,
    /// A Slurm `gres.conf` snippet.
    SlurmGres,
    /// The raw cards as a `NormalizeInventoryRequest` (proto3 JSON; no service needed).
    Raw,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(OutputFormat::Json),
            "hami" => Ok(OutputFormat::Hami),
            "slurm-gres" => Ok(OutputFormat::SlurmGres),
            "raw" => Ok(OutputFormat::Raw),
            other => Err(format!(
                "unknown format {other:?} (json | hami | slurm-gres | raw)"
            )),
        }
    }
}

/// TLS material read from the configured files.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// CA PEM path.
    pub ca: Option<PathBuf>,
    /// Client certificate and key paths.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// Server name.
    pub domain: Option<String>,
}

/// Checked settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Node name (resolved).
    pub node_name: String,
    /// Longest time between publications.
    pub interval: Duration,
    /// Time between reads.
    pub poll_interval: Duration,
    /// Service address.
    pub service_address: String,
    /// Call deadline.
    pub service_timeout: Duration,
    /// TLS, when on.
    pub tls: Option<TlsFiles>,
    /// NVML library (None = standard names).
    pub nvml_library: Option<PathBuf>,
    /// Publish zero cards without NVML.
    pub publish_empty_when_missing: bool,
    /// sysfs root.
    pub sysfs_root: PathBuf,
    /// Ignored XIDs.
    pub ignored_xids: Vec<u64>,
    /// Retired page limit (0 = off).
    pub retired_pages_limit: u32,
    /// Kubernetes publishing.
    pub kubernetes: Option<KubeSettings>,
    /// File output.
    pub output: Option<(PathBuf, OutputFormat)>,
    /// Health endpoint.
    pub http_listen: Option<SocketAddr>,
    /// First backoff.
    pub initial_backoff: Duration,
    /// Largest backoff.
    pub max_backoff: Duration,
    /// Log as JSON.
    pub log_json: bool,
    /// Log filter.
    pub log_level: String,
}

/// Kubernetes publishing settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeSettings {
    /// Remove our annotations on clean shutdown.
    pub remove_on_shutdown: bool,
    /// Patch status capacity/allocatable.
    pub patch_capacity: bool,
    /// Resource name.
    pub resource_name: String,
}

/// The host name, from the kernel (no libc call).
pub fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .find(|s| !s.is_empty())
}

fn opt(s: &str) -> Option<PathBuf> {
    (!s.trim().is_empty()).then(|| PathBuf::from(s.trim()))
}

impl FileConfig {
    /// The effective configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render: {e}\n"))
    }

    /// Checks values and resolves the node name (`env` gives `NODE_NAME`).
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let node_name = if !self.node_name.trim().is_empty() {
            self.node_name.trim().to_owned()
        } else if let Some(n) = env.get("NODE_NAME").filter(|n| !n.trim().is_empty()) {
            n.trim().to_owned()
        } else {
            host_name().ok_or_else(|| {
                err(
                    "node_name",
                    "empty, NODE_NAME is not set and the host name is unknown",
                )
            })?
        };
        if node_name.len() > 253
            || !node_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
        {
            return Err(err(
                "node_name",
                format!("{node_name:?} is not a valid node name"),
            ));
        }
        if self.interval < Duration::from_secs(1) {
            return Err(err("interval", "must be at least 1s"));
        }
        if self.poll_interval < Duration::from_millis(100) || self.poll_interval > self.interval {
            return Err(err("poll_interval", "must be between 100ms and interval"));
        }
        if self.service.address.trim().is_empty() {
            return Err(err("service.address", "must not be empty"));
        }
        if self.service.timeout.is_zero() {
            return Err(err("service.timeout", "must be above 0"));
        }
        let t = &self.service.tls;
        let identity = match (opt(&t.cert), opt(&t.key)) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(err("service.tls", "cert and key must be given together"));
            }
        };
        let tls = if opt(&t.ca).is_some()
            || identity.is_some()
            || !t.domain.trim().is_empty()
            || self.service.address.starts_with("https://")
        {
            Some(TlsFiles {
                ca: opt(&t.ca),
                identity,
                domain: (!t.domain.trim().is_empty()).then(|| t.domain.trim().to_owned()),
            })
        } else {
            None
        };
        if self.kubernetes.enabled && self.kubernetes.resource_name.trim().is_empty() {
            return Err(err("kubernetes.resource_name", "must not be empty"));
        }
        let output = match opt(&self.output.path) {
            Some(p) => Some((
                p,
                self.output
                    .format
                    .parse::<OutputFormat>()
                    .map_err(|e| err("output.format", e))?,
            )),
            None => None,
        };
        let http_listen = if self.http.listen.trim().is_empty() {
            None
        } else {
            Some(
                self.http
                    .listen
                    .trim()
                    .parse::<SocketAddr>()
                    .map_err(|e| err("http.listen", format!("{:?}: {e}", self.http.listen)))?,
            )
        };
        if self.retry.initial_backoff.is_zero()
            || self.retry.max_backoff < self.retry.initial_backoff
        {
            return Err(err(
                "retry",
                "initial_backoff must be above 0 and at most max_backoff",
            ));
        }
        let log_json = match self.log.format.as_str() {
            "text" => false,
            "json" => true,
            other => {
                return Err(err("log.format", format!("{other:?}: use text or json")));
            }
        };
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            return Err(err(
                "log.level",
                format!("{:?} is not a tracing filter", self.log.level),
            ));
        }
        Ok(Settings {
            node_name,
            interval: self.interval,
            poll_interval: self.poll_interval,
            service_address: self.service.address.trim().to_owned(),
            service_timeout: self.service.timeout,
            tls,
            nvml_library: opt(&self.nvml.library),
            publish_empty_when_missing: self.nvml.publish_empty_when_missing,
            sysfs_root: PathBuf::from(if self.nvml.sysfs_root.trim().is_empty() {
                "/sys"
            } else {
                self.nvml.sysfs_root.trim()
            }),
            ignored_xids: self.card_health.ignored_xids.clone(),
            retired_pages_limit: self.card_health.retired_pages_limit,
            kubernetes: self.kubernetes.enabled.then(|| KubeSettings {
                remove_on_shutdown: self.kubernetes.remove_on_shutdown,
                patch_capacity: self.kubernetes.patch_capacity,
                resource_name: self.kubernetes.resource_name.trim().to_owned(),
            }),
            output,
            http_listen,
            initial_backoff: self.retry.initial_backoff,
            max_backoff: self.retry.max_backoff,
            log_json,
            log_level: self.log.level.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn defaults_validate_with_node_name_from_env() {
        let cfg = load(None, &BTreeMap::new(), &Overrides::default()).unwrap();
        assert_eq!(cfg.interval, Duration::from_secs(30));
        assert_eq!(cfg.card_health.ignored_xids, vec![13, 31, 43, 45, 68, 109]);
        let s = cfg.validate(&env(&[("NODE_NAME", "gpu-1")])).unwrap();
        assert_eq!(s.node_name, "gpu-1");
        assert!(s.kubernetes.is_some());
        assert!(s.tls.is_none());
        assert_eq!(s.http_listen, Some("0.0.0.0:9465".parse().unwrap()));
    }

    #[test]
    fn layering_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.yaml");
        std::fs::write(
            &file,
            "interval: 20s\nservice:\n  address: http://file:1\nkubernetes:\n  patch_capacity: true\n",
        )
        .unwrap();
        let e = env(&[
            ("GPUSCHED_AGENT_SERVICE__ADDRESS", "http://env:2"),
            ("GPUSCHED_AGENT_NODE_NAME", "from-env"),
            ("GPUSCHED_AGENT_CARD_HEALTH__IGNORED_XIDS", "13,43"),
            ("GPUSCHED_AGENT_KUBERNETES__REMOVE_ON_SHUTDOWN", "true"),
            ("GPUSCHED_LISTEN", "ignored: the server's variable"),
        ]);
        let cfg = load(Some(&file), &e, &Overrides::default()).unwrap();
        assert_eq!(cfg.interval, Duration::from_secs(20));
        assert_eq!(cfg.service.address, "http://env:2");
        assert_eq!(cfg.node_name, "from-env");
        assert_eq!(cfg.card_health.ignored_xids, vec![13, 43]);
        assert!(cfg.kubernetes.remove_on_shutdown && cfg.kubernetes.patch_capacity);
        let flags = Overrides {
            service_address: Some("http://flag:3".into()),
            node_name: Some("from-flag".into()),
            interval: Some("45s".into()),
            no_kubernetes: true,
            output_path: Some("/tmp/x.json".into()),
            ..Overrides::default()
        };
        let s = load(Some(&file), &e, &flags)
            .unwrap()
            .validate(&BTreeMap::new())
            .unwrap();
        assert_eq!(s.service_address, "http://flag:3");
        assert_eq!(s.node_name, "from-flag");
        assert_eq!(s.interval, Duration::from_secs(45));
        assert!(s.kubernetes.is_none());
        assert_eq!(s.output, Some(("/tmp/x.json".into(), OutputFormat::Json)));
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases: Vec<(Overrides, &str)> = vec![
            (
                Overrides {
                    interval: Some("0s".into()),
                    ..Overrides::default()
                },
                "interval",
            ),
            (
                Overrides {
                    health_listen: Some("nonsense".into()),
                    ..Overrides::default()
                },
                "http.listen",
            ),
            (
                Overrides {
                    tls_cert: Some("c.pem".into()),
                    ..Overrides::default()
                },
                "service.tls",
            ),
            (
                Overrides {
                    log_format: Some("xml".into()),
                    ..Overrides::default()
                },
                "log.format",
            ),
            (
                Overrides {
                    node_name: Some("bad name!".into()),
                    ..Overrides::default()
                },
                "node_name",
            ),
        ];
        for (flags, key) in cases {
            let e = load(None, &BTreeMap::new(), &flags)
                .and_then(|c| c.validate(&env(&[("NODE_NAME", "n")])))
                .unwrap_err();
            assert_eq!(e.key, key, "{e}");
        }
        let e = load(
            None,
            &env(&[("GPUSCHED_AGENT_INTERVAL", "soon")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.message.contains("interval"), "{e}");
    }

    #[test]
    fn print_config_round_trips() {
        let cfg = load(None, &BTreeMap::new(), &Overrides::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("printed.toml");
        std::fs::write(&file, cfg.to_toml()).unwrap();
        assert_eq!(
            load(Some(&file), &BTreeMap::new(), &Overrides::default()).unwrap(),
            cfg
        );
    }

    #[test]
    fn https_address_turns_tls_on() {
        let flags = Overrides {
            service_address: Some("https://svc:443".into()),
            ..Overrides::default()
        };
        let s = load(None, &BTreeMap::new(), &flags)
            .unwrap()
            .validate(&env(&[("NODE_NAME", "n")]))
            .unwrap();
        assert_eq!(s.tls, Some(TlsFiles::default()));
    }
}
