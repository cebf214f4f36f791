//! Mutex: the idle card is chosen; with no idle card left the pod stays pending with
//! `ExclusiveDeviceAllocateConflict`.

use std::time::Duration;

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, first_card};

pub async fn run(h: &H) {
    let pool = "mutex";
    let ns = h.namespace(pool, false).await;
    let node = "mutex-node1";
    h.make_node(
        node,
        pool,
        Shape {
            cards: 2,
            mem: 16384,
        },
        2,
    )
    .await;
    h.holder(
        &ns,
        "busy",
        node,
        &format!("GPU-{node}-1,NVIDIA,1000,10:;"),
        1,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spec = |n: &str| {
        PodSpec::new(n, pool)
            .ann("hami.io/gpu-scheduler-policy", "mutex")
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem", "1000")
            .build()
    };
    h.create(&ns, &spec("m1")).await.unwrap();
    let p = h.wait_bound(&ns, "m1").await;
    assert_eq!(
        first_card(&p),
        format!("GPU-{node}-2"),
        "mutex takes the idle card"
    );
    h.create(&ns, &spec("m2")).await.unwrap();
    let msg = h
        .wait_unschedulable(&ns, "m2", "ExclusiveDeviceAllocateConflict")
        .await;
    h.result(format!(
        "mutex: m1 -> GPU-{node}-2 (idle card); m2 pending: {msg} ✓"
    ));
}
