//! Bursts of GPU pods (CI: 200 pods onto 20 nodes x 4 cards; `deploy/e2e/bench.sh` sizes them
//! with `E2E_BURST_*`): with the extender (no card over-booked, every pod bound with a decision or
//! pending with a reason), and the same burst on a plain kube-scheduler (GPUs as an extended
//! resource) for the baseline throughput. Both report pods/s, time-to-bind and CPU per pod of
//! each process.

use std::time::Duration;

use crate::harness::SCHEDULER;
use crate::harness::burst::{
    BurstSize, BurstStats, CpuMeter, burst, burst_pods, check_no_overbooking, env_pid,
};
use crate::harness::cluster::H;
use crate::harness::scheduler::PlainScheduler;

/// The baseline's scheduler profile when its pods go through the webhooks (the mutating webhook
/// leaves a schedulerName other than empty/`default-scheduler` alone).
const PLAIN: &str = "plain-kube-scheduler";

/// gpusched-server's `gpusched_node_sets_hits`/`_misses` (summed), if its metrics are known.
async fn node_set_counters() -> Option<(f64, f64)> {
    let addr = std::env::var("E2E_SERVER_METRICS").ok()?;
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--max-time", "2", &format!("http://{addr}/metrics")])
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let sum = |name: &str| -> f64 {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains(name))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum()
    };
    Some((sum("node_sets_hits"), sum("node_sets_misses")))
}

fn timing(s: &BurstStats) -> String {
    format!(
        "time-to-bind p50 {:.2}s p99 {:.2}s",
        s.to_bind_q(0.5),
        s.to_bind_q(0.99)
    )
}

pub async fn with_extender(h: &H, shim_pid: Option<u32>) -> BurstStats {
    let size = BurstSize::from_env();
    let pool = "burst";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("burst", pool, size.nodes, size.shape, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1 + size.nodes as u64 / 200)).await;
    h.say(format!(
        "burst: {} nodes made, creating {} pods",
        size.nodes, size.pods
    ));
    let sets0 = node_set_counters().await;
    let cpu = CpuMeter::start(&[
        ("gpusched-kube", shim_pid),
        ("kube-scheduler", env_pid("SCHEDULER_PID")),
        ("gpusched-server", env_pid("E2E_SERVER_PID")),
        ("kube-apiserver", env_pid("APISERVER_PID")),
    ]);
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, size.pods, false),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    let cpu = cpu.per_pod(s.bound);
    let sets = match (sets0, node_set_counters().await) {
        (Some((h0, m0)), Some((h1, m1))) => {
            format!("; node sets: {} hits, {} misses", h1 - h0, m1 - m0)
        }
        _ => String::new(),
    };
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    assert!(
        s.bound * 4 >= size.pods * 3,
        "only {} of {} pods bound",
        s.bound,
        size.pods
    );
    h.result(format!(
        "burst with the extender: {} pods onto {} nodes ({} cards): {} bound, {} pending with a reason; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s; {}; no card over-booked ({cards} cards used)",
        size.pods,
        size.nodes,
        size.nodes * size.shape.cards as usize,
        s.bound,
        s.pending,
        s.create_s,
        s.last_bound_s,
        s.rate,
        timing(&s)
    ));
    h.result(format!(
        "burst with the extender, CPU per bound pod: {cpu}{sets}"
    ));
    s
}

pub async fn baseline(h: &H, shim_pid: Option<u32>) -> BurstStats {
    // Plain kube-scheduler, GPUs as an extended resource (3 per card: the same 3 pods per card).
    let size = BurstSize::from_env();
    let pool = "base";
    let ns = h.namespace(pool, !size.same_admission).await;
    let profile = if size.same_admission {
        PLAIN
    } else {
        "default-scheduler"
    };
    let per_node = size.shape.cards * 3;
    let _nodes = h
        .make_nodes("base", pool, size.nodes, size.shape, per_node)
        .await;
    let sched = PlainScheduler::start_profile(h, "baseline-scheduler", profile).await;
    tokio::time::sleep(Duration::from_secs(1 + size.nodes as u64 / 200)).await;
    h.say(format!(
        "baseline: {} nodes made, creating {} pods",
        size.nodes, size.pods
    ));
    let cpu = CpuMeter::start(&[
        ("gpusched-kube", shim_pid),
        ("kube-scheduler", sched.pid()),
        ("gpusched-server", env_pid("E2E_SERVER_PID")),
        ("kube-apiserver", env_pid("APISERVER_PID")),
    ]);
    let s = burst(
        h,
        &ns,
        burst_pods(pool, profile, size.pods, true),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    let cpu = cpu.per_pod(s.bound);
    sched.stop().await;
    let admission = if size.same_admission {
        "through the webhooks"
    } else {
        "namespace skips the webhooks"
    };
    h.result(format!(
        "baseline without the extender (plain kube-scheduler, nvidia.com/gpu: {per_node} per node, {} nodes, {admission}): \
         {} bound, {} pending; created in {:.1}s, last bound at {:.1}s: {:.1} pods/s; {}",
        size.nodes,
        s.bound,
        s.pending,
        s.create_s,
        s.last_bound_s,
        s.rate,
        timing(&s)
    ));
    h.result(format!("baseline, CPU per bound pod: {cpu}"));
    s
}
