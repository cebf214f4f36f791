//! Latency histograms (hdrhistogram, nanoseconds inside, microseconds in reports) and the JSON
//! report.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency recorded exactly: 100 s (longer values are clamped to it).
const HIGHEST_NS: u64 = 100_000_000_000;

/// A latency histogram: 1 ns .. 100 s, 3 significant digits.
#[derive(Clone, Debug)]
pub struct Latencies {
    hist: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Self {
        match Histogram::new_with_bounds(1, HIGHEST_NS, 3) {
            Ok(hist) => Latencies { hist },
            // Constant bounds that hdrhistogram accepts (low >= 1, high >= 2·low, sigfig <= 5).
            Err(e) => unreachable!("histogram bounds: {e}"),
        }
    }

    /// Records one duration.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns.clamp(1, HIGHEST_NS));
    }

    /// Records a value in nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, HIGHEST_NS));
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Latencies) {
        // Same bounds on both sides: adding cannot fail; saturate if it ever would.
        if self.hist.add(&other.hist).is_err() {
            for v in other.hist.iter_recorded() {
                self.hist
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The summary in microseconds.
    pub fn summary(&self) -> Percentiles {
        Percentiles::of(&self.hist)
    }
}

/// Latency percentiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Values recorded.
    pub count: u64,
    /// Smallest.
    pub min: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    /// Largest.
    pub max: f64,
}

fn us(ns: u64) -> f64 {
    // Three decimals: nanosecond resolution, shown in microseconds.
    (ns as f64 / 1000.0 * 1000.0).round() / 1000.0
}

impl Percentiles {
    /// Percentiles of a histogram of nanoseconds (all zero when it is empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            min: us(h.min()),
            mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p99_9: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// The canonical name of a gRPC status code.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// What the answers said (read from the response bytes without decoding them fully).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Outcomes {
    /// Allocate: placed; Filter/Score: at least one feasible node.
    pub placed: u64,
    /// Allocate: not placed; Filter/Score: no feasible node.
    pub unschedulable: u64,
    /// Mean feasible nodes per answer.
    pub feasible_nodes_mean: f64,
    /// Mean failed nodes listed per answer.
    pub failed_nodes_mean: f64,
    /// Mean response size, bytes.
    pub response_bytes_mean: f64,
}

/// Running sums behind [`Outcomes`].
#[derive(Clone, Debug, Default)]
pub struct OutcomeSums {
    placed: u64,
    unschedulable: u64,
    feasible: u64,
    failed: u64,
    bytes: u64,
}

impl OutcomeSums {
    /// Adds one answer.
    pub fn add(&mut self, s: &crate::wire::Summary) {
        if s.placed {
            self.placed += 1;
        } else {
            self.unschedulable += 1;
        }
        self.feasible += u64::from(s.feasible);
        self.failed += u64::from(s.failed);
        self.bytes += s.bytes as u64;
    }

    /// Adds another set of sums.
    pub fn merge(&mut self, o: &OutcomeSums) {
        self.placed += o.placed;
        self.unschedulable += o.unschedulable;
        self.feasible += o.feasible;
        self.failed += o.failed;
        self.bytes += o.bytes;
    }

    /// Means over the answers.
    pub fn outcomes(&self) -> Outcomes {
        let n = (self.placed + self.unschedulable).max(1) as f64;
        let r = |x: f64| (x * 100.0).round() / 100.0;
        Outcomes {
            placed: self.placed,
            unschedulable: self.unschedulable,
            feasible_nodes_mean: r(self.feasible as f64 / n),
            failed_nodes_mean: r(self.failed as f64 / n),
            response_bytes_mean: r(self.bytes as f64 / n),
        }
    }
}

/// CPU time of a process over the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cpu {
    /// Process id.
    pub pid: u32,
    /// user + system CPU seconds during the measured window.
    pub cpu_seconds: f64,
    /// Of which in user mode.
    pub user_seconds: f64,
    /// Of which in the kernel (system calls, the network).
    pub system_seconds: f64,
    /// CPU seconds per 1,000 successful decisions.
    pub cpu_s_per_1k_decisions: f64,
    /// Cores busy on average (cpu_seconds / window).
    pub cores_busy: f64,
}

