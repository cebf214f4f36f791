//! Prometheus metrics of the agent loop (prometheus-client), served at `/metrics` on the
//! health endpoint (`http.listen`) by `gpusched_runtime::metrics::router`, with the process
//! metrics and `gpusched_build_info`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Prefix of the agent's families.
pub const PREFIX: &str = "gpusched_agent";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    step: &'static str,
    result: &'static str,
}

fn latency() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(0.000_1, 2.0, 21))
}

/// The agent's metric families.
#[derive(Debug)]
pub struct AgentMetrics {
    registry: Arc<Registry>,
    steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    cards: Gauge,
    healthy_cards: Gauge,
    failures: Gauge,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix(PREFIX);
        let steps =
            Family::<StepLabels, Histogram, fn() -> Histogram>::new_with_constructor(latency);
        registry.register(
            "step_duration_seconds",
            "Latency of the publish loop's steps: step = read (NVML), normalize (the service), \
             publish (Node annotations / file), round (all of one round); result = ok | error",
            steps.clone(),
        );
        let cards = Gauge::default();
        registry.register("cards", "Cards in the last publication", cards.clone());
        let healthy_cards = Gauge::default();
        registry.register(
            "healthy_cards",
            "Healthy cards in the last publication",
            healthy_cards.clone(),
        );
        let failures = Gauge::default();
        registry.register(
            "consecutive_failures",
            "Rounds that failed in a row (0 after a successful round)",
            failures.clone(),
        );
        AgentMetrics {
            registry: Arc::new(registry),
            steps,
            cards,
            healthy_cards,
            failures,
        }
    }
}

impl AgentMetrics {
    /// One step of the loop took `took`.
    pub fn step(&self, step: &'static str, ok: bool, took: Duration) {
        let result = if ok { "ok" } else { "error" };
        self.steps
            .get_or_create(&StepLabels { step, result })
            .observe(took.as_secs_f64());
    }

    /// After a publication.
    pub fn published(&self, cards: usize, healthy: usize) {
        self.cards.set(i64::try_from(cards).unwrap_or(i64::MAX));
        self.healthy_cards
            .set(i64::try_from(healthy).unwrap_or(i64::MAX));
    }

    /// Rounds failed in a row.
    pub fn failures(&self, n: u32) {
        self.failures.set(i64::from(n));
    }

    /// The registry (what `/metrics` serves).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }
}
