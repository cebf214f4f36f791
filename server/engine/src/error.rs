//! Input errors: every problem in a request, each with the field it concerns and a stable,
//! machine-readable kind.
//!
//! "Does not fit" is not an error (see [`crate::reason`]); these are only for input that
//! cannot be decided on at all.

use std::fmt;

/// What kind of problem a [`Violation`] is: a closed set, stable across releases, so that a
/// client can branch on it without reading the field path or the description.
///
/// Workload kinds (`Invalid*`) are the same whichever form the workload came in (typed fields
/// or Kubernetes annotations and resources) and whatever the configured annotation names are.
/// The other kinds describe the structure of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// A node policy that is not `binpack` or `spread` (annotation, typed field or default).
    InvalidNodePolicy,
    /// A GPU policy that is not a policy token or a chain of them (annotation, typed field or
    /// default).
    InvalidGpuPolicy,
    /// Device scoring weights that are malformed, over the maximum or all zero.
    InvalidScoringWeights,
    /// A numa-bind annotation that is not a boolean.
    InvalidNumaBind,
    /// A container's GPU request that is malformed or out of range (card count, memory,
    /// memory percentage, cores).
    InvalidResourceRequest,
    /// A required field is unset or empty.
    MissingField,
    /// A name or id that must be unique is repeated.
    DuplicateId,
    /// A name or id that refers to something the request does not contain.
    UnknownReference,
    /// An enum number this server does not know.
    UnknownEnumValue,
    /// A number outside its accepted range (request defaults, normalisation settings).
    OutOfRange,
    /// The request is over a configured server limit.
    LimitExceeded,
    /// A node sent by reference is malformed: a digest of the wrong length or an unknown hash
    /// function, bytes that do not hash to their digest, or bytes that do not decode.
    InvalidNodeReference,
    /// A workload mix whose probabilities are not a distribution: negative, not finite,
    /// above 1, all zero, or not summing to 1 (`docs/placement-semantics.md` section 12.1).
    InvalidWorkloadMix,
}

impl ViolationKind {
    /// Every kind, in declaration order.
    pub const ALL: [ViolationKind; 13] = [
        ViolationKind::InvalidNodePolicy,
        ViolationKind::InvalidGpuPolicy,
        ViolationKind::InvalidScoringWeights,
        ViolationKind::InvalidNumaBind,
        ViolationKind::InvalidResourceRequest,
        ViolationKind::MissingField,
        ViolationKind::DuplicateId,
        ViolationKind::UnknownReference,
        ViolationKind::UnknownEnumValue,
        ViolationKind::OutOfRange,
        ViolationKind::LimitExceeded,
        ViolationKind::InvalidNodeReference,
        ViolationKind::InvalidWorkloadMix,
    ];

    /// The stable reason string (UPPER_SNAKE_CASE), e.g. `INVALID_SCORING_WEIGHTS`.
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::InvalidNodePolicy => "INVALID_NODE_POLICY",
            ViolationKind::InvalidGpuPolicy => "INVALID_GPU_POLICY",
            ViolationKind::InvalidScoringWeights => "INVALID_SCORING_WEIGHTS",
            ViolationKind::InvalidNumaBind => "INVALID_NUMA_BIND",
            ViolationKind::InvalidResourceRequest => "INVALID_RESOURCE_REQUEST",
            ViolationKind::MissingField => "MISSING_FIELD",
            ViolationKind::DuplicateId => "DUPLICATE_ID",
            ViolationKind::UnknownReference => "UNKNOWN_REFERENCE",
            ViolationKind::UnknownEnumValue => "UNKNOWN_ENUM_VALUE",
            ViolationKind::OutOfRange => "OUT_OF_RANGE",
            ViolationKind::LimitExceeded => "LIMIT_EXCEEDED",
            ViolationKind::InvalidNodeReference => "INVALID_NODE_REFERENCE",
            ViolationKind::InvalidWorkloadMix => "INVALID_WORKLOAD_MIX",
        }
    }

    /// The kind with this reason string.
    pub fn parse(reason: &str) -> Option<ViolationKind> {
        ViolationKind::ALL
            .into_iter()
            .find(|k| k.as_str() == reason)
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem in the input: its kind, the field (a path such as `nodes[2].cards[0].id` or
/// `annotations["hami.io/device-scoring-weights"]`) and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// What kind of problem this is.
    pub kind: ViolationKind,
    /// Path of the offending field or annotation.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub description: String,
}

impl Violation {
    /// A violation of `field`.
    pub fn new(
        kind: ViolationKind,
        field: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        Violation {
            kind,
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
    pub fn single(
        kind: ViolationKind,
        field: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        InvalidInput {
            violations: vec![Violation::new(kind, field, description)],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_distinct_upper_snake_and_parse_back() {
        let mut seen = std::collections::BTreeSet::new();
        for k in ViolationKind::ALL {
            let s = k.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(
                s.len() <= 63
                    && s.starts_with(|c: char| c.is_ascii_uppercase())
                    && s.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                    && !s.ends_with('_'),
                "{s} is not UPPER_SNAKE_CASE"
            );
            assert_eq!(ViolationKind::parse(s), Some(k));
            assert_eq!(k.to_string(), s);
        }
        assert_eq!(ViolationKind::parse("invalid_node_policy"), None);
    }

    #[test]
    fn prefixing_keeps_the_kind() {
        let v =
            Violation::new(ViolationKind::DuplicateId, "cards[1].id", "dup").prefixed("nodes[0]");
        assert_eq!(v.kind, ViolationKind::DuplicateId);
        assert_eq!(v.field, "nodes[0].cards[1].id");
    }
}
