//! The one table from service errors to gRPC status codes, with structured details.

use gpusched_engine::{InvalidInput, Violation};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// A node part referenced by digest that this server does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Inventory or usage.
    pub part: crate::node_cache::Part,
    /// The digest.
    pub digest: crate::node_cache::Digest,
    /// The request field that referenced it (first occurrence), e.g.
    /// `node_refs[3].inventory_digest`.
    pub field: String,
}

/// Why a call could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// Bad input: every violation, each naming its field or annotation.
    #[error("invalid argument: {}", join(.0))]
    InvalidArgument(Vec<Violation>),
    /// Node parts referenced by digest that this server does not hold (every one of them); the
    /// client resends them inline.
    #[error("{} node parts referenced by digest are not held by this server; send them inline", .0.len())]
    Missing(Vec<Missing>),
    /// A request over a configured limit.
    #[error("request too large: {}", join(.0))]
    TooLarge(Vec<Violation>),
    /// Every decision slot stayed busy until the deadline.
    #[error("server busy: {0} decisions in progress")]
    Busy(usize),
    /// The call's deadline (or the server's request timeout) passed.
    #[error("deadline exceeded after {0:?}")]
    DeadlineExceeded(std::time::Duration),
    /// The server is shutting down.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A bug: never expected.
    #[error("internal error: {0}")]
    Internal(String),
}

fn join(v: &[Violation]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl From<InvalidInput> for ServiceError {
    fn from(e: InvalidInput) -> Self {
        ServiceError::InvalidArgument(e.violations)
    }
}

impl ServiceError {
    /// The gRPC code of this error (the table).
    pub fn code(&self) -> Code {
        match self {
            ServiceError::InvalidArgument(_) => Code::InvalidArgument,
            ServiceError::Missing(_) => Code::FailedPrecondition,
            ServiceError::TooLarge(_) | ServiceError::Busy(_) => Code::ResourceExhausted,
            ServiceError::DeadlineExceeded(_) => Code::DeadlineExceeded,
            ServiceError::ShuttingDown => Code::Unavailable,
            ServiceError::Internal(_) => Code::Internal,
        }
    }

    /// A short label for metrics and spans.
    pub fn outcome(&self) -> &'static str {
        match self {
            ServiceError::InvalidArgument(_) => "invalid_argument",
            ServiceError::Missing(_) => "failed_precondition",
            ServiceError::TooLarge(_) | ServiceError::Busy(_) => "resource_exhausted",
            ServiceError::DeadlineExceeded(_) => "deadline_exceeded",
            ServiceError::ShuttingDown => "unavailable",
            ServiceError::Internal(_) => "internal",
        }
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let code = e.code();
        let message = e.to_string();
        let details = match &e {
            ServiceError::InvalidArgument(v) => {
                let mut d = ErrorDetails::new();
                for x in v {
                    d.add_bad_request_violation(x.field.clone(), x.description.clone());
                }
                d
            }
            ServiceError::Missing(m) => {
                let mut d = ErrorDetails::new();
                for x in m {
                    d.add_precondition_failure_violation(
                        "MISSING",
                        x.digest.to_string(),
                        format!(
                            "{} ({}) is not held by this server; send its bytes inline",
                            x.field,
                            x.part.as_str()
                        ),
                    );
                }
                d
            }
            ServiceError::TooLarge(v) => {
                let mut d = ErrorDetails::new();
                for x in v {
                    d.add_quota_failure_violation(x.field.clone(), x.description.clone());
                }
                d
            }
            ServiceError::Busy(_) | ServiceError::ShuttingDown => {
                let mut d = ErrorDetails::new();
                d.set_retry_info(Some(std::time::Duration::from_millis(100)));
                d
            }
            ServiceError::DeadlineExceeded(_) | ServiceError::Internal(_) => ErrorDetails::new(),
        };
        Status::with_error_details(code, message, details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_argument_carries_field_violations() {
        let s: Status =
            ServiceError::InvalidArgument(vec![Violation::new("workload.x", "bad")]).into();
        assert_eq!(s.code(), Code::InvalidArgument);
        let d = s.get_error_details();
        let br = d.bad_request().expect("bad request detail");
        assert_eq!(br.field_violations[0].field, "workload.x");
        assert_eq!(br.field_violations[0].description, "bad");
    }

    #[test]
    fn the_table() {
        assert_eq!(
            ServiceError::TooLarge(vec![]).code(),
            Code::ResourceExhausted
        );
        assert_eq!(ServiceError::Busy(1).code(), Code::ResourceExhausted);
        assert_eq!(
            ServiceError::DeadlineExceeded(Default::default()).code(),
            Code::DeadlineExceeded
        );
        assert_eq!(ServiceError::ShuttingDown.code(), Code::Unavailable);
        assert_eq!(ServiceError::Internal(String::new()).code(), Code::Internal);
    }
}
