//! Layered configuration: embedded defaults < `--config file.toml|yaml` < environment variables
//! (`<PREFIX>_SECTION__KEY`) < flags, deserialised into the binary's typed sections. Every
//! failure becomes one [`ConfigError`] naming the key.

use std::collections::BTreeMap;
use std::path::Path;

use config::builder::DefaultState;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ConfigError;

type Builder = config::ConfigBuilder<DefaultState>;

/// What a binary's configuration is made of.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The binary's name (messages).
    pub binary: &'static str,
    /// The embedded defaults (TOML). Every top-level key a variable may set appears here.
    pub defaults: &'static str,
    /// Environment prefix without the trailing `_`, e.g. `GPUSCHED_SERVER`.
    pub env_prefix: &'static str,
    /// An older prefix still read, below `env_prefix` (None: none).
    pub legacy_env_prefix: Option<&'static str>,
    /// Keys whose variable values are comma-separated lists (`card_health.ignored_xids`).
    pub list_keys: &'static [&'static str],
}

/// Where the layers come from (the process's, or a test's).
#[derive(Clone, Copy, Debug)]
pub struct Sources<'a> {
    /// `--config`.
    pub file: Option<&'a Path>,
    /// The environment.
    pub env: &'a BTreeMap<String, String>,
}

impl Spec {
    /// Loads every layer into `T`. `flags` is the binary's flag struct: each field serialises
    /// under its dotted key (`#[serde(rename = "limits.max_nodes")]`), unset ones are skipped.
    pub fn load<T: DeserializeOwned>(
        &self,
        sources: Sources<'_>,
        flags: &impl Serialize,
    ) -> Result<T, ConfigError> {
        let builder = self.builder(sources, flags)?;
        let cfg = builder
            .clone()
            .build()
            .map_err(|e| source_error(e, sources.file))?;
        cfg.clone()
            .try_deserialize::<T>()
            .map_err(|e| self::describe(e, &cfg, |key| accepts_zero::<T>(&builder, key)))
    }

    /// [`Spec::load`] with the environment and the flags as (name, value) pairs, flags by dotted
    /// key (`("limits.max_nodes", "3")`): for tests and tools.
    pub fn load_pairs<T: DeserializeOwned>(
        &self,
        file: Option<&Path>,
        env: &[(&str, &str)],
        flags: &[(&str, &str)],
    ) -> Result<T, ConfigError> {
        self.load(
            Sources {
                file,
                env: &vars(env),
            },
            &vars(flags),
        )
    }

