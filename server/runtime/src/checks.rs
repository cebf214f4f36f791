//! Small start-up checks that name their key.

use std::time::Duration;

use crate::error::ConfigError;

/// The trimmed value, or an error when it is empty.
pub fn non_empty(key: &str, value: &str) -> Result<String, ConfigError> {
    let t = value.trim();
    if t.is_empty() {
        Err(ConfigError::new(key, "must not be empty"))
    } else {
        Ok(t.to_owned())
    }
}

/// The duration, or an error when it is zero.
pub fn nonzero_duration(key: &str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        Err(ConfigError::new(key, "must be longer than 0s"))
    } else {
        Ok(value)
    }
}

/// The value, or `None` when it is empty (optional strings of the configuration).
pub fn optional(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}
