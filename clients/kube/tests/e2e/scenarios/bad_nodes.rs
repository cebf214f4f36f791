//! Bad nodes do not stop scheduling: ten nodes whose GPU inventory is invalid, one of each kind
//! (duplicate card ids, a blank card id, memory, cores and slots of `i32::MAX`, more cards than
//! the server's `max_cards_per_node`, negative memory, memory that overflows the annotation's
//! integers, a pair score and a cordon naming a card the node does not have), a node whose cards
//! have no memory, and two good nodes, all in one pool: 20 GPU pods created at once are all bound
//! on the good nodes (no card over-booked), every bad node is reported unresolvable with its
//! reason, and a pod that fits nowhere says why (`InvalidNode`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::POOL;
use crate::harness::burst::check_no_overbooking;
use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, allocated, cards_of, node_of};

const REGISTER: &str = gpusched_hami::NODE_REGISTER;
const PODS: usize = 20;
const GOOD: Shape = Shape {
    cards: 4,
    mem: 16384,
};

/// A schedulable fake node with exactly these annotations (what `H::make_node` does, with the
/// annotations given instead of a valid register).
async fn make_raw_node(h: &H, name: &str, pool: &str, annotations: BTreeMap<&str, String>) {
    let api: Api<Node> = Api::all(h.client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", POOL: pool,
                       "gpusched.e2e/fake-node": "true"},
            "annotations": annotations},
        "spec": {}
    }))
    .unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    let res = json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "4"});
    let status = json!({"status": {"capacity": res, "allocatable": res,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node (gpusched e2e)"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"taints": null}})),
    )
    .await
    .unwrap();
}

/// The ten bad nodes: name suffix, annotations, and a piece of the reason each must get.
fn bad_nodes(pool: &str) -> Vec<(String, BTreeMap<&'static str, String>, &'static str)> {
    let reg = |cards: &[v1::Card]| gpusched_hami::encode_register(cards);
    let edited = |kind: &str, edit: &dyn Fn(&mut Vec<v1::Card>)| {
        let name = format!("{pool}-bad-{kind}");
        let mut c = cards_of(&name, GOOD);
        edit(&mut c);
        (name, BTreeMap::from([(REGISTER, reg(&c))]))
    };
    let mut out = Vec::new();
    let mut add = |(name, ann): (String, BTreeMap<&'static str, String>), says: &'static str| {
        out.push((name, ann, says));
    };
    add(
        edited("dup", &|c| c[2].id = c[0].id.clone()),
        "[2].id DUPLICATE_ID",
    );
    add(
        edited("blank", &|c| c[1].id = " ".into()),
        "[1].id MISSING_FIELD",
    );
    add(
        edited("mem", &|c| c[0].total_mem_mib = i32::MAX as u64),
        "[0].devmem OUT_OF_RANGE",
    );
    add(
        edited("cores", &|c| c[3].total_cores = i32::MAX as u32),
        "[3].devcore OUT_OF_RANGE",
    );
    add(
        edited("slots", &|c| c[0].slots = i32::MAX as u32),
        "[0].count OUT_OF_RANGE",
    );
    let many = format!("{pool}-bad-many");
    add(
        (
            many.clone(),
            BTreeMap::from([(
                REGISTER,
                reg(&cards_of(
                    &many,
                    Shape {
                        cards: 65,
                        mem: 16384,
                    },
                )),
            )]),
        ),
        "cards LIMIT_EXCEEDED",
    );
    add(
        (
            format!("{pool}-bad-negative"),
            BTreeMap::from([(
                REGISTER,
                r#"[{"id":"GPU-neg","count":10,"devmem":-16384,"devcore":100,"type":"NVIDIA-A100","health":true}]"#.to_owned(),
            )]),
        ),
        "is negative",
    );
    add(
        (
            format!("{pool}-bad-overflow"),
            BTreeMap::from([(
                REGISTER,
                r#"[{"id":"GPU-big","count":10,"devmem":4294967296,"devcore":100,"type":"NVIDIA-A100","health":true}]"#.to_owned(),
            )]),
        ),
        "unreadable GPU inventory",
    );
    let (name, mut ann) = edited("pair", &|_| {});
    ann.insert(
        gpusched_hami::NODE_SCORE,
        json!([{"uuid": format!("GPU-{name}-1"), "score": {"GPU-nowhere": 100}}]).to_string(),
    );
    add((name, ann), "hami.io/node-nvidia-score UNKNOWN_REFERENCE");
    let (name, mut ann) = edited("cordon", &|_| {});
    ann.insert(
        gpusched_hami::DEVICE_CORDON,
        format!("GPU-{name}-1,GPU-ghost"),
    );
    add((name, ann), "hami.io/device-cordon UNKNOWN_REFERENCE");
    out
}

pub async fn run(h: &H) {
    let pool = "badnodes";
    let ns = h.namespace(pool, false).await;
    let bad = bad_nodes(pool);
    assert_eq!(bad.len(), 10, "one bad node of each kind");
    for (name, ann, _) in &bad {
        make_raw_node(h, name, pool, ann.clone()).await;
    }
    // Cards without memory: valid, refused card by card.
    let zero = format!("{pool}-zero");
    let mut zero_cards = cards_of(&zero, GOOD);
    for c in &mut zero_cards {
        c.total_mem_mib = 0;
    }
    make_raw_node(
        h,
        &zero,
        pool,
        BTreeMap::from([(REGISTER, gpusched_hami::encode_register(&zero_cards))]),
    )
    .await;
    let mut good: HashMap<String, Vec<v1::Card>> = HashMap::new();
    for i in 1..=2 {
        let name = format!("{pool}-good-{i}");
        let cards = h.make_node(&name, pool, GOOD, 4).await;
        good.insert(name, cards);
    }
    // Let the shim's informer see every node before the pods come.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let start = Instant::now();
    for i in 0..PODS {
        let pod = PodSpec::new(format!("p{i:02}"), pool)
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem", "4096")
            .build();
        h.create(&ns, &pod).await.unwrap();
    }
    let mut on: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..PODS {
        let p = h.wait_bound(&ns, &format!("p{i:02}")).await;
        let node = node_of(&p).unwrap();
        assert!(
            good.contains_key(&node),
            "pod p{i:02} bound to {node}, not a good node"
        );
        let cards = allocated(&p).expect("a GPU decision");
        assert!(
            cards
                .iter()
                .flatten()
                .all(|b| good[&node].iter().any(|c| c.id == b.uuid)),
            "pod p{i:02} booked a card of another node: {cards:?}"
        );
        *on.entry(node).or_default() += 1;
    }
    let took = start.elapsed();
    let (bound, cards_used) = check_no_overbooking(h, &good, &ns).await;
    assert_eq!(bound, PODS);

    // A pod that fits nowhere is told why; every bad node is unresolvable with its reason
    // (kube-scheduler lists the extender's reasons in the PodScheduled condition).
    let big = PodSpec::new("too-big", pool)
        .limit("nvidia.com/gpu", "8")
        .build();
    h.create(&ns, &big).await.unwrap();
    let msg = h.wait_unschedulable(&ns, "too-big", "InvalidNode").await;
    for (name, _, says) in &bad {
        assert!(
            msg.contains(says),
            "the reason for {name} should say {says:?}: {msg}"
        );
    }
    h.result(format!(
        "bad nodes: {PODS}/{PODS} GPU pods bound in {:.1}s on the 2 good nodes ({on:?}, {cards_used} cards, none over-booked) beside 10 invalid nodes (one of each kind) and a node of 0 MiB cards; each invalid node unresolvable with its reason ✓",
        took.as_secs_f64()
    ));
}
