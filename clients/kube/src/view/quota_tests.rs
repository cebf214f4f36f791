//! What a namespace holds against its quota (the same decisions as node usage: bound by our
//! decision, assumed, reserved; the pod being placed left out) and its limits from the
//! ResourceQuota store.
#![allow(clippy::unwrap_used)]

use super::tests::{assumed, gpu_node, pod, view};
use super::*;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

fn in_namespace(mut p: Pod, ns: &str) -> Pod {
    p.metadata.namespace = Some(ns.into());
    p
}

fn quota(ns: &str, name: &str, hard: serde_json::Value) -> ResourceQuota {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
        "spec": {"hard": hard}
    }))
    .unwrap()
}

#[test]
fn a_namespace_holds_its_bound_assumed_and_reserved_decisions() {
    let sched = "gpusched-scheduler";
    let mut finished = pod(
        "done",
        "u-done",
        sched,
        Some("n1"),
        "n1-gpu1,NVIDIA,7000,70:;",
    );
    finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
    // A MIG pod: its instance's device books the profile's 9,984 MiB and 13 cores (HAMi's
    // -allocated entry), which is what it consumes (contract 10.2, 11.4), not slices.
    let mut m = in_namespace(
        pod("m", "um", sched, Some("n1"), "n1-gpu1,NVIDIA,9984,13:;"),
        "team-m",
    );
    m.metadata.annotations.as_mut().unwrap().insert(
        "hami.io/vgpu-mig-allocations".into(),
        r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"n1-gpu1","profile":"1g.10gb","placement":{"start":6,"size":1}}]"#.into(),
    );
    let (v, _w) = view(
        vec![gpu_node("n1", 2)],
        vec![
            m,
            pod("a", "ua", sched, Some("n1"), "n1-gpu0,NVIDIA,1000,10:;"),
            pod("b", "ub", sched, Some("n1"), "n1-gpu1,NVIDIA,2000,20:;"),
            in_namespace(
                pod("c", "uc", sched, Some("n1"), "n1-gpu0,NVIDIA,4000,40:;"),
                "team-b",
            ),
            finished,
            // Never bound (a forged vgpu-node alone): holds nothing.
            pod("e", "ue", sched, None, "n1-gpu0,NVIDIA,9000,90:;"),
            pod("f", "uf", sched, None, ""),
        ],
    );
    // f's bind decision, not shown by the informer yet, and a reservation of g.
    v.assume(assumed("uf", "f", "n1", "n1-gpu1,NVIDIA,3000,30:;"));
    let mut g = assumed("ug", "g", "n1", "n1-gpu0,NVIDIA,500,5:;");
    g.annotation = String::new();
    v.reserve(g);
    let cases = [
        ("ns", "", 6500, 65, "a + b + f assumed + g reserved"),
        (
            "ns",
            "ua",
            5500,
            55,
            "the pod being placed does not count against itself",
        ),
        ("ns", "ug", 6000, 60, "nor does its own reservation"),
        ("team-b", "", 4000, 40, "another namespace"),
        ("team-m", "", 9984, 13, "a MIG instance, at its profile"),
        ("nobody", "", 0, 0, "an empty namespace"),
    ];
    for (ns, exclude, mem, cores, why) in cases {
        assert_eq!(
            v.namespace_use(ns, exclude),
            quota::Use {
                mem_mib: mem,
                cores
            },
            "{why}"
        );
    }
    // No quota store: no quota anywhere.
    assert_eq!(v.quota("ns", ""), None);
    assert_eq!(v.invalid_quotas(), 0);
}

#[test]
fn limits_come_from_the_namespaces_quotas() {
    let sched = "gpusched-scheduler";
    let (v, _w) = view(
        vec![gpu_node("n1", 2)],
        vec![pod(
            "a",
            "ua",
            sched,
            Some("n1"),
            "n1-gpu0,NVIDIA,6000,10:;",
        )],
    );
    let (store, mut writer) = reflector::store::<ResourceQuota>();
    for q in [
        quota("ns", "mem", json!({"limits.nvidia.com/gpumem": "8000"})),
        quota(
            "ns",
            "both",
            json!({"limits.nvidia.com/gpumem": "20k", "limits.nvidia.com/gpucores": "300"}),
        ),
        quota("team-b", "cpu", json!({"limits.cpu": "4"})),
        quota(
            "team-c",
            "typo",
            json!({"limits.nvidia.com/gpumem": "16Gi"}),
        ),
    ] {
        writer.apply_watcher_event(&Event::Apply(q));
    }
    let v = v.with_quotas(store);
    let q = v.quota("ns", "").unwrap();
    assert_eq!(
        q.budget(),
        v1::QuotaBudget {
            mem_mib: Some(2000),
            cores: Some(290)
        },
        "the smallest limit of each key, minus what the namespace holds"
    );
    assert_eq!(q.limits.memory.unwrap().quota, "mem");
    assert_eq!(
        v.quota("ns", "ua").unwrap().budget().mem_mib,
        Some(8000),
        "the pod being placed is not counted"
    );
    assert_eq!(v.quota("team-b", ""), None, "no GPU key: no quota");
    assert_eq!(v.quota("nobody", ""), None);
    assert_eq!(
        v.quota("team-c", "").unwrap().budget().mem_mib,
        Some(0),
        "unreadable: fails closed"
    );
    assert_eq!(v.invalid_quotas(), 1);
}
