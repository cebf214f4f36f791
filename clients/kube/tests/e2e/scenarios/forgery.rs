//! Forged decisions (issue 12): a placement decision is gpusched-kube's alone, so no pod author
//! (here: the cluster admin, whom admission checks too) can make the shim count usage nobody
//! decided, nor hold a card without a decision, nor shrink a decision after the bind. Each
//! forgery runs on its own one-card node (16384 MiB) and is followed by the pod that would
//! suffer from it; every failure is collected and reported together.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, allocated, first_card, node_of, unschedulable_message};
use crate::harness::{ALLOCATED, SCHEDULER};

const SHAPE: Shape = Shape {
    cards: 1,
    mem: 16384,
};

/// The denial's message (it must name one of `keys`: a request breaking two rules is denied
/// by the first policy the API server evaluates), or a failure when the request was admitted.
fn denied(
    what: &str,
    keys: &[&str],
    r: Result<impl std::fmt::Debug, kube::Error>,
    failures: &mut Vec<String>,
) -> Option<String> {
    match r {
        Err(kube::Error::Api(e)) if keys.iter().any(|k| e.message.contains(k)) => Some(e.message),
        Err(e) => {
            failures.push(format!("{what}: denied, but without naming {keys:?}: {e}"));
            None
        }
        Ok(_) => {
            failures.push(format!("{what}: ADMITTED"));
            None
        }
    }
}

/// The pod asking for the whole card: bound to it when nothing forged counts.
async fn whole_card(
    h: &H,
    ns: &str,
    name: &str,
    pool: &str,
    card: &str,
    failures: &mut Vec<String>,
) {
    let p = PodSpec::new(name, pool)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "16384")
        .build();
    h.create(ns, &p).await.unwrap();
    match h.bound_within(ns, name, Duration::from_secs(30)).await {
        Some(p) if allocated(&p).is_some() && first_card(&p) == card => {}
        Some(p) => failures.push(format!(
            "{name}: bound without the whole card {card}: {:?}",
            p.metadata.annotations
        )),
        None => failures.push(format!(
            "{name}: the free card {card} was not given (forged usage counted): {:?}",
            unschedulable_message(&h.pod(ns, name).await)
        )),
    }
}

