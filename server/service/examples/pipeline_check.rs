//! The service's synchronous pipeline on fixed inputs, for checks across refactorings
//! (`scripts/pipeline-check.sh` runs both modes):
//!
//! - `pipeline_check allocate N`: N times one 1,000-node Allocate (8 cards per node, fixed
//!   seed): protobuf decode, the service's decision exactly as the handler makes it, protobuf
//!   encode. Run under `valgrind --tool=callgrind` with two values of N: the difference of the
//!   instruction counts over the difference of N is the cost of one decision.
//! - `pipeline_check answers`: one line per fixed request (Filter, Score, Allocate,
//!   AllocateBatch; whole nodes, nodes by reference, node sets kept and changed, invalid nodes,
//!   bad input): its name and the SHA-256 of the encoded answer (or of the error's code,
//!   message and details). Equal output before and after a change: byte-identical decisions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::hint::black_box;

use gpusched_api::v1;
use prost::Message;
use sha2::Digest as _;

// --- the only lines that name the service's API ------------------------------------------------
use gpusched_service::ServiceError;
use gpusched_service::pipeline::{self, Cancel, Record, State};

fn state() -> State {
    let settings = gpusched_service::default_settings().expect("default settings");
    State::new(
        settings,
        std::sync::Arc::new(gpusched_service::Metrics::new()),
    )
}

fn allocate(st: &State, r: v1::AllocateRequest) -> Result<v1::AllocateResponse, ServiceError> {
    pipeline::allocate(st, r, &mut Record::default(), &Cancel::never())
}

fn filter(st: &State, r: v1::FilterRequest) -> Result<v1::FilterResponse, ServiceError> {
    pipeline::filter(st, r, &mut Record::default(), &Cancel::never())
}

fn score(st: &State, r: v1::ScoreRequest) -> Result<v1::ScoreResponse, ServiceError> {
    pipeline::score(st, r, &mut Record::default(), &Cancel::never())
}

fn batch(
    st: &State,
    r: v1::AllocateBatchRequest,
) -> Result<v1::AllocateBatchResponse, ServiceError> {
    pipeline::allocate_batch(st, r, &mut Record::default(), &Cancel::never())
}
// -------------------------------------------------------------------------------------------------

// As in the gpusched-server binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `n` nodes of 8 cards with pseudo-random usage (xorshift, seed 42): the rpc_path bench's.
fn nodes(n: usize) -> Vec<v1::Node> {
    let mut x: u64 = 42;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|n| v1::Node {
            name: format!("node-{n:05}"),
            cards: (0..8u32)
                .map(|i| v1::Card {
                    mig: None,
                    id: format!("GPU-{n:05}-{i}-0000-0000-000000000000"),
                    index: i,
                    r#type: if n % 3 == 0 {
                        "NVIDIA-H100-80GB-HBM3".into()
                    } else {
                        "NVIDIA-A100-SXM4-80GB".into()
                    },
                    slots: 10,
                    total_mem_mib: 81920,
                    total_cores: 100,
                    numa: i / 4,
                    health: if next() % 50 == 0 {
                        v1::CardHealth::Unhealthy
                    } else {
                        v1::CardHealth::Healthy
                    } as i32,
                    mode: v1::CardMode::HamiCore as i32,
                    usage: Some(v1::CardUsage {
                        used_slots: (next() % 6) as u32,
                        used_mem_mib: next() % 60000,
                        used_cores: (next() % 80) as u32,
                    }),
                })
                .collect(),
            ..v1::Node::default()
        })
        .collect()
}

fn kube(name: &str, limits: &[(&str, &str)], annotations: &[(&str, &str)]) -> v1::Workload {
    let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    v1::Workload {
        quota: None,
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
            annotations: map(annotations),
            init_containers: vec![],
            containers: vec![v1::KubernetesContainer {
                name: "main".into(),
                limits: map(limits),
                requests: BTreeMap::new(),
            }],
        })),
    }
}

/// The workload of the callgrind measurement: one card, 8 GiB.
fn one_gpu() -> v1::Workload {
    kube(
        "bench",
        &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "8192")],
        &[],
    )
}

