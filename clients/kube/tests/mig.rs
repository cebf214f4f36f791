//! MIG nodes through the shim's whole data path against a real gpusched-server (in process, on
//! 127.0.0.1:0), with the cluster view fed from reflector stores: the node agent's annotations
//! (HAMi's `migProfiles`, gpusched's `gpusched.io/node-mig-layouts`) become MIG layouts, each
//! decision's annotations (`hami.io/vgpu-mig-allocations` next to the devices) are written as
//! the bind writes them and read back as instances in use, reservations hold instances, and bad
//! MIG data fails the node, named (docs/placement-semantics.md section 11,
//! docs/hami-protocol.md "MIG").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpusched_client::{ClientBuilder, v1};
use gpusched_kube::config::Names;
use gpusched_kube::extender_v1::ExtenderArgs;
use gpusched_kube::leader::Leadership;
use gpusched_kube::metrics::Metrics;
use gpusched_kube::shim::Shim;
use gpusched_kube::translate;
use gpusched_kube::view::ClusterView;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::json;

fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

/// `(name, MiB, compute slices, memory slices, cores, max instances, starts, allowed)`: NVML's
/// H100 80GB HBM3 table (docs/placement-semantics.md 11.7), with HAMi's default allowlist.
type Row = (&'static str, u64, u32, u32, u32, u32, &'static [u32], bool);
const H100: [Row; 7] = [
    ("1g.10gb", 9984, 1, 1, 13, 7, &[0, 1, 2, 3, 4, 5, 6], true),
    (
        "1g.10gb+me",
        9984,
        1,
        1,
        13,
        1,
        &[0, 1, 2, 3, 4, 5, 6],
        false,
    ),
    ("1g.20gb", 20096, 1, 2, 20, 4, &[0, 2, 4, 6], false),
    ("2g.20gb", 20096, 2, 2, 25, 3, &[0, 2, 4], true),
    ("3g.40gb", 40448, 3, 4, 46, 2, &[0, 4], true),
    ("4g.40gb", 40448, 4, 4, 49, 1, &[0], false),
    ("7g.80gb", 81152, 7, 8, 100, 1, &[0], true),
];

fn layout(rows: &[Row], free: &[(&str, u32, u32)]) -> v1::MigLayout {
    v1::MigLayout {
        compute_slices: 7,
        memory_slices: 8,
        profiles: rows
            .iter()
            .map(
                |&(name, mem, c, m, cores, max, at, allowed)| v1::MigProfile {
                    name: name.into(),
                    mem_mib: mem,
                    compute_slices: c,
                    memory_slices: m,
                    cores,
                    max_instances: max,
                    placements: at.to_vec(),
                    not_allowed: !allowed,
                },
            )
            .collect(),
        instances: free
            .iter()
            .map(|&(p, start, size)| v1::MigInstance {
                profile: p.into(),
                start,
                size,
                in_use_by: String::new(),
            })
            .collect(),
    }
}

/// Where the node's MIG facts come from.
#[derive(Clone, Copy, PartialEq)]
enum Source {
    /// HAMi's `migProfiles` and gpusched's layout annotation (what our agent publishes).
    Agent,
    /// HAMi's `migProfiles` alone (HAMi's device plugin, or an older agent).
    HamiOnly,
}

