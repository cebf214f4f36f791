//! The one table from service errors to gRPC status codes, with structured details.

use std::collections::HashMap;

use gpusched_engine::{InvalidInput, Violation};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

/// A node part referenced by digest that this server does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// Inventory or usage.
    pub part: crate::cache::digest::Part,
    /// The digest.
    pub digest: crate::cache::digest::Digest,
    /// The request field that referenced it (first occurrence), e.g.
    /// `node_refs[3].inventory_digest`.
    pub field: String,
}

/// Why a call could not be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// Bad input: every violation, each naming its field or annotation (the answer lists at
    /// most [`MAX_LISTED`] of them, see [`bounded`]).
    #[error("invalid argument: {}", join(.0))]
    InvalidArgument(Vec<Violation>),
    /// Node parts referenced by digest that this server does not hold (every one of them); the
    /// client resends them inline.
    #[error("{} node parts referenced by digest are not held by this server; send them inline", .0.len())]
    Missing(Vec<Missing>),
    /// A node set named as a base (`NodeSetRef.base`) that this server does not hold, with the
    /// node parts of the request it does not hold either; the client sends its candidates in
    /// full.
    #[error("node set {0} is not held by this server; send the candidates in full")]
    MissingSet(crate::cache::digest::Digest, Vec<Missing>),
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

/// The violations as one line for the status message and logs: each clipped to half of
/// [`MAX_MESSAGE`] bytes, the line to [`MAX_MESSAGE`] bytes, the rest counted ("; and 7 more").
fn join(v: &[Violation]) -> String {
    let mut out = String::new();
    for (i, x) in v.iter().enumerate() {
        let item = format!(
            "{}: {}",
            clip(&x.field, MAX_ECHO),
            clip(&x.description, MAX_ECHO)
        );
        let item = clip(&item, MAX_MESSAGE / 2);
        // Room for the "; and N more" tail.
        if i > 0 && out.len() + item.len() + 2 > MAX_MESSAGE - 24 {
            out.push_str(&format!("; and {} more", v.len() - i));
            return out;
        }
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&item);
    }
    out
}

/// At most this many violations (or missing digests) are listed in an error's details; one
/// more entry says how many were left out.
pub const MAX_LISTED: usize = 20;
/// Bytes of one echoed field, description or subject in an error answer.
pub const MAX_ECHO: usize = 256;
/// Bytes of an error message (the service's part; `grpc-message` percent-encodes it, at most
/// tripling non-ASCII bytes).
pub const MAX_MESSAGE: usize = 512;
/// Bytes of listed violations in `grpc-status-details-bin` (before base64): with the message
/// and the other details, trailers stay under 8 KiB whatever the request held.
pub const DETAILS_BUDGET: usize = 3 * 1024;

/// `s` cut to at most `max` bytes at a character boundary, with `…` when cut.
pub fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end]).into()
}

/// The entries an error answer lists: at most [`MAX_LISTED`] and [`DETAILS_BUDGET`] bytes
/// (`size` estimates one entry's encoded bytes), and how many were left out.
pub fn bounded<T>(items: &[T], size: impl Fn(&T) -> usize) -> (&[T], usize) {
    let mut used = 0;
    let mut n = 0;
    for x in items.iter().take(MAX_LISTED) {
        used += size(x);
        if n > 0 && used > DETAILS_BUDGET {
            break;
        }
        n += 1;
    }
    (&items[..n], items.len() - n)
}

fn field_violation(x: &Violation) -> FieldViolation {
    FieldViolation {
        field: clip(&x.field, MAX_ECHO).into_owned(),
        description: clip(&x.description, MAX_ECHO).into_owned(),
        reason: x.kind.as_str().to_owned(),
        localized_message: None,
    }
}

/// Encoded bytes of one listed violation (field, description, reason, framing).
fn violation_size(x: &Violation) -> usize {
    x.field.len().min(MAX_ECHO) + x.description.len().min(MAX_ECHO) + x.kind.as_str().len() + 12
}