/// Latency of one workload kind.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindLatency {
    /// Answers.
    pub count: u64,
    /// Median, µs.
    pub p50: f64,
    /// 99th percentile, µs.
    pub p99: f64,
}

/// One measured run (one concurrency or one rate).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunReport {
    /// `grpc`, `engine` or `pipeline`.
    pub target: String,
    /// `closed` or `open`.
    pub mode: String,
    /// Closed loop: requests in flight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Open loop: requests started per second (by intended start time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_rate_per_s: Option<f64>,
    /// HTTP/2 connections (gRPC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<usize>,
    /// Length of the measured window, seconds (after the warm-up).
    pub window_s: f64,
    /// Answers (ok or error) for requests started in the window.
    pub requests: u64,
    /// Successful answers.
    pub ok: u64,
    /// Errors by gRPC code name.
    pub errors: BTreeMap<String, u64>,
    /// Answers per second completed in the window.
    pub throughput_per_s: f64,
    /// Latency, µs. Open loop: from the intended start time (coordinated omission included);
    /// closed loop: from the send.
    pub latency_us: Percentiles,
    /// Open loop: from the actual send to the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_time_us: Option<Percentiles>,
    /// Open loop: how late the send was against its intended time (client-side lag).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_lag_us: Option<Percentiles>,
    /// Open loop: requests not sent because `--max-outstanding` were in flight (they waited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outstanding_limit_hits: Option<u64>,
    /// Latency per workload kind.
    pub by_kind: BTreeMap<String, KindLatency>,
    /// What the answers said.
    pub outcomes: Outcomes,
    /// Server CPU (a spawned server, or `--server-pid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_cpu: Option<Cpu>,
    /// This tool's own CPU (it shares the machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu: Option<Cpu>,
    /// Cores busy on the whole machine during the window (server, this tool and anything
    /// else: what is neither is interference from other processes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_busy_cores: Option<f64>,
    /// In-process pipeline: mean time per stage, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stages_us: Option<BTreeMap<String, f64>>,
}

impl RunReport {
    /// Total errors.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// Everything recorded by one worker (merged into one per run).
#[derive(Clone, Debug, Default)]
pub struct Collector {
    /// Latency (open loop: from the intended start).
    pub latency: Latencies,
    /// Open loop: from the send.
    pub service: Latencies,
    /// Open loop: send lag.
    pub lag: Latencies,
    /// Latency per workload kind.
    pub by_kind: BTreeMap<crate::synth::Kind, Latencies>,
    /// Answers.
    pub outcomes: OutcomeSums,
    /// Errors by code name.
    pub errors: BTreeMap<String, u64>,
    /// Requests recorded (ok or error).
    pub requests: u64,
    /// Successful answers recorded.
    pub ok: u64,
    /// Recorded answers that arrived before the window ended.
    pub done_in_window: u64,
    /// Successful answers that arrived before the window ended.
    pub ok_in_window: u64,
    /// In-process pipeline: nanoseconds per stage, summed.
    pub stage_ns: [u64; STAGES.len()],
    /// In-process pipeline: samples in `stage_ns`.
    pub stage_samples: u64,
}

/// The stages of the in-process pipeline, in order.
pub const STAGES: [&str; 5] = ["decode", "convert_in", "engine", "convert_out", "encode"];

impl Collector {
    /// Records one answer (`Ok(summary)` or an error code name).
    pub fn record(
        &mut self,
        kind: crate::synth::Kind,
        latency: Duration,
        in_window: bool,
        result: Result<&crate::wire::Summary, &str>,
    ) {
        self.requests += 1;
        self.latency.record(latency);
        self.by_kind.entry(kind).or_default().record(latency);
        if in_window {
            self.done_in_window += 1;
        }
        match result {
            Ok(s) => {
                self.ok += 1;
                if in_window {
                    self.ok_in_window += 1;
                }
                self.outcomes.add(s);
            }
            Err(code) => *self.errors.entry(code.to_owned()).or_default() += 1,
        }
    }

