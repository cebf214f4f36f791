//! The one error of the codec: a protocol value that cannot be read, naming its annotation.

/// A protocol value that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{annotation}: {message}")]
pub struct HamiError {
    /// The annotation key.
    pub annotation: &'static str,
    /// What is wrong.
    pub message: String,
}

pub(crate) fn err(annotation: &'static str, message: impl Into<String>) -> HamiError {
    HamiError {
        annotation,
        message: message.into(),
    }
}
