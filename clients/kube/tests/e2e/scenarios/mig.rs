//! Dynamic MIG (docs/placement-semantics.md section 11, docs/hami-protocol.md "MIG"): nodes
//! registered by gpusched-agent on the fake NVML library (HAMi's `migProfiles` and gpusched's
//! `gpusched.io/node-mig-layouts`), pods with `nvidia.com/vgpu-mode: mig` of 1g/2g/3g/7g
//! sizes filling an H100 the way HAMi's rule says (contract 11.7.1), the decision written as
//! HAMi's device plugin reads it (`hami.io/vgpu-mig-allocations` next to the devices), a pod
//! that fits no free placement Pending with `MigNoFreePlacement`, a delete freeing its
//! placement, an instance NVML reports reused, and MIG and hami-core nodes in one cluster; a
//! pod created with a reservation of its own is denied.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, allocated, node_of};

/// The fake library's first card (`GPU-5a1e...0000`), an H100 80GB in MIG mode here.
const CARD0: &str = "GPU-5a1e0000-0000-4000-8000-000000000000";
/// Its second card, left in mode hami-core.
const CARD1: &str = "GPU-5a1e0000-0000-4000-8000-000000000001";
/// HAMi's default MIG allowlist for the H100 80GB.
const H100_ALLOWLIST: [&str; 4] = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"];

fn mig_pod(name: &str, pool: &str, mem: Option<u32>) -> Pod {
    let mut p = PodSpec::new(name, pool)
        .ann("nvidia.com/vgpu-mode", "mig")
        .limit("nvidia.com/gpu", "1");
    if let Some(m) = mem {
        p = p.limit("nvidia.com/gpumem", m.to_string());
    }
    p.build()
}

/// The pod's MIG reservation, exactly as written.
fn reservation(p: &Pod) -> Option<String> {
    p.metadata
        .annotations
        .as_ref()?
        .get(gpusched_hami::MIG_ALLOCATIONS)
        .cloned()
}

/// The one MIG reservation HAMi's device plugin would read for a one-container pod on card 0.
fn expected(profile: &str, start: u32, size: u32) -> String {
    format!(
        r#"[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{CARD0}","profile":"{profile}","placement":{{"start":{start},"size":{size}}}}}]"#
    )
}

async fn delete(h: &H, ns: &str, name: &str) {
    Api::<Pod>::namespaced(h.client.clone(), ns)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
}

pub async fn run(h: &H) {
    let pool = "mig";
    let ns = h.namespace(pool, false).await;
    // A mixed node (card 0 MIG, card 1 hami-core) registered by the agent, and a hami-core node.
    let node = "mig-h100";
    h.make_node(
        node,
        pool,
        Shape {
            cards: 2,
            mem: 81920,
        },
        17,
    )
    .await;
    let _agent = h.agent(node, "cards 2\nmig 0\n", &H100_ALLOWLIST).await;
    h.make_node(
        "mig-core",
        pool,
        Shape {
            cards: 1,
            mem: 81920,
        },
        10,
    )
    .await;

    // A pod may not bring its own reservation: the admission policies (or the webhook) deny it.
    let forged = PodSpec::new("forged", pool)
        .ann("nvidia.com/vgpu-mode", "mig")
        .ann(gpusched_hami::MIG_ALLOCATIONS, expected("7g.80gb", 0, 8))
        .limit("nvidia.com/gpu", "1")
        .build();
    let denied = h.create(&ns, &forged).await.unwrap_err().to_string();
    assert!(denied.contains(gpusched_hami::MIG_ALLOCATIONS), "{denied}");

    // Contract 11.7.1, one pod at a time.
    let story: [(&str, u32, &str, u32, u32, &str); 4] = [
        ("a", 30000, "3g.40gb", 4, 4, "40448,46"),
        ("b", 5000, "1g.10gb", 3, 1, "9984,13"),
        ("c", 5000, "1g.10gb", 2, 1, "9984,13"),
        ("d", 15000, "2g.20gb", 0, 2, "20096,25"),
    ];
    let mut placed = Vec::new();
    for (name, mem, profile, start, size, booked) in story {
        h.create(&ns, &mig_pod(name, pool, Some(mem)))
            .await
            .unwrap();
        let p = h.wait_bound(&ns, name).await;
        assert_eq!(node_of(&p).as_deref(), Some(node), "pod {name}");
        assert_eq!(
            reservation(&p).as_deref(),
            Some(expected(profile, start, size).as_str()),
            "pod {name}"
        );
        let devices = &p.metadata.annotations.as_ref().unwrap()[gpusched_hami::DEVICES_ALLOCATED];
        assert_eq!(devices, &format!("{CARD0},NVIDIA,{booked}:;"), "pod {name}");
        placed.push(format!("{name} {profile}@{start}"));
    }
    // The card is full: 8 memory slices, 7 compute slices taken.
    h.create(&ns, &mig_pod("e", pool, Some(15000)))
        .await
        .unwrap();
    let msg = h.wait_unschedulable(&ns, "e", "MigNoFreePlacement").await;
    // Deleting a frees slices 4-7: e gets 2g.20gb there.
    delete(h, &ns, "a").await;
    let e = h.wait_bound(&ns, "e").await;
    assert_eq!(
        reservation(&e).as_deref(),
        Some(expected("2g.20gb", 4, 2).as_str())
    );
    // A pod without vgpu-mode takes a hami-core card, never a MIG instance.
    h.create(
        &ns,
        &PodSpec::new("core", pool)
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem", "8000")
            .build(),
    )
    .await
    .unwrap();
    let core = h.wait_bound(&ns, "core").await;
    let card = allocated(&core).unwrap()[0][0].uuid.clone();
    assert!(
        card == CARD1 || card == "GPU-mig-core-1",
        "core pod on a hami-core card, not {card}"
    );
    assert_eq!(reservation(&core), None);
    // Everything MIG deleted: a pod asking for the whole card gets 7g.80gb.
    for name in ["b", "c", "d", "e"] {
        delete(h, &ns, name).await;
    }
    h.create(&ns, &mig_pod("whole", pool, None)).await.unwrap();
    let whole = h.wait_bound(&ns, "whole").await;
    assert_eq!(
        reservation(&whole).as_deref(),
        Some(expected("7g.80gb", 0, 8).as_str())
    );

    // An H200 whose NVML reports a free 1g.18gb instance at 0: a 12000 MiB pod reuses it
    // (the scan alone would start at 6).
    let pool2 = "mig-h200";
    h.make_node(
        "mig-h200",
        pool2,
        Shape {
            cards: 1,
            mem: 143771,
        },
        7,
    )
    .await;
    let _agent2 = h
        .agent("mig-h200", "cards 1\nmig 0\nh200 0\ngi 0 0 0\n", &[])
        .await;
    h.create(&ns, &mig_pod("reuse", pool2, Some(12000)))
        .await
        .unwrap();
    let reuse = h.wait_bound(&ns, "reuse").await;
    let r = reservation(&reuse).unwrap_or_default();
    assert!(
        r.contains(r#""profile":"1g.18gb","placement":{"start":0,"size":1}"#),
        "{r}"
    );
    h.result(format!(
        "MIG (agent on fake NVML, H100 allowlist {}): {}; e pending: {msg}; after a's delete e \
         2g.20gb@4; core pod on {card}; whole-card pod 7g.80gb@0; H200 free 1g.18gb@0 reused ✓",
        H100_ALLOWLIST.join(","),
        placed.join(", ")
    ));
}
