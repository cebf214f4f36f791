//! The typed calls, with deadlines, retries on UNAVAILABLE and trace-context propagation.

use std::future::Future;
use std::time::Duration;

use gpusched_api::v1;
use gpusched_api::v1::inventory_service_client::InventoryServiceClient;
use gpusched_api::v1::placement_service_client::PlacementServiceClient;
use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::Code;
use tonic::transport::Channel;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use std::collections::HashSet;
use std::sync::Arc;

use crate::byref::{
    ByRef, NodesRequest, Plan, PreparedNode, SET_SUBJECT_PREFIX, field_back, parse_subject,
};
use crate::error::{ApiError, Error};
use crate::retry::RetryPolicy;

/// A connected client (cheap to clone; calls may run concurrently).
#[derive(Clone, Debug)]
pub struct Client {
    placement: PlacementServiceClient<Channel>,
    inventory: InventoryServiceClient<Channel>,
    timeout: Option<Duration>,
    retry: RetryPolicy,
    /// Automatic nodes-by-reference state (None: nodes always go whole).
    byref: Option<Arc<ByRef>>,
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// The trace context a call carries: the current `tracing` span's when it has an OpenTelemetry
/// span, otherwise OpenTelemetry's current context (a span the caller made with the
/// OpenTelemetry API and attached, e.g. with `opentelemetry::context::FutureExt::with_context`).
fn current_context() -> opentelemetry::Context {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        cx
    } else {
        opentelemetry::Context::current()
    }
}

impl Client {
    pub(crate) fn new(
        placement: PlacementServiceClient<Channel>,
        inventory: InventoryServiceClient<Channel>,
        timeout: Option<Duration>,
        retry: RetryPolicy,
        by_reference: bool,
    ) -> Self {
        Client {
            placement,
            inventory,
            timeout,
            retry,
            byref: by_reference.then(|| Arc::new(ByRef::default())),
        }
    }

    /// Whether the server has shown (by the `gpusched-node-refs` response header) that it reads
    /// nodes by reference; until then nodes go whole even when [`Client::by_reference`] is on.
    pub fn server_reads_refs(&self) -> bool {
        self.byref.as_ref().is_some_and(|b| b.server_reads_refs())
    }

    /// Whether nodes go by reference (see [`crate::ClientBuilder::by_reference`]).
    pub fn by_reference(&self) -> bool {
        self.byref.is_some()
    }

    /// The digest (`sha256/<hex>/<size>`) of the node set this client names as its base, if any.
    pub fn node_set_base(&self) -> Option<String> {
        self.byref
            .as_ref()
            .and_then(|b| b.base_key())
            .map(|k| crate::byref::subject(&k))
    }

    /// Number of node parts (inventories, usages) the server acknowledged on this client.
    pub fn acknowledged_parts(&self) -> usize {
        self.byref.as_ref().map_or(0, |b| b.known_len())
    }

