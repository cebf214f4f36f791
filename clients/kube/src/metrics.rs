//! Prometheus metrics (prometheus-client): typed families for the extender calls and the
//! admission reviews, and a collector that reads leadership, informer sync and the assume cache
//! at scrape time.
//!
//! [`registry`] builds the [`Registry`] that `gpusched_runtime::metrics::router` serves at
//! `/metrics` on the extender listener (see `run.rs`).

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::leader::Leadership;
use crate::view::ClusterView;

/// Prefix of every metric name.
pub const PREFIX: &str = "gpusched_kube";

/// An extender call.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ExtenderCall {
    /// `/filter`.
    Filter,
    /// `/prioritize`.
    Prioritize,
    /// `/bind`.
    Bind,
    /// `/preempt` (kube-scheduler's preemptVerb).
    Preempt,
}

impl ExtenderCall {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtenderCall::Filter => "filter",
            ExtenderCall::Prioritize => "prioritize",
            ExtenderCall::Bind => "bind",
            ExtenderCall::Preempt => "preempt",
        }
    }
}

/// How an extender call ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ExtenderOutcome {
    /// Filter or prioritize answered without an error.
    Ok,
    /// Answered with an error (filter `Error`, prioritize 503, bind `Error`).
    Error,
    /// Bound with a GPU decision written into the pod.
    BoundGpu,
    /// Bound without a GPU decision (the pod requests no GPU).
    BoundNoGpu,
}

impl ExtenderOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtenderOutcome::Ok => "ok",
            ExtenderOutcome::Error => "error",
            ExtenderOutcome::BoundGpu => "bound_gpu",
            ExtenderOutcome::BoundNoGpu => "bound_no_gpu",
        }
    }
}

/// An admission webhook.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Webhook {
    /// `/validate`.
    Validate,
    /// `/mutate`.
    Mutate,
}

impl Webhook {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Webhook::Validate => "validate",
            Webhook::Mutate => "mutate",
        }
    }
}

/// How an admission review ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum AdmissionResult {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with a JSON patch.
    Patched,
    /// Denied.
    Denied,
    /// The body was not a readable AdmissionReview (answered 400).
    Invalid,
}

impl AdmissionResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionResult::Allowed => "allowed",
            AdmissionResult::Patched => "patched",
            AdmissionResult::Denied => "denied",
            AdmissionResult::Invalid => "invalid",
        }
    }
}

/// Where a pod was refused by its namespace's GPU quota.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum QuotaStage {
    /// At creation: it can never fit the hard limit (denied).
    Admission,
    /// At `/filter`: no node can take it within the budget left (it waits).
    Filter,
    /// At `/bind`: the budget was gone by the time of the bind.
    Bind,
}

impl QuotaStage {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaStage::Admission => "admission",
            QuotaStage::Filter => "filter",
            QuotaStage::Bind => "bind",
        }
    }
}

/// At most this many namespaces get their own `namespace` label on the quota refusals; the
/// others are counted under [`OTHER_NAMESPACES`] (the label's cardinality stays bounded whatever
/// the number of namespaces).
pub const MAX_QUOTA_NAMESPACES: usize = 100;

/// The `namespace` label of refusals beyond [`MAX_QUOTA_NAMESPACES`] (not a valid namespace
/// name, so it never collides with one).
pub const OTHER_NAMESPACES: &str = "_other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuotaLabels {
    namespace: String,
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabels {
    webhook: &'static str,
    result: &'static str,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~13 s (kube-scheduler's extender and the webhook timeouts are 10-30 s).
    Histogram::new(exponential_buckets(0.000_1, 2.0, 18))
}

const CALL_OUTCOMES: [(ExtenderCall, ExtenderOutcome); 9] = [
    (ExtenderCall::Filter, ExtenderOutcome::Ok),
    (ExtenderCall::Filter, ExtenderOutcome::Error),
    (ExtenderCall::Prioritize, ExtenderOutcome::Ok),
    (ExtenderCall::Prioritize, ExtenderOutcome::Error),
    (ExtenderCall::Bind, ExtenderOutcome::BoundGpu),
    (ExtenderCall::Bind, ExtenderOutcome::BoundNoGpu),
    (ExtenderCall::Bind, ExtenderOutcome::Error),
    (ExtenderCall::Preempt, ExtenderOutcome::Ok),
    (ExtenderCall::Preempt, ExtenderOutcome::Error),
];

