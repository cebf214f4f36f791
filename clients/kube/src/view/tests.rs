//! The view's rules: usage of our pods only, forged decisions, the assume cache and
//! reservations, prepared forms kept while nothing changes, per-node bind locks.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use super::*;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

pub(super) fn gpu_node(name: &str, cards: u32) -> Node {
    let cards = gpusched_client::node(name, cards, 10000, "NVIDIA-T4").cards;
    serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
        "hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)
    }}}))
    .unwrap()
}

/// A GPU pod; bound to `node` with `devices` as the shim writes a decision (the Binding
/// sets spec.nodeName and hami.io/vgpu-node together).
pub(super) fn pod(
    name: &str,
    uid: &str,
    scheduler: &str,
    node: Option<&str>,
    devices: &str,
) -> Pod {
    let mut ann = serde_json::Map::new();
    if !devices.is_empty() {
        ann.insert("hami.io/vgpu-devices-allocated".into(), json!(devices));
        if let Some(n) = node {
            ann.insert("hami.io/vgpu-node".into(), json!(n));
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": ann},
        "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [{"name": "c",
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

pub(super) fn view(
    nodes: Vec<Node>,
    pods: Vec<Pod>,
) -> (ClusterView, reflector::store::Writer<Pod>) {
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, mut pw) = reflector::store::<Pod>();
    for n in nodes {
        nw.apply_watcher_event(&Event::Apply(n));
    }
    for p in pods {
        pw.apply_watcher_event(&Event::Apply(p));
    }
    drop(nw);
    (
        ClusterView::new(nr, pr, names(), Duration::from_secs(60)),
        pw,
    )
}

fn used(snap: &Snapshot, node: &str, card: usize) -> (u32, u64, u32) {
    let n = snap.nodes.iter().find(|n| n.name == node).unwrap();
    let u = n.cards[card].usage.unwrap_or_default();
    (u.used_slots, u.used_mem_mib, u.used_cores)
}

#[test]
fn snapshot_sums_usage_of_our_pods_only() {
    let (v, _w) = view(
        vec![
            gpu_node("n1", 2),
            gpu_node("n2", 2),
            serde_json::from_value(json!({"metadata": {"name": "cpu"}})).unwrap(),
        ],
        vec![
            pod(
                "a",
                "ua",
                "gpusched-scheduler",
                Some("n1"),
                "n1-gpu0,NVIDIA,1000,10:;",
            ),
            pod(
                "b",
                "ub",
                "gpusched-scheduler",
                Some("n1"),
                "n1-gpu0,NVIDIA,2000,20:;",
            ),
            pod(
                "forged",
                "uf",
                "default-scheduler",
                Some("n1"),
                "n1-gpu1,NVIDIA,9000,90:;",
            ),
            pod(
                "other-node",
                "uo",
                "gpusched-scheduler",
                Some("n2"),
                "n2-gpu1,NVIDIA,500,0:;",
            ),
        ],
    );
    let s = v.snapshot(
        &["n1".into(), "n2".into(), "cpu".into(), "ghost".into()],
        "",
    );
    assert_eq!(used(&s, "n1", 0), (2, 3000, 30));
    assert_eq!(
        used(&s, "n1", 1),
        (0, 0, 0),
        "the default-scheduler pod's annotation is ignored"
    );
    assert_eq!(used(&s, "n2", 1), (1, 500, 0));
    assert_eq!(s.unusable.len(), 2);
    assert!(
        s.unusable
            .iter()
            .any(|(n, m, unres)| n == "cpu" && m.contains("missing") && *unres)
    );
    assert!(
        s.unusable
            .iter()
            .any(|(n, _, unres)| n == "ghost" && !*unres)
    );
    // The pod being placed does not count against itself.
    let s = v.snapshot(&["n1".into()], "ua");
    assert_eq!(used(&s, "n1", 0), (1, 2000, 20));
}

#[test]
fn forged_decisions_hold_nothing() {
    // Created bound with a forged -allocated (no vgpu-node: the shim's Binding did not
    // write it), and never bound with a forged vgpu-node + -allocated.
    let mut created_bound = pod(
        "created-bound",
        "u1",
        "gpusched-scheduler",
        Some("n1"),
        "n1-gpu0,NVIDIA,10000,100:;",
    );
    created_bound
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .remove("hami.io/vgpu-node");
    let mut never_bound = pod(
        "never-bound",
        "u2",
        "gpusched-scheduler",
        None,
        "n1-gpu1,NVIDIA,10000,100:;",
    );
    never_bound
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("hami.io/vgpu-node".into(), "n1".into());
    let (v, _w) = view(vec![gpu_node("n1", 2)], vec![created_bound, never_bound]);
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(used(&s, "n1", 0), (0, 0, 0));
    assert_eq!(used(&s, "n1", 1), (0, 0, 0));
}

pub(super) fn assumed(uid: &str, name: &str, node: &str, annotation: &str) -> Assumed {
    Assumed {
        namespace: "ns".into(),
        name: name.into(),
        uid: uid.into(),
        node: node.into(),
        bookings: gpusched_hami::decode_pod_devices(annotation).unwrap(),
        mig: vec![],
        init: 0,
        annotation: annotation.into(),
        at: Instant::now(),
        seen: false,
        tentative: false,
    }
}

#[test]
fn prepared_nodes_are_kept_until_their_inventory_or_usage_changes() {
    let with_rv = |mut n: Node| {
        n.metadata.resource_version = Some("1".into());
        n
    };
    let mut a = pod(
        "a",
        "ua",
        "gpusched-scheduler",
        Some("n1"),
        "n1-gpu0,NVIDIA,1000,10:;",
    );
    a.metadata.resource_version = Some("5".into());
    let (v, mut w) = view(
        vec![with_rv(gpu_node("n1", 2)), with_rv(gpu_node("n2", 2))],
        vec![a.clone()],
    );
    let names = ["n1".to_owned(), "n2".to_owned()];
    let same = |x: &Snapshot, y: &Snapshot, i: usize| Arc::ptr_eq(&x.prepared[i], &y.prepared[i]);
    let s1 = v.snapshot(&names, "");
    let s2 = v.snapshot(&names, "");
    assert!(same(&s1, &s2, 0) && same(&s1, &s2, 1), "nothing changed");
    for (n, p) in s1.nodes.iter().zip(&s1.prepared) {
        assert_eq!(p.to_node(), **n, "the prepared form is the node");
    }
    // A decision on n2 rebuilds n2 only; the same decision again keeps it.
    v.assume(assumed("ub", "b", "n2", "n2-gpu1,NVIDIA,4000,0:;"));
    let s3 = v.snapshot(&names, "");
    assert!(same(&s1, &s3, 0));
    assert!(!same(&s1, &s3, 1));
    assert_eq!(used(&s3, "n2", 1), (1, 4000, 0));
    assert_eq!(s3.prepared[1].to_node(), *s3.nodes[1]);
    let s4 = v.snapshot(&names, "");
    assert!(same(&s3, &s4, 0) && same(&s3, &s4, 1));
    // Leaving out the pod being placed changes n1's usage.
    let s5 = v.snapshot(&names, "ua");
    assert!(!same(&s4, &s5, 0));
    assert_eq!(used(&s5, "n1", 0), (0, 0, 0));
    assert_eq!(s5.prepared[0].to_node(), *s5.nodes[0]);
    // The pod's decision changes (new resourceVersion): n1 is rebuilt with it.
    let s6 = v.snapshot(&names, "");
    a.metadata.resource_version = Some("6".into());
    a.metadata.annotations.as_mut().unwrap().insert(
        "hami.io/vgpu-devices-allocated".into(),
        "n1-gpu1,NVIDIA,3000,0:;".into(),
    );
    w.apply_watcher_event(&Event::Apply(a));
    let s7 = v.snapshot(&names, "");
    assert!(!same(&s6, &s7, 0) && same(&s6, &s7, 1));
    assert_eq!(used(&s7, "n1", 0), (0, 0, 0));
    assert_eq!(used(&s7, "n1", 1), (1, 3000, 0));
}

#[test]
fn assumed_decisions_count_until_the_informer_shows_them() {
    let ann = "n1-gpu1,NVIDIA,4000,0:;";
    let (v, mut w) = view(
        vec![gpu_node("n1", 2)],
        vec![pod("p", "up", "gpusched-scheduler", None, "")],
    );
    v.assume(assumed("up", "p", "n1", ann));
    // The store shows the pod without the annotation: the assumed decision counts.
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(used(&s, "n1", 1), (1, 4000, 0));
    assert_eq!(v.assumed_len(), 1);
    // The informer catches up: counted once, from the store; the entry expires.
    w.apply_watcher_event(&Event::Apply(pod(
        "p",
        "up",
        "gpusched-scheduler",
        Some("n1"),
        ann,
    )));
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(used(&s, "n1", 1), (1, 4000, 0));
    assert_eq!(v.assumed_len(), 0);
}

#[test]
fn assumed_decision_replaces_a_stale_annotation_and_expires_when_pod_is_gone() {
    let old = "n1-gpu0,NVIDIA,1000,0:;";
    let new = "n1-gpu1,NVIDIA,2000,0:;";
    // A pod carrying an older, unbound decision (never counted: no spec.nodeName) is
    // re-bound: only the new one counts.
    let mut stale = pod("p", "up", "gpusched-scheduler", None, old);
    stale
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("hami.io/vgpu-node".into(), "n1".into());
    let (v, mut w) = view(vec![gpu_node("n1", 2)], vec![stale.clone()]);
    v.assume(assumed("up", "p", "n1", new));
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(used(&s, "n1", 0), (0, 0, 0));
    assert_eq!(used(&s, "n1", 1), (1, 2000, 0));
    // The pod is deleted after it was seen: the decision is void.
    w.apply_watcher_event(&Event::Delete(stale));
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(used(&s, "n1", 1), (0, 0, 0));
    assert_eq!(v.assumed_len(), 0);
}

#[test]
fn assumed_fate_rules() {
    let ttl = Duration::from_secs(10);
    let now = Instant::now();
    let ann = "g,NVIDIA,1,0:;";
    let mut a = assumed("u", "p", "n1", ann);
    // Never seen, young: keep.
    assert_eq!(
        assumed_fate(&mut a, &Observed::Absent, now, ttl),
        Some(true)
    );
    // Seen without the annotation: keep, and remember it was seen.
    assert_eq!(
        assumed_fate(&mut a, &Observed::Present(None), now, ttl),
        Some(true)
    );
    assert!(a.seen);
    // Gone after being seen: void.
    assert_eq!(assumed_fate(&mut a, &Observed::Absent, now, ttl), None);
    // Confirmed: the store counts it.
    let confirmed = PodUsage {
        node: "n1".into(),
        namespace: "ns".into(),
        bookings: vec![],
        mig: vec![],
        owner: "ns/p".into(),
        init: 0,
        annotation: ann.into(),
        problem: None,
    };
    assert_eq!(
        assumed_fate(
            &mut assumed("u", "p", "n1", ann),
            &Observed::Present(Some(confirmed.clone())),
            now,
            ttl
        ),
        Some(false)
    );
    // Same annotation on another node is not a confirmation.
    let elsewhere = PodUsage {
        node: "n2".into(),
        ..confirmed
    };
    assert_eq!(
        assumed_fate(
            &mut assumed("u", "p", "n1", ann),
            &Observed::Present(Some(elsewhere)),
            now,
            ttl
        ),
        Some(true)
    );
    // A reservation gives way to any real decision the store shows.
    let mut r = assumed("u", "p", "n1", "");
    r.tentative = true;
    let real = PodUsage {
        node: "n2".into(),
        namespace: "ns".into(),
        bookings: vec![],
        mig: vec![],
        owner: "ns/p".into(),
        init: 0,
        annotation: ann.into(),
        problem: None,
    };
    assert_eq!(
        assumed_fate(&mut r, &Observed::Present(Some(real)), now, ttl),
        None
    );
    // Never seen and too old: void.
    let mut old = assumed("u", "p", "n1", ann);
    assert_eq!(
        assumed_fate(
            &mut old,
            &Observed::Absent,
            now + Duration::from_secs(11),
            ttl
        ),
        None
    );
}

#[test]
fn reservations_count_until_replaced_or_expired() {
    let (v, _w) = view(
        vec![gpu_node("n1", 2)],
        vec![pod("p", "up", "gpusched-scheduler", None, "")],
    );
    let v = v.with_reservation_ttl(Duration::from_millis(200));
    v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
    assert_eq!(used(&v.snapshot(&["n1".into()], ""), "n1", 0), (1, 1000, 0));
    // Not against the pod itself.
    assert_eq!(used(&v.snapshot(&["n1".into()], "up"), "n1", 0), (0, 0, 0));
    // The bind's real decision replaces it; a later reservation does not replace a real one.
    v.assume(assumed("up", "p", "n1", "n1-gpu1,NVIDIA,500,0:;"));
    v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
    let s = v.snapshot(&["n1".into()], "");
    assert_eq!(
        (used(&s, "n1", 0), used(&s, "n1", 1)),
        ((0, 0, 0), (1, 500, 0))
    );
    // A reservation whose bind never comes expires.
    v.forget("up");
    v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(used(&v.snapshot(&["n1".into()], ""), "n1", 0), (0, 0, 0));
    assert_eq!(v.assumed_len(), 0);
}

#[tokio::test]
async fn binds_to_one_node_are_serialised() {
    let (v, _w) = view(vec![], vec![]);
    let v = Arc::new(v);
    let g = v.lock_node("n1").await;
    let v2 = v.clone();
    let other = tokio::spawn(async move {
        let _g = v2.lock_node("n2").await;
    });
    tokio::time::timeout(Duration::from_secs(2), other)
        .await
        .unwrap()
        .unwrap();
    let v3 = v.clone();
    let mut same = tokio::spawn(async move {
        let _g = v3.lock_node("n1").await;
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut same)
            .await
            .is_err()
    );
    drop(g);
    tokio::time::timeout(Duration::from_secs(2), same)
        .await
        .unwrap()
        .unwrap();
}
