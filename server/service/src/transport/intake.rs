//! The intake of a call, in front of decoding: a tower layer that receives the request message
//! of every `PlacementService` and `InventoryService` call before tonic decodes it.
//!
//! - **Declared sizes are not trusted.** The gRPC prefix's length is checked against
//!   `limits.max_message_bytes` and charged to the memory budget before any of the message is
//!   received; the message is buffered as it arrives (never allocated at its declared size), and
//!   tonic sees it only once it is whole.
//! - **One memory budget for calls.** `limits.max_in_flight_bytes` (KiB permits of a semaphore):
//!   each call is charged twice its declared size while its message arrives, then the estimate of
//!   [`prescan`] (request, decoded and converted structures, answer), until its answer is
//!   ready. A call that does not fit is answered RESOURCE_EXHAUSTED at once (with RetryInfo: the
//!   budget frees as other calls end); it never waits holding memory.
//! - **Limits before decoding.** [`prescan::scan`] counts every repeated field on the wire: a
//!   request over a limit is refused before it becomes structures.
//! - **Slow bodies end.** The body must arrive whole, up to its end, within
//!   `limits.body_timeout`, or the call ends DEADLINE_EXCEEDED and its memory is released.
//!
//! - **Large calls off the async workers.** A message of 64 KiB or more is counted, decoded and
//!   decided on one blocking-pool thread, so decoding megabytes never delays health checks or
//!   the intake of other calls.
//!
//! The estimates travel to the handler as a request extension ([`Admission`]).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body as _, Frame};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::body::Body;

use crate::config::Limits;
use crate::error::ServiceError;
use crate::rpc::{Admission, Rpc};
use crate::transport::prescan;
use gpusched_api::NODE_REFS_HEADER;

/// Bytes per permit of the memory budget (a semaphore counts at most `u32` permits at once).
const UNIT: usize = 1024;

/// The gRPC message prefix: compressed flag and big-endian length.
const PREFIX: usize = 5;

/// The memory budget of the calls in flight (`limits.max_in_flight_bytes`).
#[derive(Debug)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        MemoryBudget {
            permits: Arc::new(Semaphore::new(limit.div_ceil(UNIT))),
            limit,
        }
    }

    /// Bytes free now.
    pub fn free(&self) -> usize {
        self.permits.available_permits().saturating_mul(UNIT)
    }

    /// Charges `bytes` more to `held` (or a new charge): RESOURCE_EXHAUSTED when they are not
    /// free.
    fn charge(
        &self,
        held: Option<OwnedSemaphorePermit>,
        bytes: usize,
    ) -> Result<OwnedSemaphorePermit, ServiceError> {
        let want = bytes.div_ceil(UNIT);
        let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let busy = || ServiceError::MemoryBusy {
            needed: bytes,
            free: self.free(),
            limit: self.limit,
        };
        let more = u32::try_from(want.saturating_sub(have)).map_err(|_| busy())?;
        let mut permit = match held {
            Some(p) if more == 0 => return Ok(p),
            Some(p) => p,
            None => Arc::clone(&self.permits)
                .try_acquire_many_owned(more)
                .map_err(|_| busy())?,
        };
        if permit.num_permits() < want {
            let extra = Arc::clone(&self.permits)
                .try_acquire_many_owned(more)
                .map_err(|_| busy())?;
            permit.merge(extra);
        }
        Ok(permit)
    }
}

/// The layer (see the module documentation).
#[derive(Clone, Debug)]
pub struct IntakeLayer {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: Limits,
    budget: MemoryBudget,
}

impl IntakeLayer {
    /// The layer for these limits.
    pub fn new(limits: &Limits) -> Self {
        IntakeLayer {
            shared: Arc::new(Shared {
                budget: MemoryBudget::new(limits.max_in_flight_bytes),
                limits: limits.clone(),
            }),
        }
    }
}

impl<S> tower::Layer<S> for IntakeLayer {
    type Service = Intake<S>;