/// How a preemption the shim looked into ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PreemptionOutcome {
    /// Victims chosen and evicted (or handed to kube-scheduler at `/preempt`); cards held.
    Evicting,
    /// Some node fits as it is: nothing to evict.
    NotNeeded,
    /// No node can make room.
    NoCandidate,
    /// An eviction was refused (a PodDisruptionBudget): the preemption was given up.
    Blocked,
    /// The service or the API failed.
    Error,
}

impl PreemptionOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionOutcome::Evicting => "evicting",
            PreemptionOutcome::NotNeeded => "not_needed",
            PreemptionOutcome::NoCandidate => "no_candidate",
            PreemptionOutcome::Blocked => "blocked",
            PreemptionOutcome::Error => "error",
        }
    }
}

const PREEMPTION_OUTCOMES: [PreemptionOutcome; 5] = [
    PreemptionOutcome::Evicting,
    PreemptionOutcome::NotNeeded,
    PreemptionOutcome::NoCandidate,
    PreemptionOutcome::Blocked,
    PreemptionOutcome::Error,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PreemptionLabels {
    outcome: &'static str,
}

const REVIEW_RESULTS: [(Webhook, AdmissionResult); 6] = [
    (Webhook::Validate, AdmissionResult::Allowed),
    (Webhook::Validate, AdmissionResult::Denied),
    (Webhook::Validate, AdmissionResult::Invalid),
    (Webhook::Mutate, AdmissionResult::Allowed),
    (Webhook::Mutate, AdmissionResult::Patched),
    (Webhook::Mutate, AdmissionResult::Invalid),
];

/// The shim's metric families. Cloning shares the values (the families are reference-counted).
#[derive(Clone, Debug)]
pub struct Metrics {
    extender_requests: Family<CallLabels, Counter>,
    extender_latency: Histograms<CallLabels>,
    admission_reviews: Family<ReviewLabels, Counter>,
    admission_latency: Histograms<ReviewLabels>,
    preemptions: Family<PreemptionLabels, Counter>,
    victims: Histogram,
    quota_refusals: Family<QuotaLabels, Counter>,
    /// The namespaces that have their own label on `quota_refusals`.
    quota_namespaces: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// New families; every series that can occur exists from the start (at 0), so a scrape
    /// never misses one and every family shows its HELP.
    pub fn new() -> Self {
        let m = Metrics {
            extender_requests: Family::default(),
            extender_latency: Family::new_with_constructor(latency_histogram),
            admission_reviews: Family::default(),
            admission_latency: Family::new_with_constructor(latency_histogram),
            preemptions: Family::default(),
            // 1, 2, 4, ... 128 victims.
            victims: Histogram::new(exponential_buckets(1.0, 2.0, 8)),
            quota_refusals: Family::default(),
            quota_namespaces: Arc::default(),
        };
        for outcome in PREEMPTION_OUTCOMES {
            drop(m.preemptions.get_or_create(&PreemptionLabels {
                outcome: outcome.as_str(),
            }));
        }
        for (call, outcome) in CALL_OUTCOMES {
            let labels = CallLabels {
                call: call.as_str(),
                outcome: outcome.as_str(),
            };
            drop(m.extender_requests.get_or_create(&labels));
            drop(m.extender_latency.get_or_create(&labels));
        }
        for (webhook, result) in REVIEW_RESULTS {
            let labels = ReviewLabels {
                webhook: webhook.as_str(),
                result: result.as_str(),
            };
            drop(m.admission_reviews.get_or_create(&labels));
            drop(m.admission_latency.get_or_create(&labels));
        }
        m
    }

    /// One finished extender call.
    pub fn extender(&self, call: ExtenderCall, outcome: ExtenderOutcome, seconds: f64) {
        let labels = CallLabels {
            call: call.as_str(),
            outcome: outcome.as_str(),
        };
        self.extender_requests.get_or_create(&labels).inc();
        self.extender_latency
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// One answered admission review.
    pub fn admission(&self, webhook: Webhook, result: AdmissionResult, seconds: f64) {
        let labels = ReviewLabels {
            webhook: webhook.as_str(),
            result: result.as_str(),
        };
        self.admission_reviews.get_or_create(&labels).inc();
        self.admission_latency
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// One preemption looked into, and how many pods it evicts (`Evicting` only).
    pub fn preemption(&self, outcome: PreemptionOutcome, victims: usize) {
        self.preemptions
            .get_or_create(&PreemptionLabels {
                outcome: outcome.as_str(),
            })
            .inc();
        if outcome == PreemptionOutcome::Evicting {
            self.victims.observe(victims as f64);
        }
    }

    /// A pod of `namespace` refused by its GPU quota at `stage`.
    pub fn quota_refusal(&self, namespace: &str, stage: QuotaStage) {
        let namespace = match self.quota_namespaces.lock() {
            Ok(seen) if seen.contains(namespace) => namespace.to_owned(),
            Ok(mut seen) if seen.len() < MAX_QUOTA_NAMESPACES => {
                seen.insert(namespace.to_owned());
                namespace.to_owned()
            }
            _ => OTHER_NAMESPACES.to_owned(),
        };
        self.quota_refusals
            .get_or_create(&QuotaLabels {
                namespace,
                stage: stage.as_str(),
            })
            .inc();
    }

    /// Registers the families (names without the prefix; counters get `_total`, units their
    /// suffix, from prometheus-client).
    fn register(&self, r: &mut Registry) {
        r.register(
            "extender_requests",
            "Extender calls answered, by call (filter, prioritize, bind) and outcome",
            self.extender_requests.clone(),
        );
        r.register_with_unit(
            "extender_request_duration",
            "Time to answer an extender call, by call and outcome",
            Unit::Seconds,
            self.extender_latency.clone(),
        );
        r.register(
            "admission_reviews",
            "Admission reviews answered, by webhook (validate, mutate) and result",
            self.admission_reviews.clone(),
        );
        r.register_with_unit(
            "admission_review_duration",
            "Time to answer an admission review, by webhook and result",
            Unit::Seconds,
            self.admission_latency.clone(),
        );
        r.register(
            "preemptions",
            "Preemptions looked into for pending GPU pods, by outcome (evicting, not_needed, no_candidate, blocked, error)",
            self.preemptions.clone(),
        );
        r.register(
            "preemption_victims",
            "Pods evicted per preemption",
            self.victims.clone(),
        );
        r.register(
            "quota_refusals",
            "Refusals by a namespace's GPU quota, by namespace (the first 100 seen; the others \
             as _other) and stage (admission: a pod that can never fit, denied; filter: an answer \
             with no node within the budget left, one per attempt of a waiting pod; bind: the \
             budget was gone by the bind)",
            self.quota_refusals.clone(),
        );
    }
}

/// Gauges read from the shim's state at each scrape.
#[derive(Debug)]
struct StateCollector {
    view: Arc<ClusterView>,
    leader: Arc<Leadership>,
}

impl Collector for StateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauges = [
            (
                "leader",
                "1 when this replica holds the Lease (always 1 without leader election).",
                i64::from(self.leader.is_leader()),
            ),
            (
                "informers_synced",
                "1 once the node and pod informers have listed.",
                i64::from(self.view.is_synced()),
            ),
            (
                "assumed_pods",
                "Pods in the assume cache: bind decisions and reservations the informer has not shown yet.",
                i64::try_from(self.view.assumed_len()).unwrap_or(i64::MAX),
            ),
            (
                "preemption_holds",
                "Preemptors whose cards are held for them (victims terminating or just gone).",
                i64::try_from(self.view.holds_len()).unwrap_or(i64::MAX),
            ),
            (
                "quotas_invalid",
                "ResourceQuota objects with a GPU key whose value cannot be read (each blocks its namespace's GPU pods for that resource until it is fixed).",
                i64::try_from(self.view.invalid_quotas()).unwrap_or(i64::MAX),
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// The registry to serve: the families of `metrics` and the state gauges of `view` and
/// `leader`, all prefixed `gpusched_kube_`.
pub fn registry(metrics: &Metrics, view: Arc<ClusterView>, leader: Arc<Leadership>) -> Registry {
    let mut r = Registry::with_prefix(PREFIX);
    metrics.register(&mut r);
    r.register_collector(Box::new(StateCollector { view, leader }));
    r
}

/// The registry as OpenMetrics text (served by `gpusched_runtime::metrics::router`).
pub use gpusched_runtime::metrics::encode;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::Names;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::reflector;
    use std::time::Duration;

    fn view() -> Arc<ClusterView> {
        let (nodes, _nw) = reflector::store::<Node>();
        let (pods, _pw) = reflector::store::<Pod>();
        Arc::new(ClusterView::new(
            nodes,
            pods,
            Names::default(),
            Duration::from_secs(60),
        ))
    }

    /// The value of one series line (`name{labels} value`).
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn every_family_has_help_type_and_unit_and_counts() {
        let m = Metrics::new();
        let leader = Arc::new(Leadership::always("t"));
        let r = registry(&m, view(), leader);
        let text = encode(&r).unwrap();
        // Every series exists before the first call.
        let bind_gpu = r#"gpusched_kube_extender_requests_total{call="bind",outcome="bound_gpu"}"#;
        assert_eq!(value(&text, bind_gpu), Some(0.0), "{text}");
        let denied = r#"gpusched_kube_admission_reviews_total{webhook="validate",result="denied"}"#;
        assert_eq!(value(&text, denied), Some(0.0), "{text}");
        let patched_count = r#"gpusched_kube_admission_review_duration_seconds_count{webhook="mutate",result="patched"}"#;
        assert_eq!(value(&text, patched_count), Some(0.0), "{text}");
        m.extender(ExtenderCall::Bind, ExtenderOutcome::BoundGpu, 0.003);
        m.extender(ExtenderCall::Bind, ExtenderOutcome::BoundGpu, 0.5);
        m.admission(Webhook::Validate, AdmissionResult::Denied, 0.002);
        let text = encode(&r).unwrap();
        assert_eq!(value(&text, bind_gpu), Some(2.0), "{text}");
        assert_eq!(value(&text, denied), Some(1.0), "{text}");
        assert_eq!(
            value(
                &text,
                r#"gpusched_kube_extender_request_duration_seconds_count{call="bind",outcome="bound_gpu"}"#
            ),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                r#"gpusched_kube_extender_request_duration_seconds_bucket{le="0.0064",call="bind",outcome="bound_gpu"}"#
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            value(
                &text,
                r#"gpusched_kube_admission_review_duration_seconds_count{webhook="validate",result="denied"}"#
            ),
            Some(1.0),
            "{text}"
        );
        // State gauges: always leading, not synced, nothing assumed.
        assert_eq!(value(&text, "gpusched_kube_leader"), Some(1.0), "{text}");
        assert_eq!(
            value(&text, "gpusched_kube_informers_synced"),
            Some(0.0),
            "{text}"
        );
        assert_eq!(value(&text, "gpusched_kube_assumed_pods"), Some(0.0));
        assert_eq!(value(&text, "gpusched_kube_preemption_holds"), Some(0.0));
        // Preemptions by outcome; victims per evicting preemption only.
        let evicting = r#"gpusched_kube_preemptions_total{outcome="evicting"}"#;
        let blocked = r#"gpusched_kube_preemptions_total{outcome="blocked"}"#;
        assert_eq!(value(&text, evicting), Some(0.0), "{text}");
        m.preemption(PreemptionOutcome::Evicting, 3);
        m.preemption(PreemptionOutcome::Blocked, 2);
        let text = encode(&r).unwrap();
        assert_eq!(value(&text, evicting), Some(1.0), "{text}");
        assert_eq!(value(&text, blocked), Some(1.0), "{text}");
        assert_eq!(
            value(&text, "gpusched_kube_preemption_victims_count"),
            Some(1.0)
        );
        assert_eq!(
            value(&text, "gpusched_kube_preemption_victims_sum"),
            Some(3.0)
        );
        assert_eq!(
            value(
                &text,
                r#"gpusched_kube_preemption_victims_bucket{le="2.0"}"#
            ),
            Some(0.0),
            "{text}"
        );
        let preempt_ok = r#"gpusched_kube_extender_requests_total{call="preempt",outcome="ok"}"#;
        assert_eq!(value(&text, preempt_ok), Some(0.0), "{text}");
        assert_eq!(value(&text, "gpusched_kube_quotas_invalid"), Some(0.0));
        // HELP and TYPE on every family; the unit on the histograms.
        for family in [
            "gpusched_kube_extender_requests",
            "gpusched_kube_extender_request_duration_seconds",
            "gpusched_kube_admission_reviews",
            "gpusched_kube_admission_review_duration_seconds",
            "gpusched_kube_leader",
            "gpusched_kube_informers_synced",
            "gpusched_kube_assumed_pods",
            "gpusched_kube_preemptions",
            "gpusched_kube_preemption_victims",
            "gpusched_kube_preemption_holds",
            "gpusched_kube_quotas_invalid",
        ] {
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "{family}: {text}"
            );
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "{family}: {text}"
            );
        }
        assert!(text.contains("# UNIT gpusched_kube_extender_request_duration_seconds seconds"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// Each namespace counts under its own label up to the bound, the rest under `_other`.
    #[test]
    fn quota_refusals_by_namespace_stay_bounded() {
        let m = Metrics::new();
        let r = registry(&m, view(), Arc::new(Leadership::always("t")));
        let series = |ns: &str, stage: &str| {
            format!(r#"gpusched_kube_quota_refusals_total{{namespace="{ns}",stage="{stage}"}}"#)
        };
        m.quota_refusal("team-a", QuotaStage::Filter);
        m.quota_refusal("team-a", QuotaStage::Filter);
        m.quota_refusal("team-a", QuotaStage::Admission);
        for i in 1..MAX_QUOTA_NAMESPACES {
            m.quota_refusal(&format!("ns-{i}"), QuotaStage::Bind);
        }
        m.quota_refusal("one-too-many", QuotaStage::Filter);
        m.quota_refusal("another", QuotaStage::Filter);
        m.quota_refusal("team-a", QuotaStage::Bind);
        let text = encode(&r).unwrap();
        assert!(
            text.contains("# HELP gpusched_kube_quota_refusals "),
            "{text}"
        );
        assert!(
            text.contains("# TYPE gpusched_kube_quota_refusals counter"),
            "{text}"
        );
        for (ns, stage, want) in [
            ("team-a", "filter", Some(2.0)),
            ("team-a", "admission", Some(1.0)),
            ("team-a", "bind", Some(1.0)),
            ("ns-99", "bind", Some(1.0)),
            ("one-too-many", "filter", None),
            (OTHER_NAMESPACES, "filter", Some(2.0)),
        ] {
            assert_eq!(value(&text, &series(ns, stage)), want, "{ns} {stage}");
        }
        let namespaces: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("gpusched_kube_quota_refusals_total{namespace=\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        assert_eq!(namespaces.len(), MAX_QUOTA_NAMESPACES + 1, "{namespaces:?}");
    }

    /// Both formats the endpoint negotiates are clean under promtool's rules and carry the
    /// process metrics.
    #[test]
    fn scrapes_in_both_formats_pass_the_lint() {
        use gpusched_runtime::metrics::{Format, encode_as, lint};
        let m = Metrics::new();
        m.extender(ExtenderCall::Bind, ExtenderOutcome::BoundGpu, 0.003);
        let r = registry(&m, view(), Arc::new(Leadership::always("t")));
        for format in [Format::OpenMetrics, Format::Text004] {
            let text = encode_as(&r, format).unwrap();
            assert_eq!(lint(&text, format), Vec::<String>::new(), "{text}");
            assert!(text.contains("process_cpu_seconds_total "), "{text}");
            assert!(text.contains("gpusched_build_info{version="), "{text}");
        }
    }
}
