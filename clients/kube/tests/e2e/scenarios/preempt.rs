//! Preemption that understands shared GPUs (clients/kube/README.md, "Preemption"), on the real
//! kube-scheduler: a full fractional cluster of low- and mid-priority pods sharing cards; a
//! high-priority pod is bound after exactly the victims the rule names are gone, on the right
//! card; a PodDisruptionBudget-protected pod is chosen last; the victims' cards are held for the
//! preemptor while they terminate (a low-priority pod created then stays Pending); no card is
//! ever over-booked (checked every 200 ms); kube-scheduler's own preemption is never asked
//! (`/preempt` not called, its condition says "Preemption is not helpful"); a pod that only
//! equal-priority pods block stays Pending with `NoLowerPriority`; an eviction that a budget
//! refuses leaves the pod Pending with the budget's reason. Then the same cluster under a plain
//! kube-scheduler (GPUs and GPU memory as extended resources, node totals, as without gpusched)
//! for what it would evict.
//!
//! No kubelet runs: the test plays its part. It marks the placed pods Running with a start
//! time (status), writes the PodDisruptionBudgets' status (the disruption controller's job),
//! and deletes a terminating victim with grace period 0, as the kubelet would once its
//! containers stopped.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpusched_client::v1;
use k8s_openapi::api::core::v1::{Binding, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::harness::cluster::H;
use crate::harness::http::metric_sum;
use crate::harness::pods::{Shape, allocated, node_of, unschedulable_message};
use crate::harness::scheduler::PlainScheduler;
use crate::harness::shim::Shim;
use crate::harness::{HOLDER_SELECTOR, POOL, SCHEDULER};

const LOW: (&str, i32) = ("gpusched-e2e-low", 100);
const MID: (&str, i32) = ("gpusched-e2e-mid", 500);
const HIGH: (&str, i32) = ("gpusched-e2e-high", 1000);
const CARD_MIB: u64 = 16384;

/// A pod placed before the story: its card, MiB, priority class, start (seconds after T0) and
/// labels.
struct Placed {
    name: &'static str,
    card: u32,
    mib: u64,
    class: (&'static str, i32),
    start_s: i64,
    app: Option<&'static str>,
}

/// The layout of both runs (issue 26's worked example in a cluster): per node `a` and `b`, two
/// cards of 16384 MiB.
///   a: card 1 a1 (low, 8000, started +30 s) and a2 (low, 8000, +40 s); card 2 ma (mid, 12000)
///   b: card 1 b1 (low, 6000, +10 s) and b2 (low, 6000, +20 s, PodDisruptionBudget with no
///      disruption allowed); card 2 mb (mid, 12000)
/// A high pod asks for one card with 10000 MiB. gpusched: on a, ma is put back first (it fits
/// with card 1 empty), then a1 and a2 are both victims (card 1 needs both gone); on b, b2 is
/// put back first (its budget), then mb, and b1 is the only victim: one victim wins (contract
/// 9.4 rule 3). Node totals (a: 4768 MiB free, b: 8768) see a2 alone as enough on a (12768 MiB
/// free in total, but 8384 at most on one card) and pick a by the later start of its victim.
const LAYOUT: [(&str, [Placed; 3]); 2] = [
    (
        "a",
        [
            Placed {
                name: "a1",
                card: 1,
                mib: 8000,
                class: LOW,
                start_s: 30,
                app: None,
            },
            Placed {
                name: "a2",
                card: 1,
                mib: 8000,
                class: LOW,
                start_s: 40,
                app: None,
            },
            Placed {
                name: "ma",
                card: 2,
                mib: 12000,
                class: MID,
                start_s: 0,
                app: None,
            },
        ],
    ),
    (
        "b",
        [
            Placed {
                name: "b1",
                card: 1,
                mib: 6000,
                class: LOW,
                start_s: 10,
                app: None,
            },
            Placed {
                name: "b2",
                card: 1,
                mib: 6000,
                class: LOW,
                start_s: 20,
                app: Some("b2"),
            },
            Placed {
                name: "mb",
                card: 2,
                mib: 12000,
                class: MID,
                start_s: 0,
                app: None,
            },
        ],
    ),
];

async fn priority_classes(h: &H) {
    let api: Api<PriorityClass> = Api::all(h.client.clone());
    for (name, value) in [LOW, MID, HIGH] {
        let pc: PriorityClass =
            serde_json::from_value(json!({"metadata": {"name": name}, "value": value})).unwrap();
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("PriorityClass {name}: {e}"),
        }
    }
}

/// A GPU pod spec: one container with these limits, the priority class, labels.
fn gpu_pod(
    name: &str,
    scheduler: &str,
    selector: (&str, &str),
    class: &str,
    limits: serde_json::Value,
    app: Option<&str>,
) -> Pod {
    let labels: BTreeMap<&str, &str> = app.map(|a| ("app", a)).into_iter().collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"schedulerName": scheduler, "priorityClassName": class,
                 "nodeSelector": {selector.0: selector.1}, "terminationGracePeriodSeconds": 30,
                 "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

/// Plays the kubelet: Running since `start`.
async fn mark_running(h: &H, ns: &str, name: &str, start: &str) {
    let api: Api<Pod> = Api::namespaced(h.client.clone(), ns);
    let status = json!({"status": {"phase": "Running", "startTime": start,
        "conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status of {ns}/{name}: {e}"));
}

/// A pod already bound with a decision (as gpusched-kube binds), Running since `start`.
async fn place(h: &H, ns: &str, node: &str, p: &Placed, start: &str) {
    place_with_cpu(h, ns, node, p, start, None).await;
}

/// [`place`], asking for `cpu` cores too.
async fn place_with_cpu(h: &H, ns: &str, node: &str, p: &Placed, start: &str, cpu: Option<&str>) {
    let mut limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": p.mib.to_string()});
    if let Some(c) = cpu {
        limits["cpu"] = json!(c);
    }
    let pod = gpu_pod(
        p.name,
        SCHEDULER,
        (HOLDER_SELECTOR, "none"),
        p.class.0,
        limits,
        p.app,
    );
    let created = h.create(ns, &pod).await.unwrap();
    let devices = format!("GPU-{node}-{},NVIDIA,{},0:;", p.card, p.mib);
    let binding: Binding = serde_json::from_value(json!({
        "metadata": {"name": p.name, "uid": created.metadata.uid,
                     "annotations": {crate::harness::ALLOCATED: devices, gpusched_hami::VGPU_NODE: node}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}
    }))
    .unwrap();
    let _: serde_json::Value = Api::<Pod>::namespaced(h.as_shim.clone(), ns)
        .create_subresource("binding", p.name, &PostParams::default(), &binding)
        .await
        .unwrap_or_else(|e| panic!("binding {ns}/{}: {e}", p.name));
    mark_running(h, ns, p.name, start).await;
}

/// A PodDisruptionBudget for `app` that allows no disruption, with the status the disruption
/// controller would write (no kube-controller-manager runs here).
async fn budget(h: &H, ns: &str, name: &str, app: &str) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(h.client.clone(), ns);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}
    }))
    .unwrap();
    let made = api.create(&PostParams::default(), &pdb).await.unwrap();
    let status = json!({"status": {"observedGeneration": made.metadata.generation.unwrap_or(1),
        "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The names of the namespace's pods being deleted.
async fn terminating(h: &H, ns: &str) -> Vec<String> {
    let mut v: Vec<String> = Api::<Pod>::namespaced(h.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter_map(|p| p.metadata.name)
        .collect();
    v.sort();
    v
}

/// Waits until some pod of `ns` is being deleted; returns them all.
async fn wait_terminating(h: &H, ns: &str, within: Duration) -> Vec<String> {
    let t = Instant::now();
    loop {
        let v = terminating(h, ns).await;
        if !v.is_empty() {
            return v;
        }
        assert!(
            t.elapsed() < within,
            "no pod of {ns} evicted after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Plays the kubelet once a victim's containers stopped: the pod goes away.
async fn force_delete(h: &H, ns: &str, name: &str) {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = Api::<Pod>::namespaced(h.client.clone(), ns)
        .delete(name, &dp)
        .await;
}

async fn events_matching(h: &H, ns: &str, name: &str, needle: &str) -> Option<String> {
    let t = Instant::now();
    loop {
        if let Some(e) = h
            .events(ns, name)
            .await
            .into_iter()
            .find(|e| e.contains(needle))
        {
            return Some(e);
        }
        if t.elapsed() > Duration::from_secs(10) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Sums every decision on `nodes`' cards every 200 ms (terminating pods included: their
/// containers still run) and records any card over its slots, MiB or cores.
struct OverbookingWatch {
    found: Arc<Mutex<Vec<String>>>,
    checks: Arc<Mutex<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl OverbookingWatch {
    fn start(h: &H, nodes: HashMap<String, Vec<v1::Card>>) -> Self {
        let found = Arc::new(Mutex::new(Vec::new()));
        let checks = Arc::new(Mutex::new(0));
        let (client, f, c) = (h.client.clone(), found.clone(), checks.clone());
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = Api::<Pod>::all(client.clone())
                    .list(&ListParams::default())
                    .await
                {
                    let mut used: HashMap<(String, String), (u32, u64, u32)> = HashMap::new();
                    for p in &list.items {
                        let (Some(node), Some(ann)) = (node_of(p), allocated(p)) else {
                            continue;
                        };
                        for b in ann.into_iter().flatten() {
                            let e = used.entry((node.clone(), b.uuid)).or_default();
                            e.0 += 1;
                            e.1 += b.mem_mib;
                            e.2 += b.cores;
                        }
                    }
                    for ((node, card), (slots, mem, cores)) in used {
                        let Some(c) = nodes
                            .get(&node)
                            .and_then(|cs| cs.iter().find(|c| c.id == card))
                        else {
                            continue;
                        };
                        if slots > c.slots || mem > c.total_mem_mib || cores > c.total_cores {
                            f.lock().unwrap().push(format!(
                                "{node}/{card}: slots {slots}, {mem} MiB, {cores} cores"
                            ));
                        }
                    }
                    *c.lock().unwrap() += 1;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        OverbookingWatch {
            found,
            checks,
            task,
        }
    }

    /// Stops; panics on any over-booked card; returns how many times it looked.
    fn stop(self) -> u64 {
        self.task.abort();
        let found = self.found.lock().unwrap().clone();
        assert!(found.is_empty(), "OVER-BOOKED during preemption: {found:?}");
        *self.checks.lock().unwrap()
    }
}

/// An RFC 3339 time `s` seconds after an hour ago.
fn started(t0: i64, s: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(t0 + s)
        .unwrap()
        .to_string()
}

pub async fn run(h: &H, shim: &Shim) {
    priority_classes(h).await;
    let t0 = k8s_openapi::jiff::Timestamp::now().as_second() - 3600;
    let pool = "preempt";
    let ns = h.namespace(pool, false).await;
    let shape = Shape {
        cards: 2,
        mem: CARD_MIB,
    };
    let mut cards = HashMap::new();
    for (n, placed) in &LAYOUT {
        let node = format!("pre-{n}");
        cards.insert(node.clone(), h.make_node(&node, pool, shape, 20).await);
        for p in placed {
            place(h, &ns, &node, p, &started(t0, p.start_s)).await;
        }
    }
    budget(h, &ns, "keep-b2", "b2").await;
    let watch = OverbookingWatch::start(h, cards.clone());
    // The shim's informers (pods, budgets) see all of it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let verb_calls = r#"gpusched_kube_extender_requests_total{call="preempt""#;
    let evicting = r#"gpusched_kube_preemptions_total{outcome="evicting"}"#;
    let (verb0, evicting0) = (
        metric_sum(shim.ext, verb_calls).await,
        metric_sum(shim.ext, evicting).await,
    );

    // The high pod: no card has 10000 MiB free.
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"});
    let high = gpu_pod("high", SCHEDULER, (POOL, pool), HIGH.0, limits, None);
    h.create(&ns, &high).await.unwrap();
    let gone = wait_terminating(h, &ns, Duration::from_secs(30)).await;
    assert_eq!(gone, vec!["b1"], "exactly the victim the rule names");
    let victim = h.pod(&ns, "b1").await;
    let mark = victim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget").cloned());
    assert_eq!(
        mark.and_then(|c| c.reason).as_deref(),
        Some("PreemptionByScheduler"),
        "the victim is marked as kube-scheduler marks its own"
    );
    let preempting = events_matching(h, &ns, "high", "Preempting")
        .await
        .expect("a Preempting event on the preemptor");
    assert!(
        preempting.contains("GPU-pre-b-1") && preempting.contains("b1"),
        "{preempting}"
    );
    let preempted = events_matching(h, &ns, "b1", "Preempted")
        .await
        .expect("a Preempted event on the victim");
    assert!(preempted.contains("GPU-pre-b-1"), "{preempted}");

    // While b1 terminates: the preemptor is nominated and waits; a low pod that would fit
    // b1's card once it is gone is not given it; nothing else is evicted.
    let p = h.pod(&ns, "high").await;
    assert!(node_of(&p).is_none(), "bound while its victim still runs");
    let t = Instant::now();
    let nominated = loop {
        let p = h.pod(&ns, "high").await;
        let n = p.status.and_then(|s| s.nominated_node_name);
        if n.is_some() || t.elapsed() > Duration::from_secs(10) {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        nominated.as_deref(),
        Some("pre-b"),
        "status.nominatedNodeName"
    );
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000"});
    let sneaky = gpu_pod("sneaky", SCHEDULER, (POOL, pool), LOW.0, limits, None);
    h.create(&ns, &sneaky).await.unwrap();
    let sneaky_msg = h.wait_unschedulable(&ns, "sneaky", "NoLowerPriority").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(terminating(h, &ns).await, vec!["b1"], "one preemption only");
    let msg = unschedulable_message(&h.pod(&ns, "high").await).unwrap_or_default();
    assert!(
        msg.contains("waiting for 1 pod(s) to leave"),
        "the preemptor's condition: {msg}"
    );
    // kube-scheduler's own preemption in the same cycle: its dry run removed the pods of lower
    // priority, its filters passed, it put every one back and they still passed (the cards are
    // the extender's): no victim on any node, an error of its PostFilter.
    let not_helpful = events_matching(h, &ns, "high", "expected at least one victim pod on node")
        .await
        .expect("kube-scheduler's FailedScheduling event: its dry run found no victim");
    // Later cycles, if any: it sees the preemption under way on the nominated node.
    let kept = h
        .events(&ns, "high")
        .await
        .iter()
        .any(|e| e.contains("not eligible due to a terminating pod on the nominated node"));
    let dry_run = not_helpful
        .rsplit_once(". preemption: ")
        .map_or(not_helpful.as_str(), |(_, m)| m)
        .to_owned();
    h.say(format!(
        "preemption: kube-scheduler: {not_helpful:.400}; later cycles saw it under way: {kept}"
    ));

    // The kubelet's part: b1's containers stopped.
    force_delete(h, &ns, "b1").await;
    let p = h.wait_bound(&ns, "high").await;
    let booked: Vec<(String, u64)> = allocated(&p)
        .unwrap()
        .into_iter()
        .flatten()
        .map(|b| (b.uuid, b.mem_mib))
        .collect();
    assert_eq!(node_of(&p).as_deref(), Some("pre-b"));
    assert_eq!(booked, vec![("GPU-pre-b-1".to_owned(), 10000)]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        node_of(&h.pod(&ns, "sneaky").await).is_none(),
        "the low pod stays Pending"
    );
    let verb = metric_sum(shim.ext, verb_calls).await - verb0;
    let evictions = metric_sum(shim.ext, evicting).await - evicting0;
    assert_eq!(
        verb, 0,
        "kube-scheduler never called the preemptVerb for a GPU-only blockage"
    );
    assert_eq!(evictions, 1);
    h.result(format!(
        "preemption: high (priority 1000, 10000 MiB) onto a full fractional cluster: gpusched evicted exactly \
         [b1] (pre-b GPU-pre-b-1; b2 of the same priority is protected by a PodDisruptionBudget, a1+a2 on pre-a \
         would be two victims), nominated pre-b, bound high on GPU-pre-b-1 10000 MiB once b1 was gone; a low pod \
         created meanwhile stayed Pending ({sneaky_msg:.80}...); kube-scheduler's preemptVerb called {verb} times \
         (its own dry run, same cycle: {dry_run:.160}) ✓"
    ));

    // Equal priority blocks: nothing to evict, Pending with the reason.
    let eq_pool = "preempt-eq";
    let node = "pre-c";
    let c_cards = h
        .make_node(
            node,
            eq_pool,
            Shape {
                cards: 1,
                mem: CARD_MIB,
            },
            10,
        )
        .await;
    cards.insert(node.to_owned(), c_cards);
    let peer = Placed {
        name: "peer",
        card: 1,
        mib: 12000,
        class: HIGH,
        start_s: 0,
        app: None,
    };
    place(h, &ns, node, &peer, &started(t0, 0)).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"});
    let eq = gpu_pod("equal", SCHEDULER, (POOL, eq_pool), HIGH.0, limits, None);
    h.create(&ns, &eq).await.unwrap();
    let eq_msg = h.wait_unschedulable(&ns, "equal", "NoLowerPriority").await;
    assert_eq!(terminating(h, &ns).await, Vec::<String>::new());
    h.result(format!(
        "preemption: a pod that only equal-priority pods block stays Pending: {eq_msg:.160} ✓"
    ));

    // A budget refuses the only victim: the Eviction API says no, the pod stays Pending.
    let pdb_pool = "preempt-pdb";
    let node = "pre-d";
    let d_cards = h
        .make_node(
            node,
            pdb_pool,
            Shape {
                cards: 1,
                mem: CARD_MIB,
            },
            10,
        )
        .await;
    cards.insert(node.to_owned(), d_cards);
    let guarded = Placed {
        name: "guarded",
        card: 1,
        mib: 12000,
        class: LOW,
        start_s: 0,
        app: Some("guarded"),
    };
    place(h, &ns, node, &guarded, &started(t0, 0)).await;
    budget(h, &ns, "keep-guarded", "guarded").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"});
    let blocked = gpu_pod("blocked", SCHEDULER, (POOL, pdb_pool), HIGH.0, limits, None);
    h.create(&ns, &blocked).await.unwrap();
    let pdb_msg = h
        .wait_unschedulable(&ns, "blocked", "disruption budget")
        .await;
    assert_eq!(terminating(h, &ns).await, Vec::<String>::new());
    let _ = Api::<Pod>::namespaced(h.client.clone(), &ns)
        .delete("blocked", &DeleteParams::default())
        .await;
    let verb = path_two(h, &ns, shim, t0, &mut cards).await;
    let looks = watch.stop();
    h.result(verb);
    h.result(format!(
        "preemption: the only victim's budget allows no disruption: the Eviction API refused, nothing evicted, \
         the pod stays Pending: {pdb_msg:.200}; no card over-booked in {looks} checks during the scenario ✓"
    ));

    baseline(h, t0).await;
}

/// Path 2: kube-scheduler's own filters block the pod too (CPU). A node of 4 cores and one card:
/// `hog` (low, 3 cores, 4000 MiB, started first) and `small` (low, 1 core, 10000 MiB). The pod
/// asks for 2 cores and 8000 MiB. kube-scheduler's dry run (cores only) keeps `small` and names
/// `hog`; with `hog` gone the card has 6384 MiB free, so the shim's answer at `/preempt` adds
/// `small`; kube-scheduler evicts both and nominates the node; the pod is bound there on the
/// card once they are gone.
async fn path_two(
    h: &H,
    ns: &str,
    shim: &Shim,
    t0: i64,
    cards: &mut HashMap<String, Vec<v1::Card>>,
) -> String {
    let pool = "preempt-cpu";
    let node = "pre-e";
    let e_cards = h
        .make_node(
            node,
            pool,
            Shape {
                cards: 1,
                mem: CARD_MIB,
            },
            10,
        )
        .await;
    cards.insert(node.to_owned(), e_cards);
    let res = json!({"cpu": "4", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "10"});
    Api::<Node>::all(h.client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"capacity": res, "allocatable": res}})),
        )
        .await
        .unwrap();
    for (p, cpu) in [
        (
            Placed {
                name: "hog",
                card: 1,
                mib: 4000,
                class: LOW,
                start_s: 0,
                app: None,
            },
            "3",
        ),
        (
            Placed {
                name: "small",
                card: 1,
                mib: 10000,
                class: LOW,
                start_s: 10,
                app: None,
            },
            "1",
        ),
    ] {
        place_with_cpu(h, ns, node, &p, &started(t0, p.start_s), Some(cpu)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let verb_ok = r#"gpusched_kube_extender_requests_total{call="preempt",outcome="ok"}"#;
    let before = metric_sum(shim.ext, verb_ok).await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000", "cpu": "2"});
    let pod = gpu_pod(
        "cpu-and-card",
        SCHEDULER,
        (POOL, pool),
        HIGH.0,
        limits,
        None,
    );
    h.create(ns, &pod).await.unwrap();
    let t = Instant::now();
    let gone = loop {
        let v = terminating(h, ns).await;
        if v.len() >= 2 || t.elapsed() > Duration::from_secs(30) {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        gone,
        vec!["hog", "small"],
        "kube-scheduler's victim and the card's"
    );
    let calls = metric_sum(shim.ext, verb_ok).await - before;
    assert!(calls >= 1, "kube-scheduler called /preempt");
    for v in &gone {
        force_delete(h, ns, v).await;
    }
    let p = h.wait_bound(ns, "cpu-and-card").await;
    assert_eq!(node_of(&p).as_deref(), Some(node));
    format!(
        "preemption, path 2 (cores block the pod too): kube-scheduler's dry run named [hog] (cores) and called \
         /preempt ({calls} call(s)); gpusched-kube added [small] (the card needs 8000 MiB: 6384 free without hog); \
         kube-scheduler evicted {gone:?}, the pod was bound on {node} once they were gone ✓"
    )
}

/// The same cluster without gpusched: a plain kube-scheduler, GPUs (slots) and GPU memory as
/// node-level extended resources (all a default kube-scheduler can count), its own preemption.
async fn baseline(h: &H, t0: i64) {
    let pool = "preempt-base";
    let ns = h.namespace(pool, true).await;
    let nodes: Api<Node> = Api::all(h.client.clone());
    for (n, placed) in &LAYOUT {
        let node = format!("base-pre-{n}");
        h.make_node(
            &node,
            pool,
            Shape {
                cards: 2,
                mem: CARD_MIB,
            },
            20,
        )
        .await;
        let res = json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "20",
                         "nvidia.com/gpumem": (2 * CARD_MIB).to_string()});
        nodes
            .patch_status(
                &node,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"capacity": res, "allocatable": res}})),
            )
            .await
            .unwrap();
        for p in placed {
            let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": p.mib.to_string()});
            let pod = gpu_pod(
                p.name,
                "default-scheduler",
                (HOLDER_SELECTOR, "none"),
                p.class.0,
                limits,
                p.app,
            );
            let created = h.create(&ns, &pod).await.unwrap();
            let binding: Binding = serde_json::from_value(json!({
                "metadata": {"name": p.name, "uid": created.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}
            }))
            .unwrap();
            let _: serde_json::Value = Api::<Pod>::namespaced(h.client.clone(), &ns)
                .create_subresource("binding", p.name, &PostParams::default(), &binding)
                .await
                .unwrap();
            mark_running(h, &ns, p.name, &started(t0, p.start_s)).await;
        }
    }
    budget(h, &ns, "keep-b2", "b2").await;
    let sched = PlainScheduler::start(h, "preempt-baseline-scheduler").await;
    let limits = json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"});
    let high = gpu_pod(
        "high",
        "default-scheduler",
        (POOL, pool),
        HIGH.0,
        limits,
        None,
    );
    h.create(&ns, &high).await.unwrap();
    let gone = wait_terminating(h, &ns, Duration::from_secs(30)).await;
    for v in &gone {
        force_delete(h, &ns, v).await;
    }
    let p = h.wait_bound(&ns, "high").await;
    let node = node_of(&p).unwrap_or_default();
    sched.stop().await;
    // What each card of that node holds once the victims are gone (the layout's cards).
    let side = node.trim_start_matches("base-pre-");
    let (_, placed) = LAYOUT.iter().find(|(n, _)| *n == side).unwrap();
    let mut free: BTreeMap<u32, u64> = BTreeMap::from([(1, CARD_MIB), (2, CARD_MIB)]);
    for q in placed.iter().filter(|q| !gone.iter().any(|g| g == q.name)) {
        *free.get_mut(&q.card).unwrap() -= q.mib;
    }
    let largest = free.values().copied().max().unwrap_or(0);
    assert_eq!(
        gone,
        vec!["a2"],
        "the default scheduler's victims (node totals)"
    );
    assert_eq!(node, "base-pre-a");
    assert!(largest < 10000);
    h.result(format!(
        "preemption baseline (plain kube-scheduler, nvidia.com/gpu and nvidia.com/gpumem as node totals): \
         evicted {gone:?} and bound high to {node}, where no card has 10000 MiB free (largest {largest} MiB): \
         on a real node its container could not start; gpusched evicted [b1] and placed it on a card with room ✓"
    ));
}
