//! The one table from service errors to gRPC status codes, with structured details.

use std::collections::HashMap;

use gpusched_engine::{InvalidInput, Violation};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

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
    /// The requests in flight hold the memory budget this one needs (`limits.max_in_flight_bytes`).
    #[error(
        "server busy: this request needs an estimated {needed} bytes of memory, {free} of the {limit} bytes of limits.max_in_flight_bytes are free"
    )]
    MemoryBusy {
        /// Estimated bytes this request needs.
        needed: usize,
        /// Bytes free now.
        free: usize,
        /// The budget.
        limit: usize,
    },
    /// The request body did not arrive whole within `limits.body_timeout`.
    #[error("request body not received within {0:?} (limits.body_timeout)")]
    BodyTimeout(std::time::Duration),
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
            ServiceError::TooLarge(_) | ServiceError::Busy(_) | ServiceError::MemoryBusy { .. } => {
                Code::ResourceExhausted
            }
            ServiceError::DeadlineExceeded(_) | ServiceError::BodyTimeout(_) => {
                Code::DeadlineExceeded
            }
            ServiceError::ShuttingDown => Code::Unavailable,
            ServiceError::Internal(_) => Code::Internal,
        }
    }

    /// A short label for metrics and spans.
    pub fn outcome(&self) -> &'static str {
        match self {
            ServiceError::InvalidArgument(_) => "invalid_argument",
            ServiceError::Missing(_) => "failed_precondition",
            ServiceError::TooLarge(_) | ServiceError::Busy(_) | ServiceError::MemoryBusy { .. } => {
                "resource_exhausted"
            }
            ServiceError::DeadlineExceeded(_) | ServiceError::BodyTimeout(_) => "deadline_exceeded",
            ServiceError::ShuttingDown => "unavailable",
            ServiceError::Internal(_) => "internal",
        }
    }
}

/// The domain of every `google.rpc.ErrorInfo` the service sends.
pub const ERROR_DOMAIN: &str = "gpusched.io";

/// `google.rpc.ErrorInfo` of a list of violations: reason = the kind of the first violation,
/// metadata `field` (the first violation's field), `reasons` (the distinct kinds, comma
/// separated, in order of first appearance) and `violationCount`. The per-violation kinds travel
/// in `BadRequest.FieldViolation.reason`; QuotaFailure violations have no reason field and are
/// all `LIMIT_EXCEEDED`.
fn set_error_info(d: &mut ErrorDetails, v: &[Violation]) {
    let Some(first) = v.first() else { return };
    let mut reasons: Vec<&str> = Vec::new();
    for x in v {
        if !reasons.contains(&x.kind.as_str()) {
            reasons.push(x.kind.as_str());
        }
    }
    let metadata: HashMap<String, String> = [
        ("field".to_owned(), first.field.clone()),
        ("reasons".to_owned(), reasons.join(",")),
        ("violationCount".to_owned(), v.len().to_string()),
    ]
    .into();
    d.set_error_info(first.kind.as_str(), ERROR_DOMAIN, metadata);
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let code = e.code();
        let message = e.to_string();
        let details = match &e {
            ServiceError::InvalidArgument(v) => {
                let mut d = ErrorDetails::new();
                d.set_bad_request(
                    v.iter()
                        .map(|x| FieldViolation {
                            field: x.field.clone(),
                            description: x.description.clone(),
                            reason: x.kind.as_str().to_owned(),
                            localized_message: None,
                        })
                        .collect::<Vec<_>>(),
                );
                set_error_info(&mut d, v);
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
                set_error_info(&mut d, v);
                d
            }
            ServiceError::Busy(_)
            | ServiceError::MemoryBusy { .. }
            | ServiceError::ShuttingDown => {
                let mut d = ErrorDetails::new();
                d.set_retry_info(Some(std::time::Duration::from_millis(100)));
                d
            }
            ServiceError::DeadlineExceeded(_)
            | ServiceError::BodyTimeout(_)
            | ServiceError::Internal(_) => ErrorDetails::new(),
        };
        Status::with_error_details(code, message, details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpusched_engine::ViolationKind;

    #[test]
    fn invalid_argument_carries_field_violations_with_reasons() {
        let s: Status = ServiceError::InvalidArgument(vec![
            Violation::new(ViolationKind::InvalidScoringWeights, "workload.x", "bad"),
            Violation::new(ViolationKind::DuplicateId, "nodes[1].name", "dup"),
            Violation::new(
                ViolationKind::InvalidScoringWeights,
                "workload.y",
                "bad too",
            ),
        ])
        .into();
        assert_eq!(s.code(), Code::InvalidArgument);
        let d = s.get_error_details();
        let br = d.bad_request().expect("bad request detail");
        assert_eq!(br.field_violations.len(), 3);
        assert_eq!(br.field_violations[0].field, "workload.x");
        assert_eq!(br.field_violations[0].description, "bad");
        assert_eq!(br.field_violations[0].reason, "INVALID_SCORING_WEIGHTS");
        assert_eq!(br.field_violations[1].reason, "DUPLICATE_ID");
        assert_eq!(br.field_violations[2].reason, "INVALID_SCORING_WEIGHTS");
        let info = d.error_info().expect("error info detail");
        assert_eq!(info.reason, "INVALID_SCORING_WEIGHTS");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert_eq!(info.metadata["field"], "workload.x");
        assert_eq!(
            info.metadata["reasons"],
            "INVALID_SCORING_WEIGHTS,DUPLICATE_ID"
        );
        assert_eq!(info.metadata["violationCount"], "3");
        assert!(d.quota_failure().is_none());
    }

    #[test]
    fn too_large_carries_quota_violations_and_limit_exceeded() {
        let s: Status = ServiceError::TooLarge(vec![Violation::new(
            ViolationKind::LimitExceeded,
            "nodes",
            "too many",
        )])
        .into();
        assert_eq!(s.code(), Code::ResourceExhausted);
        let d = s.get_error_details();
        let q = d.quota_failure().expect("quota failure detail");
        assert_eq!(q.violations[0].subject, "nodes");
        let info = d.error_info().expect("error info detail");
        assert_eq!(info.reason, "LIMIT_EXCEEDED");
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert!(d.bad_request().is_none());
    }

    #[test]
    fn errors_without_violations_carry_no_error_info() {
        for e in [
            ServiceError::Busy(1),
            ServiceError::ShuttingDown,
            ServiceError::Internal("x".into()),
            ServiceError::InvalidArgument(vec![]),
        ] {
            let s: Status = e.into();
            assert!(s.get_error_details().error_info().is_none());
        }
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
