//! Bursts of 200 GPU pods onto 20 nodes x 4 cards: with the extender (no card over-booked, every
//! pod bound with a decision or pending with a reason), and the same burst on a plain
//! kube-scheduler (GPUs as an extended resource) for the baseline throughput.

use std::time::Duration;

use crate::harness::SCHEDULER;
use crate::harness::burst::{
    BURST_NODES, BURST_PODS, BURST_SHAPE, BurstStats, burst, burst_pods, check_no_overbooking,
};
use crate::harness::cluster::H;
use crate::harness::scheduler::PlainScheduler;

pub async fn with_extender(h: &H) -> BurstStats {
    let pool = "burst";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("burst", pool, BURST_NODES, BURST_SHAPE, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, BURST_PODS, false),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    assert!(
        s.bound >= 150,
        "only {} of {BURST_PODS} pods bound",
        s.bound
    );
    h.result(format!(
        "burst with the extender: {BURST_PODS} pods onto {BURST_NODES} nodes ({} cards): {} bound, {} pending with a reason; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s; no card over-booked ({cards} cards used)",
        BURST_NODES * 4, s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}

pub async fn baseline(h: &H) -> BurstStats {
    // Plain kube-scheduler, GPUs as an extended resource (12 per node: the same 3 pods per card).
    let pool = "base";
    let ns = h.namespace(pool, true).await;
    let _nodes = h
        .make_nodes("base", pool, BURST_NODES, BURST_SHAPE, 12)
        .await;
    let sched = PlainScheduler::start(h, "baseline-scheduler").await;
    let s = burst(
        h,
        &ns,
        burst_pods(pool, "default-scheduler", BURST_PODS, true),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    sched.stop().await;
    h.result(format!(
        "baseline without the extender (plain kube-scheduler, nvidia.com/gpu: 12 per node): {} bound, {} pending; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s",
        s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}
