//! Client errors: transport problems, and API errors with the server's structured details.

use tonic::Code;
use tonic_types::StatusExt;

/// A field (or annotation) the server rejected, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    /// e.g. `workload.kubernetes.annotations["hami.io/device-scoring-weights"]`.
    pub field: String,
    /// What is wrong.
    pub description: String,
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
    /// `google.rpc.PreconditionFailure` subjects of type `MISSING` (FAILED_PRECONDITION: node
    /// parts referenced by digest that the server does not hold), `sha256/<hex>/<size>`.
    pub missing_digests: Vec<String>,
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
                        })
                        .collect()
                })
                .unwrap_or_default(),
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
        }
    }

    /// Whether the request was rejected as invalid (never worth retrying).
    pub fn is_invalid_argument(&self) -> bool {
        self.code == Code::InvalidArgument
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
