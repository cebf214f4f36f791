//! The `[telemetry]` section every binary shares (logs and traces), and its validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable text.
    Text,
    /// One JSON object per line.
    Json,
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(serde::de::Error::custom(format!(
                "unknown log format {other:?}: expected text or json"
            ))),
        }
    }
}

/// `[telemetry]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `text` | `json` (stderr).
    pub log_format: LogFormat,
    /// A level (`trace` | `debug` | `info` | `warn` | `error` | `off`) and/or `target=level`
    /// pairs, comma-separated.
    pub log_level: String,
    /// OTLP/gRPC endpoint for traces, e.g. `http://127.0.0.1:4317`; empty = traces off (the
    /// standard `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` also turns them on).
    pub otlp_endpoint: String,
    /// `service.name` of the exported spans (`OTEL_SERVICE_NAME` wins).
    pub service_name: String,
    /// Fraction of root traces sampled, 0..=1 (a caller's sampled flag is honoured).
    pub sample_ratio: f64,
}

/// Checked telemetry settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Telemetry {
    /// Log format.
    pub log_format: LogFormat,
    /// Log filter (checked).
    pub log_level: String,
    /// OTLP endpoint, when traces are on.
    pub otlp_endpoint: Option<String>,
    /// Service name.
    pub service_name: String,
    /// Sampling ratio.
    pub sample_ratio: f64,
}

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

fn level_ok(level: &str) -> bool {
    LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level.trim()))
}

/// Checks a log filter: every bare word is a level and every `target=level` has a known level
/// (`tracing` would take an unknown word for a target and log nothing of it).
pub fn check_log_level(filter: &str) -> Result<(), String> {
    let accepted = "expected trace, debug, info, warn, error, off or target=level pairs";
    if filter.trim().is_empty() {
        return Err(format!("empty: {accepted}"));
    }
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None if directive.contains("::") || directive.contains('[') => continue,
            None => directive,
        };
        if !level_ok(level) {
            return Err(format!("unknown log level {level:?}: {accepted}"));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| format!("{filter:?}: {e}"))?;
    Ok(())
}

impl TelemetryConfig {
    /// Checks the section (errors name `telemetry.<key>`). `env` supplies the standard
    /// `OTEL_SDK_DISABLED`, `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` and `OTEL_SERVICE_NAME`.
    pub fn validate(&self, env: &BTreeMap<String, String>) -> Result<Telemetry, ConfigError> {
        let err = |key: &str, m: String| ConfigError::new(format!("telemetry.{key}"), m);
        check_log_level(&self.log_level).map_err(|m| err("log_level", m))?;
        let disabled = env
            .get("OTEL_SDK_DISABLED")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let endpoint = [
            Some(&self.otlp_endpoint),
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ]
        .into_iter()
        .flatten()
        .map(|e| e.trim().to_owned())
        .find(|e| !e.is_empty());
        let otlp_endpoint = if disabled { None } else { endpoint };
        if let Some(e) = &otlp_endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(err(
                "otlp_endpoint",
                format!("{e:?}: must start with http:// or https://"),
            ));
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(err(
                "sample_ratio",
                format!("{} is out of range: expected 0 to 1", self.sample_ratio),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(err("service_name", "must not be empty".to_owned()));
        }
        let service_name = env
            .get("OTEL_SERVICE_NAME")
            .filter(|s| !s.trim().is_empty())
            .cloned()
            .unwrap_or_else(|| self.service_name.clone());
        Ok(Telemetry {
            log_format: self.log_format,
            log_level: self.log_level.trim().to_owned(),
            otlp_endpoint,
            service_name,
            sample_ratio: self.sample_ratio,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn log_levels() {
        for ok in [
            "info",
            "WARN",
            "info,gpusched_service=debug",
            "h2::proto=off",
            "off",
        ] {
            check_log_level(ok).unwrap();
        }
        for bad in ["verbose", "info,gpusched_service=loud", ""] {
            let e = check_log_level(bad).unwrap_err();
            assert!(
                e.contains("expected trace, debug, info, warn, error, off"),
                "{bad}: {e}"
            );
        }
        assert!(
            check_log_level("verbose")
                .unwrap_err()
                .contains("\"verbose\"")
        );
    }
}