/// A node with an H100 in MIG mode (card 0, 81,559 MiB) and an H100 in mode hami-core (card 1),
/// its annotations as the node agent writes them; `free` are instances the agent saw.
fn mig_node(name: &str, source: Source, free: &[(&str, u32, u32)]) -> Node {
    let mut cards = gpusched_client::node(name, 2, 81559, "NVIDIA H100 80GB HBM3").cards;
    cards[0].mode = v1::CardMode::Mig as i32;
    cards[0].slots = 7;
    let l = layout(&H100, free);
    let mut reg: Vec<gpusched_hami::RegisteredCard> = cards
        .iter()
        .map(gpusched_hami::RegisteredCard::from_card)
        .collect();
    reg[0].mig_profiles = l
        .profiles
        .iter()
        .filter(|p| !p.not_allowed)
        .map(|p| gpusched_hami::MigProfile {
            name: p.name.clone(),
            memory_mb: i32::try_from(p.mem_mib).unwrap(),
            core: i32::try_from(p.cores).unwrap(),
            slice_count: p.compute_slices,
            placements: p
                .placements
                .iter()
                .map(|&start| gpusched_hami::MigPlacement {
                    start,
                    size: p.memory_slices,
                })
                .collect(),
        })
        .collect();
    let mut ann = serde_json::Map::new();
    ann.insert(
        gpusched_hami::NODE_REGISTER.into(),
        json!(gpusched_hami::encode_registered(&reg)),
    );
    if source == Source::Agent {
        ann.insert(
            gpusched_hami::NODE_MIG_LAYOUTS.into(),
            json!(gpusched_hami::encode_node_mig_layouts(&BTreeMap::from([(
                cards[0].id.clone(),
                l
            )]))),
        );
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "resourceVersion": "1", "annotations": ann}}),
    )
    .unwrap()
}

fn plain_node(name: &str) -> Node {
    let cards = gpusched_client::node(name, 1, 81559, "NVIDIA H100 80GB HBM3").cards;
    serde_json::from_value(
        json!({"metadata": {"name": name, "resourceVersion": "1", "annotations": {
            gpusched_hami::NODE_REGISTER: gpusched_hami::encode_register(&cards)
        }}}),
    )
    .unwrap()
}

/// A pending pod: one container with these limits, `vgpu-mode: mig` when `mig`.
fn pod(name: &str, mig: bool, limits: serde_json::Value) -> Pod {
    let ann = if mig {
        json!({"nvidia.com/vgpu-mode": "mig"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"), "resourceVersion": "1", "annotations": ann},
        "spec": {"schedulerName": "gpusched-scheduler",
                 "containers": [{"name": "main", "resources": {"limits": limits}}]}
    }))
    .unwrap()
}

fn gpumem(mib: u32) -> serde_json::Value {
    json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib.to_string()})
}

/// `p` as the shim's Binding leaves it: bound to `node` with the decision's annotations.
fn bound(mut p: Pod, node: &str, annotations: &BTreeMap<String, String>) -> Pod {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
    let m = p.metadata.annotations.get_or_insert_with(BTreeMap::new);
    m.extend(annotations.clone());
    p.metadata.resource_version = Some("2".into());
    p
}

struct Cluster {
    _server: gpusched_service::Running,
    shim: Arc<Shim>,
    pods: reflector::store::Writer<Pod>,
}

async fn cluster(nodes: Vec<Node>) -> Cluster {
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let (nr, mut nw) = reflector::store::<Node>();
    let (pr, pw) = reflector::store::<Pod>();
    for n in nodes {
        nw.apply_watcher_event(&Event::Apply(n));
    }
    let view = Arc::new(ClusterView::new(nr, pr, names(), Duration::from_secs(60)));
    view.mark_synced();
    let shim = Arc::new(Shim {
        view,
        service,
        kube: None,
        leader: Arc::new(Leadership::always("t")),
        recorder: None,
        reserve: false,
        metrics: Metrics::default(),
        traces: gpusched_kube::traces::PodTraces::off(),
        preemptor: None,
    });
    Cluster {
        _server: server,
        shim,
        pods: pw,
    }
}

