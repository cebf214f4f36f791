//! Prometheus metrics (prometheus-client; built in `main` and passed down; the registry is
//! served by `gpusched_runtime::metrics`).

use std::sync::Arc;

use gpusched_engine::Reason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcLabels {
    rpc: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RpcOnly {
    rpc: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    rpc: &'static str,
    node_policy: &'static str,
    gpu_policy: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartLabels {
    part: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

fn latency_histogram() -> Histogram {
    // 10 µs .. ~5 s
    Histogram::new(exponential_buckets(0.000_01, 2.0, 20))
}

fn bytes_histogram() -> Histogram {
    // 64 B .. 1 GiB
    Histogram::new(exponential_buckets(64.0, 4.0, 13))
}

fn nodes_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

/// Registers the node cache's families and returns their handles.
fn register_node_cache(registry: &mut Registry) -> crate::cache::nodes::CacheMetrics {
    use crate::cache::digest::Part;
    let family = |registry: &mut Registry, name: &str, help: &str| {
        let f = Family::<PartLabels, Counter>::default();
        registry.register(name, help, f.clone());
        [Part::Inventory, Part::Usage]
            .map(|p| f.get_or_create(&PartLabels { part: p.as_str() }).clone())
    };
    let hits = family(
        registry,
        "node_cache_hits",
        "Node parts sent by reference and found in the node cache, by part (inventory, usage)",
    );
    let misses = family(
        registry,
        "node_cache_misses",
        "Node parts sent by reference and not held (answered FAILED_PRECONDITION), by part",
    );
    let inserts = family(
        registry,
        "node_cache_inserts",
        "Node parts received inline, converted and added to the node cache, by part",
    );
    let evictions = Counter::default();
    registry.register(
        "node_cache_evictions",
        "Node cache entries evicted to stay within node_cache.max_bytes/max_entries",
        evictions.clone(),
    );
    let bytes = Gauge::default();
    registry.register(
        "node_cache_bytes",
        "Estimated bytes held by the node cache (bounded by node_cache.max_bytes)",
        bytes.clone(),
    );
    let entries = Gauge::default();
    registry.register(
        "node_cache_entries",
        "Entries held by the node cache (bounded by node_cache.max_entries)",
        entries.clone(),
    );
    crate::cache::nodes::CacheMetrics {
        hits,
        misses,
        inserts,
        evictions,
        bytes,
        entries,
    }
}

/// Registers the node set cache's families and returns their handles.
fn register_node_sets(registry: &mut Registry) -> crate::cache::sets::SetMetrics {
    let m = crate::cache::sets::SetMetrics::default();
    for (name, help, c) in [
        (
            "node_sets_hits",
            "Requests whose base node set (NodeSetRef.base) was held",
            &m.hits,
        ),
        (
            "node_sets_misses",
            "Requests whose base node set was not held (answered FAILED_PRECONDITION)",
            &m.misses,
        ),
        (
            "node_sets_inserts",
            "Node sets kept (NodeSetRef.keep)",
            &m.inserts,
        ),
        (
            "node_sets_evictions",
            "Node sets evicted to stay within node_cache.max_sets/max_set_bytes",
            &m.evictions,
        ),
    ] {
        registry.register(name, help, c.clone());
    }
    registry.register(
        "node_sets_bytes",
        "Estimated bytes held by node sets, each node counted in full (bounded by node_cache.max_set_bytes)",
        m.bytes.clone(),
    );
    registry.register(
        "node_sets_entries",
        "Node sets held (bounded by node_cache.max_sets)",
        m.entries.clone(),
    );
    m
}

/// A call in flight (`gpusched_requests_in_flight`), until dropped.
#[derive(Debug)]
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The service's metric families.
#[derive(Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RpcLabels, Counter>,
    latency: Family<RpcLabels, Histogram, fn() -> Histogram>,
    decisions: Family<DecisionLabels, Counter>,
    rejections: Family<ReasonLabels, Counter>,
    nodes: Family<RpcOnly, Histogram, fn() -> Histogram>,
    request_bytes: Family<RpcOnly, Histogram, fn() -> Histogram>,
    victims: Histogram,
    in_flight: Gauge,
    /// Accept errors of the gRPC listener (`gpusched_accept_errors_total`).
    pub accept_errors: Counter,
    /// Handles of the node cache's metrics (`gpusched_node_cache_*`).
    pub node_cache: crate::cache::nodes::CacheMetrics,
    /// Handles of the node set cache's metrics (`gpusched_node_sets_*`).
    pub node_sets: crate::cache::sets::SetMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family in a new registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("gpusched");
        let requests = Family::<RpcLabels, Counter>::default();
        let latency = Family::<RpcLabels, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram,
        );
        let decisions = Family::<DecisionLabels, Counter>::default();
        let rejections = Family::<ReasonLabels, Counter>::default();
        let nodes =
            Family::<RpcOnly, Histogram, fn() -> Histogram>::new_with_constructor(nodes_histogram);
        registry.register(
            "requests",
            "gRPC calls by RPC (unknown for other paths) and outcome (the gRPC code the client reads, snake case)",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "gRPC call latency by RPC and outcome",
            latency.clone(),
        );
        registry.register(
            "decisions",
            "Placement decisions by policy and result",
            decisions.clone(),
        );
        registry.register(
            "node_rejections",
            "Nodes rejected, by reason (one per reason per node)",
            rejections.clone(),
        );
        registry.register(
            "request_nodes",
            "Candidate nodes per request",
            nodes.clone(),
        );
        let request_bytes =
            Family::<RpcOnly, Histogram, fn() -> Histogram>::new_with_constructor(bytes_histogram);
        registry.register(
            "request_size_bytes",
            "Size of the decoded gRPC request message (protobuf encoding) by RPC",
            request_bytes.clone(),
        );
        let victims = Histogram::new([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]);
        registry.register(
            "preemption_victims",
            "Victims on the chosen node per Preempt call that chose one (result evict)",
            victims.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "requests_in_flight",
            "gRPC calls being handled now",
            in_flight.clone(),
        );
        let accept_errors = Counter::default();
        registry.register(
            "accept_errors",
            "Errors accepting gRPC connections (e.g. the open-files limit), each followed by a back-off",
            accept_errors.clone(),
        );
        let node_cache = register_node_cache(&mut registry);
        let node_sets = register_node_sets(&mut registry);
        Metrics {
            accept_errors,
            request_bytes,
            victims,
            in_flight,
            node_cache,
            node_sets,
            registry: Arc::new(registry),
            requests,
            latency,
            decisions,
            rejections,
            nodes,
        }
    }

    /// One finished call.
    pub fn observe_call(&self, rpc: &'static str, outcome: &'static str, seconds: f64) {
        let labels = RpcLabels { rpc, outcome };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    /// Size of one decoded request message.
    pub fn observe_request_bytes(&self, rpc: &'static str, bytes: usize) {
        self.request_bytes
            .get_or_create(&RpcOnly { rpc })
            .observe(bytes as f64);
    }

    /// Counts a call in flight until the guard is dropped.
    pub fn in_flight(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Candidate nodes of one call.
    pub fn observe_nodes(&self, rpc: &'static str, nodes: usize) {
        self.nodes
            .get_or_create(&RpcOnly { rpc })
            .observe(nodes as f64);
    }

    /// One placement decision.
    pub fn decision(
        &self,
        rpc: &'static str,
        node_policy: &'static str,
        gpu_policy: &str,
        result: &'static str,
    ) {
        self.decisions
            .get_or_create(&DecisionLabels {
                rpc,
                node_policy,
                gpu_policy: gpu_policy.to_owned(),
                result,
            })
            .inc();
    }

    /// The victims of one Preempt call that chose a node.
    pub fn victims(&self, n: usize) {
        self.victims.observe(n as f64);
    }

    /// Rejected nodes per reason (already summed over a request).
    pub fn rejections(&self, counts: &[(Reason, u64)]) {
        for (reason, n) in counts {
            if *n > 0 {
                self.rejections
                    .get_or_create(&ReasonLabels {
                        reason: reason.as_str(),
                    })
                    .inc_by(*n);
            }
        }
    }

    /// The registry holding every family (what the metrics endpoint serves).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        gpusched_runtime::metrics::encode(&self.registry).unwrap_or_default()
    }
}