    /// Adds another collector's records.
    pub fn merge(&mut self, o: &Collector) {
        self.latency.merge(&o.latency);
        self.service.merge(&o.service);
        self.lag.merge(&o.lag);
        for (k, l) in &o.by_kind {
            self.by_kind.entry(*k).or_default().merge(l);
        }
        self.outcomes.merge(&o.outcomes);
        for (c, n) in &o.errors {
            *self.errors.entry(c.clone()).or_default() += n;
        }
        self.requests += o.requests;
        self.ok += o.ok;
        self.done_in_window += o.done_in_window;
        self.ok_in_window += o.ok_in_window;
        for (a, b) in self.stage_ns.iter_mut().zip(o.stage_ns) {
            *a += b;
        }
        self.stage_samples += o.stage_samples;
    }

    /// The common part of a run report for a window of `window` seconds.
    pub fn report(&self, target: &str, mode: &str, window: f64) -> RunReport {
        let stages = (self.stage_samples > 0).then(|| {
            STAGES
                .iter()
                .zip(self.stage_ns)
                .map(|(name, ns)| {
                    let mean = ns as f64 / self.stage_samples as f64 / 1000.0;
                    ((*name).to_owned(), (mean * 1000.0).round() / 1000.0)
                })
                .collect()
        });
        RunReport {
            target: target.to_owned(),
            mode: mode.to_owned(),
            window_s: window,
            requests: self.requests,
            ok: self.ok,
            errors: self.errors.clone(),
            throughput_per_s: if window > 0.0 {
                (self.done_in_window as f64 / window * 10.0).round() / 10.0
            } else {
                0.0
            },
            latency_us: self.latency.summary(),
            by_kind: self
                .by_kind
                .iter()
                .map(|(k, l)| {
                    let p = l.summary();
                    (
                        k.as_str().to_owned(),
                        KindLatency {
                            count: p.count,
                            p50: p.p50,
                            p99: p.p99,
                        },
                    )
                })
                .collect(),
            outcomes: self.outcomes.outcomes(),
            stages_us: stages,
            ..RunReport::default()
        }
    }
}

/// CPU use of a process between two readings.
pub fn cpu(
    pid: u32,
    before: crate::process::CpuTimes,
    after: crate::process::CpuTimes,
    decisions: u64,
    window: f64,
) -> Cpu {
    let user = (after.user - before.user).max(0.0);
    let system = (after.system - before.system).max(0.0);
    let secs = user + system;
    let r = |x: f64, d: f64| (x * d).round() / d;
    Cpu {
        pid,
        cpu_seconds: r(secs, 1000.0),
        user_seconds: r(user, 1000.0),
        system_seconds: r(system, 1000.0),
        cpu_s_per_1k_decisions: if decisions > 0 {
            r(secs / (decisions as f64 / 1000.0), 10_000.0)
        } else {
            0.0
        },
        cores_busy: if window > 0.0 {
            r(secs / window, 100.0)
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn percentiles_of_a_uniform_range() {
        let mut l = Latencies::new();
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        let p = l.summary();
        assert_eq!(p.count, 1000);
        // hdrhistogram keeps 3 significant digits: within 0.1%.
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.001 + 0.001;
        assert!(close(p.min, 1.0), "{p:?}");
        assert!(close(p.p50, 500.0), "{p:?}");
        assert!(close(p.p90, 900.0), "{p:?}");
        assert!(close(p.p99, 990.0), "{p:?}");
        assert!(close(p.p99_9, 999.0), "{p:?}");
        assert!(close(p.max, 1000.0), "{p:?}");
        assert!(close(p.mean, 500.5), "{p:?}");
    }

    #[test]
    fn a_tail_shows_in_the_high_percentiles_only() {
        let mut l = Latencies::new();
        for _ in 0..990 {
            l.record(Duration::from_micros(100));
        }
        for _ in 0..10 {
            l.record(Duration::from_millis(50));
        }
        let p = l.summary();
        assert!((p.p50 - 100.0).abs() < 0.1);
        assert!((p.p90 - 100.0).abs() < 0.1);
        assert!((p.p99 - 100.0).abs() < 0.1, "990 of 1000 at 100 µs: {p:?}");
        assert!((p.p99_9 - 50_000.0).abs() < 50.0, "{p:?}");
        assert!((p.max - 50_000.0).abs() < 50.0, "{p:?}");
    }

    #[test]
    fn merging_adds_counts() {
        let mut a = Latencies::new();
        let mut b = Latencies::new();
        a.record(Duration::from_micros(10));
        b.record(Duration::from_micros(30));
        b.record(Duration::from_micros(30));
        a.merge(&b);
        let p = a.summary();
        assert_eq!(p.count, 3);
        assert!((p.p50 - 30.0).abs() < 0.05);
        assert!((p.min - 10.0).abs() < 0.05);
    }

    #[test]
    fn sub_microsecond_values_and_clamping() {
        let mut l = Latencies::new();
        l.record(Duration::from_nanos(250));
        l.record(Duration::ZERO);
        l.record(Duration::from_secs(1000));
        let p = l.summary();
        assert_eq!(p.count, 3);
        assert!(
            (p.min - 0.001).abs() < 1e-9,
            "zero is recorded as 1 ns: {p:?}"
        );
        assert!((p.p50 - 0.25).abs() < 0.001, "{p:?}");
        assert!(p.max >= 99_000_000.0, "clamped to 100 s: {p:?}");
    }

    #[test]
    fn collector_counts_errors_and_window() {
        use crate::synth::Kind;
        use crate::wire::Summary;
        let mut c = Collector::default();
        let ok = Summary {
            placed: true,
            feasible: 10,
            failed: 2,
            bytes: 100,
        };
        c.record(Kind::Frac, Duration::from_micros(100), true, Ok(&ok));
        c.record(Kind::Whole, Duration::from_micros(300), false, Ok(&ok));
        c.record(
            Kind::Frac,
            Duration::from_micros(200),
            true,
            Err("UNAVAILABLE"),
        );
        let mut d = Collector::default();
        d.record(
            Kind::Frac,
            Duration::from_micros(200),
            true,
            Err("UNAVAILABLE"),
        );
        c.merge(&d);
        let r = c.report("grpc", "closed", 2.0);
        assert_eq!(r.requests, 4);
        assert_eq!(r.ok, 2);
        assert_eq!(r.error_count(), 2);
        assert_eq!(r.errors.get("UNAVAILABLE"), Some(&2));
        assert!(
            (r.throughput_per_s - 1.5).abs() < 1e-9,
            "3 of 4 done in 2 s"
        );
        assert_eq!(r.by_kind["frac"].count, 3);
        assert_eq!(r.outcomes.placed, 2);
        assert!((r.outcomes.failed_nodes_mean - 2.0).abs() < 1e-9);
        use crate::process::CpuTimes;
        let t = |user, system| CpuTimes { user, system };
        let cpu = cpu(1, t(10.0, 1.0), t(11.0, 1.5), 3000, 2.0);
        assert!((cpu.system_seconds - 0.5).abs() < 1e-9);
        assert!((cpu.cpu_s_per_1k_decisions - 0.5).abs() < 1e-9);
        assert!((cpu.cores_busy - 0.75).abs() < 1e-9);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        assert_eq!(Latencies::new().summary(), Percentiles::default());
    }

    #[test]
    fn report_serialises_percentile_names() {
        let r = RunReport {
            latency_us: Latencies::new().summary(),
            ..RunReport::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert!(v["latency_us"].get("p99.9").is_some());
        assert!(v.get("service_time_us").is_none());
    }
}
