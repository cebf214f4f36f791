//! The outermost layer of every gRPC call (placement, inventory, health, reflection, unknown
//! paths): it refuses requests that are not gRPC, answers DEADLINE_EXCEEDED at the call's
//! deadline, puts tonic's codes right, and counts every answer by its final gRPC code, the
//! code the client reads, in `gpusched_requests_total{rpc,outcome}` and
//! `gpusched_request_duration_seconds`.
//!
//! - Content-type not `application/grpc[+proto]` → HTTP 415 with `grpc-status` 3
//!   (INVALID_ARGUMENT); counted.
//! - Deadline: the shorter of the caller's `grpc-timeout` (less [`DEADLINE_MARGIN`], so this
//!   layer answers before tonic's own timer, which would answer CANCELLED) and
//!   `limits.request_timeout` → DEADLINE_EXCEEDED.
//! - Codes: a request that does not decode (tonic: INTERNAL "failed to decode Protobuf
//!   message", "Unexpected EOF decoding stream", "Missing request message") → INVALID_ARGUMENT;
//!   a message over `limits.max_message_bytes` either way (tonic: OUT_OF_RANGE "message length
//!   too large") → RESOURCE_EXHAUSTED. Fixed in the headers of a trailers-only answer and in
//!   trailers.
//! - Counting: when the status is sent (headers of a trailers-only answer, or trailers); an
//!   answer whose body ends without a status, fails, or is dropped unfinished (the client went
//!   away) is counted `cancelled`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::Frame;
use tonic::Code;
use tonic::body::Body;

use crate::metrics::Metrics;

/// How much earlier than the caller's `grpc-timeout` this layer answers DEADLINE_EXCEEDED:
/// tonic's own timer (outside this layer) fires at the timeout itself and answers CANCELLED;
/// tokio's timers tick by the millisecond.
pub const DEADLINE_MARGIN: Duration = Duration::from_millis(1);

/// What the layer needs: the metrics and the server's own time limit per call.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// Metrics that count every answer.
    pub metrics: Arc<Metrics>,
    /// `limits.request_timeout`.
    pub request_timeout: Duration,
}

/// The layer: wraps tonic's routes (`Server::builder().layer(EdgeLayer::new(...))`).
#[derive(Debug, Clone)]
pub struct EdgeLayer {
    cfg: Arc<EdgeConfig>,
}

impl EdgeLayer {
    /// The layer with this configuration.
    pub fn new(cfg: EdgeConfig) -> Self {
        EdgeLayer { cfg: Arc::new(cfg) }
    }
}

impl<S> tower::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge {
            inner,
            cfg: Arc::clone(&self.cfg),
        }
    }
}

/// The service of [`layer`].
#[derive(Debug, Clone)]
pub struct Edge<S> {
    inner: S,
    cfg: Arc<EdgeConfig>,
}

/// The metrics label of a gRPC code (its name in snake case).
pub fn outcome(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The call's deadline: the caller's `grpc-timeout` less [`DEADLINE_MARGIN`], at most
/// `request_timeout`.
pub fn deadline(headers: &HeaderMap, request_timeout: Duration) -> Duration {
    let mut metadata = tonic::metadata::MetadataMap::from_headers(HeaderMap::new());
    if let Some(v) = headers.get("grpc-timeout") {
        metadata.as_mut().insert("grpc-timeout", v.clone());
    }
    crate::rpc::grpc_timeout(&metadata)
        .map(|t| t.saturating_sub(DEADLINE_MARGIN))
        .map_or(request_timeout, |t| t.min(request_timeout))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.trim().to_ascii_lowercase();
            ct == "application/grpc"
                || ct.starts_with("application/grpc+proto")
                || ct.starts_with("application/grpc;")
        })
}

/// Puts tonic's codes right in a header map holding `grpc-status`; returns the final code.
fn fix_codes(h: &mut HeaderMap) -> Option<Code> {
    let code = Code::from_bytes(h.get("grpc-status")?.as_bytes());
    let message = h
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(|m| m.replace("%20", " "))
        .unwrap_or_default();
    let fixed = match code {
        Code::OutOfRange if message.contains("message length too large") => Code::ResourceExhausted,
        Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message.starts_with("Unexpected EOF decoding stream")
                || message.starts_with("Missing request message") =>
        {
            Code::InvalidArgument
        }
        other => other,
    };
    if fixed != code {
        h.insert("grpc-status", HeaderValue::from(fixed as i32));
    }
    Some(fixed)
}

/// One call being answered: counted once, when its status is known or when it is dropped.
#[derive(Debug)]
struct Call {
    metrics: Arc<Metrics>,
    rpc: &'static str,
    started: Instant,
    counted: bool,
}

impl Call {
    fn finish(&mut self, code: Code) {
        if !self.counted {
            self.counted = true;
            self.metrics.observe_call(
                self.rpc,
                outcome(code),
                self.started.elapsed().as_secs_f64(),
            );
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The answer never reached its status: the client went away, or the stream failed.
        self.finish(Code::Cancelled);
    }
}

/// A trailers-only answer: HTTP `http`, `grpc-status` and `grpc-message`.
fn answer(http: StatusCode, code: Code, message: &str) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = http;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    h.insert("grpc-status", HeaderValue::from(code as i32));
    let encoded: String = message
        .bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    if let Ok(v) = HeaderValue::from_str(&encoded) {
        h.insert("grpc-message", v);
    }
    r
}

