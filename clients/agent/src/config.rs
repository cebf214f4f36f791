//! The agent's configuration sections and their validation. Loading (defaults < `--config`
//! file < `GPUSCHED_AGENT_SECTION__KEY` variables < flags), `--print-config` and the one-line
//! errors are `gpusched-runtime`'s; a bad value names its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpusched_runtime::checks::{non_empty, nonzero_duration, optional};
use gpusched_runtime::tls::{ClientTlsFiles, pair};
use gpusched_runtime::{ConfigError, Spec, Telemetry, TelemetryConfig};
use serde::{Deserialize, Serialize};

/// The embedded defaults (what `--print-config` starts from).
pub const DEFAULT_CONFIG: &str = include_str!("default-config.toml");

/// How the configuration is layered: variables `GPUSCHED_AGENT_SECTION__KEY`.
pub const SPEC: Spec = Spec {
    binary: "gpusched-agent",
    defaults: DEFAULT_CONFIG,
    env_prefix: "GPUSCHED_AGENT",
    legacy_env_prefix: None,
    list_keys: &["card_health.ignored_xids", "mig.allowed_profiles"],
};

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
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
    /// MIG.
    pub mig: MigConfig,
    /// Kubernetes publishing.
    pub kubernetes: KubernetesConfig,
    /// File output.
    pub output: OutputConfig,
    /// Health endpoint.
    pub http: HttpConfig,
    /// Backoff.
    pub retry: RetryConfig,
    /// Logs and traces.
    pub telemetry: TelemetryConfig,
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

/// `[mig]`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MigConfig {
    /// Profile names the node offers (`1g.10gb`, ...); empty = every profile NVML reports.
    pub allowed_profiles: Vec<String>,
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
    /// `json` | `hami` | `slurm-gres` | `raw` | `facts`.
    pub format: OutputFormat,
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
    /// What the agent read, MIG layouts included (JSON `nodeName` and `devices`; no service
    /// needed): the read-only discovery report.
    Facts,
}

impl std::str::FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(OutputFormat::Json),
            "hami" => Ok(OutputFormat::Hami),
            "slurm-gres" => Ok(OutputFormat::SlurmGres),
            "raw" => Ok(OutputFormat::Raw),
            "facts" => Ok(OutputFormat::Facts),
            other => Err(format!(
                "unknown format {other:?} (json | hami | slurm-gres | raw | facts)"
            )),
        }
    }
}

impl OutputFormat {
    /// The name in the configuration and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Json => "json",
            OutputFormat::Hami => "hami",
            OutputFormat::SlurmGres => "slurm-gres",
            OutputFormat::Raw => "raw",
            OutputFormat::Facts => "facts",
        }
    }
}

impl Serialize for OutputFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for OutputFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
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
    /// TLS, when on (a CA, an identity, a domain or an https:// address).
    pub tls: Option<ClientTlsFiles>,
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
    /// MIG profiles offered (empty = all).
    pub mig_allowed_profiles: Vec<String>,
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
    /// Logs and traces.
    pub telemetry: Telemetry,
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

/// MIG profile names: trimmed, each `<N>g.<...>` (HAMi's allowlist rule).
fn mig_profiles(names: &[String]) -> Result<Vec<String>, ConfigError> {
    names
        .iter()
        .map(|n| {
            let n = n.trim();
            let ok = n.split_once('.').is_some_and(|(slices, rest)| {
                slices.len() >= 2
                    && slices.ends_with('g')
                    && slices[..slices.len() - 1]
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                    && !rest.is_empty()
            });
            if ok {
                Ok(n.to_owned())
            } else {
                Err(err(
                    "mig.allowed_profiles",
                    format!("{n:?} is not a MIG profile name such as 1g.10gb"),
                ))
            }
        })
        .collect()
}

fn path(s: &str) -> Option<PathBuf> {
    optional(Some(s)).map(PathBuf::from)
}

/// The host name, from the kernel (no libc call).
pub fn host_name() -> Option<String> {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find_map(|s| optional(Some(&s)))
}

