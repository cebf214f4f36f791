//! Input errors: every problem in a request, each with the field it concerns.
//!
//! "Does not fit" is not an error (see [`crate::reason`]); these are only for input that
//! cannot be decided on at all.

use std::fmt;

/// One problem in the input: the field (a path such as `nodes[2].cards[0].id` or
/// `annotations["hami.io/device-scoring-weights"]`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Path of the offending field or annotation.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub description: String,
}

impl Violation {
    /// A violation of `field`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Violation {
            field: field.into(),
            description: description.into(),
        }
    }

    /// The same violation with `prefix.` put in front of its field.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.field = if self.field.starts_with('[') {
                format!("{prefix}{}", self.field)
            } else {
                format!("{prefix}.{}", self.field)
            };
        }
        self
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.description)
    }
}

/// Input that cannot be decided on, with every violation found.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid input: {}", join(.violations))]
pub struct InvalidInput {
    /// The problems, in input order.
    pub violations: Vec<Violation>,
}

impl InvalidInput {
    /// An error with a single violation.
    pub fn single(field: impl Into<String>, description: impl Into<String>) -> Self {
        InvalidInput {
            violations: vec![Violation::new(field, description)],
        }
    }

    /// The same error with every field prefixed.
    pub fn prefixed(self, prefix: &str) -> Self {
        InvalidInput {
            violations: self
                .violations
                .into_iter()
                .map(|v| v.prefixed(prefix))
                .collect(),
        }
    }
}

fn join(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
