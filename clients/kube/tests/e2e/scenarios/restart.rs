//! The burst again with gpusched-kube killed (SIGKILL) after 60 binds and a new instance
//! started: it waits for the Lease to expire and the informers to sync; nothing over-booked,
//! no pod lost.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;

use crate::harness::SCHEDULER;
use crate::harness::burst::{
    BURST_NODES, BURST_PODS, BURST_SHAPE, burst, burst_pods, check_no_overbooking,
};
use crate::harness::cluster::H;
use crate::harness::shim::Shim;

pub async fn run(h: &H, shim: &mut Shim, identity: &str) {
    let pool = "restart";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("restart", pool, BURST_NODES, BURST_SHAPE, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Arc::new(Mutex::new(None::<(Instant, Duration)>));
    let k2 = killed_at.clone();
    let old_identity = shim.identity.clone();
    let new_shim: Arc<tokio::sync::Mutex<Option<Shim>>> = Arc::new(tokio::sync::Mutex::new(None));
    let ns2 = new_shim.clone();
    let old = &mut *shim;
    let hook = move || async move {
        let t = Instant::now();
        old.kill9().await;
        h.proxy.remove(&old_identity);
        h.say(format!(
            "killed gpusched-kube {old_identity} (SIGKILL) in the middle of the burst"
        ));
        let fresh = Shim::start(&h.env, identity).await;
        h.proxy.add(&fresh);
        let ready_after = fresh.wait_ready(Duration::from_secs(60)).await;
        *k2.lock().unwrap() = Some((t, t.elapsed()));
        h.say(format!(
            "restarted as {identity}: ready {:.1}s after the kill (lease expiry + informer sync)",
            t.elapsed().as_secs_f64()
        ));
        let _ = ready_after;
        *ns2.lock().await = Some(fresh);
    };
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, BURST_PODS, false),
        Duration::from_secs(8),
        Some((60, hook)),
    )
    .await;
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    let fresh = new_shim
        .lock()
        .await
        .take()
        .expect("the shim was restarted");
    let (_, down) = killed_at.lock().unwrap().expect("kill happened");
    assert!(s.bound >= 150, "only {} bound after the restart", s.bound);
    let total = Api::<Pod>::namespaced(h.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(total, BURST_PODS, "pods lost");
    h.result(format!(
        "burst with SIGKILL + restart of gpusched-kube after 60 binds: {} bound, {} pending with a reason, {total} pods present; \
         new instance ready {:.1}s after the kill; no card over-booked ({cards} cards used); last bound at {:.1}s",
        s.bound, s.pending, down.as_secs_f64(), s.last_bound_s
    ));
    *shim = fresh;
}