/// The "and N more" entry closing a cut list.
fn more(omitted: usize) -> String {
    format!("and {omitted} more not listed (at most {MAX_LISTED} are)")
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
            ServiceError::Missing(_) | ServiceError::MissingSet(..) => Code::FailedPrecondition,
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
            ServiceError::Missing(_) | ServiceError::MissingSet(..) => "failed_precondition",
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
        (
            "field".to_owned(),
            clip(&first.field, MAX_ECHO).into_owned(),
        ),
        ("reasons".to_owned(), reasons.join(",")),
        ("violationCount".to_owned(), v.len().to_string()),
    ]
    .into();
    d.set_error_info(first.kind.as_str(), ERROR_DOMAIN, metadata);
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let code = e.code();
        let message = clip(&e.to_string(), MAX_MESSAGE).into_owned();
        let details = match &e {
            ServiceError::InvalidArgument(v) => {
                let mut d = ErrorDetails::new();
                let (listed, omitted) = bounded(v, violation_size);
                let mut list: Vec<FieldViolation> = listed.iter().map(field_violation).collect();
                if omitted > 0 {
                    list.push(FieldViolation {
                        field: String::new(),
                        description: more(omitted),
                        reason: String::new(),
                        localized_message: None,
                    });
                }
                d.set_bad_request(list);
                set_error_info(&mut d, v);
                d
            }
            ServiceError::Missing(m) => missing_details(None, m),
            ServiceError::MissingSet(set, m) => missing_details(Some(set), m),
            ServiceError::TooLarge(v) => {
                let mut d = ErrorDetails::new();
                let (listed, omitted) = bounded(v, violation_size);
                for x in listed {
                    d.add_quota_failure_violation(
                        clip(&x.field, MAX_ECHO),
                        clip(&x.description, MAX_ECHO),
                    );
                }
                if omitted > 0 {
                    d.add_quota_failure_violation("", more(omitted));
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

/// PreconditionFailure of missing references: the base set first (subject
/// `nodeset/sha256/<hex>/<size>`), then each node part (`sha256/<hex>/<size>`), bounded like every
/// list of details; when parts were left out, a last violation of type `MORE` says how many
/// (clients then send every part inline instead of calling again per page).
fn missing_details(set: Option<&crate::cache::digest::Digest>, m: &[Missing]) -> ErrorDetails {
    let mut d = ErrorDetails::new();
    if let Some(set) = set {
        d.add_precondition_failure_violation(
            "MISSING",
            format!("nodeset/{set}"),
            "node_set.base is not held by this server; send the candidates in full (keep)",
        );
    }
    let (listed, omitted) = bounded(m, |x| x.field.len().min(MAX_ECHO) + 160);
    for x in listed {
        d.add_precondition_failure_violation(
            "MISSING",
            x.digest.to_string(),
            format!(
                "{} ({}) is not held by this server; send its bytes inline",
                clip(&x.field, MAX_ECHO),
                x.part.as_str()
            ),
        );
    }
    if omitted > 0 {
        d.add_precondition_failure_violation("MORE", "", more(omitted));
    }
    d
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

    /// Bytes of every header a status becomes (what a trailers-only answer sends).
    fn header_bytes(s: Status) -> usize {
        let mut h = http::HeaderMap::new();
        s.add_header(&mut h).expect("headers");
        h.iter().map(|(k, v)| k.as_str().len() + v.len()).sum()
    }

    #[test]
    fn answers_stay_under_8_kib_whatever_the_violations() {
        let long = "x\u{e9}\n".repeat(1_000);
        let many: Vec<Violation> = (0..2_000)
            .map(|i| {
                Violation::new(
                    ViolationKind::InvalidNodeReference,
                    format!("nodes[{i}].pair_scores[0].{long}"),
                    long.clone(),
                )
            })
            .collect();
        for e in [
            ServiceError::InvalidArgument(many.clone()),
            ServiceError::TooLarge(many.clone()),
            ServiceError::InvalidArgument(many[..50].to_vec()),
            ServiceError::Internal(long.clone()),
        ] {
            let s: Status = e.clone().into();
            assert!(s.message().len() <= MAX_MESSAGE, "{}", s.message().len());
            let d = s.get_error_details();
            if let Some(br) = d.bad_request() {
                assert!(br.field_violations.len() <= MAX_LISTED + 1);
                for v in &br.field_violations {
                    assert!(v.field.len() <= MAX_ECHO && v.description.len() <= MAX_ECHO);
                }
            }
            let bytes = header_bytes(s);
            assert!(
                bytes < 8 * 1024,
                "{bytes} bytes of trailers for {:?}",
                e.code()
            );
        }
        let s: Status = ServiceError::InvalidArgument(many).into();
        let d = s.get_error_details();
        let br = d.bad_request().expect("bad request");
        let last = br.field_violations.last().expect("entries");
        assert!(last.field.is_empty() && last.description.starts_with("and "));
        assert!(
            last.description.contains("more not listed"),
            "{}",
            last.description
        );
        assert_eq!(
            d.error_info().expect("info").metadata["violationCount"],
            "2000"
        );
        assert!(s.message().contains("more"), "{}", s.message());
    }

    #[test]
    fn a_few_short_violations_are_all_listed_unchanged() {
        let v: Vec<Violation> = (0..MAX_LISTED)
            .map(|i| Violation::new(ViolationKind::MissingField, format!("f{i}"), "d"))
            .collect();
        let s: Status = ServiceError::InvalidArgument(v).into();
        let d = s.get_error_details();
        let br = d.bad_request().expect("bad request");
        assert_eq!(br.field_violations.len(), MAX_LISTED);
        assert!(br.field_violations.iter().all(|f| !f.reason.is_empty()));
    }

    #[test]
    fn missing_lists_are_bounded_and_counted() {
        use crate::cache::digest::{Digest, Part};
        let m: Vec<Missing> = (0..10_000u64)
            .map(|i| Missing {
                part: Part::Inventory,
                digest: Digest::of(&i.to_le_bytes()),
                field: format!("node_refs[{i}].inventory_digest"),
            })
            .collect();
        let s: Status = ServiceError::Missing(m).into();
        let d = s.get_error_details();
        let pf = d.precondition_failure().expect("precondition failure");
        let listed = pf
            .violations
            .iter()
            .filter(|v| v.r#type == "MISSING")
            .count();
        assert!((1..=MAX_LISTED).contains(&listed), "{listed}");
        let more = pf.violations.last().expect("entries");
        assert_eq!(more.r#type, "MORE");
        assert!(
            more.description
                .starts_with(&format!("and {} more", 10_000 - listed)),
            "{}",
            more.description
        );
        assert!(header_bytes(s) < 8 * 1024);
    }

    #[test]
    fn clip_cuts_at_a_character_boundary() {
        assert_eq!(clip("abc", 3), "abc");
        let c = clip("ééééé", 6);
        assert!(c.len() <= 6 && c.ends_with('…'), "{c}");
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
