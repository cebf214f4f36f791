//! The layered loader on a small configuration: precedence, typed fields, one-line errors
//! naming the key, `--print-config` round trip.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use gpusched_runtime::flags::{negate, not_given};
use gpusched_runtime::{CommonArgs, ConfigError, LogFormat, Sources, Spec, TelemetryConfig};
use serde::{Deserialize, Serialize};

const DEFAULTS: &str = r#"
listen = "127.0.0.1:50051"

[limits]
max_nodes = 100
split = 10
timeout = "10s"

[metrics]
enabled = true

[files]
# cert = "/x"

[telemetry]
log_format = "text"
log_level = "info"
otlp_endpoint = ""
service_name = "test"
sample_ratio = 1.0
"#;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: SocketAddr,
    limits: Limits,
    metrics: Metrics,
    files: Files,
    telemetry: TelemetryConfig,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    max_nodes: NonZeroUsize,
    split: u32,
    #[serde(with = "humantime_serde")]
    timeout: Duration,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Metrics {
    enabled: bool,
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Files {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cert: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize)]
struct Flags {
    #[serde(flatten)]
    common: CommonArgs,
    #[serde(rename = "listen", skip_serializing_if = "Option::is_none")]
    listen: Option<String>,
    #[serde(
        rename = "metrics.enabled",
        serialize_with = "negate",
        skip_serializing_if = "not_given"
    )]
    no_metrics: bool,
    #[serde(rename = "files.cert", skip_serializing_if = "Option::is_none")]
    cert: Option<PathBuf>,
}

const SPEC: Spec = Spec {
    binary: "test",
    defaults: DEFAULTS,
    env_prefix: "GPUSCHED_TEST",
    legacy_env_prefix: Some("GPUSCHED"),
    list_keys: &[],
};

use gpusched_runtime::layers::vars as env;

fn load(
    file: Option<&std::path::Path>,
    e: &[(&str, &str)],
    flags: &Flags,
) -> Result<File, ConfigError> {
    SPEC.load(Sources { file, env: &env(e) }, flags)
}

fn error(e: &[(&str, &str)]) -> ConfigError {
    load(None, e, &Flags::default()).unwrap_err()
}

#[test]
fn layers_defaults_file_env_flags() {
    let d = load(None, &[], &Flags::default()).unwrap();
    assert_eq!(d.listen.to_string(), "127.0.0.1:50051");
    assert_eq!(d.telemetry.log_format, LogFormat::Text);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:1\nlimits:\n  split: 3\n  max_nodes: 7\n",
    )
    .unwrap();
    let e = [
        ("GPUSCHED_TEST_LISTEN", "127.0.0.1:2"),
        ("GPUSCHED_TEST_LIMITS__MAX_NODES", "8"),
        ("GPUSCHED_SERVER_BIN", "/not/config"),
        ("GPUSCHED_CACHE", "/not/config"),
        ("GPUSCHED_LIMITS__SPLIT", "4"),
    ];
    let flags = Flags {
        listen: Some("127.0.0.1:3".into()),
        no_metrics: true,
        cert: Some("/etc/c.pem".into()),
        common: CommonArgs {
            log_format: Some("json".into()),
            ..CommonArgs::default()
        },
    };
    let c = load(Some(&path), &e, &flags).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:3");
    assert_eq!(c.limits.max_nodes.get(), 8);
    // The legacy prefix is read, below the file? No: variables sit above the file.
    assert_eq!(c.limits.split, 4);
    assert!(!c.metrics.enabled);
    assert_eq!(c.files.cert, Some(PathBuf::from("/etc/c.pem")));
    assert_eq!(c.telemetry.log_format, LogFormat::Json);
    let c = load(Some(&path), &e, &Flags::default()).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:2");
    assert!(c.metrics.enabled);
    // The new prefix wins over the legacy one.
    let c = load(
        None,
        &[
            ("GPUSCHED_LIMITS__SPLIT", "4"),
            ("GPUSCHED_TEST_LIMITS__SPLIT", "5"),
        ],
        &Flags::default(),
    )
    .unwrap();
    assert_eq!(c.limits.split, 5);
}

#[test]
fn printed_config_loads_back() {
    let c = load(
        None,
        &[("GPUSCHED_TEST_FILES__CERT", "/a b.pem")],
        &Flags::default(),
    )
    .unwrap();
    let text = gpusched_runtime::to_toml(&c).unwrap();
    assert!(text.contains("timeout = \"10s\""), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(load(Some(&path), &[], &Flags::default()).unwrap(), c);
}

#[test]
fn negative_numbers_name_the_key_and_range() {
    let e = error(&[("GPUSCHED_TEST_LIMITS__MAX_NODES", "-1")]);
    assert_eq!(e.key, "limits.max_nodes");
    assert!(e.message.contains("-1 is negative"), "{e}");
    assert!(e.message.contains("from 1 to"), "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__SPLIT", "-3")]);
    assert_eq!(e.key, "limits.split");
    assert!(e.message.contains("from 0 to"), "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__MAX_NODES", "0")]);
    assert_eq!(e.key, "limits.max_nodes");
    assert!(e.message.contains("from 1 to"), "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__SPLIT", "5000000000")]);
    assert!(e.message.contains("from 0 to 4294967295"), "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__MAX_NODES", "lots")]);
    assert_eq!(e.key, "limits.max_nodes");
    assert!(e.message.contains("\"lots\""), "{e}");
    // From a file too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[limits]\nmax_nodes = -5\n").unwrap();
    let e = load(Some(&path), &[], &Flags::default()).unwrap_err();
    assert_eq!(e.key, "limits.max_nodes");
    assert!(!e.to_string().contains('\n'));
}