impl FileConfig {
    /// Checks values and resolves the node name (`env` gives `NODE_NAME` and the standard
    /// `OTEL_*` variables).
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let node_name = optional(Some(&self.node_name))
            .or_else(|| optional(env.get("NODE_NAME").map(String::as_str)))
            .or_else(host_name)
            .ok_or_else(|| {
                err(
                    "node_name",
                    "empty, NODE_NAME is not set and the host name is unknown",
                )
            })?;
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
        let service_address = non_empty("service.address", &self.service.address)?;
        let t = &self.service.tls;
        let identity = pair(
            ("service.tls.cert", path(&t.cert)),
            ("service.tls.key", path(&t.key)),
        )?;
        let domain = optional(Some(&t.domain));
        let tls = (path(&t.ca).is_some()
            || identity.is_some()
            || domain.is_some()
            || service_address.starts_with("https://"))
        .then(|| ClientTlsFiles {
            ca: path(&t.ca),
            identity,
            domain,
        });
        let kubernetes = if self.kubernetes.enabled {
            Some(KubeSettings {
                remove_on_shutdown: self.kubernetes.remove_on_shutdown,
                patch_capacity: self.kubernetes.patch_capacity,
                resource_name: non_empty(
                    "kubernetes.resource_name",
                    &self.kubernetes.resource_name,
                )?,
            })
        } else {
            None
        };
        let http_listen = optional(Some(&self.http.listen))
            .map(|l| {
                l.parse::<SocketAddr>()
                    .map_err(|e| err("http.listen", format!("{l:?}: {e}")))
            })
            .transpose()?;
        let initial_backoff =
            nonzero_duration("retry.initial_backoff", self.retry.initial_backoff)?;
        if self.retry.max_backoff < initial_backoff {
            return Err(err(
                "retry.max_backoff",
                "must be at least retry.initial_backoff",
            ));
        }
        Ok(Settings {
            node_name,
            interval: self.interval,
            poll_interval: self.poll_interval,
            service_address,
            service_timeout: nonzero_duration("service.timeout", self.service.timeout)?,
            tls,
            nvml_library: path(&self.nvml.library),
            publish_empty_when_missing: self.nvml.publish_empty_when_missing,
            sysfs_root: path(&self.nvml.sysfs_root).unwrap_or_else(|| PathBuf::from("/sys")),
            ignored_xids: self.card_health.ignored_xids.clone(),
            retired_pages_limit: self.card_health.retired_pages_limit,
            mig_allowed_profiles: mig_profiles(&self.mig.allowed_profiles)?,
            kubernetes,
            output: path(&self.output.path).map(|p| (p, self.output.format)),
            http_listen,
            initial_backoff,
            max_backoff: self.retry.max_backoff,
            telemetry: self.telemetry.validate(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use gpusched_runtime::layers::vars as env;

    #[test]
    fn defaults_validate_with_node_name_from_env() {
        let cfg = SPEC.load_pairs::<FileConfig>(None, &[], &[]).unwrap();
        assert_eq!(cfg.interval, Duration::from_secs(30));
        assert_eq!(cfg.card_health.ignored_xids, vec![13, 31, 43, 45, 68, 109]);
        let s = cfg.validate(&env(&[("NODE_NAME", "gpu-1")])).unwrap();
        assert_eq!(s.node_name, "gpu-1");
        assert!(s.kubernetes.is_some());
        assert!(s.tls.is_none());
        assert_eq!(s.http_listen, Some("0.0.0.0:9465".parse().unwrap()));
        assert_eq!(s.telemetry.service_name, "gpusched-agent");
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
        let vars = [
            ("GPUSCHED_AGENT_SERVICE__ADDRESS", "http://env:2"),
            ("GPUSCHED_AGENT_NODE_NAME", "from-env"),
            ("GPUSCHED_AGENT_CARD_HEALTH__IGNORED_XIDS", "13,43"),
            ("GPUSCHED_AGENT_KUBERNETES__REMOVE_ON_SHUTDOWN", "true"),
            ("GPUSCHED_AGENT_E2E", "not config"),
            ("GPUSCHED_LISTEN", "ignored: the server's variable"),
        ];
        let cfg = SPEC
            .load_pairs::<FileConfig>(Some(&file), &vars, &[])
            .unwrap();
        assert_eq!(cfg.interval, Duration::from_secs(20));
        assert_eq!(cfg.service.address, "http://env:2");
        assert_eq!(cfg.node_name, "from-env");
        assert_eq!(cfg.card_health.ignored_xids, vec![13, 43]);
        assert!(cfg.kubernetes.remove_on_shutdown && cfg.kubernetes.patch_capacity);
        let flags = [
            ("service.address", "http://flag:3"),
            ("node_name", "from-flag"),
            ("interval", "45s"),
            ("kubernetes.enabled", "false"),
            ("output.path", "/tmp/x.json"),
        ];
        let s = SPEC
            .load_pairs::<FileConfig>(Some(&file), &vars, &flags)
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
        let cases: &[(&str, &str, &str)] = &[
            ("interval", "0s", "interval"),
            ("http.listen", "nonsense", "http.listen"),
            ("service.tls.cert", "c.pem", "service.tls.key"),
            ("telemetry.log_format", "xml", "telemetry.log_format"),
            ("telemetry.log_level", "chatty", "telemetry.log_level"),
            ("node_name", "bad name!", "node_name"),
            ("output.format", "yaml", "output.format"),
            ("retired_pages_limit", "1", "retired_pages_limit"),
            (
                "card_health.retired_pages_limit",
                "-1",
                "card_health.retired_pages_limit",
            ),
        ];
        for (key, value, expected) in cases {
            let e = SPEC
                .load_pairs::<FileConfig>(None, &[], &[(key, value)])
                .and_then(|c| c.validate(&env(&[("NODE_NAME", "n")])))
                .unwrap_err();
            assert_eq!(e.key, *expected, "{e}");
        }
        let e = SPEC
            .load_pairs::<FileConfig>(None, &[("GPUSCHED_AGENT_INTERVAL", "soon")], &[])
            .unwrap_err();
        assert_eq!(e.key, "interval", "{e}");
    }

    #[test]
    fn print_config_round_trips() {
        let cfg = SPEC.load_pairs::<FileConfig>(None, &[], &[]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("printed.toml");
        std::fs::write(&file, gpusched_runtime::to_toml(&cfg).unwrap()).unwrap();
        assert_eq!(
            SPEC.load_pairs::<FileConfig>(Some(&file), &[], &[])
                .unwrap(),
            cfg
        );
    }

    #[test]
    fn https_address_turns_tls_on() {
        let s = SPEC
            .load_pairs::<FileConfig>(None, &[], &[("service.address", "https://svc:443")])
            .unwrap()
            .validate(&env(&[("NODE_NAME", "n")]))
            .unwrap();
        assert_eq!(s.tls, Some(ClientTlsFiles::default()));
    }
}