impl<S, B> tower::Service<Request<B>> for Edge<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let mut call = Call {
            metrics: Arc::clone(&self.cfg.metrics),
            rpc: crate::rpc::label(req.uri().path()),
            started: Instant::now(),
            counted: false,
        };
        if !is_grpc(req.headers()) {
            let ct = req
                .headers()
                .get(http::header::CONTENT_TYPE)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            call.finish(Code::InvalidArgument);
            let message = format!(
                "content-type {:?} is not gRPC: expected application/grpc",
                crate::error::clip(&ct, 64)
            );
            return Box::pin(std::future::ready(Ok(answer(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Code::InvalidArgument,
                &message,
            ))));
        }
        let deadline = deadline(req.headers(), self.cfg.request_timeout);
        if deadline.is_zero() {
            // Passed on arrival (a deadline within DEADLINE_MARGIN): no work is started.
            call.finish(Code::DeadlineExceeded);
            return Box::pin(std::future::ready(Ok(answer(
                StatusCode::OK,
                Code::DeadlineExceeded,
                "deadline exceeded on arrival (the caller's grpc-timeout)",
            ))));
        }
        // The timer starts now, before tonic decodes the request: a slow body counts.
        let sleep = tokio::time::sleep(deadline);
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = tokio::select! {
                biased;
                r = fut => r,
                () = sleep => {
                    call.finish(Code::DeadlineExceeded);
                    return Ok(answer(
                        StatusCode::OK,
                        Code::DeadlineExceeded,
                        &format!(
                            "deadline exceeded after {deadline:?} (the caller's grpc-timeout \
                             or limits.request_timeout)"
                        ),
                    ));
                }
            };
            let mut response = match result {
                Ok(r) => r,
                Err(e) => {
                    // tonic's routes do not fail; counted as the client would see it.
                    call.finish(Code::Internal);
                    return Err(e);
                }
            };
            if let Some(code) = fix_codes(response.headers_mut()) {
                // Trailers-only: the status is in the headers.
                call.finish(code);
                return Ok(response);
            }
            Ok(response.map(|body| {
                Body::new(Counted {
                    inner: body,
                    call: Some(call),
                })
            }))
        })
    }
}

/// A response body that fixes the codes in its trailers and counts the call when they pass.
#[derive(Debug)]
struct Counted {
    inner: Body,
    call: Option<Call>,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(mut frame))) => {
                if let Some(trailers) = frame.trailers_mut() {
                    let code = fix_codes(trailers).unwrap_or(Code::Unknown);
                    if let Some(mut c) = self.call.take() {
                        c.finish(code);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                if let Some(mut c) = self.call.take() {
                    c.finish(Code::Cancelled);
                }
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                // Ended without trailers: the client reads no status (its library reports
                // an error); counted with the dropped ones.
                self.call.take();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_put_right() {
        let fixed = |code: Code, message: &str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-status", HeaderValue::from(code as i32));
            h.insert(
                "grpc-message",
                HeaderValue::from_str(&message.replace(' ', "%20")).expect("value"),
            );
            let c = fix_codes(&mut h);
            assert_eq!(
                h.get("grpc-status").map(|v| Code::from_bytes(v.as_bytes())),
                c
            );
            c
        };
        assert_eq!(
            fixed(
                Code::Internal,
                "failed to decode Protobuf message: invalid wire type"
            ),
            Some(Code::InvalidArgument)
        );
        assert_eq!(
            fixed(
                Code::OutOfRange,
                "Error, decoded message length too large: found 9 bytes"
            ),
            Some(Code::ResourceExhausted)
        );
        assert_eq!(
            fixed(Code::Internal, "internal error: x"),
            Some(Code::Internal)
        );
        assert_eq!(fix_codes(&mut HeaderMap::new()), None);
    }

    #[test]
    fn deadlines() {
        let mut h = HeaderMap::new();
        let ten = Duration::from_secs(10);
        assert_eq!(deadline(&h, ten), ten);
        h.insert("grpc-timeout", HeaderValue::from_static("1m"));
        assert_eq!(deadline(&h, ten), Duration::ZERO);
        h.insert("grpc-timeout", HeaderValue::from_static("100m"));
        assert_eq!(deadline(&h, ten), Duration::from_millis(99));
        h.insert("grpc-timeout", HeaderValue::from_static("1H"));
        assert_eq!(deadline(&h, ten), ten);
    }

    #[test]
    fn content_types() {
        let ct = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(v));
            is_grpc(&h)
        };
        assert!(ct("application/grpc"));
        assert!(ct("application/grpc+proto"));
        assert!(!ct("application/grpc+json"));
        assert!(!ct("application/json"));
        assert!(!ct("text/plain"));
        assert!(!is_grpc(&HeaderMap::new()));
    }
}