    /// Sends `msg` with its nodes by reference when the automatic mode is on: parts the server
    /// acknowledged go as digests; on FAILED_PRECONDITION listing missing digests, those parts
    /// are resent inline (once per digest). Field violations are named after `nodes[i]`.
    async fn with_nodes<T, R, F, Fut>(&self, mut msg: T, call: F) -> Result<R, Error>
    where
        T: NodesRequest,
        F: FnMut(tonic::Request<T>) -> Fut + Clone,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let Some(byref) = &self.byref else {
            return self.with_retry(msg, call).await;
        };
        // Whole until the server has shown it reads references (an older one ignores them).
        if !byref.server_reads_refs() {
            return self.with_retry(msg, call).await;
        }
        let Some(nodes) = msg.take_nodes() else {
            return self.with_retry(msg, call).await;
        };
        let prepared = byref.prepare(nodes);
        self.with_prepared(msg, &prepared, call).await
    }

    /// Sends `msg` with `prepared` as its nodes: by reference (and as changes to the kept node
    /// set) when the automatic mode is on and the server reads references, else whole.
    async fn with_prepared<T, R, F, Fut>(
        &self,
        mut msg: T,
        prepared: &[Arc<PreparedNode>],
        call: F,
    ) -> Result<R, Error>
    where
        T: NodesRequest,
        F: FnMut(tonic::Request<T>) -> Fut + Clone,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let byref = match &self.byref {
            Some(b) if b.server_reads_refs() => b,
            _ => {
                msg.put_nodes(prepared.iter().map(|p| p.to_node()).collect());
                msg.set_refs(Vec::new(), None);
                return self.with_retry(msg, call).await;
            }
        };
        msg.put_nodes(Vec::new());
        let mut force_inline: HashSet<crate::byref::Key> = HashSet::new();
        let mut plan = byref.plan(prepared);
        loop {
            let mut m = msg.clone();
            let (set, refs) = plan.request(byref, prepared, &force_inline);
            m.set_refs(refs, set);
            match self.with_retry(m, call.clone()).await {
                Ok(r) => {
                    byref.acknowledge(&plan.sent(prepared));
                    if let Plan::Full { keep: true } = plan {
                        byref.kept(prepared);
                    }
                    return Ok(r);
                }
                Err(Error::Api(e)) if e.code == Code::FailedPrecondition => {
                    let set_missing: Vec<_> = e
                        .missing_digests
                        .iter()
                        .filter_map(|s| s.strip_prefix(SET_SUBJECT_PREFIX))
                        .filter_map(parse_subject)
                        .collect();
                    let missing: HashSet<_> = e
                        .missing_digests
                        .iter()
                        .filter_map(|s| parse_subject(s))
                        .collect();
                    byref.forget(&missing);
                    if let Plan::Delta { base, .. } = &plan
                        && set_missing.contains(&base.key)
                    {
                        // The replica does not hold the set: send everything, kept again (once:
                        // a full plan never names a base).
                        byref.drop_base(&base.key);
                        plan = Plan::Full { keep: true };
                        continue;
                    }
                    // Only some missing parts listed: send every part inline (once).
                    if e.missing_more {
                        let all: HashSet<_> = prepared
                            .iter()
                            .flat_map(|p| [Some(p.inventory_key()), p.usage_key()])
                            .flatten()
                            .collect();
                        if all.is_subset(&force_inline) {
                            return Err(Error::Api(e));
                        }
                        byref.forget(&all);
                        force_inline.extend(all);
                        continue;
                    }
                    // Resend each missing part inline once; a part missing again after it was
                    // sent inline (impossible with a conforming server) ends the call.
                    if missing.is_empty() || !missing.is_disjoint(&force_inline) {
                        return Err(Error::Api(e));
                    }
                    force_inline.extend(missing);
                }
                Err(Error::Api(mut e)) => {
                    let back = |f: &str| field_back(f, |j| plan.position(j));
                    for v in e.field_violations.iter_mut().chain(&mut e.quota_violations) {
                        v.field = back(&v.field);
                    }
                    if let Some(field) = e
                        .error_info
                        .as_mut()
                        .and_then(|i| i.metadata.get_mut("field"))
                    {
                        *field = back(field);
                    }
                    return Err(Error::Api(e));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A request with the deadline and the current trace context (see [`current_context`]).
    fn request<T>(&self, msg: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(msg);
        if let Some(t) = self.timeout {
            req.set_timeout(t);
        }
        TraceContextPropagator::new().inject_context(
            &current_context(),
            &mut MetadataInjector(req.metadata_mut()),
        );
        req
    }

    async fn with_retry<T, R, F, Fut>(&self, msg: T, mut call: F) -> Result<R, Error>
    where
        T: Clone,
        F: FnMut(tonic::Request<T>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let mut attempt = 1;
        loop {
            let answer = call(self.request(msg.clone())).await;
            if let Some(b) = &self.byref {
                b.note(match &answer {
                    Ok(r) => r.metadata(),
                    Err(s) => s.metadata(),
                });
            }
            match answer {
                Ok(r) => return Ok(r.into_inner()),
                Err(s) if s.code() == Code::Unavailable && attempt < self.retry.max_attempts => {
                    tokio::time::sleep(self.retry.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(s) => return Err(Error::Api(ApiError::from_status(&s))),
            }
        }
    }

    /// Which nodes can host the workload.
    pub async fn filter_request(
        &self,
        req: v1::FilterRequest,
    ) -> Result<v1::FilterResponse, Error> {
        let c = self.placement.clone();
        self.with_nodes(req, move |r| {
            let mut c = c.clone();
            async move { c.filter(r).await }
        })
        .await
    }

    /// Node scores, most preferred first.
    pub async fn score_request(&self, req: v1::ScoreRequest) -> Result<v1::ScoreResponse, Error> {
        let c = self.placement.clone();
        self.with_nodes(req, move |r| {
            let mut c = c.clone();
            async move { c.score(r).await }
        })
        .await
    }

    /// The node and cards for one workload.
    pub async fn allocate_request(
        &self,
        req: v1::AllocateRequest,
    ) -> Result<v1::AllocationResult, Error> {
        let c = self.placement.clone();
        let resp: v1::AllocateResponse = self
            .with_nodes(req, move |r| {
                let mut c = c.clone();
                async move { c.allocate(r).await }
            })
            .await?;
        resp.result
            .ok_or(Error::Malformed("AllocateResponse.result"))
    }

    /// [`Client::filter_request`] over nodes prepared by the caller (kept beside its cluster
    /// view and rebuilt only when a node changes); `req.nodes` and `req.node_refs` are ignored.
    /// Nothing is converted per call: unchanged nodes go as the kept node set.
    pub async fn filter_prepared(
        &self,
        req: v1::FilterRequest,
        nodes: &[Arc<PreparedNode>],
    ) -> Result<v1::FilterResponse, Error> {
        let c = self.placement.clone();
        self.with_prepared(req, nodes, move |r| {
            let mut c = c.clone();
            async move { c.filter(r).await }
        })
        .await
    }

    /// [`Client::score_request`] over prepared nodes (see [`Client::filter_prepared`]).
    pub async fn score_prepared(
        &self,
        req: v1::ScoreRequest,
        nodes: &[Arc<PreparedNode>],
    ) -> Result<v1::ScoreResponse, Error> {
        let c = self.placement.clone();
        self.with_prepared(req, nodes, move |r| {
            let mut c = c.clone();
            async move { c.score(r).await }
        })
        .await
    }

    /// [`Client::allocate_request`] over prepared nodes (see [`Client::filter_prepared`]).
    pub async fn allocate_prepared(
        &self,
        req: v1::AllocateRequest,
        nodes: &[Arc<PreparedNode>],
    ) -> Result<v1::AllocationResult, Error> {
        let c = self.placement.clone();
        let resp: v1::AllocateResponse = self
            .with_prepared(req, nodes, move |r| {
                let mut c = c.clone();
                async move { c.allocate(r).await }
            })
            .await?;
        resp.result
            .ok_or(Error::Malformed("AllocateResponse.result"))
    }

    /// Who must leave which node so that a pending workload of higher priority fits
    /// (docs/placement-semantics.md section 9); nothing is evicted. Nodes go by reference and
    /// as node-set changes like Filter and Allocate.
    pub async fn preempt_request(
        &self,
        req: v1::PreemptRequest,
    ) -> Result<v1::PreemptResponse, Error> {
        let c = self.placement.clone();
        self.with_nodes(req, move |r| {
            let mut c = c.clone();
            async move { c.preempt(r).await }
        })
        .await
    }

    /// [`Client::preempt_request`] over prepared nodes (see [`Client::filter_prepared`]).
    pub async fn preempt_prepared(
        &self,
        req: v1::PreemptRequest,
        nodes: &[Arc<PreparedNode>],
    ) -> Result<v1::PreemptResponse, Error> {
        let c = self.placement.clone();
        self.with_prepared(req, nodes, move |r| {
            let mut c = c.clone();
            async move { c.preempt(r).await }
        })
        .await
    }

    /// A list of workloads placed one after another.
    pub async fn allocate_batch(
        &self,
        req: v1::AllocateBatchRequest,
    ) -> Result<v1::AllocateBatchResponse, Error> {
        let c = self.placement.clone();
        self.with_nodes(req, move |r| {
            let mut c = c.clone();
            async move { c.allocate_batch(r).await }
        })
        .await
    }

    /// Parses and validates a workload.
    pub async fn validate_workload(
        &self,
        workload: v1::Workload,
    ) -> Result<v1::ValidateWorkloadResponse, Error> {
        let c = self.placement.clone();
        let req = v1::ValidateWorkloadRequest {
            workload: Some(workload),
            options: None,
        };
        self.with_retry(req, move |r| {
            let mut c = c.clone();
            async move { c.validate_workload(r).await }
        })
        .await
    }

    /// Normalises one node's raw cards.
    pub async fn normalize_inventory(
        &self,
        req: v1::NormalizeInventoryRequest,
    ) -> Result<v1::NormalizeInventoryResponse, Error> {
        let c = self.inventory.clone();
        self.with_retry(req, move |r| {
            let mut c = c.clone();
            async move { c.normalize_inventory(r).await }
        })
        .await
    }

    /// Shorthand: filter `workload` over `nodes` with the server's defaults.
    pub async fn filter(
        &self,
        nodes: Vec<v1::Node>,
        workload: v1::Workload,
    ) -> Result<v1::FilterResponse, Error> {
        self.filter_request(v1::FilterRequest {
            nodes,
            workload: Some(workload),
            options: None,
            node_refs: Vec::new(),
            node_set: None,
        })
        .await
    }

    /// Shorthand: allocate `workload` over `nodes` with the server's defaults.
    pub async fn allocate(
        &self,
        nodes: Vec<v1::Node>,
        workload: v1::Workload,
    ) -> Result<v1::AllocationResult, Error> {
        self.allocate_request(v1::AllocateRequest {
            node_set: None,
            nodes,
            workload: Some(workload),
            options: None,
            restrict_to_node_names: vec![],
            node_refs: Vec::new(),
        })
        .await
    }
}
