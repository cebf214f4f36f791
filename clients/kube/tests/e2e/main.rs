//! End-to-end scenarios on a real control plane (etcd + kube-apiserver + kube-scheduler, no
//! kubelet), run by `deploy/e2e/test.sh`, which builds everything, starts the cluster with the
//! scheduler configuration from deploy/, starts gpusched-server, applies deploy/'s RBAC and
//! webhook configurations and sets the variables read here.
//!
//! The test is `#[ignore]`d in `cargo test --workspace` (it needs the cluster); the script runs
//! it with `--ignored`, and then a missing variable or an unreachable cluster FAILS it.
//!
//! kube-scheduler reaches "the Service" of gpusched-kube through a small TCP proxy run here (the
//! stand-in for kube-proxy): it forwards to the replica whose `/readyz` says ready (the leader),
//! and drops connections to a replica that stops being ready.
//!
//! Layout: `harness/` (environment, control-plane client and builders, waiting helpers,
//! bursts, gpusched-kube and gpusched-agent processes, the Service stand-in) and `scenarios/` (one module per
//! story). `E2E_FILTER` picks scenarios by name: admission, forgery, failclosed, seed, weights,
//! mutex, badnodes, traces, preempt, mig, fgd, burst, baseline, quota, restart, replicas, opview.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;
mod scenarios;

use std::time::Duration;

use harness::cluster::H;
use harness::env::Env;
use harness::shim::Shim;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real control plane: deploy/e2e/test.sh runs it with --ignored"]
async fn e2e_on_a_real_control_plane() {
    let env = Env::from_env().expect("GPUSCHED_E2E=1 and the variables set by deploy/e2e/test.sh");
    let h = H::connect(env).await;
    let mut shim = Shim::start(&h.env, "replica-a").await;
    h.proxy.add(&shim);
    let ready = shim.wait_ready(Duration::from_secs(60)).await;
    h.say(format!(
        "gpusched-kube replica-a ready after {:.1}s (extender {}, webhook {}, web {})",
        ready.as_secs_f64(),
        shim.ext,
        shim.webhook,
        shim.web
    ));

    // First, on a quiet cluster: the page's screenshot shows only this scenario's nodes.
    if h.env.wants("opview") {
        scenarios::opview::run(&h, &shim).await;
    }
    // Early: the observed workload mix counts the newest GPU pods (see harness/shim.rs).
    if h.env.wants("fgd") {
        scenarios::fgd::run(&h).await;
    }
    if h.env.wants("admission") {
        scenarios::admission::run(&h).await;
    }
    if h.env.wants("forgery") {
        scenarios::forgery::run(&h).await;
    }
    if h.env.wants("failclosed") {
        scenarios::failclosed::run(&h, &shim).await;
    }
    if h.env.wants("seed") {
        scenarios::seed::node_policies(&h).await;
        scenarios::seed::gpu_policies(&h).await;
    }
    if h.env.wants("weights") {
        scenarios::weights::run(&h).await;
    }
    if h.env.wants("mutex") {
        scenarios::mutex::run(&h).await;
    }
    if h.env.wants("badnodes") {
        scenarios::bad_nodes::run(&h).await;
    }
    if h.env.wants("traces") {
        scenarios::traces::run(&h).await;
    }
    if h.env.wants("preempt") {
        scenarios::preempt::run(&h, &shim).await;
    }
    if h.env.wants("mig") {
        scenarios::mig::run(&h).await;
    }
    let mut ours = None;
    if h.env.wants("burst") {
        ours = Some(scenarios::burst::with_extender(&h, shim.pid()).await);
    }
    if h.env.wants("baseline") {
        let base = scenarios::burst::baseline(&h, shim.pid()).await;
        if let Some(o) = &ours {
            h.result(format!(
                "throughput ratio (extender / plain kube-scheduler): {:.1} / {:.1} pods/s = {:.2}",
                o.rate,
                base.rate,
                o.rate / base.rate
            ));
        }
    }
    if h.env.wants("quota") {
        scenarios::quota::run(&h, &mut shim).await;
    }
    if h.env.wants("restart") {
        scenarios::restart::run(&h, &mut shim, "replica-a2").await;
    }
    if h.env.wants("replicas") {
        scenarios::replicas::run(&h, &mut shim).await;
    }
    h.write_results();
}