fn workloads() -> Vec<(&'static str, v1::Workload)> {
    vec![
        ("one-gpu", one_gpu()),
        (
            "two-gpu-spread",
            kube(
                "two",
                &[("nvidia.com/gpu", "2"), ("nvidia.com/gpumem", "30000")],
                &[("hami.io/gpu-scheduler-policy", "spread")],
            ),
        ),
        (
            "four-gpu-topology",
            kube(
                "four",
                &[("nvidia.com/gpu", "4"), ("nvidia.com/gpucores", "30")],
                &[("hami.io/gpu-scheduler-policy", "topology-aware")],
            ),
        ),
        (
            "h100-only-numa",
            kube(
                "h100",
                &[("nvidia.com/gpu", "2"), ("nvidia.com/gpumem", "20000")],
                &[
                    ("nvidia.com/use-gputype", "H100"),
                    ("nvidia.com/numa-bind", "true"),
                    ("hami.io/node-scheduler-policy", "spread"),
                ],
            ),
        ),
        (
            "unschedulable",
            kube(
                "huge",
                &[("nvidia.com/gpu", "8"), ("nvidia.com/gpumem", "80000")],
                &[],
            ),
        ),
        ("no-gpu", kube("cpu", &[("cpu", "1")], &[])),
        ("bad-input", kube("bad", &[("nvidia.com/gpu", "many")], &[])),
    ]
}

fn options(shown: v1::FailedNodes, explain: bool) -> Option<v1::PlacementOptions> {
    Some(v1::PlacementOptions {
        failed_nodes: shown as i32,
        explain,
        ..Default::default()
    })
}

/// Invalid nodes beside valid ones: repeated card ids, more cards than the limit.
fn with_invalid(mut nodes: Vec<v1::Node>) -> Vec<v1::Node> {
    let mut dup = nodes[0].clone();
    dup.name = "bad-duplicate-ids".into();
    dup.cards[1].id = dup.cards[0].id.clone();
    let mut many = nodes[1].clone();
    many.name = "bad-too-many-cards".into();
    many.cards = (0..70u32)
        .map(|i| v1::Card {
            id: format!("GPU-many-{i}"),
            index: i,
            ..many.cards[0].clone()
        })
        .collect();
    nodes.push(dup);
    nodes.push(many);
    nodes
}