    fn layer(&self, inner: S) -> Intake<S> {
        Intake {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service of [`IntakeLayer`].
#[derive(Clone, Debug)]
pub struct Intake<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, R> tower::Service<http::Request<Body>> for Intake<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<R>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let Some(rpc) = Rpc::from_path(req.uri().path()) else {
            return Box::pin(self.inner.call(req));
        };
        // The service that was polled ready serves this call; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            let arrived = Instant::now();
            let (mut parts, body) = req.into_parts();
            let received = match shared.receive(body).await {
                Ok(r) => r,
                Err(e) => return Ok(refusal(rpc, e)),
            };
            let offload = received
                .counted
                .as_ref()
                .is_some_and(|m| m.len() >= OFFLOAD_BYTES);
            let serve = async move {
                let received = match shared.admit(rpc, received) {
                    Ok(r) => r,
                    Err(e) => return Ok(refusal(rpc, e)),
                };
                if let Some(mut a) = received.admission {
                    a.offloaded = offload;
                    parts.extensions.insert(a);
                }
                remaining_timeout(&mut parts.headers, arrived);
                let response = inner
                    .call(http::Request::from_parts(parts, received.body))
                    .await;
                // The call's memory is released once its answer is ready.
                drop(received.charge);
                response
            };
            if !offload {
                return serve.await;
            }
            // When this future is dropped (the caller reset the stream, or tonic's timer for its
            // grpc-timeout fired), `gone` ends the offloaded call too: its handler is dropped,
            // which stops its decision.
            let (_here, gone) = tokio::sync::oneshot::channel::<()>();
            let handle = tokio::runtime::Handle::current();
            let offloaded = tokio::task::spawn_blocking(move || {
                handle.block_on(async move {
                    tokio::select! {
                        biased;
                        _ = gone => None,
                        response = serve => Some(response),
                    }
                })
            });
            match offloaded.await {
                Ok(Some(response)) => response,
                Ok(None) => Ok(tonic::Status::cancelled("the caller went away").into_http()),
                Err(e) => Ok(refusal(
                    rpc,
                    ServiceError::Internal(format!("call task failed: {e}")),
                )),
            }
        })
    }
}

/// The caller's `grpc-timeout` counts from the call's arrival: the time spent receiving and
/// counting its message is taken off, so the handler's deadline (and the decision's) is the
/// caller's, not one restarted after decoding.
fn remaining_timeout(headers: &mut http::HeaderMap, arrived: Instant) {
    let md = tonic::metadata::MetadataMap::from_headers(headers.clone());
    let Some(timeout) = crate::rpc::grpc_timeout(&md) else {
        return;
    };
    let left = timeout.saturating_sub(arrived.elapsed());
    // At most 8 digits (the gRPC wire format): microseconds up to 100 s, then milliseconds.
    let value = if left.as_micros() < 100_000_000 {
        format!("{}u", left.as_micros())
    } else {
        format!("{}m", left.as_millis().min(99_999_999))
    };
    if let Ok(v) = http::HeaderValue::from_str(&value) {
        headers.insert("grpc-timeout", v);
    }
}

