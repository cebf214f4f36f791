//! Flags every binary has, and the serde helpers that turn a binary's clap struct into config
//! overrides: each field is serialised under its dotted key
//! (`#[serde(rename = "metrics.listen")]`) and unset fields are skipped, so flags are merged by
//! derive, not copied by hand.

use std::path::PathBuf;

use serde::{Serialize, Serializer};

/// `--config`, `--print-config` and the `[telemetry]` flags; `#[command(flatten)]` and
/// `#[serde(flatten)]` it into the binary's flags.
#[derive(Clone, Debug, Default, clap::Args, Serialize)]
pub struct CommonArgs {
    /// Configuration file (.toml, .yaml or .yml); defaults are embedded.
    #[arg(long, global = true, value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Print the effective configuration (TOML) and exit.
    #[arg(long, global = true)]
    #[serde(skip)]
    pub print_config: bool,
    /// Log format (text | json).
    #[arg(long, global = true, value_name = "FORMAT")]
    #[serde(
        rename = "telemetry.log_format",
        skip_serializing_if = "Option::is_none"
    )]
    pub log_format: Option<String>,
    /// Log filter: a level (trace | debug | info | warn | error | off) and/or target=level
    /// pairs, e.g. info,gpusched_service=debug.
    #[arg(long, global = true, value_name = "FILTER")]
    #[serde(
        rename = "telemetry.log_level",
        skip_serializing_if = "Option::is_none"
    )]
    pub log_level: Option<String>,
    /// OTLP/gRPC endpoint for traces, e.g. http://127.0.0.1:4317.
    #[arg(long, global = true, value_name = "URL")]
    #[serde(
        rename = "telemetry.otlp_endpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub otlp_endpoint: Option<String>,
}

/// `skip_serializing_if` for a switch: skipped unless given.
pub fn not_given(on: &bool) -> bool {
    !*on
}

/// `serialize_with` for a `--no-...` switch: given, it sets its key to `false`.
pub fn negate<S: Serializer>(on: &bool, s: S) -> Result<S::Ok, S::Error> {
    (!*on).serialize(s)
}