fn sha(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn line<T: Message>(name: &str, r: Result<T, ServiceError>) {
    match r {
        Ok(m) => println!("{name} ok {}", sha(&m.encode_to_vec())),
        Err(e) => {
            use tonic_types::StatusExt as _;
            let status = tonic::Status::from(e);
            let d = status.get_error_details();
            // ErrorInfo's metadata is a map: its encoding order varies from run to run, so
            // the details are compared field by field, the map sorted.
            let info = d.error_info().map(|i| {
                let metadata: BTreeMap<&String, &String> = i.metadata.iter().collect();
                format!("{} {} {metadata:?}", i.reason, i.domain)
            });
            let canonical = format!(
                "{:?}\n{}\n{:?}\n{:?}\n{:?}\n{:?}\n{info:?}",
                status.code(),
                status.message(),
                d.bad_request(),
                d.quota_failure(),
                d.precondition_failure(),
                d.retry_info(),
            );
            println!("{name} {:?} {}", status.code(), sha(canonical.as_bytes()));
        }
    }
}

fn digest(bytes: &[u8]) -> v1::Digest {
    v1::Digest {
        hash: sha2::Sha256::digest(bytes).to_vec(),
        size_bytes: bytes.len() as u64,
        function: v1::DigestFunction::Sha256 as i32,
    }
}

/// The set digest of references with inline or digest inventories and no usage (see
/// `NodeSetRef` in types.proto).
fn set_digest(inventories: &[Vec<u8>]) -> v1::Digest {
    let mut h = sha2::Sha256::new();
    for b in inventories {
        h.update(sha2::Sha256::digest(b));
        h.update([0u8; 32]);
    }
    v1::Digest {
        hash: h.finalize().to_vec(),
        size_bytes: 64 * inventories.len() as u64,
        function: v1::DigestFunction::Sha256 as i32,
    }
}

fn answers() {
    let st = state();
    let cluster = nodes(300);
    for (wname, w) in workloads() {
        for (oname, o) in [
            ("default", None),
            ("all-explain", options(v1::FailedNodes::All, true)),
            (
                "when-unplaced",
                options(v1::FailedNodes::WhenUnplaced, false),
            ),
            ("none", options(v1::FailedNodes::None, false)),
        ] {
            for (nname, ns) in [
                ("whole", cluster.clone()),
                ("invalid", with_invalid(cluster.clone())),
            ] {
                let tag = format!("{wname}/{oname}/{nname}");
                line(
                    &format!("allocate/{tag}"),
                    allocate(
                        &st,
                        v1::AllocateRequest {
                            nodes: ns.clone(),
                            workload: Some(w.clone()),
                            options: o.clone(),
                            ..Default::default()
                        },
                    ),
                );
                line(
                    &format!("filter/{tag}"),
                    filter(
                        &st,
                        v1::FilterRequest {
                            nodes: ns.clone(),
                            workload: Some(w.clone()),
                            options: o.clone(),
                            ..Default::default()
                        },
                    ),
                );
                line(
                    &format!("score/{tag}"),
                    score(
                        &st,
                        v1::ScoreRequest {
                            nodes: ns.clone(),
                            workload: Some(w.clone()),
                            options: o.clone(),
                            ..Default::default()
                        },
                    ),
                );
            }
        }
    }
    // Restricted to some names (one unknown: an error).
    for (name, names) in [
        (
            "restrict",
            vec!["node-00003".to_owned(), "node-00007".to_owned()],
        ),
        (
            "restrict-unknown",
            vec!["node-00003".to_owned(), "nope".to_owned()],
        ),
    ] {
        line(
            &format!("allocate/{name}"),
            allocate(
                &st,
                v1::AllocateRequest {
                    nodes: with_invalid(cluster.clone()),
                    workload: Some(one_gpu()),
                    restrict_to_node_names: names,
                    ..Default::default()
                },
            ),
        );
    }
    // Batches: independent and all-or-nothing, with updated nodes.
    for (name, all, updated) in [
        ("batch-independent", false, false),
        ("batch-all-or-nothing", true, true),
    ] {
        line(
            name,
            batch(
                &st,
                v1::AllocateBatchRequest {
                    nodes: with_invalid(cluster[..40].to_vec()),
                    workloads: workloads()
                        .into_iter()
                        .filter(|(n, _)| *n != "bad-input")
                        .map(|(_, w)| w)
                        .collect(),
                    all_or_nothing: all,
                    return_updated_nodes: updated,
                    ..Default::default()
                },
            ),
        );
    }
    // Nodes by reference: inline first (cached), then by digest; a miss.
    let inventories: Vec<Vec<u8>> = cluster[..100].iter().map(|n| n.encode_to_vec()).collect();
    let inline: Vec<v1::NodeRef> = inventories
        .iter()
        .map(|b| v1::NodeRef {
            inventory: b.clone(),
            ..Default::default()
        })
        .collect();
    let by_digest: Vec<v1::NodeRef> = inventories
        .iter()
        .map(|b| v1::NodeRef {
            inventory_digest: Some(digest(b)),
            ..Default::default()
        })
        .collect();
    let refs_req = |refs: Vec<v1::NodeRef>, node_set: Option<v1::NodeSetRef>| v1::AllocateRequest {
        node_refs: refs,
        node_set,
        workload: Some(one_gpu()),
        ..Default::default()
    };
    line("refs/inline", allocate(&st, refs_req(inline.clone(), None)));
    line(
        "refs/digest",
        allocate(&st, refs_req(by_digest.clone(), None)),
    );
    let mut missing = by_digest.clone();
    missing[5].inventory_digest = Some(digest(b"not sent"));
    line("refs/missing", allocate(&st, refs_req(missing, None)));
    // Node sets: kept, then changed (replacements: a spare lease; a removal: built afresh),
    // and an unknown base.
    let keep = v1::NodeSetRef {
        keep: true,
        ..Default::default()
    };
    line("sets/keep", allocate(&st, refs_req(by_digest, Some(keep))));
    let base = set_digest(&inventories);
    let changed: Vec<v1::NodeRef> = [3usize, 50]
        .iter()
        .map(|&i| {
            let mut n = cluster[i].clone();
            for c in &mut n.cards {
                c.usage = None;
            }
            v1::NodeRef {
                inventory: n.encode_to_vec(),
                ..Default::default()
            }
        })
        .collect();
    let change = |removed: Vec<String>| v1::NodeSetRef {
        base: Some(base.clone()),
        removed_node_names: removed,
        keep: false,
    };
    for round in 0..2 {
        line(
            &format!("sets/replace-{round}"),
            allocate(&st, refs_req(changed.clone(), Some(change(vec![])))),
        );
    }
    line(
        "sets/remove",
        allocate(
            &st,
            refs_req(changed.clone(), Some(change(vec!["node-00010".into()]))),
        ),
    );
    line(
        "sets/unknown-base",
        allocate(
            &st,
            refs_req(
                changed,
                Some(v1::NodeSetRef {
                    base: Some(digest(b"no such set")),
                    ..Default::default()
                }),
            ),
        ),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("allocate") => {
            let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
            let st = state();
            let bytes = v1::AllocateRequest {
                nodes: nodes(1000),
                workload: Some(one_gpu()),
                ..Default::default()
            }
            .encode_to_vec();
            let mut placed = 0;
            for _ in 0..n {
                let req = v1::AllocateRequest::decode(black_box(bytes.as_slice())).unwrap();
                let resp = allocate(&st, req).unwrap();
                placed += usize::from(resp.result.as_ref().is_some_and(|r| r.placed));
                black_box(resp.encode_to_vec());
            }
            eprintln!("{n} x 1,000-node Allocate, {placed} placed");
        }
        Some("answers") => answers(),
        _ => {
            eprintln!("usage: pipeline_check allocate N | answers");
            std::process::exit(2);
        }
    }
}