/// A call refused at intake, as tonic would answer it (trailers only).
fn refusal<R: Default>(rpc: Rpc, e: ServiceError) -> http::Response<R> {
    let mut status = tonic::Status::from(e);
    if rpc.is_placement() {
        status.metadata_mut().insert(
            NODE_REFS_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
    }
    status.into_http()
}

/// A request whose message was received whole (or that is passed on as it came).
struct Received {
    body: Body,
    charge: Option<OwnedSemaphorePermit>,
    /// The whole message, prefix included, still to be counted (uncompressed ones).
    counted: Option<Bytes>,
    admission: Option<Admission>,
}

/// Messages from this size on are counted, decoded and decided on the blocking pool (one
/// thread for the whole call), off the async workers that answer health and receive the other
/// calls.
const OFFLOAD_BYTES: usize = 64 << 10;

impl Shared {
    /// Receives the first message of the body within the body timeout, charging the budget;
    /// counts it; hands on a body that replays it.
    async fn receive(&self, mut body: Body) -> Result<Received, ServiceError> {
        let limits = &self.limits;
        let deadline = Instant::now() + limits.body_timeout;
        let mut chunks: VecDeque<Bytes> = VecDeque::new();
        let mut have = 0usize;
        let mut charge = None;
        let mut need: Option<usize> = None;
        let mut compressed = false;
        let mut end = End::Open;
        loop {
            if need.is_some_and(|n| have >= n) {
                break;
            }
            let next = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
            let frame = match tokio::time::timeout_at(deadline, next).await {
                Err(_) => return Err(ServiceError::BodyTimeout(limits.body_timeout)),
                Ok(None) => {
                    end = End::Ended(None);
                    break;
                }
                Ok(Some(Err(status))) => {
                    end = End::Failed(status);
                    break;
                }
                Ok(Some(Ok(frame))) => frame,
            };
            match frame.into_data() {
                Ok(data) => {
                    have += data.len();
                    chunks.push_back(data);
                }
                Err(frame) => {
                    end = End::Ended(frame.into_trailers().ok());
                    break;
                }
            }
            if need.is_none() && have >= PREFIX {
                let mut prefix = [0u8; PREFIX];
                copy_prefix(&chunks, &mut prefix);
                compressed = prefix[0] != 0;
                let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                crate::pipeline::limits::message(len, limits)?;
                let framed = PREFIX + len;
                // Receiving: the chunks, then joining them.
                charge = Some(self.budget.charge(charge, 2 * framed)?);
                need = Some(framed);
            }
        }
        let Some(framed) = need.filter(|&n| have >= n) else {
            // Ended (or failed) before one whole message: tonic answers as it always did.
            return Ok(Received {
                body: Body::new(Replay::new(chunks, end, body, false, deadline, limits)),
                charge,
                counted: None,
                admission: None,
            });
        };
        let mut all = join(chunks, have);
        if all.len() > framed {
            // Bytes after the message: a second message, which a unary call may not carry.
            all.truncate(framed);
            end = End::Failed(tonic::Status::invalid_argument(
                "a unary call carries exactly one request message",
            ));
        }
        Ok(Received {
            // This server accepts no compressed requests: tonic refuses them undecoded.
            counted: (!compressed).then(|| all.clone()),
            body: Body::new(Replay::new(
                VecDeque::from([all]),
                end,
                body,
                true,
                deadline,
                limits,
            )),
            charge,
            admission: None,
        })
    }

    /// Counts a whole message ([`prescan::scan`]) and charges its estimate.
    fn admit(&self, rpc: Rpc, mut received: Received) -> Result<Received, ServiceError> {
        let Some(message) = received.counted.take() else {
            return Ok(received);
        };
        let a = prescan::scan(rpc, &message[PREFIX..], &self.limits)?;
        received.charge = Some(
            self.budget
                .charge(received.charge.take(), a.memory.max(message.len()))?,
        );
        received.admission = Some(a);
        Ok(received)
    }
}

/// The first `PREFIX` bytes of the chunks (there are at least that many).
fn copy_prefix(chunks: &VecDeque<Bytes>, out: &mut [u8; PREFIX]) {
    for (o, b) in out.iter_mut().zip(chunks.iter().flat_map(|c| c.iter())) {
        *o = *b;
    }
}

/// The chunks as one contiguous buffer (no copy when there is one chunk).
fn join(mut chunks: VecDeque<Bytes>, len: usize) -> Bytes {
    if chunks.len() == 1
        && let Some(one) = chunks.pop_front()
    {
        return one;
    }
    let mut all = BytesMut::with_capacity(len);
    while let Some(c) = chunks.pop_front() {
        all.extend_from_slice(&c);
    }
    all.freeze()
}

/// How the body ended while its first message was received.
enum End {
    /// Still open: the rest is read from the body.
    Open,
    /// Ended, with trailers or none.
    Ended(Option<http::HeaderMap>),
    /// Failed.
    Failed(tonic::Status),
}

/// The body handed to tonic: the received message, then the rest of the original body, which
/// may hold no further message (a unary call carries one) and must end by the body deadline.
struct Replay {
    chunks: VecDeque<Bytes>,
    /// The message was whole: further data is refused.
    whole: bool,
    rest: Option<Body>,
    end: Option<End>,
    timer: Pin<Box<Sleep>>,
    timeout: std::time::Duration,
}

impl Replay {
    /// `whole`: the chunks are the whole message (further data is refused).
    fn new(
        chunks: VecDeque<Bytes>,
        end: End,
        body: Body,
        whole: bool,
        deadline: Instant,
        limits: &Limits,
    ) -> Self {
        let (rest, end) = match end {
            End::Open => (Some(body), None),
            other => (None, Some(other)),
        };
        Replay {
            chunks,
            whole,
            rest,
            end,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            timeout: limits.body_timeout,
        }
    }
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if let Some(c) = this.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(c))));
        }
        match this.end.take() {
            Some(End::Ended(Some(t))) => return Poll::Ready(Some(Ok(Frame::trailers(t)))),
            Some(End::Ended(None)) => return Poll::Ready(None),
            Some(End::Failed(s)) => return Poll::Ready(Some(Err(s))),
            Some(End::Open) | None => {}
        }
        loop {
            let Some(rest) = this.rest.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(rest).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    // An empty DATA frame (often the one that ends the stream) carries nothing.
                    Ok(d) if d.is_empty() => continue,
                    Ok(d) if !this.whole => return Poll::Ready(Some(Ok(Frame::data(d)))),
                    Ok(_) => {
                        this.rest = None;
                        return Poll::Ready(Some(Err(tonic::Status::invalid_argument(
                            "a unary call carries exactly one request message",
                        ))));
                    }
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.rest = None;
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {
                    return match this.timer.as_mut().poll(cx) {
                        Poll::Ready(()) => {
                            this.rest = None;
                            Poll::Ready(Some(Err(tonic::Status::from(ServiceError::BodyTimeout(
                                this.timeout,
                            )))))
                        }
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.end.is_none() && self.rest.is_none()
    }
}