    /// Refuses a variable that looks like this binary's configuration but names no key (a
    /// typo such as `GPUSCHED_SERVER_LIMTS__MAX_NODES` or `GPUSCHED_SERVER_LIMITS_MAX_NODES`),
    /// by the rule of [`classify`].
    fn check_env(&self, env: &BTreeMap<String, String>, top: &[String]) -> Result<(), ConfigError> {
        for name in env.keys() {
            if let EnvRole::Unknown(first) = classify(self, name, top) {
                let p = self.env_prefix;
                return Err(ConfigError::new(
                    name.clone(),
                    format!(
                        "unknown variable: {first:?} is not a configuration key; expected \
                         {p}_<KEY> or {p}_<SECTION>__<KEY> with <KEY>/<SECTION> one of: {}",
                        top.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The top-level keys of the defaults: a variable's first segment must be one of them
    /// ([`classify`]).
    fn top_level_keys(&self) -> Vec<String> {
        self.defaults
            .parse::<toml::Table>()
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn env_source(
        &self,
        prefix: &str,
        env: &BTreeMap<String, String>,
        top: &[String],
    ) -> config::Environment {
        let full = format!("{prefix}_");
        let vars: config::Map<String, String> = env
            .iter()
            .filter(|(k, _)| {
                k.strip_prefix(&full).is_some_and(|rest| {
                    let first = rest.split("__").next().unwrap_or("").to_ascii_lowercase();
                    top.contains(&first)
                })
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut source = config::Environment::with_prefix(prefix)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .source(Some(vars));
        if !self.list_keys.is_empty() {
            source = source.list_separator(",");
            for key in self.list_keys {
                source = source.with_list_parse_key(key);
            }
        }
        source
    }

    fn builder(
        &self,
        sources: Sources<'_>,
        flags: &impl Serialize,
    ) -> Result<Builder, ConfigError> {
        let mut builder = config::Config::builder().add_source(config::File::from_str(
            self.defaults,
            config::FileFormat::Toml,
        ));
        if let Some(path) = sources.file {
            let format = match path.extension().and_then(|e| e.to_str()) {
                Some("toml") => config::FileFormat::Toml,
                Some("yaml" | "yml") => config::FileFormat::Yaml,
                _ => {
                    return Err(ConfigError::new(
                        "--config",
                        format!("{}: use a .toml, .yaml or .yml file", path.display()),
                    ));
                }
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError::new("--config", format!("{}: {e}", path.display())))?;
            builder = builder.add_source(config::File::from_str(&text, format));
        }
        let top = self.top_level_keys();
        self.check_env(sources.env, &top)?;
        if let Some(legacy) = self.legacy_env_prefix {
            builder = builder.add_source(self.env_source(legacy, sources.env, &top));
        }
        builder = builder.add_source(self.env_source(self.env_prefix, sources.env, &top));
        for (key, value) in flag_values(flags)? {
            builder = builder
                .set_override(&key, value)
                .map_err(|e| ConfigError::new(key, e.to_string()))?;
        }
        Ok(builder)
    }
}

/// The prefixes of gpusched's binaries (without the trailing `_`): each binary reads the
/// variables under its own prefix, and no other binary's.
pub const BINARY_PREFIXES: [&str; 4] = [
    "GPUSCHED_SERVER",
    "GPUSCHED_KUBE",
    "GPUSCHED_AGENT",
    "GPUSCHED_SLURM",
];

/// Variables under a binary's prefix that are not configuration: the project's scripts and
/// tests set them for other purposes (the binary to test, end-to-end switches). Nothing else
/// under a binary's prefix may be anything but configuration.
pub const NOT_CONFIG: [&str; 7] = [
    "GPUSCHED_SERVER_BIN",
    "GPUSCHED_SERVER_START_TIMEOUT",
    "GPUSCHED_KUBE_BIN",
    "GPUSCHED_KUBE_E2E",
    "GPUSCHED_AGENT_BIN",
    "GPUSCHED_AGENT_E2E",
    "GPUSCHED_SLURM_BIN",
];

/// What an environment variable is to a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvRole {
    /// One of its configuration keys.
    Config,
    /// Not its business: another binary's, a tool's, or outside `GPUSCHED_`.
    Ignored,
    /// Looks like its configuration (see [`classify`]) but names no key: an error. Holds the
    /// first segment, lower-cased.
    Unknown(String),
}

/// The rule for variables, for a binary with prefix `P` (e.g. `GPUSCHED_SERVER`) and top-level
/// keys `top`:
///
/// 1. `P_<REST>`: configuration, except the names in [`NOT_CONFIG`]. The first segment of REST
///    (before `__`, lower-cased) must be a top-level key, else the variable is an error.
/// 2. The legacy prefix `L` (the server's bare `GPUSCHED`), for names under no binary's prefix
///    ([`BINARY_PREFIXES`], and `P`) and not in [`NOT_CONFIG`]: `L_<REST>` with `__` in REST is
///    configuration and must name a key (an error otherwise); without `__` it is configuration
///    when REST is a top-level key (`GPUSCHED_LISTEN`) and otherwise a tool's variable, ignored
///    (`GPUSCHED_CACHE`, `GPUSCHED_E2E`, the Slurm adapter's `GPUSCHED_ADDRESS`).
/// 3. Anything else is ignored.
pub fn classify(spec: &Spec, name: &str, top: &[String]) -> EnvRole {
    if NOT_CONFIG.contains(&name) {
        return EnvRole::Ignored;
    }
    let first = |rest: &str| rest.split("__").next().unwrap_or("").to_ascii_lowercase();
    let known = |rest: &str| {
        let f = first(rest);
        if top.contains(&f) {
            EnvRole::Config
        } else {
            EnvRole::Unknown(f)
        }
    };
    if let Some(rest) = name.strip_prefix(&format!("{}_", spec.env_prefix)) {
        return known(rest);
    }
    let Some(legacy) = spec.legacy_env_prefix else {
        return EnvRole::Ignored;
    };
    let Some(rest) = name.strip_prefix(&format!("{legacy}_")) else {
        return EnvRole::Ignored;
    };
    if BINARY_PREFIXES
        .iter()
        .any(|p| name.starts_with(&format!("{p}_")))
    {
        return EnvRole::Ignored;
    }
    match known(rest) {
        EnvRole::Unknown(_) if !rest.contains("__") => EnvRole::Ignored,
        role => role,
    }
}

/// (name, value) pairs as an environment or a flag map (tests and tools).
pub fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The set flags as (dotted key, value).
fn flag_values(flags: &impl Serialize) -> Result<Vec<(String, config::Value)>, ConfigError> {
    let value =
        serde_json::to_value(flags).map_err(|e| ConfigError::new("flags", e.to_string()))?;
    let mut out = Vec::new();
    collect(&mut out, "", &value);
    Ok(out)
}

fn collect(out: &mut Vec<(String, config::Value)>, prefix: &str, v: &serde_json::Value) {
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                collect(out, &key(k), v);
            }
        }
        serde_json::Value::Null => {}
        serde_json::Value::Bool(b) => out.push((prefix.to_owned(), (*b).into())),
        serde_json::Value::String(s) => out.push((prefix.to_owned(), s.clone().into())),
        serde_json::Value::Number(n) => {
            let value: config::Value = match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => i.into(),
                (None, Some(u), _) => u.into(),
                (_, _, f) => f.unwrap_or_default().into(),
            };
            out.push((prefix.to_owned(), value));
        }
        serde_json::Value::Array(items) => {
            let list: Vec<config::Value> = items
                .iter()
                .map(|i| match i {
                    serde_json::Value::String(s) => s.clone().into(),
                    other => other.to_string().into(),
                })
                .collect();
            out.push((prefix.to_owned(), list.into()));
        }
    }
}

/// An error while reading the defaults or the file.
fn source_error(e: config::ConfigError, file: Option<&Path>) -> ConfigError {
    let source = file.map_or_else(|| "--config".to_owned(), |p| p.display().to_string());
    match e {
        config::ConfigError::FileParse { cause, .. } => {
            ConfigError::new("--config", format!("{source}: {cause}"))
        }
        other => ConfigError::new("config", other.to_string()),
    }
}

/// Whether the configuration deserialises with `key` set to 0 (so the range of an integer
/// starts at 0, not 1).
fn accepts_zero<T: DeserializeOwned>(builder: &Builder, key: &str) -> bool {
    let probed = builder
        .clone()
        .set_override(key, 0_i64)
        .and_then(|b| b.build())
        .and_then(config::Config::try_deserialize::<T>);
    match probed {
        Ok(_) => true,
        Err(e) => key_of(&e).as_deref() != Some(key),
    }
}

fn key_of(e: &config::ConfigError) -> Option<String> {
    match e {
        config::ConfigError::Type { key, .. } | config::ConfigError::At { key, .. } => key.clone(),
        config::ConfigError::NotFound(key) => Some(key.clone()),
        _ => None,
    }
}

/// The value of a config-crate type error (`64-bit integer `-1``, `string "x"`), and whether
/// it is a negative number or a string.
fn unexpected_text(u: &impl std::fmt::Display) -> (String, bool, bool) {
    let text = u.to_string();
    if let Some(v) = between_backticks(&text) {
        return (v.to_owned(), v.starts_with('-'), false);
    }
    match text.strip_prefix("string ") {
        Some(s) => (s.to_owned(), false, true),
        None => (text, false, false),
    }
}

/// The largest value of an unsigned integer of `bits` bits.
fn unsigned_max(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1_u128 << bits) - 1
    }
}

/// `expected` of a config-crate type error as a range, when it is an integer type.
fn integer_range(expected: &str, min: u128) -> Option<String> {
    let bits = |s: &str| {
        s.split_whitespace()
            .find_map(|w| w.parse::<u32>().ok())
            .unwrap_or(64)
    };
    if expected.contains("unsigned") {
        Some(format!(
            "a whole number from {min} to {}",
            unsigned_max(bits(expected))
        ))
    } else if expected.contains("signed") {
        let b = bits(expected).clamp(1, 127);
        let max = (1_i128 << (b - 1)) - 1;
        Some(format!("a whole number from {} to {max}", -max - 1))
    } else if expected == "an integer" {
        Some("a whole number".to_owned())
    } else {
        None
    }
}

/// A deserialisation error as one line naming the key.
fn describe(
    e: config::ConfigError,
    cfg: &config::Config,
    accepts_zero: impl Fn(&str) -> bool,
) -> ConfigError {
    match e {
        config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => {
            let key = key.unwrap_or_else(|| "config".to_owned());
            let (value, negative, string) = unexpected_text(&unexpected);
            let min = u128::from(!accepts_zero(&key));
            let message = match integer_range(expected, min) {
                Some(range) if negative => format!("{value} is negative: expected {range}"),
                Some(range) if string => format!("{value}: expected {range}"),
                Some(range) => format!("{value} is out of range: expected {range}"),
                None => format!("{value}: expected {expected}"),
            };
            ConfigError::new(key, message)
        }
        config::ConfigError::At { error, key, .. } => {
            let message = error.to_string();
            let key = key.unwrap_or_default();
            at_key(&key, &message, cfg)
        }
        config::ConfigError::Message(message) => at_key("", &message, cfg),
        config::ConfigError::NotFound(key) => ConfigError::new(key, "missing"),
        other => ConfigError::new("config", other.to_string()),
    }
}

fn join(key: &str, field: &str) -> String {
    if key.is_empty() {
        field.to_owned()
    } else {
        format!("{key}.{field}")
    }
}

fn between_backticks(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(&s[start..start + len])
}

/// A custom (serde) message at `key`: unknown and missing keys get their own key, a nonzero
/// type its range, anything else the value in front.
fn at_key(key: &str, message: &str, cfg: &config::Config) -> ConfigError {
    if let Some(rest) = message.strip_prefix("unknown field ") {
        let field = between_backticks(rest).unwrap_or(rest);
        let expected = rest
            .split_once("expected ")
            .map(|(_, e)| format!(": expected {}", e.replace('`', "")))
            .unwrap_or_default();
        return ConfigError::new(join(key, field), format!("unknown key{expected}"));
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        let field = between_backticks(rest).unwrap_or(rest);
        return ConfigError::new(join(key, field), "missing");
    }
    if let Some(ty) = message.split("expected a nonzero ").nth(1) {
        let bits = match ty.trim() {
            "u8" => 8,
            "u16" => 16,
            "u32" => 32,
            "u128" => 128,
            _ => 64,
        };
        return ConfigError::new(
            key,
            format!(
                "0 is out of range: expected a whole number from 1 to {}",
                unsigned_max(bits)
            ),
        );
    }
    let message = message
        .strip_prefix("invalid value: ")
        .unwrap_or(message)
        .to_owned();
    let value = (!key.is_empty())
        .then(|| cfg.get_string(key).ok())
        .flatten()
        .filter(|v| !message.contains(v.as_str()));
    let key = if key.is_empty() { "config" } else { key };
    match value {
        Some(v) => ConfigError::new(key, format!("{v:?}: {message}")),
        None => ConfigError::new(key, message),
    }
}