#[test]
fn typed_values_name_the_key() {
    let e = error(&[("GPUSCHED_TEST_LISTEN", "nowhere")]);
    assert_eq!(e.key, "listen");
    assert!(e.message.contains("nowhere"), "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__TIMEOUT", "soon")]);
    assert_eq!(e.key, "limits.timeout");
    let e = error(&[("GPUSCHED_TEST_TELEMETRY__LOG_FORMAT", "xml")]);
    assert_eq!(e.key, "telemetry.log_format");
    assert!(
        e.message.contains("text") && e.message.contains("json"),
        "{e}"
    );
    let e = error(&[("GPUSCHED_TEST_METRICS__ENABLED", "maybe")]);
    assert_eq!(e.key, "metrics.enabled");
}

#[test]
fn unknown_keys_are_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[limits]\nmax_nodez = 3\n").unwrap();
    let e = load(Some(&path), &[], &Flags::default()).unwrap_err();
    assert_eq!(e.key, "limits.max_nodez", "{e}");
    assert!(e.message.contains("unknown key"), "{e}");
    std::fs::write(&path, "listn = \"x\"\n").unwrap();
    let e = load(Some(&path), &[], &Flags::default()).unwrap_err();
    assert_eq!(e.key, "listn", "{e}");
    let e = error(&[("GPUSCHED_TEST_LIMITS__SPLT", "3")]);
    assert_eq!(e.key, "limits.splt", "{e}");
    let e = load(Some(&dir.path().join("c.ini")), &[], &Flags::default()).unwrap_err();
    assert_eq!(e.key, "--config");
    std::fs::write(&path, "[limits\n").unwrap();
    let e = load(Some(&path), &[], &Flags::default()).unwrap_err();
    assert_eq!(e.key, "--config");
    assert!(!e.to_string().contains('\n'), "{e}");
}

#[test]
fn unknown_variables_are_errors_naming_them() {
    // Typos under the binary's own prefix: a section, a missing second underscore, a key.
    for var in [
        "GPUSCHED_TEST_LIMTS__MAX_NODES",
        "GPUSCHED_TEST_LIMITS_MAX_NODES",
        "GPUSCHED_TEST_LISTN",
        "GPUSCHED_TEST_BIN",
    ] {
        let e = error(&[(var, "3")]);
        assert_eq!(e.key, var, "{e}");
        assert!(e.message.starts_with("unknown variable"), "{e}");
        assert!(e.message.contains("limits"), "names the accepted keys: {e}");
    }
    // Under the legacy prefix, a name with `__` is configuration and must name a key.
    let e = error(&[("GPUSCHED_LIMTS__MAX_NODES", "3")]);
    assert_eq!(e.key, "GPUSCHED_LIMTS__MAX_NODES", "{e}");
    // Not this binary's: other binaries' variables (typos included: theirs to refuse), the
    // scripts' own names, legacy names without `__` that are no key, anything else.
    load(
        None,
        &[
            ("GPUSCHED_SERVER_LIMTS__MAX_NODES", "3"),
            ("GPUSCHED_KUBE_E2E", "1"),
            ("GPUSCHED_AGENT_E2E", "1"),
            ("GPUSCHED_SERVER_BIN", "/x"),
            ("GPUSCHED_CACHE", "/x"),
            ("GPUSCHED_E2E", "1"),
            ("GPUSCHED_ADDRESS", "http://x"),
            ("GPUSCHEDULER_X__Y", "1"),
            ("PATH", "/bin"),
        ],
        &Flags::default(),
    )
    .unwrap();
}

#[test]
fn telemetry_section_validates() {
    let c = load(None, &[], &Flags::default()).unwrap();
    let t = c.telemetry.validate(&BTreeMap::new()).unwrap();
    assert!(t.otlp_endpoint.is_none());
    let t = c
        .telemetry
        .validate(&env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:4317",
        )]))
        .unwrap();
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4317"));
    let t = c
        .telemetry
        .validate(&env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_SDK_DISABLED", "true"),
        ]))
        .unwrap();
    assert!(t.otlp_endpoint.is_none());
    for (var, value, key) in [
        (
            "GPUSCHED_TEST_TELEMETRY__LOG_LEVEL",
            "verbose",
            "telemetry.log_level",
        ),
        (
            "GPUSCHED_TEST_TELEMETRY__SAMPLE_RATIO",
            "2",
            "telemetry.sample_ratio",
        ),
        (
            "GPUSCHED_TEST_TELEMETRY__OTLP_ENDPOINT",
            "collector:4317",
            "telemetry.otlp_endpoint",
        ),
    ] {
        let c = load(None, &[(var, value)], &Flags::default()).unwrap();
        let e = c.telemetry.validate(&BTreeMap::new()).unwrap_err();
        assert_eq!(e.key, key);
        assert!(e.message.contains(value), "{e}");
    }
}
