//! Client errors: transport problems, and API errors with the server's structured details.

use std::collections::BTreeMap;

use gpusched_api::v1;
use tonic::Code;
use tonic_types::StatusExt;

/// A field (or annotation) the server rejected, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    /// e.g. `workload.kubernetes.annotations["hami.io/device-scoring-weights"]`.
    pub field: String,
    /// What is wrong.
    pub description: String,
    /// The kind of problem, a stable machine-readable reason such as `INVALID_SCORING_WEIGHTS`
    /// (`google.rpc.BadRequest.FieldViolation.reason`; a [`v1::ViolationReason`] name without
    /// its `VIOLATION_REASON_` prefix). Empty for quota violations, which have no reason of
    /// their own: [`ApiError::reason`] is `LIMIT_EXCEEDED` for them.
    pub reason: String,
}

impl FieldViolation {
    /// The reason as the API enum: `Unspecified` when empty or unknown to this client.
    pub fn kind(&self) -> v1::ViolationReason {
        violation_reason(&self.reason)
    }
}

/// The [`v1::ViolationReason`] of a reason string such as `INVALID_SCORING_WEIGHTS`
/// (`Unspecified` when empty or unknown to this client).
pub fn violation_reason(reason: &str) -> v1::ViolationReason {
    if reason.is_empty() {
        return v1::ViolationReason::Unspecified;
    }
    v1::ViolationReason::from_str_name(&format!("VIOLATION_REASON_{reason}"))
        .unwrap_or(v1::ViolationReason::Unspecified)
}

/// The string the server sends for a [`v1::ViolationReason`] (its name without the
/// `VIOLATION_REASON_` prefix; empty for `Unspecified`).
pub fn violation_reason_str(kind: v1::ViolationReason) -> &'static str {
    match kind {
        v1::ViolationReason::Unspecified => "",
        k => k
            .as_str_name()
            .strip_prefix("VIOLATION_REASON_")
            .unwrap_or_default(),
    }
}

/// `google.rpc.ErrorInfo` of an error status: why the call failed, as a stable reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorInfo {
    /// The reason of the first violation, e.g. `INVALID_SCORING_WEIGHTS` or `LIMIT_EXCEEDED`.
    pub reason: String,
    /// `gpusched.io` for the server's own errors.
    pub domain: String,
    /// `field` (of the first violation), `reasons` (the distinct reasons, comma separated),
    /// `violationCount`.
    pub metadata: BTreeMap<String, String>,
}

/// An error status from the server, with its details decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    /// The gRPC code.
    pub code: Code,
    /// The status message.
    pub message: String,
    /// `google.rpc.BadRequest` field violations (INVALID_ARGUMENT).
    pub field_violations: Vec<FieldViolation>,
    /// `google.rpc.QuotaFailure` violations (RESOURCE_EXHAUSTED: which limit).
    pub quota_violations: Vec<FieldViolation>,
    /// `google.rpc.ErrorInfo`, when the server sent one (every error with violations); boxed to
    /// keep `Result<_, Error>` small.
    pub error_info: Option<Box<ErrorInfo>>,
    /// `google.rpc.PreconditionFailure` subjects of type `MISSING` (FAILED_PRECONDITION: node
    /// parts referenced by digest that the server does not hold), `sha256/<hex>/<size>`.
    pub missing_digests: Vec<String>,
    /// The server listed only some of the missing parts (a violation of type `MORE`): the
    /// client then sends every part inline.
    pub missing_more: bool,
}

impl ApiError {
    /// Decodes a status.
    pub fn from_status(s: &tonic::Status) -> Self {
        let details = s.get_error_details();
        ApiError {
            code: s.code(),
            message: s.message().to_owned(),
            field_violations: details
                .bad_request()
                .map(|b| {
                    b.field_violations
                        .iter()
                        .map(|v| FieldViolation {
                            field: v.field.clone(),
                            description: v.description.clone(),
                            reason: v.reason.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            quota_violations: details
                .quota_failure()
                .map(|q| {
                    q.violations
                        .iter()
                        .map(|v| FieldViolation {
                            field: v.subject.clone(),
                            description: v.description.clone(),
                            reason: String::new(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            error_info: details.error_info().map(|i| {
                Box::new(ErrorInfo {
                    reason: i.reason.clone(),
                    domain: i.domain.clone(),
                    metadata: i
                        .metadata
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                })
            }),
            missing_digests: details
                .precondition_failure()
                .map(|p| {
                    p.violations
                        .iter()
                        .filter(|v| v.r#type == "MISSING")
                        .map(|v| v.subject.clone())
                        .collect()
                })
                .unwrap_or_default(),
            missing_more: details
                .precondition_failure()
                .is_some_and(|p| p.violations.iter().any(|v| v.r#type == "MORE")),
        }
    }

    /// Whether the request was rejected as invalid (never worth retrying).
    pub fn is_invalid_argument(&self) -> bool {
        self.code == Code::InvalidArgument
    }

    /// The `google.rpc.ErrorInfo` reason (the reason of the first violation), or "" without one.
    pub fn reason(&self) -> &str {
        self.error_info.as_ref().map_or("", |i| i.reason.as_str())
    }

    /// The field violations of one kind, in order.
    pub fn violations_of(
        &self,
        kind: v1::ViolationReason,
    ) -> impl Iterator<Item = &FieldViolation> + '_ {
        self.field_violations
            .iter()
            .filter(move |v| v.kind() == kind)
    }

    /// The violation of a field whose path contains `needle` (e.g. an annotation key).
    pub fn violation_for(&self, needle: &str) -> Option<&FieldViolation> {
        self.field_violations
            .iter()
            .find(|v| v.field.contains(needle))
    }
}

/// Any client error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address is not a valid URI.
    #[error("invalid endpoint {0:?}")]
    Endpoint(String),
    /// TLS material could not be used.
    #[error("TLS: {0}")]
    Tls(String),
    /// The connection could not be made.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The server answered with an error status.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The server answered without a required field.
    #[error("malformed answer: {0}")]
    Malformed(&'static str),
}

impl Error {
    /// The API error, when the server answered with one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_strings_round_trip_through_the_enum() {
        assert_eq!(
            violation_reason("INVALID_SCORING_WEIGHTS"),
            v1::ViolationReason::InvalidScoringWeights
        );
        assert_eq!(violation_reason(""), v1::ViolationReason::Unspecified);
        assert_eq!(
            violation_reason("SOMETHING_NEW"),
            v1::ViolationReason::Unspecified
        );
        assert_eq!(
            violation_reason("VIOLATION_REASON_MISSING_FIELD"),
            v1::ViolationReason::Unspecified
        );
        for n in 1..=11 {
            let k = v1::ViolationReason::try_from(n).unwrap_or_default();
            assert_ne!(k, v1::ViolationReason::Unspecified);
            assert_eq!(violation_reason(violation_reason_str(k)), k);
        }
        assert_eq!(violation_reason_str(v1::ViolationReason::Unspecified), "");
    }
}
