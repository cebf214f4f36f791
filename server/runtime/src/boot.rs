//! The start of every `main`: load the layers, honour `--print-config`, and stop with one line
//! naming the key (exit status 2) on a bad configuration.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ConfigError;
use crate::flags::CommonArgs;
use crate::layers::{Sources, Spec};

/// Exit status of a bad configuration.
pub const CONFIG_EXIT: u8 = 2;

/// The configuration as TOML (what `--print-config` prints; it loads back unchanged).
pub fn to_toml(cfg: &impl Serialize) -> Result<String, ConfigError> {
    toml::to_string(cfg).map_err(|e| ConfigError::new("--print-config", e.to_string()))
}

impl Spec {
    /// Loads the configuration file shape `F` from the process's layers. `Err` is the exit
    /// status `main` returns: 0 after `--print-config`, 2 after a configuration error (printed
    /// as one line on stderr).
    pub fn start<F: Serialize + DeserializeOwned>(
        &self,
        common: &CommonArgs,
        flags: &impl Serialize,
        env: &BTreeMap<String, String>,
    ) -> Result<F, ExitCode> {
        let sources = Sources {
            file: common.config.as_deref(),
            env,
        };
        let cfg: F = self.load(sources, flags).map_err(|e| self.fail(&e))?;
        if common.print_config {
            return match to_toml(&cfg) {
                Ok(text) => {
                    print!("{text}");
                    Err(ExitCode::SUCCESS)
                }
                Err(e) => Err(self.fail(&e)),
            };
        }
        Ok(cfg)
    }

    /// The settings of a binary: its layers loaded from the flags, the process environment and
    /// the `--config` file ([`Spec::start`]), then `validate` ([`Spec::check`]). `Err` is the
    /// exit status `main` returns (already printed).
    pub fn settings<F: Serialize + DeserializeOwned, S>(
        &self,
        common: &CommonArgs,
        flags: &impl Serialize,
        validate: impl FnOnce(&F, &BTreeMap<String, String>) -> Result<S, ConfigError>,
    ) -> Result<S, ExitCode> {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let file: F = self.start(common, flags, &env)?;
        self.check(validate(&file, &env))
    }

    /// The exit status of a binary's run: success, or failure with the error (and its causes,
    /// `{:#}`) on one line of stderr.
    pub fn exit<E: std::fmt::Display>(&self, result: Result<(), E>) -> ExitCode {
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{}: {e:#}", self.binary);
                ExitCode::FAILURE
            }
        }
    }

    /// Validated settings, or exit status 2 after printing the error.
    pub fn check<S>(&self, validated: Result<S, ConfigError>) -> Result<S, ExitCode> {
        validated.map_err(|e| self.fail(&e))
    }

    fn fail(&self, e: &ConfigError) -> ExitCode {
        eprintln!("{}: {e}", self.binary);
        ExitCode::from(CONFIG_EXIT)
    }
}
