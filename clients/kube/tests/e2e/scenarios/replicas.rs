//! Leader election with two replicas: only the Lease holder is ready and binds (bind counters
//! from `/metrics`), the standby answers "not the leader"; a refused bind reaches kube-scheduler
//! and an Event; after SIGKILL of the leader the standby takes over; SIGTERM releases the Lease.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::cluster::H;
use crate::harness::http::{http, is_ready, metric};
use crate::harness::pods::{PodSpec, Shape};
use crate::harness::shim::Shim;
use crate::harness::{BINDS_WITH_GPU, SCHEDULER};

pub async fn run(h: &H, a: &mut Shim) {
    let pool = "ha";
    let ns = h.namespace(pool, false).await;
    h.make_node(
        "ha-node1",
        pool,
        Shape {
            cards: 4,
            mem: 16384,
        },
        4,
    )
    .await;
    h.make_node(
        "ha-node2",
        pool,
        Shape {
            cards: 4,
            mem: 16384,
        },
        4,
    )
    .await;
    let mut b = Shim::start(&h.env, "replica-b").await;
    h.proxy.add(&b);
    // B syncs but stays standby while A holds the Lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(is_ready(a.ext).await, "leader A not ready");
    assert!(!is_ready(b.ext).await, "standby B reports ready");
    assert_eq!(h.lease_holder().await, a.identity);
    let args = json!({"Pod": PodSpec::new("probe", pool).scheduler(SCHEDULER).limit("nvidia.com/gpu", "1").build(),
                      "NodeNames": ["ha-node1", "ha-node2"]});
    let (_, body) = http(b.ext, "POST", "/filter", &args.to_string())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["Error"].as_str().unwrap().contains("not the leader"),
        "standby /filter: {body}"
    );
    let bind = json!({"PodName": "probe", "PodNamespace": ns, "PodUID": "x", "Node": "ha-node1"});
    let (_, body) = http(b.ext, "POST", "/bind", &bind.to_string())
        .await
        .unwrap();
    assert!(body.contains("not the leader"), "standby /bind: {body}");
    // A bind the service refuses: the error goes back to kube-scheduler and an Event (written
    // with the shim's ServiceAccount) is recorded on the pod.
    let too_big = PodSpec::new("too-big", "nowhere")
        .scheduler(SCHEDULER)
        .limit("nvidia.com/gpu", "8")
        .build();
    let created = h.create(&ns, &too_big).await.unwrap();
    let bind = json!({"PodName": "too-big", "PodNamespace": ns, "PodUID": created.metadata.uid, "Node": "ha-node1"});
    let (_, body) = http(a.ext, "POST", "/bind", &bind.to_string())
        .await
        .unwrap();
    assert!(
        body.contains("NodeInsufficientDevice"),
        "leader /bind of an oversized pod: {body}"
    );
    let t = Instant::now();
    let ev = loop {
        let ev = h.events(&ns, "too-big").await;
        if let Some(e) = ev.iter().find(|e| e.starts_with("GpuschedBindFailed")) {
            break e.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no GpuschedBindFailed event: {ev:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    h.result(format!(
        "refused bind: error returned to kube-scheduler, event {ev}"
    ));
    let (a0, b0) = (
        metric(a.ext, BINDS_WITH_GPU).await,
        metric(b.ext, BINDS_WITH_GPU).await,
    );
    let create_some = |prefix: &'static str| {
        let ns = ns.clone();
        async move {
            for i in 0..6 {
                let p = PodSpec::new(format!("{prefix}{i}"), pool)
                    .scheduler(SCHEDULER)
                    .limit("nvidia.com/gpu", "1")
                    .limit("nvidia.com/gpumem", "2000")
                    .build();
                h.create(&ns, &p).await.unwrap();
            }
            for i in 0..6 {
                h.wait_bound(&ns, &format!("{prefix}{i}")).await;
            }
        }
    };
    create_some("first").await;
    let (a1, b1) = (
        metric(a.ext, BINDS_WITH_GPU).await,
        metric(b.ext, BINDS_WITH_GPU).await,
    );
    assert_eq!((a1 - a0, b1 - b0), (6, 0), "only the leader binds");
    // The leader dies: the standby takes over once the lease expires.
    let t = Instant::now();
    a.kill9().await;
    h.proxy.remove(&a.identity);
    let took = b.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(h.lease_holder().await, b.identity);
    create_some("second").await;
    let b2 = metric(b.ext, BINDS_WITH_GPU).await;
    assert_eq!(b2 - b1, 6, "the new leader binds");
    h.result(format!(
        "two replicas: only the leader ({}) was ready and bound 6/6 pods, the standby answered \"not the leader\"; \
         after SIGKILL of the leader the standby took over in {:.1}s (lease 4s) and bound 6/6 ✓",
        a.identity,
        took.max(t.elapsed()).as_secs_f64()
    ));
    // Clean shutdown releases the Lease at once.
    b.terminate().await;
    let holder = h.lease_holder().await;
    assert!(
        holder.is_empty(),
        "lease still held by {holder:?} after SIGTERM"
    );
    h.result("SIGTERM: the leader released its Lease (holderIdentity cleared) ✓");
    h.proxy.remove(&b.identity);
}