pub async fn run(h: &H) {
    let ns = h.namespace("forgery", false).await;
    let mut failures = Vec::new();
    let node_of_case = |i: u32| format!("forgery-node{i}");
    for i in 1..=5 {
        let node = node_of_case(i);
        h.make_node(&node, &node, SHAPE, 1).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let card = |i: u32| format!("GPU-{}-1", node_of_case(i));
    let full = |i: u32| format!("{},NVIDIA,16384,100:;", card(i));

    // 1. Created already bound, with a forged -allocated (it would block the card).
    let (n1, c1) = (node_of_case(1), card(1));
    let forged = PodSpec::new("f1-forged", &n1)
        .scheduler(SCHEDULER)
        .node_name(&n1)
        .ann(ALLOCATED, full(1))
        .limit("nvidia.com/gpu", "1")
        .build();
    if let Some(m) = denied(
        "created bound with a forged -allocated",
        &[ALLOCATED, "spec.nodeName"],
        h.create(&ns, &forged).await,
        &mut failures,
    ) {
        h.result(format!(
            "forgery 1, created bound with a forged -allocated: {m}"
        ));
    }
    whole_card(h, &ns, "f1-probe", &n1, &c1, &mut failures).await;

    // 2. Created already bound without annotations (it would hold the card uncounted).
    let n2 = node_of_case(2);
    let forged = PodSpec::new("f2-forged", &n2)
        .scheduler(SCHEDULER)
        .node_name(&n2)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "16384")
        .build();
    if let Some(m) = denied(
        "created bound without a decision",
        &["spec.nodeName"],
        h.create(&ns, &forged).await,
        &mut failures,
    ) {
        h.result(format!("forgery 2, created bound without a decision: {m}"));
    }
    whole_card(h, &ns, "f2-probe", &n2, &card(2), &mut failures).await;
    let on_node: Vec<Pod> = Api::<Pod>::namespaced(h.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| node_of(p).as_deref() == Some(n2.as_str()))
        .collect();
    for p in on_node.iter().filter(|p| allocated(p).is_none()) {
        failures.push(format!(
            "{:?} holds {n2}'s card without a decision ({} pods bound there)",
            p.metadata.name,
            on_node.len()
        ));
    }

    // 3. Never bound, with a forged hami.io/vgpu-node and -allocated (counted through the
    //    vgpu-node fallback before).
    let n3 = node_of_case(3);
    let forged = PodSpec::new("f3-forged", "nowhere")
        .scheduler(SCHEDULER)
        .ann(gpusched_hami::VGPU_NODE, n3.clone())
        .ann(ALLOCATED, full(3))
        .limit("nvidia.com/gpu", "1")
        .build();
    if let Some(m) = denied(
        "never bound, forged hami.io/vgpu-node + -allocated",
        &[ALLOCATED, gpusched_hami::VGPU_NODE],
        h.create(&ns, &forged).await,
        &mut failures,
    ) {
        h.result(format!(
            "forgery 3, never bound with a forged vgpu-node and -allocated: {m}"
        ));
    }
    whole_card(h, &ns, "f3-probe", &n3, &card(3), &mut failures).await;

    // 4. After the bind, the pod's own -allocated patched down, so that a second pod would be
    //    given the same memory (24,000 MiB on a 16,384 MiB card before).
    let (n4, c4) = (node_of_case(4), card(4));
    let a = PodSpec::new("f4-a", &n4)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "12000")
        .build();
    h.create(&ns, &a).await.unwrap();
    h.wait_bound(&ns, "f4-a").await;
    let api = Api::<Pod>::namespaced(h.client.clone(), &ns);
    let shrink = json!({"metadata": {"annotations": {ALLOCATED: format!("{c4},NVIDIA,1000,0:;")}}});
    if let Some(m) = denied(
        "patching the bound pod's own -allocated",
        &[ALLOCATED],
        api.patch("f4-a", &PatchParams::default(), &Patch::Merge(&shrink))
            .await,
        &mut failures,
    ) {
        h.result(format!("forgery 4, -allocated patched after the bind: {m}"));
    }
    let drop_node = json!({"metadata": {"annotations": {gpusched_hami::VGPU_NODE: null}}});
    denied(
        "removing the bound pod's hami.io/vgpu-node",
        &[gpusched_hami::VGPU_NODE],
        api.patch("f4-a", &PatchParams::default(), &Patch::Merge(&drop_node))
            .await,
        &mut failures,
    );
    // Other changes to the pod stay allowed.
    let other = json!({"metadata": {"annotations": {"example.com/note": "still editable"}}});
    if let Err(e) = api
        .patch("f4-a", &PatchParams::default(), &Patch::Merge(&other))
        .await
    {
        failures.push(format!("an unrelated annotation could not be added: {e}"));
    }
    let b = PodSpec::new("f4-b", &n4)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "12000")
        .build();
    h.create(&ns, &b).await.unwrap();
    let t = std::time::Instant::now();
    loop {
        let p = h.pod(&ns, "f4-b").await;
        if node_of(&p).is_some() {
            failures.push(format!(
                "f4-b was bound next to f4-a on {c4}: 24000 MiB booked on a 16384 MiB card ({:?})",
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ALLOCATED))
            ));
            break;
        }
        if let Some(m) = unschedulable_message(&p).filter(|m| m.contains("CardInsufficientMemory"))
        {
            h.result(format!(
                "forgery 4: the second 12000 MiB pod stays pending: {m}"
            ));
            break;
        }
        if t.elapsed() > Duration::from_secs(30) {
            failures.push(format!(
                "f4-b neither bound nor pending for memory after 30s: {:?}",
                unschedulable_message(&p)
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // 5. A Binding that carries a decision, from someone else than the shim (the admin).
    let n5 = node_of_case(5);
    let unbound = PodSpec::new("f5-unbound", "nowhere")
        .scheduler(SCHEDULER)
        .limit("nvidia.com/gpu", "1")
        .build();
    let created = h.create(&ns, &unbound).await.unwrap();
    let binding: Binding = serde_json::from_value(json!({
        "metadata": {"name": "f5-unbound", "uid": created.metadata.uid,
                     "annotations": {ALLOCATED: full(5), gpusched_hami::VGPU_NODE: n5}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": n5}
    }))
    .unwrap();
    let r: Result<serde_json::Value, _> = api
        .create_subresource("binding", "f5-unbound", &PostParams::default(), &binding)
        .await;
    if let Some(m) = denied(
        "a Binding with a decision, not from the shim",
        &[ALLOCATED, gpusched_hami::VGPU_NODE],
        r,
        &mut failures,
    ) {
        h.result(format!(
            "forgery 5, a Binding with a decision from the admin: {m}"
        ));
    }
    whole_card(h, &ns, "f5-probe", &n5, &card(5), &mut failures).await;

    assert!(
        failures.is_empty(),
        "forged decisions got through:\n  {}",
        failures.join("\n  ")
    );
    h.result(
        "forgeries: created bound (with and without -allocated), never bound with vgpu-node, \
         -allocated patched after bind, a Binding with a decision from the admin: all denied \
         naming the key; every probe got its whole card, the second 12000 MiB pod stayed pending ✓",
    );
}