fn args(p: &Pod, nodes: &[&str]) -> ExtenderArgs {
    ExtenderArgs {
        pod: Some(p.clone()),
        nodes: None,
        node_names: Some(nodes.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// What happened to a pod: bound with its MIG reservation `(profile, start)`, or pending.
#[derive(Debug, PartialEq)]
enum Fate {
    Mig(&'static str, u32),
    Core,
    Pending(String),
}

impl Cluster {
    /// Schedules `p` as kube-scheduler and the shim do (filter, prioritize when more than one
    /// node is feasible, then the bind's Allocate on the top node and its annotations), and puts
    /// the bound pod in the store.
    async fn schedule(&mut self, p: Pod, nodes: &[&str]) -> (Fate, BTreeMap<String, String>) {
        let f = self.shim.filter(&args(&p, nodes)).await;
        assert_eq!(f.error, "", "{f:?}");
        let feasible = f.node_names.clone().unwrap_or_default();
        let node = match feasible.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            _ => {
                let list: Vec<&str> = feasible.iter().map(String::as_str).collect();
                let scores = self.shim.prioritize(&args(&p, &list)).await.unwrap();
                scores.into_iter().max_by_key(|h| h.score).map(|h| h.host)
            }
        };
        let Some(node) = node else {
            let mut why: Vec<String> = f
                .failed_nodes
                .iter()
                .chain(f.failed_and_unresolvable_nodes.iter())
                .map(|(n, m)| format!("{n}: {m}"))
                .collect();
            why.sort();
            return (Fate::Pending(why.join("; ")), BTreeMap::new());
        };
        let uid = p.metadata.uid.clone().unwrap();
        let snap = self.shim.view.snapshot(std::slice::from_ref(&node), &uid);
        let r = self
            .shim
            .service
            .allocate_prepared(
                v1::AllocateRequest {
                    workload: Some(translate::workload(&p, &names())),
                    restrict_to_node_names: vec![node.clone()],
                    ..Default::default()
                },
                &snap.prepared,
            )
            .await
            .unwrap();
        assert!(r.placed, "{r:?}");
        let ann = translate::bind_annotations(&r, &node, 0, &names());
        let fate = match r.containers[0].cards[0].mig.as_ref() {
            Some(m) => Fate::Mig(
                H100.iter().find(|row| row.0 == m.profile).unwrap().0,
                m.start,
            ),
            None => Fate::Core,
        };
        self.pods
            .apply_watcher_event(&Event::Apply(bound(p, &node, &ann)));
        (fate, ann)
    }

    fn delete(&mut self, p: &Pod) {
        self.pods.apply_watcher_event(&Event::Delete(p.clone()));
    }

    fn add(&mut self, p: Pod) {
        self.pods.apply_watcher_event(&Event::Apply(p));
    }

    /// The MIG card's instances as the service is sent them: `(profile, start, in use by)`.
    fn instances(&self, node: &str) -> Vec<(String, u32, String)> {
        let snap = self.shim.view.snapshot(&[node.to_owned()], "");
        let n = snap
            .nodes
            .first()
            .unwrap_or_else(|| panic!("{:?}", snap.unusable));
        assert_eq!(
            n.cards[0].usage, None,
            "a MIG card's usage is its instances'"
        );
        n.cards[0]
            .mig
            .as_ref()
            .unwrap()
            .instances
            .iter()
            .map(|i| (i.profile.clone(), i.start, i.in_use_by.clone()))
            .collect()
    }
}

/// Contract 11.7.1: an idle H100 with HAMi's default allowlist filled one pod at a time, then
/// a pod that fits no free placement, then freed by a delete; the same whether the layout comes
/// from the agent's annotation or is derived from HAMi's `migProfiles` alone.
#[tokio::test]
async fn pods_fill_an_h100_the_way_hamis_rule_says() {
    for source in [Source::Agent, Source::HamiOnly] {
        let mut c = cluster(vec![mig_node("m1", source, &[])]).await;
        let steps: [(&str, u32, Fate); 4] = [
            ("a", 30000, Fate::Mig("3g.40gb", 4)),
            ("b", 5000, Fate::Mig("1g.10gb", 3)),
            ("c", 5000, Fate::Mig("1g.10gb", 2)),
            ("d", 15000, Fate::Mig("2g.20gb", 0)),
        ];
        let mut first = BTreeMap::new();
        for (name, mem, want) in steps {
            let (got, ann) = c.schedule(pod(name, true, gpumem(mem)), &["m1"]).await;
            assert_eq!(got, want, "pod {name}");
            if name == "a" {
                first = ann;
            }
        }
        // What the bind writes for a: HAMi's device plugin reads this.
        assert_eq!(
            first[gpusched_hami::MIG_ALLOCATIONS],
            r#"[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"m1-gpu0","profile":"3g.40gb","placement":{"start":4,"size":4}}]"#
        );
        assert_eq!(
            first[gpusched_hami::DEVICES_ALLOCATED],
            "m1-gpu0,NVIDIA,40448,46:;",
            "the device books the profile's memory and cores, as HAMi's"
        );
        assert_eq!(
            c.instances("m1"),
            vec![
                ("2g.20gb".into(), 0, "ns/d".into()),
                ("1g.10gb".into(), 2, "ns/c".into()),
                ("1g.10gb".into(), 3, "ns/b".into()),
                ("3g.40gb".into(), 4, "ns/a".into()),
            ]
        );
        let (e, _) = c.schedule(pod("e", true, gpumem(15000)), &["m1"]).await;
        let Fate::Pending(why) = e else {
            panic!("e placed: {e:?}")
        };
        assert!(
            why.contains("MigNoFreePlacement") && why.contains("CardTypeMismatch"),
            "{why}"
        );
        // Deleting a frees slices 4-7: e gets 2g.20gb at 4.
        c.delete(&pod("a", true, gpumem(30000)));
        let (e, _) = c.schedule(pod("e", true, gpumem(15000)), &["m1"]).await;
        assert_eq!(e, Fate::Mig("2g.20gb", 4));
        // A pod without vgpu-mode gets the hami-core card of the same node.
        let (core, ann) = c.schedule(pod("core", false, gpumem(8000)), &["m1"]).await;
        assert_eq!(core, Fate::Core);
        assert!(!ann.contains_key(gpusched_hami::MIG_ALLOCATIONS));
        assert!(ann[gpusched_hami::DEVICES_ALLOCATED].starts_with("m1-gpu1,"));
    }
}

/// Sizes 1g, 2g, 3g and 7g by memory and by percentage, and the opt-in: MIG pods go only to
/// MIG cards, other pods only to hami-core cards, in a cluster with both kinds of nodes.
#[tokio::test]
async fn mixed_nodes_and_the_four_sizes() {
    let mut c = cluster(vec![mig_node("m1", Source::Agent, &[]), plain_node("p1")]).await;
    let pct =
        |p: u32| json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": p.to_string()});
    let (g7, _) = c
        .schedule(
            pod("whole", true, json!({"nvidia.com/gpu": "1"})),
            &["m1", "p1"],
        )
        .await;
    assert_eq!(
        g7,
        Fate::Mig("7g.80gb", 0),
        "no memory asked: the whole card"
    );
    c.delete(&pod("whole", true, json!({})));
    for (name, limits, want) in [
        ("half", pct(50), Fate::Mig("3g.40gb", 4)),
        ("g2", gpumem(15000), Fate::Mig("2g.20gb", 0)),
        ("g1", pct(10), Fate::Mig("1g.10gb", 3)),
        ("core", gpumem(8000), Fate::Core),
    ] {
        let mig = name != "core";
        let (got, ann) = c.schedule(pod(name, mig, limits), &["m1", "p1"]).await;
        assert_eq!(got, want, "{name}");
        let card = ann[gpusched_hami::DEVICES_ALLOCATED]
            .split(',')
            .next()
            .unwrap()
            .to_owned();
        if mig {
            assert_eq!(card, "m1-gpu0", "{name}: the MIG card");
        } else {
            assert!(
                card == "m1-gpu1" || card == "p1-gpu0",
                "{name}: a hami-core card, not {card}"
            );
            assert!(!ann.contains_key(gpusched_hami::MIG_ALLOCATIONS));
        }
    }
    // p1 has no MIG card: a MIG pod that fits nowhere names both reasons.
    let (big, _) = c
        .schedule(pod("big", true, gpumem(70000)), &["m1", "p1"])
        .await;
    let Fate::Pending(why) = big else {
        panic!("{big:?}")
    };
    assert!(
        why.contains("m1: ") && why.contains("MigNoFreePlacement"),
        "{why}"
    );
    assert!(
        why.contains("p1: ") && why.contains("CardTypeMismatch"),
        "{why}"
    );
}

/// Instances the agent saw: a free one is reused by a pod of its profile (before any placement
/// the scan would pick) and blocks the placements it overlaps for the others.
#[tokio::test]
async fn free_instances_from_the_agent_are_reused_and_block_overlaps() {
    let mut c = cluster(vec![mig_node("m1", Source::Agent, &[("1g.10gb", 0, 1)])]).await;
    let (a, ann) = c.schedule(pod("a", true, gpumem(5000)), &["m1"]).await;
    assert_eq!(
        a,
        Fate::Mig("1g.10gb", 0),
        "the free instance, not the scan's 6"
    );
    assert!(ann[gpusched_hami::MIG_ALLOCATIONS].contains(r#""placement":{"start":0,"size":1}"#));
    assert_eq!(
        c.instances("m1"),
        vec![("1g.10gb".into(), 0, "ns/a".into())]
    );
    // Freed again (a deleted): a 2g pod cannot start at 0 over the node's free instance.
    c.delete(&pod("a", true, json!({})));
    let (b, _) = c.schedule(pod("b", true, gpumem(15000)), &["m1"]).await;
    assert_eq!(b, Fate::Mig("2g.20gb", 2));
}

/// A reservation made at prioritize holds its MIG instance for the next pods' filter.
#[tokio::test]
async fn reservations_hold_mig_instances() {
    let mut c = cluster(vec![mig_node("m1", Source::Agent, &[])]).await;
    let shim = Arc::get_mut(&mut c.shim).unwrap();
    shim.reserve = true;
    let whole = pod("whole", true, json!({"nvidia.com/gpu": "1"}));
    c.shim.prioritize(&args(&whole, &["m1"])).await.unwrap();
    assert_eq!(
        c.instances("m1"),
        vec![("7g.80gb".into(), 0, "ns/whole".into())]
    );
    let f = c
        .shim
        .filter(&args(&pod("next", true, gpumem(5000)), &["m1"]))
        .await;
    assert!(
        f.node_names.clone().unwrap_or_default().is_empty(),
        "{:?}",
        f.failed_nodes
    );
    assert!(f.failed_nodes["m1"].contains("MigNoFreePlacement"), "{f:?}");
}

/// Bad MIG data fails the node with a named reason (never a panic), and only that node.
#[tokio::test]
async fn bad_mig_data_fails_the_node_named() {
    let good = mig_node("good", Source::Agent, &[]);
    let with = |name: &str, key: &str, value: String| {
        let mut n = mig_node(name, Source::Agent, &[]);
        n.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(key.into(), value);
        n
    };
    let card = |node: &str| format!("{node}-gpu0");
    let overlapping = layout(&H100, &[("3g.40gb", 4, 4), ("1g.10gb", 5, 1)]);
    let mut bigger = layout(&H100, &[]);
    bigger.profiles[6].mem_mib = 90000;
    let mut outside = layout(&H100, &[]);
    outside.profiles[0].placements.push(7);
    outside.profiles[0].placements.push(8);
    let mut unknown = layout(&H100, &[]);
    unknown.instances.push(v1::MigInstance {
        profile: "5g.50gb".into(),
        start: 0,
        size: 1,
        in_use_by: String::new(),
    });
    let layouts = |node: &str, l: v1::MigLayout| {
        gpusched_hami::encode_node_mig_layouts(&BTreeMap::from([(card(node), l)]))
    };
    let nodes = vec![
        good,
        with("unreadable", gpusched_hami::NODE_MIG_LAYOUTS, "{".into()),
        with(
            "foreign",
            gpusched_hami::NODE_MIG_LAYOUTS,
            gpusched_hami::encode_node_mig_layouts(&BTreeMap::from([(
                "GPU-elsewhere".to_owned(),
                layout(&H100, &[]),
            )])),
        ),
        with(
            "overlap",
            gpusched_hami::NODE_MIG_LAYOUTS,
            layouts("overlap", overlapping),
        ),
        with(
            "bigger",
            gpusched_hami::NODE_MIG_LAYOUTS,
            layouts("bigger", bigger),
        ),
        with(
            "outside",
            gpusched_hami::NODE_MIG_LAYOUTS,
            layouts("outside", outside),
        ),
        with(
            "unknown",
            gpusched_hami::NODE_MIG_LAYOUTS,
            layouts("unknown", unknown),
        ),
        mig_node("held", Source::Agent, &[]),
        mig_node("garbled", Source::Agent, &[]),
        mig_node("strayed", Source::Agent, &[]),
    ];
    let mut c = cluster(nodes).await;
    // Pods bound with contradicting decisions: two overlapping reservations on "held", an
    // unreadable reservation on "garbled", a MIG card booked without a reservation on "strayed".
    let reservation = |node: &str, profile: &str, start: u32, size: u32| {
        BTreeMap::from([
            (
                gpusched_hami::DEVICES_ALLOCATED.to_owned(),
                format!("{},NVIDIA,9984,13:;", card(node)),
            ),
            (gpusched_hami::VGPU_NODE.to_owned(), node.to_owned()),
            (
                gpusched_hami::MIG_ALLOCATIONS.to_owned(),
                format!(
                    r#"[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{}","profile":"{profile}","placement":{{"start":{start},"size":{size}}}}}]"#,
                    card(node)
                ),
            ),
        ])
    };
    c.add(bound(
        pod("x", true, gpumem(1)),
        "held",
        &reservation("held", "3g.40gb", 4, 4),
    ));
    c.add(bound(
        pod("y", true, gpumem(1)),
        "held",
        &reservation("held", "1g.10gb", 6, 1),
    ));
    let mut garbled = reservation("garbled", "1g.10gb", 6, 1);
    garbled.insert(gpusched_hami::MIG_ALLOCATIONS.to_owned(), "[{".into());
    c.add(bound(pod("z", true, gpumem(1)), "garbled", &garbled));
    let mut strayed = reservation("strayed", "1g.10gb", 6, 1);
    strayed.remove(gpusched_hami::MIG_ALLOCATIONS);
    c.add(bound(pod("w", true, gpumem(1)), "strayed", &strayed));

    let all = [
        "good",
        "unreadable",
        "foreign",
        "overlap",
        "bigger",
        "outside",
        "unknown",
        "held",
        "garbled",
        "strayed",
    ];
    let f = c
        .shim
        .filter(&args(&pod("p", true, gpumem(5000)), &all))
        .await;
    assert_eq!(f.node_names, Some(vec!["good".to_owned()]), "{f:?}");
    let why = |n: &str| {
        f.failed_and_unresolvable_nodes
            .get(n)
            .cloned()
            .unwrap_or_default()
    };
    for (node, needles) in [
        (
            "unreadable",
            vec!["unreadable MIG layouts", "gpusched.io/node-mig-layouts"],
        ),
        (
            "foreign",
            vec!["InvalidNode: gpusched.io/node-mig-layouts[GPU-elsewhere] UNKNOWN_REFERENCE"],
        ),
        (
            "overlap",
            vec!["InvalidNode", "cards[0].mig.instances", "DUPLICATE_ID"],
        ),
        (
            "bigger",
            vec!["InvalidNode", "cards[0].mig.profiles", "OUT_OF_RANGE"],
        ),
        (
            "outside",
            vec!["InvalidNode", "cards[0].mig.profiles", "OUT_OF_RANGE"],
        ),
        (
            "unknown",
            vec!["InvalidNode", "cards[0].mig.instances", "UNKNOWN_REFERENCE"],
        ),
        (
            "held",
            vec![
                "InvalidNode: pod ns/",
                "hami.io/vgpu-mig-allocations reserves",
                "overlapping",
            ],
        ),
        (
            "garbled",
            vec![
                "InvalidNode: pod ns/z: hami.io/vgpu-mig-allocations",
                "invalid JSON",
            ],
        ),
        (
            "strayed",
            vec!["InvalidNode: pod ns/w: books MIG card \"strayed-gpu0\""],
        ),
    ] {
        let w = why(node);
        for n in needles {
            assert!(w.contains(n), "{node}: {n:?} not in {w:?}");
        }
    }
}
