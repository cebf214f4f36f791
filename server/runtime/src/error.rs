//! The one configuration error of every gpusched binary: the key and what is wrong, on one line.

/// A configuration problem: the dotted key (or the flag / source) and what is wrong with it,
/// including the expected values or range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("config error: {key}: {message}")]
pub struct ConfigError {
    /// The offending key (`limits.max_nodes`), flag (`--config`) or source.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl ConfigError {
    /// An error for `key`; new lines in `message` are folded so the error stays one line.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        let message: String = message.into();
        ConfigError {
            key: key.into(),
            message: message.split_whitespace().collect::<Vec<_>>().join(" "),
        }
    }

    /// The same error with `prefix.` in front of its key (a section validating its own keys).
    pub fn within(self, prefix: &str) -> Self {
        ConfigError {
            key: format!("{prefix}.{}", self.key),
            message: self.message,
        }
    }
}

/// Shorthand for [`ConfigError::new`].
pub fn config_error(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::new(key, message)
}
